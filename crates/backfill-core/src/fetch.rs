//! [`Fetch`]: how a job gets one day's records from upstream, and
//! [`Fetched`], what it returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use futures_util::{Stream, StreamExt};

use crate::error::BoxError;
use crate::record::Record;

/// Fetches the records of one day from upstream.
///
/// Implemented for every async function or closure
/// `Fn(NaiveDate) -> impl Future<Output = Result<T, E>>` where `T` is a
/// `Vec<Record>` or a [`Fetched`] and the error converts into a boxed error,
/// so most users never implement it by hand:
///
/// ```
/// use backfill_core::{Fetch, Fetched, Record};
/// use chrono::{NaiveDate, Utc};
///
/// async fn fetch_orders(day: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
///     // Call the upstream API for `day` here.
///     let at = day.and_hms_opt(0, 0, 0).unwrap().and_utc();
///     Ok(vec![Record::new("order:1", day, "{}", at).expect("valid record")])
/// }
///
/// // An upstream that says when its listing was taken.
/// async fn fetch_snapshot(_day: NaiveDate) -> Result<Fetched, std::io::Error> {
///     let taken_at = Utc::now();
///     Ok(Fetched::new(Vec::new()).as_of(taken_at))
/// }
///
/// fn assert_fetch(_: &impl Fetch) {}
/// assert_fetch(&fetch_orders);
/// assert_fetch(&fetch_snapshot);
/// assert_fetch(&|_day: NaiveDate| async move { Ok::<_, std::io::Error>(Vec::<Record>::new()) });
/// ```
///
/// The user's error is kept as the `source` of
/// [`Error::Fetch`](crate::Error::Fetch). One exception: a record rule
/// broken while building the day's records (`Record::new(..)?` with
/// [`Error`](crate::Error) as the fetch's error type) is reported as that
/// [`Error::InvalidRecord`](crate::Error::InvalidRecord) itself.
#[async_trait]
pub trait Fetch: Send + Sync {
    /// Returns the records of `day`.
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError>;
}

#[async_trait]
impl<F, Fut, T, E> Fetch for F
where
    F: Fn(NaiveDate) -> Fut + Send + Sync,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Into<Fetched>,
    E: Into<BoxError>,
{
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError> {
        self(day).await.map(Into::into).map_err(Into::into)
    }
}

/// The chunks of a streamed day, as [`Fetched::stream`] keeps them.
pub type RecordStream = Pin<Box<dyn Stream<Item = Result<Vec<Record>, BoxError>> + Send>>;

/// One day's records as a fetch returns them — all at once, or as a stream
/// of chunks for a day too large to hold in memory — and, for a replace,
/// the instant the listing is true as of.
///
/// A plain `Vec<Record>` converts into it with no `as_of`: the job then
/// takes the moment the fetch started, by its clock, which is right for an
/// upstream read live. An upstream that serves a snapshot or an export says
/// when it was taken with [`Fetched::as_of`], so rows changed after that are
/// never deleted by it.
///
/// A streamed day is still one day: one transaction, one ledger entry,
/// exactly the rows and counts of the same records returned at once. The
/// job validates the chunks as they arrive, holds a bounded amount of them
/// in memory (sorted runs beyond it go to temporary files, see
/// [`Job::stream_memory`](crate::Job::stream_memory)), and writes nothing
/// until the stream has ended without error.
///
/// ```
/// use backfill_core::{Fetched, Record};
/// use chrono::{NaiveDate, Utc};
/// use futures_util::stream;
///
/// let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
/// let at = day.and_hms_opt(0, 0, 0).unwrap().and_utc();
/// // Pages of an export, as an API would return them one request at a time.
/// let pages = stream::iter((0..3).map(move |page| {
///     Ok::<_, std::io::Error>(vec![Record::new(format!("k:{page}"), day, "{}", at).unwrap()])
/// }));
/// let fetched = Fetched::stream(pages).as_of(Utc::now());
/// assert!(fetched.is_stream() && fetched.records().is_none());
/// ```
pub struct Fetched {
    body: Body,
    as_of: Option<DateTime<Utc>>,
}

/// What a [`Fetched`] holds.
pub(crate) enum Body {
    Records(Vec<Record>),
    Stream(RecordStream),
}

impl Default for Fetched {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl fmt::Debug for Fetched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Fetched");
        match &self.body {
            Body::Records(records) => d.field("records", records),
            Body::Stream(_) => d.field("records", &format_args!("<stream>")),
        };
        d.field("as_of", &self.as_of).finish()
    }
}

impl Fetched {
    /// The day's records, with no `as_of` of their own.
    pub fn new(records: Vec<Record>) -> Self {
        Self {
            body: Body::Records(records),
            as_of: None,
        }
    }

    /// The day's records as a stream of chunks (any sizes, any order,
    /// duplicates anywhere); an error from the stream fails the day's
    /// attempt as a fetch error, and nothing of the day is written.
    pub fn stream<S, E>(chunks: S) -> Self
    where
        S: Stream<Item = Result<Vec<Record>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        Self {
            body: Body::Stream(Box::pin(chunks.map(|chunk| chunk.map_err(Into::into)))),
            as_of: None,
        }
    }

    /// The instant these records are a true listing of the day as of.
    pub fn as_of(mut self, as_of: DateTime<Utc>) -> Self {
        self.as_of = Some(as_of);
        self
    }

    /// The records, when they came all at once (`None` for a stream).
    pub fn records(&self) -> Option<&[Record]> {
        match &self.body {
            Body::Records(records) => Some(records),
            Body::Stream(_) => None,
        }
    }

    /// Whether the records come as a stream.
    pub fn is_stream(&self) -> bool {
        matches!(self.body, Body::Stream(_))
    }

    /// The listing's own `as_of`, if the fetch gave one.
    pub fn listing_as_of(&self) -> Option<DateTime<Utc>> {
        self.as_of
    }

    /// The records, collected from the stream if they come as one (holding
    /// the whole day in memory), and the `as_of`.
    ///
    /// # Errors
    ///
    /// The stream's first error.
    pub async fn collect(self) -> Result<(Vec<Record>, Option<DateTime<Utc>>), BoxError> {
        let records = match self.body {
            Body::Records(records) => records,
            Body::Stream(mut stream) => {
                let mut records = Vec::new();
                while let Some(chunk) = stream.next().await {
                    records.extend(chunk?);
                }
                records
            }
        };
        Ok((records, self.as_of))
    }

    pub(crate) fn into_body(self) -> (Body, Option<DateTime<Utc>>) {
        (self.body, self.as_of)
    }
}

impl From<Vec<Record>> for Fetched {
    fn from(records: Vec<Record>) -> Self {
        Self::new(records)
    }
}
