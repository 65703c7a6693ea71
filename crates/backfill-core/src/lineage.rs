//! OpenLineage run events (spec 2-0-2) for a job's runs, for Marquez or any
//! other lineage server: the same events the command line's
//! `--openlineage-url` sends, built from a [`Job`](crate::Job)'s own
//! [`Event`]s.
//!
//! A run emits START when it begins, then one of COMPLETE (no day
//! failed), FAIL (a day failed: `errorMessage` holds the first error) or
//! ABORT (stopped by its [`StopHandle`](crate::StopHandle) with no failed
//! day). In each:
//!
//! - the job: namespace [`OpenLineage::namespace`] (`backfill`), the name
//!   you give, of the fetch;
//! - the run: its id is the run's own (a UUIDv7), or for a
//!   [`Job::run_id`](crate::Job::run_id) that is not a UUID, a UUID
//!   derived from it (version 5), the id itself in the `backfill` facet;
//! - the output: the table as a [`Dataset`], named as OpenLineage's naming
//!   conventions say, with `outputStatistics.rowCount` the rows written;
//! - the `backfill` run facet (`openlineage/BackfillRunFacet.json` beside
//!   this crate's manifest is its schema): the range, the mode, and once
//!   the run ended, what happened to its days and the report's counts.
//!
//! Sending is yours: [`OpenLineage::observer`] hands each event to a
//! function, [`append_to`] is one that appends them to a JSON Lines file,
//! and a POST of the event's text to `http://marquez:5000/api/v1/lineage`
//! with your HTTP client is another. Lineage is observability beside the
//! run: a sink should never fail it, and [`append_to`] only warns.
//!
//! ```
//! use backfill_core::lineage::{self, Dataset, OpenLineage};
//! use backfill_core::{Job, MemoryStore, Record};
//! use chrono::NaiveDate;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let events = dir.path().join("lineage.jsonl");
//! let table = Dataset::sqlite("/srv/data/shop.db".as_ref(), "orders");
//! let job = Job::new().observer(
//!     OpenLineage::new("orders_api", table).observer(lineage::append_to(&events)),
//! );
//!
//! let store = MemoryStore::new();
//! let fetch = |day: NaiveDate| async move {
//!     let at = day.and_hms_opt(12, 0, 0).unwrap().and_utc();
//!     Ok::<_, backfill_core::Error>(vec![Record::new(format!("o-{day}"), day, "{}", at)?])
//! };
//! let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
//! job.backfill(&store, &fetch, jan(1)..=jan(3)).await?;
//!
//! let text = std::fs::read_to_string(&events)?;
//! let lines: Vec<serde_json::Value> =
//!     text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
//! assert_eq!(lines[0]["eventType"], "START");
//! assert_eq!(lines[1]["eventType"], "COMPLETE");
//! assert_eq!(lines[1]["outputs"][0]["name"], "orders");
//! assert_eq!(lines[1]["run"]["facets"]["backfill"]["counts"]["inserted"], 3);
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::io::Write as _;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{NaiveDate, SecondsFormat, Utc};
use serde_json::{json, Value};

use crate::{Event, Mode, RunId, RunReport};

/// The spec the events follow: its `RunEvent` is their `schemaURL`.
const SPEC: &str = "https://openlineage.io/spec/2-0-2/OpenLineage.json";
/// The standard facets' schemas, at the versions of the spec above.
const ERROR_MESSAGE: &str =
    "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet";
const OUTPUT_STATISTICS: &str = "https://openlineage.io/spec/facets/1-0-2/OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet";
const JOB_TYPE: &str =
    "https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet";
const PROCESSING_ENGINE: &str = "https://openlineage.io/spec/facets/1-1-1/ProcessingEngineRunFacet.json#/$defs/ProcessingEngineRunFacet";

