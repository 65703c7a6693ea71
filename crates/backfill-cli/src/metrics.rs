//! `--metrics-file` and `--metrics-push`: a run's numbers in Prometheus'
//! text format, for the node exporter's textfile collector and for a
//! Pushgateway.
//!
//! Every metric is a gauge of the last run (a textfile or a push holds one
//! run's numbers, replaced by the next), labelled with the table, so that
//! one scrape sees each table's last run:
//!
//! - `backfill_run_days{outcome}`: days `synced`, `flagged` (synced, and
//!   flagged by a per-day check), `failed`, `skipped` (by their digest:
//!   nothing written) and `not_started`;
//! - `backfill_run_rows{kind}`: records `inserted`, `updated`, `deleted`,
//!   `unchanged`, `stale`, `collapsed` and `skipped`, as the report counts
//!   them;
//! - `backfill_run_duration_seconds` and `backfill_run_end_timestamp_seconds`;
//! - `backfill_last_success_timestamp_seconds`: the latest instant a day
//!   of the run's range synced, from the ledger, so a failed run still
//!   carries the last success forward (absent while no day ever synced).

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use backfill_core::RunReport;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use prometheus::{Encoder, GaugeVec, Opts, Registry, TextEncoder};

use crate::Failure;

/// The numbers of one run of one table.
#[derive(Debug)]
pub(crate) struct RunMetrics<'a> {
    /// The table, as its `table` label.
    pub(crate) table: &'a str,
    pub(crate) report: &'a RunReport,
    /// When the run ended.
    pub(crate) ended: DateTime<Utc>,
    /// The latest instant a day of the run's range synced.
    pub(crate) last_success: Option<DateTime<Utc>>,
}

impl RunMetrics<'_> {
    /// The metrics in Prometheus' text format (version 0.0.4), as the
    /// `prometheus` crate writes it.
    pub(crate) fn text(&self) -> Result<String, Failure> {
        self.encode()
            .map_err(|e| Failure::Config(format!("cannot write the metrics: {e}")))
    }

    fn encode(&self) -> Result<String, prometheus::Error> {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let gauge = GaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(gauge.clone()))?;
            Ok::<_, prometheus::Error>(gauge)
        };
        let table = self.table;
        let report = self.report;

        let days = gauge(
            "backfill_run_days",
            "Days of the table's last run, by outcome.",
            &["table", "outcome"],
        )?;
        let flagged = report.days.iter().filter(|d| d.flag.is_some()).count();
        let digest_skipped = report
            .days
            .iter()
            .filter(|d| d.flag.is_none() && d.counts.skipped > 0)
            .count();
        let outcomes = [
            ("synced", report.days.len() - digest_skipped - flagged),
            ("skipped", digest_skipped),
            ("flagged", flagged),
            ("failed", report.failed.len()),
            ("not_started", report.skipped.len()),
        ];
        for (outcome, n) in outcomes {
            days.with_label_values(&[table, outcome]).set(n as f64);
        }

        let rows = gauge(
            "backfill_run_rows",
            "Records of the table's last run, by what the write did with them.",
            &["table", "kind"],
        )?;
        let total = report.totals();
        let kinds = [
            ("inserted", total.inserted),
            ("updated", total.updated),
            ("deleted", total.deleted),
            ("unchanged", total.unchanged),
            ("stale", total.stale),
            ("collapsed", total.collapsed),
            ("skipped", total.skipped),
        ];
        for (kind, n) in kinds {
            rows.with_label_values(&[table, kind]).set(n as f64);
        }

        gauge(
            "backfill_run_duration_seconds",
            "Wall time of the table's last run.",
            &["table"],
        )?
        .with_label_values(&[table])
        .set(report.elapsed.as_secs_f64());
        gauge(
            "backfill_run_end_timestamp_seconds",
            "When the table's last run ended, in seconds since the Unix epoch.",
            &["table"],
        )?
        .with_label_values(&[table])
        .set(seconds(self.ended));
        if let Some(at) = self.last_success {
            gauge(
                "backfill_last_success_timestamp_seconds",
                "The latest instant a day of the last run's range synced, in seconds since \
                 the Unix epoch (from the ledger).",
                &["table"],
            )?
            .with_label_values(&[table])
            .set(seconds(at));
        }

        let mut text = Vec::new();
        TextEncoder::new().encode(&registry.gather(), &mut text)?;
        String::from_utf8(text).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

fn seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp_micros() as f64 / 1e6
}

/// Writes `text` to `path` atomically: to a file beside it, then renamed
/// over it, so a collector never reads half a file.
pub(crate) fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    let fail = |e: std::io::Error| {
        Failure::Config(format!(
            "cannot write the metrics file {}: {e}",
            path.display()
        ))
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(fail)?;
    file.write_all(text.as_bytes()).map_err(fail)?;
    file.as_file().sync_all().map_err(fail)?;
    // The collector reads it as any other file: not only its owner.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(file.path(), mode).map_err(fail)?;
    }
    file.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}

/// How long a push may take before it is given up.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Replaces the metrics of this table's group on the Pushgateway at `url`
/// (`PUT <url>/metrics/job/backfill/table@base64/<table>`): an error to
/// warn about, never to fail the run for.
pub(crate) async fn push(url: &str, table: &str, text: String) -> Result<(), String> {
    let label = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(table);
    let target = format!(
        "{}/metrics/job/backfill/table@base64/{label}",
        url.trim_end_matches('/')
    );
    let shown = shown(url);
    tokio::task::spawn_blocking(move || {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(PUSH_TIMEOUT))
            .build()
            .new_agent();
        agent
            .put(&target)
            .header("Content-Type", "text/plain; version=0.0.4")
            .send(text)
            .map(|_| ())
            .map_err(|e| format!("cannot push the metrics to {shown}: {e}"))
    })
    .await
    .map_err(|e| e.to_string())?
}

/// A URL as shown in a message: without its user and password.
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}
