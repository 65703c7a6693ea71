//! A Postgres [`Store`] for backfill, on tokio-postgres with a
//! deadpool-postgres pool.
//!
//! Each day's batch is one transaction. Records travel as arrays (one
//! statement per chunk of rows, through `UNNEST`, never a round trip per
//! row), and one statement per chunk:
//!
//! 1. joins the chunk against the table and drops the rows that are
//!    identical or older than what is stored (an anti-join, so unchanged rows
//!    are not even locked: a re-run writes no row version and no WAL);
//! 2. writes the rest with `INSERT … ON CONFLICT (key) DO UPDATE … WHERE
//!    (incoming) > (stored)`, in key order, so concurrent writers never
//!    deadlock and a row committed meanwhile by another writer is still only
//!    overwritten by a newer version.
//!
//! Text is compared `COLLATE "C"` (by bytes), so ties are decided exactly as
//! in Rust and SQLite.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> backfill_core::Result<()> {
//! use backfill_core::{backfill, Record};
//! use backfill_postgres::PostgresStore;
//! use chrono::NaiveDate;
//!
//! async fn fetch(day: NaiveDate) -> Result<Vec<Record>, std::io::Error> {
//!     let at = day.and_hms_opt(8, 0, 0).unwrap().and_utc();
//!     Ok(vec![Record::new(format!("payment:{day}"), day, "{}", at).unwrap()])
//! }
//!
//! let store = PostgresStore::builder()
//!     .schema("pipeline")
//!     .table("payments")
//!     .connect("postgres://app@localhost/warehouse")
//!     .await?;
//! let jan = |d| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
//! backfill(&store, &fetch, jan(1)..=jan(31)).await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use backfill_core::adapter::check_identifier;
use backfill_core::{Batch, Counts, Error, Mode, Record, Result, Store};
use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Config, NoTls, Row};

pub use deadpool_postgres;
pub use tokio_postgres;

const BACKEND: &str = "postgres";

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "public";
/// The default table name.
pub const DEFAULT_TABLE: &str = "backfill_records";
/// The default number of records sent per statement.
pub const DEFAULT_CHUNK_ROWS: usize = 10_000;

/// A [`Store`] in one Postgres table.
///
/// Cheap to clone: clones share the pool. Its `Debug` output names the
/// schema and table, never a connection string or password.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    sql: Arc<Statements>,
    chunk_rows: usize,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.sql.schema)
            .field("table", &self.sql.table)
            .field("chunk_rows", &self.chunk_rows)
            .finish_non_exhaustive()
    }
}

/// Options for a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    schema: String,
    table: String,
    chunk_rows: usize,
    pool_size: usize,
    #[cfg(feature = "tls")]
    root_pems: Vec<Vec<u8>>,
}

impl Default for PostgresStoreBuilder {
    fn default() -> Self {
        Self {
            schema: DEFAULT_SCHEMA.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            chunk_rows: DEFAULT_CHUNK_ROWS,
            pool_size: 8,
            #[cfg(feature = "tls")]
            root_pems: Vec::new(),
        }
    }
}

impl PostgresStoreBuilder {
    /// The schema (default `public`); created if missing. Must match
    /// `[A-Za-z_][A-Za-z0-9_]*`.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The table (default [`DEFAULT_TABLE`]); created if missing. Must match
    /// `[A-Za-z_][A-Za-z0-9_]*`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Records sent per statement (default 10 000), so a day of millions of
    /// rows never builds one giant message. At least 1.
    pub fn chunk_rows(mut self, rows: usize) -> Self {
        self.chunk_rows = rows.max(1);
        self
    }

