//! The scenarios, each measured on one store against a baseline run in the
//! same process on the same rows.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backfill_core::{FixedClock, Job, Mode, Record, Retry};
use chrono::NaiveDate;
use sha2::{Digest, Sha256};

use crate::stores::{peak_rss, reset_peak_rss, Env, Kind, Target};
use crate::Measurement;

/// The size of a run.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) days: u32,
    pub(crate) per_day: u32,
    pub(crate) concurrency: usize,
    pub(crate) repeat: u32,
    pub(crate) quick: bool,
    parallel_days: u32,
    parallel_records: u32,
    parallel_sleep: Duration,
    scale_days: u32,
    /// Records of the one big day (`big_day`).
    pub(crate) big_day: u32,
    /// `--large`: the 10 000 000-record streamed day and the day into a
    /// 10 000 000-row table run too.
    pub(crate) large: bool,
    /// Records of the streamed day (`stream_day`, `--large`).
    pub(crate) stream_day: u32,
    /// Rows already in the table (`scale_large`, `--large`).
    pub(crate) large_table: u32,
}

impl Settings {
    pub(crate) fn full() -> Self {
        Self {
            days: 30,
            per_day: 10_000,
            // Two days at once: what a job on a two-core machine would run.
            // `--concurrency 1` measures the serial path.
            concurrency: 2,
            repeat: 3,
            quick: false,
            parallel_days: 60,
            parallel_records: 100,
            parallel_sleep: Duration::from_millis(50),
            scale_days: 100,
            big_day: 1_000_000,
            large: false,
            stream_day: 10_000_000,
            large_table: 10_000_000,
        }
    }

    pub(crate) fn quick() -> Self {
        Self {
            days: 5,
            per_day: 2_000,
            repeat: 1,
            quick: true,
            parallel_days: 24,
            parallel_sleep: Duration::from_millis(40),
            scale_days: 20,
            big_day: 20_000,
            ..Self::full()
        }
    }

    pub(crate) fn rows(&self) -> u64 {
        u64::from(self.days) * u64::from(self.per_day)
    }
}

/// The dataset's first day.
fn first_day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 1, 1).unwrap()
}

pub(crate) fn nth_day(n: u32) -> NaiveDate {
    first_day() + chrono::Duration::days(i64::from(n))
}

/// Record `i` of `day`, exactly as the comparisons with other tools use it:
/// key `event:{date}:{i}`, value the hex SHA-256 of `{date}:{i}`, updated at
/// midnight UTC plus `i` seconds. `changed` gives the upstream-corrected
/// version: another value, one hour later.
pub(crate) fn record(day: NaiveDate, i: u32, changed: bool) -> Record {
    let seed = if changed {
        format!("{day}:{i}:changed")
    } else {
        format!("{day}:{i}")
    };
    let digest = Sha256::digest(seed.as_bytes());
    let value: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let mut at =
        day.and_hms_opt(0, 0, 0).unwrap().and_utc() + chrono::Duration::seconds(i64::from(i));
    if changed {
        at += chrono::Duration::hours(1);
    }
    Record::new(format!("event:{day}:{i}"), day, value, at).expect("valid bench record")
}

fn day_records(day: NaiveDate, per_day: u32, changed: bool) -> Vec<Record> {
    (0..per_day).map(|i| record(day, i, changed)).collect()
}

/// Hands out prepared days, so that fetching costs nothing measurable.
#[derive(Debug, Default)]
struct Feed {
    days: Mutex<HashMap<NaiveDate, Vec<Record>>>,
    sleep: Option<Duration>,
}

impl Feed {
    fn new(days: impl IntoIterator<Item = (NaiveDate, Vec<Record>)>) -> Self {
        Self {
            days: Mutex::new(days.into_iter().collect()),
            sleep: None,
        }
    }

    fn take(&self, day: NaiveDate) -> Vec<Record> {
        self.days.lock().unwrap().remove(&day).unwrap_or_default()
    }
}

async fn fetch_from(feed: &Feed, day: NaiveDate) -> Result<Vec<Record>, Infallible> {
    let records = feed.take(day);
    if let Some(sleep) = feed.sleep {
        tokio::time::sleep(sleep).await;
    }
    Ok(records)
}

fn full_feed(s: &Settings, changed: bool) -> Feed {
    Feed::new((0..s.days).map(|d| (nth_day(d), day_records(nth_day(d), s.per_day, changed))))
}

fn job(s: &Settings) -> Job {
    Job::new().concurrency(s.concurrency).retry(Retry::none())
}

