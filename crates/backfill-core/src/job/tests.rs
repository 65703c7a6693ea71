//! The engine's own tests, on `MemoryStore`: what a job does without any
//! store-specific behaviour (plans, dry runs, timeouts, retries, events,
//! reports). What a job must leave in a store is in the conformance suite.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;

use super::*;
use crate::{
    BoxError, CheckAction, Checks, Counts, DayState, Fatal, Fetched, MemoryStore, Mode, Record,
    ReplaceGuard, Store, Transient,
};

fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
}

fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).unwrap()
}

fn today_in(zone: Tz, now: DateTime<Utc>) -> NaiveDate {
    Job::new().clock(FixedClock(now)).time_zone(zone).today()
}

#[test]
fn today_follows_the_zone_across_dst_changes() {
    let ny = chrono_tz::America::New_York;
    // Spring forward, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
    assert_eq!(today_in(ny, utc(2026, 3, 8, 4, 59)), date(2026, 3, 7)); // 23:59 EST
    assert_eq!(today_in(ny, utc(2026, 3, 8, 5, 0)), date(2026, 3, 8)); // 00:00 EST
    assert_eq!(today_in(ny, utc(2026, 3, 9, 3, 59)), date(2026, 3, 8)); // 23:59 EDT
    assert_eq!(today_in(ny, utc(2026, 3, 9, 4, 0)), date(2026, 3, 9)); // 00:00 EDT
                                                                       // Fall back, 2026-11-01: the day is 25 hours long.
    assert_eq!(today_in(ny, utc(2026, 11, 1, 4, 0)), date(2026, 11, 1)); // 00:00 EDT
    assert_eq!(today_in(ny, utc(2026, 11, 2, 4, 59)), date(2026, 11, 1)); // 23:59 EST
    assert_eq!(today_in(ny, utc(2026, 11, 2, 5, 0)), date(2026, 11, 2));
}

#[test]
fn today_far_from_utc() {
    let kiritimati = chrono_tz::Pacific::Kiritimati; // UTC+14
    let pago_pago = chrono_tz::Pacific::Pago_Pago; // UTC-11
    let now = utc(2026, 6, 30, 12, 0);
    assert_eq!(today_in(kiritimati, now), date(2026, 7, 1));
    assert_eq!(today_in(pago_pago, now), date(2026, 6, 30));
    assert_eq!(
        today_in(pago_pago, utc(2026, 7, 1, 10, 59)),
        date(2026, 6, 30)
    );
    assert_eq!(Job::new().clock(FixedClock(now)).today(), date(2026, 6, 30));
}

fn fetch_ok(day: NaiveDate) -> std::future::Ready<Result<Vec<Record>, Transient>> {
    let at = day.and_hms_opt(1, 0, 0).unwrap().and_utc();
    std::future::ready(Ok(vec![
        Record::new(format!("k:{day}"), day, "v", at).unwrap()
    ]))
}

#[tokio::test]
async fn observer_sees_every_event_in_order_for_a_day() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let calls = AtomicU32::new(0);
    let fetch = |day: NaiveDate| {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            std::future::ready(Err(Transient::new("503")))
        } else {
            fetch_ok(day)
        }
    };
    let job = Job::new()
        .retry(Retry::default().backoff(Duration::ZERO, Duration::ZERO))
        .observer(move |event| {
            let line = match event {
                Event::RunStarted { days, .. } => format!("run {}", days.len()),
                Event::DayStarted { day, attempt } => format!("start {day} #{attempt}"),
                Event::DayRetrying { day, attempt, .. } => format!("retry {day} #{attempt}"),
                Event::DayFinished { report } => {
                    format!("done {} {}", report.day, report.counts.inserted)
                }
                Event::DayFailed { day, .. } => format!("failed {day}"),
                Event::RunFinished { report } => format!("end {}", report.days.len()),
            };
            sink.lock().unwrap().push(line);
        });
    let store = MemoryStore::new();
    job.backfill(&store, &fetch, date(2026, 1, 1)..=date(2026, 1, 2))
        .await
        .unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "run 2",
            "start 2026-01-01 #1",
            "retry 2026-01-01 #1",
            "start 2026-01-01 #2",
            "done 2026-01-01 1",
            "start 2026-01-02 #1",
            "done 2026-01-02 1",
            "end 2",
        ]
    );
}

