//! [`StopHandle`]: asking a running job to start no new day.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Asks a running job to wind down: start no new day and no new attempt,
/// let the days in flight finish (each commits whole or rolls back whole).
/// A command line calls [`StopHandle::stop`] on Ctrl-C.
///
/// Days the job did not start are reported in
/// [`RunReport::skipped`](crate::RunReport::skipped); a day whose attempt
/// failed while stopping is not retried.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
/// use backfill_core::{Job, MemoryStore, Record, StopHandle};
/// use chrono::NaiveDate;
///
/// let stop = StopHandle::new();
/// let job = Job::new().stop_handle(stop.clone());
/// let fetch = {
///     let stop = stop.clone();
///     move |_day: NaiveDate| {
///         stop.stop(); // as if Ctrl-C came while the first day ran
///         async move { Ok::<_, std::io::Error>(Vec::<Record>::new()) }
///     }
/// };
/// let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
/// let report = job.backfill(&MemoryStore::new(), &fetch, jan(1)..=jan(5)).await?;
/// assert_eq!(report.days.len(), 1);
/// assert_eq!(report.skipped.len(), 4);
/// assert!(stop.is_stopped());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    /// A handle not yet stopped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every job holding this handle to start no new day.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`StopHandle::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
