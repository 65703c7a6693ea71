//! Why a day's fetch failed, in the words that go into the store's ledger.

use std::fmt;
use std::path::PathBuf;

use backfill_core::{BoxError, Transient};
use chrono::NaiveDate;
use nix::sys::signal::Signal;

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

    /// Boxes the error for [`Fetch`](backfill_core::Fetch), wrapped in
    /// [`Transient`] when [`FetchError::is_transient`], so the job's retry
    /// policy applies.
    pub fn into_boxed(self) -> BoxError {
        if self.is_transient() {
            Box::new(Transient::new(self))
        } else {
            Box::new(self)
        }
    }
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

/// A command line in a message, cut when long.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 200;
        if self.0.len() <= SHOWN {
            return write!(f, "{:?}", self.0);
        }
        let mut end = SHOWN;
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{:?}…", &self.0[..end])
    }
}
