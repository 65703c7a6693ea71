//! The Python package `backfill`: the pattern's own API — `Record`,
//! `MemoryStore`, `SqliteStore`, `PostgresStore`, `Job`, `backfill`,
//! `sync_one_day`, `sync_with_lookback` — on the Rust engine. This crate
//! only converts values: every write goes through `backfill_core`'s one
//! write path, exactly as a Rust caller's would.
//!
//! Built as the extension module `backfill._native` by maturin
//! (`pyproject.toml`); the Python side (`python/backfill/`) re-exports it
//! with its stubs. A fetch is any Python callable that takes a
//! `datetime.date` and returns an iterable of records (a generator is
//! consumed in bounded chunks, on a thread of its own, holding the GIL only
//! while it touches Python objects); the store writes with the GIL
//! released.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use backfill_core::{
    BoxError, Counts, DayReport, Error, Fetch, Fetched, Job, MemoryStore, Mode, Record,
    ReplaceGuard, Retry, RunReport, Select, StopHandle, Store,
};
use chrono::{DateTime, NaiveDate, Utc};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

create_exception!(
    _native,
    BackfillError,
    pyo3::exceptions::PyException,
    "Some days of a run failed; `.report` is the whole run's report."
);
create_exception!(
    _native,
    InvalidRecord,
    PyValueError,
    "A record breaks a rule (a naive datetime, a NUL, an oversized key, a date out of range); nothing of its day is written."
);
create_exception!(
    _native,
    StoreError,
    pyo3::exceptions::PyException,
    "The store failed or refused; `.retryable` says whether trying again may succeed."
);
create_exception!(
    _native,
    ReplaceRefused,
    pyo3::exceptions::PyException,
    "The replace guard refused a listing (an empty one, or one deleting more than the job allows); nothing of the day is written."
);
create_exception!(
    _native,
    Transient,
    pyo3::exceptions::PyException,
    "Raise it (or a subclass) from a fetch for a failure worth retrying."
);

/// Records a generator yields per chunk handed to the engine.
const CHUNK: usize = 10_000;

/// The runtime every call runs on, made on first use.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("backfill")
            .build()
            .expect("the backfill runtime starts")
    })
}

