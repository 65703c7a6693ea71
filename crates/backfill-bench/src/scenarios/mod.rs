//! The scenarios, each measured on one store against a baseline run in the
//! same process on the same rows: one function per scenario, one file per
//! group of scenarios that share a table or a question, and [`run_store`],
//! which runs them in order.

mod backfill;
mod big;
mod child;
mod cli;
mod columns;
mod days;
mod delta;
mod history;
mod measure;
mod parallel;
mod random;
mod scale;

pub(crate) use child::stream_child;

use crate::settings::Settings;
use crate::stores::Kind;
use crate::Measurement;
use measure::Run;

/// Runs every scenario on one kind of store, in order, group by group
/// (`--only` picks groups; see [`crate::settings::GROUPS`]), then drops
/// the tables it made, whether or not a scenario failed.
pub(crate) async fn run_store(
    kind: Kind,
    s: &Settings,
    quiet: bool,
) -> Result<Vec<Measurement>, String> {
    let mut run = Run::new(kind, s, quiet).await?;
    let mut out = Vec::new();
    let result = run_groups(&mut run, &mut out).await;
    if let Err(e) = run.env.drop_schemas().await {
        run.log(&format!("left its tables behind: {e}"));
    }
    result.map(|()| out)
}

async fn run_groups(run: &mut Run<'_>, out: &mut Vec<Measurement>) -> Result<(), String> {
    let (s, kind) = (run.s, run.kind);
    // The Delta store is measured on realistic keys, against delta-rs.
    if kind == Kind::Delta {
        if s.runs("delta") {
            delta_group(run, out).await?;
        }
        if s.runs("history") {
            run.log("history");
            let rows = random::random_rows(s);
            out.extend(history::history(run, &rows).await?);
        }
        return Ok(());
    }
    if s.runs("backfill") {
        backfill_group(run, out).await?;
    }
    if s.runs("scale") {
        run.log("scale");
        out.push(scale::scale(run).await?);
    }
    if s.runs("parallel") {
        run.log("parallel");
        out.push(parallel::parallel(run).await?);
    }
    if s.runs("big") {
        big_group(run, out).await?;
    }
    if s.runs("cli_ingest") && kind != Kind::Memory {
        run.log("cli_ingest");
        out.extend(cli::cli_ingest(run).await?);
    }
    if s.large && kind != Kind::Memory {
        if s.runs("big") {
            run.log("stream_day");
            out.push(big::stream_day(run).await?);
        }
        if s.runs("scale") {
            run.log("scale_large");
            out.push(scale::scale_large(run).await?);
        }
    }
    // The memory store is the friendly-key scenarios' reference only.
    if s.runs("random") && kind != Kind::Memory {
        random_group(run, out).await?;
    }
    if s.runs("columns") && kind != Kind::Memory {
        run.log("columns");
        out.extend(columns::columns(run).await?);
    }
    if s.runs("history") && kind != Kind::Memory {
        run.log("history");
        let rows = random::random_rows(s);
        out.extend(history::history(run, &rows).await?);
    }
    Ok(())
}

/// The whole dataset, its re-runs, then single days into the table it
/// filled.
async fn backfill_group(run: &mut Run<'_>, out: &mut Vec<Measurement>) -> Result<(), String> {
    let all_rows = measure::all_rows(run.s);
    if run.kind == Kind::Postgres && run.s.concurrency > 1 {
        run.log("backfill_serial");
        out.push(backfill::backfill_serial(run, &all_rows).await?);
    }
    run.log("backfill");
    let (line, target) = backfill::backfill(run, &all_rows).await?;
    let backfill_seconds = line.seconds;
    out.push(line);
    run.log("rerun");
    out.push(backfill::rerun(run, &target, backfill_seconds).await?);
    run.log("rerun_skip");
    out.push(backfill::rerun_skip(run, &target, backfill_seconds).await?);
    run.log("changed_day");
    let line = days::changed_day(run, &target).await?;
    let merge_seconds = line.seconds;
    out.push(line);
    run.log("stale_day");
    out.push(days::stale_day(run, &target).await?);
    run.log("replace_day");
    out.push(days::replace_day(run, &target, merge_seconds).await?);
    run.log("replace_rerun");
    out.push(days::replace_rerun(run, &target, merge_seconds).await?);
    Ok(())
}

/// One big day as a batch, then (not on the memory store) its re-run and
/// the same day streamed, each in a process of its own.
async fn big_group(run: &mut Run<'_>, out: &mut Vec<Measurement>) -> Result<(), String> {
    run.log("big_day");
    let (line, target) = big::big_day(run).await?;
    let floor = line.baseline_seconds.unwrap_or_default();
    out.push(line);
    if run.kind != Kind::Memory {
        out.push(big::big_rerun(run, &target).await?);
        out.push(big::big_stream(run, floor).await?);
    }
    Ok(())
}

/// The dataset with random keys: serial and concurrent, its re-run, a
/// lookback day into the table it filled, a big streamed day, and
/// (`--large`) a day into a 10 000 000-row table.
async fn random_group(run: &mut Run<'_>, out: &mut Vec<Measurement>) -> Result<(), String> {
    let rows = random::random_rows(run.s);
    run.log("random_serial");
    out.extend(random::random_serial(run, &rows).await?);
    run.log("random_days");
    let (line, target, copy) = random::random_days(run, &rows).await?;
    let backfill_seconds = line.seconds;
    out.push(line);
    run.log("random_rerun");
    out.push(random::random_rerun(run, &target, copy, backfill_seconds).await?);
    for (percent, name) in [
        (1, "random_lookback_1"),
        (20, "random_lookback"),
        (100, "random_lookback_100"),
    ] {
        run.log(name);
        out.push(random::random_lookback(run, &target, &rows, percent).await?);
    }
    drop((target, rows));
    run.log("random_stream");
    out.push(random::random_stream(run).await?);
    if run.s.large {
        run.log("random_large");
        out.extend(random::random_large(run).await?);
    }
    Ok(())
}

/// The Delta store: the random-key dataset into a fresh table, serial and
/// concurrent; its re-runs and a lookback day into the table holding it;
/// a big streamed day.
async fn delta_group(run: &mut Run<'_>, out: &mut Vec<Measurement>) -> Result<(), String> {
    let rows = random::random_rows(run.s);
    run.log("delta_serial");
    let (line, floor) = delta::delta_serial(run, &rows).await?;
    out.push(line);
    drop(rows);
    run.log("delta_days");
    let (line, target) = delta::delta_days(run, floor).await?;
    out.push(line);
    run.log("delta_rerun");
    out.extend(delta::delta_reruns(run, &target, floor).await?);
    run.log("delta_lookback");
    out.push(delta::delta_lookback(run, &target).await?);
    drop(target);
    run.log("delta_stream");
    out.push(delta::delta_stream(run).await?);
    Ok(())
}
