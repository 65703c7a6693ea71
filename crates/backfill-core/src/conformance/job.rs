//! The job engine through a store: backfills, retries, failures and
//! cancellation must leave the store in the state the contract promises.

use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{Duration, NaiveDate};

use super::helpers::*;
use crate::error::Error;
use crate::record::Record;
use crate::{FixedClock, Job, MemoryStore, Transient};
use crate::{Mode, Store};

/// Backfilling the same range twice: the second run inserts nothing, writes
/// nothing and leaves the row count unchanged.
pub async fn same_range_twice(store: &dyn Store) {
    let fetch = seeded_fetch("twice/", 25, 0);
    let job = Job::new();
    let first = job
        .backfill(store, &fetch, day(40)..=day(46))
        .await
        .unwrap();
    assert_eq!(first.totals().inserted, 7 * 25);
    let after_first = rows(store).await;
    let second = job
        .backfill(store, &fetch, day(40)..=day(46))
        .await
        .unwrap();
    assert_eq!(second.totals().written(), 0);
    assert_eq!(second.totals().unchanged, 7 * 25);
    assert_eq!(second.days.len(), 7);
    assert_eq!(rows(store).await, after_first);
}

/// Syncing day by day then backfilling the week with a later fetch ends
/// exactly where backfilling that week alone ends, in merge and in replace
/// mode.
///
/// The upstream is consistent: each daily sync runs at 01:00:30 of its day,
/// after the first versions (01:00) and before the corrections (01:01);
/// the weekly re-fetch runs after the week, when some keys are corrected
/// and, upstream having deleted them, the last keys of each day are gone.
pub async fn daily_then_weekly_equals_weekly_alone(store: &dyn Store) {
    for (mode, prefix) in [(Mode::Merge, "weekly-m/"), (Mode::Replace, "weekly-r/")] {
        let job_at =
            |now: chrono::DateTime<chrono::Utc>| Job::new().mode(mode).clock(FixedClock(now));
        let offset = if mode == Mode::Merge { 50 } else { 60 };
        let week = day(offset)..=day(offset + 6);
        let daily = seeded_fetch(prefix, 10, 0);
        let weekly = move |d: NaiveDate| {
            let records = (0..8)
                .map(|i| {
                    let version = if i % 3 == 0 { 60 } else { 0 };
                    let when =
                        d.and_hms_opt(1, 0, 0).unwrap().and_utc() + Duration::seconds(version);
                    rec(
                        &format!("{prefix}{d}:{i}"),
                        d,
                        &format!("{{\"i\":{i},\"v\":{version}}}"),
                        when,
                    )
                })
                .collect::<Vec<_>>();
            std::future::ready(Ok::<_, std::io::Error>(records))
        };
        let daily_run = |d: NaiveDate| job_at(d.and_hms_opt(1, 0, 30).unwrap().and_utc());
        let weekly_job = job_at(day(offset + 8).and_hms_opt(0, 0, 0).unwrap().and_utc());
        for d in week.clone().start().iter_days().take(7) {
            daily_run(d).sync_day(store, &daily, d).await.unwrap();
        }
        weekly_job
            .backfill(store, &weekly, week.clone())
            .await
            .unwrap();

        let alone = MemoryStore::new();
        weekly_job.backfill(&alone, &weekly, week).await.unwrap();
        let expected = if mode == Mode::Replace {
            rows(&alone).await
        } else {
            // Merge keeps keys the weekly fetch no longer returns.
            let reference = MemoryStore::new();
            for d in day(offset).iter_days().take(7) {
                daily_run(d).sync_day(&reference, &daily, d).await.unwrap();
            }
            weekly_job
                .backfill(&reference, &weekly, day(offset)..=day(offset + 6))
                .await
                .unwrap();
            let merged = rows(&reference).await;
            // Every key the weekly fetch returned holds the weekly version.
            for row in rows(&alone).await {
                assert!(merged.contains(&row));
            }
            merged
        };
        assert_eq!(rows_under(store, prefix).await, expected, "{mode:?}");
    }
}

/// A day whose fetch fails is reported with its error; every other day of
/// the backfill is still written.
pub async fn failed_fetch_fails_only_its_day(store: &dyn Store) {
    let fetch = |d: NaiveDate| {
        let result = if d == day(121) {
            Err(std::io::Error::other("upstream returned 503"))
        } else {
            Ok(vec![rec(&format!("fetch-fail/{d}"), d, "v", at(1))])
        };
        std::future::ready(result)
    };
    match Job::new()
        .backfill(store, &fetch, day(120)..=day(122))
        .await
    {
        Err(Error::Backfill(failure)) => {
            assert_eq!(failure.failed.len(), 1);
            let (failed_day, error) = &failure.failed[0];
            assert_eq!(*failed_day, day(121));
            assert!(
                matches!(error, Error::Fetch { day: d, .. } if *d == day(121)),
                "{error:?}"
            );
            let ok: Vec<_> = failure.report.days.iter().map(|r| r.day).collect();
            assert_eq!(ok, [day(120), day(122)]);
        }
        other => panic!("expected Backfill error, got {other:?}"),
    }
    let keys: Vec<_> = rows_under(store, "fetch-fail/")
        .await
        .into_iter()
        .map(|r| r.key().to_owned())
        .collect();
    assert_eq!(
        keys,
        [
            format!("fetch-fail/{}", day(120)),
            format!("fetch-fail/{}", day(122))
        ]
    );
}

