//! Which server errors a job retries: a busy lock is one of them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backfill_core::conformance::fixtures::{at, day, rec};
use backfill_core::{Error, Event, Job, Record, Retry, Store};
use backfill_postgres::tokio_postgres::error::SqlState;
use backfill_postgres::tokio_postgres::Config;
use backfill_postgres::PostgresStore;
use backfill_testkit as testkit;
use chrono::NaiveDate;

async fn fetch(d: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
    Ok(vec![rec("locked", d, "ours", at(12 * 3600))])
}

/// Another session holds the lock of the row the job writes, longer than
/// the store's `lock_timeout`: the first attempt fails with SQLSTATE 55P03,
/// the job retries, and once the lock is released the day is written.
#[tokio::test]
async fn a_lock_timeout_is_retried_by_the_job() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let mut config: Config = url.parse().unwrap();
    config.options("-c lock_timeout=200");
    let store = PostgresStore::builder()
        .schema(testkit::unique_schema())
        .connect_with(config)
        .await
        .unwrap();
    let other = crate::admin(&url).await;
    other.batch_execute("BEGIN").await.unwrap();
    let theirs = at(0);
    other
        .execute(
            &format!(
                "INSERT INTO \"{}\".\"{}\" (key, event_date, value, updated_at) \
                 VALUES ('locked', $1, 'theirs', $2)",
                store.schema(),
                store.table()
            ),
            &[&day(0), &theirs],
        )
        .await
        .unwrap();

    let release = Arc::new(tokio::sync::Notify::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let job = {
        let (release, seen) = (Arc::clone(&release), Arc::clone(&seen));
        Job::new()
            .retry(
                Retry::default()
                    .max_attempts(5)
                    .backoff(Duration::from_millis(50), Duration::from_millis(200)),
            )
            .observer(move |event| {
                if let Event::DayRetrying { error, .. } = event {
                    let code = match error {
                        Error::Backend { source, .. } => source
                            .downcast_ref::<backfill_postgres::tokio_postgres::Error>()
                            .and_then(|e| e.code().cloned()),
                        _ => None,
                    };
                    seen.lock().unwrap().push((error.is_retryable(), code));
                    release.notify_one();
                }
            })
    };
    let holder = tokio::spawn(async move {
        release.notified().await;
        other.batch_execute("COMMIT").await.unwrap();
    });
    let report = job
        .backfill(&store, &fetch, day(0)..=day(0))
        .await
        .expect("a busy lock must be retried, not fail the day");
    holder.await.unwrap();
    assert_eq!(report.days.len(), 1);
    assert_eq!(
        *seen.lock().unwrap(),
        [(true, Some(SqlState::LOCK_NOT_AVAILABLE))],
        "one retry, after a lock timeout"
    );
    assert_eq!(store.get("locked").await.unwrap().unwrap().value(), "ours");
}
