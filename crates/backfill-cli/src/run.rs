//! `sync`, `backfill` and `purge-tombstones`: building the library's job
//! from the options and running it.

use std::ops::RangeInclusive;
use std::sync::Arc;

use backfill_core::{
    BackfillError, DayFailure, Error, Fetch, Job, RunId, RunReport, Select, StopHandle, Store,
};
use chrono::NaiveDate;

use crate::args::{AcceptArgs, BackfillArgs, OnlyArg, PurgeArgs, RunArgs, SyncArgs};
use crate::config::{self, Resolved};
use crate::fetch::{CommandFetch, FileFetch};
use crate::lineage::{self, Ending, Lineage};
use crate::output::{error_text, Output};
use crate::store::{self, Access};
use crate::{Failure, EXIT_DAYS_FAILED, EXIT_INTERRUPTED, EXIT_OK};

/// `backfill sync`.
pub(crate) async fn sync(mut args: SyncArgs, resolved: &Resolved) -> Result<u8, Failure> {
    config::apply(resolved, &mut args.run)?;
    let job = job(&args.run)?;
    let today = job.today();
    let days = match args.day {
        Some(day) => {
            let day = day.resolve(today);
            day..=day
        }
        None => {
            let start = today
                .checked_sub_days(chrono::Days::new(u64::from(args.lookback)))
                .ok_or_else(|| {
                    Failure::Config(format!(
                        "--lookback {} reaches before the calendar",
                        args.lookback
                    ))
                })?;
            start..=today
        }
    };
    execute(&args.run, job, days, 1).await
}

/// `backfill backfill`.
pub(crate) async fn backfill(mut args: BackfillArgs, resolved: &Resolved) -> Result<u8, Failure> {
    config::apply(resolved, &mut args.run)?;
    let concurrency = args.run.settings.concurrency.unwrap_or(1) as usize;
    let mut job = job(&args.run)?;
    let today = job.today();
    let (start, end) = (args.from.resolve(today), args.to.resolve(today));
    if start > end {
        return Err(Failure::Config(format!(
            "--from {start} is after --to {end}"
        )));
    }
    let select = match (args.synced_before, args.only) {
        (Some(at), _) => Select::NotSyncedSince(at),
        (None, OnlyArg::All) => Select::All,
        (None, OnlyArg::Missing) => Select::Missing,
        (None, OnlyArg::Failed) => Select::Failed,
        (None, OnlyArg::MissingOrFailed) => Select::MissingOrFailed,
    };
    job = job.select(select);
    if let Some(shard) = args.shard {
        job = job.shard(shard);
    }
    execute(&args.run, job, start..=end, concurrency).await
}

/// `backfill purge-tombstones`.
pub(crate) async fn purge(mut args: PurgeArgs, resolved: &Resolved) -> Result<u8, Failure> {
    config::apply_store(resolved, &mut args.store)?;
    let store = store::open(&args.store, Access::Write { connections: 1 }).await?;
    let purged = store
        .purge_tombstones(args.before)
        .await
        .map_err(|e| Failure::store(&e, format!("cannot purge tombstones: {e}")))?;
    if args.json {
        println!("{}", serde_json::json!({ "purged": purged }));
    } else {
        println!(
            "purged {purged} tombstones last changed before {}",
            args.before
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        );
    }
    Ok(EXIT_OK)
}

/// `backfill accept`: marks days accepted as they are, or takes that back.
pub(crate) async fn accept(mut args: AcceptArgs, resolved: &Resolved) -> Result<u8, Failure> {
    config::apply_store(resolved, &mut args.store)?;
    let today = chrono::Utc::now().with_timezone(&args.tz).date_naive();
    let days: Vec<NaiveDate> = args.days.iter().map(|d| d.resolve(today)).collect();
    let store = store::open(&args.store, Access::Write { connections: 1 }).await?;
    let at = (!args.undo).then(chrono::Utc::now);
    for day in days {
        store
            .accept(day, at)
            .await
            .map_err(|e| Failure::store(&e, format!("cannot record {day}'s acceptance: {e}")))?;
        match at {
            Some(_) => println!("{day} accepted: the checks no longer flag or refuse it"),
            None => println!("{day} no longer accepted: the checks judge it again"),
        }
    }
    Ok(EXIT_OK)
}

