//! Which days are done: a backfill of two weeks in which one day's upstream
//! fails, the ledger's status table, then a run of only the missing or
//! failed days, and the status again.
//!
//! ```text
//! cargo run --example status
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

use backfill_core::{BoxError, Job, Record, Retry, Select, Transient};
use backfill_sqlite::SqliteStore;
use chrono::NaiveDate;

/// The upstream is down for 6 January until `RECOVERED` is set.
static RECOVERED: AtomicBool = AtomicBool::new(false);

async fn fetch(day: NaiveDate) -> Result<Vec<Record>, BoxError> {
    if day.to_string() == "2026-01-06" && !RECOVERED.load(Ordering::SeqCst) {
        return Err(Transient::new("upstream returned 503").into());
    }
    let at = day.and_hms_opt(7, 0, 0).unwrap().and_utc();
    let count = if day.to_string() == "2026-01-04" {
        0
    } else {
        3
    };
    let records = (0..count)
        .map(|i| Record::new(format!("invoice:{day}:{i}"), day, "{}", at))
        .collect::<Result<_, _>>()?;
    Ok(records)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = SqliteStore::open_in_memory().await?;
    let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
    let job = Job::new().retry(Retry::default().max_attempts(2).backoff(
        std::time::Duration::from_millis(10),
        std::time::Duration::from_millis(10),
    ));

    // The first week; 6 January fails.
    let first = job.backfill(&store, &fetch, jan(1)..=jan(7)).await;
    println!(
        "first run: {}\n",
        first.err().map_or("ok".into(), |e| e.to_string())
    );
    println!("{}\n", job.status(&store, jan(1)..=jan(14)).await?);

    // Later: only what is missing or failed, over the whole range.
    RECOVERED.store(true, Ordering::SeqCst);
    let rest = job.clone().select(Select::MissingOrFailed);
    let report = rest.backfill(&store, &fetch, jan(1)..=jan(14)).await?;
    println!("{report}\n");
    println!("{}", job.status(&store, jan(1)..=jan(14)).await?);
    Ok(())
}