#[tokio::test]
async fn fail_fast_stops_starting_days() {
    let fetch = |day: NaiveDate| {
        if day == date(2026, 1, 2) {
            std::future::ready(Err(Transient::new("down")))
        } else {
            fetch_ok(day)
        }
    };
    let store = MemoryStore::new();
    let job = Job::new().retry(Retry::none()).fail_fast(true);
    let Err(Error::Backfill(e)) = job
        .backfill(&store, &fetch, date(2026, 1, 1)..=date(2026, 1, 5))
        .await
    else {
        panic!("expected a failed backfill");
    };
    assert_eq!(e.report.days.len(), 1);
    assert_eq!(
        e.report.skipped,
        [date(2026, 1, 3), date(2026, 1, 4), date(2026, 1, 5)]
    );
    assert_eq!(e.failed.len(), 1);
    let text = e.to_string();
    assert!(
        text.contains("1 of 5 days") && text.contains("2026-01-02"),
        "{text}"
    );
}

#[tokio::test]
async fn report_renders_as_a_table_and_json() {
    let store = MemoryStore::new();
    let report = Job::new()
        .backfill(&store, &fetch_ok, date(2026, 1, 1)..=date(2026, 1, 3))
        .await
        .unwrap();
    let table = report.to_string();
    let lines: Vec<_> = table.lines().collect();
    assert!(
        lines[0].starts_with("day") && lines[0].contains("unchanged"),
        "{table}"
    );
    assert!(lines[1].starts_with("2026-01-01"), "{table}");
    assert!(lines[4].starts_with("total"), "{table}");
    assert!(
        table.ends_with("3 of 3 days synced, rows written: 3"),
        "{table}"
    );
    let dry = Job::new().dry_run(true);
    let plan = dry.backfill(&store, &fetch_ok, date(2026, 1, 1)..=date(2026, 1, 2));
    assert_eq!(
        plan.await.unwrap().to_string(),
        "dry run: would sync 2 days: 2026-01-01 2026-01-02"
    );
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["days"][0]["day"], "2026-01-01");
        assert_eq!(json["days"][0]["counts"]["inserted"], 1);
        assert_eq!(json["days"][0]["attempts"], 1);
        assert!(json["days"][0]["elapsed_ms"].is_f64());
        assert_eq!(json["planned"].as_array().unwrap().len(), 3);
    }
}

#[tokio::test]
async fn lookback_resyncs_today_and_the_days_before() {
    let job = Job::new().clock(FixedClock(utc(2026, 4, 10, 15, 0)));
    let store = MemoryStore::new();
    let report = job.sync_with_lookback(&store, &fetch_ok, 3).await.unwrap();
    let days: Vec<_> = report.days.iter().map(|d| d.day).collect();
    assert_eq!(
        days,
        [
            date(2026, 4, 7),
            date(2026, 4, 8),
            date(2026, 4, 9),
            date(2026, 4, 10)
        ]
    );
    let again = job.sync_with_lookback(&store, &fetch_ok, 3).await.unwrap();
    assert_eq!(again.totals().written(), 0);
}

/// A day's records, `n` of them.
fn records_of(d: NaiveDate, n: usize) -> Vec<Record> {
    let at = d.and_hms_opt(2, 0, 0).unwrap().and_utc();
    (0..n)
        .map(|i| Record::new(format!("k:{d}:{i}"), d, "v", at).unwrap())
        .collect()
}

/// A backfill whose start is after its end fails with `InvalidRange`
/// before fetching anything.
#[tokio::test]
async fn inverted_range_is_an_error() {
    let calls = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<_, std::io::Error>(records_of(d, 1)))
    };
    let store = MemoryStore::new();
    match Job::new()
        .backfill(&store, &fetch, date(2026, 1, 5)..=date(2026, 1, 4))
        .await
    {
        Err(Error::InvalidRange { start, end }) => {
            assert_eq!((start, end), (date(2026, 1, 5), date(2026, 1, 4)))
        }
        other => panic!("expected InvalidRange, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(store.rows().await.unwrap().is_empty());
}

/// A dry run returns the plan without fetching or writing, from every
/// entry point.
#[tokio::test]
async fn dry_run_fetches_and_writes_nothing() {
    let calls = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<_, std::io::Error>(records_of(d, 2)))
    };
    let store = MemoryStore::new();
    let job = Job::new()
        .clock(FixedClock(utc(2026, 1, 24, 12, 0)))
        .dry_run(true)
        .concurrency(4);
    let report = job
        .backfill(&store, &fetch, date(2026, 1, 20)..=date(2026, 1, 24))
        .await
        .unwrap();
    assert!(report.dry_run);
    assert_eq!(
        report.planned,
        (20..=24).map(|d| date(2026, 1, d)).collect::<Vec<_>>()
    );
    assert!(report.days.is_empty());
    let recent = job.sync_with_lookback(&store, &fetch, 1).await.unwrap();
    assert!(recent.dry_run);
    assert_eq!(recent.planned, [date(2026, 1, 23), date(2026, 1, 24)]);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(store.rows().await.unwrap().is_empty());
}