/// A fetch that fails transiently twice succeeds on the third attempt, and
/// the report says 3 attempts.
pub async fn transient_failure_is_retried(store: &dyn Store) {
    let calls = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let result = if n < 2 {
            Err(Transient::new(format!("503 on try {}", n + 1)))
        } else {
            Ok(day_records("retry/", d, 5))
        };
        std::future::ready(result)
    };
    let report = quick_job().sync_day(store, &fetch, day(300)).await.unwrap();
    assert_eq!((report.attempts, report.counts.inserted), (3, 5));
    // A fetch error not marked transient is not retried.
    let plain =
        |_: NaiveDate| std::future::ready(Err::<Vec<Record>, _>(std::io::Error::other("bug")));
    let calls_before = calls.load(Ordering::SeqCst);
    match quick_job().sync_day(store, &plain, day(301)).await {
        Err(Error::Fetch { .. }) => {}
        other => panic!("expected Fetch, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), calls_before);
    // Retries give up after the policy's attempts.
    let always = AtomicUsize::new(0);
    let flaky = |_: NaiveDate| {
        always.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Err::<Vec<Record>, _>(Transient::new("503")))
    };
    let result = quick_job().sync_day(store, &flaky, day(302)).await;
    assert!(matches!(result, Err(Error::Fetch { .. })), "{result:?}");
    assert_eq!(always.load(Ordering::SeqCst), 3);
}

/// A day that keeps failing is listed in the error, with its cause, while
/// every other day of a concurrent backfill is written.
pub async fn permanent_failure_is_listed_and_the_rest_written(store: &dyn Store) {
    let fetch = |d: NaiveDate| {
        let result = if d == day(312) || d == day(315) {
            Err(std::io::Error::other("schema changed upstream"))
        } else {
            Ok(day_records("permanent/", d, 3))
        };
        std::future::ready(result)
    };
    let job = quick_job().concurrency(4);
    match job.backfill(store, &fetch, day(310)..=day(317)).await {
        Err(Error::Backfill(e)) => {
            let failed: Vec<_> = e.failed.iter().map(|(d, _)| *d).collect();
            assert_eq!(failed, [day(312), day(315)]);
            assert!(e
                .failed
                .iter()
                .all(|(_, err)| matches!(err, Error::Fetch { .. })));
            assert_eq!(e.report.days.len(), 6);
            let days: Vec<_> = e.report.days.iter().map(|r| r.day).collect();
            let mut sorted = days.clone();
            sorted.sort();
            assert_eq!(days, sorted, "reports come in day order");
        }
        other => panic!("expected Backfill error, got {other:?}"),
    }
    for d in 310..=317 {
        let expected = if d == 312 || d == 315 { 0 } else { 3 };
        assert_eq!(
            store.day_rows(day(d)).await.unwrap().len(),
            expected,
            "day {d}"
        );
    }
}

/// Dropping a running backfill starts no new day, and leaves every day
/// either complete or absent.
pub async fn cancelled_backfill_leaves_whole_days(store: &dyn Store) {
    let started = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        started.fetch_add(1, Ordering::SeqCst);
        // Two hung days fill both slots of the concurrency-2 run.
        let hang = d == day(333) || d == day(334);
        async move {
            if hang {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            Ok::<_, std::io::Error>(day_records("cancel/", d, 50))
        }
    };
    let job = quick_job().concurrency(2);
    let run = job.backfill(store, &fetch, day(330)..=day(349));
    let mut run = Box::pin(run);
    // Until both hung days have started (however slow the store's days
    // before them are), and a moment more; then the run is dropped.
    let hung = async {
        while started.load(Ordering::SeqCst) < 5 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    tokio::select! {
        _ = &mut run => panic!("the backfill should still be waiting on the hung days"),
        waited = tokio::time::timeout(std::time::Duration::from_secs(60), hung) => {
            assert!(waited.is_ok(), "the hung days never started");
        }
    }
    drop(run);
    let launched = started.load(Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        launched,
        "no day may start after the drop"
    );
    assert_eq!(
        launched, 5,
        "only the days up to the two hung ones may have started"
    );
    for d in 330..=349 {
        let n = store.day_rows(day(d)).await.unwrap().len();
        assert!(
            n == 0 || n == 50,
            "day {d} holds {n} rows: partially written"
        );
    }
    assert_eq!(store.day_rows(day(333)).await.unwrap().len(), 0);
    assert_eq!(store.day_rows(day(332)).await.unwrap().len(), 50);
}

/// A fetch that panics fails its own day with `Panicked`; the store and the
/// other days are unaffected.
pub async fn panicking_fetch_fails_only_its_day(store: &dyn Store) {
    let fetch = |d: NaiveDate| {
        assert!(d != day(341), "upstream client bug on {d}");
        std::future::ready(Ok::<_, std::io::Error>(day_records("panic/", d, 4)))
    };
    let fetch = move |d: NaiveDate| async move { fetch(d).await };
    match quick_job()
        .concurrency(2)
        .backfill(store, &fetch, day(340)..=day(342))
        .await
    {
        Err(Error::Backfill(e)) => {
            assert_eq!(e.failed.len(), 1);
            assert!(matches!(&e.failed[0], (d, Error::Panicked { message, .. })
                if *d == day(341) && message.contains("upstream client bug")));
        }
        other => panic!("expected Backfill error, got {other:?}"),
    }
    assert_eq!(rows_under(store, "panic/").await.len(), 8);
    let c = apply(store, day(341), day_records("panic/", day(341), 4)).await;
    assert_eq!(c.inserted, 4, "the store still works after the panic");
}
