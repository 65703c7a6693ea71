//! The exceptions a Python user catches, and the engine's errors as them.

use backfill_core::Error;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::report::PyRunReport;
create_exception!(
    backfill,
    BackfillError,
    pyo3::exceptions::PyException,
    "Some days of a run failed; `.report` is the whole run's report."
);
create_exception!(
    backfill,
    InvalidRecord,
    PyValueError,
    "A record breaks a rule (a naive datetime, a NUL, an oversized key, a date out of range); nothing of its day is written."
);
create_exception!(
    backfill,
    StoreError,
    pyo3::exceptions::PyException,
    "The store failed or refused; `.retryable` says whether trying again may succeed."
);
create_exception!(
    backfill,
    ReplaceRefused,
    pyo3::exceptions::PyException,
    "The replace guard refused a listing (an empty one, or one deleting more than the job allows); nothing of the day is written."
);
create_exception!(
    backfill,
    Transient,
    pyo3::exceptions::PyException,
    "Raise it (or a subclass) from a fetch for a failure worth retrying."
);

/// An engine error as the Python exception a user catches.
pub(crate) fn to_py(error: Error) -> PyErr {
    match error {
        Error::InvalidRecord { .. } | Error::WrongDay { .. } | Error::InvalidColumn(_) => {
            InvalidRecord::new_err(error.to_string())
        }
        Error::Fetch { ref source, .. } if source.downcast_ref::<RecordRefused>().is_some() => {
            InvalidRecord::new_err(error.to_string())
        }
        Error::ReplaceRefused { .. } => ReplaceRefused::new_err(error.to_string()),
        Error::InvalidRange { .. } | Error::InvalidName { .. } => {
            PyValueError::new_err(error.to_string())
        }
        Error::Backfill(failed) => Python::attach(|py| {
            let err = BackfillError::new_err(failed.to_string());
            let report = Py::new(py, PyRunReport::from(failed.report));
            if let Ok(report) = report {
                let _ = err.value(py).setattr("report", report);
            }
            err
        }),
        other => Python::attach(|py| {
            let retryable = other.is_retryable();
            let err = StoreError::new_err(other.to_string());
            let _ = err.value(py).setattr("retryable", retryable);
            err
        }),
    }
}

/// A record a fetch yielded broke a rule (`InvalidRecord` while it was
/// read): the day fails as for any record the engine refuses, and
/// `sync_one_day` raises `InvalidRecord`.
#[derive(Debug)]
pub(crate) struct RecordRefused(pub(crate) String);

impl std::fmt::Display for RecordRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RecordRefused {}
