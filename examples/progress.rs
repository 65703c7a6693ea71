//! A 60-day backfill with a live progress bar: 8 days at a time, a flaky
//! upstream that fails now and then (retried), and the run report at the end.
//!
//! ```text
//! cargo run --example progress
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use backfill::sqlite::SqliteStore;
use backfill::{BoxError, Event, Job, Record, Retry, Transient};
use chrono::NaiveDate;
use indicatif::{ProgressBar, ProgressStyle};

static CALLS: AtomicU32 = AtomicU32::new(0);

/// A slow upstream (40 ms a day) that answers 503 to one call in seven.
///
/// Only the 503 is marked [`Transient`]: it may pass if tried again.
async fn fetch(day: NaiveDate) -> Result<Vec<Record>, BoxError> {
    tokio::time::sleep(Duration::from_millis(40)).await;
    if CALLS.fetch_add(1, Ordering::Relaxed) % 7 == 3 {
        let status = format!("503 Service Unavailable for {day}");
        return Err(Transient::new(status).into());
    }
    let rows = (0..500).map(|i| (format!("event:{day}:{i}"), format!(r#"{{"i":{i}}}"#)));
    to_records(day, rows)
}

/// The upstream's rows as records. A row that breaks a record rule is a bug
/// (here or upstream), not bad luck: `?` reports it as it is, so the day
/// fails at once with the typed record error instead of being retried.
fn to_records(
    day: NaiveDate,
    rows: impl Iterator<Item = (String, String)>,
) -> Result<Vec<Record>, BoxError> {
    let at = day.and_hms_opt(18, 0, 0).unwrap().and_utc();
    let records = rows
        .map(|(key, value)| Record::new(key, day, value, at))
        .collect::<Result<_, _>>()?;
    Ok(records)
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
            Event::RunStarted { days, .. } => observer_bar.set_length(days.len() as u64),
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

#[cfg(test)]
mod tests {
    use super::*;
    use backfill::{Error, Field};

    /// A record that breaks a rule fails its day on the first attempt, as
    /// the typed record error: retrying a bug only delays the report.
    #[tokio::test]
    async fn a_bad_record_is_not_retried() {
        let attempts = AtomicU32::new(0);
        let fetch = |day: NaiveDate| {
            attempts.fetch_add(1, Ordering::SeqCst);
            let rows = [
                ("ok".to_owned(), "{}".to_owned()),
                (String::new(), "{}".to_owned()),
            ];
            std::future::ready(to_records(day, rows.into_iter()))
        };
        let store = SqliteStore::open_in_memory().await.unwrap();
        let job = Job::new().retry(Retry::default().backoff(Duration::ZERO, Duration::ZERO));
        let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        match job.sync_day(&store, &fetch, day).await {
            Err(Error::InvalidRecord {
                field: Field::Key, ..
            }) => {}
            other => panic!("expected InvalidRecord, got {other:?}"),
        }
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }
}
