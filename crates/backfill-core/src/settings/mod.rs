//! One settings model for a job and its store, whatever configures it: the
//! command line's flags and `BACKFILL_*` variables, Python's keyword
//! arguments, and a configuration file's profile (with the `config`
//! feature: [`Profiles`]).
//!
//! A [`Settings`] is one **layer**: each setting is `Some` where that layer
//! sets it. Layers stack with [`Settings::over`] — flags over the file, the
//! file over [`Settings::defaults`], the one set of defaults, stated here
//! and nowhere else — and [`Settings::job`] builds the [`Job`] they
//! describe. [`KEYS`] names every setting once: its key in a file, its
//! flag, its variable and its keyword argument.
//!
//! ```
//! use std::time::Duration;
//! use backfill_core::settings::Settings;
//! use backfill_core::Mode;
//!
//! let file = Settings { mode: Some(Mode::Replace), retries: Some(5), ..Settings::default() };
//! let flags = Settings { retries: Some(0), ..Settings::default() };
//! let effective = flags.over(&file).over(&Settings::defaults());
//! assert_eq!(effective.mode, Some(Mode::Replace));
//! assert_eq!(effective.retries, Some(0));
//! assert_eq!(effective.retry_delay, Some(Duration::from_secs(2)));
//! let job = effective.job().unwrap();
//! # let _ = job;
//! ```

#[cfg(feature = "config")]
mod file;
mod values;

use std::time::Duration;

use crate::{
    CheckAction, Checks, EventDates, Job, Mode, ReplaceGuard, Retry, DEFAULT_MAX_DELETE_FRACTION,
};

#[cfg(feature = "config")]
pub use file::{ConfigError, Profiles, CONFIG_FILE};
pub use values::{
    format_duration, format_size, parse_duration, parse_fraction, parse_size, url_has_password,
    url_without_password, with_password,
};

/// The records table a store writes when none is named.
pub const DEFAULT_TABLE: &str = "backfill_records";
/// The Postgres schema a store writes when none is named.
pub const DEFAULT_SCHEMA: &str = "public";
/// The store the command line opens when none is named.
pub const DEFAULT_STORE: &str = "sqlite://backfill.db";
/// Retries of a day after a transient failure.
pub const DEFAULT_RETRIES: u32 = 2;
/// The delay before a day's first retry; each further one waits twice as
/// long, up to [`DEFAULT_MAX_RETRY_DELAY`].
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(2);
/// The longest delay between two attempts at a day.
pub const DEFAULT_MAX_RETRY_DELAY: Duration = Duration::from_secs(300);
/// How long one attempt at a day (fetch and write) may take.
pub const DEFAULT_DAY_TIMEOUT: Duration = Duration::from_secs(3600);

/// One layer of settings: `Some` where this layer sets a value. See the
/// [module](self) for how layers stack; [`KEYS`] for each setting's names.
///
/// Build one with `..Settings::default()` after the fields a layer sets:
/// settings added later are `None` there too.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// The store's URL: `sqlite://PATH` or `postgres://USER@HOST/DB`.
    pub store: Option<String>,
    /// The environment variable holding the Postgres password (a file
    /// never holds one).
    pub password_env: Option<String>,
    /// The Postgres schema.
    pub schema: Option<String>,
    /// The records table.
    pub table: Option<String>,
    /// Typed columns, as declarations (`NAME:TYPE[?][=PATH]`).
    pub columns: Option<Vec<String>>,
    /// Whether opening may drop or remake typed columns.
    pub allow_column_changes: Option<bool>,
    /// Whether the table keeps [history](crate::history) (turned on when
    /// opened with it, then on for good).
    pub history: Option<bool>,
    /// The command line's fetch command (`{day}` replaced).
    pub fetch_cmd: Option<String>,
    /// The command line's fetch files (`{day}` replaced).
    pub fetch_files: Option<String>,
    /// Merge or replace.
    pub mode: Option<Mode>,
    /// Days synced at once by a backfill.
    pub concurrency: Option<u32>,
    /// Retries of a day after a transient failure.
    pub retries: Option<u32>,
    /// The delay before the first retry.
    pub retry_delay: Option<Duration>,
    /// The longest delay between two attempts.
    pub max_retry_delay: Option<Duration>,
    /// How long an attempt at a day may take; zero for no limit.
    pub day_timeout: Option<Duration>,
    /// Start no new day once one failed.
    pub fail_fast: Option<bool>,
    /// Accept records dated another day than the one fetched.
    pub lenient_event_dates: Option<bool>,
    /// Bytes of a day held in memory before it spills to temporary files.
    pub stream_memory: Option<usize>,
    /// The IANA time zone that says what "today" is.
    pub time_zone: Option<String>,
    /// Skip the write of a day whose records have its last sync's digest.
    pub skip_unchanged: Option<bool>,
    /// Let an empty listing empty a day.
    pub allow_empty_replace: Option<bool>,
    /// The largest fraction of a day's live rows a listing may delete.
    pub max_delete_fraction: Option<f64>,
    /// What a day with fewer records than `check_fraction` of its
    /// neighbours' median becomes ([checks](crate::check)).
    pub check_volume: Option<CheckAction>,
    /// What a day with no record, where its neighbours had some, becomes.
    pub check_empty: Option<CheckAction>,
    /// The volume check's fraction of the neighbours' median.
    pub check_fraction: Option<f64>,
    /// The days on either side a day's count is compared with.
    pub check_window: Option<u32>,
}

