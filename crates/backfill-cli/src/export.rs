//! `backfill rows` and `backfill history`: the table, or its history, as
//! JSON Lines on stdout.
//!
//! A line's `value` is the stored text as a JSON string, so that a line
//! read back as a fetch's stores exactly the same text.

use std::io::{BufWriter, Write};

use backfill_core::{HistoryRow, Record};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::args::{HistoryArgs, RowsArgs};
use crate::config::{self, Resolved};
use crate::failure::{Failure, EXIT_OK};
use crate::store::{self, Access};

/// `backfill rows`: the live rows, or those of `--as-of`.
pub(crate) async fn rows(mut args: RowsArgs, resolved: &Resolved) -> Result<u8, Failure> {
    config::apply_store(resolved, &mut args.store)?;
    let store = store::open(&args.store, Access::Read).await?;
    let rows = match args.as_of {
        Some(at) => store.as_of(at).await,
        None => store.rows().await,
    }
    .map_err(|e| Failure::store(&e, format!("cannot read the rows: {e}")))?;
    print_lines(rows.iter().map(record_line))
}

/// `backfill history`: every row of history.
pub(crate) async fn history(mut args: HistoryArgs, resolved: &Resolved) -> Result<u8, Failure> {
    config::apply_store(resolved, &mut args.store)?;
    let store = store::open(&args.store, Access::Read).await?;
    let rows = store
        .history()
        .await
        .map_err(|e| Failure::store(&e, format!("cannot read history: {e}")))?;
    print_lines(rows.iter().map(history_line))
}

fn instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// A record as a fetch's line writes it, its fields in that order (a
/// tombstone with `"deleted": true`).
#[derive(Serialize)]
struct RecordLine<'a> {
    key: &'a str,
    event_date: String,
    value: &'a str,
    updated_at: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    deleted: bool,
}

fn record_line(record: &Record) -> RecordLine<'_> {
    RecordLine {
        key: record.key(),
        event_date: record.event_date().to_string(),
        value: record.value(),
        updated_at: instant(record.updated_at()),
        deleted: record.is_deleted(),
    }
}

/// A row of history: its version's fields, then when it was valid.
#[derive(Serialize)]
struct HistoryLine<'a> {
    key: &'a str,
    event_date: String,
    value: &'a str,
    updated_at: String,
    deleted: bool,
    valid_from: String,
    valid_to: Option<String>,
}

fn history_line(row: &HistoryRow) -> HistoryLine<'_> {
    let record = &row.record;
    HistoryLine {
        key: record.key(),
        event_date: record.event_date().to_string(),
        value: record.value(),
        updated_at: instant(record.updated_at()),
        deleted: record.is_deleted(),
        valid_from: instant(row.valid_from()),
        valid_to: row.valid_to.map(instant),
    }
}

/// Writes each value on a line of its own; a closed pipe (`| head`) ends
/// the output quietly.
fn print_lines<T: Serialize>(lines: impl Iterator<Item = T>) -> Result<u8, Failure> {
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let written = (|| -> std::io::Result<()> {
        for line in lines {
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    })();
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::Config(format!("cannot write to stdout: {e}")))
        }
        _ => Ok(EXIT_OK),
    }
}