/// This crate at its version: the events' `producer` unless
/// [`OpenLineage::producer`] names another entry point.
fn crate_url(name: &str) -> String {
    format!(
        "{}/tree/v{}/crates/{name}",
        env!("CARGO_PKG_REPOSITORY"),
        env!("CARGO_PKG_VERSION")
    )
}

/// The schema of the `backfill` run facet, beside this crate's manifest.
fn facet_schema() -> String {
    format!(
        "{}/openlineage/BackfillRunFacet.json#/$defs/BackfillRunFacet",
        crate_url("backfill-core")
    )
}

/// A table as an OpenLineage dataset: a namespace (where) and a name
/// (what), by OpenLineage's naming conventions, never with credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    /// Where: `postgres://HOST:PORT`, `sqlite://PATH`, `s3://BUCKET`,
    /// `file`.
    pub namespace: String,
    /// What: `DATABASE.SCHEMA.TABLE`, the table, the key prefix or path.
    pub name: String,
}

impl Dataset {
    /// A dataset of your own naming.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A Postgres table, from the URL the store connected with:
    /// `postgres://HOST:PORT` (the first host, 5432 by default) and
    /// `DATABASE.SCHEMA.TABLE`, the database as libpq defaults it. Neither
    /// user nor password is in it.
    pub fn postgres(url: &str, schema: &str, table: &str) -> Self {
        let (host, port, database) = postgres_parts(url);
        Self::new(
            format!("postgres://{host}:{port}"),
            format!("{database}.{schema}.{table}"),
        )
    }

    /// A table of an SQLite file (which the conventions do not name):
    /// `sqlite://` and the file's absolute path, and the table.
    pub fn sqlite(path: &Path, table: &str) -> Self {
        Self::new(format!("sqlite://{}", absolute(path).display()), table)
    }

    /// A Delta table at `location`: a local directory (or `file://` URL)
    /// is `file` and its absolute path; on S3, `s3://BUCKET` and the
    /// table's key prefix. Neither credentials nor query are in it.
    pub fn delta(location: &str) -> Self {
        let location = location.split('?').next().unwrap_or_default();
        let location = location.strip_prefix("delta+").unwrap_or(location);
        let location = location.strip_prefix("delta://").unwrap_or(location);
        match location.split_once("://") {
            Some(("s3" | "s3a", rest)) => {
                let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
                let bucket = authority.rsplit('@').next().unwrap_or(authority);
                Self::new(format!("s3://{bucket}"), key.trim_matches('/'))
            }
            Some((_, path)) => Self::new("file", directory(path)),
            None => Self::new("file", directory(location)),
        }
    }
}

/// A directory's absolute path, without a trailing `/`.
fn directory(path: &str) -> String {
    let path = match path.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    };
    absolute(Path::new(path)).display().to_string()
}

/// The password a store URL holds, in its user info
/// (`postgres://USER:PASSWORD@…`) or its query (`?password=…`): a text
/// to give [`OpenLineage::secrets`].
pub fn url_password(url: &str) -> Option<String> {
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if let Some((_, password)) = userinfo.split_once(':') {
                if !password.is_empty() {
                    return Some(password.to_owned());
                }
            }
        }
    }
    let query = url.split_once('?').map(|(_, q)| q)?;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("password="))
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
}

/// The values of `(name, value)` pairs whose names say they hold a
/// secret: `*PASSWORD*`, `*SECRET*`, `*TOKEN*`, `*KEY*`, `*CREDENTIAL*`,
/// in any case. Give it `std::env::vars()` (a fetch sees the whole
/// environment, and its error may quote any of it, as
/// `AWS_SECRET_ACCESS_KEY` for a Delta table on S3) or a store's options;
/// the texts go to [`OpenLineage::secrets`]. Values shorter than 8 bytes
/// are left, lest every such word in a message become `***`.
pub fn named_secrets(vars: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    const SECRET: [&str; 5] = ["PASSWORD", "SECRET", "TOKEN", "KEY", "CREDENTIAL"];
    vars.into_iter()
        .filter(|(name, value)| {
            let name = name.to_ascii_uppercase();
            value.len() >= 8 && SECRET.iter().any(|word| name.contains(word))
        })
        .map(|(_, value)| value)
        .collect()
}

