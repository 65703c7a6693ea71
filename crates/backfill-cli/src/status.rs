//! `backfill status`: the ledger at a glance. A calendar on a terminal (a
//! row per month, a cell per day), one line per day in a pipe or with
//! `--format table`, or the ledger as JSON.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};

use backfill_core::{DayState, DayStatus, Job, Status};
use chrono::Datelike;

use crate::args::{StatusArgs, StatusFormat};
use crate::store::{self, Access};
use crate::{Failure, EXIT_OK};

/// `backfill status`.
pub(crate) async fn run(args: StatusArgs) -> Result<u8, Failure> {
    let job = Job::new().time_zone(args.tz);
    let today = job.today();
    let (start, end) = (args.from.resolve(today), args.to.resolve(today));
    if start > end {
        return Err(Failure::Config(format!(
            "--from {start} is after --to {end}"
        )));
    }
    let store = store::open(&args.store, Access::Read).await?;
    let status = job
        .status(&*store, start..=end)
        .await
        .map_err(|e| Failure::Store(format!("cannot read the ledger: {e}")))?;
    let stdout = std::io::stdout();
    let format = match (args.json, args.format) {
        (true, _) => StatusFormat::Json,
        (false, Some(format)) => format,
        (false, None) if stdout.is_terminal() => StatusFormat::Calendar,
        (false, None) => StatusFormat::Table,
    };
    let text = if format == StatusFormat::Json {
        let mut json = serde_json::to_string(&status.days)
            .map_err(|e| Failure::Store(format!("cannot print the ledger: {e}")))?;
        json.push('\n');
        json
    } else if format == StatusFormat::Table {
        table(&status)
    } else {
        // Colour on a terminal only, unless NO_COLOR says otherwise.
        let colour =
            stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        calendar(&status, colour)
    };
    let mut stdout = stdout.lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
    Ok(EXIT_OK)
}

/// How a day looks in the calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    Synced,
    Empty,
    Failed,
    Missing,
}

impl Cell {
    fn of(day: &DayStatus) -> Self {
        match day.state {
            DayState::Synced => {
                let empty = day
                    .entry
                    .as_ref()
                    .and_then(|e| e.synced.as_ref())
                    .is_some_and(|s| s.counts.applied() + s.counts.collapsed == 0);
                if empty {
                    Cell::Empty
                } else {
                    Cell::Synced
                }
            }
            DayState::Failed => Cell::Failed,
            _ => Cell::Missing,
        }
    }

    fn glyph(self) -> char {
        match self {
            Cell::Synced => '■',
            Cell::Empty => '□',
            Cell::Failed => '✗',
            Cell::Missing => '·',
        }
    }

    /// ANSI colour: green, cyan, red, grey.
    fn colour(self) -> &'static str {
        match self {
            Cell::Synced => "\x1b[32m",
            Cell::Empty => "\x1b[36m",
            Cell::Failed => "\x1b[1;31m",
            Cell::Missing => "\x1b[90m",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Cell::Synced => "synced",
            Cell::Empty => "synced, empty",
            Cell::Failed => "failed",
            Cell::Missing => "missing",
        }
    }
}

const RESET: &str = "\x1b[0m";