/// Runs `future` with the GIL released, checking for Ctrl-C every 100 ms:
/// on one, `stop` is stopped (no new day starts; days in flight commit or
/// roll back whole), the run is awaited, and `KeyboardInterrupt` is raised
/// with what the run returned as its `.report`.
fn run_detached<T, Fut>(py: Python<'_>, stop: Option<StopHandle>, future: Fut) -> (T, Option<PyErr>)
where
    Fut: Future<Output = T> + Send,
    T: Send,
{
    let mut interrupted = None;
    let out = py.detach(|| {
        runtime().block_on(async {
            let mut future = std::pin::pin!(future);
            loop {
                tokio::select! {
                    out = &mut future => return out,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {
                        if interrupted.is_none() {
                            if let Err(e) = Python::attach(|py| py.check_signals()) {
                                interrupted = Some(e);
                                if let Some(stop) = &stop {
                                    stop.stop();
                                }
                            }
                        }
                    }
                }
            }
        })
    });
    (out, interrupted)
}

/// `future` run by [`run_detached`], with an interrupt raised as it is.
fn block<T, Fut>(py: Python<'_>, future: Fut) -> PyResult<T>
where
    Fut: Future<Output = T> + Send,
    T: Send,
{
    match run_detached(py, None, future) {
        (_, Some(interrupt)) => Err(interrupt),
        (out, None) => Ok(out),
    }
}

/// A run's outcome as Python sees it. Interrupted, the run stopped
/// starting days and finished those in flight: `KeyboardInterrupt` is
/// raised with that partial report as its `.report`.
fn finish_run(
    py: Python<'_>,
    out: backfill_core::Result<RunReport>,
    interrupt: Option<PyErr>,
) -> PyResult<PyRunReport> {
    let Some(interrupt) = interrupt else {
        return out.map(Into::into).map_err(to_py);
    };
    let report = match out {
        Ok(report) => Some(report),
        Err(Error::Backfill(failed)) => Some(failed.report),
        Err(_) => None,
    };
    if let Some(report) = report {
        if let Ok(report) = Py::new(py, PyRunReport::from(report)) {
            let _ = interrupt.value(py).setattr("report", report);
        }
    }
    Err(interrupt)
}

/// A record: a key, the day it belongs to, its value and the instant it
/// was last updated upstream (the newest wins), or a tombstone.
#[pyclass(module = "backfill", name = "Record", frozen)]
#[derive(Debug, Clone)]
struct PyRecord {
    inner: Record,
}

#[pymethods]
impl PyRecord {
    /// `Record(key, event_date, value, updated_at, deleted=False)`:
    /// `event_date` a `date` or `"YYYY-MM-DD"`, `updated_at` an aware
    /// `datetime` or an RFC 3339 string, `value` a string (stored as it is)
    /// or any JSON value (stored as canonical JSON: compact, keys sorted).
    #[new]
    #[pyo3(signature = (key, event_date, value=None, updated_at=None, deleted=false))]
    fn new(
        key: &Bound<'_, PyAny>,
        event_date: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        updated_at: Option<&Bound<'_, PyAny>>,
        deleted: bool,
    ) -> PyResult<Self> {
        let key: String = key
            .extract()
            .map_err(|_| InvalidRecord::new_err("key: must be a str"))?;
        let updated_at = updated_at.ok_or_else(|| {
            InvalidRecord::new_err(format!("record {key:?}: updated_at is required"))
        })?;
        let inner = build_record(&key, event_date, value, updated_at, deleted)?;
        Ok(Self { inner })
    }

    #[getter]
    fn key(&self) -> &str {
        self.inner.key()
    }

    #[getter]
    fn event_date(&self) -> NaiveDate {
        self.inner.event_date()
    }

    #[getter]
    fn value(&self) -> &str {
        self.inner.value()
    }

    #[getter]
    fn updated_at(&self) -> DateTime<Utc> {
        self.inner.updated_at()
    }

    #[getter]
    fn deleted(&self) -> bool {
        self.inner.is_deleted()
    }

    fn __repr__(&self) -> String {
        format!(
            "Record(key={:?}, event_date={}, value={:?}, updated_at={}, deleted={})",
            self.inner.key(),
            self.inner.event_date(),
            self.inner.value(),
            self.inner.updated_at().to_rfc3339(),
            if self.inner.is_deleted() {
                "True"
            } else {
                "False"
            }
        )
    }

    fn __eq__(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

/// `event_date` from a `date` or an ISO day.
fn to_date(key: &str, value: &Bound<'_, PyAny>) -> PyResult<NaiveDate> {
    if let Ok(text) = value.cast::<PyString>() {
        let text = text.to_cow()?;
        let text = text.as_ref();
        // Exactly YYYY-MM-DD, as the command line takes a day.
        let shaped = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
        return shaped
            .then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
            .flatten()
            .ok_or_else(|| {
                InvalidRecord::new_err(format!(
                    "record {key:?}: event_date {text:?} is not a YYYY-MM-DD day"
                ))
            });
    }
    if value.is_instance_of::<pyo3::types::PyDateTime>() {
        return Err(InvalidRecord::new_err(format!(
            "record {key:?}: event_date must be a date, not a datetime"
        )));
    }
    let not_a_date = || {
        InvalidRecord::new_err(format!(
            "record {key:?}: event_date must be a date or a YYYY-MM-DD string"
        ))
    };
    if !value.is_instance_of::<pyo3::types::PyDate>() {
        return Err(not_a_date());
    }
    // One call: the proleptic Gregorian ordinal, 1 for 0001-01-01, as
    // chrono counts days from the common era.
    let ordinal: i32 = value
        .call_method0(pyo3::intern!(value.py(), "toordinal"))?
        .extract()?;
    NaiveDate::from_num_days_from_ce_opt(ordinal).ok_or_else(not_a_date)
}

/// `datetime(1970, 1, 1, tzinfo=timezone.utc)`, made once.
fn utc_epoch(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static EPOCH: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    EPOCH
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            let datetime = py.import("datetime")?;
            let utc = datetime.getattr("timezone")?.getattr("utc")?;
            let epoch = datetime
                .getattr("datetime")?
                .call1((1970, 1, 1, 0, 0, 0, 0, utc))?;
            Ok(epoch.unbind())
        })
        .map(|epoch| epoch.bind(py))
}

/// `updated_at` from an aware `datetime` or an RFC 3339 string.
fn to_instant(key: &str, value: &Bound<'_, PyAny>) -> PyResult<DateTime<Utc>> {
    if let Ok(text) = value.cast::<PyString>() {
        let text = text.to_cow()?;
        let text = text.as_ref();
        return DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| {
                InvalidRecord::new_err(format!(
                    "record {key:?}: updated_at {text:?} is not an RFC 3339 instant with an offset"
                ))
            });
    }
    if value.is_instance_of::<pyo3::types::PyDateTime>() {
        // The instant as an exact distance from an aware epoch: one
        // subtraction and three attributes (the stable ABI reads a datetime
        // attribute by attribute). A naive datetime cannot be subtracted
        // from an aware one.
        let py = value.py();
        let naive = || {
            InvalidRecord::new_err(format!(
                "record {key:?}: updated_at is a naive datetime; give it a time zone"
            ))
        };
        let delta = value.sub(utc_epoch(py)?).map_err(|_| naive())?;
        let part = |name: &Bound<'_, PyString>| -> PyResult<i64> { delta.getattr(name)?.extract() };
        let micros = part(pyo3::intern!(py, "days"))? * 86_400_000_000
            + part(pyo3::intern!(py, "seconds"))? * 1_000_000
            + part(pyo3::intern!(py, "microseconds"))?;
        return DateTime::from_timestamp_micros(micros).ok_or_else(|| {
            InvalidRecord::new_err(format!("record {key:?}: updated_at is out of range"))
        });
    }
    Err(InvalidRecord::new_err(format!(
        "record {key:?}: updated_at must be an aware datetime or an RFC 3339 string"
    )))
}

/// A record's `value`: a string as it is, anything else as canonical JSON
/// (compact, object keys sorted at every level), as the command line
/// stores it.
fn to_value(key: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_cow()?.into_owned());
    }
    let py = value.py();
    // `json.dumps(…, allow_nan=False)`, looked up once, not per record.
    static DUMPS: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let dumps = DUMPS.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("allow_nan", false)?;
        let dumps = py.import("json")?.getattr("dumps")?;
        Ok(py
            .import("functools")?
            .getattr("partial")?
            .call((dumps,), Some(&kwargs))?
            .unbind())
    })?;
    let text: String = dumps
        .bind(py)
        .call1((value,))
        .map_err(|e| InvalidRecord::new_err(format!("record {key:?}: value is not JSON: {e}")))?
        .extract()?;
    let parsed: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| InvalidRecord::new_err(format!("record {key:?}: value: {e}")))?;
    Ok(parsed.to_string())
}

