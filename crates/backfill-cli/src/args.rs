//! The command line, as clap parses it.

use std::path::PathBuf;
use std::time::Duration;

use backfill_core::columns::{Column, ColumnType};
use backfill_core::settings::{parse_duration, parse_fraction, parse_size, Settings};
use backfill_core::{CheckAction, Mode, Shard};
use chrono::{DateTime, NaiveDate, Utc};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};

/// Idempotent daily syncs and backfills: re-run any day, any number of
/// times, in any order, and the store converges to the same state.
///
/// A fetch is any program that prints one day's records as JSON Lines
/// (`--fetch-cmd`), or one file per day (`--fetch-files`). Every write goes
/// through the library's one write path: a re-run writes nothing, a stale
/// re-delivery never overwrites a newer row, and the store's day ledger
/// records which days are done.
#[derive(Debug, Parser)]
#[command(name = "backfill", version, max_term_width = 100)]
#[command(after_help = "\
Exit codes: 0 every selected day succeeded; 2 some days failed (the others are written); \
3 the store could not be reached (refused, timed out, not resolved, locked): try again later; \
1 usage or configuration error, or a store that refuses (running it again will not help); \
130 interrupted (Ctrl-C) after the days in flight finished or rolled back.

Examples:
  backfill backfill --from 2026-01-01 --to 2026-01-31 --fetch-cmd 'python3 fetch.py {day}'
  backfill sync --lookback 1 --fetch-cmd './export.sh {day}'
  backfill status --from 2026-01-01 --to 2026-03-31")]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The configuration file and its profile, for every command.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// A TOML file of named profiles, each setting what flags and
    /// `BACKFILL_*` variables do not (they win over it; it wins over the
    /// defaults). By default `backfill.toml` in the working directory, if
    /// there is one. `backfill config` shows what is in effect.
    #[arg(long, global = true, env = "BACKFILL_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The configuration file's profile to use (by default the file's
    /// `profile` key, else `default`).
    #[arg(long, global = true, env = "BACKFILL_PROFILE", value_name = "NAME")]
    pub(crate) profile: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The daily job: sync today and the LOOKBACK days before it (or one
    /// `--day`).
    #[command(after_help = "\
Examples:
  # cron, at 02:15 every day: yesterday and today, in the pipeline's zone
  backfill sync --lookback 1 --tz Europe/Paris --fetch-cmd 'python3 fetch.py {day}'
  # one day, again
  backfill sync --day 2026-01-14 --fetch-files 'exports/{day}.jsonl'")]
    Sync(SyncArgs),
    /// Sync every day of a range, optionally only the days the ledger says
    /// are missing or failed, or this process's shard of them.
    #[command(after_help = "\
Examples:
  backfill backfill --from 2026-01-01 --to 2026-01-31 --fetch-cmd 'python3 fetch.py {day}'
  # resume: only what never succeeded
  backfill backfill --from 2026-01-01 --to 2026-01-31 --only missing-or-failed \\
      --fetch-cmd 'python3 fetch.py {day}'
  # shard 2 of 4 processes (a Kubernetes Indexed Job sets JOB_COMPLETION_INDEX)
  backfill backfill --from 2025-01-01 --to 2025-12-31 --shard 2/4 --store \"$DATABASE_URL\" \\
      --fetch-cmd './export.sh {day}'")]
    Backfill(BackfillArgs),
    /// Where each day of a range stands, by the store's ledger: a calendar on
    /// a terminal, one line per day otherwise.
    #[command(after_help = "\
Examples:
  backfill status        # the last 30 days, today included
  backfill status --from 2026-01-01 --to 2026-03-31
  backfill status --from 2026-01-01 --to 2026-01-31 --format table
  backfill status --from 2026-01-01 --to 2026-01-31 --json | jq '.[] | select(.state == \"failed\")'")]
    Status(StatusArgs),
    /// Mark days as right as they are: the per-day checks (`--check-volume`,
    /// `--check-empty`) no longer flag or refuse them, through re-runs,
    /// until `--undo`.
    #[command(after_help = "\
Examples:
  # 2026-02-10 came back small, and it was a holiday
  backfill accept 2026-02-10
  backfill accept 2026-02-10 --undo")]
    Accept(AcceptArgs),
    /// Remove tombstones (deleted keys' markers) last changed before an
    /// instant. A re-delivery older than a purged tombstone can then bring
    /// its key back: purge only before what upstream can still send.
    #[command(after_help = "\
Example:
  backfill purge-tombstones --before 2026-01-01T00:00:00Z")]
    PurgeTombstones(PurgeArgs),
    /// The live rows as JSON Lines, one record per line in key order: as
    /// they are, or as they were at an instant (`--as-of`, from history).
    #[command(after_help = "\
Examples:
  backfill rows > rows.jsonl
  # the table as it was at the start of March (the table keeps history)
  backfill rows --as-of 2026-03-01T00:00:00Z")]
    Rows(RowsArgs),
    /// Every version of every key, from history, as JSON Lines in key
    /// order: each with `valid_from` and `valid_to` (null while it is the
    /// newest); a delete is a line with `"deleted": true`.
    #[command(after_help = "\
Example:
  backfill history | jq 'select(.key == \"order:1\")'")]
    History(HistoryArgs),
    /// Every setting in effect — from flags, `BACKFILL_*` variables, the
    /// configuration file's profile or the defaults — with where it comes
    /// from; passwords hidden.
    #[command(after_help = "\
Examples:
  backfill config
  backfill config --profile prod
  backfill config --profile prod --retries 5 --json")]
    Config(ConfigArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// Days synced at once.
    #[arg(long, env = "BACKFILL_CONCURRENCY", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) concurrency: Option<u16>,
}

/// Where the records live.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// The store: `sqlite://PATH` (`sqlite:///abs/path.db` for an absolute
    /// path), `postgres://USER:PASSWORD@HOST/DB` (over TLS when the URL
    /// has an `sslmode` other than `disable`, never falling back to plain
    /// text), or a Delta Lake table (with the `delta` feature): a
    /// directory, `delta://DIR`, or a prefix on S3 or S3-compatible
    /// storage, `delta+s3://BUCKET/PATH` (credentials, region and
    /// `AWS_ENDPOINT_URL` from the usual AWS environment variables).
    #[arg(
        long,
        env = "BACKFILL_STORE",
        default_value = default_text("store"),
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) store: String,
    /// The environment variable holding the Postgres password, written
    /// into the store's URL (`postgres://USER@HOST/DB`) when it is opened:
    /// the way to give a password with a configuration file, which never
    /// holds one.
    #[arg(long, env = "BACKFILL_PASSWORD_ENV", value_name = "VAR")]
    pub(crate) password_env: Option<String>,
    /// The records table (lowercase letters, digits and `_`).
    #[arg(long, env = "BACKFILL_TABLE", default_value = default_text("table"))]
    pub(crate) table: String,
    /// The Postgres schema.
    #[arg(long, env = "BACKFILL_SCHEMA", default_value = default_text("schema"))]
    pub(crate) schema: String,
    /// PEM file of root certificates to trust for Postgres over TLS, instead
    /// of the system's.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_root_cert: Option<PathBuf>,
    /// A typed column: a field of each record's JSON value kept as
    /// a column of its own, `NAME:TYPE[?][=PATH]`. TYPE is text, integer,
    /// double, numeric, boolean, date, timestamptz or json; `?` allows the
    /// field to be missing (NULL); PATH is the field (`customer.id`, or a
    /// JSON array of names), NAME's field by default. Repeatable; a record
    /// that does not fit fails its day, and nothing of that day is written.
    #[arg(long = "column", value_name = "NAME:TYPE[?][=PATH]", value_parser = parse_column)]
    pub(crate) columns: Vec<Column>,
    /// A JSON file of typed columns, after any --column: an array of
    /// declarations as --column takes them, or of objects {"name", "type",
    /// "path", "nullable", "index"}.
    #[arg(long = "columns", value_name = "FILE", env = "BACKFILL_COLUMNS")]
    pub(crate) columns_file: Option<PathBuf>,
    /// Let opening drop the table's typed columns that the declaration
    /// lacks, and remake (filled from the rows) those it declares with
    /// another type, instead of refusing the table. One transaction: a row
    /// that does not fit its new type changes nothing.
    #[arg(long)]
    pub(crate) allow_column_changes: bool,
    /// Keep every version of every key, valid from its `updated_at`, in
    /// history beside the table (people query the view `<table>_history`;
    /// a Delta table keeps it in its own partitions; `backfill rows
    /// --as-of` and `backfill history` read it). Turned on for a table with
    /// rows, history starts from them; once on, it stays on.
    #[arg(long)]
    pub(crate) history: bool,
}

