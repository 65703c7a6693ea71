//! A Python fetch as the engine's [`Fetch`]: called on the blocking pool,
//! its iterable drained in bounded chunks, holding the GIL only while it
//! touches Python objects.

use async_trait::async_trait;
use backfill_core::{BoxError, Fetch, Fetched, Record};
use chrono::{DateTime, NaiveDate, Utc};
use pyo3::prelude::*;

use crate::errors::Transient;
use crate::record::{to_record, PyListing};

/// Records a generator yields per chunk handed to the engine.
pub(crate) const CHUNK: usize = 10_000;

/// A Python fetch, as the engine's [`Fetch`].
pub(crate) struct PyFetch {
    pub(crate) func: Py<PyAny>,
}

/// A Python exception as a fetch error: its traceback's text, retryable
/// when it is a `Transient`.
pub(crate) fn fetch_error(py: Python<'_>, e: PyErr) -> BoxError {
    let transient = e.is_instance_of::<Transient>(py);
    let text = traceback_text(py, &e);
    let error: BoxError = text.into();
    if transient {
        Box::new(backfill_core::Transient::new(error))
    } else {
        error
    }
}

pub(crate) fn traceback_text(py: Python<'_>, e: &PyErr) -> String {
    let formatted = py.import("traceback").and_then(|tb| {
        tb.call_method1(
            "format_exception",
            (e.get_type(py), e.value(py), e.traceback(py)),
        )?
        .extract::<Vec<String>>()
    });
    match formatted {
        Ok(lines) => lines.concat().trim_end().to_owned(),
        Err(_) => e.to_string(),
    }
}

#[async_trait]
impl Fetch for PyFetch {
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError> {
        let func = Python::attach(|py| self.func.clone_ref(py));
        // The call itself, on the blocking pool: it may do I/O for a while.
        let started = tokio::task::spawn_blocking(move || {
            Python::attach(
                |py| -> Result<(Py<pyo3::types::PyIterator>, Option<DateTime<Utc>>), BoxError> {
                    let out = func.call1(py, (day,)).map_err(|e| fetch_error(py, e))?;
                    let out = out.bind(py);
                    let (records, as_of) = match out.cast::<PyListing>() {
                        Ok(listing) => (
                            listing.get().records.clone_ref(py),
                            Some(listing.get().as_of),
                        ),
                        Err(_) => (out.clone().unbind(), None),
                    };
                    let iter = records
                        .bind(py)
                        .try_iter()
                        .map_err(|e| fetch_error(py, e))?;
                    Ok((iter.unbind(), as_of))
                },
            )
        })
        .await
        .map_err(|e| -> BoxError { format!("the fetch's thread failed: {e}").into() })??;
        let (iter, as_of) = started;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<Record>, BoxError>>(2);
        tokio::task::spawn_blocking(move || drain(iter, tx));
        let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (chunk, rx))
        });
        let fetched = Fetched::stream(chunks);
        Ok(match as_of {
            Some(as_of) => fetched.as_of(as_of),
            None => fetched,
        })
    }
}

/// Reads `iter` in chunks of [`CHUNK`] records into `tx`, holding the GIL
/// only while it reads; stops at the first error or once the day's
/// consumer is gone.
pub(crate) fn drain(
    iter: Py<pyo3::types::PyIterator>,
    tx: tokio::sync::mpsc::Sender<Result<Vec<Record>, BoxError>>,
) {
    loop {
        let (chunk, done) = Python::attach(|py| {
            let mut iter = iter.bind(py).clone();
            let mut chunk = Vec::with_capacity(CHUNK);
            while chunk.len() < CHUNK {
                let next = match iter.next() {
                    Some(Ok(item)) => item,
                    None => return (Ok(chunk), true),
                    Some(Err(e)) => return (Err(fetch_error(py, e)), true),
                };
                match to_record(&next) {
                    Ok(record) => chunk.push(record),
                    Err(e) => return (Err(fetch_error(py, e)), true),
                }
            }
            (Ok(chunk), false)
        });
        let failed = chunk.is_err();
        if tx.blocking_send(chunk).is_err() || failed || done {
            return;
        }
    }
}
