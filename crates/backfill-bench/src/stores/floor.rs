//! The floors, written the plainest way each engine offers: a raw bulk
//! insert (SQLite) or binary `COPY` (Postgres) into an empty table, and
//! the hand-rolled per-day upsert a user would write without this project.

use std::path::Path;

use backfill_core::Record;
use backfill_postgres::PostgresStore;
use backfill_sqlite::{DATE_FORMAT, INSTANT_FORMAT};
use futures_util::pin_mut;
use rusqlite::TransactionBehavior;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;
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

/// Sends `rows` through the binary `COPY … FROM STDIN` statement `sql`.
async fn copy_rows(
    client: &Client,
    sql: &str,
    rows: &[Record],
) -> Result<(), tokio_postgres::Error> {
    let sink = client.copy_in(sql).await?;
    let writer = BinaryCopyInWriter::new(
        sink,
        &[Type::TEXT, Type::DATE, Type::TEXT, Type::TIMESTAMPTZ],
    );
    pin_mut!(writer);
    for r in rows {
        let (date, at) = (r.event_date(), r.updated_at());
        writer
            .as_mut()
            .write(&[&r.key(), &date, &r.value(), &at])
            .await?;
    }
    writer.finish().await?;
    Ok(())
}
