//! Rows as the table keeps them: the Delta schema, records to and from Arrow
//! batches, the day's ledger row and its share of history.

use std::sync::Arc;
use std::time::Duration;

use backfill_core::columns::{Column, ColumnType, ColumnValue, Columns};
use backfill_core::history::Version;
use backfill_core::{
    Counts, DayFailure, Digest, LedgerEntry, Mode, Record, RunId, SyncedDay, Timing,
};
use chrono::{DateTime, NaiveDate, Utc};
use deltalake::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, BooleanBuilder, Date32Builder, Float64Builder,
    Int64Builder, RecordBatch, StringArray, StringBuilder, TimestampMicrosecondArray,
    TimestampMicrosecondBuilder,
};
use deltalake::arrow::compute::cast;
use deltalake::arrow::datatypes::{DataType as ArrowType, Field, Schema, SchemaRef, TimeUnit};
use deltalake::kernel::{DataType, StructField};
use serde::{Deserialize, Serialize};

use crate::error::{corrupt, Result};

/// The column every row is keyed by.
pub(crate) const KEY: &str = "key";
/// The partition column.
pub(crate) const EVENT_DATE: &str = "event_date";
/// The record's value, as the upstream sent it.
pub(crate) const VALUE: &str = "value";
/// The version's instant, microseconds, UTC.
pub(crate) const UPDATED_AT: &str = "updated_at";
/// The tombstone marker.
pub(crate) const DELETED: &str = "deleted";

/// The first bytes of a ledger row's key. A record's key never holds a NUL,
/// so no record can take a ledger row's place, and the ledger rows sort
/// before every record of their file (its statistics' minimum key tells
/// whether a file holds one).
pub(crate) const LEDGER_PREFIX: &str = "\0backfill.ledger:";

/// The first bytes of the key of a version history keeps in a day's
/// history rows; the version's own key follows. They sort after the
/// ledger row's (a file's smallest key still tells whether it holds one).
pub(crate) const VERSION_PREFIX: &str = "\0backfill.version:";

/// The key of a day's history row recording a listing's instant (its
/// `updated_at`).
pub(crate) const LISTING_KEY: &str = "\0backfill.listing:";

/// The table property saying that the table keeps history (`true`): once
/// set, every writer keeps it, whatever it was opened with.
pub(crate) const HISTORY_PROPERTY: &str = "backfill.history";

/// The table's own columns, which every table of this store has.
pub(crate) const OWN_COLUMNS: [&str; 5] = [KEY, EVENT_DATE, VALUE, UPDATED_AT, DELETED];

/// The table property recording each typed column's declared type, as
/// JSON (`[["status", "text"], …]`, in the table's order): `text`,
/// `numeric` and `json` are all Delta strings.
pub(crate) const COLUMNS_PROPERTY: &str = "backfill.columns";

/// The table's columns, as Delta declares them: its own, then the typed
/// columns (each nullable: a tombstone's are NULL).
pub(crate) fn delta_columns(typed: &Columns) -> Vec<StructField> {
    let mut fields = vec![
        StructField::new(KEY, DataType::STRING, false),
        StructField::new(EVENT_DATE, DataType::DATE, false),
        StructField::new(VALUE, DataType::STRING, false),
        StructField::new(UPDATED_AT, DataType::TIMESTAMP, false),
        StructField::new(DELETED, DataType::BOOLEAN, false),
    ];
    fields.extend(
        typed
            .iter()
            .map(|c| StructField::new(c.name(), delta_type(c.column_type()), true)),
    );
    fields
}

/// The Delta type a typed column is kept as.
pub(crate) fn delta_type(ty: ColumnType) -> DataType {
    match ty {
        // A number exactly as the JSON writes it: Delta's decimal holds
        // 38 digits at one fixed scale, which would change the number.
        ColumnType::Integer => DataType::LONG,
        ColumnType::Double => DataType::DOUBLE,
        ColumnType::Boolean => DataType::BOOLEAN,
        ColumnType::Date => DataType::DATE,
        ColumnType::Timestamp => DataType::TIMESTAMP,
        // Text, numeric, JSON (and a type of a later release) are strings.
        _ => DataType::STRING,
    }
}

/// The typed columns' declared types as [`COLUMNS_PROPERTY`] records them.
pub(crate) fn columns_property(typed: &Columns) -> String {
    let pairs: Vec<[String; 2]> = typed
        .iter()
        .map(|c| [c.name().to_owned(), c.column_type().to_string()])
        .collect();
    serde_json::to_string(&pairs).expect("strings serialize")
}