/// The ledger rows that `rows_written` counts besides records when `days`
/// days are synced: SQLite's `total_changes()` counts every table of the
/// file, and each synced day writes its ledger row; Postgres' statistics
/// are the records table's own.
pub(crate) fn ledger_rows(kind: Kind, days: u32) -> u64 {
    if kind == Kind::Sqlite {
        u64::from(days)
    } else {
        0
    }
}

fn check(cond: bool, what: &str, failures: &mut Vec<String>) {
    if !cond {
        failures.push(what.to_owned());
    }
}

/// Runs every scenario on one kind of store.
pub(crate) async fn run_store(
    kind: Kind,
    s: &Settings,
    quiet: bool,
) -> Result<Vec<Measurement>, String> {
    let log = |msg: &str| {
        if !quiet {
            eprintln!("{kind}: {msg}");
        }
    };
    let mut env = Env::new(kind).await?;
    let mut out = Vec::new();
    let base = Measurement {
        store: kind.name(),
        ..Measurement::default()
    };
    let all_rows: Vec<Record> = (0..s.days)
        .flat_map(|d| day_records(nth_day(d), s.per_day, false))
        .collect();

    // ---- backfill vs the floor ------------------------------------------
    // Postgres' floor has as many COPY streams as the job has days in
    // flight; the serial path (concurrency 1 against one stream) is
    // measured beside it when the run is concurrent.
    let (goal, goal_text) = match kind {
        Kind::Sqlite => (Some(0.8), ">= 0.8x raw bulk insert"),
        Kind::Postgres => (Some(0.8), ">= 0.8x binary COPY"),
        Kind::Memory => (None, "(reference, no target)"),
    };
    // Quick runs are too small for throughput ratios to mean anything:
    // they show the figures but judge only the exact counts.
    let judged = |pass: Option<bool>| if s.quick { None } else { pass };
    if kind == Kind::Postgres && s.concurrency > 1 {
        log("backfill_serial");
        let serial = Settings {
            concurrency: 1,
            ..s.clone()
        };
        let floor = floor_seconds(&mut env, &all_rows, 1, s.repeat).await?;
        let mut best = f64::MAX;
        let mut peak = 0;
        let mut written = None;
        for _ in 0..s.repeat {
            let target = env.fresh(1).await?;
            let (report, seconds, run_peak) = timed_backfill(&target, &serial).await?;
            peak = peak.max(run_peak);
            if report.totals().inserted != s.rows() {
                return Err(format!("backfill inserted {:?}", report.totals()));
            }
            if seconds < best {
                best = seconds;
                written = target.rows_written().await?;
            }
        }
        out.push(Measurement {
            scenario: "backfill_serial",
            rows: s.rows(),
            seconds: best,
            baseline: Some(kind.floor()),
            baseline_seconds: Some(floor),
            rows_written: written,
            peak_rss_bytes: peak,
            target: goal_text.into(),
            pass: judged(goal.map(|g| floor / best >= g)),
            detail: format!(
                "{} days x {} records, concurrency 1, against one COPY stream",
                s.days, s.per_day
            ),
            ..base.clone()
        });
    }
    log("backfill");
    let streams = match kind {
        Kind::Postgres => s.concurrency,
        _ => 1,
    };
    let best_floor = floor_seconds(&mut env, &all_rows, streams, s.repeat).await?;
    let mut best = f64::MAX;
    let mut kept: Option<Target> = None;
    let mut peak = 0;
    let mut written = None;
    for _ in 0..s.repeat {
        let target = env.fresh(s.concurrency).await?;
        let (report, seconds, run_peak) = timed_backfill(&target, s).await?;
        peak = peak.max(run_peak);
        if report.totals().inserted != s.rows() {
            return Err(format!("backfill inserted {:?}", report.totals()));
        }
        if seconds < best {
            best = seconds;
            written = target
                .rows_written()
                .await?
                .map(|w| w.saturating_sub(ledger_rows(kind, s.days)))
                .or(Some(report.totals().written()));
        }
        kept = Some(target);
    }
    let target = kept.expect("at least one run");
    let ratio = best_floor / best;
    out.push(Measurement {
        scenario: "backfill",
        rows: s.rows(),
        seconds: best,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(best_floor),
        rows_written: written,
        peak_rss_bytes: peak,
        target: goal_text.into(),
        pass: judged(goal.map(|g| ratio >= g)),
        detail: format!(
            "{} days x {} records, concurrency {}{}",
            s.days,
            s.per_day,
            s.concurrency,
            match streams {
                1 => String::new(),
                n => format!(", against {n} parallel COPY streams"),
            }
        ),
        ..base.clone()
    });

    // ---- rerun: the identical backfill again ----------------------------
    log("rerun");
    let (w0, wal0) = (target.rows_written().await?, target.wal_lsn().await?);
    let (report, seconds, peak) = timed_backfill(&target, s).await?;
    let (w1, wal1) = (target.rows_written().await?, target.wal_lsn().await?);
    let written = delta(w0, w1)
        .map(|w| w.saturating_sub(ledger_rows(kind, s.days)))
        .unwrap_or(report.totals().written());
    let wal = delta(wal0, wal1);
    let mut failures = Vec::new();
    check(written == 0, "rows were written", &mut failures);
    check(
        report.totals().unchanged == s.rows(),
        "not all unchanged",
        &mut failures,
    );
    let mut goal_text = "0 rows written".to_owned();
    if kind == Kind::Postgres {
        let wal_limit = (s.rows() as f64 / 100_000.0 * 1024.0 * 1024.0) as u64;
        check(
            wal.unwrap_or(u64::MAX) < wal_limit.max(1),
            "WAL over budget",
            &mut failures,
        );
        if !s.quick {
            check(
                seconds * 2.0 <= best,
                "not 2x faster than backfill",
                &mut failures,
            );
        }
        goal_text = "0 written, WAL < 1 MiB/100k, >= 2x".into();
    }
    out.push(Measurement {
        scenario: "rerun",
        rows: s.rows(),
        seconds,
        baseline: Some("backfill"),
        baseline_seconds: Some(best),
        rows_written: Some(written),
        wal_bytes: wal,
        speedup: Some(best / seconds),
        peak_rss_bytes: peak,
        target: goal_text,
        pass: Some(failures.is_empty()),
        detail: failures.join("; "),
        ..base.clone()
    });

    // ---- rerun_skip: the re-run with skip_unchanged ---------------------
    // Its floor is what no store can avoid: fetching and preparing the
    // batches, which a re-run on the memory store approximates (measured
    // here, in the same process).
    log("rerun_skip");
    let memory = backfill_core::MemoryStore::new();
    timed_backfill_with(&memory, job(s), s).await?;
    let mut memory_rerun = f64::MAX;
    for _ in 0..s.repeat {
        let (_, seconds, _) = timed_backfill_with(&memory, job(s), s).await?;
        memory_rerun = memory_rerun.min(seconds);
    }
    drop(memory);
    let (w0, wal0) = (target.rows_written().await?, target.wal_lsn().await?);
    let (report, seconds, peak) =
        timed_backfill_with(target.store(), job(s).skip_unchanged(true), s).await?;
    let (w1, wal1) = (target.rows_written().await?, target.wal_lsn().await?);
    let written = delta(w0, w1).unwrap_or(report.totals().written());
    let wal = delta(wal0, wal1);
    let mut failures = Vec::new();
    check(written == 0, "rows were written", &mut failures);
    check(
        report.totals().skipped == s.rows(),
        "not every day skipped by digest",
        &mut failures,
    );
    check(wal.unwrap_or(0) == 0, "WAL written", &mut failures);
    if kind != Kind::Memory && !s.quick {
        check(
            seconds <= 1.5 * memory_rerun,
            "over 1.5x the memory store's re-run",
            &mut failures,
        );
    }
    out.push(Measurement {
        scenario: "rerun_skip",
        rows: s.rows(),
        seconds,
        baseline: Some("memory rerun"),
        baseline_seconds: Some(memory_rerun),
        rows_written: Some(written),
        wal_bytes: wal,
        speedup: Some(best / seconds),
        peak_rss_bytes: peak,
        target: "0 rows, 0 B WAL, <= 1.5x memory rerun".to_owned(),
        pass: Some(failures.is_empty()),
        detail: failures.join("; "),
        ..base.clone()
    });

    // ---- changed_day, stale_day, replace_day (and its re-run) -----------
    let day = nth_day(s.days / 2);
    let listing: Vec<Record> = (0..s.per_day)
        .filter(|i| i % 10 != 0)
        .map(|i| record(nth_day(s.days / 2 + 1), i, false))
        .collect();
    let mut merge_seconds = None;
    for (scenario, records, mode, expected) in [
        (
            "changed_day",
            day_records(day, s.per_day, true),
            Mode::Merge,
            s.per_day,
        ),
        (
            "stale_day",
            day_records(day, s.per_day, false),
            Mode::Merge,
            0,
        ),
        (
            "replace_day",
            listing.clone(),
            Mode::Replace,
            s.per_day.div_ceil(10),
        ),
        ("replace_rerun", listing.clone(), Mode::Replace, 0),
    ] {
        log(scenario);
        let day = records.first().map_or(day, Record::event_date);
        let feed = Feed::new([(day, records)]);
        let w0 = target.rows_written().await?;
        let wal0 = target.wal_lsn().await?;
        reset_peak_rss();
        let started = Instant::now();
        // Both replaces are one listing, true as of the same instant (a day
        // after the listed day): the second is its identical re-apply.
        let as_of = (day + chrono::Duration::days(1))
            .and_hms_opt(0, 0, 0)
            .unwrap()
            .and_utc();
        let report = job(s)
            .mode(mode)
            .clock(FixedClock(as_of))
            .sync_day(target.store(), &|d| fetch_from(&feed, d), day)
            .await
            .map_err(|e| e.to_string())?;
        let seconds = started.elapsed().as_secs_f64();
        let peak = peak_rss();
        let written = delta(w0, target.rows_written().await?)
            .map(|w| w.saturating_sub(ledger_rows(kind, 1)))
            .unwrap_or(report.counts.written());
        let wal = delta(wal0, target.wal_lsn().await?);
        let c = report.counts;
        let (ok, goal) = match scenario {
            "changed_day" => {
                merge_seconds = Some(seconds);
                (
                    c.updated == u64::from(expected) && written == u64::from(expected),
                    format!("exactly {expected} updated"),
                )
            }
            "stale_day" => (
                c.stale == u64::from(s.per_day) && written == 0,
                "0 rows written".to_owned(),
            ),
            "replace_day" => (
                c.deleted == u64::from(expected)
                    && c.unlisted == u64::from(expected)
                    && written == u64::from(expected),
                format!("exactly {expected} tombstoned"),
            ),
            // The same listing again: no record row (its day's ledger row
            // is rewritten). WAL within the rerun's budget: the ledger row,
            // and reads pruning the dead tuples the scenarios before left.
            _ => {
                let wal_limit = (s.per_day as f64 / 100_000.0 * 1024.0 * 1024.0) as u64;
                (
                    c.written() == 0 && written == 0 && wal.unwrap_or(0) < wal_limit,
                    "0 rows, WAL < 1 MiB/100k".to_owned(),
                )
            }
        };
        out.push(Measurement {
            scenario,
            rows: u64::from(s.per_day),
            seconds,
            rows_written: Some(written),
            wal_bytes: wal,
            // The replace against the merge of a changed day of the same
            // size: what tombstoning a tenth of the day adds.
            speedup: merge_seconds
                .filter(|_| scenario.starts_with("replace"))
                .map(|merge| merge / seconds),
            peak_rss_bytes: peak,
            target: goal,
            pass: Some(ok),
            detail: format!(
                "inserted {} updated {} unchanged {} stale {} deleted {} (unlisted {})",
                c.inserted, c.updated, c.unchanged, c.stale, c.deleted, c.unlisted
            ),
            ..base.clone()
        });
    }
    drop(target);

    // ---- scale: one day into a small vs a large table ------------------
    log("scale");
    let small = env.fresh(1).await?;
    let large = env.fresh(1).await?;
    let prefill = |days: u32| -> Vec<Record> {
        (0..days)
            .flat_map(|d| day_records(nth_day(d), s.per_day, false))
            .collect()
    };
    small.bulk_load(&prefill(1)).await?;
    let big = prefill(s.scale_days);
    if kind == Kind::Memory {
        // The memory store has no bulk path: fill it through upsert.
        for chunk in big.chunks(s.per_day as usize) {
            let d = chunk[0].event_date();
            backfill_core::upsert(large.store(), d, chunk.to_vec(), Default::default())
                .await
                .map_err(|e| e.to_string())?;
        }
    } else {
        large.bulk_load(&big).await?;
    }
    drop(big);
    let (mut t_small, mut t_large) = (f64::MAX, f64::MAX);
    reset_peak_rss();
    for round in 0..s.repeat.max(3) {
        // A day neither table holds yet, the same for both.
        let day = nth_day(1000 + round);
        for (target, best) in [(&small, &mut t_small), (&large, &mut t_large)] {
            let feed = Feed::new([(day, day_records(day, s.per_day, false))]);
            let started = Instant::now();
            job(s)
                .sync_day(target.store(), &|d| fetch_from(&feed, d), day)
                .await
                .map_err(|e| e.to_string())?;
            *best = best.min(started.elapsed().as_secs_f64());
        }
    }
    let growth = t_large / t_small;
    out.push(Measurement {
        scenario: "scale",
        rows: u64::from(s.per_day),
        seconds: t_large,
        baseline: Some("table_with_1_day"),
        baseline_seconds: Some(t_small),
        peak_rss_bytes: peak_rss(),
        target: if kind == Kind::Memory {
            "(reference, no target)".into()
        } else {
            format!("time({} days) / time(1 day) <= 1.3", s.scale_days)
        },
        pass: judged((kind != Kind::Memory).then_some(growth <= 1.3)),
        detail: format!("one new day into 1 day: {t_small:.4} s, into {} days: {t_large:.4} s, time ratio {growth:.2}", s.scale_days),
        ..base.clone()
    });
    drop((small, large));

    // ---- parallel: fetch latency dominates ------------------------------
    log("parallel");
    let mut times = Vec::new();
    reset_peak_rss();
    for concurrency in [1, 8] {
        let target = env.fresh(8).await?;
        let mut feed = Feed::new((0..s.parallel_days).map(|d| {
            (
                nth_day(d),
                day_records(nth_day(d), s.parallel_records, false),
            )
        }));
        feed.sleep = Some(s.parallel_sleep);
        let started = Instant::now();
        Job::new()
            .concurrency(concurrency)
            .retry(Retry::none())
            .backfill(
                target.store(),
                &|d| fetch_from(&feed, d),
                first_day()..=nth_day(s.parallel_days - 1),
            )
            .await
            .map_err(|e| e.to_string())?;
        times.push(started.elapsed().as_secs_f64());
    }
    let speedup = times[0] / times[1];
    out.push(Measurement {
        scenario: "parallel",
        rows: u64::from(s.parallel_days * s.parallel_records),
        seconds: times[1],
        baseline: Some("concurrency_1"),
        baseline_seconds: Some(times[0]),
        speedup: Some(speedup),
        peak_rss_bytes: peak_rss(),
        target: "concurrency 8 >= 6x concurrency 1".into(),
        pass: judged(Some(speedup >= 6.0)),
        detail: format!(
            "{} days x {} records, fetch sleeps {} ms: {:.3} s at 1, {:.3} s at 8 (ideal {:.3} s)",
            s.parallel_days,
            s.parallel_records,
            s.parallel_sleep.as_millis(),
            times[0],
            times[1],
            f64::from(s.parallel_days) * s.parallel_sleep.as_secs_f64() / 8.0
        ),
        ..base.clone()
    });

    // ---- days of any size, the command line's ingest --------------------
    log("big_day");
    out.extend(crate::big::big_day(kind, &mut env, s, &base).await?);
    if kind != Kind::Memory {
        log("cli_ingest");
        out.push(crate::big::cli_ingest(&mut env, s, &base).await?);
    }
    if s.large && kind != Kind::Memory {
        log("stream_day");
        out.push(crate::big::stream_day(&mut env, s, &base).await?);
        log("scale_large");
        out.push(crate::big::scale_large(&mut env, s, &base).await?);
    }
    Ok(out)
}

