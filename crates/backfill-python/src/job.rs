//! `Job` (the engine's settings as keyword arguments) and the module's
//! `backfill`, `sync_one_day` and `sync_with_lookback`.

use std::sync::Arc;
use std::time::Duration;

use backfill_core::{Job, Mode, ReplaceGuard, Retry, Select, StopHandle};
use chrono::NaiveDate;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::to_py;
use crate::events::observer;
use crate::fetch::PyFetch;
use crate::record::to_date;
use crate::report::{PyDayReport, PyRunReport, PyStatus};
use crate::runtime::{block, finish_run, run_detached};
use crate::stores::store_of;

/// The engine's settings, as keyword arguments: `concurrency`, `retries`,
/// `retry_delay`, `max_retry_delay`, `mode`, `allow_empty_replace`,
/// `max_delete_fraction`, `only`, `skip_unchanged`, `time_zone`,
/// `fail_fast`, `day_timeout`, `dry_run`, `run_id`, `stream_memory`, and
/// `on_event` (called with every `Event` of a run).
#[pyclass(module = "backfill", name = "Job", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct PyJob {
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
    /// Called with every event of a run (`backfill.Event`).
    on_event: Option<Arc<Py<PyAny>>>,
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
            .observer(observer(self.on_event.clone(), stop.clone()));
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

pub(crate) fn secs(s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{s} is not a duration in seconds")))
}

pub(crate) fn parse_mode(mode: &str) -> PyResult<Mode> {
    match mode {
        "merge" => Ok(Mode::Merge),
        "replace" => Ok(Mode::Replace),
        other => Err(PyValueError::new_err(format!(
            "mode must be \"merge\" or \"replace\", not {other:?}"
        ))),
    }
}

pub(crate) fn parse_only(only: &str) -> PyResult<Select> {
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
        stream_memory=None, on_event=None
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
        on_event: Option<Py<PyAny>>,
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
            on_event: on_event.map(Arc::new),
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

/// `backfill(store, fetch, start, end)` with the default `Job()`.
#[pyfunction]
pub(crate) fn backfill(
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
pub(crate) fn sync_one_day(
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
pub(crate) fn sync_with_lookback(
    py: Python<'_>,
    store: &Bound<'_, PyAny>,
    fetch: Py<PyAny>,
    lookback: u32,
) -> PyResult<PyRunReport> {
    default_job()?.sync_with_lookback(py, store, fetch, lookback)
}

pub(crate) fn default_job() -> PyResult<PyJob> {
    PyJob::new(
        1, 2, 0.2, 30.0, "merge", false, None, "all", false, None, false, None, false, None, None,
        None,
    )
}
