//! The error type shared by core and every store.

use std::fmt;

use chrono::NaiveDate;

use crate::columns::kind::{article, ColumnType};
use crate::guard::Refusal;
use crate::job::report::RunReport;

/// A boxed error from a fetch function or a storage driver.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in backfill.
///
/// Match on the variant, not on the message: messages may be reworded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A record breaks a record rule. Nothing of its batch was written.
    #[error("invalid record {}: {field} {problem}", ShortKey(.key))]
    InvalidRecord {
        /// The offending record's key (possibly itself the problem).
        key: String,
        /// The field that breaks a rule.
        field: Field,
        /// What is wrong with it.
        problem: Problem,
    },

    /// A record's value does not fit one of the store's typed
    /// [columns](crate::columns): the record is refused, and nothing of its
    /// day is written.
    #[error(transparent)]
    InvalidColumn(Box<ColumnError>),

    /// A typed column's declaration is malformed, or the columns clash.
    #[error("invalid column declaration {declaration:?}: {reason}")]
    InvalidColumnDeclaration {
        /// The declaration, or the column's name.
        declaration: String,
        /// What is wrong with it.
        reason: String,
    },

    /// In strict mode, a fetch for one day returned a record of another day:
    /// a fetch bug. Nothing of the batch was written.
    #[error("record {} has event_date {found} but the batch is for {expected}", ShortKey(.key))]
    WrongDay {
        /// The offending record's key.
        key: String,
        /// The day being synced.
        expected: NaiveDate,
        /// The record's `event_date`.
        found: NaiveDate,
    },

    /// A replace was refused by the job's
    /// [`ReplaceGuard`](crate::ReplaceGuard): an empty listing for a day
    /// that has live rows, or one that would delete more than the allowed
    /// fraction of them. Nothing of the batch was written; not retryable
    /// (the same listing would be refused again).
    #[error(
        "replace of {day} refused ({reason}): it would delete {would_delete} of the day's \
         {live} live rows; allow it with the job's replace guard if that is right"
    )]
    ReplaceRefused {
        /// The day of the listing.
        day: NaiveDate,
        /// How many live rows the replace would have turned into tombstones.
        would_delete: u64,
        /// The day's live rows when the replace was refused.
        live: u64,
        /// Which rule refused it.
        reason: Refusal,
    },

    /// A backfill range whose start is after its end.
    #[error("invalid range: start {start} is after end {end}")]
    InvalidRange {
        /// First day asked for.
        start: NaiveDate,
        /// Last day asked for.
        end: NaiveDate,
    },

    /// A table, schema or other identifier that is not `[a-z_][a-z0-9_]*`
    /// (lowercase, at most 63 bytes; see
    /// [`check_identifier`](crate::adapter::check_identifier)). No SQL is
    /// ever built from it.
    #[error(
        "invalid {what} name {name:?}: expected [a-z_][a-z0-9_]* (lowercase), at most 63 bytes"
    )]
    InvalidName {
        /// Which kind of name (`"table"`, `"schema"`).
        what: &'static str,
        /// The rejected name.
        name: String,
    },

    /// A setting's value is not one it can take ([`Settings`](crate::settings::Settings)):
    /// nothing was run.
    #[error("invalid setting: {0}")]
    InvalidSetting(String),

    /// The fetch function failed for a day. Retried only when the fetch
    /// marked its error [`Transient`]; a run stops when it marked it
    /// [`Fatal`].
    #[error("fetching {day} failed: {source}")]
    Fetch {
        /// The day whose fetch failed.
        day: NaiveDate,
        /// The fetch function's own error.
        source: BoxError,
    },

    /// A day (fetch and write) took longer than the job's per-day timeout.
    /// A write cut short rolled back whole or committed whole.
    #[error("syncing {day} timed out after {after:?}")]
    Timeout {
        /// The day that timed out.
        day: NaiveDate,
        /// The timeout.
        after: std::time::Duration,
    },

    /// The fetch function panicked while syncing a day. Nothing of that day
    /// was written.
    #[error("syncing {day} panicked: {message}")]
    Panicked {
        /// The day whose sync panicked.
        day: NaiveDate,
        /// The panic's message, when it had one.
        message: String,
    },

    /// The store could not be opened or connected to (missing directory,
    /// not a database, unreachable server, refused credentials).
    #[error("{backend}: cannot open the store: {}", Chain(&**.source))]
    Open {
        /// The store's name, e.g. `"sqlite"`.
        backend: &'static str,
        /// The driver's error.
        source: BoxError,
    },

    /// The store's engine failed while reading or applying a batch. A
    /// failed apply wrote nothing.
    #[error("{backend}: {}", Chain(&**.source))]
    Backend {
        /// The store's name, e.g. `"sqlite"`.
        backend: &'static str,
        /// Whether trying again may succeed (lock contention, deadlock,
        /// serialization failure, lost connection).
        retryable: bool,
        /// The driver's error.
        source: BoxError,
    },

    /// History was asked of a store that keeps none: turn it on where the
    /// store is opened (`history` on its builder, `--history` on the
    /// command line, `history=True` in Python).
    #[error("this store keeps no history: open it with history on")]
    HistoryOff,

    /// A streamed day could not be kept in, or read back from, a temporary
    /// file (a full or unwritable temporary directory: `TMPDIR`). Nothing
    /// of the day was written.
    #[error("cannot keep a streamed day in a temporary file: {0}")]
    Spill(#[source] std::io::Error),

    /// A store broke the [`Store`](crate::Store) contract: it did not read
    /// every record of a day, or did not account for each in its counts.
    /// The day's ledger row is not trusted; not retryable.
    #[error("{store} broke the store contract: {reason}")]
    BrokenContract {
        /// The store, as its `Debug` shows it.
        store: String,
        /// What it did.
        reason: String,
    },

    /// A day failed a per-day [check](crate::check) whose action is
    /// [`Fail`](crate::CheckAction::Fail): nothing of it was written, and
    /// the ledger records the reason as its failure until a person
    /// [accepts](crate::Store::accept) the day. Not retryable.
    #[error("{day}: {0}", day = .0.day)]
    CheckFailed(Box<crate::Flag>),

    /// The store does not do what was asked of it (a store of your own
    /// that does not implement an optional method).
    #[error("this store cannot {0}")]
    Unsupported(&'static str),

    /// Some days of a backfill failed; every other day was attempted.
    #[error("{0}")]
    Backfill(Box<BackfillError>),
}

impl Error {
    /// Whether the same operation may succeed if tried again.
    ///
    /// True for store errors the driver calls transient (lock contention,
    /// deadlock, serialization failure, lost connection), for timeouts, and
    /// for fetch errors with a [`Transient`] anywhere in their chain of
    /// causes: returned as it is, wrapped as the `source` of your own error
    /// type, or under an `anyhow` context.
    /// A [`Fatal`] error is never retryable, even with a `Transient` in its
    /// chain.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Backend { retryable, .. } => *retryable,
            Error::Fetch { source, .. } => Transient::is_in(&**source) && !Fatal::is_in(&**source),
            Error::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Whether the error is no day's own but the fetch's, so that no day can
    /// succeed: a fetch error with a [`Fatal`] anywhere in its chain of
    /// causes. A job stops its run on it and leaves the day's ledger entry
    /// as it was.
    pub fn is_fatal(&self) -> bool {
        match self {
            Error::Fetch { source, .. } => Fatal::is_in(&**source),
            _ => false,
        }
    }

    /// Wraps a driver error met while reading or writing.
    pub fn backend(backend: &'static str, retryable: bool, source: impl Into<BoxError>) -> Self {
        Error::Backend {
            backend,
            retryable,
            source: source.into(),
        }
    }

    /// Wraps a driver error met while opening or connecting.
    pub fn open(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Open {
            backend,
            source: source.into(),
        }
    }
}

/// Marks a fetch error as transient (a 503, a timeout, a reset connection),
/// so the job retries the day under its retry policy.
///
/// The job looks for a `Transient` along the fetch error's whole chain of
/// causes, so it may be returned as it is, be the `source` of your own
/// error type, or sit under `anyhow` contexts
/// (`anyhow::Error::new(Transient::new(e)).context("fetching orders")`).
/// One shape hides it: an `anyhow::Error` made directly from a `Transient`
/// with no context, since anyhow then shows the `Transient`'s causes but
/// not the `Transient` itself; wrap the other way round,
/// `Transient::new(anyhow_error)`.
///
/// ```
/// use backfill_core::{Record, Transient};
/// use chrono::NaiveDate;
///
/// async fn fetch(day: NaiveDate) -> Result<Vec<Record>, Transient> {
///     Err(Transient::new(format!("upstream returned 503 for {day}")))
/// }
/// # let _ = fetch;
/// ```
#[derive(Debug)]
pub struct Transient(BoxError);

/// Whether `error` or any of its causes is a `T`: how [`Transient`] and
/// [`Fatal`] are found under the caller's own error types and contexts.
fn in_chain<T: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    crate::text::causes(error).any(|e| e.is::<T>())
}

