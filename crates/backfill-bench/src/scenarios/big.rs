//! Days of any size: one big day against the floor, as one batch; its
//! identical re-run and the same day streamed, each in a child process of
//! its own for its peak RSS (see `child.rs`); and (`--large`) a streamed
//! day of 10 000 000 records.

use std::time::Instant;

use super::child::stream_in_child;
use super::measure::{delta, job_at, ledger_rows, Run};
use crate::dataset::{day_records, fetch_from, nth_day, Feed, Keys, CHUNK};
use crate::stores::{peak_rss, reset_peak_rss, Kind, Target};
use crate::Measurement;

/// `big_day`: one day of `s.big_day` records as one batch into an empty
/// table, against the floor (COPY or raw insert of the same rows into an
/// empty table with its key). Returns the table, for `big_rerun`; the
/// floor's seconds are the line's `baseline_seconds`, for `big_stream`.
pub(crate) async fn big_day(run: &mut Run<'_>) -> Result<(Measurement, Target), String> {
    let (s, kind) = (run.s, run.kind);
    let day = nth_day(0);
    let n = s.big_day;
    let rows = day_records(day, n, false);

    let floor = {
        let target = run.env.fresh(1).await?;
        let started = Instant::now();
        target.bulk_load(&rows).await?;
        started.elapsed().as_secs_f64()
    };

    // The batch form: the fetch hands over the whole day at once.
    let target = run.env.fresh(1).await?;
    let feed = Feed::new([(day, rows)]);
    reset_peak_rss();
    let started = Instant::now();
    let report = job_at(1)
        .sync_day(target.store(), &|d| fetch_from(&feed, d), day)
        .await
        .map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    let peak = peak_rss();
    if report.counts.inserted != u64::from(n) {
        return Err(format!("big_day inserted {:?}", report.counts));
    }
    let ratio = floor / seconds;
    let measured = Measurement {
        rows: u64::from(n),
        seconds,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(floor),
        peak_rss_bytes: peak,
        target: ">= 0.8x the floor, one day".into(),
        pass: run.judged((kind != Kind::Memory).then_some(ratio >= 0.8)),
        detail: format!("one day of {n} records as one batch into an empty table"),
        ..run.line("big_day")
    };
    Ok((measured, target))
}

/// `big_rerun`: the big day again into `target`, which holds it, through
/// the stream form, in a fresh process. The timings of the streamed forms
/// include generating the records (a SHA-256 each), which the floor and
/// the batch form do beforehand.
pub(crate) async fn big_rerun(run: &Run<'_>, target: &Target) -> Result<Measurement, String> {
    let n = run.s.big_day;
    let written_before = target.rows_written().await?;
    let rerun = stream_in_child(&run.env, target, n, Keys::Friendly).await?;
    let written = delta(written_before, target.rows_written().await?)
        .map(|w| w.saturating_sub(ledger_rows(run.kind, 1)));
    Ok(Measurement {
        rows: u64::from(n),
        seconds: rerun.seconds,
        rows_written: written,
        peak_rss_bytes: rerun.peak,
        target: "0 rows written".into(),
        pass: Some(rerun.written == 0 && written.unwrap_or(0) == 0),
        detail: format!(
            "the same {n} records again, streamed in chunks of {CHUNK}, in a process of its own"
        ),
        ..run.line("big_rerun")
    })
}

/// `big_stream`: the big day streamed in chunks into an empty table, in a
/// fresh process, against the floor's `floor` seconds.
pub(crate) async fn big_stream(run: &mut Run<'_>, floor: f64) -> Result<Measurement, String> {
    let n = run.s.big_day;
    let target = run.env.fresh(1).await?;
    let streamed = stream_in_child(&run.env, &target, n, Keys::Friendly).await?;
    if streamed.inserted != u64::from(n) {
        return Err(format!("big_stream inserted {}", streamed.inserted));
    }
    Ok(Measurement {
        rows: u64::from(n),
        seconds: streamed.seconds,
        baseline: Some(run.kind.floor()),
        baseline_seconds: Some(floor),
        peak_rss_bytes: streamed.peak,
        target: "peak RSS < 300 MiB".into(),
        pass: Some(streamed.peak < 300 << 20),
        detail: format!(
            "the same day streamed in chunks of {CHUNK} into an empty table, in a process of its own"
        ),
        ..run.line("big_stream")
    })
}

/// `stream_day` (`--large`): a day of `s.stream_day` records streamed into
/// an empty table, generated as it is read; peak RSS must stay under
/// 300 MiB.
pub(crate) async fn stream_day(run: &mut Run<'_>) -> Result<Measurement, String> {
    let n = run.s.stream_day;
    let target = run.env.fresh(1).await?;
    let child = stream_in_child(&run.env, &target, n, Keys::Friendly).await?;
    if child.inserted != u64::from(n) {
        return Err(format!("stream_day inserted {}", child.inserted));
    }
    Ok(Measurement {
        rows: u64::from(n),
        seconds: child.seconds,
        peak_rss_bytes: child.peak,
        target: "peak RSS < 300 MiB".into(),
        pass: Some(child.peak < 300 << 20),
        detail: format!(
            "one day of {n} records streamed in chunks of {CHUNK}, in a process of its own"
        ),
        ..run.line("stream_day")
    })
}
