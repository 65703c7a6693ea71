//! `backfill status --format html`: the ledger as one page a person opens
//! or shares. Self-contained (its style inline, no script, nothing fetched
//! from the network), readable on a phone: a calendar of every month of
//! the range, colours with a legend, the failed days with their errors,
//! and every day's counts and run.

use std::fmt::Write as _;

use backfill_core::{DayStatus, Status};
use chrono::{DateTime, Datelike, NaiveDate, Utc};

use crate::status::{duration, run_or_error, Cell};

/// The page's style: system fonts, a grid of weeks per month, the table
/// scrolling on its own on a narrow screen.
const STYLE: &str = "\
:root{--synced:#2e9d4f;--empty:#38a3b8;--flagged:#e0a100;--failed:#d1342f;--missing:#d9dce1;--ink:#1f2328;--muted:#59636e}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--ink);margin:0 auto;padding:16px;max-width:1100px}
h1{font-size:1.4em;margin:0 0 4px}h2{font-size:1.1em;margin:28px 0 8px}
.meta{color:var(--muted);margin:0 0 16px}
.legend{display:flex;flex-wrap:wrap;gap:8px 18px;margin:12px 0;padding:0;list-style:none}
.legend li{display:flex;align-items:center;gap:6px}
.swatch{display:inline-block;width:14px;height:14px;border-radius:3px}
.months{display:flex;flex-wrap:wrap;gap:20px}
.month{flex:0 0 auto}
.month h3{font-size:1em;margin:0 0 6px}
.grid{display:grid;grid-template-columns:repeat(7,34px);gap:3px}
.grid .dow{font-size:11px;color:var(--muted);text-align:center}
.day{height:34px;border-radius:4px;font-size:12px;display:flex;align-items:center;justify-content:center;color:#fff}
.synced{background:var(--synced)}.empty{background:var(--empty)}.failed{background:var(--failed);font-weight:700}
.flagged{background:var(--flagged);color:var(--ink);font-weight:700}
.missing{background:var(--missing);color:var(--ink)}.out{background:transparent}
.failures{list-style:none;padding:0;margin:0}
.failures li{border-left:4px solid var(--failed);background:#fdf1f0;padding:8px 12px;margin:0 0 8px;border-radius:0 4px 4px 0}
.failures .error{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px;white-space:pre-wrap;word-break:break-word;margin:4px 0 0}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:13px;white-space:nowrap}
th,td{padding:4px 8px;border-bottom:1px solid #e4e7eb;text-align:right}
th:first-child,td:first-child,td.text,th.text{text-align:left}
td.text{white-space:normal;min-width:16em;max-width:36em;word-break:break-word}
tr.state-failed td:first-child{border-left:4px solid var(--failed)}
tr.state-failed td{background:#fdf1f0}
tr.state-flagged td:first-child{border-left:4px solid var(--flagged)}
tr.state-flagged td{background:#fff8e1}
.failures li.flag{border-left-color:var(--flagged);background:#fff8e1}
";

/// The page of `status` for the table `table`, made at `now`.
pub(crate) fn page(status: &Status, table: &str, now: DateTime<Utc>) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let range = match (status.days.first(), status.days.last()) {
        (Some(first), Some(last)) => format!("{} – {}", first.day, last.day),
        _ => "no days".to_owned(),
    };
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>backfill status: {} {}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n",
        escape(table),
        escape(&range)
    );
    let _ = writeln!(
        out,
        "<h1>backfill status: {}</h1>\n<p class=\"meta\">{} · {} days · read from the ledger at {}</p>",
        escape(table),
        escape(&range),
        status.days.len(),
        now.format("%Y-%m-%d %H:%M UTC")
    );
    legend(status, &mut out);
    months(status, &mut out);
    flagged(status, &mut out);
    failures(status, &mut out);
    days(status, &mut out);
    out.push_str("</body>\n</html>\n");
    out
}

/// The colours, with how many days each.
fn legend(status: &Status, out: &mut String) {
    out.push_str("<ul class=\"legend\">\n");
    for cell in Cell::ALL {
        let count = status.days.iter().filter(|d| Cell::of(d) == cell).count();
        let _ = writeln!(
            out,
            "<li><span class=\"swatch {}\"></span>{} <strong>{count}</strong></li>",
            cell.class(),
            cell.label()
        );
    }
    out.push_str("</ul>\n");
}

/// A grid of weeks (Monday first) per month of the range.
fn months(status: &Status, out: &mut String) {
    out.push_str("<div class=\"months\">\n");
    let mut days = status.days.iter().peekable();
    while let Some(first) = days.peek() {
        let (year, month) = (first.day.year(), first.day.month());
        let mut cells: Vec<Option<&DayStatus>> = vec![None; 31];
        while let Some(day) = days.next_if(|d| (d.day.year(), d.day.month()) == (year, month)) {
            cells[day.day.day0() as usize] = Some(day);
        }
        let start = NaiveDate::from_ymd_opt(year, month, 1).expect("a month's first day");
        let length = days_in_month(start);
        let _ = writeln!(
            out,
            "<section class=\"month\"><h3>{}</h3><div class=\"grid\">",
            start.format("%B %Y")
        );
        for dow in ["Mo", "Tu", "We", "Th", "Fr", "Sa", "Su"] {
            let _ = write!(out, "<span class=\"dow\">{dow}</span>");
        }
        for _ in 0..start.weekday().num_days_from_monday() {
            out.push_str("<span class=\"day out\"></span>");
        }
        for (n, cell) in cells.iter().take(length).enumerate() {
            let date = start + chrono::Days::new(n as u64);
            match cell {
                Some(day) => {
                    let cell = Cell::of(day);
                    let _ = write!(
                        out,
                        "<span class=\"day {}\" title=\"{}: {}\">{}</span>",
                        cell.class(),
                        date,
                        escape(&tooltip(day, cell)),
                        n + 1
                    );
                }
                None => {
                    let _ = write!(out, "<span class=\"day out\">{}</span>", n + 1);
                }
            }
        }
        out.push_str("</div></section>\n");
    }
    out.push_str("</div>\n");
}

/// What a calendar cell says when pointed at.
fn tooltip(day: &DayStatus, cell: Cell) -> String {
    let synced = day.entry.as_ref().and_then(|e| e.synced.as_ref());
    match (cell, synced) {
        (Cell::Failed, _) => "failed".to_owned(),
        (_, Some(s)) => format!(
            "{}, {} records",
            cell.label(),
            s.counts.applied() + s.counts.collapsed
        ),
        _ => cell.label().to_owned(),
    }
}

/// The days a check flags, each with why.
fn flagged(status: &Status, out: &mut String) {
    let flagged: Vec<_> = status
        .days
        .iter()
        .filter_map(|d| Some((d.day, d.flag.as_ref()?)))
        .collect();
    let _ = writeln!(out, "<h2>Flagged days ({})</h2>", flagged.len());
    if flagged.is_empty() {
        out.push_str("<p>None.</p>\n");
        return;
    }
    out.push_str(
        "<p>Synced, with a count far below the days around them: \
         <code>backfill accept DAY</code> if it is right.</p>\n<ul class=\"failures\">\n",
    );
    for (day, flag) in flagged {
        let _ = writeln!(
            out,
            "<li class=\"flag\" id=\"flagged-{day}\"><strong>{day}</strong>\
             <p class=\"error\">{}</p></li>",
            escape(&flag.to_string())
        );
    }
    out.push_str("</ul>\n");
}

/// The failed days, each with its whole last error.
fn failures(status: &Status, out: &mut String) {
    let failed: Vec<_> = status
        .days
        .iter()
        .filter_map(|d| Some((d.day, d.entry.as_ref()?.failure.as_ref()?)))
        .collect();
    let _ = writeln!(out, "<h2>Failed days ({})</h2>", failed.len());
    if failed.is_empty() {
        out.push_str("<p>None.</p>\n");
        return;
    }
    out.push_str("<ul class=\"failures\">\n");
    for (day, failure) in failed {
        let _ = writeln!(
            out,
            "<li id=\"failed-{day}\"><strong>{day}</strong> · after {} attempt{} at {}{}\
             <p class=\"error\">{}</p></li>",
            failure.attempts,
            if failure.attempts == 1 { "" } else { "s" },
            failure.at.format("%Y-%m-%d %H:%M:%S UTC"),
            failure.run_id.as_ref().map_or(String::new(), |id| format!(
                " · run {}",
                escape(id.as_str())
            )),
            escape(&failure.error)
        );
    }
    out.push_str("</ul>\n");
}

/// Every day on its row: its state, last sync and how long it took, its
/// counts, and its run or last error.
fn days(status: &Status, out: &mut String) {
    out.push_str(
        "<h2>Every day</h2>\n<div class=\"scroll\"><table>\n<thead><tr><th>day</th>\
         <th class=\"text\">state</th><th>synced at</th><th>fetch</th><th>write</th>\
         <th class=\"text\">mode</th>\
         <th>records</th><th>inserted</th><th>updated</th><th>deleted</th><th>unchanged</th>\
         <th>stale</th><th class=\"text\">run / last error</th></tr></thead>\n<tbody>\n",
    );
    for day in &status.days {
        let synced = day.entry.as_ref().and_then(|e| e.synced.as_ref());
        let number = |n: Option<u64>| n.map_or("–".to_owned(), |n| n.to_string());
        let c = synced.map(|s| s.counts);
        let timing = synced.and_then(|s| s.timing);
        let last = run_or_error(day).unwrap_or_else(|| "–".to_owned());
        let _ = writeln!(
            out,
            "<tr class=\"state-{}\" data-day=\"{}\"><td>{}</td><td class=\"text\">{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td class=\"text\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td class=\"text\">{}</td></tr>",
            Cell::of(day).class(),
            day.day,
            day.day,
            day.state,
            synced.map_or("–".to_owned(), |s| s
                .at
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()),
            timing.map_or("–".to_owned(), |t| duration(t.fetch)),
            timing.map_or("–".to_owned(), |t| duration(t.write)),
            synced.map_or("–", |s| s.mode.as_str()),
            number(c.map(|c| c.applied() + c.collapsed)),
            number(c.map(|c| c.inserted)),
            number(c.map(|c| c.updated)),
            number(c.map(|c| c.deleted)),
            number(c.map(|c| c.unchanged)),
            number(c.map(|c| c.stale)),
            escape(&last)
        );
    }
    out.push_str("</tbody></table></div>\n");
}

/// The number of days of the month `first` starts.
fn days_in_month(first: NaiveDate) -> usize {
    let next = first
        .checked_add_months(chrono::Months::new(1))
        .unwrap_or(NaiveDate::MAX);
    (next - first).num_days() as usize
}

/// `text` as HTML text or an attribute's value.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_months_have_their_length() {
        assert_eq!(
            escape(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
        let feb = NaiveDate::from_ymd_opt(2028, 2, 1).unwrap();
        assert_eq!(days_in_month(feb), 29);
        let dec = NaiveDate::from_ymd_opt(2026, 12, 1).unwrap();
        assert_eq!(days_in_month(dec), 31);
    }
}