/// A row per month, a cell per day (two columns wide, day 1 first), the
/// legend with totals, then the failed days with their errors.
fn calendar(status: &Status, colour: bool) -> String {
    let paint = |cell: Cell, text: &str| {
        if colour {
            format!("{}{text}{RESET}", cell.colour())
        } else {
            text.to_owned()
        }
    };
    let mut out = String::new();
    // Day numbers over the cells: 1, 5, 10, …, 30.
    let mut header = " ".repeat(9);
    let mut column = 0;
    for day in [1, 5, 10, 15, 20, 25, 30] {
        let at = 2 * (day - 1);
        header.push_str(&" ".repeat(at - column));
        let label = day.to_string();
        column = at + label.len();
        header.push_str(&label);
    }
    let _ = writeln!(out, "{}", header.trim_end());
    let mut days = status.days.iter().peekable();
    while let Some(first) = days.peek() {
        let (year, month) = (first.day.year(), first.day.month());
        let mut row = [None; 31];
        while let Some(day) = days.next_if(|d| (d.day.year(), d.day.month()) == (year, month)) {
            row[day.day.day0() as usize] = Some(Cell::of(day));
        }
        let cells: String = row
            .iter()
            .map(|cell| match cell {
                Some(cell) => paint(*cell, &format!("{} ", cell.glyph())),
                None => "  ".to_owned(),
            })
            .collect();
        let _ = writeln!(out, "{year:04}-{month:02}  {}", cells.trim_end());
    }
    let count = |cell: Cell| status.days.iter().filter(|d| Cell::of(d) == cell).count();
    let legend: Vec<String> = [Cell::Synced, Cell::Empty, Cell::Failed, Cell::Missing]
        .into_iter()
        .map(|cell| {
            format!(
                "{} {} {}",
                paint(cell, &cell.glyph().to_string()),
                cell.label(),
                count(cell)
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "\n{}   ({} days)",
        legend.join("   "),
        status.days.len()
    );
    failures(status, &mut out);
    out
}

/// The failed days with their last error, under the calendar.
fn failures(status: &Status, out: &mut String) {
    let failed: Vec<_> = status
        .days
        .iter()
        .filter_map(|d| Some((d.day, d.entry.as_ref()?.failure.as_ref()?)))
        .collect();
    if failed.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nfailed days:");
    for (day, failure) in failed {
        let _ = writeln!(
            out,
            "  {day}  after {} attempt{} at {}: {}",
            failure.attempts,
            if failure.attempts == 1 { "" } else { "s" },
            failure.at.format("%Y-%m-%d %H:%M:%S UTC"),
            failure.error.lines().collect::<Vec<_>>().join(" / ")
        );
    }
}

/// One line per day, for pipes and `--table`: a header, then
/// `day state synced_at mode records inserted updated deleted unchanged
/// stale run_or_error`, blank-padded columns, `-` for what a day lacks.
fn table(status: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10}  {:<7}  {:<20}  {:<7}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  run / last error",
        "day",
        "state",
        "synced_at",
        "mode",
        "records",
        "inserted",
        "updated",
        "deleted",
        "unchanged",
        "stale"
    );
    for day in &status.days {
        let synced = day.entry.as_ref().and_then(|e| e.synced.as_ref());
        let failure = day.entry.as_ref().and_then(|e| e.failure.as_ref());
        let number = |n: Option<u64>| n.map_or("-".to_owned(), |n| n.to_string());
        let c = synced.map(|s| s.counts);
        let last = match (failure, synced) {
            (Some(f), _) => f.error.lines().collect::<Vec<_>>().join(" / "),
            (None, Some(s)) => s
                .run_id
                .as_ref()
                .map_or("-".to_owned(), ToString::to_string),
            (None, None) => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<10}  {:<7}  {:<20}  {:<7}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {}",
            day.day,
            day.state,
            synced.map_or("-".to_owned(), |s| s
                .at
                .format("%Y-%m-%dT%H:%M:%SZ")
                .to_string()),
            synced.map_or("-", |s| match s.mode {
                backfill_core::Mode::Replace => "replace",
                _ => "merge",
            }),
            number(c.map(|c| c.applied() + c.collapsed)),
            number(c.map(|c| c.inserted)),
            number(c.map(|c| c.updated)),
            number(c.map(|c| c.deleted)),
            number(c.map(|c| c.unchanged)),
            number(c.map(|c| c.stale)),
            last
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use backfill_core::{MemoryStore, Record, Retry};
    use chrono::NaiveDate;

    /// January 3 … February 28 2026: January synced up to the 20th except
    /// the 5th (failed) and the 6th (synced with no records), the rest
    /// missing.
    async fn status() -> Status {
        let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
        let store = MemoryStore::new();
        let fetch = |day: NaiveDate| async move {
            match day.day() {
                5 => Err(std::io::Error::other("exit 3: upstream 500\nsecond line")),
                6 => Ok(Vec::new()),
                _ => {
                    let at = day.and_hms_opt(1, 0, 0).unwrap().and_utc();
                    Ok(vec![Record::new(format!("k:{day}"), day, "v", at).unwrap()])
                }
            }
        };
        let job = Job::new().retry(Retry::none());
        assert!(job
            .backfill(&store, &fetch, jan(3)..=jan(20))
            .await
            .is_err());
        let feb28 = NaiveDate::from_ymd_opt(2026, 2, 28).unwrap();
        job.status(&store, jan(3)..=feb28).await.unwrap()
    }

    #[tokio::test]
    async fn the_calendar_has_a_row_per_month_and_a_cell_per_day() {
        let text = calendar(&status().await, false);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("         1       5         10"),
            "{text}"
        );
        // January: blank for the 1st and 2nd, the cells from the 3rd.
        let jan = lines[1];
        assert!(jan.starts_with("2026-01      ■ ■ ✗ □ ■"), "{jan}");
        assert_eq!(jan.matches('■').count(), 16, "{jan}");
        assert_eq!(jan.matches('·').count(), 11, "{jan}");
        let feb = lines[2];
        assert!(feb.starts_with("2026-02  · · ·"), "{feb}");
        assert_eq!(feb.matches('·').count(), 28, "{feb}");
        assert!(
            text.contains(
                "■ synced 16   □ synced, empty 1   ✗ failed 1   · missing 39   (57 days)"
            ),
            "{text}"
        );
        assert!(
            text.contains("failed days:\n  2026-01-05  after 1 attempt at "),
            "{text}"
        );
        assert!(
            text.contains("failed: exit 3: upstream 500 / second line"),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "no colour asked");
        let coloured = calendar(&status().await, true);
        assert!(coloured.contains("\x1b[1;31m✗ \x1b[0m"), "{coloured}");
    }

    #[tokio::test]
    async fn the_table_has_one_line_per_day() {
        let status = status().await;
        let text = table(&status);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + status.days.len());
        assert!(lines[0].starts_with("day         state"));
        let fields = |line: &str| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let third = fields(lines[1]);
        assert_eq!(&third[..2], ["2026-01-03", "synced"]);
        assert_eq!(&third[3..10], ["merge", "1", "1", "0", "0", "0", "0"]);
        let fifth = fields(lines[3]);
        assert_eq!(&fifth[..3], ["2026-01-05", "failed", "-"]);
        assert_eq!(
            fifth[10..].join(" "),
            "fetching 2026-01-05 failed: exit 3: upstream 500 / second line"
        );
        let sixth = fields(lines[4]);
        assert_eq!(&sixth[3..5], ["merge", "0"]);
        let last = fields(lines[lines.len() - 1]);
        assert_eq!(
            last,
            [
                "2026-02-28",
                "missing",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-"
            ]
        );
    }
}
