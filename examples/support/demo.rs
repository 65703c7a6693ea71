//! The job both examples run: backfill five days, re-run the same backfill,
//! then the daily sync (yesterday and today).

use backfill::{Job, Record, Store};
use chrono::{Duration, NaiveDate};

/// Stands in for an upstream API: the orders of one day. The same day always
/// returns the same records, as a well-behaved API does.
pub(crate) async fn fetch_orders(day: NaiveDate) -> Result<Vec<Record>, backfill::Error> {
    (0..4)
        .map(|i| {
            let updated_at = day.and_hms_opt(9, 0, 0).unwrap().and_utc() + Duration::minutes(i);
            let value = format!(r#"{{"order":{i},"total_cents":{}}}"#, 1000 + 250 * i);
            Record::new(format!("order:{day}:{i}"), day, value, updated_at)
        })
        .collect()
}

pub(crate) async fn run(store: &dyn Store) -> Result<(), Box<dyn std::error::Error>> {
    let job = Job::new(); // UTC, merge mode, strict event dates
    let today = job.today();
    let days = today - Duration::days(5)..=today - Duration::days(1);

    println!("1) backfill {} ..= {}", days.start(), days.end());
    let first = job.backfill(store, &fetch_orders, days.clone()).await?;
    println!("{first}\n");
    let rows_after_first = store.rows().await?.len();

    println!("2) the same backfill again");
    let rerun = job.backfill(store, &fetch_orders, days).await?;
    println!("{rerun}\n");
    let rows_after_rerun = store.rows().await?.len();

    // The daily job re-syncs yesterday too: whatever arrived for it after
    // yesterday's run is picked up, and what did not change is not written.
    println!("3) the daily sync: yesterday and today ({today})");
    let daily = job.sync_with_lookback(store, &fetch_orders, 1).await?;
    println!("{daily}\n");

    println!(
        "the re-run wrote {} rows; rows after the first run: {rows_after_first}, \
         after the re-run: {rows_after_rerun}, after today's sync: {}",
        rerun.totals().written(),
        store.rows().await?.len()
    );
    assert_eq!(rerun.totals().written(), 0, "a re-run must write nothing");
    assert_eq!(
        rows_after_first, rows_after_rerun,
        "a re-run must not add rows"
    );
    Ok(())
}
