//! The runtime every call runs on, and how a call waits for it: with the
//! GIL released, Ctrl-C checked as the command line's first SIGINT.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use backfill_core::{Error, RunReport, StopHandle};
use pyo3::prelude::*;

use crate::errors::to_py;
use crate::report::PyRunReport;
/// The runtime every call runs on, made on first use.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
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
pub(crate) fn run_detached<T, Fut>(
    py: Python<'_>,
    stop: Option<StopHandle>,
    future: Fut,
) -> (T, Option<PyErr>)
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
                    out = &mut future => {
                        // A Ctrl-C that arrived since the last look (or
                        // one a callback handed back, `events::interrupted`)
                        // is raised here, with the report, not by the
                        // first line of Python after the call.
                        if interrupted.is_none() {
                            interrupted = Python::attach(|py| py.check_signals()).err();
                        }
                        return out;
                    }
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
pub(crate) fn block<T, Fut>(py: Python<'_>, future: Fut) -> PyResult<T>
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
pub(crate) fn finish_run(
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
