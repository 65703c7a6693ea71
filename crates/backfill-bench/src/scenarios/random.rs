//! Realistic keys: the dataset with a random UUID per record, so every
//! new day interleaves with the keys already stored. Measured against
//! binary `COPY` (or SQLite's raw bulk insert) of the same rows in the same
//! order and against the hand-rolled per-day upsert a user would write
//! (see [`Target::upsert_by_hand`]); the ratios are measured, not judged,
//! and the exact counts are.

use std::time::Instant;

use backfill_core::{Mode, Record};

use super::child::stream_in_child;
use super::measure::{
    best_backfill, check, delta, floor_seconds, job, job_at, ledger_rows, sync_one,
    timed_backfill_keyed, DayRun, Run,
};
use crate::dataset::{fetch_from, keyed_day, keyed_record, nth_day, Feed, Keys, CHUNK};
use crate::settings::Settings;
use crate::stores::{peak_rss, reset_peak_rss, Kind, Target};
use crate::Measurement;

/// Every day of the dataset with random keys, in day order.
pub(crate) fn random_rows(s: &Settings) -> Vec<Record> {
    (0..s.days)
        .flat_map(|d| keyed_day(Keys::Random, nth_day(d), s.per_day, false))
        .collect()
}

/// `rows` cut into its days (`per_day` records each, in day order).
fn by_day(rows: &[Record], per_day: u32) -> Vec<&[Record]> {
    rows.chunks(per_day.max(1) as usize).collect()
}

/// The hand-rolled upsert's name as a baseline.
fn upsert_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => "staged_upsert",
        _ => "hand_upsert",
    }
}

/// What the hand-rolled upsert is, for a detail line.
fn upsert_text(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => {
            "COPY into a temporary table + INSERT ... ON CONFLICT DO UPDATE ... WHERE newer"
        }
        _ => "INSERT ... ON CONFLICT DO UPDATE ... WHERE newer per row",
    }
}

/// The floor's name for a target column.
fn floor_text(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => "COPY",
        _ => "raw insert",
    }
}

/// The floor with `streams` writers, for a target column (short) and a
/// detail line.
fn streams_text(kind: Kind, streams: usize) -> (String, String) {
    match (kind, streams) {
        (Kind::Postgres, 1) => ("one COPY stream".into(), "one COPY stream".into()),
        (Kind::Postgres, n) => (
            format!("{n} COPY streams"),
            format!("{n} parallel COPY streams"),
        ),
        _ => ("raw bulk insert".into(), "the raw bulk insert".into()),
    }
}

/// The best of `s.repeat` hand-rolled upserts of `rows` (its days in
/// order) into fresh, empty tables; every row must be inserted.
async fn upsert_floor(run: &mut Run<'_>, rows: &[Record]) -> Result<f64, String> {
    let mut best = f64::MAX;
    for _ in 0..run.s.repeat {
        let target = run.env.fresh(1).await?;
        let started = Instant::now();
        let written = target.upsert_by_hand(&by_day(rows, run.s.per_day)).await?;
        best = best.min(started.elapsed().as_secs_f64());
        if written != rows.len() as u64 {
            return Err(format!("the hand-rolled upsert wrote {written} rows"));
        }
    }
    Ok(best)
}

/// `random_serial` and `random_upsert`: the dataset with random keys at
/// concurrency 1 into an empty table, against one `COPY` stream and
/// against the hand-rolled upsert, one transaction per day.
pub(crate) async fn random_serial(
    run: &mut Run<'_>,
    rows: &[Record],
) -> Result<[Measurement; 2], String> {
    let (s, kind) = (run.s, run.kind);
    let serial = Settings {
        concurrency: 1,
        ..s.clone()
    };
    let copy = floor_seconds(&mut run.env, rows, 1, s.repeat).await?;
    let upsert = upsert_floor(run, rows).await?;
    let best = best_backfill(run, &serial, Keys::Random).await?;
    let (short, against) = streams_text(kind, 1);
    let serial_line = Measurement {
        rows: s.rows(),
        seconds: best.seconds,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(copy),
        rows_written: best.written,
        peak_rss_bytes: best.peak,
        target: format!("measured: vs {short}"),
        detail: format!(
            "{} days x {} records, random keys, concurrency 1, against {against}",
            s.days, s.per_day
        ),
        ..run.line("random_serial")
    };
    let upsert_line = Measurement {
        scenario: "random_upsert",
        baseline: Some(upsert_name(kind)),
        baseline_seconds: Some(upsert),
        target: "measured: vs hand-rolled upsert".into(),
        detail: format!(
            "the random_serial run against {}, one transaction per day",
            upsert_text(kind)
        ),
        ..serial_line.clone()
    };
    Ok([serial_line, upsert_line])
}

