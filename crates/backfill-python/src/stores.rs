//! `MemoryStore`, `SqliteStore`, `PostgresStore` and `DeltaStore`: the
//! engine's stores, opened as their builders open them.

use std::sync::Arc;

use backfill_core::columns::Column;
use backfill_core::lineage::{named_secrets, url_password, Dataset};
use backfill_core::{MemoryStore, Store};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::to_py;
use crate::record::PyRecord;
use crate::runtime::block;

/// The store a Python store object holds, and the dataset its lineage
/// events name.
#[derive(Clone)]
pub(crate) struct Shared(pub(crate) Arc<dyn Store>, pub(crate) Arc<Named>);

/// A store as lineage events name it.
#[derive(Debug)]
pub(crate) struct Named {
    /// The table, by OpenLineage's naming conventions.
    pub(crate) dataset: Dataset,
    /// Texts its URL held that no event may carry (a password).
    pub(crate) secrets: Vec<String>,
}

impl Shared {
    fn new(store: Arc<dyn Store>, dataset: Dataset) -> Self {
        Self::with_secrets(store, dataset, Vec::new())
    }

    fn with_secrets(store: Arc<dyn Store>, dataset: Dataset, secrets: Vec<String>) -> Self {
        Self(store, Arc::new(Named { dataset, secrets }))
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

/// The store in memory, for tests and notebooks.
#[pyclass(module = "backfill", name = "MemoryStore", frozen)]
#[derive(Debug)]
pub(crate) struct PyMemoryStore {
    pub(crate) store: Shared,
}

#[pymethods]
impl PyMemoryStore {
    /// `MemoryStore(history=False)`: `history` keeps every version of
    /// every key, read with `history()` and `as_of(instant)`.
    #[new]
    #[pyo3(signature = (history=false))]
    fn new(history: bool) -> Self {
        let store = match history {
            true => MemoryStore::with_history(),
            false => MemoryStore::new(),
        };
        Self {
            store: Shared::new(Arc::new(store), Dataset::new("memory", "backfill_records")),
        }
    }

    /// Every live record, in key order.
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<PyRecord>> {
        rows(py, &self.store)
    }

    /// The live records as they were at `instant` (an aware `datetime` or
    /// an RFC 3339 string), by history, in key order.
    fn as_of(&self, py: Python<'_>, instant: &Bound<'_, PyAny>) -> PyResult<Vec<PyRecord>> {
        as_of(py, &self.store, instant)
    }

    /// Every version of every key, with when it was valid, in key order.
    fn history(&self, py: Python<'_>) -> PyResult<Vec<PyHistoryRow>> {
        history(py, &self.store)
    }

    /// Marks `day` (a date or `YYYY-MM-DD`) accepted as it is: the per-day
    /// checks no longer flag or refuse it, through re-runs; `undo=True`
    /// takes that back.
    #[pyo3(signature = (day, undo=false))]
    fn accept(&self, py: Python<'_>, day: &Bound<'_, PyAny>, undo: bool) -> PyResult<()> {
        accept(py, &self.store, day, undo)
    }
}

/// An embedded SQLite file (created if missing).
#[pyclass(module = "backfill", name = "SqliteStore", frozen)]
#[derive(Debug)]
pub(crate) struct PySqliteStore {
    pub(crate) store: Shared,
}

#[pymethods]
impl PySqliteStore {
    /// `SqliteStore(path, table="backfill_records", columns=[],
    /// allow_column_changes=False)`; `":memory:"` for a database of its own
    /// in memory. `columns` declares typed columns as the command line's
    /// `--column` does (`"total_cents:integer"`,
    /// `"customer:text?=customer.id"`); `allow_column_changes` lets opening
    /// drop the table's typed columns the declaration lacks and remake
    /// those it declares with another type, instead of refusing the table;
    /// `history` keeps every version of every key beside the table (the
    /// view `<table>_history`), read with `history()` and
    /// `as_of(instant)`: turned on for a table with rows, it starts from
    /// them, and once on it stays on.
    #[new]
    #[pyo3(signature = (path, table=None, columns=None, allow_column_changes=false, history=false))]
    pub(crate) fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        table: Option<String>,
        columns: Option<Vec<String>>,
        allow_column_changes: bool,
        history: bool,
    ) -> PyResult<Self> {
        let columns = declared(columns)?;
        let in_memory = path.as_os_str() == ":memory:";
        let file = path.clone();
        let opened = block(py, async move {
            let mut builder = if in_memory {
                backfill_sqlite::SqliteStore::builder_in_memory()
            } else {
                backfill_sqlite::SqliteStore::builder(path)
            };
            if let Some(table) = table {
                builder = builder.table(table);
            }
            builder
                .columns(columns)
                .allow_column_changes(allow_column_changes)
                .history(history)
                .open()
                .await
        })?;
        let store = opened.map_err(to_py)?;
        let dataset = match in_memory {
            true => Dataset::new("sqlite://:memory:", store.table()),
            false => Dataset::sqlite(&file, store.table()),
        };
        Ok(Self {
            store: Shared::new(Arc::new(store), dataset),
        })
    }

    /// Every live record, in key order.
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<PyRecord>> {
        rows(py, &self.store)
    }

    /// The live records as they were at `instant` (an aware `datetime` or
    /// an RFC 3339 string), by history, in key order.
    fn as_of(&self, py: Python<'_>, instant: &Bound<'_, PyAny>) -> PyResult<Vec<PyRecord>> {
        as_of(py, &self.store, instant)
    }

    /// Every version of every key, with when it was valid, in key order.
    fn history(&self, py: Python<'_>) -> PyResult<Vec<PyHistoryRow>> {
        history(py, &self.store)
    }

    /// Marks `day` (a date or `YYYY-MM-DD`) accepted as it is: the per-day
    /// checks no longer flag or refuse it, through re-runs; `undo=True`
    /// takes that back.
    #[pyo3(signature = (day, undo=false))]
    fn accept(&self, py: Python<'_>, day: &Bound<'_, PyAny>, undo: bool) -> PyResult<()> {
        accept(py, &self.store, day, undo)
    }
}

/// A Postgres database.
#[pyclass(module = "backfill", name = "PostgresStore", frozen)]
#[derive(Debug)]
pub(crate) struct PyPostgresStore {
    pub(crate) store: Shared,
}

#[pymethods]
impl PyPostgresStore {
    /// `PostgresStore(url, schema="public", table="backfill_records",
    /// columns=[], allow_column_changes=False)`; `columns` and
    /// `allow_column_changes` and `history` as `SqliteStore`'s.
    #[new]
    #[pyo3(signature = (url, schema=None, table=None, columns=None, allow_column_changes=false, history=false))]
    pub(crate) fn new(
        py: Python<'_>,
        url: String,
        schema: Option<String>,
        table: Option<String>,
        columns: Option<Vec<String>>,
        allow_column_changes: bool,
        history: bool,
    ) -> PyResult<Self> {
        let columns = declared(columns)?;
        let secrets = url_password(&url).into_iter().collect();
        let named = url.clone();
        let opened = block(py, async move {
            let mut builder = backfill_postgres::PostgresStore::builder();
            if let Some(schema) = schema {
                builder = builder.schema(schema);
            }
            if let Some(table) = table {
                builder = builder.table(table);
            }
            builder
                .columns(columns)
                .allow_column_changes(allow_column_changes)
                .history(history)
                .connect(&url)
                .await
        })?;
        let store = opened.map_err(to_py)?;
        let dataset = Dataset::postgres(&named, store.schema(), store.table());
        Ok(Self {
            store: Shared::with_secrets(Arc::new(store), dataset, secrets),
        })
    }

