//! [`Fetch`]: how a job gets one day's records from upstream.

use std::future::Future;

use async_trait::async_trait;
use chrono::NaiveDate;

use crate::error::BoxError;
use crate::record::Record;

/// Fetches the records of one day from upstream.
///
/// Implemented for every async function or closure
/// `Fn(NaiveDate) -> impl Future<Output = Result<Vec<Record>, E>>` whose error
/// converts into a boxed error, so most users never implement it by hand:
///
/// ```
/// use backfill_core::{Fetch, Record};
/// use chrono::NaiveDate;
///
/// async fn fetch_orders(day: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
///     // Call the upstream API for `day` here.
///     let at = day.and_hms_opt(0, 0, 0).unwrap().and_utc();
///     Ok(vec![Record::new("order:1", day, "{}", at).expect("valid record")])
/// }
///
/// fn assert_fetch(_: &impl Fetch) {}
/// assert_fetch(&fetch_orders);
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
    async fn fetch(&self, day: NaiveDate) -> Result<Vec<Record>, BoxError>;
}

#[async_trait]
impl<F, Fut, E> Fetch for F
where
    F: Fn(NaiveDate) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Vec<Record>, E>> + Send,
    E: Into<BoxError>,
{
    async fn fetch(&self, day: NaiveDate) -> Result<Vec<Record>, BoxError> {
        self(day).await.map_err(Into::into)
    }
}
