//! A run's events, as lines of Python's `logging` and as `Event` objects
//! handed to a job's `on_event` callback.

use std::sync::Arc;

use backfill_core::lineage::OpenLineage;
use backfill_core::{Event, StopHandle};
use chrono::NaiveDate;
use pyo3::prelude::*;

use crate::report::{PyDayReport, PyRunReport};

/// What a job's observer does with each event: a line of `logging`, then
/// the user's callback, if any.
///
/// A `KeyboardInterrupt` raised in either (Ctrl-C lands in whatever Python
/// code runs on the calling thread, and these run there) is the run's
/// stop, never an error to log: see [`interrupted`].
pub(crate) fn observer(
    callback: Option<Arc<Py<PyAny>>>,
    lineage: Option<(OpenLineage, Arc<Py<PyAny>>)>,
    stop: StopHandle,
) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
    let lineage = lineage.map(|(events, sink)| {
        let stop = stop.clone();
        events.observer(move |event| send(&sink, &event, &stop))
    });
    move |event| {
        log_event(event, &stop);
        if let Some(lineage) = &lineage {
            lineage(event);
        }
        if let Some(callback) = &callback {
            if let Some(event) = PyEvent::from_event(event) {
                call(callback, event, &stop);
            }
        }
    }
}

/// Hands a lineage event to the job's `OpenLineage` sink, which sends it
/// and warns if it cannot; an exception it raises all the same is logged
/// like `on_event`'s.
pub(crate) fn send(sink: &Py<PyAny>, event: &serde_json::Value, stop: &StopHandle) {
    let last = event["eventType"] != "START";
    Python::attach(|py| {
        if let Err(e) = sink.call_method1(py, "_emit", (event.to_string(), last)) {
            log_error(py, "the lineage sink raised", &e, stop);
        }
    });
}

/// Whether `e` is a `KeyboardInterrupt`; if so the run is stopped (no new
/// day starts) and the interrupt handed back to the waiting call as a
/// Ctrl-C of its own (`_thread.interrupt_main`), which raises it with the
/// run's report once the days in flight are done, as for any Ctrl-C.
fn interrupted(py: Python<'_>, e: &PyErr, stop: &StopHandle) -> bool {
    if !e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
        return false;
    }
    stop.stop();
    if let Err(e) = py
        .import("_thread")
        .and_then(|thread| thread.call_method0("interrupt_main"))
    {
        e.print(py);
    }
    true
}

/// Hands `event` to `callback`. An exception it raises is logged with its
/// traceback (logger `backfill`, ERROR) and the run goes on: a callback
/// watches a run, it does not steer it.
fn call(callback: &Py<PyAny>, event: PyEvent, stop: &StopHandle) {
    Python::attach(|py| {
        let called = Py::new(py, event).and_then(|event| callback.call1(py, (event,)));
        if let Err(e) = called {
            log_error(py, "on_event raised", &e, stop);
        }
    });
}

/// Logs `e`, raised by a callback, with its traceback (logger `backfill`,
/// ERROR), unless it is a Ctrl-C: that stops the run.
fn log_error(py: Python<'_>, what: &str, e: &PyErr, stop: &StopHandle) {
    if interrupted(py, e, stop) {
        return;
    }
    let text = crate::fetch::traceback_text(py, e);
    let logged = py
        .import("logging")
        .and_then(|logging| logging.call_method1("getLogger", ("backfill",)))
        .and_then(|logger| logger.call_method1("error", (format!("{what}: {text}"),)));
    if let Err(e) = logged {
        if !interrupted(py, &e, stop) {
            e.print(py);
        }
    }
}