/// The job the effective settings describe, with this run's own options
/// (without its days, selection or shard).
fn job(args: &RunArgs) -> Result<Job, Failure> {
    let mut job = args
        .settings
        .job()
        .map_err(|e| Failure::Config(e.to_string()))?
        .dry_run(args.dry_run);
    if let Some(id) = &args.run_id {
        job = job.run_id(id.as_str());
    }
    Ok(job)
}

/// Opens the store, runs `days` with Ctrl-C handling and progress, prints
/// the report, and returns the exit status.
async fn execute(
    args: &RunArgs,
    job: Job,
    days: RangeInclusive<NaiveDate>,
    concurrency: usize,
) -> Result<u8, Failure> {
    let fetch: Box<dyn Fetch> = match (&args.fetch.fetch_cmd, &args.fetch.fetch_files) {
        (Some(command), _) => Box::new(CommandFetch::new(command.as_str())),
        (None, Some(files)) => Box::new(FileFetch::new(files.as_str())),
        (None, None) => {
            return Err(Failure::Config(
                "no fetch: give --fetch-cmd COMMAND or --fetch-files PATH".into(),
            ))
        }
    };
    // The run's id, chosen now so that the lineage events carry it from
    // the start.
    let run_id = args.run_id.as_deref().map(RunId::from).unwrap_or_default();
    let job = job.run_id(run_id.clone());
    let lineage = Lineage::new(args, &run_id, &days);
    let opened = store::open(
        &args.store,
        Access::Write {
            connections: concurrency + 1,
        },
    )
    .await;
    let store: Box<dyn Store> = match (opened, &lineage) {
        (Ok(store), _) => store,
        (Err(failure), Some(lineage)) => {
            let event = lineage.end(&Ending::CannotRun(failure.to_string()));
            lineage::emit(lineage.sinks(), event).await;
            return Err(failure);
        }
        (Err(failure), None) => return Err(failure),
    };
    // Sent while the run starts; awaited before the run's last event, so
    // that a slow server delays neither the run nor the order of events.
    let started = lineage
        .as_ref()
        .map(|lineage| tokio::spawn(lineage::emit(lineage.sinks(), lineage.start())));

    let stop = StopHandle::new();
    let output = Arc::new(Output::new(args.json));
    let job = job.stop_handle(stop.clone()).observer({
        let output = Arc::clone(&output);
        move |event| output.event(event)
    });
    let resume = resume_command(std::env::args().collect(), &days);
    let interrupts = tokio::spawn(watch_interrupts(
        stop.clone(),
        Arc::clone(&output),
        resume.clone(),
    ));

    let outcome = job.backfill(&*store, &*fetch, days.clone()).await;
    interrupts.abort();
    output.finish();
    let (report, cannot_run): (RunReport, _) = match outcome {
        Ok(report) => (report, None),
        Err(Error::Backfill(failed)) => {
            let cannot_run = cannot_run(&failed, args);
            let failed = *failed;
            let mut report = failed.report;
            reword_failures(&*store, &mut report, &failed.failed).await;
            (report, cannot_run)
        }
        Err(error) => {
            let failure = Failure::store(&error, error.to_string());
            end_lineage(
                lineage.as_ref(),
                started,
                Ending::CannotRun(failure.to_string()),
            )
            .await;
            return Err(failure);
        }
    };
    output.report(&report);
    let cannot_run_text = cannot_run.as_ref().map(ToString::to_string);
    end_lineage(
        lineage.as_ref(),
        started,
        Ending::Ran(&report, cannot_run_text),
    )
    .await;
    export_metrics(args, &*store, &report, &days).await?;
    if let Some(failure) = cannot_run {
        return Err(failure);
    }
    if !report.skipped.is_empty() {
        let n = report.skipped.len();
        output.note(&format!(
            "{n} day{} not started; to resume, run only what is left:\n  {resume}",
            if n == 1 { "" } else { "s" }
        ));
    }
    Ok(if report.stopped {
        EXIT_INTERRUPTED
    } else if !report.failed.is_empty() {
        EXIT_DAYS_FAILED
    } else {
        EXIT_OK
    })
}

