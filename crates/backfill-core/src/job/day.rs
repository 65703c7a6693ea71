//! Running one day: attempts under the retry policy, the per-day timeout,
//! and a panic caught as the day's own error.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use chrono::NaiveDate;
use futures_util::FutureExt;
use tracing::Instrument;

use super::event::Event;
use super::report::DayReport;
use super::{Job, Neighbours};
use crate::check::{CheckAction, Flag};
use crate::counts::Counts;
use crate::error::{fetch_error, Error, Result};
use crate::fetch::{Body, Fetch};
use crate::ledger::{DayFailure, RunId, SyncStamp};
use crate::store::Store;
use crate::write::{streamed_day, whole_day_apart, write_day};

impl Job {
    /// One day, with retries; on failure, the last error and the attempts.
    pub(super) async fn run_day<S, F>(
        &self,
        store: &S,
        fetch: &F,
        day: NaiveDate,
        run_id: &RunId,
        neighbours: Option<&Neighbours>,
    ) -> Result<DayReport, (Error, u32)>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let span = tracing::info_span!(
            "day",
            day = %day,
            run_id = %run_id,
            attempts = tracing::field::Empty,
            inserted = tracing::field::Empty,
            updated = tracing::field::Empty,
            unchanged = tracing::field::Empty,
            stale = tracing::field::Empty,
            deleted = tracing::field::Empty,
            skipped = tracing::field::Empty,
        );
        let started = Instant::now();
        let mut attempt = 0;
        async {
            loop {
                attempt += 1;
                self.emit(Event::DayStarted { day, attempt });
                match self.attempt(store, fetch, day, run_id, neighbours).await {
                    Ok((counts, flag)) => {
                        let span = tracing::Span::current();
                        span.record("attempts", attempt);
                        span.record("inserted", counts.inserted);
                        span.record("updated", counts.updated);
                        span.record("unchanged", counts.unchanged);
                        span.record("stale", counts.stale);
                        span.record("deleted", counts.deleted);
                        span.record("skipped", counts.skipped);
                        if let Some(neighbours) = neighbours {
                            neighbours.synced(day, counts.fetched());
                        }
                        match &flag {
                            Some(flag) => tracing::warn!(%flag, "day synced, flagged"),
                            None => tracing::info!("day synced"),
                        }
                        let mut report = DayReport::new(day, counts);
                        report.attempts = attempt;
                        report.elapsed = started.elapsed();
                        report.flag = flag;
                        self.emit(Event::DayFinished { report: &report });
                        return Ok(report);
                    }
                    Err(error)
                        if error.is_retryable()
                            && attempt < self.retry.attempt_limit()
                            && !self.stop.is_stopped() =>
                    {
                        let delay = self.retry.delay(attempt);
                        tracing::warn!(attempt, ?delay, %error, "day failed, retrying");
                        self.emit(Event::DayRetrying {
                            day,
                            attempt,
                            error: &error,
                            delay,
                        });
                        tokio::time::sleep(delay).await;
                    }
                    Err(error) => {
                        tracing::Span::current().record("attempts", attempt);
                        tracing::error!(attempt, %error, "day failed");
                        // A fatal error is the fetch's, not the day's: the
                        // ledger keeps what it knew of the day.
                        if !error.is_fatal() {
                            // In its own transaction; if that fails too, the
                            // day's own error is still the one reported.
                            let failure = DayFailure::new(
                                self.clock.now(),
                                Some(run_id.clone()),
                                attempt,
                                &error.to_string(),
                            );
                            if let Err(ledger) = store.record_failure(day, &failure).await {
                                tracing::warn!(%ledger, "could not record the failure in the ledger");
                            }
                        }
                        self.emit(Event::DayFailed {
                            day,
                            attempts: attempt,
                            error: &error,
                        });
                        return Err((error, attempt));
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One attempt: fetch, the per-day checks, then the one write path. A
    /// panic in any is caught and becomes this day's error. A day a check
    /// flags is written with its flag, or refused before anything is
    /// written.
    async fn attempt<S, F>(
        &self,
        store: &S,
        fetch: &F,
        day: NaiveDate,
        run_id: &RunId,
        neighbours: Option<&Neighbours>,
    ) -> Result<(Counts, Option<Flag>)>
    where
        S: Store + ?Sized,
        F: Fetch + ?Sized,
    {
        let work = async {
            // A listing is true as of the moment its fetch started, unless
            // the fetch says when its snapshot was taken.
            let started = self.clock.now();
            let began = Instant::now();
            let (body, as_of) = fetch
                .fetch(day)
                .await
                .map_err(|source| fetch_error(day, source))?
                .into_body();
            let options = self.write.as_of(as_of.unwrap_or(started));
            let run_id = Some(run_id.clone());
            match body {
                Body::Records(records) => {
                    let stamp = SyncStamp {
                        at: self.clock.now(),
                        run_id,
                    };
                    let write = whole_day_apart(day, records, options, stamp)
                        .await?
                        .began(began);
                    let flag = self.check(neighbours, day, write.fetched())?;
                    Ok((write_day(store, write, options).await?, flag))
                }
                Body::Stream(chunks) => {
                    // Stamped when the stream has ended: the apply begins
                    // then.
                    let clock = &self.clock;
                    let stamp = || SyncStamp {
                        at: clock.now(),
                        run_id,
                    };
                    let write = streamed_day(day, chunks, options, stamp)
                        .await?
                        .began(began);
                    let flag = self.check(neighbours, day, write.fetched())?;
                    Ok((write_day(store, write, options).await?, flag))
                }
            }
        };
        let work = AssertUnwindSafe(work).catch_unwind();
        let outcome = match self.day_timeout {
            Some(after) => tokio::time::timeout(after, work)
                .await
                .map_err(|_| Error::Timeout { day, after })?,
            None => work.await,
        };
        outcome.unwrap_or_else(|panic| {
            Err(Error::Panicked {
                day,
                message: panic_message(&*panic),
            })
        })
    }
}

impl Job {
    /// The day's flag by the checks, or its refusal. Today and later days
    /// (in the job's time zone) are not judged: they are not over, and a
    /// daily sync fetches today's first hours.
    fn check(
        &self,
        neighbours: Option<&Neighbours>,
        day: NaiveDate,
        fetched: u64,
    ) -> Result<Option<Flag>> {
        if day >= self.today() {
            return Ok(None);
        }
        let Some(flag) = neighbours.and_then(|n| n.judge(&self.checks, day, fetched)) else {
            return Ok(None);
        };
        match flag.action {
            CheckAction::Fail => Err(Error::CheckFailed(Box::new(flag))),
            _ => Ok(Some(flag)),
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