/// `dry_run(true)` holds for a single day too: `sync_day` and `sync_today`
/// fetch nothing and write nothing, and say so in their report.
#[tokio::test]
async fn dry_run_holds_for_a_single_day() {
    let calls = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<_, std::io::Error>(records_of(d, 2)))
    };
    let store = MemoryStore::new();
    let job = Job::new()
        .clock(FixedClock(utc(2026, 2, 3, 12, 0)))
        .dry_run(true);
    let report = job
        .sync_day(&store, &fetch, date(2026, 2, 1))
        .await
        .unwrap();
    assert!(report.dry_run);
    assert_eq!((report.day, report.attempts), (date(2026, 2, 1), 0));
    assert_eq!(report.counts, Counts::default());
    let today = job.sync_today(&store, &fetch).await.unwrap();
    assert!(today.dry_run);
    assert_eq!(today.day, date(2026, 2, 3));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "a dry run fetched");
    assert!(store.rows().await.unwrap().is_empty(), "a dry run wrote");
    // The same job without dry run does both.
    let job = job.dry_run(false);
    let real = job
        .sync_day(&store, &fetch, date(2026, 2, 1))
        .await
        .unwrap();
    assert!(!real.dry_run);
    assert_eq!((real.attempts, real.counts.inserted), (1, 2));
}

/// A fetch that never returns fails its day with `Timeout` under the job's
/// per-day timeout, and is retried like any transient failure.
#[tokio::test]
async fn hung_fetch_times_out_and_is_retried() {
    let calls = AtomicUsize::new(0);
    let fetch = |_: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<Result<Vec<Record>, std::io::Error>>()
    };
    let store = MemoryStore::new();
    let job = Job::new()
        .retry(
            Retry::default()
                .max_attempts(2)
                .backoff(Duration::ZERO, Duration::ZERO),
        )
        .day_timeout(Duration::from_millis(50));
    match job.sync_day(&store, &fetch, date(2026, 3, 1)).await {
        Err(Error::Timeout { day, .. }) => assert_eq!(day, date(2026, 3, 1)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a timeout is retried");
    assert!(store.rows().await.unwrap().is_empty());
}

/// The user's own error type whose cause is a `Transient`.
#[derive(Debug)]
struct ClientError(Transient);

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("orders API client failed")
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// A `Transient` is found anywhere in a fetch error's chain of causes:
/// inside the user's own error type and under `anyhow` contexts, so the
/// day is retried; an error with no `Transient` in its chain is not.
#[tokio::test]
async fn transient_is_found_anywhere_in_the_chain() {
    async fn attempts_until_success<E, G>(make_error: G) -> u32
    where
        E: Into<BoxError> + Send + 'static,
        G: Fn() -> E + Send + Sync,
    {
        let calls = AtomicU32::new(0);
        let fetch = |d: NaiveDate| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            let result = if n == 0 {
                Err(make_error())
            } else {
                Ok(records_of(d, 1))
            };
            std::future::ready(result)
        };
        let job = Job::new().retry(Retry::default().backoff(Duration::ZERO, Duration::ZERO));
        let store = MemoryStore::new();
        match job.sync_day(&store, &fetch, date(2026, 4, 1)).await {
            Ok(report) => report.attempts,
            Err(_) => calls.load(Ordering::SeqCst),
        }
    }
    assert_eq!(attempts_until_success(|| Transient::new("503")).await, 2);
    assert_eq!(
        attempts_until_success(|| ClientError(Transient::new("503"))).await,
        2,
        "a Transient inside the user's own error type"
    );
    assert_eq!(
        attempts_until_success(|| {
            anyhow::Error::new(Transient::new("503")).context("fetching orders")
        })
        .await,
        2,
        "a Transient under an anyhow context"
    );
    assert_eq!(
        attempts_until_success(|| {
            anyhow::Error::new(ClientError(Transient::new("503")))
                .context("page 3")
                .context("fetching orders")
        })
        .await,
        2,
        "a Transient two contexts and one wrapper deep"
    );
    assert_eq!(
        attempts_until_success(|| anyhow::anyhow!("schema changed").context("fetching orders"))
            .await,
        1,
        "an error with no Transient in its chain is not retried"
    );
}

