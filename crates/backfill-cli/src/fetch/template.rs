//! What a command fetch and a file fetch share: the day template, the
//! longest line accepted, reading the day's input in chunks, and the
//! [`Fetch`] impl. Only opening a day's input differs, and that is the
//! [`Source`]'s.

use std::future::Future;

use async_trait::async_trait;
use backfill_core::{BoxError, Fetch, Fetched};
use chrono::NaiveDate;
use tokio::io::{AsyncRead, BufReader};

use super::{DayStream, FetchError};
use crate::jsonl::{ChunkReader, Day, DEFAULT_MAX_LINE_BYTES};

/// The read buffer for a command's output or a file: large, so a typical
/// line is parsed in place rather than gathered from several reads.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Fetches a day in the [JSON Lines format](crate::jsonl) from a template
/// in which every `{day}` stands for the day (`YYYY-MM-DD`). The
/// [`Source`] says what the template is and how the day's input is opened:
/// a shell command line run for a [`CommandFetch`](super::CommandFetch)
/// (a [`FromCommand`](super::FromCommand)), the path of a file read for a
/// [`FileFetch`](super::FileFetch) (a [`FromFile`](super::FromFile)).
///
/// Either way the day is parsed as it is read and handed over in chunks
/// ([`stream`](Self::stream)), or collected in memory
/// ([`records`](Self::records)).
#[derive(Debug, Clone)]
pub struct TemplateFetch<S> {
    template: String,
    max_line_bytes: usize,
    source: S,
}

impl<S: Source> TemplateFetch<S> {
    /// A fetch from `template` for each day: for a
    /// [`CommandFetch`](super::CommandFetch) a `sh -c` command line run, for
    /// a [`FileFetch`](super::FileFetch) the path of the file read.
    pub fn new(template: impl Into<String>) -> Self {
        Self {
            template: template.into(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            source: S::default(),
        }
    }

    /// The longest line accepted (of a command's output, or of a file), in
    /// bytes (default [`DEFAULT_MAX_LINE_BYTES`]).
    pub fn max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max;
        self
    }

    /// The template, as given.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Opens the input of `day` — starts the command, opens the file — and
    /// reads it up to the first record (so its `as_of` line, if any, is
    /// known): what [`Fetch::fetch`] returns, before it becomes a
    /// [`Fetched`]. The rest is parsed as the stream is read; a malformed
    /// line there, or a command's failed exit status (known at the end of
    /// its output), is the stream's last item.
    ///
    /// # Errors
    ///
    /// [`FetchError`]: the command could not start; no such file, or it
    /// cannot be opened or read; or a malformed line before the first
    /// record.
    pub async fn stream(&self, day: NaiveDate) -> Result<DayStream, FetchError> {
        self.source.open(self, day).await
    }

    /// Reads the whole of `day` into memory (see [`stream`](Self::stream)
    /// for a day of any size).
    ///
    /// # Errors
    ///
    /// [`FetchError`]: the command could not start, printed a malformed
    /// line, exited with a status other than 0, or was killed by a signal;
    /// no such file, it cannot be opened or read, or it holds a malformed
    /// line.
    pub async fn records(&self, day: NaiveDate) -> Result<Day, FetchError> {
        self.stream(day).await?.into_day().await
    }

    /// The template with every `{day}` replaced by `day`.
    pub(super) fn for_day(&self, day: NaiveDate) -> String {
        self.template
            .replace("{day}", &day.format("%Y-%m-%d").to_string())
    }

    /// A reader of the day in `input`, through a large buffer, refusing
    /// lines longer than the limit.
    pub(super) fn reader<R: AsyncRead + Unpin>(&self, input: R) -> ChunkReader<BufReader<R>> {
        ChunkReader::new(
            BufReader::with_capacity(READ_BUFFER_BYTES, input),
            self.max_line_bytes,
        )
    }
}

#[async_trait]
impl<S: Source> Fetch for TemplateFetch<S> {
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError> {
        self.stream(day)
            .await
            .map(Fetched::from)
            .map_err(FetchError::into_boxed)
    }
}

/// Where a [`TemplateFetch`] reads a day from:
/// [`FromCommand`](super::FromCommand) or [`FromFile`](super::FromFile).
///
/// Sealed: this crate's two are the only ones.
pub trait Source: sealed::Open {}

impl<S: sealed::Open> Source for S {}

pub(super) mod sealed {
    use super::*;

    /// How a [`Source`] opens a day's input. In a module of its own, so no
    /// other crate can name it and implement a [`Source`].
    pub trait Open: Default + Clone + Send + Sync + 'static {
        /// Opens the input of `day` for `fetch` and reads it up to the first
        /// record.
        fn open(
            &self,
            fetch: &TemplateFetch<Self>,
            day: NaiveDate,
        ) -> impl Future<Output = Result<DayStream, FetchError>> + Send;
    }
}