impl StoreArgs {
    /// Every typed column, `--column`s first, then `--columns FILE`'s.
    pub(crate) fn typed_columns(&self) -> Result<Vec<Column>, String> {
        let mut columns = self.columns.clone();
        if let Some(path) = &self.columns_file {
            // A declaration file is small: 500 columns fit in a few KiB.
            const MAX_BYTES: u64 = 1 << 20;
            let mut text = String::new();
            std::fs::File::open(path)
                .and_then(|f| {
                    std::io::Read::read_to_string(
                        &mut std::io::Read::take(f, MAX_BYTES + 1),
                        &mut text,
                    )
                })
                .map_err(|e| format!("--columns {}: {e}", path.display()))?;
            if text.len() as u64 > MAX_BYTES {
                return Err(format!(
                    "--columns {}: larger than {MAX_BYTES} bytes, which no declaration needs",
                    path.display()
                ));
            }
            columns.extend(
                columns_from_json(&text)
                    .map_err(|e| format!("--columns {}: {e}", path.display()))?,
            );
        }
        Ok(columns)
    }
}

/// `--columns FILE`'s list: declarations, or objects of their parts.
fn columns_from_json(text: &str) -> Result<Vec<Column>, String> {
    let items: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("not a JSON array: {e}"))?;
    items
        .into_iter()
        .map(|item| match item {
            serde_json::Value::String(d) => Column::parse(&d).map_err(|e| e.to_string()),
            serde_json::Value::Object(o) => {
                let field = |k: &str| o.get(k);
                let known = ["name", "type", "path", "nullable", "index"];
                if let Some(other) = o.keys().find(|k| !known.contains(&k.as_str())) {
                    return Err(format!("unknown field {other:?} in a column"));
                }
                let (Some(serde_json::Value::String(name)), Some(serde_json::Value::String(ty))) =
                    (field("name"), field("type"))
                else {
                    return Err("a column object needs \"name\" and \"type\" strings".into());
                };
                let ty: ColumnType = ty
                    .parse()
                    .map_err(|e: backfill_core::Error| e.to_string())?;
                let mut column = Column::new(name.as_str(), ty).map_err(|e| e.to_string())?;
                match field("path") {
                    None => {}
                    Some(serde_json::Value::String(p)) => {
                        column = column
                            .path(p.split('.').map(str::to_owned).collect::<Vec<_>>())
                            .map_err(|e| e.to_string())?
                    }
                    Some(serde_json::Value::Array(parts)) => {
                        let parts: Option<Vec<String>> = parts
                            .iter()
                            .map(|p| p.as_str().map(str::to_owned))
                            .collect();
                        let parts = parts.ok_or("a path array holds strings")?;
                        column = column.path(parts).map_err(|e| e.to_string())?
                    }
                    Some(_) => return Err("\"path\" is a string or an array of strings".into()),
                }
                let flag = |k: &str| match field(k) {
                    None => Ok(false),
                    Some(serde_json::Value::Bool(b)) => Ok(*b),
                    Some(_) => Err(format!("\"{k}\" is true or false")),
                };
                Ok(column.nullable(flag("nullable")?).indexed(flag("index")?))
            }
            _ => Err("each column is a declaration string or an object".into()),
        })
        .collect()
}