/// In replace mode a day's fetch is a listing true as of the moment the
/// fetch started, by the job's clock, unless the fetch says when its
/// snapshot was taken.
#[tokio::test]
async fn a_listing_is_true_as_of_the_fetch_start_or_its_own_instant() {
    let start = utc(2026, 5, 2, 8, 0);
    let store = MemoryStore::new();
    let job = Job::new().clock(FixedClock(start)).mode(Mode::Replace);
    let d = date(2026, 5, 1);
    job.sync_day(
        &store,
        &|d| std::future::ready(Ok::<_, Transient>(records_of(d, 1))),
        d,
    )
    .await
    .unwrap();
    assert_eq!(store.listing_watermark(d), Some(start));
    let taken = utc(2026, 5, 3, 0, 0);
    let snapshot = |d| {
        std::future::ready(Ok::<_, Transient>(
            Fetched::new(records_of(d, 1)).as_of(taken),
        ))
    };
    job.sync_day(&store, &snapshot, d).await.unwrap();
    assert_eq!(store.listing_watermark(d), Some(taken));
}

/// A replace the guard refuses fails its day at once (retrying would be
/// refused again) and writes nothing; the job may allow it explicitly.
#[tokio::test]
async fn a_refused_replace_fails_its_day_without_retries() {
    let store = MemoryStore::new();
    let d = date(2026, 6, 1);
    crate::upsert(&store, d, records_of(d, 3), Default::default())
        .await
        .unwrap();
    let calls = AtomicUsize::new(0);
    let empty = |_: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<_, Transient>(Vec::<Record>::new()))
    };
    let job = Job::new()
        .mode(Mode::Replace)
        .retry(Retry::default().backoff(Duration::ZERO, Duration::ZERO));
    match job.sync_day(&store, &empty, d).await {
        Err(Error::ReplaceRefused {
            would_delete: 3,
            live: 3,
            ..
        }) => {}
        other => panic!("expected ReplaceRefused, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "not retried");
    assert_eq!(store.day_rows(d).await.unwrap().len(), 3);
    let allowed = job.replace_guard(ReplaceGuard::default().allow_empty(true));
    let report = allowed.sync_day(&store, &empty, d).await.unwrap();
    assert_eq!((report.counts.deleted, report.counts.unlisted), (3, 3));
    assert!(store.day_rows(d).await.unwrap().is_empty());
}

/// Days 1-2 of July synced on the 20th, 3-4 synced on the 25th, 5 failed
/// after a success, 6 failed without one, 7-10 never run.
async fn ledger_fixture() -> MemoryStore {
    let d = |n| date(2026, 7, n);
    let store = MemoryStore::new();
    let ok = |day: NaiveDate| std::future::ready(Ok::<_, Transient>(records_of(day, 2)));
    let at = |now| Job::new().clock(FixedClock(now));
    at(utc(2026, 7, 20, 0, 0))
        .backfill(&store, &ok, d(1)..=d(2))
        .await
        .unwrap();
    at(utc(2026, 7, 25, 0, 0))
        .backfill(&store, &ok, d(3)..=d(5))
        .await
        .unwrap();
    let broken =
        |_: NaiveDate| std::future::ready(Err::<Vec<Record>, _>(std::io::Error::other("down")));
    let failing = at(utc(2026, 7, 25, 0, 0)).retry(Retry::none());
    assert!(failing
        .backfill(&store, &broken, d(5)..=d(6))
        .await
        .is_err());
    store
}

/// Each selector runs exactly the days it names, at concurrency 1 and 8,
/// over a range with missing, failed and synced days; the report lists the
/// others with their state, and a dry run shows the same selection.
#[tokio::test]
async fn selectors_run_exactly_their_days() {
    let d = |n| date(2026, 7, n);
    let cases = [
        (Select::All, (1..=10).collect::<Vec<u32>>()),
        (Select::Missing, vec![7, 8, 9, 10]),
        (Select::Failed, vec![5, 6]),
        (Select::MissingOrFailed, vec![5, 6, 7, 8, 9, 10]),
        (
            Select::NotSyncedSince(utc(2026, 7, 22, 0, 0)),
            vec![1, 2, 5, 6, 7, 8, 9, 10],
        ),
    ];
    for concurrency in [1, 8] {
        for (select, expected) in &cases {
            let store = ledger_fixture().await;
            let expected: Vec<NaiveDate> = expected.iter().copied().map(d).collect();
            let ran = Arc::new(Mutex::new(Vec::new()));
            let seen = Arc::clone(&ran);
            let fetch = move |day: NaiveDate| {
                seen.lock().unwrap().push(day);
                std::future::ready(Ok::<_, Transient>(records_of(day, 2)))
            };
            let job = Job::new()
                .clock(FixedClock(utc(2026, 7, 30, 0, 0)))
                .select(*select)
                .concurrency(concurrency);
            let plan = job
                .clone()
                .dry_run(true)
                .backfill(&store, &fetch, d(1)..=d(10))
                .await
                .unwrap();
            assert_eq!(plan.planned, expected, "dry run of {select:?}");
            assert!(ran.lock().unwrap().is_empty(), "a dry run fetched");
            let report = job.backfill(&store, &fetch, d(1)..=d(10)).await.unwrap();
            let mut fetched = ran.lock().unwrap().clone();
            fetched.sort();
            assert_eq!(fetched, expected, "{select:?} at concurrency {concurrency}");
            assert_eq!(report.planned, expected);
            let left: Vec<_> = report
                .not_selected
                .iter()
                .map(|n| (n.day, n.state))
                .collect();
            let expected_left: Vec<_> = (1..=10)
                .map(d)
                .filter(|x| !expected.contains(x))
                .map(|x| {
                    let state = match x.day() {
                        1..=4 => DayState::Synced,
                        5 | 6 => DayState::Failed,
                        _ => DayState::Missing,
                    };
                    (x, state)
                })
                .collect();
            assert_eq!(left, expected_left, "{select:?}");
            // Selection never changes what a day's sync does: every
            // selected day is now synced.
            let status = job.status(&store, d(1)..=d(10)).await.unwrap();
            for day in &expected {
                assert_eq!(
                    status.days[(day.day() - 1) as usize].state,
                    DayState::Synced
                );
            }
        }
    }
}

/// `status` shows every day of a range: synced with details, failed with
/// attempts and the error, and a run of missing days on one line.
#[tokio::test]
async fn status_renders_a_readable_table() {
    let store = ledger_fixture().await;
    let status = Job::new()
        .status(&store, date(2026, 7, 1)..=date(2026, 7, 10))
        .await
        .unwrap();
    assert_eq!(
        (
            status.count(DayState::Synced),
            status.count(DayState::Failed),
            status.count(DayState::Missing)
        ),
        (4, 2, 4)
    );
    let table = status.to_string();
    let lines: Vec<_> = table.lines().collect();
    assert!(lines[0].starts_with("day"), "{table}");
    assert!(
        lines[1].starts_with("2026-07-01  synced   2026-07-20 00:00:00  merge"),
        "{table}"
    );
    assert!(
        lines[5].contains("failed")
            && lines[5].contains("after 1 attempt: fetching 2026-07-05 failed: down"),
        "{table}"
    );
    assert!(
        lines[7].starts_with("2026-07-07 … 2026-07-10  missing (4 days)"),
        "{table}"
    );
    assert!(
        table.ends_with("10 days: 4 synced, 2 failed, 4 missing"),
        "{table}"
    );
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["days"][0]["state"], "synced");
        assert_eq!(json["days"][9]["state"], "missing");
    }
}