    /// Connections in the pool this builder creates (default 8); ignored by
    /// [`PostgresStoreBuilder::pool`].
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Connects with a connection string (`postgres://user:pass@host/db` or
    /// `host=… user=…`), without TLS.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad schema or table name (checked before
    /// connecting); [`Error::Open`] for a malformed connection string, an
    /// unreachable server or refused credentials.
    pub async fn connect(self, url: &str) -> Result<PostgresStore> {
        self.check_names()?;
        let config: Config = url.parse().map_err(|e| Error::open(BACKEND, e))?;
        self.connect_with(config).await
    }

    /// Connects with a parsed `tokio_postgres::Config`, without TLS.
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`].
    pub async fn connect_with(self, config: Config) -> Result<PostgresStore> {
        self.check_names()?;
        let manager = Manager::from_config(config, NoTls, manager_config());
        self.pool_from(manager).await
    }

    /// Also trusts the CA certificates in `pem` (PEM text, one or more
    /// certificates) for [`PostgresStoreBuilder::connect_tls`]: the CA
    /// bundle of a managed Postgres (Amazon RDS, Cloud SQL, Azure) or your
    /// own CA. May be called more than once.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificates_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.root_pems.push(pem.as_ref().to_vec());
        self
    }

    /// Connects over TLS (rustls), verifying the server against the
    /// system's root certificates and any added with
    /// [`PostgresStoreBuilder::tls_root_certificates_pem`]. The connection
    /// string's `sslmode` applies: `require` refuses a server without TLS,
    /// `prefer` (the default) falls back to plain text. For client
    /// certificates, build your own pool and pass it to
    /// [`PostgresStoreBuilder::pool`].
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`]; also [`Error::Open`] for a
    /// certificate the server presents that no trusted root vouches for, an
    /// unreadable PEM, or no root certificate at all.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub async fn connect_tls(self, url: &str) -> Result<PostgresStore> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;

