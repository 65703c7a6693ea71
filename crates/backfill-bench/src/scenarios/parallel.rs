//! Many small days whose fetch sleeps: what days in flight buy when the
//! source, not the store, is slow.

use std::time::Instant;

use super::measure::{job_at, Run};
use crate::dataset::{day_records, fetch_from, first_day, nth_day, Feed};
use crate::stores::{peak_rss, reset_peak_rss};
use crate::Measurement;

/// `parallel`: `s.parallel_days` days of `s.parallel_records` records,
/// each fetch sleeping `s.parallel_sleep`, at concurrency 8 against 1.
pub(crate) async fn parallel(run: &mut Run<'_>) -> Result<Measurement, String> {
    let s = run.s;
    let mut times = Vec::new();
    reset_peak_rss();
    for concurrency in [1, 8] {
        let target = run.env.fresh(8).await?;
        let mut feed = Feed::new((0..s.parallel_days).map(|d| {
            (
                nth_day(d),
                day_records(nth_day(d), s.parallel_records, false),
            )
        }));
        feed.sleep = Some(s.parallel_sleep);
        let started = Instant::now();
        job_at(concurrency)
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
    Ok(Measurement {
        rows: u64::from(s.parallel_days * s.parallel_records),
        seconds: times[1],
        baseline: Some("concurrency_1"),
        baseline_seconds: Some(times[0]),
        speedup: Some(speedup),
        peak_rss_bytes: peak_rss(),
        target: "concurrency 8 >= 6x concurrency 1".into(),
        pass: run.judged(Some(speedup >= 6.0)),
        detail: format!(
            "{} days x {} records, fetch sleeps {} ms: {:.3} s at 1, {:.3} s at 8 (ideal {:.3} s)",
            s.parallel_days,
            s.parallel_records,
            s.parallel_sleep.as_millis(),
            times[0],
            times[1],
            f64::from(s.parallel_days) * s.parallel_sleep.as_secs_f64() / 8.0
        ),
        ..run.line("parallel")
    })
}
