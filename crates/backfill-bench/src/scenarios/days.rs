//! One day into the backfilled table: changed upstream, stale, replaced by
//! a listing that lacks a tenth of its records, and that listing again.

use backfill_core::{Mode, Record};
use chrono::NaiveDate;

use super::measure::{sync_one, DayRun, Run};
use crate::dataset::{day_records, nth_day, record};
use crate::stores::Target;
use crate::Measurement;

/// The day the changed and stale versions are of: in the middle of the
/// dataset.
fn middle_day(run: &Run<'_>) -> NaiveDate {
    nth_day(run.s.days / 2)
}

/// The listing both replaces apply: the day after the middle one, without
/// every tenth record.
fn listing(run: &Run<'_>) -> Vec<Record> {
    (0..run.s.per_day)
        .filter(|i| i % 10 != 0)
        .map(|i| record(nth_day(run.s.days / 2 + 1), i, false))
        .collect()
}

/// Syncs `records` as one day: theirs, or the middle day when there are
/// none.
async fn sync_day_of(
    run: &Run<'_>,
    target: &Target,
    records: Vec<Record>,
    mode: Mode,
) -> Result<DayRun, String> {
    let day = records.first().map_or(middle_day(run), Record::event_date);
    sync_one(run, target, day, records, mode).await
}

/// The line of a one-day scenario; `speedup` is a replace against the
/// merge of a changed day of the same size: what tombstoning a tenth of the
/// day adds.
fn day_line(
    run: &Run<'_>,
    scenario: &'static str,
    day: &DayRun,
    goal: String,
    ok: bool,
    speedup: Option<f64>,
) -> Measurement {
    let c = &day.counts;
    Measurement {
        rows: u64::from(run.s.per_day),
        seconds: day.seconds,
        rows_written: Some(day.written),
        wal_bytes: day.wal,
        speedup,
        peak_rss_bytes: day.peak,
        target: goal,
        pass: Some(ok),
        detail: format!(
            "inserted {} updated {} unchanged {} stale {} deleted {} (unlisted {})",
            c.inserted, c.updated, c.unchanged, c.stale, c.deleted, c.unlisted
        ),
        ..run.line(scenario)
    }
}

/// `changed_day`: the middle day again, every record changed upstream.
pub(crate) async fn changed_day(run: &Run<'_>, target: &Target) -> Result<Measurement, String> {
    let expected = u64::from(run.s.per_day);
    let records = day_records(middle_day(run), run.s.per_day, true);
    let day = sync_day_of(run, target, records, Mode::Merge).await?;
    let ok = day.counts.updated == expected && day.written == expected;
    let goal = format!("exactly {expected} updated");
    Ok(day_line(run, "changed_day", &day, goal, ok, None))
}

/// `stale_day`: the middle day's first version again, older than the
/// changed one it now holds: nothing to write.
pub(crate) async fn stale_day(run: &Run<'_>, target: &Target) -> Result<Measurement, String> {
    let records = day_records(middle_day(run), run.s.per_day, false);
    let day = sync_day_of(run, target, records, Mode::Merge).await?;
    let ok = day.counts.stale == u64::from(run.s.per_day) && day.written == 0;
    Ok(day_line(
        run,
        "stale_day",
        &day,
        "0 rows written".into(),
        ok,
        None,
    ))
}

/// `replace_day`: the listing replaces its day; the records it lacks are
/// tombstoned. `merge` is the seconds of `changed_day`.
pub(crate) async fn replace_day(
    run: &Run<'_>,
    target: &Target,
    merge: f64,
) -> Result<Measurement, String> {
    let expected = u64::from(run.s.per_day.div_ceil(10));
    let day = sync_day_of(run, target, listing(run), Mode::Replace).await?;
    let c = &day.counts;
    let ok = c.deleted == expected && c.unlisted == expected && day.written == expected;
    let goal = format!("exactly {expected} tombstoned");
    let speedup = Some(merge / day.seconds);
    Ok(day_line(run, "replace_day", &day, goal, ok, speedup))
}

/// `replace_rerun`: the same listing again: no record row (its day's
/// ledger row is rewritten). WAL within the rerun's budget: the ledger
/// row, and reads pruning the dead tuples the scenarios before left.
pub(crate) async fn replace_rerun(
    run: &Run<'_>,
    target: &Target,
    merge: f64,
) -> Result<Measurement, String> {
    let day = sync_day_of(run, target, listing(run), Mode::Replace).await?;
    let wal_limit = (run.s.per_day as f64 / 100_000.0 * 1024.0 * 1024.0) as u64;
    let ok = day.counts.written() == 0 && day.written == 0 && day.wal.unwrap_or(0) < wal_limit;
    let goal = "0 rows, WAL < 1 MiB/100k".to_owned();
    let speedup = Some(merge / day.seconds);
    Ok(day_line(run, "replace_rerun", &day, goal, ok, speedup))
}