/// The value of a setting's default as clap shows it (`[default: 1s]`):
/// the library's, as text.
pub(crate) fn default_text(name: &str) -> &'static str {
    let text = Settings::defaults().text(name).unwrap_or_default();
    // Once per flag and process: the help's defaults live as long as it.
    Box::leak(text.into_boxed_str())
}

fn parse_column(s: &str) -> Result<Column, String> {
    Column::parse(s).map_err(|e| e.to_string())
}

/// How each day's records are fetched: exactly one of the two (here, or
/// in the configuration file's profile).
#[derive(Debug, Args)]
#[group(multiple = false)]
pub(crate) struct FetchArgs {
    /// A shell command run once per day, `{day}` replaced by the day
    /// (YYYY-MM-DD, also in $BACKFILL_DAY); it prints the day's records as
    /// JSON Lines on stdout. Exit 0: success; 75: transient failure,
    /// retried; anything else: the day failed (the end of stderr says why).
    #[arg(long, value_name = "COMMAND", env = "BACKFILL_FETCH_CMD", value_parser = non_blank)]
    pub(crate) fetch_cmd: Option<String>,
    /// A path with `{day}` in it: the day's records as JSON Lines. A missing
    /// file fails its day.
    #[arg(long, value_name = "PATH", env = "BACKFILL_FETCH_FILES", value_parser = non_blank)]
    pub(crate) fetch_files: Option<String>,
}

