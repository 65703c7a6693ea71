//! `Job` (the engine's settings as keyword arguments) and the module's
//! `backfill`, `sync_one_day` and `sync_with_lookback`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backfill_core::lineage::{named_secrets, Ending, OpenLineage};
use backfill_core::settings::Settings;
use backfill_core::{CheckAction, FailedDay, Job, Mode, RunId, RunReport, Select, StopHandle};
use chrono::NaiveDate;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::config::profile_settings;
use crate::errors::to_py;
use crate::events::{observer, send};
use crate::fetch::PyFetch;
use crate::record::to_date;
use crate::report::{PyDayReport, PyRunReport, PyStatus};
use crate::runtime::{block, finish_run, run_detached};
use crate::stores::{store_of, Shared};

/// The engine's settings, as keyword arguments: `concurrency`, `retries`,
/// `retry_delay`, `max_retry_delay`, `mode`, `allow_empty_replace`,
/// `max_delete_fraction`, `only`, `skip_unchanged`, `time_zone`,
/// `fail_fast`, `day_timeout`, `dry_run`, `run_id`, `stream_memory`,
/// `check_volume`, `check_empty` (`"off"`, `"warn"` or `"fail"`),
/// `check_fraction`, `check_window`, `on_event` (called with every `Event`
/// of a run) and `lineage` (a `backfill.OpenLineage`: where each run's
/// OpenLineage events go). A setting left out
/// (`None`) takes the library's one default, the command line's too
/// ([`Settings::defaults`]); `Job.from_config` reads a profile of the
/// command line's configuration file.
#[pyclass(module = "backfill", name = "Job", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct PyJob {
    /// The settings given, over the defaults when the job is built.
    settings: Settings,
    only: Select,
    dry_run: bool,
    run_id: Option<String>,
    /// Called with every event of a run (`backfill.Event`).
    on_event: Option<Arc<Py<PyAny>>>,
    /// Where the runs' OpenLineage events go (`backfill.OpenLineage`).
    lineage: Option<Arc<Py<PyAny>>>,
}

/// A job's lineage events for one store and fetch, and their sink.
type Lineage = (OpenLineage, Arc<Py<PyAny>>);

impl PyJob {
    fn job(&self, stop: &StopHandle, lineage: Option<Lineage>) -> PyResult<Job> {
        let mut job = self
            .settings
            .job()
            .map_err(|e| PyValueError::new_err(e.to_string()))?
            .select(self.only)
            .dry_run(self.dry_run)
            .stop_handle(stop.clone())
            .observer(observer(self.on_event.clone(), lineage, stop.clone()));
        if let Some(run_id) = &self.run_id {
            job = job.run_id(run_id.as_str());
        }
        Ok(job)
    }

    /// The lineage events of runs of `fetch` into `store`, if the job
    /// sends any (never for a dry run, which writes nothing): the job is
    /// named by the sink, else after the fetch (`module.name`).
    fn lineage(
        &self,
        py: Python<'_>,
        store: &Shared,
        fetch: &Py<PyAny>,
    ) -> PyResult<Option<Lineage>> {
        let Some(sink) = &self.lineage else {
            return Ok(None);
        };
        if self.dry_run {
            return Ok(None);
        }
        let bound = sink.bind(py);
        let name: Option<String> = bound.getattr("job")?.extract()?;
        let name = match name {
            Some(name) => name,
            None => fetch_name(fetch.bind(py)),
        };
        let namespace: String = bound.getattr("namespace")?.extract()?;
        let secrets: Vec<String> = bound.getattr("_secrets")?.extract()?;
        let events = OpenLineage::new(name, store.1.dataset.clone())
            .namespace(namespace)
            .mode(self.settings.mode.unwrap_or_default())
            .producer(producer())
            .secrets(secrets)
            .secrets(store.1.secrets.iter().cloned())
            // The fetch runs in this process: an error of its may quote
            // any secret of its environment.
            .secrets(named_secrets(std::env::vars()));
        Ok(Some((events, Arc::clone(sink))))
    }
}

