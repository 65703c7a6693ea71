//! The whole dataset: the backfill against its floor (serial and
//! concurrent), and its identical re-runs with and without
//! `skip_unchanged`.

use backfill_core::MemoryStore;

use super::measure::{
    best_backfill, check, delta, floor_seconds, job, ledger_rows, timed_backfill, Run,
};
use crate::dataset::Keys;
use crate::settings::Settings;
use crate::stores::{Kind, Target};
use crate::Measurement;

/// The backfill's target against the floor, and how it reads.
fn goal(kind: Kind) -> (Option<f64>, &'static str) {
    match kind {
        Kind::Sqlite => (Some(0.8), ">= 0.8x raw bulk insert"),
        Kind::Postgres => (Some(0.8), ">= 0.8x binary COPY"),
        Kind::Delta => (Some(0.8), ">= 0.8x delta-rs appends"),
        Kind::Memory => (None, "(reference, no target)"),
    }
}

/// `backfill_serial` (Postgres, when the run is concurrent): the dataset at
/// concurrency 1 against one `COPY` stream.
pub(crate) async fn backfill_serial(
    run: &mut Run<'_>,
    all_rows: &[backfill_core::Record],
) -> Result<Measurement, String> {
    let s = run.s;
    let (goal, goal_text) = goal(run.kind);
    let serial = Settings {
        concurrency: 1,
        ..s.clone()
    };
    let floor = floor_seconds(&mut run.env, all_rows, 1, s.repeat).await?;
    let best = best_backfill(run, &serial, Keys::Friendly).await?;
    Ok(Measurement {
        rows: s.rows(),
        seconds: best.seconds,
        baseline: Some(run.kind.floor()),
        baseline_seconds: Some(floor),
        rows_written: best.written,
        peak_rss_bytes: best.peak,
        target: goal_text.into(),
        pass: run.judged(goal.map(|g| floor / best.seconds >= g)),
        detail: format!(
            "{} days x {} records, concurrency 1, against one COPY stream",
            s.days, s.per_day
        ),
        ..run.line("backfill_serial")
    })
}

/// `backfill`: the dataset at the run's concurrency into an empty table,
/// against the floor with as many Postgres `COPY` streams as days in
/// flight. Returns the table of its last repeat, for the scenarios that
/// follow on it.
pub(crate) async fn backfill(
    run: &mut Run<'_>,
    all_rows: &[backfill_core::Record],
) -> Result<(Measurement, Target), String> {
    let (s, kind) = (run.s, run.kind);
    let (goal, goal_text) = goal(kind);
    let streams = match kind {
        Kind::Postgres => s.concurrency,
        _ => 1,
    };
    let best_floor = floor_seconds(&mut run.env, all_rows, streams, s.repeat).await?;
    let best = best_backfill(run, s, Keys::Friendly).await?;
    let ratio = best_floor / best.seconds;
    let measured = Measurement {
        rows: s.rows(),
        seconds: best.seconds,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(best_floor),
        rows_written: best.written,
        peak_rss_bytes: best.peak,
        target: goal_text.into(),
        pass: run.judged(goal.map(|g| ratio >= g)),
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
        ..run.line("backfill")
    };
    Ok((measured, best.target))
}

/// `rerun`: the identical backfill again into `target`, which holds it;
/// `backfill` is the first backfill's seconds.
pub(crate) async fn rerun(
    run: &Run<'_>,
    target: &Target,
    backfill: f64,
) -> Result<Measurement, String> {
    let (s, kind) = (run.s, run.kind);
    let (w0, wal0) = (target.rows_written().await?, target.wal_lsn().await?);
    let (report, seconds, peak) = timed_backfill(target.store(), job(s), s).await?;
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
                seconds * 2.0 <= backfill,
                "not 2x faster than backfill",
                &mut failures,
            );
        }
        goal_text = "0 written, WAL < 1 MiB/100k, >= 2x".into();
    }
    Ok(Measurement {
        rows: s.rows(),
        seconds,
        baseline: Some("backfill"),
        baseline_seconds: Some(backfill),
        rows_written: Some(written),
        wal_bytes: wal,
        speedup: Some(backfill / seconds),
        peak_rss_bytes: peak,
        target: goal_text,
        pass: Some(failures.is_empty()),
        detail: failures.join("; "),
        ..run.line("rerun")
    })
}

/// `rerun_skip`: the re-run with `skip_unchanged`. Its floor is what no
/// store can avoid: fetching and preparing the batches, which a re-run on
/// the memory store approximates (measured here, in the same process).
pub(crate) async fn rerun_skip(
    run: &Run<'_>,
    target: &Target,
    backfill: f64,
) -> Result<Measurement, String> {
    let (s, kind) = (run.s, run.kind);
    let memory = MemoryStore::new();
    timed_backfill(&memory, job(s), s).await?;
    let mut memory_rerun = f64::MAX;
    for _ in 0..s.repeat {
        let (_, seconds, _) = timed_backfill(&memory, job(s), s).await?;
        memory_rerun = memory_rerun.min(seconds);
    }
    drop(memory);
    let (w0, wal0) = (target.rows_written().await?, target.wal_lsn().await?);
    let (report, seconds, peak) =
        timed_backfill(target.store(), job(s).skip_unchanged(true), s).await?;
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
    Ok(Measurement {
        rows: s.rows(),
        seconds,
        baseline: Some("memory rerun"),
        baseline_seconds: Some(memory_rerun),
        rows_written: Some(written),
        wal_bytes: wal,
        speedup: Some(backfill / seconds),
        peak_rss_bytes: peak,
        target: "0 rows, 0 B WAL, <= 1.5x memory rerun".to_owned(),
        pass: Some(failures.is_empty()),
        detail: failures.join("; "),
        ..run.line("rerun_skip")
    })
}
