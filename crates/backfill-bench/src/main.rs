//! `backfill-bench`: measures every store against its floor, side by side,
//! as ratios against baselines run in the same process on the same rows.
//!
//! ```text
//! cargo run --release -p backfill-bench -- [--stores memory,sqlite,postgres]
//!     [--days 30] [--per-day 10000] [--concurrency N] [--repeat N] [--big-day N]
//!     [--large] [--quick] [--json] [--only SCENARIO,…]
//! ```
//!
//! `--only` runs the groups the named scenarios belong to (a group's
//! scenarios build on each other): `backfill`, `scale`, `parallel`, `big`,
//! `cli_ingest`, `random` (the same scenarios with random UUID keys).
//!
//! Postgres comes from `BACKFILL_PG_URL` (nothing else may write to it
//! during the run) or from a container started with Postgres' default
//! durability settings, as in the tests.

mod dataset;
mod scenarios;
mod settings;
mod stores;

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use crate::settings::{parse_args, usage};

/// One measured line: a store and a scenario.
#[derive(Debug, Clone, Default)]
pub(crate) struct Measurement {
    pub(crate) store: &'static str,
    pub(crate) scenario: &'static str,
    pub(crate) rows: u64,
    pub(crate) seconds: f64,
    pub(crate) baseline: Option<&'static str>,
    pub(crate) baseline_seconds: Option<f64>,
    pub(crate) rows_written: Option<u64>,
    pub(crate) wal_bytes: Option<u64>,
    pub(crate) speedup: Option<f64>,
    pub(crate) peak_rss_bytes: u64,
    pub(crate) target: String,
    pub(crate) pass: Option<bool>,
    pub(crate) detail: String,
}

impl Measurement {
    fn rows_per_sec(&self) -> f64 {
        self.rows as f64 / self.seconds.max(1e-9)
    }

    fn baseline_rows_per_sec(&self) -> Option<f64> {
        self.baseline_seconds
            .map(|s| self.rows as f64 / s.max(1e-9))
    }

    /// Ours over the baseline, in rows per second: 1.0 is as fast as the floor.
    fn ratio(&self) -> Option<f64> {
        self.baseline_seconds.map(|b| b / self.seconds.max(1e-9))
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "store": self.store,
            "scenario": self.scenario,
            "rows": self.rows,
            "seconds": self.seconds,
            "rows_per_sec": self.rows_per_sec(),
            "baseline": self.baseline,
            "baseline_rows_per_sec": self.baseline_rows_per_sec(),
            "ratio": self.ratio(),
            "rows_written": self.rows_written,
            "wal_bytes": self.wal_bytes,
            "speedup": self.speedup,
            "peak_rss_bytes": self.peak_rss_bytes,
            "target": self.target,
            "pass": self.pass,
            "detail": self.detail,
        })
    }
}

fn human(rows: &[Measurement]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:<12} {:>8} {:>9} {:>11} {:>11} {:>6} {:>9} {:>10} {:>8} {:>9}  {:<34} ok",
        "store",
        "scenario",
        "rows",
        "seconds",
        "rows/s",
        "floor/s",
        "ratio",
        "written",
        "WAL",
        "speedup",
        "peak RSS",
        "target",
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for m in rows {
        let _ = writeln!(
            out,
            "{:<8} {:<12} {:>8} {:>9.3} {:>11.0} {:>11} {:>6} {:>9} {:>10} {:>8} {:>9}  {:<34} {}",
            m.store,
            m.scenario,
            m.rows,
            m.seconds,
            m.rows_per_sec(),
            opt(m.baseline_rows_per_sec().map(|r| format!("{r:.0}"))),
            opt(m.ratio().map(|r| format!("{r:.2}"))),
            opt(m.rows_written.map(|w| w.to_string())),
            opt(m.wal_bytes.map(human_bytes)),
            opt(m.speedup.map(|s| format!("{s:.1}x"))),
            human_bytes(m.peak_rss_bytes),
            m.target,
            match m.pass {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            },
        );
        if !m.detail.is_empty() {
            let _ = writeln!(out, "{:<8} {:<12} {}", "", "", m.detail);
        }
    }
    out
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[tokio::main]
async fn main() {
    // A streamed day measured in a process of its own (see
    // `scenarios/child.rs`).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--stream-child") {
        if let Err(e) = scenarios::stream_child(&args[1..]).await {
            eprintln!("{e}");
            std::process::exit(1);
        }
        return;
    }
    let (kinds, settings, json) = match parse_args() {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("{e}\n{}", usage());
            std::process::exit(2);
        }
    };
    if !json {
        println!(
            "backfill-bench: {} days x {} records per day, concurrency {}, best of {}{}\n",
            settings.days,
            settings.per_day,
            settings.concurrency,
            settings.repeat,
            if settings.quick { " (quick)" } else { "" }
        );
    }
    let mut all = Vec::new();
    let mut failed = false;
    for kind in kinds {
        let started = std::time::Instant::now();
        match scenarios::run_store(kind, &settings, json).await {
            Ok(rows) => {
                failed |= rows.iter().any(|m| m.pass == Some(false));
                all.extend(rows);
            }
            Err(e) => {
                eprintln!("{kind}: {e}");
                failed = true;
            }
        }
        if !json {
            eprintln!("{kind}: done in {:.1} s", started.elapsed().as_secs_f64());
        }
    }
    if json {
        for m in &all {
            println!("{}", m.json());
        }
    } else {
        println!("\n{}", human(&all));
        println!(
            "ratio = our rows/s over the floor's rows/s on the same rows (1.00 = as fast as the floor)"
        );
    }
    // Give a container watchdog a moment: nothing else to clean.
    tokio::time::sleep(Duration::from_millis(10)).await;
    if failed {
        std::process::exit(1);
    }
}
