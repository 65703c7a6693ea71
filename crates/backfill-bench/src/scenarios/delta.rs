//! The Delta store on a local directory, with the random-key dataset:
//! into a fresh table against delta-rs appending the same rows one day a
//! commit (the floor), then into the table that holds it — an identical
//! re-run, with and without `skip_unchanged`, and a lookback day with 20 %
//! of its rows changed — and a big day streamed in a process of its own.
//! The table's versions and the files each commit added and removed are
//! read from its log, as any Delta reader would read them.
//!
//! The hand-rolled per-day `merge` and dlt's Delta destination are
//! Python's; `crates/backfill-python/bench/python_vs_delta.py` measures
//! them against the package on the same rows.

use std::time::Instant;

use backfill_core::{Mode, Record};

use super::child::stream_in_child;
use super::measure::{best_backfill, check, floor_seconds, sync_one, timed_backfill_keyed, Run};
use crate::dataset::{keyed_day, keyed_record, nth_day, Keys, CHUNK};
use crate::settings::Settings;
use crate::stores::{DeltaLog, Target};
use crate::Measurement;

/// The floor's name in a detail line.
const APPEND: &str = "delta-rs appending the same rows, one commit per day";

/// The table's log (every target here is a Delta table).
fn log_of(target: &Target) -> Result<DeltaLog, String> {
    target.delta_log().ok_or_else(|| "not a Delta table".into())
}

/// `delta_serial`: the random-key dataset at concurrency 1 into a fresh
/// table, against the append floor: judged, ≥ 0.8×.
pub(crate) async fn delta_serial(
    run: &mut Run<'_>,
    rows: &[Record],
) -> Result<(Measurement, f64), String> {
    let s = run.s;
    let serial = Settings {
        concurrency: 1,
        ..s.clone()
    };
    let floor = floor_seconds(&mut run.env, rows, 1, s.repeat).await?;
    let best = best_backfill(run, &serial, Keys::Random).await?;
    let ratio = floor / best.seconds.max(1e-9);
    let line = Measurement {
        rows: s.rows(),
        seconds: best.seconds,
        baseline: Some(run.kind.floor()),
        baseline_seconds: Some(floor),
        rows_written: best.written,
        peak_rss_bytes: best.peak,
        target: ">= 0.8x delta-rs appends".into(),
        pass: run.judged(Some(ratio >= 0.8)),
        detail: format!(
            "{} days x {} records, random keys, concurrency 1, into a fresh table, against {APPEND}",
            s.days, s.per_day
        ),
        ..run.line("delta_serial")
    };
    Ok((line, floor))
}

/// `delta_days`: the same at the run's concurrency (days in flight commit
/// to one table, each commit racing the others), against the same floor.
/// Returns the table, holding the dataset.
pub(crate) async fn delta_days(
    run: &mut Run<'_>,
    floor: f64,
) -> Result<(Measurement, Target), String> {
    let s = run.s;
    let best = best_backfill(run, s, Keys::Random).await?;
    let line = Measurement {
        rows: s.rows(),
        seconds: best.seconds,
        baseline: Some(run.kind.floor()),
        baseline_seconds: Some(floor),
        rows_written: best.written,
        peak_rss_bytes: best.peak,
        target: "measured: vs delta-rs appends".into(),
        detail: format!(
            "{} days x {} records, random keys, concurrency {}, against {APPEND} (one writer)",
            s.days, s.per_day, s.concurrency
        ),
        ..run.line("delta_days")
    };
    Ok((line, best.target))
}

/// `delta_rerun` and `delta_rerun_skip`: the dataset again into `target`,
/// which holds it. Without `skip_unchanged` no data file is rewritten and
/// each day commits its new ledger row; with it, no version is committed.
pub(crate) async fn delta_reruns(
    run: &Run<'_>,
    target: &Target,
    floor: f64,
) -> Result<[Measurement; 2], String> {
    let s = run.s;
    let log = log_of(target)?;
    let mut lines = Vec::new();
    for skip in [false, true] {
        let (v0, w0) = (log.version()?, log.record_rows_added()?);
        let job = super::measure::job(s).skip_unchanged(skip);
        let (report, seconds, peak) =
            timed_backfill_keyed(target.store(), job, s, Keys::Random).await?;
        let (v1, w1) = (log.version()?, log.record_rows_added()?);
        let (versions, written) = (v1 - v0, w1 - w0);
        let mut data_files = 0;
        for version in v0 + 1..=v1 {
            data_files += log.commit(version)?.added.iter().filter(|a| !a.2).count();
        }
        let mut failures = Vec::new();
        check(written == 0, "rows were rewritten", &mut failures);
        check(data_files == 0, "data files were added", &mut failures);
        let (scenario, target_text, detail) = if skip {
            check(versions == 0, "a version was committed", &mut failures);
            check(
                report.totals().skipped == s.rows(),
                "not every day skipped by digest",
                &mut failures,
            );
            (
                "delta_rerun_skip",
                "0 new versions",
                format!("with skip_unchanged: {versions} new versions"),
            )
        } else {
            check(
                report.totals().unchanged == s.rows(),
                "not all unchanged",
                &mut failures,
            );
            check(
                versions == u64::from(s.days),
                "not one ledger commit per day",
                &mut failures,
            );
            (
                "delta_rerun",
                "0 rows, 0 data files",
                format!("{versions} new versions, each a day's ledger row only; against {APPEND}"),
            )
        };
        lines.push(Measurement {
            rows: s.rows(),
            seconds,
            baseline: Some(run.kind.floor()),
            baseline_seconds: Some(floor),
            rows_written: Some(written),
            peak_rss_bytes: peak,
            target: target_text.into(),
            pass: Some(failures.is_empty()),
            detail: if failures.is_empty() {
                detail
            } else {
                failures.join("; ")
            },
            ..run.line(scenario)
        });
    }
    let [a, b]: [Measurement; 2] = lines.try_into().expect("two re-runs");
    Ok([a, b])
}