/// N shards of a range run every day exactly once between them, each only
/// its own, with selection applied within the shard; a shard with no day in
/// a short range plans nothing and fetches nothing.
#[tokio::test]
async fn shards_run_each_day_exactly_once() {
    let d = |n| date(2026, 7, n);
    for count in [1u32, 2, 3, 7, 12] {
        let store = MemoryStore::new();
        let ran = Arc::new(Mutex::new(Vec::new()));
        for index in 0..count {
            let seen = Arc::clone(&ran);
            let fetch = move |day: NaiveDate| {
                seen.lock().unwrap().push((index, day));
                std::future::ready(Ok::<_, Transient>(records_of(day, 2)))
            };
            let shard = Shard::new(index, count).unwrap();
            let job = Job::new().shard(shard).concurrency(3);
            let report = job.backfill(&store, &fetch, d(1)..=d(10)).await.unwrap();
            assert!(report.planned.iter().all(|day| shard.contains(*day)));
        }
        let mut days: Vec<NaiveDate> = ran.lock().unwrap().iter().map(|(_, day)| *day).collect();
        days.sort();
        assert_eq!(days, (1..=10).map(d).collect::<Vec<_>>(), "{count} shards");
        assert_eq!(store.rows().await.unwrap().len(), 20);
    }
    // Within a shard, selection still applies.
    let store = ledger_fixture().await;
    let shard = Shard::new(1, 2).unwrap();
    let job = Job::new().shard(shard).select(Select::MissingOrFailed);
    let plan = job
        .dry_run(true)
        .backfill(&store, &fetch_ok, d(1)..=d(10))
        .await
        .unwrap();
    let expected: Vec<_> = [5, 6, 7, 8, 9, 10]
        .into_iter()
        .map(d)
        .filter(|day| shard.contains(*day))
        .collect();
    assert_eq!(plan.planned, expected);
    // A one-day range: one shard of two has nothing to do.
    let empty = [Shard::new(0, 2).unwrap(), Shard::new(1, 2).unwrap()]
        .into_iter()
        .find(|s| !s.contains(d(3)))
        .unwrap();
    let report = Job::new()
        .shard(empty)
        .backfill(&MemoryStore::new(), &fetch_ok, d(3)..=d(3))
        .await
        .unwrap();
    assert!(report.planned.is_empty() && report.days.is_empty());
}