        self.check_names()?;
        let config: Config = url.parse().map_err(|e| Error::open(BACKEND, e))?;
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
        for pem in &self.root_pems {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| {
                    Error::open(BACKEND, format!("unreadable root certificate PEM: {e}"))
                })?;
                roots.add(cert).map_err(|e| Error::open(BACKEND, e))?;
            }
        }
        if roots.is_empty() {
            return Err(Error::open(
                BACKEND,
                "no root certificate to verify the server with",
            ));
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::open(BACKEND, e))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
        let manager = Manager::from_config(config, connector, manager_config());
        self.pool_from(manager).await
    }

    async fn pool_from(self, manager: Manager) -> Result<PostgresStore> {
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .build()
            .map_err(|e| Error::open(BACKEND, e))?;
        self.pool(pool).await
    }

    /// Uses your own pool (any TLS setup, any pool size).
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`].
    pub async fn pool(self, pool: Pool) -> Result<PostgresStore> {
        self.check_names()?;
        let sql = Statements::new(&self.schema, &self.table);
        let mut client = pool.get().await.map_err(open_error)?;
        // Concurrent first opens would race on CREATE … IF NOT EXISTS; an
        // advisory lock taken for the transaction serialises them.
        let tx = client.transaction().await.map_err(open_error_pg)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&format!("backfill:{}.{}", self.schema, self.table)],
        )
        .await
        .map_err(open_error_pg)?;
        tx.batch_execute(&sql.create).await.map_err(open_error_pg)?;
        tx.commit().await.map_err(open_error_pg)?;
        drop(client);
        Ok(PostgresStore {
            pool,
            sql: Arc::new(sql),
            chunk_rows: self.chunk_rows,
        })
    }

    fn check_names(&self) -> Result<()> {
        check_identifier("schema", &self.schema)?;
        check_identifier("table", &self.table)
    }
}

impl PostgresStore {
    /// Connects with a connection string, using the default schema and
    /// table. See [`PostgresStoreBuilder::connect`].
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder().connect(url).await
    }

    /// Options: schema, table, chunk size, pool.
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder::default()
    }

    /// The schema of this store's table.
    pub fn schema(&self) -> &str {
        &self.sql.schema
    }

    /// This store's table.
    pub fn table(&self) -> &str {
        &self.sql.table
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(pool_error)
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

    async fn apply(&self, batch: &Batch) -> Result<Counts> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let merge = tx.prepare_cached(&self.sql.merge).await.map_err(pg_error)?;
        let mut counts = Counts::default();
        // Chunks follow the batch's key order, so locks are taken in key
        // order across the whole transaction.
        for chunk in batch.records().chunks(self.chunk_rows) {
            let keys: Vec<&str> = chunk.iter().map(Record::key).collect();
            let dates: Vec<NaiveDate> = chunk.iter().map(Record::event_date).collect();
            let values: Vec<&str> = chunk.iter().map(Record::value).collect();
            let instants: Vec<DateTime<Utc>> = chunk.iter().map(Record::updated_at).collect();
            let row = tx
                .query_one(&merge, &[&keys, &dates, &values, &instants])
                .await
                .map_err(pg_error)?;
            let inserted: i64 = row.get("inserted");
            let updated: i64 = row.get("updated");
            let unchanged: i64 = row.get("unchanged");
            let stale: i64 = row.get("stale");
            let raced: Option<Vec<String>> = row.get("raced");
            counts.inserted += inserted as u64;
            counts.updated += updated as u64;
            counts.unchanged += unchanged as u64;
            counts.stale += stale as u64;
            if let Some(raced) = raced.filter(|keys| !keys.is_empty()) {
                // Rows our snapshot saw as absent or older, but that another
                // writer committed first with a version at least as new: the
                // upsert's WHERE left them alone. Classify them against what
                // is stored now, for the counts only.
                let stored = tx
                    .query(&self.sql.versions, &[&raced])
                    .await
                    .map_err(pg_error)?;
                for row in &stored {
                    let stored = into_record(row)?;
                    let incoming = chunk
                        .binary_search_by(|r| r.key().cmp(stored.key()))
                        .map(|i| &chunk[i])
                        .map_err(|_| Error::backend(BACKEND, false, "raced key not in batch"))?;
                    if incoming == &stored {
                        counts.unchanged += 1;
                    } else {
                        counts.stale += 1;
                    }
                }
            }
        }
        if batch.mode() == Mode::Replace {
            let keys: Vec<&str> = batch.records().iter().map(Record::key).collect();
            let deleted = tx
                .execute(&self.sql.delete_missing, &[&batch.day(), &keys])
                .await
                .map_err(pg_error)?;
            counts.deleted = deleted;
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(counts)
    }
}

/// The SQL of one table, built once from the validated names.
#[derive(Debug)]
struct Statements {
    schema: String,
    table: String,
    create: String,
    get: String,
    all: String,
    day: String,
    versions: String,
    merge: String,
    delete_missing: String,
}

impl Statements {
    fn new(schema: &str, table: &str) -> Self {
        let t = format!(r#""{schema}"."{table}""#);
        let cols = "key, event_date, value, updated_at";
        Self {
            schema: schema.to_owned(),
            table: table.to_owned(),
            // CHECKs repeat the record rules in the table itself; text is
            // COLLATE "C" so comparisons and ORDER BY are by bytes.
            create: format!(
                r#"
CREATE SCHEMA IF NOT EXISTS "{schema}";
CREATE TABLE IF NOT EXISTS {t} (
    key        text COLLATE "C" PRIMARY KEY
               CHECK (octet_length(key) BETWEEN 1 AND 512),
    event_date date NOT NULL
               CHECK (event_date BETWEEN '0001-01-01' AND '9999-12-31'),
    value      text COLLATE "C" NOT NULL,
    updated_at timestamptz NOT NULL
               CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00')
);
CREATE INDEX IF NOT EXISTS "{table}_event_date" ON {t} (event_date);
"#
            ),
            get: format!("SELECT {cols} FROM {t} WHERE key = $1"),
            all: format!("SELECT {cols} FROM {t} ORDER BY key"),
            day: format!("SELECT {cols} FROM {t} WHERE event_date = $1 ORDER BY key"),
            versions: format!("SELECT {cols} FROM {t} WHERE key = ANY($1::text[]) ORDER BY key"),
            // The one write, set-based. `classified` sees the table as of the
            // statement's snapshot; only rows absent or older there go to the
            // upsert, whose own WHERE re-checks against the latest committed
            // version (READ COMMITTED re-evaluates it on conflict).
            merge: format!(
                r#"
WITH incoming AS (
    SELECT * FROM unnest($1::text[], $2::date[], $3::text[], $4::timestamptz[])
        AS i(key, event_date, value, updated_at)
), classified AS (
    SELECT i.key, i.event_date, i.value, i.updated_at,
           CASE
               WHEN s.key IS NULL THEN 'w'
               WHEN (i.updated_at, i.value COLLATE "C", i.event_date)
                  > (s.updated_at, s.value, s.event_date) THEN 'w'
               WHEN (i.updated_at, i.value COLLATE "C", i.event_date)
                  = (s.updated_at, s.value, s.event_date) THEN 'n'
               ELSE 's'
           END AS action
    -- One primary-key probe per incoming row, whatever the table's size
    -- or statistics: OFFSET 0 keeps the planner from turning the lookup
    -- into a hash join that scans the whole table for every chunk.
    FROM incoming i LEFT JOIN LATERAL (
        SELECT * FROM {t} WHERE {t}.key = i.key COLLATE "C" OFFSET 0
    ) s ON true
), written AS (
    INSERT INTO {t} AS s ({cols})
    SELECT key, event_date, value, updated_at FROM classified
    WHERE action = 'w'
    ORDER BY key COLLATE "C"
    ON CONFLICT (key) DO UPDATE SET
        event_date = EXCLUDED.event_date,
        value = EXCLUDED.value,
        updated_at = EXCLUDED.updated_at
    WHERE (EXCLUDED.updated_at, EXCLUDED.value, EXCLUDED.event_date)
        > (s.updated_at, s.value, s.event_date)
    RETURNING s.key, (s.xmax = 0) AS fresh
)
SELECT
    (SELECT count(*) FROM written WHERE fresh) AS inserted,
    (SELECT count(*) FROM written WHERE NOT fresh) AS updated,
    (SELECT count(*) FROM classified WHERE action = 'n') AS unchanged,
    (SELECT count(*) FROM classified WHERE action = 's') AS stale,
    -- Rows meant to be written that the upsert's WHERE skipped, because a
    -- concurrent writer committed a version at least as new: normally none,
    -- and then not even looked for. EXCEPT hashes or sorts; it can never
    -- become a nested loop over the chunk.
    CASE WHEN (SELECT count(*) FROM classified WHERE action = 'w')
           <> (SELECT count(*) FROM written)
    THEN (SELECT array_agg(key) FROM (
              SELECT key COLLATE "C" AS key FROM classified WHERE action = 'w'
              EXCEPT ALL
              SELECT key FROM written) AS skipped)
    END AS raced
"#
            ),
            // Lock the doomed rows in key order first, like the upsert.
            delete_missing: format!(
                r#"
DELETE FROM {t} WHERE key IN (
    SELECT s.key FROM {t} s
    WHERE s.event_date = $1
      AND NOT EXISTS (SELECT 1 FROM unnest($2::text[]) AS k(key) WHERE k.key COLLATE "C" = s.key)
    ORDER BY s.key
    FOR UPDATE
)"#
            ),
        }
    }
}

fn manager_config() -> ManagerConfig {
    ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    }
}

fn into_record(row: &Row) -> Result<Record> {
    let key: String = row.try_get(0).map_err(pg_error)?;
    let event_date: NaiveDate = row.try_get(1).map_err(pg_error)?;
    let value: String = row.try_get(2).map_err(pg_error)?;
    let updated_at: DateTime<Utc> = row.try_get(3).map_err(pg_error)?;
    Record::new(key, event_date, value, updated_at)
}

/// Whether an error is worth another try: lost connections, deadlocks,
/// serialization failures, a server shutting down or starting up.
fn retryable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => [
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::CONNECTION_FAILURE,
            SqlState::CONNECTION_EXCEPTION,
        ]
        .contains(code),
        // No SQLSTATE: an I/O error on the socket.
        None => std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

fn pg_error(e: tokio_postgres::Error) -> Error {
    let retryable = retryable(&e);
    Error::backend(BACKEND, retryable, e)
}

fn pool_error(e: PoolError) -> Error {
    let retryable = match &e {
        PoolError::Backend(pg) => retryable(pg),
        PoolError::Timeout(_) => true,
        _ => false,
    };
    Error::backend(BACKEND, retryable, e)
}

fn open_error(e: PoolError) -> Error {
    Error::open(BACKEND, e)
}

fn open_error_pg(e: tokio_postgres::Error) -> Error {
    Error::open(BACKEND, e)
}