/// The best of `repeat` floor runs into fresh, empty tables, with
/// `streams` writers (see [`Target::bulk_load_streams`]).
async fn floor_seconds(
    env: &mut Env,
    rows: &[Record],
    streams: usize,
    repeat: u32,
) -> Result<f64, String> {
    let mut best = f64::MAX;
    for _ in 0..repeat {
        let target = env.fresh(streams).await?;
        let started = Instant::now();
        target.bulk_load_streams(rows, streams).await?;
        best = best.min(started.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// The whole dataset through `backfill`: the report, the seconds it took
/// and the peak RSS during it.
async fn timed_backfill(
    target: &Target,
    s: &Settings,
) -> Result<(backfill_core::RunReport, f64, u64), String> {
    timed_backfill_with(target.store(), job(s), s).await
}

/// The 30-day backfill with `job`, on any store.
async fn timed_backfill_with(
    store: &dyn backfill_core::Store,
    job: Job,
    s: &Settings,
) -> Result<(backfill_core::RunReport, f64, u64), String> {
    let feed = full_feed(s, false);
    reset_peak_rss();
    let started = Instant::now();
    let report = job
        .backfill(
            store,
            &|d| fetch_from(&feed, d),
            first_day()..=nth_day(s.days - 1),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((report, started.elapsed().as_secs_f64(), peak_rss()))
}

pub(crate) fn delta(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    Some(after?.saturating_sub(before?))
}