/// The typed columns [`COLUMNS_PROPERTY`] records, in order.
pub(crate) fn recorded_columns(property: Option<&str>) -> Result<Vec<(String, ColumnType)>> {
    let Some(text) = property else {
        return Ok(Vec::new());
    };
    let pairs: Vec<[String; 2]> = serde_json::from_str(text)
        .map_err(|e| corrupt(format!("the table property {COLUMNS_PROPERTY}: {e}")))?;
    pairs
        .into_iter()
        .map(|[name, ty]| Ok((name, ty.parse::<ColumnType>()?)))
        .collect()
}

/// The Arrow type of a typed column's values in a data file.
fn arrow_type(ty: ColumnType) -> ArrowType {
    match ty {
        ColumnType::Integer => ArrowType::Int64,
        ColumnType::Double => ArrowType::Float64,
        ColumnType::Boolean => ArrowType::Boolean,
        ColumnType::Date => ArrowType::Date32,
        ColumnType::Timestamp => ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        _ => ArrowType::Utf8,
    }
}

/// The columns of a data file: the table's, less the partition column
/// (its value is in the file's path and log entry).
pub(crate) fn file_schema(typed: &Columns) -> SchemaRef {
    let mut fields = vec![
        Field::new(KEY, ArrowType::Utf8, false),
        Field::new(VALUE, ArrowType::Utf8, false),
        Field::new(
            UPDATED_AT,
            ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new(DELETED, ArrowType::Boolean, false),
    ];
    fields.extend(
        typed
            .iter()
            .map(|c| Field::new(c.name(), arrow_type(c.column_type()), true)),
    );
    Arc::new(Schema::new(fields))
}

/// One typed column's values, as they are built.
enum Values {
    Text(StringBuilder),
    Integer(Int64Builder),
    Double(Float64Builder),
    Boolean(BooleanBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
}

impl Values {
    fn new(ty: ColumnType) -> Self {
        match ty {
            ColumnType::Integer => Values::Integer(Int64Builder::new()),
            ColumnType::Double => Values::Double(Float64Builder::new()),
            ColumnType::Boolean => Values::Boolean(BooleanBuilder::new()),
            ColumnType::Date => Values::Date(Date32Builder::new()),
            ColumnType::Timestamp => Values::Timestamp(TimestampMicrosecondBuilder::new()),
            _ => Values::Text(StringBuilder::new()),
        }
    }

    fn push(&mut self, value: ColumnValue) -> Result<()> {
        match (self, value) {
            (Values::Text(b), ColumnValue::Null) => b.append_null(),
            (Values::Integer(b), ColumnValue::Null) => b.append_null(),
            (Values::Double(b), ColumnValue::Null) => b.append_null(),
            (Values::Boolean(b), ColumnValue::Null) => b.append_null(),
            (Values::Date(b), ColumnValue::Null) => b.append_null(),
            (Values::Timestamp(b), ColumnValue::Null) => b.append_null(),
            (
                Values::Text(b),
                ColumnValue::Text(s) | ColumnValue::Numeric(s) | ColumnValue::Json(s),
            ) => b.append_value(s),
            (Values::Integer(b), ColumnValue::Integer(n)) => b.append_value(n),
            (Values::Double(b), ColumnValue::Double(x)) => b.append_value(x),
            (Values::Boolean(b), ColumnValue::Boolean(v)) => b.append_value(v),
            (Values::Date(b), ColumnValue::Date(d)) => b.append_value(epoch_days(d)),
            (Values::Timestamp(b), ColumnValue::Timestamp(t)) => {
                b.append_value(t.timestamp_micros())
            }
            (_, other) => {
                return Err(corrupt(format!(
                    "a column value of another type: {other:?}"
                )))
            }
        }
        Ok(())
    }

    fn finish(self) -> ArrayRef {
        match self {
            Values::Text(mut b) => Arc::new(b.finish()),
            Values::Integer(mut b) => Arc::new(b.finish()),
            Values::Double(mut b) => Arc::new(b.finish()),
            Values::Boolean(mut b) => Arc::new(b.finish()),
            Values::Date(mut b) => Arc::new(b.finish()),
            Values::Timestamp(mut b) => Arc::new(b.finish().with_timezone("UTC")),
        }
    }
}

/// A typed column's values for `records` (after `ledger` rows' NULLs), as
/// [`Columns::extract`] reads them.
fn typed_arrays<'a>(
    typed: &Columns,
    records: impl Iterator<Item = &'a Record>,
    ledger_rows: usize,
) -> Result<Vec<ArrayRef>> {
    let mut builders: Vec<Values> = typed.iter().map(|c| Values::new(c.column_type())).collect();
    for builder in &mut builders {
        for _ in 0..ledger_rows {
            builder.push(ColumnValue::Null)?;
        }
    }
    let mut values = Vec::with_capacity(typed.len());
    for record in records {
        values.clear();
        typed.extract_into(record, &mut values)?;
        for (builder, value) in builders.iter_mut().zip(values.drain(..)) {
            builder.push(value)?;
        }
    }
    Ok(builders.into_iter().map(Values::finish).collect())
}

/// The declared column of `name` in `typed`.
pub(crate) fn declared<'a>(typed: &'a Columns, name: &str) -> Option<&'a Column> {
    typed.iter().find(|c| c.name() == name)
}

