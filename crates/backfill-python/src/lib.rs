//! The Python package `backfill`: the pattern's own API — `Record`,
//! `MemoryStore`, `SqliteStore`, `PostgresStore`, `DeltaStore`, `Job`, `backfill`,
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

mod config;
mod errors;
mod events;
mod fetch;
mod job;
mod record;
mod report;
mod runtime;
mod stores;

use pyo3::prelude::*;

use crate::errors::{BackfillError, InvalidRecord, ReplaceRefused, StoreError, Transient};
use crate::events::PyEvent;
use crate::job::{backfill, sync_one_day, sync_with_lookback, PyJob};
use crate::record::{PyListing, PyRecord};
use crate::report::{PyCounts, PyDayReport, PyRunReport, PyStatus};
use crate::stores::{PyDeltaStore, PyMemoryStore, PyPostgresStore, PySqliteStore};

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyRecord>()?;
    m.add_class::<PyListing>()?;
    m.add_class::<stores::PyHistoryRow>()?;
    m.add_class::<PyMemoryStore>()?;
    m.add_class::<PySqliteStore>()?;
    m.add_class::<PyDeltaStore>()?;
    m.add_class::<PyPostgresStore>()?;
    m.add_class::<PyJob>()?;
    m.add_class::<PyRunReport>()?;
    m.add_class::<PyDayReport>()?;
    m.add_class::<PyCounts>()?;
    m.add_class::<PyStatus>()?;
    m.add_class::<PyEvent>()?;
    m.add_function(wrap_pyfunction!(backfill, m)?)?;
    m.add_function(wrap_pyfunction!(sync_one_day, m)?)?;
    m.add_function(wrap_pyfunction!(sync_with_lookback, m)?)?;
    m.add_function(wrap_pyfunction!(stores::store_from_config, m)?)?;
    m.add("BackfillError", py.get_type::<BackfillError>())?;
    m.add("InvalidRecord", py.get_type::<InvalidRecord>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("Transient", py.get_type::<Transient>())?;
    m.add("ReplaceRefused", py.get_type::<ReplaceRefused>())?;
    Ok(())
}
