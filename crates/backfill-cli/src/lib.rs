//! The `backfill` command: run, resume and inspect idempotent syncs and
//! backfills from a shell, a cron line or an orchestrator.
//!
//! ```text
//! cargo install --path crates/backfill-cli
//! backfill backfill --from 2026-01-01 --to 2026-01-31 --fetch-cmd 'python3 fetch.py {day}'
//! backfill status --from 2026-01-01 --to 2026-01-31
//! backfill backfill --from 2026-01-01 --to 2026-01-31 --only failed --fetch-cmd 'python3 fetch.py {day}'
//! ```
//!
//! The command wraps the library's [`Job`](backfill_core::Job): every day
//! goes through the same one write path as a Rust program's, into a SQLite
//! file (`sqlite://PATH`, the default `sqlite://backfill.db`) or Postgres
//! (`postgres://…`). `backfill --help` and `backfill <command> --help`
//! describe every option, with examples.
//!
//! # The fetch
//!
//! A fetch is a shell command run once per day (`--fetch-cmd`, `{day}`
//! replaced by the day and `BACKFILL_DAY` set) or one file per day
//! (`--fetch-files 'exports/{day}.jsonl'`), in JSON Lines, one record per
//! line ([`jsonl`] has the format, including how a `value` that is not a
//! string is stored):
//!
//! ```text
//! {"key": "order:1", "event_date": "2026-01-05", "value": {"total": 12.5}, "updated_at": "2026-01-05T10:00:00Z"}
//! {"key": "order:2", "event_date": "2026-01-05", "deleted": true, "updated_at": "2026-01-05T11:00:00Z"}
//! ```
//!
//! The command's exit status says how the day went: 0 success, 75
//! (`EX_TEMPFAIL`) a transient failure the job retries, anything else a
//! failed day, whose error (with the end of the command's stderr) goes into
//! the store's ledger — except 126 and 127, the shell's "cannot execute"
//! and "not found": a command that cannot run fails every day alike, so
//! the run stops at the first day, touches no day's ledger entry, and
//! exits 1 like any other configuration error. Lines are parsed as they arrive; a malformed one
//! fails its day at once with its line number, and nothing of that day is
//! written. A day that takes longer than `--day-timeout` is killed with its
//! whole process group. Once the command exited, a process it started
//! outside its group (`setsid`, a daemon) that holds its standard output
//! open fails the day after 5 s without output, naming that process,
//! rather than at the timeout. If `backfill` itself is killed outright (`SIGKILL`,
//! the OOM killer), its fetch commands die with it: a small watchdog (`sh`,
//! in a process group of its own, the same on every Unix) kills every
//! command's group once `backfill` is gone.
//!
//! # Exit status
//!
//! | status | meaning |
//! |---|---|
//! | 0 | every selected day succeeded |
//! | 2 | some days failed; every other day is written |
//! | 1 | usage or configuration error (a bad option, a fetch command that cannot run, a store that refuses: wrong password, no such database, a table of another shape, missing rights): nothing was run, and running it again will not help |
//! | 3 | the store could not be reached (connection refused or timed out, a server that never answers within the URL's `connect_timeout` (default 30 s), a host name that does not resolve, a server starting up or turning connections away, a SQLite database locked by another process): nothing was run; try again later |
//! | 130 | interrupted: Ctrl-C stops starting days and lets the days in flight finish (a second Ctrl-C abandons them; each rolls back whole) |
//!
//! A scheduler retries 2, 3 and 130, and gives up on 1.
//!
//! # As a library
//!
//! The fetchers are public, for programs that want the same format:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
//! use backfill_cli::fetch::FileFetch;
//! use backfill_core::{sync_day, MemoryStore};
//! use chrono::NaiveDate;
//!
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(
//!     dir.path().join("2026-01-05.jsonl"),
//!     r#"{"key": "order:1", "event_date": "2026-01-05", "value": {"total": 12.5}, "updated_at": "2026-01-05T10:00:00Z"}"#,
//! ).unwrap();
//! let fetch = FileFetch::new(format!("{}/{{day}}.jsonl", dir.path().display()));
//! let store = MemoryStore::new();
//! let day = NaiveDate::from_ymd_opt(2026, 1, 5).unwrap();
//! let report = sync_day(&store, &fetch, day).await?;
//! assert_eq!(report.counts.inserted, 1);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod args;
mod config;
mod export;
mod failure;
pub mod fetch;
pub mod jsonl;
mod lineage;
mod metrics;
mod output;
mod page;
mod reach;
mod run;
mod status;
pub mod store;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use crate::args::{Cli, Command};
pub(crate) use crate::failure::Failure;
pub use crate::failure::{
    EXIT_DAYS_FAILED, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE,
};

/// Runs the command with the process's arguments and returns its exit
/// status.
pub fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            use clap::error::ErrorKind;
            // Help and the version asked for are success; the help shown
            // for a missing subcommand (`backfill` alone) is a usage error.
            let code = match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => EXIT_OK,
                _ => EXIT_ERROR,
            };
            // clap prints help to stdout and errors to stderr.
            let _ = error.print();
            return ExitCode::from(code);
        }
    };
    // The subcommand's flags, for where each setting comes from.
    let Some((_, flags)) = matches.subcommand() else {
        return ExitCode::from(EXIT_ERROR);
    };
    let resolved = match config::resolve(&cli.global, flags) {
        Ok(resolved) => resolved,
        Err(failure) => {
            eprintln!("error: {failure}");
            return ExitCode::from(failure.exit_code());
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let code = runtime.block_on(async {
        let outcome = match cli.command {
            Command::Sync(args) => run::sync(args, &resolved).await,
            Command::Backfill(args) => run::backfill(args, &resolved).await,
            Command::Status(args) => status::run(args, &resolved).await,
            Command::Accept(args) => run::accept(args, &resolved).await,
            Command::PurgeTombstones(args) => run::purge(args, &resolved).await,
            Command::Rows(args) => export::rows(args, &resolved).await,
            Command::History(args) => export::history(args, &resolved).await,
            Command::Config(args) => config::show(&args, &resolved),
        };
        match outcome {
            Ok(code) => code,
            Err(failure) => {
                eprintln!("error: {failure}");
                failure.exit_code()
            }
        }
    });
    // Connections and tasks still open close with the runtime.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    ExitCode::from(code)
}