impl Transient {
    /// Wraps `error` as transient.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self(error.into())
    }

    /// The wrapped error.
    pub fn into_inner(self) -> BoxError {
        self.0
    }

    /// Whether `error` or any of its causes is a `Transient`.
    fn is_in(error: &(dyn std::error::Error + 'static)) -> bool {
        in_chain::<Transient>(error)
    }
}

impl fmt::Display for Transient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (transient)", self.0)
    }
}

impl std::error::Error for Transient {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// Marks a fetch error as fatal to the whole run: the fetch itself cannot
/// work, for any day (a program that is not installed, a script that is not
/// executable), so it is a configuration error rather than a failure of
/// the day.
///
/// On a fatal error the job does not retry the day, does not record the
/// failure in the store's ledger (the day's entry, perhaps a sync of last
/// week, is left as it was), and starts no other day; the days already in
/// flight finish. The day is still reported failed, with this error
/// ([`Error::is_fatal`] says which), and the days never started are in
/// [`RunReport::skipped`](crate::RunReport::skipped). Like [`Transient`],
/// it is found anywhere along the fetch error's chain of causes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use backfill_core::{Error, Fatal, Job, MemoryStore, Record};
/// use chrono::NaiveDate;
///
/// let fetch = |_day: NaiveDate| async { Err::<Vec<Record>, _>(Fatal::new("no such program: fetch-orders")) };
/// let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
/// let Err(Error::Backfill(failed)) = Job::new().backfill(&MemoryStore::new(), &fetch, jan(1)..=jan(5)).await else {
///     panic!("expected a failed run");
/// };
/// assert!(failed.failed[0].1.is_fatal());
/// assert_eq!(failed.report.skipped.len(), 4);
/// # }
/// ```
#[derive(Debug)]
pub struct Fatal(BoxError);

impl Fatal {
    /// Wraps `error` as fatal to the run.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self(error.into())
    }