/// One setting's names, in [`KEYS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Key {
    /// Its key in a configuration file's profile.
    pub name: &'static str,
    /// The command line's flag.
    pub flag: &'static str,
    /// The environment variable the command line reads, if any.
    pub env: Option<&'static str>,
    /// Python's keyword argument (of `Job`, or of the stores for the
    /// store's settings), if any.
    pub python: Option<&'static str>,
    /// What it sets, in a line.
    pub doc: &'static str,
}

macro_rules! keys {
    ($($name:ident, $flag:literal, $env:expr, $python:expr, $doc:literal;)*) => {
        /// Every setting, in the order [`Settings`] declares them.
        pub const KEYS: &[Key] = &[$(Key {
            name: stringify!($name),
            flag: $flag,
            env: $env,
            python: $python,
            doc: $doc,
        }),*];

        impl Settings {
            /// This layer's values, falling back on `lower`'s where this one
            /// sets none.
            #[must_use]
            pub fn over(&self, lower: &Settings) -> Settings {
                Settings { $($name: self.$name.clone().or_else(|| lower.$name.clone())),* }
            }

            /// Sets setting `name` from its text, the way a flag or a file
            /// writes it (a column's declaration is added to those set).
            ///
            /// # Errors
            ///
            /// A message naming the text, if it is not a value of the
            /// setting, or `name` no setting.
            pub fn set_text(&mut self, name: &str, text: &str) -> Result<(), String> {
                match name {
                    $(stringify!($name) => values::Parse::set(&mut self.$name, text),)*
                    _ => Err(format!("no setting {name:?}")),
                }
            }

            /// The value of setting `name` in this layer as text, the way a
            /// file writes it (`None`: not set here, or no such setting).
            pub fn text(&self, name: &str) -> Option<String> {
                match name {
                    $(stringify!($name) => self.$name.as_ref().map(values::Text::text),)*
                    _ => None,
                }
            }
        }
    };
}

