//! [`PostgresStoreBuilder`]: names, page sizes, the pool, TLS, and opening
//! (the tables themselves are `migrate.rs`'s).

use std::sync::Arc;

use backfill_core::adapter::check_identifier;
use backfill_core::{Error, Result};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::{Config, NoTls};

use crate::error::open_error;
use crate::migrate;
use crate::sql::{self, Statements};
use crate::store::PostgresStore;
use crate::{
    DEFAULT_PAGE_BYTES, DEFAULT_PAGE_ROWS, DEFAULT_SCHEMA, DEFAULT_TABLE, MAX_VALUE_BYTES,
};

/// Options for a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    schema: String,
    table: String,
    page_rows: usize,
    page_bytes: usize,
    pool_size: usize,
    create_if_missing: bool,
    #[cfg(feature = "tls")]
    root_pems: Vec<Vec<u8>>,
}

impl Default for PostgresStoreBuilder {
    fn default() -> Self {
        Self {
            schema: DEFAULT_SCHEMA.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            page_rows: DEFAULT_PAGE_ROWS,
            page_bytes: DEFAULT_PAGE_BYTES,
            pool_size: 8,
            create_if_missing: true,
            #[cfg(feature = "tls")]
            root_pems: Vec::new(),
        }
    }
}

impl PostgresStoreBuilder {
    /// The schema (default `public`); created if missing. Must match
    /// `[a-z_][a-z0-9_]*`, at most 63 bytes: lowercase only, so the name
    /// means the same table quoted or not (see
    /// [`check_identifier`](backfill_core::adapter::check_identifier)).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The table (default [`DEFAULT_TABLE`]); created if missing. Same rule
    /// as [`PostgresStoreBuilder::schema`], and neither `backfill_tables`
    /// nor `backfill_days`: those are the schema's metadata tables.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Records sent per statement (default [`DEFAULT_PAGE_ROWS`]), so a
    /// day of millions of rows never builds one giant message. At least 1.
    pub fn page_rows(mut self, rows: usize) -> Self {
        self.page_rows = rows.max(1);
        self
    }

    /// Bytes sent per statement, counting keys and values plus a little per
    /// record (default [`DEFAULT_PAGE_BYTES`], 64 MiB), so a day of large
    /// values stays under Postgres' 1 GiB limit per message; a listing's
    /// keys are sent in ranges of at most as many bytes. A statement
    /// always holds at least one record, whatever its size; at most
    /// [`MAX_VALUE_BYTES`].
    pub fn page_bytes(mut self, bytes: usize) -> Self {
        self.page_bytes = bytes.clamp(1, MAX_VALUE_BYTES);
        self
    }

    /// Connections in the pool this builder creates (default 8); ignored by
    /// [`PostgresStoreBuilder::connect_pool`].
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Whether opening may create what is missing: the schema, the table,
    /// its `event_date` index, the schema's `backfill_tables` and
    /// `backfill_days` and the table's version row, and upgrade a table of
    /// an older schema version in place (default `true`).
    ///
    /// Either way opening first looks in the catalog and runs no DDL when
    /// everything exists at the current version, so a role with only
    /// `SELECT`, `INSERT`, `UPDATE` and `DELETE` on the table and on the two
    /// metadata tables, or a read-only replica, can open it. With `false`
    /// no DDL is ever run, and anything missing or old is an
    /// [`Error::Open`] that says what (for deployments where a migration
    /// tool creates the tables, as the [crate docs](crate#tables) show, and
    /// the application role must never run DDL).
    ///
    /// [`Error::Open`]: backfill_core::Error::Open
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// Connects with a connection string (`postgres://user:pass@host/db` or
    /// `host=… user=…`), without TLS.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for a bad schema or table name, or a table
    /// named `backfill_tables` or `backfill_days` (checked before
    /// connecting); [`Error::Open`] for a malformed connection string, an
    /// unreachable server, refused credentials, something missing that may
    /// not or cannot be created, a table of an older schema version that may
    /// not or cannot be upgraded, a schema version newer than this release,
    /// or an existing table (records or metadata) that is not the one the
    /// store creates (its source is then a
    /// [`TableMismatch`](crate::TableMismatch) naming each column and what
    /// differs).
    ///
    /// [`Error::InvalidName`]: backfill_core::Error::InvalidName
    /// [`Error::Open`]: backfill_core::Error::Open
    pub async fn connect(self, url: &str) -> Result<PostgresStore> {
        self.check_names()?;
        let config: Config = url.parse().map_err(open_error)?;
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

    /// Connects over TLS (rustls), and only over TLS, verifying the
    /// server's certificate and host name against the system's root
    /// certificates and any added with
    /// [`PostgresStoreBuilder::tls_root_certificates_pem`].
    ///
    /// The connection string's `sslmode` cannot weaken that: `prefer` (the
    /// default when it says nothing) is taken as `require`, so a server
    /// without TLS is refused rather than spoken to in plain text, and
    /// `disable` contradicts this method and is refused before connecting
    /// (use [`PostgresStoreBuilder::connect`] for plain text). For client
    /// certificates or another TLS policy, build your own pool and pass it
    /// to [`PostgresStoreBuilder::connect_pool`].
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`]; also [`Error::Open`] for
    /// `sslmode=disable`, a server that does not speak TLS, a certificate
    /// the server presents that no trusted root vouches for, an unreadable
    /// PEM, or no root certificate at all.
    ///
    /// [`Error::Open`]: backfill_core::Error::Open
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub async fn connect_tls(self, url: &str) -> Result<PostgresStore> {
        self.check_names()?;
        let config: Config = url.parse().map_err(open_error)?;
        let manager = crate::tls::manager(config, &self.root_pems, manager_config())?;
        self.pool_from(manager).await
    }

    async fn pool_from(self, manager: Manager) -> Result<PostgresStore> {
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .build()
            .map_err(open_error)?;
        self.connect_pool(pool).await
    }

    /// Opens the store on your own pool (any TLS setup, any pool size).
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`].
    pub async fn connect_pool(self, pool: Pool) -> Result<PostgresStore> {
        self.check_names()?;
        let (schema, name) = (self.schema.as_str(), self.table.as_str());
        let mut client = pool.get().await.map_err(open_error)?;
        let tx = client.transaction().await.map_err(open_error)?;
        migrate::prepare(&tx, schema, name, self.create_if_missing).await?;
        tx.commit().await.map_err(open_error)?;
        drop(client);
        Ok(PostgresStore {
            pool,
            sql: Arc::new(Statements::new(schema, name)),
            page_rows: self.page_rows,
            page_bytes: self.page_bytes,
        })
    }

    fn check_names(&self) -> Result<()> {
        check_identifier("schema", &self.schema)?;
        check_identifier("table", &self.table)?;
        // The schema's metadata tables cannot also hold records.
        if [sql::TABLES_TABLE, sql::DAYS_TABLE].contains(&self.table.as_str()) {
            return Err(Error::InvalidName {
                what: "table",
                name: self.table.clone(),
            });
        }
        Ok(())
    }
}

fn manager_config() -> ManagerConfig {
    ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    }
}
