//! A Python fetch as the engine's [`Fetch`]: called on the blocking pool,
//! its iterable drained in bounded chunks, holding the GIL only while it
//! touches Python objects.

use async_trait::async_trait;
use backfill_core::{BoxError, Fetch, Fetched, Record};
use chrono::{DateTime, NaiveDate, Utc};
use pyo3::prelude::*;

use crate::errors::{InvalidRecord, RecordRefused, Transient};
use crate::record::{to_record, PyListing};

/// Records a generator yields per chunk handed to the engine.
pub(crate) const CHUNK: usize = 10_000;

/// A Python fetch, as the engine's [`Fetch`].
pub(crate) struct PyFetch {
    pub(crate) func: Py<PyAny>,
}

/// A Python exception as a fetch error: its traceback's text, retryable
/// when it is a `Transient`; a record the fetch yielded that breaks a
/// rule is a [`RecordRefused`], raised as `InvalidRecord`.
pub(crate) fn fetch_error(py: Python<'_>, e: PyErr) -> BoxError {
    if e.is_instance_of::<InvalidRecord>(py) {
        return Box::new(RecordRefused(e.value(py).to_string()));
    }
    let transient = e.is_instance_of::<Transient>(py);
    let text = traceback_text(py, &e);
    let error: BoxError = text.into();
    if transient {
        Box::new(backfill_core::Transient::new(error))
    } else {
        error
    }
}

/// An exception's own line first (`ValueError: upstream said no`, what a
/// one-line view such as `str(status)` shows), then its traceback.
pub(crate) fn traceback_text(py: Python<'_>, e: &PyErr) -> String {
    let formatted = py.import("traceback").and_then(|tb| {
        let only = tb
            .call_method1("format_exception_only", (e.get_type(py), e.value(py)))?
            .extract::<Vec<String>>()?;
        let all = tb
            .call_method1(
                "format_exception",
                (e.get_type(py), e.value(py), e.traceback(py)),
            )?
            .extract::<Vec<String>>()?;
        Ok::<_, PyErr>((only, all))
    });
    match formatted {
        Ok((only, all)) => {
            let line = only.concat();
            let line = line.trim_end();
            let all = all.concat();
            let all = all.trim_end();
            if all == line {
                line.to_owned()
            } else {
                format!("{line}\n\n{all}")
            }
        }
        Err(_) => e.to_string(),
    }
}

/// Where a fetch's records come from: an iterator, or an async iterable
/// read by its own event loop (`backfill._aio.Pump`).
enum Source {
    Sync(Py<pyo3::types::PyIterator>),
    Async(Py<PyAny>),
}

/// `backfill._aio`, imported once.
fn aio(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static AIO: pyo3::sync::PyOnceLock<Py<PyModule>> = pyo3::sync::PyOnceLock::new();
    AIO.get_or_try_init(py, || py.import("backfill._aio").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// Calls the fetch and finds its records: a `Listing`'s or the iterable's,
/// a coroutine awaited first (on an event loop of the fetch's own), an
/// async iterable read by that loop.
fn start(
    py: Python<'_>,
    func: &Py<PyAny>,
    day: NaiveDate,
) -> PyResult<(Source, Option<DateTime<Utc>>)> {
    let mut out = func.call1(py, (day,))?.into_bound(py);
    let aio = aio(py)?;
    let mut pump: Option<Bound<'_, PyAny>> = None;
    if aio.call_method1("is_awaitable", (&out,))?.is_truthy()? {
        let p = aio.getattr("Pump")?.call0()?;
        out = match p.call_method1("run", (&out,)) {
            Ok(out) => out,
            Err(e) => {
                p.call_method0("close")?;
                return Err(e);
            }
        };
        pump = Some(p);
    }
    let (records, as_of) = match out.cast::<PyListing>() {
        Ok(listing) => (
            listing.get().records.clone_ref(py).into_bound(py),
            Some(listing.get().as_of),
        ),
        Err(_) => (out, None),
    };
    if aio
        .call_method1("is_async_iterable", (&records,))?
        .is_truthy()?
    {
        let p = match pump {
            Some(p) => p,
            None => aio.getattr("Pump")?.call0()?,
        };
        p.call_method1("start", (&records,))?;
        return Ok((Source::Async(p.unbind()), as_of));
    }
    if let Some(p) = pump {
        p.call_method0("close")?;
    }
    Ok((Source::Sync(records.try_iter()?.unbind()), as_of))
}

#[async_trait]
impl Fetch for PyFetch {
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError> {
        let func = Python::attach(|py| self.func.clone_ref(py));
        // The call itself, on the blocking pool: it may do I/O for a while.
        let started = tokio::task::spawn_blocking(move || {
            Python::attach(|py| start(py, &func, day).map_err(|e| fetch_error(py, e)))
        })
        .await
        .map_err(|e| -> BoxError { format!("the fetch's thread failed: {e}").into() })??;
        let (source, as_of) = started;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<Record>, BoxError>>(2);
        tokio::task::spawn_blocking(move || match source {
            Source::Sync(iter) => drain(iter, tx),
            Source::Async(pump) => drain_async(pump, tx),
        });
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

/// Reads an async iterable through its `Pump` in chunks of [`CHUNK`]
/// records into `tx`, as [`drain`] does an iterator; closes the pump's
/// loop at the end, whatever happened.
fn drain_async(pump: Py<PyAny>, tx: tokio::sync::mpsc::Sender<Result<Vec<Record>, BoxError>>) {
    loop {
        let (chunk, done) = Python::attach(|py| {
            let taken = pump
                .bind(py)
                .call_method1("take", (CHUNK,))
                .and_then(|t| t.extract::<(Vec<Bound<'_, PyAny>>, bool)>());
            match taken {
                Err(e) => (Err(fetch_error(py, e)), true),
                Ok((items, done)) => {
                    let records: PyResult<Vec<Record>> = items.iter().map(to_record).collect();
                    match records {
                        Ok(records) => (Ok(records), done),
                        Err(e) => (Err(fetch_error(py, e)), true),
                    }
                }
            }
        });
        let failed = chunk.is_err();
        if tx.blocking_send(chunk).is_err() || failed || done {
            break;
        }
    }
    Python::attach(|py| {
        if let Err(e) = pump.bind(py).call_method0("close") {
            e.print(py);
        }
    });
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
