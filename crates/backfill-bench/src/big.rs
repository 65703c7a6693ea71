//! Days of any size and the command line's ingest: one big day against
//! the floor, a streamed day's memory, a day into a large table, and JSON
//! Lines files read by the command's fetcher against the same records
//! handed over in memory.

use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Instant;

use backfill_cli::fetch::FileFetch;
use backfill_core::{Fetched, Job, Record, Retry};
use chrono::NaiveDate;
use futures_util::stream;

use crate::scenarios::{nth_day, record, Settings};
use crate::stores::{peak_rss, reset_peak_rss, Env, Kind, Target};
use crate::Measurement;

/// Records per chunk of a streamed day, as a paged API or the command's
/// reader would hand them over.
const CHUNK: u32 = 10_000;

fn job(concurrency: usize) -> Job {
    Job::new().concurrency(concurrency).retry(Retry::none())
}

/// `n` records of `day`, generated chunk by chunk as the stream is read:
/// never the whole day in memory.
fn streamed(day: NaiveDate, n: u32) -> Fetched {
    let chunks = (0..n.div_ceil(CHUNK)).map(move |c| {
        let end = ((c + 1) * CHUNK).min(n);
        Ok::<_, Infallible>(
            (c * CHUNK..end)
                .map(|i| record(day, i, false))
                .collect::<Vec<_>>(),
        )
    });
    Fetched::stream(stream::iter(chunks))
}

/// What a streamed day did in a child process of its own: its seconds,
/// its peak RSS (a fresh process, so the figure is the streamed day's
/// alone, not memory an earlier scenario left with the allocator), and its
/// counts (written, inserted).
struct Child {
    seconds: f64,
    peak: u64,
    inserted: u64,
    written: u64,
}

/// Streams `n` records of day 0 into `target` from a child process.
async fn stream_in_child(env: &Env, target: &Target, n: u32) -> Result<Child, String> {
    let located = env
        .locate(target)
        .ok_or("no child process for this store")?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = tokio::process::Command::new(exe)
        .arg("--stream-child")
        .arg(n.to_string())
        .args(&located)
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!(
            "streamed day in a child process failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| e.to_string())?;
    Ok(Child {
        seconds: v["seconds"].as_f64().unwrap_or_default(),
        peak: v["peak_rss_bytes"].as_u64().unwrap_or_default(),
        inserted: v["inserted"].as_u64().unwrap_or_default(),
        written: v["written"].as_u64().unwrap_or_default(),
    })
}

/// The child's side of [`stream_in_child`]: `--stream-child N <store…>`.
pub(crate) async fn stream_child(args: &[String]) -> Result<(), String> {
    let (n, located) = args.split_first().ok_or("--stream-child N STORE…")?;
    let n: u32 = n.parse().map_err(|e| format!("{e}"))?;
    let store = crate::stores::open_located(located).await?;
    let fetch = move |d: NaiveDate| async move { Ok::<_, Infallible>(streamed(d, n)) };
    reset_peak_rss();
    let started = Instant::now();
    let report = job(1)
        .sync_day(&*store, &fetch, nth_day(0))
        .await
        .map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "seconds": seconds,
            "peak_rss_bytes": peak_rss(),
            "inserted": report.counts.inserted,
            "written": report.counts.written(),
        })
    );
    Ok(())
}