/// The host, port and database of a Postgres URL, as libpq defaults them.
fn postgres_parts(url: &str) -> (String, String, String) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .filter(|value| !value.is_empty())
    };
    let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (userinfo.split(':').next(), hosts),
        None => (None, authority),
    };
    // The first of several hosts; an IPv6 address keeps its brackets.
    let first = hosts.split(',').next().unwrap_or_default();
    let (host, port) = match first.rfind(':').filter(|&i| !first[i..].contains(']')) {
        Some(i) => (&first[..i], &first[i + 1..]),
        None => (first, ""),
    };
    let host = Some(host)
        .filter(|h| !h.is_empty())
        .or_else(|| param("host").filter(|h| !h.starts_with('/')))
        .unwrap_or("localhost");
    let port = Some(port)
        .filter(|p| !p.is_empty())
        .or_else(|| param("port"))
        .unwrap_or("5432");
    let database = Some(path)
        .filter(|p| !p.is_empty())
        .or_else(|| param("dbname"))
        .or(user.filter(|u| !u.is_empty()))
        .unwrap_or("postgres");
    (host.to_owned(), port.to_owned(), database.to_owned())
}

/// `path` from the root, so that the same file has one name wherever the
/// program ran.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// How a run ended, for its last event.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Ending<'a> {
    /// The run ran: its report, and the error that stopped it if it
    /// stopped before its days (else the first failed day is the error).
    Ran(&'a RunReport, Option<&'a str>),
    /// The run could not run (the store could not be opened): why.
    CannotRun(&'a str),
}

/// The OpenLineage events of a job's runs, each built when it happens:
/// [`start`](Self::start) and [`end`](Self::end) by hand, or every run of a
/// job through [`observer`](Self::observer).
#[derive(Debug, Clone)]
pub struct OpenLineage {
    job_namespace: String,
    job_name: String,
    dataset: Dataset,
    mode: Mode,
    producer: String,
    /// Texts that must never leave in an event: passwords, keys.
    secrets: Vec<String>,
}

impl OpenLineage {
    /// The events of runs of the job `job_name` (what the fetch is: an
    /// API's name, a script's) writing `dataset`.
    pub fn new(job_name: impl Into<String>, dataset: Dataset) -> Self {
        Self {
            job_namespace: "backfill".to_owned(),
            job_name: job_name.into(),
            dataset,
            mode: Mode::default(),
            producer: crate_url("backfill-core"),
            secrets: Vec::new(),
        }
    }