/// This package at its version, as its lineage events' `producer`.
fn producer() -> String {
    format!(
        "{}/tree/v{}/crates/backfill-python",
        env!("CARGO_PKG_REPOSITORY"),
        env!("CARGO_PKG_VERSION")
    )
}

/// A fetch's name for its lineage job: `module.qualname` of a function,
/// the type's name of another callable.
fn fetch_name(fetch: &Bound<'_, PyAny>) -> String {
    let named = |object: &Bound<'_, PyAny>| -> Option<String> {
        let name: String = object.getattr("__qualname__").ok()?.extract().ok()?;
        let module: Option<String> = object
            .getattr("__module__")
            .ok()
            .and_then(|m| m.extract().ok());
        Some(match module {
            Some(module) if module != "__main__" && module != "builtins" => {
                format!("{module}.{name}")
            }
            _ => name,
        })
    };
    named(fetch)
        .or_else(|| named(&fetch.get_type().into_any()))
        .unwrap_or_else(|| "fetch".to_owned())
}

pub(crate) fn secs(s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{s} is not a duration in seconds")))
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
        *, concurrency=None, retries=None, retry_delay=None, max_retry_delay=None, mode=None,
        allow_empty_replace=None, max_delete_fraction=None, only="all", skip_unchanged=None,
        time_zone=None, fail_fast=None, day_timeout=None, dry_run=false, run_id=None,
        stream_memory=None, lenient_event_dates=None, check_volume=None, check_empty=None,
        check_fraction=None, check_window=None, on_event=None, lineage=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        concurrency: Option<u32>,
        retries: Option<u32>,
        retry_delay: Option<f64>,
        max_retry_delay: Option<f64>,
        mode: Option<&str>,
        allow_empty_replace: Option<bool>,
        max_delete_fraction: Option<f64>,
        only: &str,
        skip_unchanged: Option<bool>,
        time_zone: Option<String>,
        fail_fast: Option<bool>,
        day_timeout: Option<f64>,
        dry_run: bool,
        run_id: Option<String>,
        stream_memory: Option<usize>,
        lenient_event_dates: Option<bool>,
        check_volume: Option<&str>,
        check_empty: Option<&str>,
        check_fraction: Option<f64>,
        check_window: Option<u32>,
        on_event: Option<Py<PyAny>>,
        lineage: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let action = |name: &str, text: Option<&str>| {
            text.map(|t| {
                t.parse::<CheckAction>()
                    .map_err(|e| PyValueError::new_err(format!("{name}: {e}")))
            })
            .transpose()
        };
        let settings = Settings {
            concurrency: concurrency.map(|c| c.max(1)),
            retries,
            retry_delay: retry_delay.map(secs).transpose()?,
            max_retry_delay: max_retry_delay.map(secs).transpose()?,
            mode: mode
                .map(|m| {
                    m.parse::<Mode>()
                        .map_err(|e| PyValueError::new_err(e.to_string()))
                })
                .transpose()?,
            allow_empty_replace,
            max_delete_fraction,
            skip_unchanged,
            time_zone,
            fail_fast,
            day_timeout: day_timeout.map(secs).transpose()?,
            stream_memory,
            lenient_event_dates,
            check_volume: action("check_volume", check_volume)?,
            check_empty: action("check_empty", check_empty)?,
            check_fraction,
            check_window,
            ..Settings::default()
        };
        PyJob::of(
            settings,
            parse_only(only)?,
            dry_run,
            run_id,
            on_event,
            lineage,
        )
    }

    /// `Job.from_config(path="backfill.toml", profile=None, **overrides)`:
    /// the job of a profile of the command line's configuration file (the
    /// file's `profile`, else `default`, when none is named), each keyword
    /// argument given over it, as `Job(...)` takes them. A profile read by
    /// the command line and by this runs the same job.
    #[staticmethod]
    #[pyo3(signature = (path=None, profile=None, **overrides))]
    fn from_config(
        py: Python<'_>,
        path: Option<std::path::PathBuf>,
        profile: Option<&str>,
        overrides: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        let file = profile_settings(path, profile)?;
        let given = match overrides {
            Some(kwargs) => py
                .get_type::<PyJob>()
                .call((), Some(kwargs))?
                .cast_into::<PyJob>()?
                .get()
                .clone(),
            None => default_job()?,
        };
        let settings = given.settings.over(&file);
        PyJob::of(
            settings,
            given.only,
            given.dry_run,
            given.run_id,
            given.on_event.map(|f| f.clone_ref(py)),
            given.lineage.map(|f| f.clone_ref(py)),
        )
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
        let job = self.job(&stop, self.lineage(py, &store, &fetch)?)?;
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
        let job = self.job(&stop, self.lineage(py, &store, &fetch)?)?;
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
        let lineage = self.lineage(py, &store, &fetch)?;
        let job = self.job(&stop, None)?;
        let fetch = PyFetch { func: fetch };
        let day = day.unwrap_or_else(|| job.today());
        // One day is not a run of the engine's; its lineage is a run of one
        // day all the same, with the job's run id.
        let run_id = self.run_id.as_deref().map(RunId::from).unwrap_or_default();
        if let Some((events, sink)) = &lineage {
            send(sink, &events.start(&run_id, &(day..=day)), &stop);
        }
        let started = Instant::now();
        let outcome = block(
            py,
            async move { job.sync_day(&*store.0, &fetch, day).await },
        );
        if let Some((events, sink)) = &lineage {
            let mut run = RunReport::new(vec![day]);
            run.run_id = Some(run_id.clone());
            match &outcome {
                Ok(Ok(report)) => run.days.push(report.clone()),
                Ok(Err(e)) => run.failed.push(FailedDay::new(day, 1, e)),
                // Ctrl-C: the day committed or rolled back whole, and the
                // run ends as an ABORT.
                Err(_) => run.stopped = true,
            }
            run.elapsed = started.elapsed();
            send(
                sink,
                &events.end(&run_id, &(day..=day), Ending::Ran(&run, None)),
                &stop,
            );
        }
        outcome?.map(Into::into).map_err(to_py)
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
        let job = self.job(&stop, None)?;
        let status =
            block(py, async move { job.status(&*store.0, start..=end).await })?.map_err(to_py)?;
        Ok(PyStatus {
            text: status.to_string(),
            days: status
                .days
                .iter()
                .map(|d| (d.day, d.state.to_string()))
                .collect(),
            flagged: status
                .days
                .iter()
                .filter_map(|d| Some((d.day, d.flag.as_ref()?.to_string())))
                .collect(),
            accepted: status
                .days
                .iter()
                .filter(|d| d.entry.as_ref().is_some_and(|e| e.accepted.is_some()))
                .map(|d| d.day)
                .collect(),
            timings: status
                .days
                .iter()
                .filter_map(|d| {
                    let timing = d.entry.as_ref()?.synced.as_ref()?.timing?;
                    Some((d.day, timing.fetch, timing.write))
                })
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
    PyJob::of(Settings::default(), Select::All, false, None, None, None)
}

impl PyJob {
    /// A job of `settings` (over the defaults), every setting checked now,
    /// not at the first run.
    fn of(
        settings: Settings,
        only: Select,
        dry_run: bool,
        run_id: Option<String>,
        on_event: Option<Py<PyAny>>,
        lineage: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        if let Some(sink) = &lineage {
            Python::attach(|py| -> PyResult<()> {
                let class = py.import("backfill._lineage")?.getattr("OpenLineage")?;
                match sink.bind(py).is_instance(&class)? {
                    true => Ok(()),
                    false => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                        "lineage must be a backfill.OpenLineage, not {}",
                        sink.bind(py).get_type().name()?
                    ))),
                }
            })?;
        }
        let job = PyJob {
            settings,
            only,
            dry_run,
            run_id,
            on_event: on_event.map(Arc::new),
            lineage: lineage.map(Arc::new),
        };
        job.job(&StopHandle::new(), None)?;
        Ok(job)
    }
}