keys! {
    store, "--store", Some("BACKFILL_STORE"), None,
        "the store: sqlite://PATH or postgres://USER@HOST/DB";
    password_env, "--password-env", Some("BACKFILL_PASSWORD_ENV"), None,
        "the variable holding the Postgres password";
    schema, "--schema", Some("BACKFILL_SCHEMA"), Some("schema"),
        "the Postgres schema";
    table, "--table", Some("BACKFILL_TABLE"), Some("table"),
        "the records table";
    columns, "--column", None, Some("columns"),
        "typed columns, NAME:TYPE[?][=PATH] each";
    allow_column_changes, "--allow-column-changes", None, Some("allow_column_changes"),
        "let opening drop or remake typed columns";
    history, "--history", None, Some("history"),
        "keep every version of every key (the <table>_history view)";
    fetch_cmd, "--fetch-cmd", Some("BACKFILL_FETCH_CMD"), None,
        "the command printing a day's records ({day} replaced)";
    fetch_files, "--fetch-files", Some("BACKFILL_FETCH_FILES"), None,
        "the files holding a day's records ({day} replaced)";
    mode, "--mode", Some("BACKFILL_MODE"), Some("mode"),
        "merge, or replace (a day's fetch is the whole day)";
    concurrency, "--concurrency", Some("BACKFILL_CONCURRENCY"), Some("concurrency"),
        "days a backfill syncs at once";
    retries, "--retries", Some("BACKFILL_RETRIES"), Some("retries"),
        "retries of a day after a transient failure";
    retry_delay, "--retry-delay", Some("BACKFILL_RETRY_DELAY"), Some("retry_delay"),
        "the delay before the first retry, doubling after";
    max_retry_delay, "--max-retry-delay", Some("BACKFILL_MAX_RETRY_DELAY"), Some("max_retry_delay"),
        "the longest delay between two attempts";
    day_timeout, "--day-timeout", Some("BACKFILL_DAY_TIMEOUT"), Some("day_timeout"),
        "how long an attempt at a day may take (0: no limit)";
    fail_fast, "--fail-fast", None, Some("fail_fast"),
        "start no new day once one failed";
    lenient_event_dates, "--lenient-event-dates", None, Some("lenient_event_dates"),
        "accept records dated another day than the one fetched";
    stream_memory, "--stream-memory", Some("BACKFILL_STREAM_MEMORY"), Some("stream_memory"),
        "a day's bytes held in memory before temporary files";
    time_zone, "--tz", Some("BACKFILL_TZ"), Some("time_zone"),
        "the IANA time zone that says what today is";
    skip_unchanged, "--skip-unchanged", None, Some("skip_unchanged"),
        "skip a day whose records have its last sync's digest";
    allow_empty_replace, "--allow-empty-replace", None, Some("allow_empty_replace"),
        "let an empty listing empty a day";
    max_delete_fraction, "--max-delete-fraction", Some("BACKFILL_MAX_DELETE_FRACTION"), Some("max_delete_fraction"),
        "the largest fraction of a day a listing may delete";
    check_volume, "--check-volume", Some("BACKFILL_CHECK_VOLUME"), Some("check_volume"),
        "a day under check_fraction of its neighbours' median: off, warn or fail";
    check_empty, "--check-empty", Some("BACKFILL_CHECK_EMPTY"), Some("check_empty"),
        "a day with no record where its neighbours had some: off, warn or fail";
    check_fraction, "--check-fraction", Some("BACKFILL_CHECK_FRACTION"), Some("check_fraction"),
        "the volume check's fraction of the neighbours' median";
    check_window, "--check-window", Some("BACKFILL_CHECK_WINDOW"), Some("check_window"),
        "the days on either side a day's count is compared with";
}

impl Settings {
    /// The one set of defaults: every setting but `password_env`,
    /// `fetch_cmd` and `fetch_files` (which have none) set.
    pub fn defaults() -> Settings {
        Settings {
            store: Some(DEFAULT_STORE.to_owned()),
            password_env: None,
            schema: Some(DEFAULT_SCHEMA.to_owned()),
            table: Some(DEFAULT_TABLE.to_owned()),
            columns: Some(Vec::new()),
            allow_column_changes: Some(false),
            history: Some(false),
            fetch_cmd: None,
            fetch_files: None,
            mode: Some(Mode::Merge),
            concurrency: Some(1),
            retries: Some(DEFAULT_RETRIES),
            retry_delay: Some(DEFAULT_RETRY_DELAY),
            max_retry_delay: Some(DEFAULT_MAX_RETRY_DELAY),
            day_timeout: Some(DEFAULT_DAY_TIMEOUT),
            fail_fast: Some(false),
            lenient_event_dates: Some(false),
            stream_memory: Some(crate::DEFAULT_STREAM_MEMORY),
            time_zone: Some("UTC".to_owned()),
            skip_unchanged: Some(false),
            allow_empty_replace: Some(false),
            max_delete_fraction: Some(DEFAULT_MAX_DELETE_FRACTION),
            check_volume: Some(CheckAction::Warn),
            check_empty: Some(CheckAction::Warn),
            check_fraction: Some(crate::check::DEFAULT_MIN_FRACTION),
            check_window: Some(crate::check::DEFAULT_CHECK_WINDOW),
        }
    }