fn build_record(
    key: &str,
    event_date: &Bound<'_, PyAny>,
    value: Option<&Bound<'_, PyAny>>,
    updated_at: &Bound<'_, PyAny>,
    deleted: bool,
) -> PyResult<Record> {
    let day = to_date(key, event_date)?;
    let at = to_instant(key, updated_at)?;
    let made = if deleted {
        if value.is_some_and(|v| !v.is_none()) {
            return Err(InvalidRecord::new_err(format!(
                "record {key:?}: a tombstone (deleted=True) has no value"
            )));
        }
        Record::tombstone(key, day, at)
    } else {
        let value = match value {
            Some(v) if !v.is_none() => to_value(key, v)?,
            _ => {
                return Err(InvalidRecord::new_err(format!(
                    "record {key:?}: value is required unless deleted=True"
                )))
            }
        };
        Record::new(key, day, value, at)
    };
    made.map_err(|e| InvalidRecord::new_err(e.to_string()))
}

/// One item a fetch yields: a `Record` or a dict with its fields.
fn to_record<'py>(item: &Bound<'py, PyAny>) -> PyResult<Record> {
    if let Ok(record) = item.cast::<PyRecord>() {
        return Ok(record.get().inner.clone());
    }
    let Ok(dict) = item.cast::<PyDict>() else {
        return Err(InvalidRecord::new_err(format!(
            "a fetch yields Record objects or dicts, not {}",
            item.get_type().name()?
        )));
    };
    let py = item.py();
    let field = |name: &Bound<'py, PyString>| dict.get_item(name);
    let key: String = field(pyo3::intern!(py, "key"))?
        .ok_or_else(|| InvalidRecord::new_err("a record dict has no \"key\""))?
        .extract()
        .map_err(|_| InvalidRecord::new_err("key: must be a str"))?;
    let event_date = field(pyo3::intern!(py, "event_date"))?
        .ok_or_else(|| InvalidRecord::new_err(format!("record {key:?}: no event_date")))?;
    let updated_at = field(pyo3::intern!(py, "updated_at"))?
        .ok_or_else(|| InvalidRecord::new_err(format!("record {key:?}: no updated_at")))?;
    let deleted = match field(pyo3::intern!(py, "deleted"))? {
        Some(d) => d.is_truthy()?,
        None => false,
    };
    let value = field(pyo3::intern!(py, "value"))?;
    build_record(&key, &event_date, value.as_ref(), &updated_at, deleted)
}

