//! `backfill status`: the ledger at a glance. A calendar on a terminal (a
//! row per month, a cell per day, fitted to its width), the library's
//! table in a pipe (a run of missing days on one line, then the totals),
//! every day on its line with `--format table`, the ledger as JSON, or a
//! page a person opens (`--format html`, see the `page` module).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};

use backfill_core::{DayState, DayStatus, Status};
use chrono::{Datelike, NaiveDate};

use crate::args::{StatusArgs, StatusFormat};
use crate::config::Resolved;
use crate::store::{self, Access};
use crate::{Failure, EXIT_OK};

/// The days `status` shows when no range is given: 30, today included.
const DEFAULT_DAYS: u64 = 30;

/// `backfill status`.
pub(crate) async fn run(mut args: StatusArgs, resolved: &Resolved) -> Result<u8, Failure> {
    crate::config::apply_store(resolved, &mut args.store)?;
    let job = resolved
        .settings
        .job()
        .map_err(|e| Failure::Config(e.to_string()))?;
    let today = job.today();
    let end = args.to.map_or(today, |to| to.resolve(today));
    let start = match args.from {
        Some(from) => from.resolve(today),
        None => end
            .checked_sub_days(chrono::Days::new(DEFAULT_DAYS - 1))
            .unwrap_or(NaiveDate::MIN),
    };
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
    let terminal = stdout.is_terminal();
    let format = match (args.json, args.format) {
        (true, _) => StatusFormat::Json,
        (false, Some(format)) => format,
        (false, None) if terminal => StatusFormat::Calendar,
        (false, None) => StatusFormat::Summary,
    };
    let text = match format {
        StatusFormat::Json => {
            let mut json = serde_json::to_string(&status.days)
                .map_err(|e| Failure::Store(format!("cannot print the ledger: {e}")))?;
            json.push('\n');
            json
        }
        StatusFormat::Table => table(&status),
        StatusFormat::Html => crate::page::page(
            &status,
            &store::table_label(&args.store),
            chrono::Utc::now(),
        ),
        // The library's own table: a run of missing days on one line, the
        // totals at the end.
        StatusFormat::Summary => format!("{status}\n"),
        StatusFormat::Calendar => {
            // Colour on a terminal only, unless NO_COLOR says otherwise.
            let colour = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            calendar(&status, colour, width(terminal))
        }
    };
    let mut stdout = stdout.lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
    Ok(EXIT_OK)
}

/// The width to fit the calendar to: the terminal's, else `COLUMNS`, else
/// none (a file gets whole lines).
fn width(terminal: bool) -> Option<usize> {
    let of_terminal = terminal
        .then(|| console::Term::stdout().size_checked())
        .flatten()
        .map(|(_rows, columns)| usize::from(columns));
    of_terminal.or_else(|| {
        std::env::var("COLUMNS")
            .ok()?
            .trim()
            .parse()
            .ok()
            .filter(|w| *w > 0)
    })
}

/// How a day looks in the calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cell {
    Synced,
    Empty,
    Flagged,
    Failed,
    Missing,
}

impl Cell {
    /// Every kind, in the legend's order.
    pub(crate) const ALL: [Cell; 5] = [
        Cell::Synced,
        Cell::Empty,
        Cell::Flagged,
        Cell::Failed,
        Cell::Missing,
    ];

    pub(crate) fn of(day: &DayStatus) -> Self {
        match day.state {
            DayState::Synced if day.flag.is_some() => Cell::Flagged,
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
            Cell::Flagged => '▲',
            Cell::Failed => '✗',
            Cell::Missing => '·',
        }
    }

    /// ANSI colour: green, cyan, yellow, red, grey.
    fn colour(self) -> &'static str {
        match self {
            Cell::Synced => "\x1b[32m",
            Cell::Empty => "\x1b[36m",
            Cell::Flagged => "\x1b[1;33m",
            Cell::Failed => "\x1b[1;31m",
            Cell::Missing => "\x1b[90m",
        }
    }

    /// Its class on the HTML page.
    pub(crate) fn class(self) -> &'static str {
        match self {
            Cell::Synced => "synced",
            Cell::Empty => "empty",
            Cell::Flagged => "flagged",
            Cell::Failed => "failed",
            Cell::Missing => "missing",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Cell::Synced => "synced",
            Cell::Empty => "synced, empty",
            Cell::Flagged => "synced, flagged",
            Cell::Failed => "failed",
            Cell::Missing => "missing",
        }
    }
}

