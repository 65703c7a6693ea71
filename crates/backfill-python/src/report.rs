//! What a run did, as Python objects: `Counts`, `DayReport`, `RunReport`
//! and the ledger's `Status`.

use std::time::Duration;

use backfill_core::{Counts, DayReport, RunReport};
use chrono::NaiveDate;
use pyo3::prelude::*;

/// What one day's write did.
#[pyclass(module = "backfill", name = "Counts", frozen, get_all)]
#[derive(Debug, Clone)]
pub(crate) struct PyCounts {
    pub(crate) inserted: u64,
    pub(crate) updated: u64,
    pub(crate) deleted: u64,
    pub(crate) unchanged: u64,
    pub(crate) stale: u64,
    pub(crate) collapsed: u64,
    pub(crate) skipped: u64,
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
pub(crate) struct PyDayReport {
    pub(crate) day: NaiveDate,
    pub(crate) counts: PyCounts,
    pub(crate) attempts: u32,
    /// Why a per-day check flagged the day (written: the check warns), or
    /// `None`.
    pub(crate) flag: Option<String>,
}

impl From<DayReport> for PyDayReport {
    fn from(r: DayReport) -> Self {
        Self {
            day: r.day,
            counts: r.counts.into(),
            attempts: r.attempts,
            flag: r.flag.map(|f| f.to_string()),
        }
    }
}

/// What a run did, day by day; `str()` is its table.
#[pyclass(module = "backfill", name = "RunReport", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct PyRunReport {
    pub(crate) inner: RunReport,
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

    /// The days the run set out to sync, in order: every day of the
    /// range, or those its `only` picked.
    #[getter]
    fn planned(&self) -> Vec<NaiveDate> {
        self.inner.planned.clone()
    }

    /// The days of the range its `only` left out, as `(day, state)` (the
    /// state the ledger gave them: `"synced"`, `"failed"`, …), in order.
    #[getter]
    fn not_selected(&self) -> Vec<(NaiveDate, String)> {
        self.inner
            .not_selected
            .iter()
            .map(|n| (n.day, n.state.to_string()))
            .collect()
    }

    /// Whether the run was stopped (Ctrl-C): the days in flight finished,
    /// the others are `skipped`.
    #[getter]
    fn stopped(&self) -> bool {
        self.inner.stopped
    }

    /// Whether this was a dry run (nothing fetched or written).
    #[getter]
    fn dry_run(&self) -> bool {
        self.inner.dry_run
    }

    /// The run's wall time.
    #[getter]
    fn elapsed(&self) -> Duration {
        self.inner.elapsed
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }
}

/// The ledger's view of a range of days.
#[pyclass(module = "backfill", name = "Status", frozen)]
#[derive(Debug)]
pub(crate) struct PyStatus {
    pub(crate) text: String,
    pub(crate) days: Vec<(NaiveDate, String)>,
    pub(crate) flagged: Vec<(NaiveDate, String)>,
    pub(crate) accepted: Vec<NaiveDate>,
    pub(crate) timings: Vec<(NaiveDate, Duration, Duration)>,
}

#[pymethods]
impl PyStatus {
    /// Every day of the range with its state: `"missing"`, `"synced"` or
    /// `"failed"`.
    #[getter]
    fn days(&self) -> Vec<(NaiveDate, String)> {
        self.days.clone()
    }

    /// The synced days a per-day check flags, with why, in day order.
    #[getter]
    fn flagged(&self) -> Vec<(NaiveDate, String)> {
        self.flagged.clone()
    }

    /// The days a person accepted (`store.accept(day)`), in day order.
    #[getter]
    fn accepted(&self) -> Vec<NaiveDate> {
        self.accepted.clone()
    }

    /// How long each synced day's last apply took, as `(day, fetch,
    /// write)` with `datetime.timedelta`s, in day order: the days whose
    /// store kept it.
    #[getter]
    fn timings(&self) -> Vec<(NaiveDate, Duration, Duration)> {
        self.timings.clone()
    }

    fn __str__(&self) -> &str {
        &self.text
    }
}
