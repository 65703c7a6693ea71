//! One new day into a table that already holds many: small against large.

use std::time::Instant;

use backfill_core::Record;

use super::measure::{job, job_at, Run};
use crate::dataset::{day_records, fetch_from, nth_day, record, Feed};
use crate::stores::{peak_rss, reset_peak_rss, Kind};
use crate::Measurement;

/// `scale`: one new day into a table of one day against one of
/// `s.scale_days` days, best of at least three rounds.
pub(crate) async fn scale(run: &mut Run<'_>) -> Result<Measurement, String> {
    let (s, kind) = (run.s, run.kind);
    let small = run.env.fresh(1).await?;
    let large = run.env.fresh(1).await?;
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
    Ok(Measurement {
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
        pass: run.judged((kind != Kind::Memory).then_some(growth <= 1.3)),
        detail: format!(
            "one new day into 1 day: {t_small:.4} s, into {} days: {t_large:.4} s, time ratio {growth:.2}",
            s.scale_days
        ),
        ..run.line("scale")
    })
}

/// `scale_large` (`--large`): one new day (`s.per_day` records) into a
/// table already holding `s.large_table` rows, against the same day into
/// an empty table.
pub(crate) async fn scale_large(run: &mut Run<'_>) -> Result<Measurement, String> {
    let s = run.s;
    let per_prefill_day = 100_000;
    let prefill_days = s.large_table.div_ceil(per_prefill_day);
    let big = run.env.fresh(2).await?;
    for d in 0..prefill_days {
        let rows: Vec<Record> = (0..per_prefill_day)
            .map(|i| record(nth_day(1 + d), i, false))
            .collect();
        big.bulk_load(&rows).await?;
    }
    let small = run.env.fresh(1).await?;
    let day = nth_day(0);
    let mut times = Vec::new();
    for target in [&small, &big] {
        let feed = Feed::new([(day, day_records(day, s.per_day, false))]);
        let started = Instant::now();
        job_at(1)
            .sync_day(target.store(), &|d| fetch_from(&feed, d), day)
            .await
            .map_err(|e| e.to_string())?;
        times.push(started.elapsed().as_secs_f64());
    }
    let growth = times[1] / times[0];
    Ok(Measurement {
        rows: u64::from(s.per_day),
        seconds: times[1],
        peak_rss_bytes: peak_rss(),
        target: "time(large table) / time(empty) <= 1.5".into(),
        pass: Some(growth <= 1.5),
        detail: format!(
            "one day of {} records into an empty table: {:.3} s, into {} rows: {:.3} s, ratio {growth:.2}",
            s.per_day,
            times[0],
            u64::from(prefill_days) * u64::from(per_prefill_day),
            times[1]
        ),
        ..run.line("scale_large")
    })
}
