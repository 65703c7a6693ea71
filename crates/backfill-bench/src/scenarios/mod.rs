//! The scenarios, each measured on one store against a baseline run in the
//! same process on the same rows: one function per scenario, one file per
//! group of scenarios that share a table or a question, and [`run_store`],
//! which runs them in order.

mod backfill;
mod big;
mod cli;
mod days;
mod measure;
mod parallel;
mod scale;

pub(crate) use big::stream_child;

use crate::settings::Settings;
use crate::stores::Kind;
use crate::Measurement;
use measure::Run;

/// Runs every scenario on one kind of store, in order.
pub(crate) async fn run_store(
    kind: Kind,
    s: &Settings,
    quiet: bool,
) -> Result<Vec<Measurement>, String> {
    let mut run = Run::new(kind, s, quiet).await?;
    let mut out = Vec::new();

    // The whole dataset, then single days into the table it filled.
    let all_rows = measure::all_rows(s);
    if kind == Kind::Postgres && s.concurrency > 1 {
        run.log("backfill_serial");
        out.push(backfill::backfill_serial(&mut run, &all_rows).await?);
    }
    run.log("backfill");
    let (line, target) = backfill::backfill(&mut run, &all_rows).await?;
    let backfill_seconds = line.seconds;
    out.push(line);
    run.log("rerun");
    out.push(backfill::rerun(&run, &target, backfill_seconds).await?);
    run.log("rerun_skip");
    out.push(backfill::rerun_skip(&run, &target, backfill_seconds).await?);
    run.log("changed_day");
    let line = days::changed_day(&run, &target).await?;
    let merge_seconds = line.seconds;
    out.push(line);
    run.log("stale_day");
    out.push(days::stale_day(&run, &target).await?);
    run.log("replace_day");
    out.push(days::replace_day(&run, &target, merge_seconds).await?);
    run.log("replace_rerun");
    out.push(days::replace_rerun(&run, &target, merge_seconds).await?);
    drop(target);

    run.log("scale");
    out.push(scale::scale(&mut run).await?);
    run.log("parallel");
    out.push(parallel::parallel(&mut run).await?);

    // Days of any size, the command line's ingest.
    run.log("big_day");
    let (line, big_target) = big::big_day(&mut run).await?;
    let big_floor = line.baseline_seconds.unwrap_or_default();
    out.push(line);
    if kind != Kind::Memory {
        out.push(big::big_rerun(&run, &big_target).await?);
        out.push(big::big_stream(&mut run, big_floor).await?);
        drop(big_target);
        run.log("cli_ingest");
        out.push(cli::cli_ingest(&mut run).await?);
    }
    if s.large && kind != Kind::Memory {
        run.log("stream_day");
        out.push(big::stream_day(&mut run).await?);
        run.log("scale_large");
        out.push(scale::scale_large(&mut run).await?);
    }
    Ok(out)
}