/// Sends the run's last lineage event, once its START went.
async fn end_lineage(
    lineage: Option<&Lineage>,
    started: Option<tokio::task::JoinHandle<()>>,
    ending: Ending<'_>,
) {
    if let Some(started) = started {
        let _ = started.await;
    }
    if let Some(lineage) = lineage {
        lineage::emit(lineage.sinks(), lineage.end(&ending)).await;
    }
}

/// Writes the run's metrics file and pushes them, when asked to: a file
/// that cannot be written is an error (the collector would read the last
/// run's numbers as this one's); a push that fails is a warning.
async fn export_metrics(
    args: &RunArgs,
    store: &dyn Store,
    report: &RunReport,
    days: &RangeInclusive<NaiveDate>,
) -> Result<(), Failure> {
    if args.metrics_file.is_none() && args.metrics_push.is_none() {
        return Ok(());
    }
    let table = store::table_label(&args.store);
    // The last success is the ledger's: a run that synced nothing still
    // says when a day last did.
    let last_success = match store.ledger(days.clone()).await {
        Ok(entries) => entries
            .iter()
            .filter_map(|entry| entry.synced.as_ref().map(|synced| synced.at))
            .max(),
        Err(e) => {
            eprintln!("warning: cannot read the ledger for the metrics: {e}");
            None
        }
    };
    let metrics = crate::metrics::RunMetrics {
        table: &table,
        report,
        ended: chrono::Utc::now(),
        last_success,
    };
    let text = metrics.text()?;
    if let Some(path) = &args.metrics_file {
        crate::metrics::write_file(path, &text)?;
    }
    if let Some(url) = &args.metrics_push {
        if let Err(why) = crate::metrics::push(url, &table, text).await {
            eprintln!("warning: {why}");
        }
    }
    Ok(())
}

