//! The stores under measurement, their floors (raw bulk insert, COPY,
//! delta-rs appends, a hand-rolled upsert; see `floor.rs`) and the
//! store-side counters (rows written, WAL, table versions).

mod floor;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use backfill_core::columns::Column;
use backfill_core::{MemoryStore, Record, Store};
use backfill_delta::DeltaStore;
use backfill_postgres::PostgresStore;
use backfill_sqlite::SqliteStore;
use backfill_testkit as pg_support;

pub(crate) use floor::DeltaLog;
use floor::{delta_append, pg_copy, pg_staged_upsert, sqlite_bulk_insert, sqlite_upsert};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Memory,
    Sqlite,
    Postgres,
    Delta,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Sqlite => "sqlite",
            Kind::Postgres => "postgres",
            Kind::Delta => "delta",
        }
    }

    /// What the floor is for this store.
    pub(crate) fn floor(self) -> &'static str {
        match self {
            Kind::Memory => "btreemap_insert",
            Kind::Sqlite => "raw_bulk_insert",
            Kind::Postgres => "binary_copy",
            Kind::Delta => "delta_append",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "memory" => Ok(Kind::Memory),
            "sqlite" => Ok(Kind::Sqlite),
            "postgres" => Ok(Kind::Postgres),
            "delta" => Ok(Kind::Delta),
            other => Err(format!(
                "unknown store {other:?} (memory, sqlite, postgres, delta)"
            )),
        }
    }
}

/// Makes fresh, empty tables of one kind of store.
#[derive(Debug)]
pub(crate) struct Env {
    kind: Kind,
    dir: tempfile::TempDir,
    pg_url: Option<String>,
    made: u32,
}

impl Env {
    pub(crate) async fn new(kind: Kind) -> Result<Self, String> {
        let pg_url = if kind == Kind::Postgres {
            pg_support::DURABLE.store(true, std::sync::atomic::Ordering::SeqCst);
            Some(
                pg_support::url()
                    .await
                    .ok_or("no Postgres: set BACKFILL_PG_URL or start Docker")?,
            )
        } else {
            None
        };
        Ok(Self {
            kind,
            dir: tempfile::tempdir().map_err(|e| e.to_string())?,
            pg_url,
            made: 0,
        })
    }

    /// A fresh, empty store; `pool` connections for Postgres.
    pub(crate) async fn fresh(&mut self, pool: usize) -> Result<Target, String> {
        self.fresh_with(pool, Vec::new()).await
    }

    /// A fresh, empty table with typed `columns`.
    pub(crate) async fn fresh_with(
        &mut self,
        pool: usize,
        columns: Vec<Column>,
    ) -> Result<Target, String> {
        self.fresh_table(pool, columns, false).await
    }

    /// A fresh, empty table that keeps history.
    pub(crate) async fn fresh_with_history(&mut self, pool: usize) -> Result<Target, String> {
        self.fresh_table(pool, Vec::new(), true).await
    }

