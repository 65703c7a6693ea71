//! Error classification: which driver errors are worth another try. The
//! table of SQLSTATEs that retry, and why, is in the crate docs
//! (`lib.rs`, "Which errors are retried"); [`retryable_state`] is its code.

use backfill_core::Error;
use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use crate::BACKEND;

/// Whether an error with this SQLSTATE is worth another try (see the
/// module docs for the table and the reasons).
pub(crate) fn retryable_state(state: &SqlState) -> bool {
    match state.code() {
        "08P01" => false, // protocol_violation: the same message fails again
        class_08 if class_08.starts_with("08") => true,
        "40000" | "40001" | "40003" | "40P01" => true,
        "55P03" => true,
        "57014" | "57P01" | "57P02" | "57P03" | "57P05" | "25P03" => true,
        "53000" | "53200" | "53300" => true,
        "72000" => true,
        _ => false,
    }
}

/// Whether a driver error is worth another try.
pub(crate) fn retryable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(state) => retryable_state(state),
        // No SQLSTATE: an I/O error on the socket is a lost connection;
        // anything else (a type conversion, a bad parameter) is final.
        None => std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// A driver error met while reading or writing.
pub(crate) fn pg_error(e: tokio_postgres::Error) -> Error {
    let retryable = retryable(&e);
    Error::backend(BACKEND, retryable, e)
}

/// A pool error met while reading or writing: no connection to be had.
pub(crate) fn pool_error(e: PoolError) -> Error {
    let retryable = match &e {
        PoolError::Backend(pg) => retryable(pg),
        PoolError::Timeout(_) => true,
        _ => false,
    };
    Error::backend(BACKEND, retryable, e)
}

/// A connection the pool could not make within its connect timeout (the
/// server accepted nothing, or accepted and never answered), as an I/O
/// error of kind [`TimedOut`](std::io::ErrorKind::TimedOut).
pub(crate) fn no_answer(after: std::time::Duration) -> Error {
    open_error(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no connection made within {after:?}: the server did not answer (connect_timeout)"),
    ))
}

/// Any error met while opening the store.
pub(crate) fn open_error(e: impl Into<backfill_core::BoxError>) -> Error {
    Error::open(BACKEND, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classification_table() {
        let retry = [
            ("08000", "connection_exception"),
            ("08003", "connection_does_not_exist"),
            ("08006", "connection_failure"),
            ("08001", "sqlclient_unable_to_establish_sqlconnection"),
            ("08004", "sqlserver_rejected_establishment_of_sqlconnection"),
            ("08007", "transaction_resolution_unknown"),
            ("40000", "transaction_rollback"),
            ("40001", "serialization_failure"),
            ("40003", "statement_completion_unknown"),
            ("40P01", "deadlock_detected"),
            ("55P03", "lock_not_available"),
            ("57014", "query_canceled"),
            ("57P01", "admin_shutdown"),
            ("57P02", "crash_shutdown"),
            ("57P03", "cannot_connect_now"),
            ("57P05", "idle_session_timeout"),
            ("25P03", "idle_in_transaction_session_timeout"),
            ("53000", "insufficient_resources"),
            ("53200", "out_of_memory"),
            ("53300", "too_many_connections"),
            ("72000", "snapshot_too_old"),
        ];
        let final_ = [
            ("08P01", "protocol_violation"),
            ("25006", "read_only_sql_transaction"),
            ("25P02", "in_failed_sql_transaction"),
            ("53100", "disk_full"),
            ("53400", "configuration_limit_exceeded"),
            ("54000", "program_limit_exceeded"),
            ("55000", "object_not_in_prerequisite_state"),
            ("55006", "object_in_use"),
            ("57P04", "database_dropped"),
            ("58000", "system_error"),
            ("58030", "io_error"),
            ("XX000", "internal_error"),
            ("XX001", "data_corrupted"),
            ("40002", "transaction_integrity_constraint_violation"),
            ("22001", "string_data_right_truncation"),
            ("23505", "unique_violation"),
            ("23514", "check_violation"),
            ("42501", "insufficient_privilege"),
            ("42P01", "undefined_table"),
            ("28P01", "invalid_password"),
            ("3D000", "invalid_catalog_name"),
            ("0A000", "feature_not_supported"),
        ];
        for (code, name) in retry {
            assert!(retryable_state(&SqlState::from_code(code)), "{code} {name}");
        }
        for (code, name) in final_ {
            assert!(
                !retryable_state(&SqlState::from_code(code)),
                "{code} {name}"
            );
        }
    }
}