    /// The [`Job`] these settings describe, over the defaults. Its time
    /// zone is UTC unless `time_zone` is set, which needs the `config`
    /// feature (IANA names, from `chrono-tz`); without it, any other zone
    /// is an [`Error::InvalidSetting`](crate::Error::InvalidSetting).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) for an unknown time zone or
    /// a fraction outside 0–1 (`max_delete_fraction`, `check_fraction`).
    pub fn job(&self) -> crate::Result<Job> {
        let s = self.over(&Settings::defaults());
        let fraction = s.max_delete_fraction.unwrap_or(DEFAULT_MAX_DELETE_FRACTION);
        if !(0.0..=1.0).contains(&fraction) {
            return Err(crate::Error::InvalidSetting(format!(
                "max_delete_fraction {fraction} is not between 0 and 1"
            )));
        }
        let check_fraction = s
            .check_fraction
            .unwrap_or(crate::check::DEFAULT_MIN_FRACTION);
        if !(0.0..=1.0).contains(&check_fraction) {
            return Err(crate::Error::InvalidSetting(format!(
                "check_fraction {check_fraction} is not between 0 and 1"
            )));
        }
        let checks = Checks::default()
            .volume(s.check_volume.unwrap_or_default())
            .empty(s.check_empty.unwrap_or_default())
            .min_fraction(check_fraction)
            .window(s.check_window.unwrap_or(crate::check::DEFAULT_CHECK_WINDOW));
        let retries = s.retries.unwrap_or(DEFAULT_RETRIES);
        let delay = s.retry_delay.unwrap_or(DEFAULT_RETRY_DELAY);
        let max_delay = s.max_retry_delay.unwrap_or(DEFAULT_MAX_RETRY_DELAY);
        let mut job = Job::new()
            .mode(s.mode.unwrap_or_default())
            .concurrency(s.concurrency.unwrap_or(1) as usize)
            .retry(
                Retry::default()
                    .max_attempts(retries.saturating_add(1))
                    .backoff(delay, max_delay),
            )
            .replace_guard(
                ReplaceGuard::default()
                    .allow_empty(s.allow_empty_replace.unwrap_or(false))
                    .max_delete_fraction(fraction),
            )
            .fail_fast(s.fail_fast.unwrap_or(false))
            .event_dates(match s.lenient_event_dates.unwrap_or(false) {
                true => EventDates::Lenient,
                false => EventDates::Strict,
            })
            .skip_unchanged(s.skip_unchanged.unwrap_or(false))
            .checks(checks);
        // The write's own default is the same budget, left unset.
        if let Some(bytes) = s
            .stream_memory
            .filter(|b| *b != crate::DEFAULT_STREAM_MEMORY)
        {
            job = job.stream_memory(bytes);
        }
        match s.day_timeout {
            Some(t) if !t.is_zero() => job = job.day_timeout(t),
            _ => job = job.no_day_timeout(),
        }
        match s.time_zone.as_deref() {
            None | Some("UTC") => {}
            Some(zone) => job = values::with_zone(job, zone)?,
        }
        Ok(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_has_one_key_and_the_defaults_set_all_but_three() {
        let defaults = Settings::defaults();
        let unset: Vec<&str> = KEYS
            .iter()
            .filter(|k| defaults.text(k.name).is_none())
            .map(|k| k.name)
            .collect();
        assert_eq!(unset, ["password_env", "fetch_cmd", "fetch_files"]);
        let mut names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KEYS.len());
    }

    #[test]
    fn layers_stack() {
        let low = Settings {
            retries: Some(7),
            table: Some("low".into()),
            ..Settings::default()
        };
        let high = Settings {
            table: Some("high".into()),
            ..Settings::default()
        };
        let s = high.over(&low);
        assert_eq!(s.table.as_deref(), Some("high"));
        assert_eq!(s.retries, Some(7));
        assert_eq!(s.text("retry_delay"), None);
        assert_eq!(
            Settings::defaults().text("retry_delay").as_deref(),
            Some("2s")
        );
        assert_eq!(
            Settings::defaults().text("stream_memory").as_deref(),
            Some("64MiB")
        );
    }

    #[test]
    fn every_default_reads_back_from_its_text() {
        let defaults = Settings::defaults();
        let mut read = Settings::default();
        for key in KEYS {
            if let Some(text) = defaults.text(key.name) {
                if key.name != "columns" {
                    read.set_text(key.name, &text).unwrap();
                }
            }
        }
        read.columns = Some(Vec::new());
        assert_eq!(read, defaults);
        let mut s = Settings::default();
        s.set_text("columns", "a:integer").unwrap();
        s.set_text("columns", "b:text").unwrap();
        assert_eq!(s.columns, Some(vec!["a:integer".into(), "b:text".into()]));
        assert!(s.set_text("retry_delay", "soon").is_err());
        assert!(s.set_text("mode", "upsert").is_err());
        assert!(s.set_text("colour", "red").is_err());
    }

    #[test]
    fn the_job_has_the_defaults_job_new_has() {
        let from_settings = format!("{:?}", Settings::default().job().unwrap());
        assert_eq!(from_settings, format!("{:?}", Job::new()));
        let bad = Settings {
            max_delete_fraction: Some(1.5),
            ..Settings::default()
        };
        assert!(matches!(bad.job(), Err(crate::Error::InvalidSetting(_))));
    }
}
