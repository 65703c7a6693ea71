//! The size of a run and the command line that sets it.

use std::time::Duration;

use crate::stores::Kind;

/// The size of a run.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) days: u32,
    pub(crate) per_day: u32,
    pub(crate) concurrency: usize,
    pub(crate) repeat: u32,
    pub(crate) quick: bool,
    pub(crate) parallel_days: u32,
    pub(crate) parallel_records: u32,
    pub(crate) parallel_sleep: Duration,
    pub(crate) scale_days: u32,
    /// Records of the one big day (`big_day`).
    pub(crate) big_day: u32,
    /// `--large`: the 10 000 000-record streamed day and the day into a
    /// 10 000 000-row table run too.
    pub(crate) large: bool,
    /// Records of the streamed day (`stream_day`, `--large`).
    pub(crate) stream_day: u32,
    /// Rows already in the table (`scale_large`, `--large`).
    pub(crate) large_table: u32,
    /// `--only`: the groups of scenarios to run; all when empty.
    pub(crate) only: Vec<&'static str>,
}

/// The scenarios by group: a group runs as a whole, because its
/// scenarios build on each other's tables and figures (`--only rerun` runs
/// the backfill it re-runs, and the rest of its group).
pub(crate) const GROUPS: [(&str, &[&str]); 9] = [
    (
        "backfill",
        &[
            "backfill_serial",
            "backfill",
            "rerun",
            "rerun_skip",
            "changed_day",
            "stale_day",
            "replace_day",
            "replace_rerun",
        ],
    ),
    ("scale", &["scale", "scale_large"]),
    ("parallel", &["parallel"]),
    ("big", &["big_day", "big_rerun", "big_stream", "stream_day"]),
    ("cli_ingest", &["cli_ingest", "cli_rerun_skip"]),
    (
        "random",
        &[
            "random_serial",
            "random_upsert",
            "random_days",
            "random_rerun",
            "random_lookback_1",
            "random_lookback",
            "random_lookback_100",
            "random_stream",
            "random_large",
            "large_upsert",
        ],
    ),
    ("columns", &["columns", "columns_rerun"]),
    ("history", &["history", "history_rerun", "history_lookback"]),
    (
        "delta",
        &[
            "delta_serial",
            "delta_days",
            "delta_rerun",
            "delta_rerun_skip",
            "delta_lookback",
            "delta_stream",
        ],
    ),
];

/// The group `name` (a group's or a scenario's name) belongs to.
fn group_of(name: &str) -> Option<&'static str> {
    GROUPS
        .iter()
        .find(|(group, scenarios)| *group == name || scenarios.contains(&name))
        .map(|(group, _)| *group)
}

impl Settings {
    pub(crate) fn full() -> Self {
        Self {
            days: 30,
            per_day: 10_000,
            // Two days at once: what a job on a two-core machine would run.
            // `--concurrency 1` measures the serial path.
            concurrency: 2,
            repeat: 3,
            quick: false,
            parallel_days: 60,
            parallel_records: 100,
            parallel_sleep: Duration::from_millis(50),
            scale_days: 100,
            big_day: 1_000_000,
            large: false,
            stream_day: 10_000_000,
            large_table: 10_000_000,
            only: Vec::new(),
        }
    }

    pub(crate) fn quick() -> Self {
        Self {
            days: 5,
            per_day: 2_000,
            repeat: 1,
            quick: true,
            parallel_days: 24,
            parallel_sleep: Duration::from_millis(40),
            scale_days: 20,
            big_day: 20_000,
            ..Self::full()
        }
    }

    pub(crate) fn rows(&self) -> u64 {
        u64::from(self.days) * u64::from(self.per_day)
    }

    /// Whether the scenarios of `group` run (see [`GROUPS`]).
    pub(crate) fn runs(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.contains(&group)
    }
}

pub(crate) fn usage() -> &'static str {
    "usage: backfill-bench [--stores memory,sqlite,postgres,delta] [--days N] [--per-day N] \
     [--concurrency N] [--repeat N] [--big-day N] [--large] [--quick] [--json] \
     [--only SCENARIO,…]\n\
     --only runs each named scenario's group: backfill, scale, parallel, big, cli_ingest, random, columns, delta (the delta store's only group)"
}

/// The stores to measure, the run's settings, and whether to print JSON.
pub(crate) fn parse_args() -> Result<(Vec<Kind>, Settings, bool), lexopt::Error> {
    use lexopt::prelude::*;
    let mut stores = vec![Kind::Memory, Kind::Sqlite, Kind::Postgres, Kind::Delta];
    let mut settings = Settings::full();
    let (mut days, mut per_day, mut concurrency, mut repeat) = (None, None, None, None);
    let mut json = false;
    let (mut large, mut big_day) = (false, None);
    let mut only = Vec::new();
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
            Long("only") => {
                let list: String = parser.value()?.parse()?;
                for name in list.split(',').map(str::trim) {
                    let group = group_of(name)
                        .ok_or_else(|| lexopt::Error::from(format!("no scenario {name:?}")))?;
                    if !only.contains(&group) {
                        only.push(group);
                    }
                }
            }
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
    settings.only = only;
    // `--large`: a big day of 4 000 000 records unless given.
    settings.big_day = big_day.unwrap_or(if large { 4_000_000 } else { settings.big_day });
    Ok((stores, settings, json))
}
