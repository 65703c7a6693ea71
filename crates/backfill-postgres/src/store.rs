//! [`PostgresStore`] and its [`Store`] implementation; the write itself is
//! [`apply_day`](crate::write::apply_day).

use std::fmt;
use std::ops::RangeInclusive;
use std::sync::Arc;

use async_trait::async_trait;
use backfill_core::columns::Columns;
use backfill_core::{
    Counts, DayFailure, DayWrite, Digest, Error, HistoryRow, LedgerEntry, Record, Result, RunId,
    Store, SyncedDay, Timing,
};
use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::Pool;
use tokio_postgres::Row;

use crate::error::{pg_error, pool_error};
use crate::sql::Statements;
use crate::write::{apply_day, PageSize, Writer};
use crate::BACKEND;

/// A [`Store`] in one Postgres table.
///
/// Cheap to clone: clones share the pool. Its `Debug` output names the
/// schema and table, never a connection string or password.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: Pool,
    pub(crate) sql: Arc<Statements>,
    pub(crate) page_rows: usize,
    pub(crate) page_bytes: usize,
    pub(crate) columns: Arc<Columns>,
    /// Where the pool connects (`host:port`), for messages; `None` for a
    /// pool the user built.
    pub(crate) server: Option<Arc<str>>,
    /// When opening turned history on: the rows the table held.
    pub(crate) history_started_with: Option<u64>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.sql.schema)
            .field("table", &self.sql.table)
            .field("page_rows", &self.page_rows)
            .field("page_bytes", &self.page_bytes)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Whether the schema holds the table of acceptances (made by the
    /// first one).
    async fn keeps_acceptances(&self, client: &deadpool_postgres::Object) -> Result<bool> {
        Ok(client
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&self.sql.accepted_table],
            )
            .await
            .map_err(pg_error)?
            .get(0))
    }

    /// The schema of this store's table.
    pub fn schema(&self) -> &str {
        &self.sql.schema
    }

    /// This store's table.
    pub fn table(&self) -> &str {
        &self.sql.table
    }

    /// Whether the table keeps [history](backfill_core::history)
    /// ([`PostgresStoreBuilder::history`](crate::PostgresStoreBuilder::history)).
    pub fn keeps_history(&self) -> bool {
        self.sql.history.is_some()
    }

    /// When opening turned history on for the table: how many rows it
    /// held, each now a version in history. `None` when history was on
    /// already, or is off.
    pub fn history_started_with(&self) -> Option<u64> {
        self.history_started_with
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// What the write path needs of the store.
    fn writer(&self) -> Writer<'_> {
        Writer {
            pool: &self.pool,
            server: self.server.as_deref(),
            sql: &self.sql,
            columns: &self.columns,
            pages: PageSize {
                rows: self.page_rows,
                bytes: self.page_bytes,
            },
        }
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|e| pool_error(e, self.server.as_deref()))
    }

    async fn read(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Record>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await.map_err(pg_error)?;
        let rows = client.query(&stmt, params).await.map_err(pg_error)?;
        rows.iter().map(into_record).collect()
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn get(&self, key: &str) -> Result<Option<Record>> {
        Ok(self.read(&self.sql.get, &[&key]).await?.pop())
    }

    async fn rows(&self) -> Result<Vec<Record>> {
        self.read(&self.sql.all, &[]).await
    }

    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
        self.read(&self.sql.day, &[&day]).await
    }

    async fn rows_with_tombstones(&self) -> Result<Vec<Record>> {
        self.read(&self.sql.with_tombstones, &[]).await
    }

    /// One transaction across every page, one page (at most
    /// [`page_rows`](crate::PostgresStoreBuilder::page_rows) records and about
    /// [`page_bytes`](crate::PostgresStoreBuilder::page_bytes)) in memory at a
    /// time; a batch is one page: see the crate docs.
    async fn apply(&self, day: DayWrite) -> Result<Counts> {
        apply_day(self.writer(), day).await
    }

    async fn history(&self) -> Result<Vec<HistoryRow>> {
        let history = self.sql.history.as_ref().ok_or(Error::HistoryOff)?;
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&history.all)
            .await
            .map_err(pg_error)?;
        let rows = client.query(&stmt, &[]).await.map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                Ok(HistoryRow {
                    record: into_record(row)?,
                    valid_to: row.try_get(5).map_err(pg_error)?,
                })
            })
            .collect()
    }

    async fn as_of(&self, at: DateTime<Utc>) -> Result<Vec<Record>> {
        let history = self.sql.history.as_ref().ok_or(Error::HistoryOff)?;
        self.read(&history.as_of, &[&at]).await
    }

    async fn purge_tombstones(&self, before: DateTime<Utc>) -> Result<u64> {
        // One statement: the rows and the digests of the days they were
        // tombstones of (now `Digest::PURGED`) go together.
        let client = self.client().await?;
        let purged: i64 = client
            .query_one(&self.sql.purge, &[&before])
            .await
            .map_err(pg_error)?
            .get(0);
        Ok(purged as u64)
    }

    async fn ledger(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<LedgerEntry>> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql.ledger)
            .await
            .map_err(pg_error)?;
        let rows = client
            .query(&stmt, &[days.start(), days.end()])
            .await
            .map_err(pg_error)?;
        let mut entries: Vec<LedgerEntry> = rows.iter().map(into_entry).collect::<Result<_>>()?;
        // The acceptances, once a first one made their table.
        if self.keeps_acceptances(&client).await? {
            let stmt = client
                .prepare_cached(&self.sql.accepted)
                .await
                .map_err(pg_error)?;
            for row in client
                .query(&stmt, &[days.start(), days.end()])
                .await
                .map_err(pg_error)?
            {
                let day: NaiveDate = row.try_get(0).map_err(pg_error)?;
                let at: DateTime<Utc> = row.try_get(1).map_err(pg_error)?;
                backfill_core::merge_acceptance(&mut entries, day, at);
            }
        }
        Ok(entries)
    }

    async fn accept(&self, day: NaiveDate, at: Option<DateTime<Utc>>) -> Result<()> {
        let client = self.client().await?;
        match at {
            Some(at) => {
                client
                    .batch_execute(&self.sql.create_accepted)
                    .await
                    .map_err(pg_error)?;
                let stmt = client
                    .prepare_cached(&self.sql.accept)
                    .await
                    .map_err(pg_error)?;
                client
                    .execute(&stmt, &[&day, &at])
                    .await
                    .map_err(pg_error)?;
            }
            None => {
                if self.keeps_acceptances(&client).await? {
                    let stmt = client
                        .prepare_cached(&self.sql.unaccept)
                        .await
                        .map_err(pg_error)?;
                    client.execute(&stmt, &[&day]).await.map_err(pg_error)?;
                }
            }
        }
        Ok(())
    }

    async fn record_failure(&self, day: NaiveDate, failure: &DayFailure) -> Result<()> {
        // Postgres text cannot hold NUL; an error message rarely does.
        let error = failure.error.replace('\0', "\u{FFFD}");
        let attempts = i32::try_from(failure.attempts).unwrap_or(i32::MAX);
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql.failed)
            .await
            .map_err(pg_error)?;
        client
            .execute(
                &stmt,
                &[
                    &day,
                    &failure.at,
                    &failure.run_id.as_ref().map(RunId::as_str),
                    &attempts,
                    &error,
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }
}

