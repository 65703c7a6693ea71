//! `--openlineage-url` and `--openlineage-file`: a run's OpenLineage run
//! events (spec 2-0-2), for Marquez or any other lineage server.
//!
//! A run emits START once the store is open, then one of COMPLETE (no day
//! failed), FAIL (a day failed, or the run could not run: `errorMessage`
//! holds the first error) or ABORT (stopped by Ctrl-C with no failed day).
//! A store that cannot be opened emits FAIL alone. A dry run emits nothing.
//!
//! - the job: namespace `--openlineage-namespace` (`backfill`), name
//!   `--openlineage-job`, else the fetch ([`job_name`]);
//! - the run: its id is the run's own (a UUIDv7), or for a `--run-id` that
//!   is not a UUID, a UUID derived from it (version 5), the id itself in
//!   the `backfill` facet;
//! - the output: the table, named as OpenLineage's naming conventions say
//!   ([`dataset`]), with `outputStatistics.rowCount` the rows written;
//! - the `backfill` run facet (`openlineage/BackfillRunFacet.json` beside
//!   this crate's manifest is its schema): the days and the report's
//!   counts, the same numbers as `--json` prints.
//!
//! Lineage is observability beside the run, never a reason for it to fail:
//! a server that is down or answers an error, or a file that cannot be
//! written, is a `warning:` on stderr and the run's exit status is its own.

use std::io::Write as _;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use backfill_core::{Mode, RunId, RunReport};
use chrono::{NaiveDate, SecondsFormat, Utc};
use serde_json::{json, Value};

use crate::args::{FetchArgs, RunArgs, StoreArgs};
use crate::store::{self, StoreUrl};

/// The spec the events follow: its `RunEvent` is their `schemaURL`.
const SPEC: &str = "https://openlineage.io/spec/2-0-2/OpenLineage.json";
/// The standard facets' schemas, at the versions of the spec above.
const ERROR_MESSAGE: &str =
    "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet";
const OUTPUT_STATISTICS: &str = "https://openlineage.io/spec/facets/1-0-2/OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet";
const JOB_TYPE: &str =
    "https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet";
const PROCESSING_ENGINE: &str = "https://openlineage.io/spec/facets/1-1-1/ProcessingEngineRunFacet.json#/$defs/ProcessingEngineRunFacet";

/// Where Marquez takes events when `--openlineage-url` has no path.
const MARQUEZ_PATH: &str = "/api/v1/lineage";

/// How long sending one event may take before it is given up.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// This command, at its version, as the events' `producer`.
fn producer() -> String {
    format!(
        "{}/tree/v{}/crates/backfill-cli",
        env!("CARGO_PKG_REPOSITORY"),
        env!("CARGO_PKG_VERSION")
    )
}

/// The schema of the `backfill` run facet, beside the producer.
fn facet_schema() -> String {
    format!(
        "{}/openlineage/BackfillRunFacet.json#/$defs/BackfillRunFacet",
        producer()
    )
}

/// Where the events go.
#[derive(Debug, Clone)]
pub(crate) struct Sinks {
    url: Option<String>,
    file: Option<PathBuf>,
    api_key: Option<String>,
}

/// A run's events, each built when it happens.
#[derive(Debug)]
pub(crate) struct Lineage {
    sinks: Sinks,
    run_id: RunId,
    job_namespace: String,
    job_name: String,
    dataset: (String, String),
    days: RangeInclusive<NaiveDate>,
    mode: Mode,
    /// Texts that must never leave in an event: the store's password, the
    /// API key, the fetch command's and the environment's secrets.
    secrets: Vec<String>,
}

/// How a run ended, for its last event.
#[derive(Debug)]
pub(crate) enum Ending<'a> {
    /// The run ran: its report, and the error that stopped it, if the
    /// fetch could not run at all.
    Ran(&'a RunReport, Option<String>),
    /// The run could not run (the store): why.
    CannotRun(String),
}

impl Lineage {
    /// The events of a run of `args` over `days` with `run_id`, if they
    /// go anywhere.
    pub(crate) fn new(
        args: &RunArgs,
        run_id: &RunId,
        days: &RangeInclusive<NaiveDate>,
    ) -> Option<Self> {
        if args.openlineage_url.is_none() && args.openlineage_file.is_none() || args.dry_run {
            return None;
        }
        let mut secrets: Vec<String> = store::password(&args.store.store).into_iter().collect();
        secrets.extend(args.openlineage_api_key.clone());
        if let Some(command) = &args.fetch.fetch_cmd {
            secrets.extend(assigned_values(command));
        }
        secrets.extend(environment_secrets(std::env::vars()));
        secrets.retain(|s| !s.is_empty());
        Some(Self {
            sinks: Sinks {
                url: args.openlineage_url.clone(),
                file: args.openlineage_file.clone(),
                api_key: args.openlineage_api_key.clone(),
            },
            run_id: run_id.clone(),
            job_namespace: args.openlineage_namespace.clone(),
            job_name: args
                .openlineage_job
                .clone()
                .unwrap_or_else(|| job_name(&args.fetch)),
            dataset: dataset(&args.store),
            days: days.clone(),
            mode: args.mode,
            secrets,
        })
    }