/// One event of a run, handed to a job's `on_event` callback. `kind` is
/// `"run_started"`, `"day_started"`, `"day_retrying"`, `"day_finished"`,
/// `"day_failed"` or `"run_finished"`; the other fields are set where that
/// kind has them, and are `None` elsewhere.
#[pyclass(module = "backfill", name = "Event", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct PyEvent {
    /// What happened.
    kind: &'static str,
    /// The day, for a day's events.
    day: Option<NaiveDate>,
    /// The attempt that started or failed (`day_started`, `day_retrying`),
    /// or the attempts made (`day_finished`, `day_failed`).
    attempt: Option<u32>,
    /// Why an attempt or the day failed.
    error: Option<String>,
    /// The wait before the next attempt, in seconds (`day_retrying`).
    delay: Option<f64>,
    /// The run's id (`run_started`).
    run_id: Option<String>,
    /// The planned days, in order (`run_started`).
    days: Option<Vec<NaiveDate>>,
    /// What the day did (`day_finished`).
    day_report: Option<PyDayReport>,
    /// What the run did (`run_finished`).
    run_report: Option<PyRunReport>,
}

impl PyEvent {
    fn new(kind: &'static str) -> Self {
        Self {
            kind,
            day: None,
            attempt: None,
            error: None,
            delay: None,
            run_id: None,
            days: None,
            day_report: None,
            run_report: None,
        }
    }

    /// The event as Python sees it (`None` for a kind the package does
    /// not know yet).
    fn from_event(event: &Event<'_>) -> Option<Self> {
        Some(match event {
            Event::RunStarted { run_id, days, .. } => Self {
                run_id: Some(run_id.as_str().to_owned()),
                days: Some(days.to_vec()),
                ..Self::new("run_started")
            },
            Event::DayStarted { day, attempt } => Self {
                day: Some(*day),
                attempt: Some(*attempt),
                ..Self::new("day_started")
            },
            Event::DayRetrying {
                day,
                attempt,
                error,
                delay,
            } => Self {
                day: Some(*day),
                attempt: Some(*attempt),
                error: Some(error.to_string()),
                delay: Some(delay.as_secs_f64()),
                ..Self::new("day_retrying")
            },
            Event::DayFinished { report } => Self {
                day: Some(report.day),
                attempt: Some(report.attempts),
                day_report: Some((*report).clone().into()),
                ..Self::new("day_finished")
            },
            Event::DayFailed {
                day,
                attempts,
                error,
            } => Self {
                day: Some(*day),
                attempt: Some(*attempts),
                error: Some(error.to_string()),
                ..Self::new("day_failed")
            },
            Event::RunFinished { report } => Self {
                run_report: Some((*report).clone().into()),
                ..Self::new("run_finished")
            },
            _ => return None,
        })
    }
}

#[pymethods]
impl PyEvent {
    fn __repr__(&self) -> String {
        let mut parts = vec![format!("kind={:?}", self.kind)];
        if let Some(day) = self.day {
            parts.push(format!("day={day}"));
        }
        if let Some(attempt) = self.attempt {
            parts.push(format!("attempt={attempt}"));
        }
        if let Some(error) = &self.error {
            parts.push(format!("error={error:?}"));
        }
        format!("Event({})", parts.join(", "))
    }
}

/// A day's events as lines of Python's `logging`, logger `backfill`: a
/// synced day at INFO, a retry at WARNING, a failed day at ERROR (so that
/// Airflow's and Dagster's log capture show them).
fn log_event(event: &Event<'_>, stop: &StopHandle) {
    let level = match event {
        Event::DayFinished { .. } => "info",
        Event::DayRetrying { .. } => "warning",
        Event::DayFailed { .. } => "error",
        _ => return,
    };
    let Some(line) = event.day_line(|e| e.to_string()) else {
        return;
    };
    Python::attach(|py| {
        let logged = py
            .import("logging")
            .and_then(|logging| logging.call_method1("getLogger", ("backfill",)))
            .and_then(|logger| logger.call_method1(level, (line,)));
        if let Err(e) = logged {
            if !interrupted(py, &e, stop) {
                e.print(py);
            }
        }
    });
}