/// Days since the Unix epoch, as Delta's `date` holds them.
pub(crate) fn epoch_days(day: NaiveDate) -> i32 {
    (day - NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch")).num_days() as i32
}

/// The ledger row's key of `day`.
pub(crate) fn ledger_key(day: NaiveDate) -> String {
    format!("{LEDGER_PREFIX}{day}")
}

/// One row of a file, as read: a record, the day's ledger entry, or a
/// row of the day's history.
#[derive(Debug, Clone)]
pub(crate) enum Row {
    Record(Record),
    Ledger(LedgerEntry),
    /// A version history keeps that the day's records do not hold.
    Version(Version),
    /// The instant of a listing of the day.
    Listing(DateTime<Utc>),
}

impl Row {
    /// About how many bytes the row takes in memory.
    pub(crate) fn size(&self) -> usize {
        match self {
            Row::Record(record) => Row::record_size(record),
            Row::Ledger(_) => 512,
            Row::Version(version) => Row::record_size(&version.record) + 16,
            Row::Listing(_) => 16,
        }
    }

    /// About how many bytes `record` takes in memory as a row.
    pub(crate) fn record_size(record: &Record) -> usize {
        record.key().len() + record.value().len() + 64
    }
}

/// Refuses, before anything is written, a record that a typed column does
/// not fit (the record rules are checked by the reference's decisions,
/// which also come before any write).
pub(crate) fn check_typed(records: &[Record], typed: &Columns) -> Result<()> {
    if !typed.is_empty() {
        let mut values = Vec::with_capacity(typed.len());
        for record in records {
            values.clear();
            typed.extract_into(record, &mut values)?;
        }
    }
    Ok(())
}

/// The rows of one batch read from a data file of partition `day`.
pub(crate) fn batch_rows(batch: &RecordBatch, day: NaiveDate, rows: &mut Vec<Row>) -> Result<()> {
    let keys = text_column(batch, KEY)?;
    let values = text_column(batch, VALUE)?;
    let instants = column(batch, UPDATED_AT)?;
    let instants = cast(
        &instants,
        &ArrowType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
    )
    .map_err(corrupt)?;
    let instants = instants
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .ok_or_else(|| corrupt("updated_at is not a timestamp"))?;
    let deleted = column(batch, DELETED)?;
    let deleted = deleted
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| corrupt("deleted is not a boolean"))?;
    for i in 0..batch.num_rows() {
        if keys.is_null(i) || values.is_null(i) || instants.is_null(i) || deleted.is_null(i) {
            return Err(corrupt(format!("a null in row {i} of day {day}")));
        }
        let key = keys.value(i);
        if let Some(rest) = key.strip_prefix(LEDGER_PREFIX) {
            if rest == day.to_string() {
                rows.push(Row::Ledger(LedgerRow::decode(day, values.value(i))?));
                continue;
            }
            return Err(corrupt(format!("the ledger row {rest:?} under day {day}")));
        }
        let at = DateTime::<Utc>::from_timestamp_micros(instants.value(i))
            .ok_or_else(|| corrupt(format!("updated_at of {key:?} out of range")))?;
        if key == LISTING_KEY {
            rows.push(Row::Listing(at));
            continue;
        }
        if let Some(key) = key.strip_prefix(VERSION_PREFIX) {
            rows.push(Row::Version(VersionRow::decode(
                key,
                day,
                at,
                values.value(i),
            )?));
            continue;
        }
        let record = if deleted.value(i) {
            Record::tombstone(key, day, at)
        } else {
            Record::new(key, day, values.value(i), at)
        };
        rows.push(Row::Record(record.map_err(corrupt)?));
    }
    Ok(())
}