/// `random_days`: the dataset with random keys at the run's concurrency
/// into an empty table, against as many Postgres `COPY` streams as days
/// in flight. Returns the table, holding the dataset, and the floor's
/// seconds, for the scenarios that follow on it.
pub(crate) async fn random_days(
    run: &mut Run<'_>,
    rows: &[Record],
) -> Result<(Measurement, Target, f64), String> {
    let (s, kind) = (run.s, run.kind);
    let streams = match kind {
        Kind::Postgres => s.concurrency,
        _ => 1,
    };
    let floor = floor_seconds(&mut run.env, rows, streams, s.repeat).await?;
    let best = best_backfill(run, s, Keys::Random).await?;
    let (short, against) = streams_text(kind, streams);
    let line = Measurement {
        rows: s.rows(),
        seconds: best.seconds,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(floor),
        rows_written: best.written,
        peak_rss_bytes: best.peak,
        target: format!("measured: vs {short}"),
        detail: format!(
            "{} days x {} records, random keys, concurrency {}, against {against}",
            s.days, s.per_day, s.concurrency
        ),
        ..run.line("random_days")
    };
    Ok((line, best.target, floor))
}

/// `random_rerun`: the random-key dataset again into `target`, which
/// holds it: nothing to write. Against the floor's `copy` seconds (the
/// same rows into an empty table, the best of `s.repeat`); `backfill` is
/// `random_days`' seconds. The best of `s.repeat` re-runs too, each
/// checked: the first reads rows no one has read since they were copied
/// in, and pays the server's one-off work on them (each row's commit
/// looked up and marked on its page), which the detail gives apart. The
/// server is settled first (`Env::settle`): the backfill's pages are not
/// being written out during the re-runs.
pub(crate) async fn random_rerun(
    run: &Run<'_>,
    target: &Target,
    copy: f64,
    backfill: f64,
) -> Result<Measurement, String> {
    let (s, kind) = (run.s, run.kind);
    let mut failures = Vec::new();
    let (mut times, mut written, mut peak, mut wal) = (Vec::new(), 0, 0, None);
    run.env.settle(None).await?;
    for i in 0..s.repeat {
        let (w0, wal0) = (target.rows_written().await?, target.wal_lsn().await?);
        let (report, seconds, run_peak) =
            timed_backfill_keyed(target.store(), job(s), s, Keys::Random).await?;
        let (w1, wal1) = (target.rows_written().await?, target.wal_lsn().await?);
        let run_written = delta(w0, w1)
            .map(|w| w.saturating_sub(ledger_rows(kind, s.days)))
            .unwrap_or(report.totals().written());
        check(run_written == 0, "rows were written", &mut failures);
        check(
            report.totals().unchanged == s.rows(),
            "not all unchanged",
            &mut failures,
        );
        if i == 0 {
            wal = delta(wal0, wal1);
        }
        written += run_written;
        times.push(seconds);
        peak = peak.max(run_peak);
    }
    failures.dedup();
    let first = times[0];
    let best = times.iter().copied().fold(first, f64::min);
    Ok(Measurement {
        rows: s.rows(),
        seconds: best,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(copy),
        rows_written: Some(written),
        wal_bytes: wal,
        speedup: Some(backfill / best),
        peak_rss_bytes: peak,
        target: format!("0 rows written; vs {}", floor_text(kind)),
        pass: Some(failures.is_empty()),
        detail: if failures.is_empty() {
            format!(
                "random_days again, concurrency {}, best of {} (the first {first:.3} s, {:.2}x the floor's time), against {} of the same rows into an empty table",
                s.concurrency,
                s.repeat,
                first / copy,
                floor_text(kind)
            )
        } else {
            failures.join("; ")
        },
        ..run.line("random_rerun")
    })
}

