//! `backfill-bench`: measures every store against its floor, side by side,
//! as ratios against baselines run in the same process on the same rows.
//!
//! ```text
//! cargo run --release -p backfill-bench -- [--stores memory,sqlite,postgres]
//!     [--days 30] [--per-day 10000] [--concurrency N] [--repeat N] [--big-day N]
//!     [--large] [--quick] [--json]
//! ```
//!
//! Postgres comes from `BACKFILL_PG_URL` (nothing else may write to it
//! during the run) or from a container started with Postgres' default
//! durability settings, as in the tests.

mod big;
mod scenarios;
mod stores;

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;

use crate::scenarios::Settings;
use crate::stores::Kind;

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

fn usage() -> &'static str {
    "usage: backfill-bench [--stores memory,sqlite,postgres] [--days N] [--per-day N] \
     [--concurrency N] [--repeat N] [--big-day N] [--large] [--quick] [--json]"
}

fn parse_args() -> Result<(Vec<Kind>, Settings, bool), lexopt::Error> {
    use lexopt::prelude::*;
    let mut stores = vec![Kind::Memory, Kind::Sqlite, Kind::Postgres];
    let mut settings = Settings::full();
    let (mut days, mut per_day, mut concurrency, mut repeat) = (None, None, None, None);
    let mut json = false;
    let (mut large, mut big_day) = (false, None);
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("stores") => {
                let list: String = parser.value()?.parse()?;
                stores = list
                    .split(',')
                    .map(|s| s.trim().parse::<Kind>())
                    .collect::<Result<_, _>>()
                    .map_err(|e: String| lexopt::Error::from(e))?;
            }
            Long("days") => days = Some(parser.value()?.parse()?),
            Long("per-day") => per_day = Some(parser.value()?.parse()?),
            Long("concurrency") => concurrency = Some(parser.value()?.parse()?),
            Long("repeat") => repeat = Some(parser.value()?.parse()?),
            Long("quick") => settings = Settings::quick(),
            Long("large") => large = true,
            Long("big-day") => big_day = Some(parser.value()?.parse()?),
            Long("json") => json = true,
            Short('h') | Long("help") => {
                println!("{}", usage());
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    settings.days = days.unwrap_or(settings.days);
    settings.per_day = per_day.unwrap_or(settings.per_day);
    settings.concurrency = concurrency.unwrap_or(settings.concurrency);
    settings.repeat = repeat.unwrap_or(settings.repeat).max(1);
    settings.large = large;
    // `--large`: a big day of 4 000 000 records unless given.
    settings.big_day = big_day.unwrap_or(if large { 4_000_000 } else { settings.big_day });
    Ok((stores, settings, json))
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
    // A streamed day measured in a process of its own (see `big.rs`).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--stream-child") {
        if let Err(e) = big::stream_child(&args[1..]).await {
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