fn column(batch: &RecordBatch, name: &str) -> Result<ArrayRef> {
    batch
        .column_by_name(name)
        .cloned()
        .ok_or_else(|| corrupt(format!("a data file without the column {name:?}")))
}

/// A text column as `Utf8`, whichever string type the file was written
/// with (another engine may have written `LargeUtf8` or views).
fn text_column(batch: &RecordBatch, name: &str) -> Result<StringArray> {
    let array = column(batch, name)?;
    let array = cast(&array, &ArrowType::Utf8).map_err(corrupt)?;
    Ok(array.as_string::<i32>().clone())
}

/// A batch of one partition's rows, in the order given, without the
/// partition column.
pub(crate) fn records_batch<'a>(
    records: impl Iterator<Item = &'a Record> + Clone,
    ledger: Option<&LedgerEntry>,
    typed: &Columns,
) -> Result<RecordBatch> {
    let typed_columns = if typed.is_empty() {
        Vec::new()
    } else {
        typed_arrays(typed, records.clone(), usize::from(ledger.is_some()))?
    };
    // The ledger row first, then the records: each column made straight
    // from the rows' own strings, not a copy of each.
    let ledger = match ledger {
        Some(entry) => Some((
            ledger_key(entry.day),
            LedgerRow::encode(entry)?,
            LedgerRow::instant(entry).timestamp_micros(),
        )),
        None => None,
    };
    let rows = records.clone().count() + usize::from(ledger.is_some());
    let bytes = |text: fn(&Record) -> &str| records.clone().map(|r| text(r).len()).sum::<usize>();
    let (ledger_key_len, ledger_value_len) = ledger
        .as_ref()
        .map_or((0, 0), |(key, value, _)| (key.len(), value.len()));
    let mut keys = StringBuilder::with_capacity(rows, bytes(Record::key) + ledger_key_len);
    let mut values = StringBuilder::with_capacity(rows, bytes(Record::value) + ledger_value_len);
    let mut instants = Vec::with_capacity(rows);
    let mut deleted = BooleanBuilder::with_capacity(rows);
    if let Some((key, value, at)) = ledger {
        keys.append_value(key);
        values.append_value(value);
        instants.push(at);
        deleted.append_value(true);
    }
    for record in records {
        keys.append_value(record.key());
        values.append_value(record.value());
        instants.push(record.updated_at().timestamp_micros());
        deleted.append_value(record.is_deleted());
    }
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(keys.finish()),
        Arc::new(values.finish()),
        Arc::new(TimestampMicrosecondArray::from(instants).with_timezone("UTC")),
        Arc::new(deleted.finish()),
    ];
    columns.extend(typed_columns);
    RecordBatch::try_new(file_schema(typed), columns).map_err(corrupt)
}

/// A day's share of history: the versions of its `event_date` that its
/// records do not hold as they are (replaced, stale, buried, closed by a
/// listing, purged), and the instants of its listings. With the day's
/// records, which are each a version unless a version of the same key and
/// instant here says otherwise, it is all of the day's history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DayHistory {
    /// Ordered by key, then `updated_at`.
    pub(crate) versions: Vec<Version>,
    /// Ordered, each once.
    pub(crate) listings: Vec<DateTime<Utc>>,
}

impl DayHistory {
    pub(crate) fn is_empty(&self) -> bool {
        self.versions.is_empty() && self.listings.is_empty()
    }

    /// In the order its fields say, whatever order its rows were read in
    /// (another engine may have compacted the file).
    pub(crate) fn normalize(&mut self) {
        self.versions.sort_by(|a, b| {
            (a.record.key(), a.record.updated_at()).cmp(&(b.record.key(), b.record.updated_at()))
        });
        self.listings.sort_unstable();
        self.listings.dedup();
    }
}

/// A day's history rows as a batch: each listing, then each version, all
/// with `deleted = true` (a reader's live-rows filter leaves them out) and
/// NULL typed columns.
pub(crate) fn history_batch(history: &DayHistory, typed: &Columns) -> Result<RecordBatch> {
    let rows = history.listings.len() + history.versions.len();
    let mut keys = StringBuilder::with_capacity(rows, rows * 48);
    let mut values = StringBuilder::with_capacity(rows, rows * 64);
    let mut instants = Vec::with_capacity(rows);
    for at in &history.listings {
        keys.append_value(LISTING_KEY);
        values.append_value("");
        instants.push(at.timestamp_micros());
    }
    for version in &history.versions {
        keys.append_value(format!("{VERSION_PREFIX}{}", version.record.key()));
        values.append_value(VersionRow::encode(version)?);
        instants.push(version.record.updated_at().timestamp_micros());
    }
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(keys.finish()),
        Arc::new(values.finish()),
        Arc::new(TimestampMicrosecondArray::from(instants).with_timezone("UTC")),
        Arc::new(BooleanArray::from(vec![true; rows])),
    ];
    columns.extend(typed_arrays(typed, std::iter::empty(), rows)?);
    RecordBatch::try_new(file_schema(typed), columns).map_err(corrupt)
}

