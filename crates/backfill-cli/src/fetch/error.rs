//! Why a day's fetch failed, in the words that go into the store's ledger.

use std::fmt;
use std::path::PathBuf;

use backfill_core::{BoxError, Fatal, Transient};
use chrono::NaiveDate;
use nix::sys::signal::Signal;

use super::command::{EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND};
use super::EXIT_TEMPFAIL;
use crate::jsonl::ReadError;

/// Why a command or file fetch failed. Its text goes into the store's
/// ledger for the day, so it is one specific paragraph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The command could not be started.
    #[error("cannot start the fetch command (sh -c {}): {error}", Shown(.command))]
    Spawn {
        /// The command line, `{day}` substituted.
        command: String,
        /// Why.
        error: std::io::Error,
    },

    /// Waiting for the command failed.
    #[error("cannot wait for the fetch command: {0}")]
    Wait(std::io::Error),

    /// The command exited with a status other than 0. With status
    /// [`EXIT_TEMPFAIL`] the failure is transient and retried.
    #[error("fetch command exited with status {code}{}", Tail(.stderr))]
    Exit {
        /// The exit status.
        code: i32,
        /// The end of its standard error, trimmed, lines joined by ` | `.
        stderr: String,
    },

    /// The command was killed by a signal.
    #[error("fetch command was killed by signal {signal}{}{}", SignalName(*.signal), Tail(.stderr))]
    Signal {
        /// The signal's number.
        signal: i32,
        /// The end of its standard error, trimmed, lines joined by ` | `.
        stderr: String,
    },

    /// The command exited with status 0, but its standard output was still
    /// open, with nothing more on it, [`STDOUT_GRACE`](super::STDOUT_GRACE)
    /// later: held by a process that left the command's process group
    /// (`setsid`, a daemon), which may yet print. The day may be
    /// incomplete, so none of it is written.
    #[error(
        "fetch command exited with status 0, but its standard output is still held open {} \
         later, by {} outside the command's process group: the day may be incomplete, so \
         nothing of it is written (a background process should not keep the command's \
         output: `… > /dev/null &`)",
        backfill_core::settings::format_duration(*.after),
        Holder(*.pid, .name.as_deref())
    )]
    StdoutHeld {
        /// How long the output had been idle since the command exited.
        after: std::time::Duration,
        /// The process holding it, when it could be found (on Linux).
        pid: Option<i32>,
        /// That process's name.
        name: Option<String>,
    },

    /// The command printed a malformed line (it was killed at once) or its
    /// output could not be read.
    #[error("fetch command output, {0}")]
    Output(ReadError),

    /// The day's file does not exist.
    #[error("no file {} for {day}", .path.display())]
    NoFile {
        /// The path looked for.
        path: PathBuf,
        /// The day.
        day: NaiveDate,
    },

    /// The day's file could not be opened.
    #[error("cannot open {}: {error}", .path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },

    /// The day's file holds a malformed line or could not be read.
    #[error("file {}, {problem}", .path.display())]
    File {
        /// The path.
        path: PathBuf,
        /// The line and what is wrong with it.
        problem: ReadError,
    },
}

impl FetchError {
    /// Whether the job should retry the day: a command that exited with
    /// [`EXIT_TEMPFAIL`].
    pub fn is_transient(&self) -> bool {
        matches!(self, FetchError::Exit { code, .. } if *code == EXIT_TEMPFAIL)
    }

    /// Whether the command cannot run at all, for any day: a configuration
    /// error, on which the job stops its run and leaves the ledger alone.
    /// The shell could not be started (for a reason other than a passing
    /// lack of processes, memory or files), or it said it cannot run the
    /// command: status 126 (found but not executable) or 127 (not found).
    pub fn is_fatal(&self) -> bool {
        match self {
            FetchError::Exit { code, .. } => {
                *code == EXIT_CANNOT_EXECUTE || *code == EXIT_NOT_FOUND
            }
            FetchError::Spawn { error, .. } => !is_passing(error),
            _ => false,
        }
    }

    /// Boxes the error for [`Fetch`](backfill_core::Fetch), wrapped in
    /// [`Transient`] when [`FetchError::is_transient`], so the job's retry
    /// policy applies, or in [`Fatal`] when [`FetchError::is_fatal`], so
    /// the job stops.
    pub fn into_boxed(self) -> BoxError {
        if self.is_fatal() {
            Box::new(Fatal::new(self))
        } else if self.is_transient() {
            Box::new(Transient::new(self))
        } else {
            Box::new(self)
        }
    }
}

/// Whether a failure to start a process is a passing shortage (no process
/// slot, memory or file descriptor to spare) rather than a command that
/// cannot start.
fn is_passing(error: &std::io::Error) -> bool {
    use nix::errno::Errno;
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::WouldBlock | ErrorKind::OutOfMemory | ErrorKind::Interrupted
    ) || error.raw_os_error().is_some_and(|code| {
        matches!(
            Errno::from_raw(code),
            Errno::EAGAIN | Errno::ENOMEM | Errno::EMFILE | Errno::ENFILE | Errno::EINTR
        )
    })
}

/// `: <stderr>` when there is any.
struct Tail<'a>(&'a str);

impl fmt::Display for Tail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, ": {}", self.0)
        }
    }
}

/// ` (SIGKILL)` for a known signal number.
struct SignalName(i32);

impl fmt::Display for SignalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Signal::try_from(self.0) {
            Ok(signal) => write!(f, " ({})", signal.as_str()),
            Err(_) => Ok(()),
        }
    }
}

/// `pid 42 (sleep)`, or what is known of it.
struct Holder<'a>(Option<i32>, Option<&'a str>);

impl fmt::Display for Holder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(pid), Some(name)) => write!(f, "pid {pid} ({name})"),
            (Some(pid), None) => write!(f, "pid {pid}"),
            (None, _) => f.write_str("a process (its pid unknown)"),
        }
    }
}

/// A command line in a message, cut when long.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 200;
        if self.0.len() <= SHOWN {
            return write!(f, "{:?}", self.0);
        }
        write!(f, "{:?}…", backfill_core::text::prefix(self.0, SHOWN))
    }
}
