//! The floors, written the plainest way each engine offers: a raw bulk
//! insert (SQLite), binary `COPY` (Postgres) or delta-rs appends (Delta)
//! into an empty table, and the hand-rolled per-day upsert a user would
//! write without this project; and the Delta log, read as any reader of
//! the table would.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use backfill_core::Record;
use backfill_postgres::PostgresStore;
use backfill_sqlite::{DATE_FORMAT, INSTANT_FORMAT};
use futures_util::{pin_mut, SinkExt as _};
use rusqlite::TransactionBehavior;
use tokio_postgres::types::private::BytesMut;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

/// The four columns every floor writes, in order.
const COLUMNS: &str = "key, event_date, value, updated_at";

pub(super) fn sqlite_bulk_insert(
    path: &Path,
    table: &str,
    rows: &[Record],
) -> rusqlite::Result<()> {
    let mut conn = sqlite_open(path)?;
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(&format!(
            r#"INSERT INTO "{table}" ({COLUMNS}) VALUES (?1, ?2, ?3, ?4)"#
        ))?;
        for r in rows {
            insert.execute(sqlite_params(r))?;
        }
    }
    tx.commit()
}

/// Each day in a `BEGIN IMMEDIATE` transaction of its own (what the store
/// takes), every record one `INSERT … ON CONFLICT (key) DO UPDATE … WHERE`
/// it is newer. Returns the rows inserted or updated.
pub(super) fn sqlite_upsert(
    path: &Path,
    table: &str,
    days: &[Vec<Record>],
) -> rusqlite::Result<u64> {
    let mut conn = sqlite_open(path)?;
    let sql = format!(
        r#"INSERT INTO "{table}" ({COLUMNS}) VALUES (?1, ?2, ?3, ?4)
           ON CONFLICT (key) DO UPDATE SET event_date = excluded.event_date,
               value = excluded.value, updated_at = excluded.updated_at
           WHERE excluded.updated_at > "{table}".updated_at"#
    );
    let mut written = 0;
    for day in days {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut upsert = tx.prepare_cached(&sql)?;
            for r in day {
                written += upsert.execute(sqlite_params(r))? as u64;
            }
        }
        tx.commit()?;
    }
    Ok(written)
}

/// A connection of its own, set up as the store sets up its own.
fn sqlite_open(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// A record as the SQLite table stores it.
fn sqlite_params(r: &Record) -> (&str, String, &str, String) {
    (
        r.key(),
        r.event_date().format(DATE_FORMAT).to_string(),
        r.value(),
        r.updated_at().format(INSTANT_FORMAT).to_string(),
    )
}

pub(super) async fn pg_copy(
    store: &PostgresStore,
    rows: &[Record],
) -> Result<(), tokio_postgres::Error> {
    let client = store.pool().get().await.expect("pool");
    let sql = format!(
        r#"COPY "{}"."{}" ({COLUMNS}) FROM STDIN (FORMAT binary)"#,
        store.schema(),
        store.table()
    );
    copy_rows(&client, &sql, rows).await
}

/// Each day in a transaction of its own, on one connection: binary `COPY`
/// into a temporary table dropped at commit, then one `INSERT … SELECT …
/// ON CONFLICT (key) DO UPDATE … WHERE` the row is newer. Returns the rows
/// inserted or updated.
pub(super) async fn pg_staged_upsert(
    store: &PostgresStore,
    days: &[&[Record]],
) -> Result<u64, tokio_postgres::Error> {
    let client = store.pool().get().await.expect("pool");
    let table = format!(r#""{}"."{}""#, store.schema(), store.table());
    let stage = r#"CREATE TEMPORARY TABLE bench_stage (
        key text COLLATE "C" NOT NULL, event_date date NOT NULL,
        value text COLLATE "C" NOT NULL, updated_at timestamptz NOT NULL
    ) ON COMMIT DROP"#;
    let copy = format!("COPY bench_stage ({COLUMNS}) FROM STDIN (FORMAT binary)");
    let upsert = format!(
        "INSERT INTO {table} AS t ({COLUMNS}) SELECT {COLUMNS} FROM bench_stage
         ON CONFLICT (key) DO UPDATE SET event_date = EXCLUDED.event_date,
             value = EXCLUDED.value, updated_at = EXCLUDED.updated_at
         WHERE t.updated_at < EXCLUDED.updated_at"
    );
    let mut written = 0;
    for day in days {
        client.batch_execute("BEGIN").await?;
        client.batch_execute(stage).await?;
        copy_rows(&client, &copy, day).await?;
        written += client.execute(upsert.as_str(), &[]).await?;
        client.batch_execute("COMMIT").await?;
    }
    Ok(written)
}

/// Sends `rows` through the binary `COPY … FROM STDIN` statement `sql`,
/// 64 KiB a message, as the store's own `COPY` sends them (the driver's
/// `BinaryCopyInWriter` sends every 4 KiB, which costs the client a
/// message, a wake-up of the connection's task and a write each).
async fn copy_rows(
    client: &Client,
    sql: &str,
    rows: &[Record],
) -> Result<(), tokio_postgres::Error> {
    const CHUNK: usize = 64 << 10;
    let types = [Type::TEXT, Type::DATE, Type::TEXT, Type::TIMESTAMPTZ];
    let sink = client.copy_in(sql).await?;
    pin_mut!(sink);
    let mut buf = BytesMut::with_capacity(CHUNK + (CHUNK >> 2));
    buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0");
    for r in rows {
        let (key, date, value, at) = (r.key(), r.event_date(), r.value(), r.updated_at());
        let cells: [&(dyn ToSql + Sync); 4] = [&key, &date, &value, &at];
        buf.extend_from_slice(&4i16.to_be_bytes());
        for (cell, ty) in cells.iter().zip(&types) {
            let start = buf.len();
            buf.extend_from_slice(&[0; 4]);
            cell.to_sql_checked(ty, &mut buf)
                .expect("the floor's rows encode");
            let len = i32::try_from(buf.len() - start - 4).expect("a cell under 2 GiB");
            buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
        }
        if buf.len() >= CHUNK {
            sink.as_mut().send(buf.split().freeze()).await?;
        }
    }
    buf.extend_from_slice(&(-1i16).to_be_bytes());
    sink.as_mut().send(buf.split().freeze()).await?;
    sink.finish().await?;
    Ok(())
}

/// delta-rs appending `rows` to the (empty) Delta table at `path`, one
/// commit per day (each run of one `event_date`), through its own
/// `RecordBatchWriter`, which partitions the batch by `event_date`: the
/// plainest write delta-rs offers without DataFusion, no conflict handling.
pub(super) async fn delta_append(path: &Path, rows: &[Record]) -> Result<(), String> {
    use deltalake::writer::{DeltaWriter, RecordBatchWriter};
    let url = deltalake::ensure_table_uri(path.display().to_string()).map_err(|e| e.to_string())?;
    let mut table = deltalake::open_table(url)
        .await
        .map_err(|e| e.to_string())?;
    for day in rows.chunk_by(|a, b| a.event_date() == b.event_date()) {
        let mut writer = RecordBatchWriter::for_table(&table).map_err(|e| e.to_string())?;
        writer
            .write(delta_batch(day)?)
            .await
            .map_err(|e| e.to_string())?;
        writer
            .flush_and_commit(&mut table)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `rows` as an Arrow batch of the table's five columns.
fn delta_batch(rows: &[Record]) -> Result<deltalake::arrow::array::RecordBatch, String> {
    use deltalake::arrow::array::{
        ArrayRef, BooleanArray, Date32Array, RecordBatch, StringArray, TimestampMicrosecondArray,
    };
    use deltalake::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("the epoch");
    let utc = Some("UTC".into());
    let schema = Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("event_date", DataType::Date32, false),
        Field::new("value", DataType::Utf8, false),
        Field::new(
            "updated_at",
            DataType::Timestamp(TimeUnit::Microsecond, utc.clone()),
            false,
        ),
        Field::new("deleted", DataType::Boolean, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(Record::key))),
        Arc::new(Date32Array::from_iter_values(
            rows.iter()
                .map(|r| (r.event_date() - epoch).num_days() as i32),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(Record::value),
        )),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                rows.iter().map(|r| r.updated_at().timestamp_micros()),
            )
            .with_timezone_opt(utc),
        ),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.is_deleted())),
        )),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).map_err(|e| e.to_string())
}