    /// Every live record, in key order.
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<PyRecord>> {
        rows(py, &self.store)
    }

    /// The live records as they were at `instant` (an aware `datetime` or
    /// an RFC 3339 string), by history, in key order.
    fn as_of(&self, py: Python<'_>, instant: &Bound<'_, PyAny>) -> PyResult<Vec<PyRecord>> {
        as_of(py, &self.store, instant)
    }

    /// Every version of every key, with when it was valid, in key order.
    fn history(&self, py: Python<'_>) -> PyResult<Vec<PyHistoryRow>> {
        history(py, &self.store)
    }

    /// Marks `day` (a date or `YYYY-MM-DD`) accepted as it is: the per-day
    /// checks no longer flag or refuse it, through re-runs; `undo=True`
    /// takes that back.
    #[pyo3(signature = (day, undo=false))]
    fn accept(&self, py: Python<'_>, day: &Bound<'_, PyAny>, undo: bool) -> PyResult<()> {
        accept(py, &self.store, day, undo)
    }
}

/// One row of history: a version of a key (its record's fields) and the
/// instants it was valid between (`valid_to` `None` while it is the
/// newest). A delete is a row with `deleted` true.
#[pyclass(module = "backfill", name = "HistoryRow", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct PyHistoryRow {
    inner: backfill_core::HistoryRow,
}

#[pymethods]
impl PyHistoryRow {
    #[getter]
    fn key(&self) -> &str {
        self.inner.record.key()
    }

    #[getter]
    fn event_date(&self) -> chrono::NaiveDate {
        self.inner.record.event_date()
    }