    /// The wrapped error.
    pub fn into_inner(self) -> BoxError {
        self.0
    }

    /// Whether `error` or any of its causes is a `Fatal`.
    fn is_in(error: &(dyn std::error::Error + 'static)) -> bool {
        in_chain::<Fatal>(error)
    }
}

/// Shows the wrapped error as it is: what the run stopped on is said by
/// whoever reports it.
impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Fatal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// A record field, as named in [`Error::InvalidRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// `key`
    Key,
    /// `event_date`
    EventDate,
    /// `value`
    Value,
    /// `updated_at`
    UpdatedAt,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Key => "key",
            Field::EventDate => "event_date",
            Field::Value => "value",
            Field::UpdatedAt => "updated_at",
        })
    }
}

/// What is wrong with a field, as named in [`Error::InvalidRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Problem {
    /// The field is empty.
    Empty,
    /// The field is longer than allowed.
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// The field holds a NUL character.
    ContainsNul,
    /// The date or instant is outside years 1 to 9999.
    OutOfRange,
    /// The instant is a leap second, which stores cannot keep.
    LeapSecond,
    /// A tombstone carries a value; a deleted key has none.
    NotEmptyInTombstone,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Empty => f.write_str("is empty"),
            Problem::TooLong { len, max } => write!(f, "is {len} bytes, more than {max}"),
            Problem::ContainsNul => f.write_str("contains a NUL character"),
            Problem::OutOfRange => f.write_str("is outside years 1 to 9999"),
            Problem::LeapSecond => f.write_str("is a leap second"),
            Problem::NotEmptyInTombstone => f.write_str("is not empty in a tombstone"),
        }
    }
}

use crate::text::Chain;

/// Shows a key in a message, shortened when it is long.
struct ShortKey<'a>(&'a str);

impl fmt::Display for ShortKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 64;
        if self.0.len() <= SHOWN {
            return write!(f, "{:?}", self.0);
        }
        let shown = crate::text::prefix(self.0, SHOWN);
        write!(f, "{shown:?}… ({} bytes)", self.0.len())
    }
}

