//! The command line's ingest: the dataset as JSON Lines files, read by the
//! command's own fetcher.

use std::time::Instant;

use backfill_cli::fetch::FileFetch;

use super::measure::{job, Run};
use crate::dataset::{day_records, fetch_from, nth_day, Feed};
use crate::stores::{peak_rss, reset_peak_rss};
use crate::Measurement;

/// `cli_ingest`: the dataset as JSON Lines files, one per day, read and
/// parsed by the command's fetcher (`--fetch-files`), against the same
/// records handed to the same job in memory.
pub(crate) async fn cli_ingest(run: &mut Run<'_>) -> Result<Measurement, String> {
    let s = run.s;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut days = Vec::new();
    for d in 0..s.days {
        let day = nth_day(d);
        let records = day_records(day, s.per_day, false);
        let mut text = String::with_capacity(records.len() * 160);
        for r in &records {
            text.push_str(&format!(
                "{{\"key\":\"{}\",\"event_date\":\"{}\",\"value\":\"{}\",\"updated_at\":\"{}\"}}\n",
                r.key(),
                r.event_date(),
                r.value(),
                r.updated_at()
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            ));
        }
        std::fs::write(dir.path().join(format!("{day}.jsonl")), text).map_err(|e| e.to_string())?;
        days.push((day, records));
    }
    let range = nth_day(0)..=nth_day(s.days - 1);
    let mut library = f64::MAX;
    let mut files = f64::MAX;
    let mut peak = 0;
    for _ in 0..s.repeat {
        let target = run.env.fresh(s.concurrency + 1).await?;
        let feed = Feed::new(days.iter().cloned());
        let started = Instant::now();
        job(s)
            .backfill(target.store(), &|d| fetch_from(&feed, d), range.clone())
            .await
            .map_err(|e| e.to_string())?;
        library = library.min(started.elapsed().as_secs_f64());

        let target = run.env.fresh(s.concurrency + 1).await?;
        let fetch = FileFetch::new(format!("{}/{{day}}.jsonl", dir.path().display()));
        reset_peak_rss();
        let started = Instant::now();
        let report = job(s)
            .backfill(target.store(), &fetch, range.clone())
            .await
            .map_err(|e| e.to_string())?;
        files = files.min(started.elapsed().as_secs_f64());
        peak = peak.max(peak_rss());
        if report.totals().inserted != s.rows() {
            return Err(format!("cli_ingest inserted {:?}", report.totals()));
        }
    }
    let ratio = library / files;
    Ok(Measurement {
        rows: s.rows(),
        seconds: files,
        baseline: Some("library_in_memory"),
        baseline_seconds: Some(library),
        peak_rss_bytes: peak,
        target: ">= 0.8x the library path".into(),
        pass: run.judged(Some(ratio >= 0.8)),
        detail: format!(
            "{} JSON Lines files read by the command's fetcher vs the same records in memory, concurrency {}",
            s.days, s.concurrency
        ),
        ..run.line("cli_ingest")
    })
}