    #[getter]
    fn value(&self) -> &str {
        self.inner.record.value()
    }

    #[getter]
    fn updated_at(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner.record.updated_at()
    }

    #[getter]
    fn deleted(&self) -> bool {
        self.inner.record.is_deleted()
    }

    /// When this version became the key's: its `updated_at`.
    #[getter]
    fn valid_from(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner.valid_from()
    }

    /// When the next version took over; `None` while this is the newest.
    #[getter]
    fn valid_to(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.inner.valid_to
    }

    /// The version as a `Record`.
    #[getter]
    fn record(&self) -> PyRecord {
        PyRecord {
            inner: self.inner.record.clone(),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "HistoryRow(key={:?}, value={:?}, deleted={}, valid_from={}, valid_to={})",
            self.inner.record.key(),
            self.inner.record.value(),
            if self.inner.record.is_deleted() {
                "True"
            } else {
                "False"
            },
            self.inner.valid_from().to_rfc3339(),
            self.inner
                .valid_to
                .map_or_else(|| "None".to_owned(), |to| to.to_rfc3339()),
        )
    }

    fn __eq__(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

pub(crate) fn as_of(
    py: Python<'_>,
    store: &Shared,
    instant: &Bound<'_, PyAny>,
) -> PyResult<Vec<PyRecord>> {
    let at = crate::record::to_instant("as_of", instant).map_err(|_| {
        PyValueError::new_err("as_of: the instant must be an aware datetime or an RFC 3339 string")
    })?;
    let store = store.0.clone();
    let rows = block(py, async move { store.as_of(at).await })?.map_err(to_py)?;
    Ok(rows.into_iter().map(|inner| PyRecord { inner }).collect())
}

pub(crate) fn accept(
    py: Python<'_>,
    store: &Shared,
    day: &Bound<'_, PyAny>,
    undo: bool,
) -> PyResult<()> {
    let day = crate::record::to_date("day", day)
        .map_err(|_| PyValueError::new_err("day: a date or a YYYY-MM-DD string"))?;
    let at = (!undo).then(chrono::Utc::now);
    let store = store.0.clone();
    block(py, async move { store.accept(day, at).await })?.map_err(to_py)
}

pub(crate) fn history(py: Python<'_>, store: &Shared) -> PyResult<Vec<PyHistoryRow>> {
    let store = store.0.clone();
    let rows = block(py, async move { store.history().await })?.map_err(to_py)?;
    Ok(rows
        .into_iter()
        .map(|inner| PyHistoryRow { inner })
        .collect())
}

pub(crate) fn rows(py: Python<'_>, store: &Shared) -> PyResult<Vec<PyRecord>> {
    let store = store.0.clone();
    let rows = block(py, async move { store.rows().await })?.map_err(to_py)?;
    Ok(rows.into_iter().map(|inner| PyRecord { inner }).collect())
}

/// The store behind any of the Python store objects.
pub(crate) fn store_of(store: &Bound<'_, PyAny>) -> PyResult<Shared> {
    if let Ok(s) = store.cast::<PyMemoryStore>() {
        return Ok(s.get().store.clone());
    }
    if let Ok(s) = store.cast::<PySqliteStore>() {
        return Ok(s.get().store.clone());
    }
    if let Ok(s) = store.cast::<PyPostgresStore>() {
        return Ok(s.get().store.clone());
    }
    if let Ok(s) = store.cast::<PyDeltaStore>() {
        return Ok(s.get().store.clone());
    }
    Err(pyo3::exceptions::PyTypeError::new_err(
        "store must be a MemoryStore, SqliteStore, PostgresStore or DeltaStore",
    ))
}

/// A Delta Lake table (created if missing), partitioned by `event_date`,
/// that Spark, Databricks, Trino, DuckDB, Polars and `deltalake` read.
#[pyclass(module = "backfill", name = "DeltaStore", frozen)]
#[derive(Debug)]
pub(crate) struct PyDeltaStore {
    pub(crate) store: Shared,
    delta: Arc<backfill_delta::DeltaStore>,
}

#[pymethods]
impl PyDeltaStore {
    /// `DeltaStore(uri, storage_options=None, columns=[],
    /// allow_column_changes=False, history=False)`: `uri` a local
    /// directory, a `file://` URL or an `s3://bucket/path` prefix;
    /// `storage_options` as delta-rs (and Python's `deltalake`) name them
    /// (`aws_endpoint_url`, `aws_region`, …, over the AWS environment
    /// variables); `columns` and `allow_column_changes` as `SqliteStore`'s,
    /// the columns real Delta types (`indexed` has no meaning on a Delta
    /// table); `history` keeps every version of every key in the table
    /// (once on, always on), read with `history()` and `as_of(instant)`.
    #[new]
    #[pyo3(signature = (uri, storage_options=None, columns=None, allow_column_changes=false, history=false))]
    fn new(
        py: Python<'_>,
        uri: std::path::PathBuf,
        storage_options: Option<std::collections::HashMap<String, String>>,
        columns: Option<Vec<String>>,
        allow_column_changes: bool,
        history: bool,
    ) -> PyResult<Self> {
        let uri = uri
            .to_str()
            .ok_or_else(|| PyValueError::new_err("the table's location is not UTF-8"))?
            .to_owned();
        let options = storage_options.unwrap_or_default();
        // The options' credentials (`aws_secret_access_key`, a session
        // token), kept out of lineage events.
        let secrets = named_secrets(options.clone());
        let columns = declared(columns)?;
        let opened = block(py, async move {
            backfill_delta::DeltaStore::builder(uri)
                .storage_options(options)
                .columns(columns)
                .allow_column_changes(allow_column_changes)
                .history(history)
                .open()
                .await
        })?;
        let delta = Arc::new(opened.map_err(to_py)?);
        Ok(Self {
            store: Shared::with_secrets(
                Arc::clone(&delta) as Arc<dyn Store>,
                Dataset::delta(delta.location()),
                secrets,
            ),
            delta,
        })
    }

    /// Every live record, in key order.
    fn rows(&self, py: Python<'_>) -> PyResult<Vec<PyRecord>> {
        rows(py, &self.store)
    }

    /// The live records as they were at `instant` (an aware `datetime` or
    /// an RFC 3339 string), by history, in key order.
    fn as_of(&self, py: Python<'_>, instant: &Bound<'_, PyAny>) -> PyResult<Vec<PyRecord>> {
        as_of(py, &self.store, instant)
    }

    /// Every version of every key, with when it was valid, in key order.
    fn history(&self, py: Python<'_>) -> PyResult<Vec<PyHistoryRow>> {
        history(py, &self.store)
    }

    /// Marks `day` (a date or `YYYY-MM-DD`) accepted as it is: the per-day
    /// checks no longer flag or refuse it, through re-runs; `undo=True`
    /// takes that back.
    #[pyo3(signature = (day, undo=false))]
    fn accept(&self, py: Python<'_>, day: &Bound<'_, PyAny>, undo: bool) -> PyResult<()> {
        accept(py, &self.store, day, undo)
    }

    /// The table's latest version.
    fn version(&self, py: Python<'_>) -> PyResult<u64> {
        let delta = Arc::clone(&self.delta);
        block(py, async move { delta.version().await })?.map_err(to_py)
    }

    /// Where the table is.
    #[getter]
    fn location(&self) -> String {
        self.delta.location().to_owned()
    }
}

/// Typed column declarations (`name:type[?][=path]`), parsed.
fn declared(columns: Option<Vec<String>>) -> PyResult<Vec<Column>> {
    columns
        .unwrap_or_default()
        .iter()
        .map(|d| Column::parse(d).map_err(|e| PyValueError::new_err(e.to_string())))
        .collect()
}

/// `store_from_config(path="backfill.toml", profile=None)`: the store of a
/// profile of the command line's configuration file — its `store` URL
/// (`sqlite://PATH` or `postgres://…`, the password from `password_env`),
/// `schema`, `table`, `columns` and `allow_column_changes`, the same store
/// the command line opens with that profile.
#[pyfunction]
#[pyo3(signature = (path=None, profile=None))]
pub(crate) fn store_from_config(
    py: Python<'_>,
    path: Option<std::path::PathBuf>,
    profile: Option<&str>,
) -> PyResult<Py<PyAny>> {
    let settings = crate::config::profile_settings(path, profile)?
        .over(&backfill_core::settings::Settings::defaults());
    let url = settings.store.unwrap_or_default();
    let columns = settings.columns.filter(|c| !c.is_empty());
    let allow = settings.allow_column_changes.unwrap_or(false);
    let history = settings.history.unwrap_or(false);
    if let Some(path) = url.strip_prefix("sqlite://") {
        let store = PySqliteStore::new(py, path.into(), settings.table, columns, allow, history)?;
        return Ok(Py::new(py, store)?.into_any());
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = PyPostgresStore::new(
            py,
            url,
            settings.schema,
            settings.table,
            columns,
            allow,
            history,
        )?;
        return Ok(Py::new(py, store)?.into_any());
    }
    Err(pyo3::exceptions::PyValueError::new_err(format!(
        "store {:?} is not sqlite://PATH or postgres://USER@HOST/DB",
        backfill_core::settings::url_without_password(&url)
    )))
}
