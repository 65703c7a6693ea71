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
}

pub(crate) fn usage() -> &'static str {
    "usage: backfill-bench [--stores memory,sqlite,postgres] [--days N] [--per-day N] \
     [--concurrency N] [--repeat N] [--big-day N] [--large] [--quick] [--json]"
}

/// The stores to measure, the run's settings, and whether to print JSON.
pub(crate) fn parse_args() -> Result<(Vec<Kind>, Settings, bool), lexopt::Error> {
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