/// A stop starts no new day and no new attempt; the days in flight finish
/// and commit, the rest are reported skipped and the run says it stopped.
#[tokio::test]
async fn a_stopped_run_finishes_the_days_in_flight_and_starts_no_other() {
    let d = |n| date(2026, 7, n);
    let store = MemoryStore::new();
    let stop = StopHandle::new();
    let (release, gate) = tokio::sync::watch::channel(false);
    let started = Arc::new(AtomicUsize::new(0));
    let fetch = {
        let started = Arc::clone(&started);
        move |day: NaiveDate| {
            started.fetch_add(1, Ordering::SeqCst);
            let mut gate = gate.clone();
            async move {
                gate.wait_for(|open| *open).await.unwrap();
                Ok::<_, Transient>(records_of(day, 2))
            }
        }
    };
    let job = Job::new().concurrency(2).stop_handle(stop.clone());
    let run = job.backfill(&store, &fetch, d(1)..=d(10));
    let control = async {
        while started.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        stop.stop();
        release.send(true).unwrap();
    };
    let (report, ()) = tokio::join!(run, control);
    let report = report.unwrap();
    assert!(report.stopped);
    assert_eq!(started.load(Ordering::SeqCst), 2);
    assert_eq!(
        report.days.iter().map(|r| r.day).collect::<Vec<_>>(),
        vec![d(1), d(2)]
    );
    assert_eq!(report.skipped, (3..=10).map(d).collect::<Vec<_>>());
    assert_eq!(store.rows().await.unwrap().len(), 4);
    assert!(report.to_string().contains("not started (stopped)"));

    // A failing attempt is not retried once stopped.
    let stop = StopHandle::new();
    let attempts = Arc::new(AtomicU32::new(0));
    let fetch = {
        let attempts = Arc::clone(&attempts);
        let stop = stop.clone();
        move |_: NaiveDate| {
            attempts.fetch_add(1, Ordering::SeqCst);
            stop.stop();
            std::future::ready(Err::<Vec<Record>, _>(Transient::new(
                std::io::Error::other("503"),
            )))
        }
    };
    let job = Job::new()
        .retry(
            Retry::default()
                .max_attempts(5)
                .backoff(Duration::ZERO, Duration::ZERO),
        )
        .stop_handle(stop);
    assert!(job.sync_day(&store, &fetch, d(1)).await.is_err());
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

/// A `Fatal` fetch error stops the run at once, is not retried, and leaves
/// the ledger as it was: the days synced before stay synced.
#[tokio::test]
async fn a_fatal_fetch_error_stops_the_run_and_leaves_the_ledger() {
    let store = MemoryStore::new();
    let days = date(2026, 1, 1)..=date(2026, 1, 5);
    Job::new()
        .backfill(&store, &fetch_ok, days.clone())
        .await
        .unwrap();
    let calls = AtomicU32::new(0);
    let fatal = |_day: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        // Transient inside: Fatal wins, the day is not retried.
        std::future::ready(Err::<Vec<Record>, _>(Fatal::new(Transient::new(
            "fetch-orders: command not found",
        ))))
    };
    let job = Job::new().retry(Retry::default().backoff(Duration::ZERO, Duration::ZERO));
    let Err(Error::Backfill(e)) = job.backfill(&store, &fatal, days.clone()).await else {
        panic!("expected a failed backfill");
    };
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one attempt, one day");
    assert_eq!(e.failed.len(), 1);
    assert!(e.failed[0].1.is_fatal() && !e.failed[0].1.is_retryable());
    assert_eq!(e.report.skipped.len(), 4);
    assert!(!e.report.stopped, "the caller's stop handle was not used");
    let text = e.report.to_string();
    assert!(
        text.contains("2026-01-05  not started (stopped by a failed day)"),
        "{text}"
    );
    let ledger = store.ledger(days).await.unwrap();
    assert_eq!(ledger.len(), 5);
    assert!(
        ledger
            .iter()
            .all(|entry| entry.state() == DayState::Synced && entry.failure.is_none()),
        "{ledger:?}"
    );

    // A Transient alone is retried, and no day is fatal.
    let error = Error::Fetch {
        day: date(2026, 1, 1),
        source: Box::new(Transient::new("503")),
    };
    assert!(error.is_retryable() && !error.is_fatal());
}