const RESET: &str = "\x1b[0m";

/// Where a month's cells start: after `YYYY-MM` and two blanks.
const LABEL: usize = 9;

/// A row per month, a cell per day (two columns wide, day 1 first), the
/// legend with totals, then the failed days with their errors. Given a
/// `width`, everything fits in it: a month too long for it goes on over
/// several lines, whole cells on each (the header of day numbers too), the
/// legend wraps between its items, and an error line is cut with `…`.
fn calendar(status: &Status, colour: bool, width: Option<usize>) -> String {
    let paint = |cell: Cell, text: &str| {
        if colour {
            format!("{}{text}{RESET}", cell.colour())
        } else {
            text.to_owned()
        }
    };
    // Cells per line: each takes two columns, and a day number over the
    // last one may take both.
    let per_line = width.map_or(31, |w| (w.saturating_sub(LABEL) / 2).clamp(1, 31));
    let mut out = String::new();
    // Day numbers over the cells: 1, 5, 10, …, 30, on each line of cells.
    for first in (1..=31).step_by(per_line) {
        let last = (first + per_line - 1).min(31);
        let mut header = " ".repeat(LABEL);
        let mut column = 0;
        // A line of cells that starts with no label gets its first day's.
        let labels = std::iter::once(first)
            .chain([5, 10, 15, 20, 25, 30].into_iter().filter(|d| *d > first));
        for day in labels.take_while(|d| *d <= last) {
            let at = 2 * (day - first);
            if at > 0 && at <= column {
                continue;
            }
            header.push_str(&" ".repeat(at - column));
            let label = day.to_string();
            column = at + label.len();
            header.push_str(&label);
        }
        let _ = writeln!(out, "{}", header.trim_end());
    }
    let mut days = status.days.iter().peekable();
    while let Some(first) = days.peek() {
        let (year, month) = (first.day.year(), first.day.month());
        let mut row = [None; 31];
        while let Some(day) = days.next_if(|d| (d.day.year(), d.day.month()) == (year, month)) {
            row[day.day.day0() as usize] = Some(Cell::of(day));
        }
        let used = row.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
        for (i, cells) in row[..used].chunks(per_line).enumerate() {
            let cells: String = cells
                .iter()
                .map(|cell| match cell {
                    Some(cell) => paint(*cell, &format!("{} ", cell.glyph())),
                    None => "  ".to_owned(),
                })
                .collect();
            let label = if i == 0 {
                format!("{year:04}-{month:02}  ")
            } else {
                " ".repeat(LABEL)
            };
            let line = format!("{label}{cells}");
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    let count = |cell: Cell| status.days.iter().filter(|d| Cell::of(d) == cell).count();
    let mut legend: Vec<String> = Cell::ALL
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
    legend.push(format!("({} days)", status.days.len()));
    out.push('\n');
    let mut line = String::new();
    for item in legend {
        let wide = console::measure_text_width(&line) + 3 + console::measure_text_width(&item);
        if !line.is_empty() && width.is_some_and(|w| wide > w) {
            let _ = writeln!(out, "{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push_str("   ");
        }
        line.push_str(&item);
    }
    let _ = writeln!(out, "{line}");
    failures(status, width, &mut out);
    out
}

/// The flagged days with why, then the failed days with their last error,
/// under the calendar, each on one line cut to `width` (the whole error is
/// in `--format table` and `--json`).
fn failures(status: &Status, width: Option<usize>, out: &mut String) {
    let cut = |line: String| match width {
        Some(width) => console::truncate_str(&line, width, "…").into_owned(),
        None => line,
    };
    let flagged: Vec<_> = status
        .days
        .iter()
        .filter_map(|d| Some((d.day, d.flag.as_ref()?)))
        .collect();
    if !flagged.is_empty() {
        let _ = writeln!(out, "\nflagged days:");
        for (day, flag) in flagged {
            let _ = writeln!(out, "{}", cut(format!("  {day}  {flag}")));
        }
    }
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
        let line = format!(
            "  {day}  after {} attempt{} at {}: {}",
            failure.attempts,
            if failure.attempts == 1 { "" } else { "s" },
            failure.at.format("%Y-%m-%d %H:%M:%S UTC"),
            failure.error.lines().collect::<Vec<_>>().join(" / ")
        );
        let _ = writeln!(out, "{}", cut(line));
    }
}

/// A day's last error, else the run that synced it; then why a check
/// flags it, or when it was accepted.
pub(crate) fn run_or_error(day: &DayStatus) -> Option<String> {
    let entry = day.entry.as_ref()?;
    let mut text = match (&entry.failure, &entry.synced) {
        (Some(failure), _) => failure.error.clone(),
        (None, Some(synced)) => synced
            .run_id
            .as_ref()
            .map_or(String::new(), |id| id.as_str().to_owned()),
        (None, None) => String::new(),
    };
    let sep = |text: &String| if text.is_empty() { "" } else { " · " };
    if let Some(flag) = &day.flag {
        text = format!("{text}{}flagged: {flag}", sep(&text));
    } else if let Some(at) = entry.accepted {
        text = format!(
            "{text}{}accepted {}",
            sep(&text),
            at.format("%Y-%m-%d %H:%M:%S UTC")
        );
    }
    (!text.is_empty()).then_some(text)
}

/// A duration as a person reads it at a glance: `340ms`, `12.3s`,
/// `4m05s`, `2h07m`.
pub(crate) fn duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{}.{}s", ms / 1000, ms % 1000 / 100),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// One line for every day, for `--format table`: a header, then
/// `day state synced_at fetch write mode records inserted updated deleted
/// unchanged stale run_or_error`, blank-padded columns, `-` for what a day
/// lacks.
fn table(status: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10}  {:<7}  {:<20}  {:>7}  {:>7}  {:<7}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  run / last error",
        "day",
        "state",
        "synced_at",
        "fetch",
        "write",
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
        let number = |n: Option<u64>| n.map_or("-".to_owned(), |n| n.to_string());
        let c = synced.map(|s| s.counts);
        let timing = synced.and_then(|s| s.timing);
        let last = run_or_error(day).map_or("-".to_owned(), |text| {
            text.lines().collect::<Vec<_>>().join(" / ")
        });
        let _ = writeln!(
            out,
            "{:<10}  {:<7}  {:<20}  {:>7}  {:>7}  {:<7}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {}",
            day.day,
            match day.flag {
                Some(_) => "flagged".to_owned(),
                None => day.state.to_string(),
            },
            synced.map_or("-".to_owned(), |s| s
                .at
                .format("%Y-%m-%dT%H:%M:%SZ")
                .to_string()),
            timing.map_or("-".to_owned(), |t| duration(t.fetch)),
            timing.map_or("-".to_owned(), |t| duration(t.write)),
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
    use backfill_core::{Checks, Job, MemoryStore, Record, Retry};
    use chrono::NaiveDate;

    /// January 3 … February 28 2026: January synced up to the 20th except
    /// the 5th (failed) and the 6th (synced with no records), the rest
    /// missing; no per-day check made, so the 6th is an empty day.
    async fn status() -> Status {
        status_with(Checks::off()).await
    }

    /// [`status`] with these checks.
    async fn status_with(checks: Checks) -> Status {
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
        let job = Job::new().retry(Retry::none()).checks(checks);
        assert!(job
            .backfill(&store, &fetch, jan(3)..=jan(20))
            .await
            .is_err());
        let feb28 = NaiveDate::from_ymd_opt(2026, 2, 28).unwrap();
        job.status(&store, jan(3)..=feb28).await.unwrap()
    }

    /// With the default checks, the day with no records among days of one
    /// record each is flagged: its own mark and colour, counted in the
    /// legend, why under the calendar and in the table.
    #[tokio::test]
    async fn a_flagged_day_has_its_mark_and_why() {
        let status = status_with(Checks::default()).await;
        let text = calendar(&status, false, None);
        let jan = text.lines().nth(1).unwrap();
        assert!(jan.starts_with("2026-01      ■ ■ ✗ ▲ ■"), "{jan}");
        assert!(text.contains("▲ synced, flagged 1"), "{text}");
        let narrow = calendar(&status, false, Some(60));
        let why = narrow
            .lines()
            .skip_while(|l| *l != "flagged days:")
            .nth(1)
            .unwrap();
        assert!(
            why.starts_with("  2026-01-06  empty check: no record fetched"),
            "{why}"
        );
        assert!(why.chars().count() <= 60 && why.ends_with('…'), "{why}");
        let coloured = calendar(&status, true, None);
        assert!(coloured.contains("\x1b[1;33m▲ \x1b[0m"), "{coloured}");
        let table = table(&status);
        let row = table.lines().find(|l| l.starts_with("2026-01-06")).unwrap();
        assert!(
            row.contains("flagged") && row.contains("flagged: empty check: no record fetched"),
            "{row}"
        );
    }

    #[tokio::test]
    async fn the_calendar_has_a_row_per_month_and_a_cell_per_day() {
        let text = calendar(&status().await, false, None);
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
                "■ synced 16   □ synced, empty 1   ▲ synced, flagged 0   ✗ failed 1   · missing 39   (57 days)"
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
        let coloured = calendar(&status().await, true, None);
        assert!(coloured.contains("\x1b[1;31m✗ \x1b[0m"), "{coloured}");
    }

    #[tokio::test]
    async fn the_calendar_fits_the_width_wrapping_months_not_cells() {
        let status = status().await;
        let text = calendar(&status, true, Some(40));
        for line in text.lines() {
            assert!(
                console::measure_text_width(line) <= 40,
                "{line:?} is wider than 40 columns"
            );
        }
        // 15 cells a line: each month on three lines, whole cells on each.
        let plain = calendar(&status, false, Some(40));
        let lines: Vec<&str> = plain.lines().collect();
        assert_eq!(lines[0], "         1       5         10        15");
        assert_eq!(lines[1], "         16      20        25        30");
        assert_eq!(lines[2], "         31");
        assert!(lines[3].starts_with("2026-01      ■ ■ ✗ □ ■"), "{plain}");
        let january: String = lines[3..6].concat();
        assert_eq!(january.matches('■').count(), 16, "{plain}");
        assert_eq!(january.matches('·').count(), 11, "{plain}");
        assert_eq!(
            lines[4],
            format!("{}{}", " ".repeat(9), "■ ".repeat(5) + &"· ".repeat(10)).trim_end()
        );
        assert_eq!(lines[5], "         ·");
        assert!(lines[6].starts_with("2026-02  · · ·"), "{plain}");
        assert_eq!(lines[7].matches('·').count(), 13, "{plain}");
        assert_eq!(lines[8], "");
        // The legend wraps between its items; the error line is cut.
        assert!(
            plain.contains("■ synced 16   □ synced, empty 1\n"),
            "{plain}"
        );
        let failed = plain
            .lines()
            .find(|l| l.starts_with("  2026-01-05"))
            .unwrap();
        assert!(failed.ends_with('…'), "{failed}");
        assert_eq!(console::measure_text_width(failed), 40, "{failed}");
        // Wide enough: the one-row-per-month calendar, error in full.
        let wide = calendar(&status, false, Some(200));
        assert_eq!(wide, calendar(&status, false, None));
        assert!(wide.contains("upstream 500 / second line"), "{wide}");
    }

    #[tokio::test]
    async fn the_summary_folds_missing_days_and_ends_with_the_totals() {
        let status = status().await;
        let text = format!("{status}\n");
        assert!(
            text.contains("2026-01-21 … 2026-02-28  missing (39 days)\n"),
            "{text}"
        );
        assert!(
            text.ends_with("57 days: 17 synced, 1 failed, 39 missing\n"),
            "{text}"
        );
    }

    #[test]
    fn durations_read_at_a_glance() {
        let ms = std::time::Duration::from_millis;
        let cases = [
            (0, "0ms"),
            (999, "999ms"),
            (1_000, "1.0s"),
            (12_345, "12.3s"),
            (59_999, "59.9s"),
            (60_000, "1m00s"),
            (245_000, "4m05s"),
            (3_600_000, "1h00m"),
            (7_620_000, "2h07m"),
        ];
        for (n, text) in cases {
            assert_eq!(duration(ms(n)), text, "{n} ms");
        }
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
        // How long its fetch and its write took, as the ledger has them.
        let timing = status.days[0]
            .entry
            .as_ref()
            .unwrap()
            .synced
            .as_ref()
            .unwrap()
            .timing;
        let timing = timing.expect("the memory store keeps the timing");
        assert_eq!(
            &third[3..5],
            [duration(timing.fetch), duration(timing.write)]
        );
        assert_eq!(&third[5..12], ["merge", "1", "1", "0", "0", "0", "0"]);
        let fifth = fields(lines[3]);
        assert_eq!(&fifth[..5], ["2026-01-05", "failed", "-", "-", "-"]);
        assert_eq!(
            fifth[12..].join(" "),
            "fetching 2026-01-05 failed: exit 3: upstream 500 / second line"
        );
        let sixth = fields(lines[4]);
        assert_eq!(&sixth[5..7], ["merge", "0"]);
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
                "-",
                "-",
                "-"
            ]
        );
    }
}
