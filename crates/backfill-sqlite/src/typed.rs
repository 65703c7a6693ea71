//! Values between SQLite and the library: a row's text columns as a
//! record and back (dates and instants in text forms that sort like
//! time), and a typed column's value as SQLite keeps it.

use backfill_core::columns::ColumnValue;
use backfill_core::{Error, Record, Result};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use rusqlite::types::Value;
use rusqlite::Connection;

use crate::error::backend;
use crate::{BACKEND, DATE_FORMAT, INSTANT_FORMAT};

pub(crate) type RawRow = (String, String, String, String, i64);

pub(crate) fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
    ))
}

pub(crate) fn query_rows<P: rusqlite::Params>(
    conn: &Connection,
    sql: &str,
    params: P,
) -> Result<Vec<Record>> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
    let rows = stmt.query_map(params, read_row).map_err(backend)?;
    rows.map(|row| into_record(row.map_err(backend)?)).collect()
}

pub(crate) fn into_record((key, date, value, instant, deleted): RawRow) -> Result<Record> {
    let corrupt = |what: &str| {
        Error::backend(
            BACKEND,
            false,
            format!("row {key:?} holds an unreadable {what}"),
        )
    };
    let event_date =
        NaiveDate::parse_from_str(&date, DATE_FORMAT).map_err(|_| corrupt("event_date"))?;
    let updated_at = parse_instant(&instant).ok_or_else(|| corrupt("updated_at"))?;
    match deleted {
        0 => Record::new(key, event_date, value, updated_at),
        1 if value.is_empty() => Record::tombstone(key, event_date, updated_at),
        _ => Err(corrupt("deleted")),
    }
}

/// A live row as a record, from its text columns (for the upgrade that
/// fills new typed columns).
pub(crate) fn stored_record(key: &str, date: &str, value: &str, instant: &str) -> Result<Record> {
    into_record((
        key.to_owned(),
        date.to_owned(),
        value.to_owned(),
        instant.to_owned(),
        0,
    ))
}

/// `day` in [`DATE_FORMAT`], by chrono's own writer of that form (which a
/// format string would parse again for every value).
pub(crate) fn format_date(day: NaiveDate) -> String {
    day.to_string()
}

/// `at` in [`INSTANT_FORMAT`], by chrono's own writer of that form.
pub(crate) fn format_instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

pub(crate) fn parse_instant(text: &str) -> Option<DateTime<Utc>> {
    NaiveDateTime::parse_from_str(text, INSTANT_FORMAT)
        .ok()
        .map(|t| t.and_utc())
}

/// A typed column's value as SQLite keeps it (see `sql::typed_column`).
pub(crate) fn sql_value(value: ColumnValue) -> Value {
    match value {
        ColumnValue::Text(s) | ColumnValue::Numeric(s) | ColumnValue::Json(s) => Value::Text(s),
        ColumnValue::Integer(n) => Value::Integer(n),
        ColumnValue::Double(x) => Value::Real(x),
        ColumnValue::Boolean(b) => Value::Integer(i64::from(b)),
        ColumnValue::Date(d) => Value::Text(format_date(d)),
        ColumnValue::Timestamp(t) => Value::Text(format_instant(t)),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_sort_like_time() {
        let early = NaiveDate::from_ymd_opt(999, 12, 31).unwrap();
        let late = NaiveDate::from_ymd_opt(1000, 1, 1).unwrap();
        assert_eq!(format_date(early), "0999-12-31");
        assert!(format_date(early) < format_date(late));
        let a = early
            .and_hms_micro_opt(23, 59, 59, 999_999)
            .unwrap()
            .and_utc();
        let b = late.and_hms_opt(0, 0, 0).unwrap().and_utc();
        assert_eq!(format_instant(a), "0999-12-31T23:59:59.999999Z");
        assert_eq!(format_instant(b).len(), 27);
        assert!(format_instant(a) < format_instant(b));
    }

    #[test]
    fn text_forms_are_the_formats_and_read_back() {
        let days = [(1, 1, 1), (999, 12, 31), (2024, 2, 29), (9999, 12, 31)];
        let times = [
            (0, 0, 0, 0),
            (9, 5, 7, 1),
            (23, 59, 59, 999_999),
            (12, 0, 0, 250_000),
        ];
        for (y, m, d) in days {
            let day = NaiveDate::from_ymd_opt(y, m, d).unwrap();
            assert_eq!(format_date(day), day.format(DATE_FORMAT).to_string());
            for (h, mi, s, us) in times {
                let at = day.and_hms_micro_opt(h, mi, s, us).unwrap().and_utc();
                let text = format_instant(at);
                assert_eq!(text, at.format(INSTANT_FORMAT).to_string());
                assert_eq!(parse_instant(&text), Some(at));
            }
        }
    }
}