/// One day of `s.big_day` records (the timings of the streamed forms
/// include generating the records, a SHA-256 each, which the floor and
/// the batch form do beforehand): the floor (COPY or raw insert of the
/// same rows into an empty table with its key), the day as one batch into
/// an empty table, its identical re-run, and the same day streamed in
/// chunks into an empty table; the peak RSS of each.
pub(crate) async fn big_day(
    kind: Kind,
    env: &mut Env,
    s: &Settings,
    base: &Measurement,
) -> Result<Vec<Measurement>, String> {
    let day = nth_day(0);
    let n = s.big_day;
    let mut out = Vec::new();
    let rows: Vec<Record> = (0..n).map(|i| record(day, i, false)).collect();

    let floor = {
        let target = env.fresh(1).await?;
        let started = Instant::now();
        target.bulk_load(&rows).await?;
        started.elapsed().as_secs_f64()
    };

    // The batch form: the fetch hands over the whole day at once.
    let target = env.fresh(1).await?;
    let feed = Mutex::new(Some(rows));
    let fetch = |_: NaiveDate| {
        let records = feed.lock().unwrap().take().unwrap_or_default();
        async move { Ok::<_, Infallible>(records) }
    };
    reset_peak_rss();
    let started = Instant::now();
    let report = job(1)
        .sync_day(target.store(), &fetch, day)
        .await
        .map_err(|e| e.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    let peak = peak_rss();
    if report.counts.inserted != u64::from(n) {
        return Err(format!("big_day inserted {:?}", report.counts));
    }
    let ratio = floor / seconds;
    out.push(Measurement {
        scenario: "big_day",
        rows: u64::from(n),
        seconds,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(floor),
        peak_rss_bytes: peak,
        target: ">= 0.8x the floor, one day".into(),
        pass: (kind != Kind::Memory && !s.quick).then_some(ratio >= 0.8),
        detail: format!("one day of {n} records as one batch into an empty table"),
        ..base.clone()
    });

    // The identical re-run, through the stream form, and the stream form
    // into an empty table: each in a fresh process, for its own peak RSS.
    if kind == Kind::Memory {
        return Ok(out);
    }
    let written_before = target.rows_written().await?;
    let rerun = stream_in_child(env, &target, n).await?;
    let written = crate::scenarios::delta(written_before, target.rows_written().await?)
        .map(|w| w.saturating_sub(crate::scenarios::ledger_rows(kind, 1)));
    out.push(Measurement {
        scenario: "big_rerun",
        rows: u64::from(n),
        seconds: rerun.seconds,
        rows_written: written,
        peak_rss_bytes: rerun.peak,
        target: "0 rows written".into(),
        pass: Some(rerun.written == 0 && written.unwrap_or(0) == 0),
        detail: format!(
            "the same {n} records again, streamed in chunks of {CHUNK}, in a process of its own"
        ),
        ..base.clone()
    });

    let target = env.fresh(1).await?;
    let streamed = stream_in_child(env, &target, n).await?;
    if streamed.inserted != u64::from(n) {
        return Err(format!("big_stream inserted {}", streamed.inserted));
    }
    out.push(Measurement {
        scenario: "big_stream",
        rows: u64::from(n),
        seconds: streamed.seconds,
        baseline: Some(kind.floor()),
        baseline_seconds: Some(floor),
        peak_rss_bytes: streamed.peak,
        target: "peak RSS < 300 MiB".into(),
        pass: Some(streamed.peak < 300 << 20),
        detail: format!("the same day streamed in chunks of {CHUNK} into an empty table, in a process of its own"),
        ..base.clone()
    });
    Ok(out)
}

/// `--large`: a day of 10 000 000 records streamed into an empty table,
/// generated as it is read; peak RSS must stay under 300 MiB.
pub(crate) async fn stream_day(
    env: &mut Env,
    s: &Settings,
    base: &Measurement,
) -> Result<Measurement, String> {
    let n = s.stream_day;
    let target = env.fresh(1).await?;
    let child = stream_in_child(env, &target, n).await?;
    if child.inserted != u64::from(n) {
        return Err(format!("stream_day inserted {}", child.inserted));
    }
    let (seconds, peak) = (child.seconds, child.peak);
    Ok(Measurement {
        scenario: "stream_day",
        rows: u64::from(n),
        seconds,
        peak_rss_bytes: peak,
        target: "peak RSS < 300 MiB".into(),
        pass: Some(peak < 300 << 20),
        detail: format!(
            "one day of {n} records streamed in chunks of {CHUNK}, in a process of its own"
        ),
        ..base.clone()
    })
}

/// `--large`: one new day (`s.per_day` records) into a table already
/// holding `s.large_table` rows, against the same day into an empty table.
pub(crate) async fn scale_large(
    env: &mut Env,
    s: &Settings,
    base: &Measurement,
) -> Result<Measurement, String> {
    let per_prefill_day = 100_000;
    let prefill_days = s.large_table.div_ceil(per_prefill_day);
    let big = env.fresh(2).await?;
    for d in 0..prefill_days {
        let rows: Vec<Record> = (0..per_prefill_day)
            .map(|i| record(nth_day(1 + d), i, false))
            .collect();
        big.bulk_load(&rows).await?;
    }
    let small = env.fresh(1).await?;
    let day = nth_day(0);
    let mut times = Vec::new();
    for target in [&small, &big] {
        let records: Vec<Record> = (0..s.per_day).map(|i| record(day, i, false)).collect();
        let feed = Mutex::new(Some(records));
        let fetch = |_: NaiveDate| {
            let records = feed.lock().unwrap().take().unwrap_or_default();
            async move { Ok::<_, Infallible>(records) }
        };
        let started = Instant::now();
        job(1)
            .sync_day(target.store(), &fetch, day)
            .await
            .map_err(|e| e.to_string())?;
        times.push(started.elapsed().as_secs_f64());
    }
    let growth = times[1] / times[0];
    Ok(Measurement {
        scenario: "scale_large",
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
        ..base.clone()
    })
}

/// The command line's ingest: the dataset as JSON Lines files, one per
/// day, read and parsed by the command's own fetcher (`--fetch-files`),
/// against the same records handed to the same job in memory.
pub(crate) async fn cli_ingest(
    env: &mut Env,
    s: &Settings,
    base: &Measurement,
) -> Result<Measurement, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut days = Vec::new();
    for d in 0..s.days {
        let day = nth_day(d);
        let records: Vec<Record> = (0..s.per_day).map(|i| record(day, i, false)).collect();
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
        let target = env.fresh(s.concurrency + 1).await?;
        let feed = Mutex::new(
            days.iter()
                .cloned()
                .collect::<std::collections::HashMap<_, _>>(),
        );
        let fetch = |day: NaiveDate| {
            let records = feed.lock().unwrap().remove(&day).unwrap_or_default();
            async move { Ok::<_, Infallible>(records) }
        };
        let started = Instant::now();
        job(s.concurrency)
            .backfill(target.store(), &fetch, range.clone())
            .await
            .map_err(|e| e.to_string())?;
        library = library.min(started.elapsed().as_secs_f64());

        let target = env.fresh(s.concurrency + 1).await?;
        let fetch = FileFetch::new(format!("{}/{{day}}.jsonl", dir.path().display()));
        reset_peak_rss();
        let started = Instant::now();
        let report = job(s.concurrency)
            .backfill(target.store(), &fetch, range.clone())
            .await
            .map_err(|e| e.to_string())?;
        files = files.min(started.elapsed().as_secs_f64());
        peak = peak.max(peak_rss());
        if report.totals().inserted != u64::from(s.days) * u64::from(s.per_day) {
            return Err(format!("cli_ingest inserted {:?}", report.totals()));
        }
    }
    let ratio = library / files;
    Ok(Measurement {
        scenario: "cli_ingest",
        rows: u64::from(s.days) * u64::from(s.per_day),
        seconds: files,
        baseline: Some("library_in_memory"),
        baseline_seconds: Some(library),
        peak_rss_bytes: peak,
        target: ">= 0.8x the library path".into(),
        pass: (!s.quick).then_some(ratio >= 0.8),
        detail: format!(
            "{} JSON Lines files read by the command's fetcher vs the same records in memory, concurrency {}",
            s.days, s.concurrency
        ),
        ..base.clone()
    })
}
