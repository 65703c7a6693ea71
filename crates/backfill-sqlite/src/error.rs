//! Which SQLite errors are worth a retry.
//!
//! A job retries a day whose error [`is_retryable`](Error::is_retryable), so
//! only a failure that the same batch can get past a moment later is marked
//! retryable. By SQLite's primary result code (extended codes follow their
//! primary):
//!
//! | code | retried | why |
//! |---|---|---|
//! | `SQLITE_BUSY` (incl. `_RECOVERY`, `_SNAPSHOT`, `_TIMEOUT`) | yes | another connection holds the lock past the busy timeout |
//! | `SQLITE_LOCKED` (incl. `_SHAREDCACHE`) | yes | a table lock held by another statement |
//! | `SQLITE_PROTOCOL` | yes | lost a WAL locking race many times over; SQLite itself says to try again |
//! | `SQLITE_SCHEMA` | yes | the schema changed under a statement; a new attempt prepares it again |
//! | anything else | no | the batch or the database is the problem: `READONLY`, `TOOBIG`, `CONSTRAINT`, `FULL`, `IOERR`, `CORRUPT`, `NOTADB`, `CANTOPEN`, `PERM`, `NOMEM`, … |
//!
//! `SQLITE_FULL` and `SQLITE_IOERR` may clear up once someone frees disk
//! space, but not within a job's retry delays; a retry would only hide them.

use backfill_core::Error;
use rusqlite::ErrorCode;

use crate::BACKEND;

/// Whether an error with this primary code may go away if the same write is
/// tried again (see the module docs).
fn is_retryable(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::FileLockingProtocolFailed
            | ErrorCode::SchemaChanged
    )
}

/// A driver error met while reading or writing.
pub(crate) fn backend(e: rusqlite::Error) -> Error {
    let retryable = e.sqlite_error_code().is_some_and(is_retryable);
    Error::backend(BACKEND, retryable, e)
}

/// A driver error met while opening.
pub(crate) fn open(e: impl Into<backfill_core::BoxError>) -> Error {
    Error::open(BACKEND, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lock_contention_retries() {
        for code in [
            ErrorCode::DatabaseBusy,
            ErrorCode::DatabaseLocked,
            ErrorCode::FileLockingProtocolFailed,
            ErrorCode::SchemaChanged,
        ] {
            assert!(is_retryable(code), "{code:?}");
        }
        for code in [
            ErrorCode::ReadOnly,
            ErrorCode::TooBig,
            ErrorCode::ConstraintViolation,
            ErrorCode::DiskFull,
            ErrorCode::SystemIoFailure,
            ErrorCode::DatabaseCorrupt,
            ErrorCode::NotADatabase,
            ErrorCode::CannotOpen,
            ErrorCode::PermissionDenied,
            ErrorCode::OutOfMemory,
            ErrorCode::Unknown,
        ] {
            assert!(!is_retryable(code), "{code:?}");
        }
    }

    #[test]
    fn extended_codes_follow_their_primary() {
        let snapshot = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY_SNAPSHOT),
            None,
        );
        assert!(backend(snapshot).is_retryable());
        let readonly = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY_DBMOVED),
            None,
        );
        assert!(!backend(readonly).is_retryable());
    }
}
