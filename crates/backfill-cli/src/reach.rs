//! Whether a store error means the store could not be reached — worth
//! running the command again later, exit 3 — rather than a store that was
//! reached and said no, or was named wrong, exit 1.
//!
//! Out of reach (exit 3):
//!
//! - a connection refused, reset, aborted or timed out, a host or network
//!   unreachable, a connection closed under it;
//! - a host name that does not resolve (DNS is often what fails while a
//!   database fails over; a scheduler's retry limit bounds a typo);
//! - Postgres turning connections away for now: SQLSTATE class `08`
//!   (connection exception, but `08P01`, a protocol violation), `57P01`
//!   and `57P02` (admin or crash shutdown), `57P03` (cannot connect now:
//!   starting up, in recovery), `53300` (too many connections);
//! - a SQLite database busy or locked by another process past the busy
//!   timeout while it is opened;
//! - any store error the store itself calls retryable (a lost connection
//!   while the ledger is read at the start of a run).
//!
//! Everything else is a configuration error (exit 1): a malformed URL, a
//! wrong password or role, no such database, a table of another shape,
//! missing rights, a certificate no root vouches for.

use backfill_core::Error;
use backfill_postgres::deadpool_postgres::PoolError;
use backfill_postgres::tokio_postgres;
use rusqlite::ErrorCode;

/// Whether `error`, met opening or reading the store, means the store
/// could not be reached (see the module docs).
pub(crate) fn out_of_reach(error: &Error) -> bool {
    match error {
        Error::Backend { retryable, .. } => *retryable,
        Error::Open { source, .. } => backfill_core::text::causes(&**source).any(is_out_of_reach),
        _ => false,
    }
}

/// Whether one cause in an error's chain says the store is out of reach.
fn is_out_of_reach(cause: &(dyn std::error::Error + 'static)) -> bool {
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        return io_out_of_reach(io);
    }
    if let Some(pg) = cause.downcast_ref::<tokio_postgres::Error>() {
        return pg.is_closed()
            || pg
                .code()
                .is_some_and(|state| state_out_of_reach(state.code()));
    }
    if let Some(pool) = cause.downcast_ref::<PoolError>() {
        return matches!(pool, PoolError::Timeout(_));
    }
    if let Some(sqlite) = cause.downcast_ref::<rusqlite::Error>() {
        return matches!(
            sqlite.sqlite_error_code(),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
        );
    }
    false
}

fn io_out_of_reach(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::TimedOut
            | ErrorKind::AddrNotAvailable
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::NetworkDown
            | ErrorKind::BrokenPipe
            | ErrorKind::UnexpectedEof
    ) ||
        // The standard library's name-resolution failure has no kind of its
        // own, only this text (`getaddrinfo`'s reason follows it).
        error
            .to_string()
            .starts_with("failed to lookup address information")
}

/// Whether Postgres turns connections away for now with this SQLSTATE.
fn state_out_of_reach(code: &str) -> bool {
    match code {
        "08P01" => false,
        class_08 if class_08.starts_with("08") => true,
        "57P01" | "57P02" | "57P03" | "53300" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error as IoError, ErrorKind};

    /// An error whose cause is `cause`, as drivers wrap them.
    #[derive(Debug, thiserror::Error)]
    #[error("error connecting to server")]
    struct Wrapped(#[source] IoError);

    #[test]
    fn connection_failures_are_out_of_reach() {
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::ConnectionReset,
            ErrorKind::TimedOut,
            ErrorKind::HostUnreachable,
            ErrorKind::NetworkUnreachable,
        ] {
            assert!(
                out_of_reach(&Error::open("postgres", IoError::from(kind))),
                "{kind:?}"
            );
            assert!(
                out_of_reach(&Error::open("postgres", Wrapped(IoError::from(kind)))),
                "{kind:?}, as a cause"
            );
        }
        let dns = IoError::other(
            "failed to lookup address information: Temporary failure in name resolution",
        );
        assert!(out_of_reach(&Error::open("postgres", Wrapped(dns))));
        assert!(out_of_reach(&Error::backend("postgres", true, "lost")));
    }

    #[test]
    fn configuration_errors_are_not() {
        for error in [
            Error::open("postgres", "invalid connection string"),
            Error::open("postgres", IoError::from(ErrorKind::PermissionDenied)),
            Error::open("postgres", IoError::from(ErrorKind::InvalidData)),
            Error::open("sqlite", "unable to open database file"),
            Error::backend("postgres", false, "permission denied for schema x"),
            Error::InvalidName {
                what: "table",
                name: "X".into(),
            },
        ] {
            assert!(!out_of_reach(&error), "{error}");
        }
    }

    #[test]
    fn postgres_states_turning_connections_away() {
        for code in ["08000", "08001", "08006", "57P01", "57P03", "53300"] {
            assert!(state_out_of_reach(code), "{code}");
        }
        for code in [
            "08P01", "28P01", "28000", "3D000", "42501", "3F000", "25006",
        ] {
            assert!(!state_out_of_reach(code), "{code}");
        }
    }

    #[test]
    fn sqlite_busy_at_open_is_out_of_reach() {
        let failure = |code| {
            Error::open(
                "sqlite",
                rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None),
            )
        };
        assert!(out_of_reach(&failure(rusqlite::ffi::SQLITE_BUSY)));
        assert!(out_of_reach(&failure(rusqlite::ffi::SQLITE_LOCKED)));
        assert!(!out_of_reach(&failure(rusqlite::ffi::SQLITE_NOTADB)));
        assert!(!out_of_reach(&failure(rusqlite::ffi::SQLITE_CANTOPEN)));
    }
}