/// `random_lookback` (20 %), `random_lookback_1` and
/// `random_lookback_100`: a day re-fetched with `percent` % of its records
/// changed upstream (every `100 / percent`th), the rest identical, into
/// `target`, which holds the random-key dataset; against the hand-rolled
/// upsert of the same day into a table holding the same rows (loaded by
/// the floor's bulk path). Each side re-fetches `s.repeat` days, one at a
/// time, and the line keeps each side's best: each percentage has days of
/// its own (the last, the one before, the one before that for the first
/// repetition, then three days further back for each next), so that no
/// day's changes are another timing's stored rows, and each day is
/// re-fetched once a side. Each timing is on a settled server
/// (`Env::settle`): a day re-fetched the next morning finds its pages
/// written out at a checkpoint since, and so the first change to each page
/// logs the whole page, on either side. Every repetition is checked.
pub(crate) async fn random_lookback(
    run: &mut Run<'_>,
    target: &Target,
    rows: &[Record],
    percent: u32,
) -> Result<Measurement, String> {
    let s = run.s;
    let (name, back) = match percent {
        20 => ("random_lookback", 1),
        1 => ("random_lookback_1", 2),
        100 => ("random_lookback_100", 3),
        _ => return Err(format!("no lookback line for {percent} %")),
    };
    // Three lines' days a repetition, all of them among the dataset's.
    let repeat = s.repeat.min(s.days.saturating_sub(1) / 3).max(1);
    let every = 100 / percent;
    let days: Vec<Vec<Record>> = (0..repeat)
        .map(|i| {
            let day = nth_day(s.days.saturating_sub(back + 3 * i));
            (0..s.per_day)
                .map(|i| keyed_record(Keys::Random, day, i, i % every == 0))
                .collect()
        })
        .collect();
    let changed = u64::from(s.per_day.div_ceil(every));
    let unchanged = u64::from(s.per_day) - changed;

    let mut floors = Vec::new();
    let same = run.env.fresh(1).await?;
    same.bulk_load(rows).await?;
    for records in &days {
        run.env.settle(None).await?;
        let started = Instant::now();
        let written = same.upsert_by_hand(&[records]).await?;
        floors.push(started.elapsed().as_secs_f64());
        if written != changed {
            return Err(format!("the hand-rolled lookback wrote {written} rows"));
        }
    }
    drop(same);

    let mut ours: Vec<DayRun> = Vec::new();
    let mut ok = true;
    for records in days {
        let day = records[0].event_date();
        run.env.settle(None).await?;
        let one = sync_one(run, target, day, records, Mode::Merge).await?;
        let c = &one.counts;
        ok &= c.updated == changed && c.unchanged == unchanged && one.written == changed;
        ours.push(one);
    }
    let floor = floors.iter().copied().fold(f64::INFINITY, f64::min);
    let kept = ours
        .iter()
        .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
        .ok_or("no lookback day was timed")?;
    let c = &kept.counts;
    Ok(Measurement {
        rows: u64::from(s.per_day),
        seconds: kept.seconds,
        baseline: Some(upsert_name(run.kind)),
        baseline_seconds: Some(floor),
        rows_written: Some(kept.written),
        wal_bytes: kept.wal,
        peak_rss_bytes: ours.iter().map(|o| o.peak).max().unwrap_or(0),
        target: format!("exactly {changed} updated, {unchanged} same"),
        pass: Some(ok),
        detail: format!(
            "{percent} % changed, best of {repeat} days (ours {} s, the upsert's {} s): \
             inserted {} updated {} unchanged {} stale {}; against {}",
            times_text(ours.iter().map(|o| o.seconds)),
            times_text(floors.iter().copied()),
            c.inserted,
            c.updated,
            c.unchanged,
            c.stale,
            upsert_text(run.kind)
        ),
        ..run.line(name)
    })
}

