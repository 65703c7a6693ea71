//! The command line's ingest: the dataset as JSON Lines files, read by the
//! command's own fetcher.

use std::time::Instant;

use backfill_cli::fetch::FileFetch;

use backfill_core::Fetch;

use super::measure::{check, delta, job, Run};
use crate::dataset::{day_records, fetch_from, nth_day, Feed};
use crate::stores::{peak_rss, reset_peak_rss};
use crate::Measurement;

/// `cli_ingest`: the dataset as JSON Lines files, one per day, read and
/// parsed by the command's fetcher (`--fetch-files`), against the same
/// records handed to the same job in memory.
pub(crate) async fn cli_ingest(run: &mut Run<'_>) -> Result<Vec<Measurement>, String> {
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
    let ingest = Measurement {
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
    };
    let rerun = cli_rerun_skip(run, &dir, range).await?;
    Ok(vec![ingest, rerun])
}

/// `cli_rerun_skip`: the same files again with `--skip-unchanged`, into
/// the table they filled, against what no re-run can avoid — reading and
/// parsing every file, with no store (each day's stream drained, as many
/// days at once as the job runs). Every day is skipped by its digest:
/// nothing written, no record read back.
async fn cli_rerun_skip(
    run: &mut Run<'_>,
    dir: &tempfile::TempDir,
    range: std::ops::RangeInclusive<chrono::NaiveDate>,
) -> Result<Measurement, String> {
    use futures_util::StreamExt;

    let s = run.s;
    let fetch = FileFetch::new(format!("{}/{{day}}.jsonl", dir.path().display()));
    let days: Vec<_> = (0..s.days).map(nth_day).collect();
    let mut parse = f64::MAX;
    for _ in 0..s.repeat {
        let started = Instant::now();
        let counted: Vec<Result<usize, String>> = futures_util::stream::iter(&days)
            .map(|&day| {
                let fetch = &fetch;
                async move {
                    let fetched = fetch.fetch(day).await.map_err(|e| e.to_string())?;
                    let (records, _) = fetched.collect().await.map_err(|e| e.to_string())?;
                    Ok(records.len())
                }
            })
            .buffer_unordered(s.concurrency)
            .collect()
            .await;
        let parsed = counted.into_iter().sum::<Result<usize, String>>()?;
        parse = parse.min(started.elapsed().as_secs_f64());
        if parsed as u64 != s.rows() {
            return Err(format!("cli_rerun_skip parsed {parsed} records"));
        }
    }

    let target = run.env.fresh(s.concurrency + 1).await?;
    job(s)
        .backfill(target.store(), &fetch, range.clone())
        .await
        .map_err(|e| e.to_string())?;
    let mut seconds = f64::MAX;
    let mut written = 0;
    let mut skipped = s.rows();
    reset_peak_rss();
    for _ in 0..s.repeat {
        let w0 = target.rows_written().await?;
        let started = Instant::now();
        let report = job(s)
            .skip_unchanged(true)
            .backfill(target.store(), &fetch, range.clone())
            .await
            .map_err(|e| e.to_string())?;
        seconds = seconds.min(started.elapsed().as_secs_f64());
        let w1 = target.rows_written().await?;
        written += delta(w0, w1).unwrap_or(report.totals().written());
        skipped = skipped.min(report.totals().skipped);
    }
    let mut failures = Vec::new();
    check(written == 0, "rows were written", &mut failures);
    check(
        skipped == s.rows(),
        "not every day skipped by digest",
        &mut failures,
    );
    if !s.quick {
        check(
            seconds <= 1.5 * parse,
            "over 1.5x reading and parsing the files",
            &mut failures,
        );
    }
    let mut detail = format!(
        "the {} files again with --skip-unchanged vs reading and parsing them with no store",
        s.days
    );
    if !failures.is_empty() {
        detail = failures.join("; ");
    }
    Ok(Measurement {
        rows: s.rows(),
        seconds,
        baseline: Some("parse only"),
        baseline_seconds: Some(parse),
        rows_written: Some(written),
        peak_rss_bytes: peak_rss(),
        target: "0 rows, every day skipped, <= 1.5x parsing".into(),
        pass: Some(failures.is_empty()),
        detail,
        ..run.line("cli_rerun_skip")
    })
}
