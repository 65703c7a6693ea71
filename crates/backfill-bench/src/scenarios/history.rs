//! History: the random-key dataset backfilled into a table that keeps
//! history, against the same backfill into one that does not, pair by
//! pair in the same run; then its re-run, which must write nothing to
//! either table, and a lookback day with a fifth of its rows changed,
//! which must write exactly those versions.

use std::time::Instant;

use backfill_core::{Mode, Record};

use super::measure::{delta, job, ledger_rows, sync_one, Run};
use crate::dataset::{fetch_from, first_day, keyed_record, nth_day, Feed, Keys};
use crate::stores::{peak_rss, reset_peak_rss, Target};
use crate::Measurement;

/// One backfill of `rows` (whole days, in day order) into `target`: its
/// report's totals, seconds and peak RSS.
async fn backfill_into(
    run: &Run<'_>,
    target: &Target,
    rows: &[Record],
) -> Result<(backfill_core::Counts, f64, u64), String> {
    let s = run.s;
    let per_day = s.per_day.max(1) as usize;
    let feed = Feed::new(
        rows.chunks(per_day)
            .map(|day| (day[0].event_date(), day.to_vec())),
    );
    reset_peak_rss();
    let started = Instant::now();
    let report = job(s)
        .backfill(
            target.store(),
            &|d| fetch_from(&feed, d),
            first_day()..=nth_day(s.days - 1),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((report.totals(), started.elapsed().as_secs_f64(), peak_rss()))
}

/// `history`, `history_rerun` and `history_lookback`: the best of
/// `s.repeat` backfills with history on, each beside one without it (in
/// turn, on fresh tables, each on a settled server); then the dataset
/// again into the last table with history, and its last day re-fetched
/// with every fifth record changed.
pub(crate) async fn history(
    run: &mut Run<'_>,
    rows: &[Record],
) -> Result<[Measurement; 3], String> {
    let s = run.s;
    let (mut plain, mut kept, mut peak) = (f64::MAX, f64::MAX, 0);
    let mut pairs = Vec::new();
    let mut last = None;
    let mut written_by_backfill = None;
    for _ in 0..s.repeat {
        run.env.settle(last.take()).await?;
        let without = run.env.fresh(s.concurrency).await?;
        let (totals, before, _) = backfill_into(run, &without, rows).await?;
        if totals.inserted != s.rows() {
            return Err(format!("history: inserted {} without", totals.inserted));
        }
        plain = plain.min(before);
        run.env.settle(Some(without)).await?;
        let with = run.env.fresh_with_history(s.concurrency).await?;
        let w0 = with.rows_written().await?;
        let (totals, seconds, p) = backfill_into(run, &with, rows).await?;
        written_by_backfill = delta(w0, with.rows_written().await?)
            .map(|w| w.saturating_sub(ledger_rows(run.kind, s.days)));
        if totals.inserted != s.rows() {
            return Err(format!("history: inserted {} with", totals.inserted));
        }
        (kept, peak) = (kept.min(seconds), peak.max(p));
        pairs.push(seconds / before);
        last = Some(with);
    }
    let target = last.expect("at least one run");
    let versions = target
        .store()
        .history()
        .await
        .map_err(|e| e.to_string())?
        .len() as u64;
    if versions != s.rows() {
        return Err(format!("history: {versions} versions after the backfill"));
    }

    run.env.settle(None).await?;
    let w0 = target.rows_written().await?;
    let (again, rerun, rerun_peak) = backfill_into(run, &target, rows).await?;
    if again.unchanged != s.rows() {
        return Err(format!("history_rerun: unchanged {}", again.unchanged));
    }
    let written = delta(w0, target.rows_written().await?)
        .map(|w| w.saturating_sub(ledger_rows(run.kind, s.days)))
        .unwrap_or_default();

    let day = nth_day(s.days - 1);
    let records: Vec<Record> = (0..s.per_day)
        .map(|i| keyed_record(Keys::Random, day, i, i % 5 == 0))
        .collect();
    let changed = u64::from(s.per_day.div_ceil(5));
    let lookback = sync_one(run, &target, day, records, Mode::Merge).await?;
    let versions_after = target
        .store()
        .history()
        .await
        .map_err(|e| e.to_string())?
        .len() as u64;
    let (writes, what) = target.lookback_writes_with_history(changed, u64::from(s.per_day));
    let lookback_ok = lookback.counts.updated == changed
        && versions_after == s.rows() + changed
        && lookback.written == writes;

    let first = Measurement {
        rows: s.rows(),
        seconds: kept,
        baseline: Some("no_history"),
        baseline_seconds: Some(plain),
        rows_written: written_by_backfill,
        peak_rss_bytes: peak,
        target: "<= 1.5x without history".into(),
        pass: Some(kept / plain <= 1.5),
        detail: format!(
            "{} days x {} records, random UUID keys, concurrency {}, into a table keeping \
             history, against the same backfill into one that does not; time with over time \
             without, pair by pair: {}",
            s.days,
            s.per_day,
            s.concurrency,
            super::columns::spread(&mut pairs)
        ),
        ..run.line("history")
    };
    let rerun = Measurement {
        rows: s.rows(),
        seconds: rerun,
        baseline: Some("history"),
        baseline_seconds: Some(kept),
        rows_written: Some(written),
        peak_rss_bytes: rerun_peak,
        target: "0 rows written to either table".into(),
        pass: Some(written == 0),
        detail: format!("the same records again into the table keeping history ({what})"),
        ..run.line("history_rerun")
    };
    let lookback = Measurement {
        rows: u64::from(s.per_day),
        seconds: lookback.seconds,
        rows_written: Some(lookback.written),
        wal_bytes: lookback.wal,
        peak_rss_bytes: lookback.peak,
        target: format!("exactly {changed} updated and {changed} versions"),
        pass: Some(lookback_ok),
        detail: format!(
            "the last day again, every fifth record newer: updated {} unchanged {}; history \
             {versions_after} versions ({what})",
            lookback.counts.updated, lookback.counts.unchanged
        ),
        ..run.line("history_lookback")
    };
    Ok([first, rerun, lookback])
}