    async fn fresh_table(
        &mut self,
        pool: usize,
        columns: Vec<Column>,
        history: bool,
    ) -> Result<Target, String> {
        self.made += 1;
        let n = self.made;
        Ok(match self.kind {
            Kind::Memory => Target::Memory(MemoryStore::new()),
            Kind::Sqlite => {
                let path = self.dir.path().join(format!("bench-{n}.db"));
                let store = SqliteStore::builder(&path)
                    .columns(columns)
                    .history(history)
                    .open()
                    .await
                    .map_err(|e| e.to_string())?;
                Target::Sqlite { store, path }
            }
            Kind::Postgres => {
                let url = self.pg_url.clone().expect("postgres url");
                let store = PostgresStore::builder()
                    .schema(format!("bench_{}_{n}", std::process::id()))
                    .pool_size(pool)
                    .columns(columns)
                    .history(history)
                    .connect(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                Target::Postgres(store)
            }
            Kind::Delta => {
                let path = self.dir.path().join(format!("bench-{n}"));
                let store = DeltaStore::builder(path.display().to_string())
                    .columns(columns)
                    .history(history)
                    .open()
                    .await
                    .map_err(|e| e.to_string())?;
                Target::Delta {
                    store: Box::new(store),
                    path,
                }
            }
        })
    }
}

impl Env {
    /// Drops every Postgres schema this run made (a server given by
    /// `BACKFILL_PG_URL` outlives the run; a `--large` run leaves gigabytes
    /// behind otherwise). SQLite's files go with the temporary directory.
    pub(crate) async fn drop_schemas(&self) -> Result<(), String> {
        let Some(url) = &self.pg_url else {
            return Ok(());
        };
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        for n in 1..=self.made {
            let schema = format!("bench_{}_{n}", std::process::id());
            client
                .batch_execute(&format!(r#"DROP SCHEMA IF EXISTS "{schema}" CASCADE"#))
                .await
                .map_err(|e| format!("dropping {schema}: {e}"))?;
        }
        Ok(())
    }

    /// Leaves the server as a timed run should find it: `done`'s table
    /// dropped, if given (its pages and its autovacuum go with it), then,
    /// on Postgres, a `CHECKPOINT`, so that no timed run writes out an
    /// earlier run's pages or starts the checkpoint they would bring. A
    /// role that may not checkpoint skips that step.
    pub(crate) async fn settle(&self, done: Option<Target>) -> Result<(), String> {
        let Some(url) = &self.pg_url else {
            drop(done);
            return Ok(());
        };
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        if let Some(Target::Postgres(store)) = done {
            let schema = store.schema().to_owned();
            drop(store);
            client
                .batch_execute(&format!(r#"DROP SCHEMA IF EXISTS "{schema}" CASCADE"#))
                .await
                .map_err(|e| format!("dropping {schema}: {e}"))?;
        }
        match client.batch_execute("CHECKPOINT").await {
            Err(e)
                if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) =>
            {
                Ok(())
            }
            other => other.map_err(|e| format!("CHECKPOINT: {e}")),
        }
    }

    /// Where a child process finds `target`: `sqlite <path>`, `delta
    /// <path>` or `postgres <schema> <url>` (`None` for the memory store).
    pub(crate) fn locate(&self, target: &Target) -> Option<Vec<String>> {
        match target {
            Target::Memory(_) => None,
            Target::Sqlite { path, .. } => Some(vec!["sqlite".into(), path.display().to_string()]),
            Target::Delta { path, .. } => Some(vec!["delta".into(), path.display().to_string()]),
            Target::Postgres(store) => Some(vec![
                "postgres".into(),
                store.schema().to_owned(),
                self.pg_url.clone().expect("postgres url"),
            ]),
        }
    }
}

/// Opens, in a child process, the store [`Env::locate`] described.
pub(crate) async fn open_located(args: &[String]) -> Result<Box<dyn Store>, String> {
    match args {
        [kind, path] if kind == "sqlite" => Ok(Box::new(
            SqliteStore::open(path).await.map_err(|e| e.to_string())?,
        )),
        [kind, path] if kind == "delta" => Ok(Box::new(
            DeltaStore::open(path).await.map_err(|e| e.to_string())?,
        )),
        [kind, schema, url] if kind == "postgres" => Ok(Box::new(
            PostgresStore::builder()
                .schema(schema.as_str())
                .connect(url)
                .await
                .map_err(|e| e.to_string())?,
        )),
        other => Err(format!("no store at {other:?}")),
    }
}

#[derive(Debug)]
pub(crate) enum Target {
    Memory(MemoryStore),
    Sqlite {
        store: SqliteStore,
        path: PathBuf,
    },
    Postgres(PostgresStore),
    Delta {
        store: Box<DeltaStore>,
        path: PathBuf,
    },
}

impl Target {
    pub(crate) fn store(&self) -> &dyn Store {
        match self {
            Target::Memory(s) => s,
            Target::Sqlite { store, .. } => store,
            Target::Postgres(s) => s,
            Target::Delta { store, .. } => store.as_ref(),
        }
    }

    /// The Delta table's log, for its versions and the files each commit
    /// added and removed (`None` for the other stores).
    pub(crate) fn delta_log(&self) -> Option<DeltaLog> {
        match self {
            Target::Delta { path, .. } => Some(DeltaLog::new(path)),
            _ => None,
        }
    }

    /// The floor with `streams` writers: for Postgres, `rows` cut into
    /// `streams` consecutive shares (whole days, when `rows` is in day
    /// order and its days divide evenly), each sent by its own binary
    /// `COPY` on its own connection, all at once — what a job with that
    /// many days in flight is measured against, so that a ratio never
    /// compares several connections with one. The other engines have one
    /// writer: one stream.
    pub(crate) async fn bulk_load_streams(
        &self,
        rows: &[Record],
        streams: usize,
    ) -> Result<(), String> {
        let Target::Postgres(store) = self else {
            return self.bulk_load(rows).await;
        };
        let streams = streams.max(1);
        let share = rows.len().div_ceil(streams).max(1);
        let copies = rows.chunks(share).map(|part| pg_copy(store, part));
        for result in futures_util::future::join_all(copies).await {
            result.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The floor: writes `rows` into this (empty) table the fastest plain
    /// way its engine offers — no conflict handling, no counting. On Delta,
    /// delta-rs appending each day of `rows` (runs of one `event_date`) in
    /// a commit of its own.
    pub(crate) async fn bulk_load(&self, rows: &[Record]) -> Result<(), String> {
        match self {
            Target::Memory(_) => {
                let mut map = std::collections::BTreeMap::new();
                for r in rows {
                    map.insert(r.key().to_owned(), r.clone());
                }
                std::hint::black_box(map);
                Ok(())
            }
            Target::Sqlite { store, path } => {
                let (path, table) = (path.clone(), store.table().to_owned());
                let rows = rows.to_vec();
                tokio::task::spawn_blocking(move || sqlite_bulk_insert(&path, &table, &rows))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            }
            Target::Postgres(store) => pg_copy(store, rows).await.map_err(|e| e.to_string()),
            Target::Delta { path, .. } => delta_append(path, rows).await,
        }
    }

    /// The hand-rolled pipeline a user would write without this project:
    /// each of `days` in a transaction of its own, one after the other —
    /// Postgres: binary `COPY` into a temporary table, then `INSERT …
    /// SELECT … ON CONFLICT (key) DO UPDATE … WHERE` the row is newer;
    /// SQLite: that `INSERT … ON CONFLICT` row by row. Returns the rows it
    /// inserted or updated. The memory store has none.
    pub(crate) async fn upsert_by_hand(&self, days: &[&[Record]]) -> Result<u64, String> {
        match self {
            Target::Memory(_) => Err("the memory store has no hand-rolled upsert".into()),
            Target::Delta { .. } => Err(
                "the Delta store's hand-rolled merge is measured from Python \
                 (crates/backfill-python/bench/python_vs_delta.py)"
                    .into(),
            ),
            Target::Sqlite { store, path } => {
                let (path, table) = (path.clone(), store.table().to_owned());
                let days: Vec<Vec<Record>> = days.iter().map(|d| d.to_vec()).collect();
                tokio::task::spawn_blocking(move || sqlite_upsert(&path, &table, &days))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            }
            Target::Postgres(store) => pg_staged_upsert(store, days)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// Rows inserted, updated or deleted in this table so far, as the
    /// engine counts them (`None` for the memory store): on Postgres, the
    /// records table's tuples and history's when it keeps it. On Delta, the rows
    /// of every data file the log ever added, the ledger's own files left
    /// out: a rewritten day counts each of its rows again.
    pub(crate) async fn rows_written(&self) -> Result<Option<u64>, String> {
        match self {
            Target::Memory(_) => Ok(None),
            Target::Delta { path, .. } => DeltaLog::new(path).record_rows_added().map(Some),
            Target::Sqlite { store, .. } => store
                .total_changes()
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
            Target::Postgres(store) => pg_tuples_written(store)
                .await
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }

    /// The rows a re-fetched day of `day_rows` records, `changed` of them
    /// newer, writes into a table keeping history (each changed record,
    /// and the version it replaced in history), and what `rows_written`
    /// counts, for a detail line.
    pub(crate) fn lookback_writes_with_history(
        &self,
        changed: u64,
        day_rows: u64,
    ) -> (u64, &'static str) {
        match self {
            Target::Sqlite { .. } => (
                2 * changed,
                "rows written: SQLite's changes in every table, the ledger's left out",
            ),
            Target::Postgres(_) => (
                2 * changed,
                "rows written: tuples of the records table and of history's tables",
            ),
            Target::Delta { .. } => (
                day_rows + changed,
                "rows written: rows of the files added, the ledger's left out; the day's \
                 records file is rewritten whole, its history file holds the replaced versions",
            ),
            Target::Memory(_) => (0, "rows written: not counted"),
        }
    }

    /// The server's WAL position in bytes (Postgres only).
    pub(crate) async fn wal_lsn(&self) -> Result<Option<u64>, String> {
        let Target::Postgres(store) = self else {
            return Ok(None);
        };
        let client = store.pool().get().await.map_err(|e| e.to_string())?;
        let row = client
            .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", &[])
            .await
            .map_err(|e| e.to_string())?;
        Ok(Some(row.get::<_, i64>(0) as u64))
    }
}

/// `n_tup_ins + n_tup_upd + n_tup_del` of the store's table, after making
/// the store's connections flush their pending statistics.
async fn pg_tuples_written(store: &PostgresStore) -> Result<u64, tokio_postgres::Error> {
    // Every pooled connection flushes its pending statistics (holding them
    // all at once makes the pool hand out each existing connection).
    let size = store.pool().status().size.max(1);
    let clients = futures_util::future::join_all((0..size).map(|_| store.pool().get())).await;
    for client in clients.iter().flatten() {
        client
            .execute("SELECT pg_stat_force_next_flush()", &[])
            .await?;
    }
    drop(clients);
    let client = store.pool().get().await.expect("pool");
    let mut last = None;
    for _ in 0..20 {
        client
            .execute("SELECT pg_stat_clear_snapshot()", &[])
            .await?;
        let row = client
            .query_one(
                "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint \
                 FROM pg_stat_user_tables WHERE schemaname = $1 \
                 AND relname::text IN ($2::text, $2::text || ':versions', $2::text || ':listings')",
                &[&store.schema(), &store.table()],
            )
            .await?;
        let now = row.get::<_, i64>(0) as u64;
        if last == Some(now) {
            return Ok(now);
        }
        last = Some(now);
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    Ok(last.unwrap_or(0))
}

/// Resets the process' peak resident set size (Linux), so the next reading
/// covers one scenario.
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process' peak resident set size since the last reset, in bytes.
pub(crate) fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