/// A local Delta table's log, read from its `_delta_log` JSON commits as
/// any reader would: its versions, and the files each commit added and
/// removed.
#[derive(Debug)]
pub(crate) struct DeltaLog {
    dir: PathBuf,
}

/// What one commit did to the table's files.
#[derive(Debug, Default)]
pub(crate) struct DeltaCommit {
    /// Each added file's path and rows (from its statistics), and whether
    /// it holds the day's ledger row only.
    pub(crate) added: Vec<(String, u64, bool)>,
    /// Each removed file's path.
    pub(crate) removed: Vec<String>,
}

impl DeltaLog {
    pub(crate) fn new(table: &Path) -> Self {
        Self {
            dir: table.join("_delta_log"),
        }
    }

    /// The table's latest version.
    pub(crate) fn version(&self) -> Result<u64, String> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| e.to_string())?;
        entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".json")?.parse::<u64>().ok()
            })
            .max()
            .ok_or_else(|| format!("no commit in {}", self.dir.display()))
    }

    /// What commit `version` added and removed.
    pub(crate) fn commit(&self, version: u64) -> Result<DeltaCommit, String> {
        let path = self.dir.join(format!("{version:020}.json"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut commit = DeltaCommit::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let action: serde_json::Value =
                serde_json::from_str(line).map_err(|e| e.to_string())?;
            if let Some(add) = action.get("add") {
                let stats: serde_json::Value = add["stats"]
                    .as_str()
                    .map(serde_json::from_str)
                    .transpose()
                    .map_err(|e| e.to_string())?
                    .unwrap_or_default();
                let rows = stats["numRecords"].as_u64().unwrap_or_default();
                let ledger = stats["minValues"]["key"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("\0backfill.ledger:"));
                let path = add["path"].as_str().unwrap_or_default().to_owned();
                commit.added.push((path, rows, ledger));
            } else if let Some(remove) = action.get("remove") {
                commit
                    .removed
                    .push(remove["path"].as_str().unwrap_or_default().to_owned());
            }
        }
        Ok(commit)
    }

    /// Rows of every data file any commit added, the ledger's files left
    /// out.
    pub(crate) fn record_rows_added(&self) -> Result<u64, String> {
        let mut rows = 0;
        for version in 0..=self.version()? {
            rows += self
                .commit(version)?
                .added
                .iter()
                .filter(|(_, _, ledger)| !ledger)
                .map(|(_, n, _)| n)
                .sum::<u64>();
        }
        Ok(rows)
    }
}