/// When the run stopped because the fetch cannot run at all (the job saw a
/// [fatal](Error::is_fatal) error, and left the ledger alone): the
/// configuration error, naming the command.
fn cannot_run(failed: &BackfillError, args: &RunArgs) -> Option<Failure> {
    let (_, error) = failed.failed.iter().find(|(_, error)| error.is_fatal())?;
    let why = match error {
        Error::Fetch { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    let fetch = match (&args.fetch.fetch_cmd, &args.fetch.fetch_files) {
        (Some(command), _) => format!("--fetch-cmd {command:?}"),
        (None, Some(files)) => format!("--fetch-files {files:?}"),
        (None, None) => "the fetch".to_owned(),
    };
    Some(Failure::Config(format!(
        "the fetch command cannot run, so no day can succeed: {why} ({fetch}); \
         no other day was started, and the ledger was left as it was"
    )))
}

/// Puts this command's wording ([`error_text`]) in the report and the
/// ledger for the days whose error the library words for a Rust caller:
/// a refused replace names the flag to pass, not "the job's replace
/// guard".
async fn reword_failures(store: &dyn Store, report: &mut RunReport, errors: &[(NaiveDate, Error)]) {
    for (day, error) in errors {
        if !matches!(error, Error::ReplaceRefused { .. }) {
            continue;
        }
        let text = error_text(error);
        if let Some(failed) = report.failed.iter_mut().find(|f| f.day == *day) {
            failed.error.clone_from(&text);
        }
        // The job recorded the failure already; the same failure again,
        // in these words.
        let recorded = match store.ledger(*day..=*day).await {
            Ok(entries) => entries.into_iter().find_map(|e| e.failure),
            Err(_) => None,
        };
        if let Some(recorded) = recorded {
            let failure = DayFailure::new(recorded.at, recorded.run_id, recorded.attempts, &text);
            let _ = store.record_failure(*day, &failure).await;
        }
    }
}

/// The command that runs what this run leaves: the same options over the
/// same days (as dates), with `--only missing-or-failed` for the choice of
/// days, as `backfill backfill` (a `sync`'s days are a range too). A
/// password in `--store` is shown as `***`.
fn resume_command(argv: Vec<String>, days: &RangeInclusive<NaiveDate>) -> String {
    // Options that choose the days, replaced; and `--dry-run`, dropped.
    const CHOOSING: [&str; 6] = [
        "--from",
        "--to",
        "--day",
        "--lookback",
        "--only",
        "--synced-before",
    ];
    let mut line = vec![
        "backfill".to_owned(),
        "backfill".to_owned(),
        "--from".to_owned(),
        days.start().to_string(),
        "--to".to_owned(),
        days.end().to_string(),
        "--only".to_owned(),
        "missing-or-failed".to_owned(),
    ];
    let mut args = argv.into_iter().skip(2);
    while let Some(arg) = args.next() {
        let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
        if CHOOSING.contains(&name) {
            if !arg.contains('=') {
                args.next();
            }
            continue;
        }
        if arg == "--dry-run" {
            continue;
        }
        if let Some(url) = arg.strip_prefix("--store=") {
            line.push(format!("--store={}", store::redact(url)));
        } else if arg == "--store" {
            line.push(arg);
            if let Some(url) = args.next() {
                line.push(store::redact(&url));
            }
        } else {
            line.push(arg);
        }
    }
    line.iter()
        .map(|arg| shell_quote(arg))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `arg` as a POSIX shell reads it back: as it is when it holds nothing
/// the shell would interpret, single-quoted otherwise.
fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// On the first Ctrl-C (or SIGTERM, as a Kubernetes pod or an orchestrator
/// sends), stops starting days; on the second, kills the fetch commands in
/// flight and exits at once: their days roll back.
async fn watch_interrupts(stop: StopHandle, output: Arc<Output>, resume: String) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    for _ in 0..2 {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        if !stop.is_stopped() {
            stop.stop();
            output.note(
                "interrupted: finishing the days in flight, starting no other \
                 (interrupt again to abandon them)",
            );
        } else {
            crate::fetch::kill_running_commands();
            output.last_note(&format!(
                "interrupted again: the days in flight are abandoned and roll back; \
                 to resume, run only what is left:\n  {resume}"
            ));
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &[&str]) -> Vec<String> {
        line.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_resume_command_keeps_the_options_and_runs_what_is_left() {
        let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
        let days = jan(1)..=jan(20);
        let line = resume_command(
            argv(&[
                "/usr/bin/backfill",
                "backfill",
                "--from",
                "today",
                "--to=2026-01-20",
                "--only",
                "all",
                "--dry-run",
                "--store",
                "postgres://app:hunter2@db/x",
                "--fetch-cmd",
                "python3 fetch.py {day} --it's",
                "--concurrency",
                "4",
            ]),
            &days,
        );
        assert_eq!(
            line,
            "backfill backfill --from 2026-01-01 --to 2026-01-20 --only missing-or-failed \
             --store 'postgres://app:***@db/x' --fetch-cmd 'python3 fetch.py {day} --it'\\''s' \
             --concurrency 4"
        );
        let line = resume_command(
            argv(&[
                "backfill",
                "sync",
                "--lookback",
                "3",
                "--fetch-files",
                "x/{day}",
            ]),
            &days,
        );
        assert_eq!(
            line,
            "backfill backfill --from 2026-01-01 --to 2026-01-20 --only missing-or-failed \
             --fetch-files 'x/{day}'"
        );
    }
}
