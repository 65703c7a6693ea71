//! A day being fetched: its `as_of`, then its records as a stream of
//! chunks.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use backfill_core::{Fetched, Record};
use chrono::{DateTime, Utc};
use futures_util::{Stream, StreamExt};

use super::FetchError;
use crate::jsonl::Day;

/// A day being fetched by a [`CommandFetch`](super::CommandFetch) or a
/// [`FileFetch`](super::FileFetch): the `as_of` line's instant, read before
/// any record, and the records as a stream of chunks (see
/// [`ChunkReader`](crate::jsonl::ChunkReader)) ending with the first error.
///
/// It converts into a [`Fetched`]; [`DayStream::into_day`] collects it.
/// Dropping it stops the fetch (and kills a command's process group).
pub struct DayStream {
    as_of: Option<DateTime<Utc>>,
    chunks: Pin<Box<dyn Stream<Item = Result<Vec<Record>, FetchError>> + Send>>,
}

impl DayStream {
    pub(super) fn new(
        chunks: impl Stream<Item = Result<Vec<Record>, FetchError>> + Send + 'static,
        as_of: Option<DateTime<Utc>>,
    ) -> Self {
        Self {
            as_of,
            // Fused: polled again after its end, it stays ended.
            chunks: Box::pin(chunks.fuse()),
        }
    }

    /// The day's `as_of` line's instant, if it had one.
    pub fn as_of(&self) -> Option<DateTime<Utc>> {
        self.as_of
    }

    /// Reads the rest of the day into memory.
    ///
    /// # Errors
    ///
    /// The stream's error, if any.
    pub async fn into_day(mut self) -> Result<Day, FetchError> {
        let mut records = Vec::new();
        while let Some(chunk) = self.chunks.next().await {
            records.extend(chunk?);
        }
        Ok(Day {
            records,
            as_of: self.as_of,
        })
    }
}

impl fmt::Debug for DayStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DayStream")
            .field("as_of", &self.as_of)
            .finish_non_exhaustive()
    }
}

impl Stream for DayStream {
    type Item = Result<Vec<Record>, FetchError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.chunks.as_mut().poll_next(cx)
    }
}

impl From<DayStream> for Fetched {
    fn from(day: DayStream) -> Self {
        let fetched = Fetched::stream(
            day.chunks
                .map(|chunk| chunk.map_err(FetchError::into_boxed)),
        );
        match day.as_of {
            Some(at) => fetched.as_of(at),
            None => fetched,
        }
    }
}
