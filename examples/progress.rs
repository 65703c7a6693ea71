//! A 60-day backfill with a live progress bar: 8 days at a time, a flaky
//! upstream that fails now and then (retried), and the run report at the end.
//!
//! ```text
//! cargo run --example progress
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use backfill::sqlite::SqliteStore;
use backfill::{Event, Job, Record, Retry, Transient};
use chrono::NaiveDate;
use indicatif::{ProgressBar, ProgressStyle};

static CALLS: AtomicU32 = AtomicU32::new(0);

/// A slow upstream (40 ms a day) that answers 503 to one call in seven.
async fn fetch(day: NaiveDate) -> Result<Vec<Record>, Transient> {
    tokio::time::sleep(Duration::from_millis(40)).await;
    if CALLS.fetch_add(1, Ordering::Relaxed) % 7 == 3 {
        return Err(Transient::new(format!("503 Service Unavailable for {day}")));
    }
    let at = day.and_hms_opt(18, 0, 0).unwrap().and_utc();
    (0..500)
        .map(|i| {
            Record::new(
                format!("event:{day}:{i}"),
                day,
                format!(r#"{{"i":{i}}}"#),
                at,
            )
        })
        .collect::<Result<_, _>>()
        .map_err(Transient::new)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = SqliteStore::open_in_memory().await?;
    let start = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    let end = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();

    let bar = ProgressBar::new(0);
    bar.set_style(ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} days  {msg}",
    )?);
    let observer_bar = bar.clone();
    let job = Job::new()
        .concurrency(8)
        .retry(Retry::default().backoff(Duration::from_millis(50), Duration::from_secs(1)))
        .observer(move |event| match event {
            Event::RunStarted { days } => observer_bar.set_length(days.len() as u64),
            Event::DayRetrying { day, attempt, .. } => {
                observer_bar.set_message(format!("retrying {day} (attempt {attempt} failed)"))
            }
            Event::DayFinished { report } => {
                observer_bar.inc(1);
                observer_bar.set_message(format!("{} synced", report.day));
            }
            Event::DayFailed { day, .. } => {
                observer_bar.inc(1);
                observer_bar.println(format!("{day} failed"));
            }
            _ => {}
        });

    let report = job.backfill(&store, &fetch, start..=end).await;
    bar.finish_and_clear();
    let report = report?;
    println!("{report}");
    Ok(())
}
