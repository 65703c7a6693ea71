//! Errors of the Delta store, as backfill's.
//!
//! A commit that lost a race to another writer is not an error: the store
//! checks what the winner changed and commits again or decides the day
//! again (see the crate docs). What reaches the job is retried when the
//! same write may get past it a moment later: an object store's timeout,
//! throttling or dropped connection, or a table still busy after every
//! attempt to commit.

use backfill_core::{BoxError, Error};
use deltalake::errors::DeltaTableError;
use deltalake::ObjectStoreError;

/// The store's name in errors.
pub(crate) const BACKEND: &str = "delta";

/// A result of this crate.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of delta-rs or the object store met while reading or writing.
pub(crate) fn backend(e: DeltaTableError) -> Error {
    let retryable = is_retryable(&e);
    Error::backend(BACKEND, retryable, e)
}

/// A table that does not read as this store wrote it.
pub(crate) fn corrupt(e: impl Into<BoxError>) -> Error {
    Error::backend(BACKEND, false, e)
}

/// A table that cannot be opened or created.
pub(crate) fn open(e: impl Into<BoxError>) -> Error {
    Error::open(BACKEND, e)
}

/// Whether the same write may get past `e` if tried again.
fn is_retryable(e: &DeltaTableError) -> bool {
    match e {
        // A timeout, throttling, a dropped connection (all `Generic` to
        // object_store), or a file that went between the snapshot and the
        // read (a later snapshot will not list it).
        DeltaTableError::ObjectStore { source } => matches!(
            source,
            ObjectStoreError::Generic { .. }
                | ObjectStoreError::NotFound { .. }
                | ObjectStoreError::AlreadyExists { .. }
                | ObjectStoreError::Precondition { .. }
        ),
        DeltaTableError::Io { .. } => true,
        DeltaTableError::VersionAlreadyExists(_) => true,
        DeltaTableError::Transaction { .. } => true,
        _ => false,
    }
}