/// A version's `value` in its history row: JSON, readable with any
/// engine's JSON functions (`from_json`, `json_extract`).
#[derive(Debug, Serialize, Deserialize)]
struct VersionRow<'a> {
    /// Whether the version is a tombstone.
    deleted: bool,
    /// The version's value as delivered (empty for a tombstone).
    #[serde(borrow)]
    value: std::borrow::Cow<'a, str>,
    /// The first listing of its day that lacked it.
    #[serde(default)]
    absent_from: Option<DateTime<Utc>>,
}

impl VersionRow<'_> {
    fn encode(version: &Version) -> Result<String> {
        let row = VersionRow {
            deleted: version.record.is_deleted(),
            value: version.record.value().into(),
            absent_from: version.absent_from,
        };
        serde_json::to_string(&row).map_err(corrupt)
    }

    fn decode(key: &str, day: NaiveDate, at: DateTime<Utc>, text: &str) -> Result<Version> {
        let row: VersionRow<'_> = serde_json::from_str(text)
            .map_err(|e| corrupt(format!("the history row of {key:?} in {day}: {e}")))?;
        let record = match row.deleted {
            true => Record::tombstone(key, day, at),
            false => Record::new(key, day, row.value.into_owned(), at),
        };
        Ok(Version {
            record: record.map_err(corrupt)?,
            absent_from: row.absent_from,
        })
    }
}