    /// Where the events go.
    pub(crate) fn sinks(&self) -> Sinks {
        self.sinks.clone()
    }

    /// The START event.
    pub(crate) fn start(&self) -> Value {
        self.event("START", self.backfill_facet(None), None, None)
    }

    /// The run's last event: COMPLETE, FAIL or ABORT.
    pub(crate) fn end(&self, ending: &Ending<'_>) -> Value {
        match ending {
            Ending::CannotRun(why) => {
                self.event("FAIL", self.backfill_facet(None), Some(why), None)
            }
            Ending::Ran(report, cannot_run) => {
                let first_failure = report
                    .failed
                    .first()
                    .map(|failed| format!("{}: {}", failed.day, failed.error));
                let error = cannot_run.clone().or(first_failure);
                let state = match &error {
                    Some(_) => "FAIL",
                    None if report.stopped => "ABORT",
                    None => "COMPLETE",
                };
                let written = report.totals().written();
                self.event(
                    state,
                    self.backfill_facet(Some(report)),
                    error.as_deref(),
                    Some(written),
                )
            }
        }
    }

    fn event(
        &self,
        state: &str,
        backfill: Value,
        error: Option<&str>,
        written: Option<u64>,
    ) -> Value {
        let producer = producer();
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
        let (namespace, name) = &self.dataset;
        let mut output = json!({
            "namespace": namespace,
            "name": name,
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
            "run": { "runId": lineage_run_id(&self.run_id), "facets": run_facets },
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

    /// The `backfill` run facet: the run's days, and once it ran, what
    /// happened to them and the report's counts.
    fn backfill_facet(&self, report: Option<&RunReport>) -> Value {
        let mut facet = json!({
            "_producer": producer(),
            "_schemaURL": facet_schema(),
            "runId": self.run_id.as_str(),
            "firstDay": self.days.start().to_string(),
            "lastDay": self.days.end().to_string(),
            "mode": self.mode.as_str(),
        });
        let Some(report) = report else {
            return facet;
        };
        let unchanged = report.days.iter().filter(|d| d.counts.skipped > 0).count();
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
        facet["counts"] = serde_json::to_value(report.totals()).unwrap_or_default();
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
/// derived from an id that is not one (a `--run-id` an orchestrator chose),
/// the same for the same id.
fn lineage_run_id(run_id: &RunId) -> String {
    match uuid::Uuid::parse_str(run_id.as_str()) {
        Ok(id) => id.hyphenated().to_string(),
        Err(_) => uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, run_id.as_str().as_bytes())
            .hyphenated()
            .to_string(),
    }
}

/// The job's default name, from the fetch: for a command, its program and
/// the plain words after it (file names without their directories), up to
/// three, stopping at the first option, `{day}`, assignment, URL or shell
/// syntax, so that no argument's value or the command's environment
/// leaves in it (`API_KEY=… python3 /opt/etl/fetch.py {day}` is
/// `python3 fetch.py`); for files, their path template.
pub(crate) fn job_name(fetch: &FetchArgs) -> String {
    match (&fetch.fetch_cmd, &fetch.fetch_files) {
        (Some(command), _) => {
            let words: Vec<&str> = command
                .split_whitespace()
                .skip_while(|word| is_assignment(word))
                .take_while(|word| {
                    !word.starts_with('-')
                        && !word.contains([
                            '{', '=', ':', '@', '$', '`', '\'', '"', '|', ';', '&', '<', '>', '(',
                            ')', '?', '*', '\\',
                        ])
                })
                .take(3)
                .map(|word| {
                    word.rsplit('/')
                        .find(|part| !part.is_empty())
                        .unwrap_or(word)
                })
                .collect();
            if words.is_empty() {
                "fetch".to_owned()
            } else {
                words.join(" ")
            }
        }
        (None, Some(files)) => files.clone(),
        (None, None) => "fetch".to_owned(),
    }
}

/// `NAME=value`, as a shell reads a variable given to a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The values of a command's `NAME=value` words, wherever they are
/// (`env TOKEN=… ./fetch.sh`, `--password=…`), quotes removed.
fn assigned_values(command: &str) -> Vec<String> {
    command
        .split_whitespace()
        .filter_map(|word| word.split_once('=').map(|(_, value)| value))
        .map(|value| value.trim_matches(['\'', '"']).to_owned())
        .filter(|value| value.len() >= 4)
        .collect()
}

/// The values of the environment's variables whose names say they hold a
/// secret (the fetch command sees them all, and may print one in an
/// error): `*PASSWORD*`, `*SECRET*`, `*TOKEN*`, `*KEY*`, `*CREDENTIAL*`,
/// as `AWS_SECRET_ACCESS_KEY` for a Delta table on S3. Short values are
/// left, lest every such digit in a message become `***`.
fn environment_secrets(vars: impl Iterator<Item = (String, String)>) -> Vec<String> {
    const SECRET: [&str; 5] = ["PASSWORD", "SECRET", "TOKEN", "KEY", "CREDENTIAL"];
    vars.filter(|(name, value)| {
        let name = name.to_ascii_uppercase();
        value.len() >= 8 && SECRET.iter().any(|word| name.contains(word))
    })
    .map(|(_, value)| value)
    .collect()
}

/// The table as an OpenLineage dataset `(namespace, name)`, by its naming
/// conventions, never with credentials:
///
/// - Postgres: `postgres://HOST:PORT` (5432 by default),
///   `DATABASE.SCHEMA.TABLE`;
/// - SQLite (which the conventions do not name): `sqlite://` and the
///   database file's absolute path, the table;
/// - a Delta table: a local directory is `file` and its absolute path; on
///   S3, `s3://BUCKET` and the table's key prefix.
pub(crate) fn dataset(args: &StoreArgs) -> (String, String) {
    match StoreUrl::parse(&args.store) {
        Ok(StoreUrl::Postgres(url)) => {
            let (host, port, database) = postgres_parts(&url);
            (
                format!("postgres://{host}:{port}"),
                format!("{database}.{}.{}", args.schema, args.table),
            )
        }
        Ok(StoreUrl::Sqlite(path)) => (
            format!("sqlite://{}", absolute(&path).display()),
            args.table.clone(),
        ),
        Ok(StoreUrl::Delta(location)) => delta_parts(&location),
        Err(_) => ("backfill".to_owned(), store::table_label(args)),
    }
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

/// A Delta table's location as a dataset.
fn delta_parts(location: &str) -> (String, String) {
    let location = location.split('?').next().unwrap_or_default();
    match location.split_once("://") {
        Some(("s3" | "s3a", rest)) => {
            let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
            let bucket = authority.rsplit('@').next().unwrap_or(authority);
            (format!("s3://{bucket}"), key.trim_matches('/').to_owned())
        }
        Some((_, path)) => (
            "file".to_owned(),
            absolute(Path::new(path)).display().to_string(),
        ),
        None => (
            "file".to_owned(),
            absolute(Path::new(location)).display().to_string(),
        ),
    }
}

/// `path` from the root, so that the same file has one name wherever the
/// command ran.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// Sends `event` to every sink: an error is a warning on stderr, never a
/// failure of the run.
pub(crate) async fn emit(sinks: Sinks, event: Value) {
    let line = event.to_string();
    if let Some(path) = &sinks.file {
        if let Err(e) = append(path, &line) {
            eprintln!(
                "warning: cannot write the lineage event to {}: {e}",
                path.display()
            );
        }
    }
    if let Some(url) = sinks.url {
        let target = target(&url);
        let shown = store::redact(&target);
        let api_key = sinks.api_key;
        let sent = tokio::task::spawn_blocking(move || {
            let agent = ureq::Agent::config_builder()
                .timeout_global(Some(SEND_TIMEOUT))
                .build()
                .new_agent();
            let mut request = agent
                .post(&target)
                .header("Content-Type", "application/json");
            if let Some(key) = api_key {
                request = request.header("Authorization", format!("Bearer {key}"));
            }
            request.send(line).map(|_| ())
        })
        .await;
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: cannot send the lineage event to {shown}: {e}"),
            Err(e) => eprintln!("warning: cannot send the lineage event to {shown}: {e}"),
        }
    }
}

/// Where to POST: `URL/api/v1/lineage` (Marquez's endpoint) for a URL
/// without a path, the URL as given otherwise.
fn target(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.find(['/', '?']).map_or("", |i| &rest[i..]);
    if path.is_empty() || path == "/" {
        format!("{}{MARQUEZ_PATH}", url.trim_end_matches('/'))
    } else {
        url.to_owned()
    }
}

/// Appends `line` to the JSON Lines file at `path`, in one write, so that
/// runs sharing the file do not interleave their events.
fn append(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(format!("{line}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(url: &str) -> StoreArgs {
        StoreArgs {
            store: url.to_owned(),
            password_env: None,
            table: "orders".to_owned(),
            schema: "sales".to_owned(),
            tls_root_cert: None,
            columns: Vec::new(),
            columns_file: None,
            allow_column_changes: false,
            history: false,
        }
    }

    #[test]
    fn datasets_are_named_as_openlineage_says_without_credentials() {
        let named = |url: &str| dataset(&store(url));
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            named("postgres://app:hunter2@db.example:6432/shop?sslmode=require"),
            pair("postgres://db.example:6432", "shop.sales.orders")
        );
        assert_eq!(
            named("postgresql://app@db.example/shop?password=hunter2"),
            pair("postgres://db.example:5432", "shop.sales.orders")
        );
        assert_eq!(
            named("postgres://app:pw@[::1]:5433"),
            pair("postgres://[::1]:5433", "app.sales.orders")
        );
        assert_eq!(
            named("postgres:///shop?host=/var/run/postgresql"),
            pair("postgres://localhost:5432", "shop.sales.orders")
        );
        assert_eq!(
            named("postgres://h1:5432,h2:5433/shop"),
            pair("postgres://h1:5432", "shop.sales.orders")
        );
        assert_eq!(
            named("sqlite:///srv/data/x.db"),
            pair("sqlite:///srv/data/x.db", "orders")
        );
        let relative = named("sqlite://x.db");
        assert!(relative.0.starts_with("sqlite:///"), "{relative:?}");
        assert!(relative.0.ends_with("/x.db"), "{relative:?}");
        assert_eq!(
            named("delta:///srv/lake/orders"),
            pair("file", "/srv/lake/orders")
        );
        assert_eq!(
            named("delta+file:///srv/lake/orders"),
            pair("file", "/srv/lake/orders")
        );
        assert_eq!(
            named("delta+s3://lake/sales/orders/"),
            pair("s3://lake", "sales/orders")
        );
        assert_eq!(
            named("delta+s3a://AKIA:secret@lake/sales/orders?region=x"),
            pair("s3://lake", "sales/orders")
        );
    }

    #[test]
    fn the_job_is_named_after_the_fetch_without_its_arguments_or_environment() {
        let named = |command: &str| {
            job_name(&FetchArgs {
                fetch_cmd: Some(command.to_owned()),
                fetch_files: None,
            })
        };
        assert_eq!(
            named("API_KEY=s3cret python3 /opt/etl/fetch.py {day}"),
            "python3 fetch.py"
        );
        assert_eq!(named("./export.sh prod {day} --token x"), "export.sh prod");
        assert_eq!(named("curl -s https://u:pw@api/{day}"), "curl");
        assert_eq!(named("a b c d e"), "a b c");
        assert_eq!(named("'quoted command' {day}"), "fetch");
        let files = FetchArgs {
            fetch_cmd: None,
            fetch_files: Some("exports/{day}.jsonl".to_owned()),
        };
        assert_eq!(job_name(&files), "exports/{day}.jsonl");
    }

    #[test]
    fn secrets_come_from_the_command_and_the_environment() {
        assert_eq!(
            assigned_values("TOKEN=abcd1234 ./f.sh --password='hunter22' x=1"),
            ["abcd1234", "hunter22"]
        );
        let vars = [
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
            ("API_TOKEN", "short"),
            ("HOME", "/home/someone"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()));
        assert_eq!(environment_secrets(vars.into_iter()), ["wJalrXUtnFEMI"]);
    }

    #[test]
    fn a_url_without_a_path_is_marquez() {
        assert_eq!(
            target("http://marquez:5000"),
            "http://marquez:5000/api/v1/lineage"
        );
        assert_eq!(
            target("http://marquez:5000/"),
            "http://marquez:5000/api/v1/lineage"
        );
        assert_eq!(
            target("https://lineage.example/events"),
            "https://lineage.example/events"
        );
    }

    #[test]
    fn a_run_id_that_is_not_a_uuid_gets_one_of_its_own() {
        let own = RunId::new();
        assert_eq!(lineage_run_id(&own), own.as_str());
        let chosen = RunId::from("airflow-run-2026-01-02");
        let derived = lineage_run_id(&chosen);
        assert!(uuid::Uuid::parse_str(&derived).is_ok(), "{derived}");
        assert_eq!(derived, lineage_run_id(&chosen));
        assert_ne!(derived, lineage_run_id(&RunId::from("another")));
    }
}