    /// The job's namespace (`backfill` by default).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.job_namespace = namespace.into();
        self
    }

    /// The job's [`Mode`], in the `backfill` facet (the default mode
    /// unless given).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The events' `producer`: a URI naming the program that sends them
    /// (this crate at its version by default).
    pub fn producer(mut self, producer: impl Into<String>) -> Self {
        self.producer = producer.into();
        self
    }

    /// Texts that must never leave in an event (a password, an API key
    /// a fetch error might quote): each is replaced by `***` in error
    /// messages and the job's name. Empty texts are ignored.
    pub fn secrets(mut self, secrets: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.secrets.extend(
            secrets
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty()),
        );
        self
    }

    /// The dataset the events name as their output.
    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// The START event of run `run_id` over `range`.
    pub fn start(&self, run_id: &RunId, range: &RangeInclusive<NaiveDate>) -> Value {
        self.event(
            "START",
            run_id,
            self.backfill_facet(run_id, range, None),
            None,
            None,
        )
    }

    /// The last event of run `run_id` over `range`: COMPLETE, FAIL or
    /// ABORT, as `ending` says.
    pub fn end(
        &self,
        run_id: &RunId,
        range: &RangeInclusive<NaiveDate>,
        ending: Ending<'_>,
    ) -> Value {
        match ending {
            Ending::CannotRun(why) => self.event(
                "FAIL",
                run_id,
                self.backfill_facet(run_id, range, None),
                Some(why),
                None,
            ),
            Ending::Ran(report, cannot_run) => {
                let first_failure = report
                    .failed
                    .first()
                    .map(|failed| format!("{}: {}", failed.day, failed.error));
                let error = cannot_run.map(str::to_owned).or(first_failure);
                let state = match &error {
                    Some(_) => "FAIL",
                    None if report.stopped => "ABORT",
                    None => "COMPLETE",
                };
                self.event(
                    state,
                    run_id,
                    self.backfill_facet(run_id, range, Some(report)),
                    error.as_deref(),
                    Some(report.totals().written()),
                )
            }
        }
    }

    /// A [`Job::observer`](crate::Job::observer) that hands every run's
    /// START and last event to `emit`, runs at once through one job
    /// included. A single day's [`Job::sync_day`](crate::Job::sync_day) is
    /// not a run and sends none: run it as `backfill(day..=day)` for its
    /// events.
    pub fn observer(
        self,
        emit: impl Fn(Value) + Send + Sync + 'static,
    ) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
        let ranges: Mutex<HashMap<RunId, RangeInclusive<NaiveDate>>> = Mutex::default();
        move |event| match event {
            Event::RunStarted { run_id, range, .. } => {
                ranges
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert((*run_id).clone(), (*range).clone());
                emit(self.start(run_id, range));
            }
            Event::RunFinished { report } => {
                let Some(run_id) = &report.run_id else {
                    return;
                };
                let range = ranges
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(run_id);
                let range = range.or_else(|| {
                    let first = report.planned.iter().min()?;
                    let last = report.planned.iter().max()?;
                    Some(*first..=*last)
                });
                if let Some(range) = range {
                    emit(self.end(run_id, &range, Ending::Ran(report, None)));
                }
            }
            _ => {}
        }
    }

    fn event(
        &self,
        state: &str,
        run_id: &RunId,
        backfill: Value,
        error: Option<&str>,
        written: Option<u64>,
    ) -> Value {
        let producer = &self.producer;
        let mut run_facets = json!({
            "backfill": backfill,
            "processing_engine": {
                "_producer": producer,
                "_schemaURL": PROCESSING_ENGINE,
                "name": "backfill",
                "version": env!("CARGO_PKG_VERSION"),
            },
        });
        if let Some(error) = error {
            run_facets["errorMessage"] = json!({
                "_producer": producer,
                "_schemaURL": ERROR_MESSAGE,
                "message": self.scrub(error),
                "programmingLanguage": "RUST",
            });
        }
        let mut output = json!({
            "namespace": self.dataset.namespace,
            "name": self.dataset.name,
            "facets": {},
            "outputFacets": {},
        });
        if let Some(rows) = written {
            output["outputFacets"] = json!({
                "outputStatistics": {
                    "_producer": producer,
                    "_schemaURL": OUTPUT_STATISTICS,
                    "rowCount": rows,
                },
            });
        }
        json!({
            "eventType": state,
            "eventTime": Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
            "producer": producer,
            "schemaURL": format!("{SPEC}#/$defs/RunEvent"),
            "run": { "runId": run_uuid(run_id), "facets": run_facets },
            "job": {
                "namespace": self.job_namespace,
                "name": self.scrub(&self.job_name),
                "facets": {
                    "jobType": {
                        "_producer": producer,
                        "_schemaURL": JOB_TYPE,
                        "processingType": "BATCH",
                        "integration": "BACKFILL",
                        "jobType": "JOB",
                    },
                },
            },
            "inputs": [],
            "outputs": [output],
        })
    }

    /// The `backfill` run facet: the run's range, and once it ran, what
    /// happened to its days and the report's counts.
    fn backfill_facet(
        &self,
        run_id: &RunId,
        range: &RangeInclusive<NaiveDate>,
        report: Option<&RunReport>,
    ) -> Value {
        let mut facet = json!({
            "_producer": self.producer,
            "_schemaURL": facet_schema(),
            "runId": run_id.as_str(),
            "firstDay": range.start().to_string(),
            "lastDay": range.end().to_string(),
            "mode": self.mode.as_str(),
        });
        let Some(report) = report else {
            return facet;
        };
        let unchanged = report.days.iter().filter(|d| d.counts.skipped > 0).count();
        let totals = report.totals();
        facet["days"] = json!({
            "planned": report.planned.len(),
            "synced": report.days.len() - unchanged,
            "skippedUnchanged": unchanged,
            "failed": report.failed.len(),
            "notStarted": report.skipped.len(),
            "notSelected": report.not_selected.len(),
        });
        facet["failedDays"] = report
            .failed
            .iter()
            .map(|failed| failed.day.to_string())
            .collect();
        facet["counts"] = json!({
            "inserted": totals.inserted,
            "updated": totals.updated,
            "unchanged": totals.unchanged,
            "stale": totals.stale,
            "deleted": totals.deleted,
            "unlisted": totals.unlisted,
            "skipped": totals.skipped,
            "collapsed": totals.collapsed,
        });
        facet["stopped"] = report.stopped.into();
        facet["elapsedMs"] = json!(report.elapsed.as_secs_f64() * 1000.0);
        facet
    }

    /// `text` with every secret replaced by `***`.
    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "***");
        }
        text
    }
}