/// A replace listing: the day's records as of an instant (`as_of`).
#[pyclass(module = "backfill", name = "Listing", frozen)]
#[derive(Debug)]
struct PyListing {
    records: Py<PyAny>,
    as_of: DateTime<Utc>,
}

#[pymethods]
impl PyListing {
    /// `Listing(records, as_of)`: `records` any iterable, `as_of` an aware
    /// datetime or RFC 3339 string.
    #[new]
    fn new(records: Py<PyAny>, as_of: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Self {
            records,
            as_of: to_instant("listing", as_of)?,
        })
    }
}

/// A Python fetch, as the engine's [`Fetch`].
struct PyFetch {
    func: Py<PyAny>,
}

/// A Python exception as a fetch error: its traceback's text, retryable
/// when it is a `Transient`.
fn fetch_error(py: Python<'_>, e: PyErr) -> BoxError {
    let transient = e.is_instance_of::<Transient>(py);
    let text = traceback_text(py, &e);
    let error: BoxError = text.into();
    if transient {
        Box::new(backfill_core::Transient::new(error))
    } else {
        error
    }
}

fn traceback_text(py: Python<'_>, e: &PyErr) -> String {
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
fn drain(
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

/// The store a Python store object holds.
#[derive(Clone)]
struct Shared(Arc<dyn Store>);

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

/// The store in memory, for tests and notebooks.
#[pyclass(module = "backfill", name = "MemoryStore", frozen)]
#[derive(Debug)]
struct PyMemoryStore {
    store: Shared,
}

#[pymethods]
impl PyMemoryStore {
    #[new]
    fn new() -> Self {
        Self {
            store: Shared(Arc::new(MemoryStore::new())),
        }
    }

    /// Every live record, in key order.
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<PyRecord>> {
        rows(py, &self.store)
    }
}

/// An embedded SQLite file (created if missing).
#[pyclass(module = "backfill", name = "SqliteStore", frozen)]
#[derive(Debug)]
struct PySqliteStore {
    store: Shared,
}

#[pymethods]
impl PySqliteStore {
    /// `SqliteStore(path, table="backfill_records")`; `":memory:"` for a
    /// database of its own in memory.
    #[new]
    #[pyo3(signature = (path, table=None))]
    fn new(py: Python<'_>, path: std::path::PathBuf, table: Option<String>) -> PyResult<Self> {
        let opened = block(py, async move {
            let mut builder = if path.as_os_str() == ":memory:" {
                backfill_sqlite::SqliteStore::builder_in_memory()
            } else {
                backfill_sqlite::SqliteStore::builder(path)
            };
            if let Some(table) = table {
                builder = builder.table(table);
            }
            builder.open().await
        })?;
        let store = opened.map_err(to_py)?;
        Ok(Self {
            store: Shared(Arc::new(store)),
        })
    }

    /// Every live record, in key order.
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<PyRecord>> {
        rows(py, &self.store)
    }
}

/// A Postgres database.
#[pyclass(module = "backfill", name = "PostgresStore", frozen)]
#[derive(Debug)]
struct PyPostgresStore {
    store: Shared,
}

#[pymethods]
impl PyPostgresStore {
    /// `PostgresStore(url, schema="public", table="backfill_records")`.
    #[new]
    #[pyo3(signature = (url, schema=None, table=None))]
    fn new(
        py: Python<'_>,
        url: String,
        schema: Option<String>,
        table: Option<String>,
    ) -> PyResult<Self> {
        let opened = block(py, async move {
            let mut builder = backfill_postgres::PostgresStore::builder();
            if let Some(schema) = schema {
                builder = builder.schema(schema);
            }
            if let Some(table) = table {
                builder = builder.table(table);
            }
            builder.connect(&url).await
        })?;
        let store = opened.map_err(to_py)?;
        Ok(Self {
            store: Shared(Arc::new(store)),
        })
    }

    /// Every live record, in key order.
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<PyRecord>> {
        rows(py, &self.store)
    }
}

fn rows(py: Python<'_>, store: &Shared) -> PyResult<Vec<PyRecord>> {
    let store = store.0.clone();
    let rows = block(py, async move { store.rows().await })?.map_err(to_py)?;
    Ok(rows.into_iter().map(|inner| PyRecord { inner }).collect())
}

/// The store behind any of the Python store objects.
fn store_of(store: &Bound<'_, PyAny>) -> PyResult<Shared> {
    if let Ok(s) = store.cast::<PyMemoryStore>() {
        return Ok(s.get().store.clone());
    }
    if let Ok(s) = store.cast::<PySqliteStore>() {
        return Ok(s.get().store.clone());
    }
    if let Ok(s) = store.cast::<PyPostgresStore>() {
        return Ok(s.get().store.clone());
    }
    Err(pyo3::exceptions::PyTypeError::new_err(
        "store must be a MemoryStore, SqliteStore or PostgresStore",
    ))
}

/// An engine error as the Python exception a user catches.
fn to_py(error: Error) -> PyErr {
    match error {
        Error::InvalidRecord { .. } | Error::WrongDay { .. } => {
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

/// What one day's write did.
#[pyclass(module = "backfill", name = "Counts", frozen, get_all)]
#[derive(Debug, Clone)]
struct PyCounts {
    inserted: u64,
    updated: u64,
    deleted: u64,
    unchanged: u64,
    stale: u64,
    collapsed: u64,
    skipped: u64,
}

impl From<Counts> for PyCounts {
    fn from(c: Counts) -> Self {
        Self {
            inserted: c.inserted,
            updated: c.updated,
            deleted: c.deleted,
            unchanged: c.unchanged,
            stale: c.stale,
            collapsed: c.collapsed,
            skipped: c.skipped,
        }
    }
}

#[pymethods]
impl PyCounts {
    /// Rows written: inserted, updated and deleted.
    #[getter]
    fn written(&self) -> u64 {
        self.inserted + self.updated + self.deleted
    }

    fn __repr__(&self) -> String {
        format!(
            "Counts(inserted={}, updated={}, deleted={}, unchanged={}, stale={}, collapsed={}, skipped={})",
            self.inserted, self.updated, self.deleted, self.unchanged, self.stale, self.collapsed, self.skipped
        )
    }
}

/// One day's outcome.
#[pyclass(module = "backfill", name = "DayReport", frozen, get_all)]
#[derive(Debug, Clone)]
struct PyDayReport {
    day: NaiveDate,
    counts: PyCounts,
    attempts: u32,
}

impl From<DayReport> for PyDayReport {
    fn from(r: DayReport) -> Self {
        Self {
            day: r.day,
            counts: r.counts.into(),
            attempts: r.attempts,
        }
    }
}

/// What a run did, day by day; `str()` is its table.
#[pyclass(module = "backfill", name = "RunReport", frozen)]
#[derive(Debug, Clone)]
struct PyRunReport {
    inner: RunReport,
}

impl From<RunReport> for PyRunReport {
    fn from(inner: RunReport) -> Self {
        Self { inner }
    }
}

#[pymethods]
impl PyRunReport {
    /// One report per synced day, in day order.
    #[getter]
    fn days(&self) -> Vec<PyDayReport> {
        self.inner.days.iter().cloned().map(Into::into).collect()
    }

    /// The failed days, in day order, as `(day, error text)`.
    #[getter]
    fn failed(&self) -> Vec<(NaiveDate, String)> {
        self.inner
            .failed
            .iter()
            .map(|f| (f.day, f.error.clone()))
            .collect()
    }

    /// The days never started (fail fast, or a stopped run).
    #[getter]
    fn skipped(&self) -> Vec<NaiveDate> {
        self.inner.skipped.clone()
    }

    /// The run's totals.
    #[getter]
    fn totals(&self) -> PyCounts {
        self.inner.totals().into()
    }

    /// The run's id, as the ledger rows carry it.
    #[getter]
    fn run_id(&self) -> Option<String> {
        self.inner.run_id.as_ref().map(|r| r.as_str().to_owned())
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }
}

/// The engine's settings, as keyword arguments.
#[pyclass(module = "backfill", name = "Job", frozen)]
#[derive(Debug, Clone)]
struct PyJob {
    concurrency: usize,
    retries: u32,
    retry_delay: f64,
    max_retry_delay: f64,
    mode: Mode,
    allow_empty_replace: bool,
    max_delete_fraction: Option<f64>,
    only: Select,
    skip_unchanged: bool,
    time_zone: Option<String>,
    fail_fast: bool,
    day_timeout: Option<f64>,
    dry_run: bool,
    run_id: Option<String>,
    stream_memory: Option<usize>,
}

impl PyJob {
    fn job(&self, stop: &StopHandle) -> PyResult<Job> {
        let retry = Retry::default()
            .max_attempts(self.retries.saturating_add(1))
            .backoff(secs(self.retry_delay)?, secs(self.max_retry_delay)?);
        let mut guard = ReplaceGuard::default().allow_empty(self.allow_empty_replace);
        if let Some(fraction) = self.max_delete_fraction {
            guard = guard.max_delete_fraction(fraction);
        }
        let mut job = Job::new()
            .concurrency(self.concurrency)
            .retry(retry)
            .mode(self.mode)
            .replace_guard(guard)
            .select(self.only)
            .skip_unchanged(self.skip_unchanged)
            .fail_fast(self.fail_fast)
            .dry_run(self.dry_run)
            .stop_handle(stop.clone())
            .observer(log_event);
        if let Some(zone) = &self.time_zone {
            let zone: chrono_tz::Tz = zone
                .parse()
                .map_err(|_| PyValueError::new_err(format!("unknown time zone {zone:?}")))?;
            job = job.time_zone(zone);
        }
        if let Some(timeout) = self.day_timeout {
            job = job.day_timeout(secs(timeout)?);
        }
        if let Some(run_id) = &self.run_id {
            job = job.run_id(run_id.as_str());
        }
        if let Some(bytes) = self.stream_memory {
            job = job.stream_memory(bytes);
        }
        Ok(job)
    }
}

/// A day's events as lines of Python's `logging`, logger `backfill`: a
/// synced day at INFO, a retry at WARNING, a failed day at ERROR (so that
/// Airflow's and Dagster's log capture show them).
fn log_event(event: &backfill_core::Event<'_>) {
    use backfill_core::Event;
    let (level, line) = match event {
        Event::DayFinished { report } => {
            let c = &report.counts;
            (
                "info",
                format!(
                    "{} synced: inserted {} updated {} deleted {} unchanged {} stale {} skipped {} ({} attempt{})",
                    report.day,
                    c.inserted,
                    c.updated,
                    c.deleted,
                    c.unchanged,
                    c.stale,
                    c.skipped,
                    report.attempts,
                    if report.attempts == 1 { "" } else { "s" }
                ),
            )
        }
        Event::DayRetrying {
            day,
            attempt,
            error,
            delay,
        } => (
            "warning",
            format!("{day} attempt {attempt} failed, retrying in {delay:?}: {error}"),
        ),
        Event::DayFailed {
            day,
            attempts,
            error,
        } => (
            "error",
            format!("{day} FAILED after {attempts} attempt(s): {error}"),
        ),
        _ => return,
    };
    Python::attach(|py| {
        let logged = py
            .import("logging")
            .and_then(|logging| logging.call_method1("getLogger", ("backfill",)))
            .and_then(|logger| logger.call_method1(level, (line,)));
        if let Err(e) = logged {
            e.print(py);
        }
    });
}

fn secs(s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{s} is not a duration in seconds")))
}

fn parse_mode(mode: &str) -> PyResult<Mode> {
    match mode {
        "merge" => Ok(Mode::Merge),
        "replace" => Ok(Mode::Replace),
        other => Err(PyValueError::new_err(format!(
            "mode must be \"merge\" or \"replace\", not {other:?}"
        ))),
    }
}

fn parse_only(only: &str) -> PyResult<Select> {
    match only {
        "all" => Ok(Select::All),
        "missing" => Ok(Select::Missing),
        "failed" => Ok(Select::Failed),
        "missing_or_failed" | "missing-or-failed" => Ok(Select::MissingOrFailed),
        other => Err(PyValueError::new_err(format!(
            "only must be \"all\", \"missing\", \"failed\" or \"missing_or_failed\", not {other:?}"
        ))),
    }
}

#[pymethods]
impl PyJob {
    #[new]
    #[pyo3(signature = (
        *, concurrency=1, retries=2, retry_delay=0.2, max_retry_delay=30.0, mode="merge",
        allow_empty_replace=false, max_delete_fraction=None, only="all", skip_unchanged=false,
        time_zone=None, fail_fast=false, day_timeout=None, dry_run=false, run_id=None,
        stream_memory=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        concurrency: usize,
        retries: u32,
        retry_delay: f64,
        max_retry_delay: f64,
        mode: &str,
        allow_empty_replace: bool,
        max_delete_fraction: Option<f64>,
        only: &str,
        skip_unchanged: bool,
        time_zone: Option<String>,
        fail_fast: bool,
        day_timeout: Option<f64>,
        dry_run: bool,
        run_id: Option<String>,
        stream_memory: Option<usize>,
    ) -> PyResult<Self> {
        let job = Self {
            concurrency: concurrency.max(1),
            retries,
            retry_delay,
            max_retry_delay,
            mode: parse_mode(mode)?,
            allow_empty_replace,
            max_delete_fraction,
            only: parse_only(only)?,
            skip_unchanged,
            time_zone,
            fail_fast,
            day_timeout,
            dry_run,
            run_id,
            stream_memory,
        };
        // Every setting is checked now, not at the first run.
        job.job(&StopHandle::new())?;
        Ok(job)
    }

    /// Syncs every day from `start` to `end` (inclusive) through the one
    /// write path; returns the run's report, or raises `BackfillError`
    /// (with `.report`) if a day failed.
    fn backfill(
        &self,
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        fetch: Py<PyAny>,
        start: NaiveDate,
        end: NaiveDate,
    ) -> PyResult<PyRunReport> {
        let (store, stop) = (store_of(store)?, StopHandle::new());
        let job = self.job(&stop)?;
        let fetch = PyFetch { func: fetch };
        let (out, interrupt) = run_detached(py, Some(stop), async move {
            job.backfill(&*store.0, &fetch, start..=end).await
        });
        finish_run(py, out, interrupt)
    }

    /// The daily job: today (in the job's time zone) and the `lookback`
    /// days before it.
    #[pyo3(signature = (store, fetch, lookback=1))]
    fn sync_with_lookback(
        &self,
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        fetch: Py<PyAny>,
        lookback: u32,
    ) -> PyResult<PyRunReport> {
        let (store, stop) = (store_of(store)?, StopHandle::new());
        let job = self.job(&stop)?;
        let fetch = PyFetch { func: fetch };
        let (out, interrupt) = run_detached(py, Some(stop), async move {
            job.sync_with_lookback(&*store.0, &fetch, lookback).await
        });
        finish_run(py, out, interrupt)
    }

    /// One day (today in the job's time zone when `target_date` is None).
    #[pyo3(signature = (store, fetch, target_date=None))]
    fn sync_one_day(
        &self,
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        fetch: Py<PyAny>,
        target_date: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDayReport> {
        let day = match target_date {
            Some(d) if !d.is_none() => Some(to_date("target_date", d).map_err(|_| {
                PyValueError::new_err(format!(
                    "target_date must be a date or a YYYY-MM-DD string, not {d}"
                ))
            })?),
            _ => None,
        };
        let (store, stop) = (store_of(store)?, StopHandle::new());
        let job = self.job(&stop)?;
        let fetch = PyFetch { func: fetch };
        let day = day.unwrap_or_else(|| job.today());
        let report = block(
            py,
            async move { job.sync_day(&*store.0, &fetch, day).await },
        )?;
        report.map(Into::into).map_err(to_py)
    }

    /// Where each day from `start` to `end` stands in the ledger; `str()`
    /// is the table the command line prints.
    fn status(
        &self,
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        start: NaiveDate,
        end: NaiveDate,
    ) -> PyResult<PyStatus> {
        let (store, stop) = (store_of(store)?, StopHandle::new());
        let job = self.job(&stop)?;
        let status =
            block(py, async move { job.status(&*store.0, start..=end).await })?.map_err(to_py)?;
        Ok(PyStatus {
            text: status.to_string(),
            days: status
                .days
                .iter()
                .map(|d| (d.day, d.state.to_string()))
                .collect(),
        })
    }
}

/// The ledger's view of a range of days.
#[pyclass(module = "backfill", name = "Status", frozen)]
#[derive(Debug)]
struct PyStatus {
    text: String,
    days: Vec<(NaiveDate, String)>,
}

#[pymethods]
impl PyStatus {
    /// Every day of the range with its state: `"missing"`, `"synced"` or
    /// `"failed"`.
    #[getter]
    fn days(&self) -> Vec<(NaiveDate, String)> {
        self.days.clone()
    }

    fn __str__(&self) -> &str {
        &self.text
    }
}

/// `backfill(store, fetch, start, end)` with the default `Job()`.
#[pyfunction]
fn backfill(
    py: Python<'_>,
    store: &Bound<'_, PyAny>,
    fetch: Py<PyAny>,
    start: NaiveDate,
    end: NaiveDate,
) -> PyResult<PyRunReport> {
    default_job()?.backfill(py, store, fetch, start, end)
}

/// `sync_one_day(store, fetch, target_date=None)` with the default `Job()`.
#[pyfunction]
#[pyo3(signature = (store, fetch, target_date=None))]
fn sync_one_day(
    py: Python<'_>,
    store: &Bound<'_, PyAny>,
    fetch: Py<PyAny>,
    target_date: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyDayReport> {
    default_job()?.sync_one_day(py, store, fetch, target_date)
}

/// `sync_with_lookback(store, fetch, lookback=1)` with the default `Job()`.
#[pyfunction]
#[pyo3(signature = (store, fetch, lookback=1))]
fn sync_with_lookback(
    py: Python<'_>,
    store: &Bound<'_, PyAny>,
    fetch: Py<PyAny>,
    lookback: u32,
) -> PyResult<PyRunReport> {
    default_job()?.sync_with_lookback(py, store, fetch, lookback)
}

fn default_job() -> PyResult<PyJob> {
    PyJob::new(
        1, 2, 0.2, 30.0, "merge", false, None, "all", false, None, false, None, false, None, None,
    )
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyRecord>()?;
    m.add_class::<PyListing>()?;
    m.add_class::<PyMemoryStore>()?;
    m.add_class::<PySqliteStore>()?;
    m.add_class::<PyPostgresStore>()?;
    m.add_class::<PyJob>()?;
    m.add_class::<PyRunReport>()?;
    m.add_class::<PyDayReport>()?;
    m.add_class::<PyCounts>()?;
    m.add_class::<PyStatus>()?;
    m.add_function(wrap_pyfunction!(backfill, m)?)?;
    m.add_function(wrap_pyfunction!(sync_one_day, m)?)?;
    m.add_function(wrap_pyfunction!(sync_with_lookback, m)?)?;
    m.add("BackfillError", py.get_type::<BackfillError>())?;
    m.add("InvalidRecord", py.get_type::<InvalidRecord>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("Transient", py.get_type::<Transient>())?;
    m.add("ReplaceRefused", py.get_type::<ReplaceRefused>())?;
    Ok(())
}