/// Sixty days from Thursday 1 January 2026: weekdays 200 records,
/// weekends 120 (60 %), and the 41st day (10 February) 20 (10 %).
fn sixty_days(day: NaiveDate) -> std::future::Ready<Result<Vec<Record>, Transient>> {
    let n = if day == date(2026, 2, 10) {
        20
    } else if day.weekday().number_from_monday() >= 6 {
        120
    } else {
        200
    };
    std::future::ready(Ok(records_of(day, n)))
}

fn sixty() -> std::ops::RangeInclusive<NaiveDate> {
    date(2026, 1, 1)..=date(2026, 3, 1)
}

fn flagged_in_status(status: &Status) -> Vec<NaiveDate> {
    status
        .days
        .iter()
        .filter(|d| d.flag.is_some())
        .map(|d| d.day)
        .collect()
}

#[tokio::test]
async fn a_day_at_a_tenth_is_flagged_and_weekends_are_not() {
    let day_41 = date(2026, 2, 10);
    let store = MemoryStore::new();
    let job = Job::new().concurrency(4);
    let report = job.backfill(&store, &sixty_days, sixty()).await.unwrap();
    assert_eq!(report.days.len(), 60);
    let flagged: Vec<_> = report.days.iter().filter(|d| d.flag.is_some()).collect();
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    let flag = flagged[0].flag.as_ref().unwrap();
    assert_eq!((flagged[0].day, flag.fetched), (day_41, 20));
    assert_eq!(
        (flag.median, flag.threshold, flag.action),
        (200, 50, CheckAction::Warn)
    );
    // Warned, so written.
    assert_eq!(store.day_rows(day_41).await.unwrap().len(), 20);
    let status = job.status(&store, sixty()).await.unwrap();
    assert_eq!(flagged_in_status(&status), [day_41]);
    assert!(status.to_string().contains("1 synced flagged by a check"));
    let json = serde_json::to_value(&report).unwrap();
    let day = &json["days"][40];
    assert_eq!(day["flag"]["check"], "volume");
    assert_eq!(day["flag"]["fetched"], 20);

    // Accepted, it is never flagged again, through re-runs.
    store
        .accept(day_41, Some(utc(2026, 3, 2, 9, 0)))
        .await
        .unwrap();
    let again = job.backfill(&store, &sixty_days, sixty()).await.unwrap();
    assert!(again.days.iter().all(|d| d.flag.is_none()));
    let status = job.status(&store, sixty()).await.unwrap();
    assert_eq!(flagged_in_status(&status), []);
    let entry = status.days[40].entry.as_ref().unwrap();
    assert_eq!(entry.accepted, Some(utc(2026, 3, 2, 9, 0)));
    // Taken back, it is flagged again.
    store.accept(day_41, None).await.unwrap();
    let status = job.status(&store, sixty()).await.unwrap();
    assert_eq!(flagged_in_status(&status), [day_41]);
    // With no check, nothing is.
    let unchecked = Job::new().checks(Checks::off());
    let status = unchecked.status(&store, sixty()).await.unwrap();
    assert_eq!(flagged_in_status(&status), []);
}

