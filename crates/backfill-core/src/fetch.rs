//! [`Fetch`]: how a job gets one day's records from upstream, and
//! [`Fetched`], what it returns.

use std::future::Future;

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

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

/// One day's records as a fetch returns them, and, for a replace, the
/// instant the listing is true as of.
///
/// A plain `Vec<Record>` converts into it with no `as_of`: the job then
/// takes the moment the fetch started, by its clock, which is right for an
/// upstream read live. An upstream that serves a snapshot or an export says
/// when it was taken with [`Fetched::as_of`], so rows changed after that are
/// never deleted by it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fetched {
    records: Vec<Record>,
    as_of: Option<DateTime<Utc>>,
}

impl Fetched {
    /// The day's records, with no `as_of` of their own.
    pub fn new(records: Vec<Record>) -> Self {
        Self {
            records,
            as_of: None,
        }
    }

    /// The instant these records are a true listing of the day as of.
    pub fn as_of(mut self, as_of: DateTime<Utc>) -> Self {
        self.as_of = Some(as_of);
        self
    }

    /// The records.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// The listing's own `as_of`, if the fetch gave one.
    pub fn listing_as_of(&self) -> Option<DateTime<Utc>> {
        self.as_of
    }

    /// Splits into the records and the `as_of`.
    pub fn into_parts(self) -> (Vec<Record>, Option<DateTime<Utc>>) {
        (self.records, self.as_of)
    }
}

impl From<Vec<Record>> for Fetched {
    fn from(records: Vec<Record>) -> Self {
        Self::new(records)
    }
}