/// Seconds to the millisecond, `/` between them.
fn times_text(times: impl Iterator<Item = f64>) -> String {
    times
        .map(|t| format!("{t:.3}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// `random_stream`: one day of `s.big_day` records with random keys
/// streamed in chunks into an empty table, in a process of its own (so
/// its peak RSS is its own), against the floor of the same rows into an
/// empty table. The stream's timing includes generating the records, which
/// the floor does beforehand.
pub(crate) async fn random_stream(run: &mut Run<'_>) -> Result<Measurement, String> {
    let (n, kind) = (run.s.big_day, run.kind);
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
        return Err(format!("random_stream inserted {}", child.inserted));
    }
    Ok(Measurement {
        rows: u64::from(n),
        seconds: child.seconds,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(floor),
        rows_written: Some(child.written),
        peak_rss_bytes: child.peak,
        target: "peak RSS < 300 MiB".into(),
        pass: Some(child.peak < 300 << 20),
        detail: format!(
            "one day of {n} records, random keys, streamed in chunks of {CHUNK} into an empty \
             table, in a process of its own, against {}",
            floor_text(kind)
        ),
        ..run.line("random_stream")
    })
}

/// `random_large` and `large_upsert` (`--large`): one new day of
/// `s.per_day` random-key records into a table already holding
/// `s.large_table` random-key rows, against `COPY` and against the
/// hand-rolled upsert of a day of the same size into the same table (each
/// a day of its own, so all three find the table in the same state but
/// for the 2 × `s.per_day` rows the others added).
pub(crate) async fn random_large(run: &mut Run<'_>) -> Result<[Measurement; 2], String> {
    let (s, kind) = (run.s, run.kind);
    let per_prefill_day = 100_000;
    let prefill_days = s.large_table.div_ceil(per_prefill_day);
    let big = run.env.fresh(2).await?;
    for d in 0..prefill_days {
        big.bulk_load(&keyed_day(
            Keys::Random,
            nth_day(1 + d),
            per_prefill_day,
            false,
        ))
        .await?;
    }
    let held = u64::from(prefill_days) * u64::from(per_prefill_day);
    let new_day = |d: u32| keyed_day(Keys::Random, nth_day(d), s.per_day, false);

    // Ours first: the floors after it find a table no colder.
    let day = nth_day(0);
    let feed = Feed::new([(day, new_day(0))]);
    reset_peak_rss();
    let started = Instant::now();
    let report = job_at(1)
        .sync_day(big.store(), &|d| fetch_from(&feed, d), day)
        .await
        .map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    let peak = peak_rss();
    if report.counts.inserted != u64::from(s.per_day) {
        return Err(format!("random_large inserted {:?}", report.counts));
    }
    let copy_rows = new_day(prefill_days + 1);
    let started = Instant::now();
    big.bulk_load(&copy_rows).await?;
    let copy = started.elapsed().as_secs_f64();
    let upsert_rows = new_day(prefill_days + 2);
    let started = Instant::now();
    let written = big.upsert_by_hand(&[&upsert_rows]).await?;
    let upsert = started.elapsed().as_secs_f64();
    if written != u64::from(s.per_day) {
        return Err(format!("the hand-rolled upsert wrote {written} rows"));
    }

    let copy_line = Measurement {
        rows: u64::from(s.per_day),
        seconds,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(copy),
        peak_rss_bytes: peak,
        target: format!("measured: vs {}", floor_text(kind)),
        detail: format!(
            "one day of {} records, random keys, into {held} rows, against {} of another such day",
            s.per_day,
            floor_text(kind)
        ),
        ..run.line("random_large")
    };
    let upsert_line = Measurement {
        scenario: "large_upsert",
        baseline: Some(upsert_name(kind)),
        baseline_seconds: Some(upsert),
        target: "measured: vs hand-rolled upsert".into(),
        detail: format!(
            "the random_large day against {} of another such day",
            upsert_text(kind)
        ),
        ..copy_line.clone()
    };
    Ok([copy_line, upsert_line])
}