/// What a run does to each day, shared by `sync` and `backfill`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) fetch: FetchArgs,
    /// `merge` adds and updates records; `replace` takes each day's fetch as
    /// the whole day, deleting (tombstoning) the keys it lacks.
    #[arg(
        long,
        env = "BACKFILL_MODE",
        default_value = default_text("mode"),
        value_parser = PossibleValuesParser::new(Mode::ALL.map(Mode::as_str))
            .map(|m| m.parse::<Mode>().unwrap_or_default()),
    )]
    pub(crate) mode: Mode,
    /// In replace mode, let an empty fetch empty a day that has rows
    /// (refused by default: an empty listing is more often an upstream
    /// fault than a real emptying). An allowed empty listing is not held
    /// to `--max-delete-fraction`.
    #[arg(long)]
    pub(crate) allow_empty_replace: bool,
    /// In replace mode, refuse a listing that would delete more than this
    /// fraction of a day's live rows (`0.5`, or a percentage, `50%`): a
    /// listing of 3 records for a day of 100 is more often a truncated
    /// export than 97 real deletions. The day fails and nothing of it is
    /// written; `1` allows any replace.
    #[arg(
        long,
        env = "BACKFILL_MAX_DELETE_FRACTION",
        default_value = default_text("max_delete_fraction"),
        value_parser = parse_fraction,
        value_name = "F"
    )]
    pub(crate) max_delete_fraction: f64,
    /// Retries of a day after a transient failure (exit 75, a lost
    /// connection, a timeout), with exponential backoff.
    #[arg(long, env = "BACKFILL_RETRIES", default_value = default_text("retries"), value_name = "N")]
    pub(crate) retries: u32,
    /// The delay before the first retry of a day; each further retry waits
    /// twice as long, up to `--max-retry-delay` (each delay drawn from its
    /// upper half, so days do not retry in lockstep). A rate-limited
    /// upstream (HTTP 429) wants more, e.g. `--retries 6 --retry-delay 10s`.
    #[arg(
        long,
        env = "BACKFILL_RETRY_DELAY",
        default_value = default_text("retry_delay"),
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub(crate) retry_delay: Duration,
    /// The longest delay between two attempts at a day.
    #[arg(
        long,
        env = "BACKFILL_MAX_RETRY_DELAY",
        default_value = default_text("max_retry_delay"),
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub(crate) max_retry_delay: Duration,
    /// Fail an attempt at a day that takes longer (fetch and write), killing
    /// the fetch command and its children; `0` for no limit.
    #[arg(
        long,
        env = "BACKFILL_DAY_TIMEOUT",
        default_value = default_text("day_timeout"),
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub(crate) day_timeout: Duration,
    /// Start no new day once a day has failed (the days in flight finish);
    /// the days not started are listed in the report. By default every day
    /// is attempted.
    #[arg(long)]
    pub(crate) fail_fast: bool,
    /// Accept records whose `event_date` is another day than the one
    /// fetched, merged like any other (by default such a record is a fetch
    /// bug and fails its day).
    #[arg(long)]
    pub(crate) lenient_event_dates: bool,
    /// How much of each day in flight is held in memory before it is
    /// sorted into temporary files in `$TMPDIR` (`64MiB`, `512MB`, `1GiB`,
    /// or bytes).
    #[arg(
        long,
        env = "BACKFILL_STREAM_MEMORY",
        default_value = default_text("stream_memory"),
        value_parser = parse_size,
        value_name = "SIZE"
    )]
    pub(crate) stream_memory: usize,
    /// The time zone that says what "today" is (an IANA name).
    #[arg(long, env = "BACKFILL_TZ", default_value = default_text("time_zone"), value_parser = parse_zone, value_name = "ZONE")]
    pub(crate) tz: chrono_tz::Tz,
    /// In merge mode, skip the write of a day whose records have the digest
    /// of its last sync (nothing read or written).
    #[arg(long)]
    pub(crate) skip_unchanged: bool,
    #[command(flatten)]
    pub(crate) checks: CheckArgs,
    /// Print the days that would run, fetch and write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// The run's id in the ledger (an orchestrator's run id, say); a new
    /// one by default.
    #[arg(long, env = "BACKFILL_RUN_ID", value_name = "ID")]
    pub(crate) run_id: Option<String>,
    /// Print the run report as JSON on stdout (progress and logs stay on
    /// stderr).
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the run's numbers to this file in Prometheus' text format
    /// (days by outcome, records by kind, the duration, the last success),
    /// atomically: for the node exporter's textfile collector
    /// (`--collector.textfile.directory`; name it `*.prom`).
    #[arg(long, env = "BACKFILL_METRICS_FILE", value_name = "PATH")]
    pub(crate) metrics_file: Option<std::path::PathBuf>,
    /// Push the same numbers to a Prometheus Pushgateway at this URL (its
    /// group: job `backfill`, the table's name). A push that fails is a
    /// warning: the run's exit status is the run's.
    #[arg(long, env = "BACKFILL_METRICS_PUSH", value_name = "URL")]
    pub(crate) metrics_push: Option<String>,
    /// Send the run's OpenLineage events (START, then COMPLETE, FAIL or
    /// ABORT) to this lineage server: POSTed to `URL/api/v1/lineage`
    /// (Marquez) when the URL has no path, to the URL as given otherwise.
    /// A server that is down or answers an error is a warning: the run's
    /// exit status is the run's.
    #[arg(long, env = "BACKFILL_OPENLINEAGE_URL", value_name = "URL")]
    pub(crate) openlineage_url: Option<String>,
    /// Append the run's OpenLineage events to this file, one JSON event a
    /// line (a file that cannot be written is a warning).
    #[arg(long, env = "BACKFILL_OPENLINEAGE_FILE", value_name = "PATH")]
    pub(crate) openlineage_file: Option<std::path::PathBuf>,
    /// Sent to `--openlineage-url` as `Authorization: Bearer KEY`.
    #[arg(
        long,
        env = "BACKFILL_OPENLINEAGE_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub(crate) openlineage_api_key: Option<String>,
    /// The OpenLineage job's namespace.
    #[arg(
        long,
        env = "BACKFILL_OPENLINEAGE_NAMESPACE",
        default_value = "backfill",
        value_name = "NAMESPACE"
    )]
    pub(crate) openlineage_namespace: String,
    /// The OpenLineage job's name; by default the fetch's: the command's
    /// program and its first plain words (`python3 fetch.py`), or the
    /// `--fetch-files` path.
    #[arg(long, env = "BACKFILL_OPENLINEAGE_JOB", value_name = "NAME")]
    pub(crate) openlineage_job: Option<String>,
    /// The effective settings (`config::resolve`), which the job is built
    /// from.
    #[arg(skip)]
    pub(crate) settings: Settings,
}