/// The day's ledger entry as the `value` of its ledger row: JSON, readable
/// with any engine's JSON functions.
#[derive(Debug, Serialize, Deserialize)]
struct LedgerRow {
    #[serde(default)]
    synced: Option<Synced>,
    #[serde(default)]
    failure: Option<Failure>,
    #[serde(default)]
    listing_watermark: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    accepted: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Synced {
    at: DateTime<Utc>,
    run_id: Option<String>,
    mode: String,
    as_of: Option<DateTime<Utc>>,
    digest: String,
    counts: CountsRow,
    /// The apply's [`Timing`](backfill_core::Timing), in milliseconds: absent
    /// from rows of earlier releases, which ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fetch_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    write_ms: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CountsRow {
    inserted: u64,
    updated: u64,
    unchanged: u64,
    stale: u64,
    deleted: u64,
    unlisted: u64,
    skipped: u64,
    collapsed: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Failure {
    at: DateTime<Utc>,
    run_id: Option<String>,
    attempts: u32,
    error: String,
}

/// Whole milliseconds, as the ledger row keeps a duration.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl LedgerRow {
    fn encode(entry: &LedgerEntry) -> Result<String> {
        let row = LedgerRow {
            synced: entry.synced.as_ref().map(|s| Synced {
                at: s.at,
                run_id: s.run_id.as_ref().map(|id| id.as_str().to_owned()),
                mode: s.mode.as_str().to_owned(),
                as_of: s.as_of,
                digest: s.digest.to_string(),
                counts: CountsRow {
                    inserted: s.counts.inserted,
                    updated: s.counts.updated,
                    unchanged: s.counts.unchanged,
                    stale: s.counts.stale,
                    deleted: s.counts.deleted,
                    unlisted: s.counts.unlisted,
                    skipped: s.counts.skipped,
                    collapsed: s.counts.collapsed,
                },
                fetch_ms: s.timing.map(|t| millis(t.fetch)),
                write_ms: s.timing.map(|t| millis(t.write)),
            }),
            failure: entry.failure.as_ref().map(|f| Failure {
                at: f.at,
                run_id: f.run_id.as_ref().map(|id| id.as_str().to_owned()),
                attempts: f.attempts,
                error: f.error.clone(),
            }),
            listing_watermark: entry.listing_watermark,
            accepted: entry.accepted,
        };
        serde_json::to_string(&row).map_err(corrupt)
    }

    /// The ledger row's `updated_at`: its latest instant.
    fn instant(entry: &LedgerEntry) -> DateTime<Utc> {
        [
            entry.synced.as_ref().map(|s| s.at),
            entry.failure.as_ref().map(|f| f.at),
            entry.listing_watermark,
            entry.accepted,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(DateTime::UNIX_EPOCH)
    }

    fn decode(day: NaiveDate, text: &str) -> Result<LedgerEntry> {
        let row: LedgerRow = serde_json::from_str(text)
            .map_err(|e| corrupt(format!("the ledger row of {day}: {e}")))?;
        let mut entry = LedgerEntry::new(day);
        entry.listing_watermark = row.listing_watermark;
        entry.accepted = row.accepted;
        if let Some(s) = row.synced {
            let mode: Mode = s.mode.parse().map_err(corrupt)?;
            let digest = Digest::from_hex(&s.digest)
                .ok_or_else(|| corrupt(format!("the digest of {day}: {:?}", s.digest)))?;
            let mut counts = Counts::default();
            counts.inserted = s.counts.inserted;
            counts.updated = s.counts.updated;
            counts.unchanged = s.counts.unchanged;
            counts.stale = s.counts.stale;
            counts.deleted = s.counts.deleted;
            counts.unlisted = s.counts.unlisted;
            counts.skipped = s.counts.skipped;
            counts.collapsed = s.counts.collapsed;
            let timing = s.fetch_ms.zip(s.write_ms).map(|(fetch, write)| Timing {
                fetch: Duration::from_millis(fetch),
                write: Duration::from_millis(write),
            });
            entry.synced = Some(
                SyncedDay::new(
                    s.at,
                    s.run_id.map(RunId::from),
                    mode,
                    s.as_of,
                    digest,
                    counts,
                )
                .with_timing(timing),
            );
        }
        if let Some(f) = row.failure {
            entry.failure = Some(DayFailure::new(
                f.at,
                f.run_id.map(RunId::from),
                f.attempts,
                &f.error,
            ));
        }
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_entry_reads_back_as_written() {
        let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
        let at = DateTime::from_timestamp_micros(1_772_000_000_123_456).unwrap();
        let mut counts = Counts::default();
        counts.inserted = 3;
        counts.collapsed = 1;
        let mut entry = LedgerEntry::new(day);
        entry.synced = Some(
            SyncedDay::new(
                at,
                Some(RunId::from("run-1")),
                Mode::Replace,
                Some(at),
                Digest::from_bytes([7; 16]),
                counts,
            )
            .with_timing(Some(Timing {
                fetch: Duration::from_millis(1200),
                write: Duration::from_millis(35),
            })),
        );
        entry.failure = Some(DayFailure::new(at, None, 2, "upstream 503"));
        entry.listing_watermark = Some(at);
        let text = LedgerRow::encode(&entry).unwrap();
        let back = LedgerRow::decode(day, &text).unwrap();
        assert_eq!(back, entry);
        // Not compared by `==`: a measurement.
        let timing = |e: &LedgerEntry| e.synced.as_ref().unwrap().timing;
        assert_eq!(timing(&back), timing(&entry));
    }

    #[test]
    fn history_rows_read_back_as_written_and_are_tombstones_to_readers() {
        let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
        let at =
            |micros: i64| DateTime::from_timestamp_micros(1_772_000_000_000_000 + micros).unwrap();
        let history = DayHistory {
            versions: vec![
                Version {
                    record: Record::new("a", day, r#"{"s":"quote \" and \\","n":1e400}"#, at(1))
                        .unwrap(),
                    absent_from: Some(at(9)),
                },
                Version {
                    record: Record::tombstone("a", day, at(5)).unwrap(),
                    absent_from: None,
                },
                Version {
                    record: Record::new("b:ü", day, "plain text", at(2)).unwrap(),
                    absent_from: None,
                },
            ],
            listings: vec![at(9), at(20)],
        };
        let batch = history_batch(&history, &Columns::default()).unwrap();
        let deleted = batch
            .column_by_name(DELETED)
            .unwrap()
            .as_any()
            .downcast_ref::<BooleanArray>()
            .unwrap()
            .clone();
        assert!(deleted.iter().all(|d| d == Some(true)));
        let mut rows = Vec::new();
        batch_rows(&batch, day, &mut rows).unwrap();
        let mut read = DayHistory::default();
        for row in rows {
            match row {
                Row::Version(v) => read.versions.push(v),
                Row::Listing(at) => read.listings.push(at),
                other => panic!("{other:?}"),
            }
        }
        read.normalize();
        assert_eq!(read, history);
    }
}