/// `delta_lookback`: the last day re-fetched with every fifth record
/// changed upstream (20 %), into `target`, which holds the dataset: one
/// version, exactly the changed rows updated, and every file it adds or
/// removes in that day's partition. Against appending the same day into a
/// fresh table.
pub(crate) async fn delta_lookback(
    run: &mut Run<'_>,
    target: &Target,
) -> Result<Measurement, String> {
    let s = run.s;
    let day = nth_day(s.days - 1);
    let records: Vec<Record> = (0..s.per_day)
        .map(|i| keyed_record(Keys::Random, day, i, i % 5 == 0))
        .collect();
    let changed = u64::from(s.per_day.div_ceil(5));
    let floor = floor_seconds(&mut run.env, &records, 1, s.repeat).await?;

    let log = log_of(target)?;
    let (v0, day_files) = (log.version()?, files_of_day(&log, day)?);
    let ours = sync_one(run, target, day, records, Mode::Merge).await?;
    let v1 = log.version()?;
    let partition = format!("event_date={day}/");
    let mut failures = Vec::new();
    let c = &ours.counts;
    check(
        c.updated == changed && c.unchanged == u64::from(s.per_day) - changed,
        "not exactly the changed rows updated",
        &mut failures,
    );
    check(v1 == v0 + 1, "not one version", &mut failures);
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    for version in v0 + 1..=v1 {
        let commit = log.commit(version)?;
        added.extend(commit.added.into_iter().map(|a| a.0));
        removed.extend(commit.removed);
    }
    check(
        added
            .iter()
            .chain(&removed)
            .all(|p| p.starts_with(&partition)),
        "a file of another day was touched",
        &mut failures,
    );
    removed.sort();
    check(
        removed == day_files,
        "not exactly the day's files removed",
        &mut failures,
    );
    Ok(Measurement {
        rows: u64::from(s.per_day),
        seconds: ours.seconds,
        baseline: Some(run.kind.floor()),
        baseline_seconds: Some(floor),
        rows_written: Some(ours.written),
        peak_rss_bytes: ours.peak,
        target: format!("{changed} updated, only its day's files"),
        pass: Some(failures.is_empty()),
        detail: if failures.is_empty() {
            format!(
                "updated {} unchanged {}; removed {} and added {} files, all under {partition}; \
                 against appending the day into a fresh table",
                c.updated,
                c.unchanged,
                removed.len(),
                added.len()
            )
        } else {
            failures.join("; ")
        },
        ..run.line("delta_lookback")
    })
}

/// The files of `day` in the table's latest version, sorted: every file
/// added under its partition and not removed since.
fn files_of_day(log: &DeltaLog, day: chrono::NaiveDate) -> Result<Vec<String>, String> {
    let partition = format!("event_date={day}/");
    let mut live = std::collections::BTreeSet::new();
    for version in 0..=log.version()? {
        let commit = log.commit(version)?;
        for path in commit.removed {
            live.remove(&path);
        }
        for (path, _, _) in commit.added {
            if path.starts_with(&partition) {
                live.insert(path);
            }
        }
    }
    Ok(live.into_iter().collect())
}

/// `delta_stream`: one day of `s.big_day` random-key records streamed in
/// chunks into a fresh table, in a process of its own (its peak RSS its
/// own), against appending the same rows as one commit.
pub(crate) async fn delta_stream(run: &mut Run<'_>) -> Result<Measurement, String> {
    let n = run.s.big_day;
    let floor = {
        let rows = keyed_day(Keys::Random, nth_day(0), n, false);
        let target = run.env.fresh(1).await?;
        let started = Instant::now();
        target.bulk_load(&rows).await?;
        started.elapsed().as_secs_f64()
    };
    let target = run.env.fresh(1).await?;
    let child = stream_in_child(&run.env, &target, n, Keys::Random).await?;
    if child.inserted != u64::from(n) {
        return Err(format!("delta_stream inserted {}", child.inserted));
    }
    Ok(Measurement {
        rows: u64::from(n),
        seconds: child.seconds,
        baseline: Some(run.kind.floor()),
        baseline_seconds: Some(floor),
        rows_written: Some(child.written),
        peak_rss_bytes: child.peak,
        target: "peak RSS < 300 MiB".into(),
        pass: Some(child.peak < 300 << 20),
        detail: format!(
            "one day of {n} records, random keys, streamed in chunks of {CHUNK} into a fresh \
             table, in a process of its own, against delta-rs appending them in one commit"
        ),
        ..run.line("delta_stream")
    })
}
