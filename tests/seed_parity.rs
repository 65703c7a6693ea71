//! The seed scenarios, against every store: the same range twice, daily
//! syncs then a weekly backfill, and stale re-deliveries. Every store must
//! end with the same rows as the in-memory reference.

use backfill::conformance::fixtures::jan;
use backfill::sqlite::SqliteStore;
use backfill::{FixedClock, Job, MemoryStore, Mode, Record, Store};
use chrono::{Duration, NaiveDate};

/// `per_day` records per day; `revision` moves `updated_at` and the value,
/// as a later fetch after an upstream correction would.
fn fetcher(
    per_day: u32,
    revision: i64,
) -> impl Fn(NaiveDate) -> std::future::Ready<Result<Vec<Record>, backfill::Error>> + Send + Sync {
    move |day| {
        let records = (0..per_day)
            .map(|i| {
                let at = day.and_hms_opt(12, 0, 0).unwrap().and_utc() + Duration::minutes(revision);
                Record::new(
                    format!("order:{day}:{i}"),
                    day,
                    format!(r#"{{"rev":{revision}}}"#),
                    at,
                )
            })
            .collect();
        std::future::ready(records)
    }
}

async fn stores() -> Vec<Box<dyn Store>> {
    vec![
        Box::new(MemoryStore::new()),
        Box::new(SqliteStore::open_in_memory().await.unwrap()),
    ]
}

#[tokio::test]
async fn same_range_twice_keeps_the_row_count() {
    for store in stores().await {
        let job = Job::new();
        let fetch = fetcher(50, 0);
        let first = job
            .backfill(&store, &fetch, jan(1)..=jan(14))
            .await
            .unwrap();
        assert_eq!(first.totals().inserted, 14 * 50, "{store:?}");
        let count = store.rows().await.unwrap().len();
        let second = job
            .backfill(&store, &fetch, jan(1)..=jan(14))
            .await
            .unwrap();
        assert_eq!(second.totals().written(), 0, "{store:?}");
        assert_eq!(store.rows().await.unwrap().len(), count, "{store:?}");
    }
}

#[tokio::test]
async fn daily_then_weekly_converges_with_weekly_alone_in_every_store() {
    let mut results = Vec::new();
    for mode in [Mode::Merge, Mode::Replace] {
        // One consistent upstream: each daily sync runs at 12:10 of its day,
        // after the first versions (12:00) and before the revisions (12:30);
        // the weekly re-fetch runs after the week.
        let daily = |d: u32| {
            let now = jan(d).and_hms_opt(12, 10, 0).unwrap().and_utc();
            Job::new().mode(mode).clock(FixedClock(now))
        };
        let weekly = Job::new()
            .mode(mode)
            .clock(FixedClock(jan(9).and_hms_opt(0, 0, 0).unwrap().and_utc()));
        for store in stores().await {
            for d in 1..=7 {
                daily(d)
                    .sync_day(&store, &fetcher(20, 0), jan(d))
                    .await
                    .unwrap();
            }
            // The weekly re-fetch: every record revised, and upstream
            // dropped the last five of each day.
            weekly
                .backfill(&store, &fetcher(15, 30), jan(1)..=jan(7))
                .await
                .unwrap();
            let alone = MemoryStore::new();
            if mode == Mode::Merge {
                for d in 1..=7 {
                    daily(d)
                        .sync_day(&alone, &fetcher(20, 0), jan(d))
                        .await
                        .unwrap();
                }
            }
            weekly
                .backfill(&alone, &fetcher(15, 30), jan(1)..=jan(7))
                .await
                .unwrap();
            let rows = store.rows().await.unwrap();
            assert_eq!(rows, alone.rows().await.unwrap(), "{mode:?} {store:?}");
            let expected_len = if mode == Mode::Merge { 7 * 20 } else { 7 * 15 };
            assert_eq!(rows.len(), expected_len, "{mode:?} {store:?}");
            results.push(rows);
        }
    }
    // Both stores agree byte for byte in each mode.
    assert_eq!(results[0], results[1]);
    assert_eq!(results[2], results[3]);
}

#[tokio::test]
async fn stale_redelivery_never_overwrites_in_any_store() {
    for store in stores().await {
        let job = Job::new();
        job.backfill(&store, &fetcher(10, 60), jan(1)..=jan(3))
            .await
            .unwrap();
        let newest = store.rows().await.unwrap();
        // A lagging replica re-delivers last hour's versions.
        let report = job
            .backfill(&store, &fetcher(10, 0), jan(1)..=jan(3))
            .await
            .unwrap();
        assert_eq!(report.totals().stale, 30, "{store:?}");
        assert_eq!(report.totals().written(), 0, "{store:?}");
        assert_eq!(store.rows().await.unwrap(), newest, "{store:?}");
    }
}
