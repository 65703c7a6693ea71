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
/// `server` is where the store connects (`host:port`), when it made the
/// pool itself.
pub(crate) fn pool_error(e: PoolError, server: Option<&str>) -> Error {
    let retryable = match &e {
        PoolError::Backend(pg) => retryable(pg),
        PoolError::Timeout(_) => true,
        _ => false,
    };
    Error::backend(BACKEND, retryable, unpooled(e, server))
}

/// What a pool error says happened, without the pool's own wording ("Error
/// occurred while creating a new object"): a refused or failed connection
/// named by the server's address, the server's own error as it is.
pub(crate) fn unpooled(e: PoolError, server: Option<&str>) -> backfill_core::BoxError {
    use std::io::{Error as IoError, ErrorKind};
    let at = server.map_or_else(|| "the server".to_owned(), |s| format!("the server at {s}"));
    // An I/O error of the same kind, so that a caller can still tell a
    // refused or timed-out connection by its kind.
    let io = |kind: ErrorKind, text: String| -> backfill_core::BoxError {
        Box::new(IoError::new(kind, text))
    };
    match e {
        PoolError::Backend(pg) => {
            let cause = std::error::Error::source(&pg).and_then(|s| s.downcast_ref::<IoError>());
            match cause {
                Some(cause) if cause.kind() == ErrorKind::ConnectionRefused => io(
                    ErrorKind::ConnectionRefused,
                    format!("{at} refused the connection (server down?)"),
                ),
                Some(cause) if cause.kind() == ErrorKind::TimedOut => io(
                    ErrorKind::TimedOut,
                    format!("{at} did not answer (connect_timeout)"),
                ),
                // The system's words first (a name that does not resolve
                // is told by them), then where.
                Some(cause) => io(cause.kind(), format!("{cause} (connecting to {at})")),
                None => Box::new(pg),
            }
        }
        PoolError::Timeout(_) => io(
            ErrorKind::TimedOut,
            format!("no connection to {at} within the pool's timeout"),
        ),
        PoolError::Closed => "the store's connection pool is closed".into(),
        PoolError::NoRuntimeSpecified => "the connection pool has no runtime".into(),
        PoolError::PostCreateHook(e) => format!("the pool's post-create hook failed: {e}").into(),
    }
}

/// Where a config connects, as `host:port` (the first host and port), for
/// messages.
pub(crate) fn server_of(config: &tokio_postgres::Config) -> Option<String> {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first()? {
        tokio_postgres::config::Host::Tcp(host) if host.contains(':') => {
            Some(format!("[{host}]:{port}"))
        }
        tokio_postgres::config::Host::Tcp(host) => Some(format!("{host}:{port}")),
        #[cfg(unix)]
        tokio_postgres::config::Host::Unix(dir) => {
            Some(format!("{}/.s.PGSQL.{port}", dir.display()))
        }
    }
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

    /// A server that is not there: the store says so in its own words,
    /// with the address, and the error still reads as unreachable.
    #[tokio::test]
    async fn a_refused_connection_names_the_server_not_the_pool() {
        let store = crate::PostgresStore::builder()
            .connect("postgres://app@127.0.0.1:1/db?connect_timeout=5")
            .await;
        let e = store.expect_err("nothing listens on port 1");
        let text = e.to_string();
        assert_eq!(
            text,
            "postgres: cannot open the store: the server at 127.0.0.1:1 refused the connection (server down?)"
        );
        let backfill_core::Error::Open { source, .. } = &e else {
            panic!("{e:?}");
        };
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an I/O error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);

        // Met while reading or writing, as when the server stops mid-run.
        let config: tokio_postgres::Config = "postgres://app@127.0.0.1:1/db".parse().unwrap();
        let pool = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(
            config.clone(),
            tokio_postgres::NoTls,
        ))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .unwrap();
        let e = pool.get().await.expect_err("refused");
        let e = pool_error(e, server_of(&config).as_deref());
        assert!(e.is_retryable());
        assert_eq!(
            e.to_string(),
            "postgres: the server at 127.0.0.1:1 refused the connection (server down?)"
        );
    }

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