#[derive(Debug, Args)]
pub(crate) struct SyncArgs {
    /// Sync this one day instead (YYYY-MM-DD, `today` or `yesterday`).
    #[arg(long, value_parser = parse_day, value_name = "DAY", conflicts_with = "lookback")]
    pub(crate) day: Option<DayArg>,
    /// Also sync this many days before today, for data that arrives late.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) lookback: u32,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

#[derive(Debug, Args)]
pub(crate) struct BackfillArgs {
    /// The first day (YYYY-MM-DD, `today` or `yesterday`).
    #[arg(long, value_parser = parse_day, value_name = "DAY")]
    pub(crate) from: DayArg,
    /// The last day, included.
    #[arg(long, value_parser = parse_day, value_name = "DAY")]
    pub(crate) to: DayArg,
    /// Which days of the range to run, by the store's ledger, where each
    /// day is in one of three states: `synced` (its last attempt
    /// succeeded), `failed` (its last attempt failed, whether or not it was
    /// synced before) or `missing` (no attempt recorded).
    #[arg(long, value_enum, default_value_t = OnlyArg::All)]
    pub(crate) only: OnlyArg,
    /// Run only days not synced since this instant (RFC 3339, or a day for
    /// its midnight UTC): missing, failed, or synced before it.
    #[arg(long, value_parser = parse_instant, value_name = "INSTANT", conflicts_with = "only")]
    pub(crate) synced_before: Option<DateTime<Utc>>,
    /// Days synced at once.
    #[arg(long, env = "BACKFILL_CONCURRENCY", default_value = default_text("concurrency"), value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) concurrency: u16,
    /// Run shard INDEX of COUNT (from 0): N processes with 0/N … N-1/N cover
    /// the range exactly once between them.
    #[arg(long, env = "BACKFILL_SHARD", value_name = "INDEX/COUNT")]
    pub(crate) shard: Option<Shard>,
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The first day (YYYY-MM-DD, `today` or `yesterday`); by default 29
    /// days before `--to`, for 30 days in all.
    #[arg(long, value_parser = parse_day, value_name = "DAY")]
    pub(crate) from: Option<DayArg>,
    /// The last day, included (default: today).
    #[arg(long, value_parser = parse_day, value_name = "DAY")]
    pub(crate) to: Option<DayArg>,
    /// The time zone of `today` and `yesterday`.
    #[arg(long, env = "BACKFILL_TZ", default_value = default_text("time_zone"), value_parser = parse_zone, value_name = "ZONE")]
    pub(crate) tz: chrono_tz::Tz,
    /// `calendar` (the default on a terminal), `summary` (the default in a
    /// pipe), `table` (every day on its line, errors in full) or `json`
    /// (the ledger itself, an array of days).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub(crate) format: Option<StatusFormat>,
    /// Short for `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) checks: CheckArgs,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RowsArgs {
    /// The rows as they were at this instant (RFC 3339, or a day for its
    /// midnight UTC), by history: the table must keep it (`--history`).
    #[arg(long, value_parser = parse_instant, value_name = "INSTANT")]
    pub(crate) as_of: Option<DateTime<Utc>>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Remove tombstones whose `updated_at` is before this instant (RFC
    /// 3339, or a day for its midnight UTC).
    #[arg(long, value_parser = parse_instant, value_name = "INSTANT")]
    pub(crate) before: DateTime<Utc>,
    /// Print `{"purged": N}` on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// The per-day checks, shared by the runs and `status` (which judges the
/// synced days by them).
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// A day that fetched fewer records than `--check-fraction` of the
    /// median of the synced days around it (`--check-window` days on
    /// either side, at least 7 of them): `warn` writes it and flags it in
    /// the report and `status`, `fail` refuses it (nothing written, the
    /// day failed until `backfill accept DAY`), `off` checks nothing.
    #[arg(
        long,
        env = "BACKFILL_CHECK_VOLUME",
        default_value = default_text("check_volume"),
        value_parser = PossibleValuesParser::new(CheckAction::ALL.map(CheckAction::as_str))
            .map(|a| a.parse::<CheckAction>().unwrap_or_default()),
    )]
    pub(crate) check_volume: CheckAction,
    /// A day that fetched no record where the days around it have some:
    /// `warn`, `fail` or `off`, as `--check-volume`.
    #[arg(
        long,
        env = "BACKFILL_CHECK_EMPTY",
        default_value = default_text("check_empty"),
        value_parser = PossibleValuesParser::new(CheckAction::ALL.map(CheckAction::as_str))
            .map(|a| a.parse::<CheckAction>().unwrap_or_default()),
    )]
    pub(crate) check_empty: CheckAction,
    /// The volume check's fraction of the median (`0.25`, or `25%`): a
    /// weekend at 60 % of a weekday passes, a day at 10 % does not.
    #[arg(
        long,
        env = "BACKFILL_CHECK_FRACTION",
        default_value = default_text("check_fraction"),
        value_parser = parse_fraction,
        value_name = "F"
    )]
    pub(crate) check_fraction: f64,
    /// The days on either side of a day whose counts it is compared with.
    #[arg(
        long,
        env = "BACKFILL_CHECK_WINDOW",
        default_value = default_text("check_window"),
        value_name = "DAYS"
    )]
    pub(crate) check_window: u32,
}

