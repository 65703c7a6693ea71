//! `--openlineage-url` and `--openlineage-file`: a run's OpenLineage run
//! events (spec 2-0-2), for Marquez or any other lineage server.
//!
//! A run emits START once the store is open, then one of COMPLETE (no day
//! failed), FAIL (a day failed, or the run could not run: `errorMessage`
//! holds the first error) or ABORT (stopped by Ctrl-C with no failed day).
//! A store that cannot be opened emits FAIL alone. A dry run emits nothing.
//!
//! The events are the library's ([`backfill_core::lineage`]), as a Rust or
//! Python program's job sends them, with this command as their producer:
//!
//! - the job: namespace `--openlineage-namespace` (`backfill`), name
//!   `--openlineage-job`, else the fetch ([`job_name`]);
//! - the run: its id is the run's own (a UUIDv7), or for a `--run-id` that
//!   is not a UUID, a UUID derived from it (version 5), the id itself in
//!   the `backfill` facet;
//! - the output: the table, named as OpenLineage's naming conventions say
//!   ([`dataset`]), with `outputStatistics.rowCount` the rows written;
//! - the `backfill` run facet (`openlineage/BackfillRunFacet.json` beside
//!   `backfill-core`'s manifest is its schema): the days and the report's
//!   counts, the same numbers as `--json` prints.
//!
//! Lineage is observability beside the run, never a reason for it to fail:
//! a server that is down or answers an error, or a file that cannot be
//! written, is a `warning:` on stderr and the run's exit status is its own.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use backfill_core::lineage::{self as events, named_secrets, Dataset, OpenLineage};
use backfill_core::RunId;
use backfill_core::RunReport;
use chrono::NaiveDate;
use serde_json::Value;

use crate::args::{FetchArgs, RunArgs, StoreArgs};
use crate::store::{self, StoreUrl};

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

/// Where the events go.
#[derive(Debug, Clone)]
pub(crate) struct Sinks {
    url: Option<String>,
    file: Option<PathBuf>,
    api_key: Option<String>,
}

/// A run's events, each built when it happens, by the library's
/// [`OpenLineage`].
#[derive(Debug)]
pub(crate) struct Lineage {
    sinks: Sinks,
    run_id: RunId,
    days: RangeInclusive<NaiveDate>,
    events: OpenLineage,
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
        // Texts that must never leave in an event: the store's password,
        // the API key, the fetch command's and the environment's secrets.
        let mut secrets: Vec<String> = store::password(&args.store.store).into_iter().collect();
        secrets.extend(args.openlineage_api_key.clone());
        if let Some(command) = &args.fetch.fetch_cmd {
            secrets.extend(assigned_values(command));
        }
        secrets.extend(named_secrets(std::env::vars()));
        let job_name = args
            .openlineage_job
            .clone()
            .unwrap_or_else(|| job_name(&args.fetch));
        Some(Self {
            sinks: Sinks {
                url: args.openlineage_url.clone(),
                file: args.openlineage_file.clone(),
                api_key: args.openlineage_api_key.clone(),
            },
            run_id: run_id.clone(),
            days: days.clone(),
            events: OpenLineage::new(job_name, dataset(&args.store))
                .namespace(args.openlineage_namespace.clone())
                .mode(args.mode)
                .producer(producer())
                .secrets(secrets),
        })
    }

    /// Where the events go.
    pub(crate) fn sinks(&self) -> Sinks {
        self.sinks.clone()
    }

    /// The START event.
    pub(crate) fn start(&self) -> Value {
        self.events.start(&self.run_id, &self.days)
    }

    /// The run's last event: COMPLETE, FAIL or ABORT.
    pub(crate) fn end(&self, ending: &Ending<'_>) -> Value {
        let ending = match ending {
            Ending::Ran(report, cannot_run) => events::Ending::Ran(report, cannot_run.as_deref()),
            Ending::CannotRun(why) => events::Ending::CannotRun(why),
        };
        self.events.end(&self.run_id, &self.days, ending)
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

/// The table as an OpenLineage dataset, by its naming conventions (the
/// library's [`Dataset`]), never with credentials: a store URL that does
/// not parse (the run then fails to open it) is named as it is labelled.
pub(crate) fn dataset(args: &StoreArgs) -> Dataset {
    match StoreUrl::parse(&args.store) {
        Ok(StoreUrl::Postgres(url)) => Dataset::postgres(&url, &args.schema, &args.table),
        Ok(StoreUrl::Sqlite(path)) => Dataset::sqlite(&path, &args.table),
        Ok(StoreUrl::Delta(location)) => Dataset::delta(&location),
        Err(_) => Dataset::new("backfill", store::table_label(args)),
    }
}

/// Sends `event` to every sink: an error is a warning on stderr, never a
/// failure of the run.
pub(crate) async fn emit(sinks: Sinks, event: Value) {
    if let Some(path) = &sinks.file {
        if let Err(e) = events::append(path, &event) {
            eprintln!(
                "warning: cannot write the lineage event to {}: {e}",
                path.display()
            );
        }
    }
    if let Some(url) = sinks.url {
        let line = event.to_string();
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
    fn the_store_url_names_the_dataset() {
        let named = |url: &str| dataset(&store(url));
        assert_eq!(
            named("postgres://app:hunter2@db.example:6432/shop?sslmode=require"),
            Dataset::new("postgres://db.example:6432", "shop.sales.orders")
        );
        assert_eq!(
            named("sqlite:///srv/data/x.db"),
            Dataset::new("sqlite:///srv/data/x.db", "orders")
        );
        assert_eq!(
            named("delta+s3a://AKIA:secret@lake/sales/orders?region=x"),
            Dataset::new("s3://lake", "sales/orders")
        );
        assert_eq!(
            named("delta:///srv/lake/orders"),
            Dataset::new("file", "/srv/lake/orders")
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
        assert_eq!(named_secrets(vars), ["wJalrXUtnFEMI"]);
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
}
