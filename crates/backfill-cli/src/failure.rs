//! How a command ends: its exit codes, and [`Failure`], what stops it
//! before or outside the days' own results.

use crate::reach;

/// Every selected day succeeded.
pub const EXIT_OK: u8 = 0;
/// Usage or configuration error, a store that refuses: nothing was run,
/// and running it again will not help.
pub const EXIT_ERROR: u8 = 1;
/// Some days failed; the others are written.
pub const EXIT_DAYS_FAILED: u8 = 2;
/// The store could not be reached (refused, timed out, not resolved,
/// turning connections away, locked): nothing was run; try again later.
pub const EXIT_UNREACHABLE: u8 = 3;
/// Interrupted by Ctrl-C (SIGINT) or SIGTERM after the days in flight
/// finished or rolled back.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Why the command stops without running its job.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A bad option or combination of options.
    Config(String),
    /// The store could not be opened or read.
    Store(String),
    /// The store could not be reached: worth trying again later.
    Unreachable(String),
}

impl Failure {
    /// A store error, told apart by whether the store was out of reach.
    pub(crate) fn store(error: &backfill_core::Error, message: String) -> Self {
        if reach::out_of_reach(error) {
            Failure::Unreachable(message)
        } else {
            Failure::Store(message)
        }
    }

    /// The command's exit status for it.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Failure::Config(_) | Failure::Store(_) => EXIT_ERROR,
            Failure::Unreachable(_) => EXIT_UNREACHABLE,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Config(message) | Failure::Store(message) | Failure::Unreachable(message) => {
                f.write_str(message)
            }
        }
    }
}