#[derive(Debug, Args)]
pub(crate) struct AcceptArgs {
    /// The days (YYYY-MM-DD, `today` or `yesterday`).
    #[arg(required = true, value_parser = parse_day, value_name = "DAY")]
    pub(crate) days: Vec<DayArg>,
    /// Take the acceptance back: the checks judge the days again.
    #[arg(long)]
    pub(crate) undo: bool,
    /// The time zone of `today` and `yesterday`.
    #[arg(long, env = "BACKFILL_TZ", default_value = default_text("time_zone"), value_parser = parse_zone, value_name = "ZONE")]
    pub(crate) tz: chrono_tz::Tz,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StatusFormat {
    /// A row per month, a coloured cell per day, totals and failures,
    /// fitted to the terminal's width.
    Calendar,
    /// One line per day, a run of missing days on one line, then the
    /// totals.
    Summary,
    /// One line for every day, errors in full.
    Table,
    /// The ledger as JSON.
    Json,
    /// One self-contained HTML page (no network needed): a calendar of
    /// every month, the failed days with their errors, every day's counts
    /// and run. `backfill status --format html > status.html`.
    Html,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnlyArg {
    /// Every day of the range.
    All,
    /// Days with no attempt recorded: a day whose only attempt failed is
    /// `failed`, not `missing`.
    Missing,
    /// Days whose last attempt failed, synced before or not.
    Failed,
    /// Every day not synced: missing or failed (resuming a run).
    MissingOrFailed,
}

/// A day as given on the command line: a date, or one relative to today
/// in the run's time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DayArg {
    Date(NaiveDate),
    Today,
    Yesterday,
}

impl DayArg {
    pub(crate) fn resolve(self, today: NaiveDate) -> NaiveDate {
        match self {
            DayArg::Date(day) => day,
            DayArg::Today => today,
            DayArg::Yesterday => today.pred_opt().unwrap_or(today),
        }
    }
}

/// A command or a path: an empty one would fetch nothing, every day.
fn non_blank(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(s.to_owned())
    }
}