/// A fetch's error as the job reports it. A record rule broken while the
/// fetch built its records (`Record::new(..)?`) is reported as the typed
/// record error itself, not hidden inside `Error::Fetch`.
pub(crate) fn fetch_error(day: NaiveDate, source: BoxError) -> Error {
    match source.downcast::<Error>() {
        Ok(error)
            if matches!(
                *error,
                Error::InvalidRecord { .. } | Error::WrongDay { .. } | Error::InvalidColumn(_)
            ) =>
        {
            *error
        }
        Ok(error) => Error::Fetch { day, source: error },
        Err(source) => Error::Fetch { day, source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("db error")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn store_errors_show_their_causes_once() {
        let inner = std::io::Error::other("ERROR: relation \"x\" does not exist");
        let e = Error::backend("postgres", false, Outer(inner));
        assert_eq!(
            e.to_string(),
            "postgres: db error: ERROR: relation \"x\" does not exist"
        );
        let plain = Error::open(
            "sqlite",
            std::io::Error::other("unable to open database file"),
        );
        assert_eq!(
            plain.to_string(),
            "sqlite: cannot open the store: unable to open database file"
        );
    }
}

/// A record whose value does not fit a column: its key, the column, the
/// path to the field, what is wrong, and the offending text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ColumnError {
    /// The record's key.
    pub key: String,
    /// The column.
    pub column: String,
    /// The path to its field, as [`Column::path_text`](crate::columns::Column::path_text) shows it.
    pub path: String,
    /// What is wrong.
    pub problem: ColumnProblem,
    /// The offending text: at most 200 bytes of it, empty for a missing
    /// field.
    pub text: String,
}

impl fmt::Display for ColumnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid record {:?}: column {} (path {}): {}",
            self.key, self.column, self.path, self.problem
        )?;
        if !self.text.is_empty() {
            write!(f, ": {}", self.text)?;
        }
        Ok(())
    }
}

impl std::error::Error for ColumnError {}

/// Why a record's field does not fit its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnProblem {
    /// Columns are declared, and the value is not JSON.
    NotJson,
    /// A required field is missing or `null` (or a level of its path is
    /// not an object).
    Missing,
    /// The field is not of the column's type.
    WrongType(ColumnType),
    /// The number does not fit the type (past 64 bits, or not finite).
    OutOfRange,
    /// A text holds a NUL character, which no store keeps.
    ContainsNul,
    /// Not a `YYYY-MM-DD` date in years 1 to 9999.
    NotADate,
    /// Not an RFC 3339 instant with an offset, in years 1 to 9999.
    NotAnInstant,
}

impl fmt::Display for ColumnProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnProblem::NotJson => f.write_str("the value is not JSON"),
            ColumnProblem::Missing => f.write_str("the field is missing"),
            ColumnProblem::WrongType(ty) => write!(f, "the field is not {}", article(*ty)),
            ColumnProblem::OutOfRange => f.write_str("the number is out of range"),
            ColumnProblem::ContainsNul => f.write_str("the text contains a NUL character"),
            ColumnProblem::NotADate => f.write_str("the field is not a date (YYYY-MM-DD)"),
            ColumnProblem::NotAnInstant => {
                f.write_str("the field is not an instant with an offset (RFC 3339)")
            }
        }
    }
}

/// The failed days of a backfill, with the report of the days that
/// succeeded: [`Error::Backfill`].
#[derive(Debug)]
#[non_exhaustive]
pub struct BackfillError {
    /// Each failed day with its error, in day order.
    pub failed: Vec<(NaiveDate, Error)>,
    /// The whole run: the days that succeeded, the failed ones as text, the
    /// ones never started.
    pub report: RunReport,
}

impl BackfillError {
    /// The error of a run whose `report` lists the days that failed with
    /// the errors in `failed`.
    pub fn new(failed: Vec<(NaiveDate, Error)>, report: RunReport) -> Self {
        Self { failed, report }
    }
}

impl fmt::Display for BackfillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "backfill failed for {} of {} days",
            self.failed.len(),
            self.report.planned.len()
        )?;
        if !self.report.skipped.is_empty() {
            write!(f, " ({} not started)", self.report.skipped.len())?;
        }
        f.write_str(":")?;
        for (day, error) in &self.failed {
            write!(f, "\n  {day}: {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BackfillError {}