/// A ledger row, as [`Statements::ledger`](crate::sql::Statements) reads
/// it: `day, listing_watermark`, the success's columns, the failure's.
fn into_entry(row: &Row) -> Result<LedgerEntry> {
    let corrupt = |what: String| Error::backend(BACKEND, false, what);
    let day: NaiveDate = row.try_get(0).map_err(pg_error)?;
    let mut entry = LedgerEntry::new(day);
    entry.listing_watermark = row.try_get(1).map_err(pg_error)?;
    let synced_at: Option<DateTime<Utc>> = row.try_get(2).map_err(pg_error)?;
    if let Some(at) = synced_at {
        let mode: Option<String> = row.try_get(4).map_err(pg_error)?;
        let mode = match mode
            .as_deref()
            .and_then(|m| m.parse::<backfill_core::Mode>().ok())
        {
            Some(mode) => mode,
            None => return Err(corrupt(format!("ledger row of {day}: mode {mode:?}"))),
        };
        let digest: Option<String> = row.try_get(6).map_err(pg_error)?;
        let digest = digest
            .as_deref()
            .and_then(Digest::from_hex)
            .ok_or_else(|| corrupt(format!("ledger row of {day}: digest {digest:?}")))?;
        let mut counts = Counts::default();
        for (i, field) in [
            &mut counts.inserted,
            &mut counts.updated,
            &mut counts.unchanged,
            &mut counts.stale,
            &mut counts.deleted,
            &mut counts.unlisted,
            &mut counts.collapsed,
        ]
        .into_iter()
        .enumerate()
        {
            let n: Option<i64> = row.try_get(7 + i).map_err(pg_error)?;
            let n = n.ok_or_else(|| corrupt(format!("ledger row of {day}: a count is NULL")))?;
            *field = u64::try_from(n).unwrap_or(0);
        }
        let run_id: Option<String> = row.try_get(3).map_err(pg_error)?;
        // After the failure's columns when the schema keeps timings.
        let timing = match row.len() > 18 {
            true => {
                let fetch: Option<i64> = row.try_get(18).map_err(pg_error)?;
                let write: Option<i64> = row.try_get(19).map_err(pg_error)?;
                fetch
                    .zip(write)
                    .and_then(|(f, w)| Timing::from_millis(f, w))
            }
            false => None,
        };
        entry.synced = Some(
            SyncedDay::new(
                at,
                run_id.map(RunId::from),
                mode,
                row.try_get(5).map_err(pg_error)?,
                digest,
                counts,
            )
            .with_timing(timing),
        );
    }
    let failed_at: Option<DateTime<Utc>> = row.try_get(14).map_err(pg_error)?;
    if let Some(at) = failed_at {
        let run_id: Option<String> = row.try_get(15).map_err(pg_error)?;
        let attempts: Option<i32> = row.try_get(16).map_err(pg_error)?;
        let error: Option<String> = row.try_get(17).map_err(pg_error)?;
        entry.failure = Some(DayFailure::new(
            at,
            run_id.map(RunId::from),
            attempts.and_then(|a| u32::try_from(a).ok()).unwrap_or(1),
            error.as_deref().unwrap_or(""),
        ));
    }
    Ok(entry)
}

fn into_record(row: &Row) -> Result<Record> {
    let key: String = row.try_get(0).map_err(pg_error)?;
    let event_date: NaiveDate = row.try_get(1).map_err(pg_error)?;
    let value: String = row.try_get(2).map_err(pg_error)?;
    let updated_at: DateTime<Utc> = row.try_get(3).map_err(pg_error)?;
    let deleted: bool = row.try_get(4).map_err(pg_error)?;
    if deleted {
        // The table's CHECK keeps a tombstone's value empty.
        Record::tombstone(key, event_date, updated_at)
    } else {
        Record::new(key, event_date, value, updated_at)
    }
}