fn parse_day(s: &str) -> Result<DayArg, String> {
    match s {
        "today" => Ok(DayArg::Today),
        "yesterday" => Ok(DayArg::Yesterday),
        _ => date(s)
            .map(DayArg::Date)
            .ok_or_else(|| format!("`{s}` is not a day: expected YYYY-MM-DD, today or yesterday")),
    }
}

/// Exactly `YYYY-MM-DD`, a real date: chrono's `%Y-%m-%d` alone also takes
/// `2026-1-2`, which is too easily a typo for another day.
fn date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    let shape = b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        });
    shape
        .then(|| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok())
        .flatten()
}

fn parse_instant(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(s) {
        return Ok(at.with_timezone(&Utc));
    }
    date(s)
        .map(|day| day.and_time(chrono::NaiveTime::MIN).and_utc())
        .ok_or_else(|| {
            format!("`{s}` is not an instant: expected RFC 3339 (2026-01-31T00:00:00Z) or a day (YYYY-MM-DD)")
        })
}

fn parse_zone(s: &str) -> Result<chrono_tz::Tz, String> {
    s.parse::<chrono_tz::Tz>().map_err(|_| {
        format!("`{s}` is not a time zone: expected an IANA name such as Europe/Paris or UTC")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn days_instants_zones_and_durations_parse() {
        let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
        assert_eq!(parse_day("2026-01-05").unwrap(), DayArg::Date(jan(5)));
        assert_eq!(parse_day("yesterday").unwrap().resolve(jan(5)), jan(4));
        assert_eq!(parse_day("today").unwrap().resolve(jan(5)), jan(5));
        assert!(parse_day("2026-13-01").is_err());
        assert!(parse_day("05/01/2026").is_err());
        assert_eq!(
            parse_instant("2026-01-05").unwrap(),
            jan(5).and_hms_opt(0, 0, 0).unwrap().and_utc()
        );
        assert_eq!(
            parse_instant("2026-01-05T02:00:00+02:00").unwrap(),
            jan(5).and_hms_opt(0, 0, 0).unwrap().and_utc()
        );
        assert!(parse_instant("soon").is_err());
        assert_eq!(
            parse_zone("Europe/Paris").unwrap(),
            chrono_tz::Europe::Paris
        );
        assert!(parse_zone("Mars/Olympus").is_err());
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert!(parse_duration("ten minutes").is_err());
    }

    #[test]
    fn a_day_is_exactly_yyyy_mm_dd() {
        let jan2 = NaiveDate::from_ymd_opt(2026, 1, 2).unwrap();
        assert_eq!(parse_day("2026-01-02").unwrap(), DayArg::Date(jan2));
        for bad in [
            "2026-1-2",
            "2026-01-2",
            "2026-1-02",
            "26-01-02",
            "+2026-01-02",
            " 2026-01-02",
            "2026-02-30",
            "2026/01/02",
        ] {
            let error = parse_day(bad).unwrap_err();
            assert!(error.contains("YYYY-MM-DD"), "{bad}: {error}");
            assert!(parse_instant(bad).is_err(), "{bad}");
        }
        assert!(parse_instant("2026-1-2T00:00:00Z").is_err());
    }

    #[test]
    fn fractions_and_sizes_parse() {
        assert_eq!(parse_fraction("0.5").unwrap(), 0.5);
        assert_eq!(parse_fraction("50%").unwrap(), 0.5);
        assert_eq!(parse_fraction("1").unwrap(), 1.0);
        assert_eq!(parse_fraction("0").unwrap(), 0.0);
        for bad in ["1.5", "-0.1", "150%", "half", "NaN", ""] {
            assert!(parse_fraction(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("512MB").unwrap(), 512_000_000);
        assert_eq!(parse_size("1gib").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("10 kB").unwrap(), 10_000);
        for bad in ["", "0", "MiB", "1.5GiB", "64 parsecs", "-1"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