#[tokio::test]
async fn a_day_failing_a_check_set_to_fail_is_refused_until_accepted() {
    let day_41 = date(2026, 2, 10);
    let store = MemoryStore::new();
    let job = Job::new().checks(Checks::default().volume(CheckAction::Fail));
    let Err(Error::Backfill(failed)) = job.backfill(&store, &sixty_days, sixty()).await else {
        panic!("day 41 fails its check");
    };
    assert_eq!(failed.report.days.len(), 59);
    assert_eq!(failed.failed.len(), 1);
    let (day, error) = &failed.failed[0];
    assert_eq!(*day, day_41);
    assert!(
        matches!(error, Error::CheckFailed(flag) if flag.fetched == 20),
        "{error}"
    );
    // Not retried, nothing written, the reason in the ledger.
    assert_eq!(failed.report.failed[0].attempts, 1);
    assert!(store.day_rows(day_41).await.unwrap().is_empty());
    let entry = store.ledger(day_41..=day_41).await.unwrap().remove(0);
    assert_eq!(entry.state(), DayState::Failed);
    let reason = &entry.failure.unwrap().error;
    assert!(
        reason.starts_with("2026-02-10: volume check: 20 records fetched, fewer than 50"),
        "{reason}"
    );
    // Accepted, the day is written; a re-run keeps it accepted.
    store
        .accept(day_41, Some(utc(2026, 3, 2, 9, 0)))
        .await
        .unwrap();
    let report = job.sync_day(&store, &sixty_days, day_41).await.unwrap();
    assert_eq!((report.counts.inserted, report.flag), (20, None));
    let report = job.backfill(&store, &sixty_days, sixty()).await.unwrap();
    assert_eq!(report.failed.len(), 0);
    let entry = store.ledger(day_41..=day_41).await.unwrap().remove(0);
    assert_eq!(
        (entry.state(), entry.accepted),
        (DayState::Synced, Some(utc(2026, 3, 2, 9, 0)))
    );
}

/// Today is not over: a daily sync fetching its first hours is neither
/// flagged nor refused, whatever its count; yesterday is judged.
#[tokio::test]
async fn today_is_not_judged() {
    let today = date(2026, 2, 10);
    let store = MemoryStore::new();
    let at_two = FixedClock(utc(2026, 2, 10, 2, 0));
    let job = Job::new()
        .clock(at_two)
        .checks(Checks::default().volume(CheckAction::Fail));
    job.backfill(&store, &sixty_days, date(2026, 1, 1)..=date(2026, 2, 9))
        .await
        .unwrap();
    // Today: 20 records so far, a tenth of a day.
    let report = job.sync_day(&store, &sixty_days, today).await.unwrap();
    assert_eq!((report.counts.inserted, report.flag), (20, None));
    let status = job.status(&store, date(2026, 1, 1)..=today).await.unwrap();
    assert_eq!(flagged_in_status(&status), []);
    // The next day, the same count is judged.
    let a_day_later = Job::new()
        .clock(FixedClock(utc(2026, 2, 11, 2, 0)))
        .checks(Checks::default().volume(CheckAction::Fail));
    let status = a_day_later
        .status(&store, date(2026, 1, 1)..=today)
        .await
        .unwrap();
    assert_eq!(flagged_in_status(&status), [today]);
    assert!(matches!(
        a_day_later.sync_day(&store, &sixty_days, today).await,
        Err(Error::CheckFailed(_))
    ));
}