/// The run id as OpenLineage wants it, a UUID: the run's own, or one
/// derived from an id that is not one (a run id an orchestrator chose),
/// the same for the same id.
pub fn run_uuid(run_id: &RunId) -> String {
    match uuid::Uuid::parse_str(run_id.as_str()) {
        Ok(id) => id.hyphenated().to_string(),
        Err(_) => uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, run_id.as_str().as_bytes())
            .hyphenated()
            .to_string(),
    }
}

/// A sink for [`OpenLineage::observer`] that appends each event to the
/// JSON Lines file at `path` (created if missing), one write per event so
/// that runs sharing the file do not interleave. A file that cannot be
/// written is a `tracing` warning, never a failure of the run.
pub fn append_to(path: impl AsRef<Path>) -> impl Fn(Value) + Send + Sync + 'static {
    let path = path.as_ref().to_owned();
    move |event| {
        if let Err(e) = append(&path, &event) {
            tracing::warn!("cannot write the lineage event to {}: {e}", path.display());
        }
    }
}

/// Appends `event` as one line to the JSON Lines file at `path` (created
/// if missing), in one write, so that runs sharing the file do not
/// interleave their events.
///
/// # Errors
///
/// The file's, if it cannot be opened or written.
pub fn append(path: &Path, event: &Value) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(format!("{event}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counts, DayReport, FailedDay};

    fn jan(d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 1, d).unwrap()
    }

    #[test]
    fn datasets_are_named_as_openlineage_says_without_credentials() {
        let pg = |url| Dataset::postgres(url, "sales", "orders");
        let pair = |a: &str, b: &str| Dataset::new(a, b);
        assert_eq!(
            pg("postgres://app:hunter2@db.example:6432/shop?sslmode=require"),
            pair("postgres://db.example:6432", "shop.sales.orders")
        );
        assert_eq!(
            pg("postgresql://app@db.example/shop?password=hunter2"),
            pair("postgres://db.example:5432", "shop.sales.orders")
        );
        assert_eq!(
            pg("postgres://app:pw@[::1]:5433"),
            pair("postgres://[::1]:5433", "app.sales.orders")
        );
        assert_eq!(
            pg("postgres:///shop?host=/var/run/postgresql"),
            pair("postgres://localhost:5432", "shop.sales.orders")
        );
        assert_eq!(
            pg("postgres://h1:5432,h2:5433/shop"),
            pair("postgres://h1:5432", "shop.sales.orders")
        );
        assert_eq!(
            Dataset::sqlite("/srv/data/x.db".as_ref(), "orders"),
            pair("sqlite:///srv/data/x.db", "orders")
        );
        let relative = Dataset::sqlite("x.db".as_ref(), "orders");
        assert!(relative.namespace.starts_with("sqlite:///"), "{relative:?}");
        assert!(relative.namespace.ends_with("/x.db"), "{relative:?}");
        assert_eq!(
            Dataset::delta("/srv/lake/orders"),
            pair("file", "/srv/lake/orders")
        );
        assert_eq!(
            Dataset::delta("file:///srv/lake/orders/"),
            pair("file", "/srv/lake/orders")
        );
        assert_eq!(
            Dataset::delta("delta+file:///srv/lake/orders"),
            pair("file", "/srv/lake/orders")
        );
        assert_eq!(
            Dataset::delta("s3://lake/sales/orders/"),
            pair("s3://lake", "sales/orders")
        );
        assert_eq!(
            Dataset::delta("delta+s3a://AKIA:secret@lake/sales/orders?region=x"),
            pair("s3://lake", "sales/orders")
        );
    }

    #[test]
    fn a_run_id_that_is_not_a_uuid_gets_one_of_its_own() {
        let own = RunId::new();
        assert_eq!(run_uuid(&own), own.as_str());
        let chosen = RunId::from("airflow-run-2026-01-02");
        let derived = run_uuid(&chosen);
        assert!(uuid::Uuid::parse_str(&derived).is_ok(), "{derived}");
        assert_eq!(derived, run_uuid(&chosen));
        assert_ne!(derived, run_uuid(&RunId::from("another")));
    }

    #[test]
    fn the_last_event_says_how_the_run_ended_with_secrets_scrubbed() {
        let lineage = OpenLineage::new("orders hunter22", Dataset::new("file", "/t"))
            .mode(Mode::Replace)
            .secrets(["hunter22", ""]);
        let run_id = RunId::from("r1");
        let range = jan(1)..=jan(3);

        let mut report = RunReport::new(vec![jan(1), jan(2), jan(3)]);
        report.run_id = Some(run_id.clone());
        let counts = Counts {
            inserted: 5,
            updated: 2,
            ..Counts::default()
        };
        report.days.push(DayReport::new(jan(1), counts));
        let complete = lineage.end(&run_id, &range, Ending::Ran(&report, None));
        assert_eq!(complete["eventType"], "COMPLETE");
        assert_eq!(
            complete["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"],
            7
        );
        let facet = &complete["run"]["facets"]["backfill"];
        assert_eq!(facet["mode"], "replace");
        assert_eq!(facet["firstDay"], "2026-01-01");
        assert_eq!(facet["lastDay"], "2026-01-03");
        assert_eq!(facet["runId"], "r1");
        assert_eq!(facet["days"]["planned"], 3);
        assert_eq!(complete["job"]["name"], "orders ***");

        report.stopped = true;
        let abort = lineage.end(&run_id, &range, Ending::Ran(&report, None));
        assert_eq!(abort["eventType"], "ABORT");

        report
            .failed
            .push(FailedDay::new(jan(2), 3, "HTTP 401 for token hunter22"));
        let fail = lineage.end(&run_id, &range, Ending::Ran(&report, None));
        assert_eq!(fail["eventType"], "FAIL");
        assert_eq!(
            fail["run"]["facets"]["errorMessage"]["message"],
            "2026-01-02: HTTP 401 for token ***"
        );
        assert_eq!(
            fail["run"]["facets"]["backfill"]["failedDays"][0],
            "2026-01-02"
        );

        let cannot = lineage.end(&run_id, &range, Ending::CannotRun("no such host"));
        assert_eq!(cannot["eventType"], "FAIL");
        assert!(cannot["outputs"][0]["outputFacets"]
            .as_object()
            .unwrap()
            .is_empty());
    }
}
