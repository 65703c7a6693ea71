//! [`PostgresStoreBuilder`]: names, page sizes, the pool, TLS, and opening
//! (the tables themselves are `migrate.rs`'s).

use std::sync::Arc;
use std::time::Duration;

use backfill_core::adapter::check_identifier;
use backfill_core::columns::{Column, Columns};
use backfill_core::{Error, Result};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::{Config, NoTls};

use crate::error::{no_answer, open_error};
use crate::migrate;
use crate::sql::{self, Statements};
use crate::store::PostgresStore;
#[cfg(feature = "tls")]
use crate::tls::Tls;
use crate::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_FILL_FACTOR, DEFAULT_PAGE_BYTES, DEFAULT_PAGE_ROWS,
    DEFAULT_SCHEMA, DEFAULT_TABLE, MAX_VALUE_BYTES,
};

/// Options for a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    schema: String,
    table: String,
    page_rows: usize,
    page_bytes: usize,
    fill_factor: u8,
    pool_size: usize,
    create_if_missing: bool,
    connect_timeout: Option<Duration>,
    columns: Vec<Column>,
    column_changes: bool,
    history: bool,
    #[cfg(feature = "tls")]
    tls: Option<Tls>,
}

impl Default for PostgresStoreBuilder {
    fn default() -> Self {
        Self {
            schema: DEFAULT_SCHEMA.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            page_rows: DEFAULT_PAGE_ROWS,
            page_bytes: DEFAULT_PAGE_BYTES,
            fill_factor: DEFAULT_FILL_FACTOR,
            pool_size: 8,
            create_if_missing: true,
            connect_timeout: None,
            columns: Vec::new(),
            column_changes: false,
            history: false,
            #[cfg(feature = "tls")]
            tls: None,
        }
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

    /// Options: schema, table, page sizes, pool, TLS, whether to create
    /// what is missing.
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder::default()
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

    /// A typed column: a field of each record's JSON value that the table
    /// keeps as a column of its own, in Postgres' type for it (see the
    /// [crate docs](crate#typed-columns)). Repeat for each; the order is
    /// the table's. A record whose value does not fit a column is refused
    /// with [`Error::InvalidColumn`], and nothing of its day is written.
    pub fn column(mut self, column: Column) -> Self {
        self.columns.push(column);
        self
    }

    /// Every column of `columns`, as [`PostgresStoreBuilder::column`] each.
    pub fn columns(mut self, columns: impl IntoIterator<Item = Column>) -> Self {
        self.columns.extend(columns);
        self
    }

    /// Whether opening may drop and remake typed columns (default
    /// `false`). With it, a column of the table beyond the store's own
    /// that the declaration lacks is dropped (its indexes with it), and a
    /// typed column declared with another type is dropped and added again,
    /// filled from the rows — in opening's one transaction, so a row that
    /// does not fit its new type refuses the open and leaves the table as
    /// it was. Without it, such a table is refused, naming the column. A
    /// dropped column's data is lost from the table only: it is still in
    /// each row's value, and declaring the column again fills it. Takes
    /// DDL rights on the table, as adding a column does.
    pub fn allow_column_changes(mut self, allow: bool) -> Self {
        self.column_changes = allow;
        self
    }

    /// Whether the table keeps [history](backfill_core::history) (default
    /// `false`): every version of every key, valid from its `updated_at`,
    /// read with [`Store::history`](backfill_core::Store::history) and
    /// [`Store::as_of`](backfill_core::Store::as_of), and by people through
    /// the view `<table>_history` (see the [crate docs](crate#history)).
    /// The table's name may then have at most 54 bytes.
    ///
    /// Turned on for a table with rows, history starts from them: one
    /// version per key ([`PostgresStore::history_started_with`] says how
    /// many). Once on, it stays on: a store opened on the table without
    /// this keeps writing it, so that no writer leaves a hole. Turning it
    /// off is dropping the view `<table>_history` and the tables
    /// `"<table>:versions"` and `"<table>:listings"`.
    pub fn history(mut self, history: bool) -> Self {
        self.history = history;
        self
    }

    /// The table (default [`DEFAULT_TABLE`]); created if missing. Same rule
    /// as [`PostgresStoreBuilder::schema`], and none of `backfill_tables`,
    /// `backfill_days`, `backfill_accepted` and `backfill_timings`: those
    /// are the schema's metadata tables.
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

    /// How full `COPY` and inserts pack the records table's pages, in
    /// percent (default [`DEFAULT_FILL_FACTOR`]; 10 to 100), set when the
    /// table is created: Postgres' `fillfactor`. The room left lets an
    /// update of a row that keeps its key and `event_date` — what a
    /// re-fetched day's changed records are — be written beside the old
    /// version without touching an index (a heap-only tuple), several
    /// times cheaper than an update that must insert into every index. The
    /// price is space: at 80 the heap is about a quarter larger than
    /// packed full (300 000 rows of 64-byte values: 57 MB against 45 MB).
    /// 100 packs pages full: the smallest table, and every update moved to
    /// another page. A table that exists keeps its own setting (`ALTER
    /// TABLE … SET (fillfactor = …)` changes it for pages written after).
    pub fn fill_factor(mut self, percent: u8) -> Self {
        self.fill_factor = percent.clamp(10, 100);
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

    /// How long making one connection of the pool may take — TCP, TLS,
    /// the startup and authentication exchange — before it fails as timed
    /// out. By default the connection string's `connect_timeout` (seconds)
    /// if it has one, else [`DEFAULT_CONNECT_TIMEOUT`] (30 s). Opening
    /// makes a connection, so a server that accepts connections and never
    /// answers fails opening with [`Error::Open`] (its source an
    /// [`std::io::Error`] of kind `TimedOut`) rather than hanging it;
    /// a day whose connection cannot be made in time fails as retryable.
    /// Ignored by [`connect_pool`](PostgresStoreBuilder::connect_pool),
    /// whose pool has its own timeouts.
    ///
    /// [`Error::Open`]: backfill_core::Error::Open
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Connects with a connection string (`postgres://user:pass@host/db` or
    /// `host=… user=…`): over TLS and only over TLS if
    /// [`tls`](PostgresStoreBuilder::tls) was set, else in plain text.
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
    /// differs). With [`tls`](PostgresStoreBuilder::tls), also
    /// [`Error::Open`] for `sslmode=disable`, a server that does not speak
    /// TLS, a certificate the server presents that no trusted root vouches
    /// for, an unreadable PEM, or no root certificate at all.
    ///
    /// [`Error::InvalidName`]: backfill_core::Error::InvalidName
    /// [`Error::Open`]: backfill_core::Error::Open
    pub async fn connect(self, url: &str) -> Result<PostgresStore> {
        self.check_names()?;
        let config: Config = url.parse().map_err(open_error)?;
        self.connect_with(config).await
    }

    /// Connects with a parsed `tokio_postgres::Config`, over TLS if
    /// [`tls`](PostgresStoreBuilder::tls) was set.
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`].
    pub async fn connect_with(self, config: Config) -> Result<PostgresStore> {
        self.check_names()?;
        let timeout = self
            .connect_timeout
            .or_else(|| config.get_connect_timeout().copied())
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let server = crate::error::server_of(&config);
        let manager = self.manager(config)?;
        self.pool_from(manager, timeout, server).await
    }

    /// The pool's manager: TLS if set, else plain text.
    fn manager(&self, config: Config) -> Result<Manager> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return tls.manager(config, manager_config());
        }
        Ok(Manager::from_config(config, NoTls, manager_config()))
    }

    /// Connects over TLS, and only over TLS, as [`Tls`] says: the one way
    /// to ask for TLS, for [`connect`](PostgresStoreBuilder::connect) and
    /// [`connect_with`](PostgresStoreBuilder::connect_with). A pool of
    /// your own brings its own TLS setup, so
    /// [`connect_pool`](PostgresStoreBuilder::connect_pool) refuses a
    /// builder with this set rather than ignore it.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, tls: Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    async fn pool_from(
        self,
        manager: Manager,
        timeout: Duration,
        server: Option<String>,
    ) -> Result<PostgresStore> {
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(timeout))
            .build()
            .map_err(open_error)?;
        self.open_on(pool, server).await
    }

    /// Opens the store on your own pool (any TLS setup, any pool size).
    ///
    /// # Errors
    ///
    /// As [`PostgresStoreBuilder::connect`]; also [`Error::Open`] if
    /// [`tls`](PostgresStoreBuilder::tls) was set: the pool's connections
    /// are made as the pool says, so it would not be obeyed.
    ///
    /// [`Error::Open`]: backfill_core::Error::Open
    pub async fn connect_pool(self, pool: Pool) -> Result<PostgresStore> {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return Err(open_error(
                "tls is for the connections this builder makes; a pool passed to \
                 connect_pool makes its own (set TLS up on the pool, or use connect)",
            ));
        }
        self.open_on(pool, None).await
    }

    async fn open_on(self, pool: Pool, server: Option<String>) -> Result<PostgresStore> {
        self.check_names()?;
        let columns = Columns::new(self.columns.clone())?;
        let (schema, name) = (self.schema.as_str(), self.table.as_str());
        let mut client = pool.get().await.map_err(|e| match e {
            PoolError::Timeout(_) => no_answer(create_timeout(&pool)),
            e => open_error(crate::error::unpooled(e, server.as_deref())),
        })?;
        let tx = client.transaction().await.map_err(open_error)?;
        migrate::prepare(
            &tx,
            schema,
            name,
            &columns,
            (self.create_if_missing, self.column_changes),
            self.fill_factor,
        )
        .await?;
        let history = crate::history::prepare(
            &tx,
            schema,
            name,
            &columns,
            self.history,
            (self.create_if_missing, self.column_changes),
        )
        .await?;
        tx.commit().await.map_err(open_error)?;
        let timings = keeps_timings(&client, schema, self.create_if_missing).await?;
        drop(client);
        Ok(PostgresStore {
            pool,
            sql: Arc::new(Statements::new(schema, name, &columns, history.on, timings)),
            history_started_with: history.started_with,
            page_rows: self.page_rows,
            page_bytes: self.page_bytes,
            columns: Arc::new(columns),
            server: server.map(Into::into),
        })
    }

    fn check_names(&self) -> Result<()> {
        check_identifier("schema", &self.schema)?;
        check_identifier("table", &self.table)?;
        // The schema's metadata tables cannot also hold records.
        if [
            sql::TABLES_TABLE,
            sql::DAYS_TABLE,
            sql::ACCEPTED_TABLE,
            sql::TIMINGS_TABLE,
        ]
        .contains(&self.table.as_str())
        {
            return Err(Error::InvalidName {
                what: "table",
                name: self.table.clone(),
            });
        }
        Ok(())
    }
}

/// The timeout a connection of `pool` timed out under (a pool of the
/// caller's may have no create timeout, only a wait timeout).
fn create_timeout(pool: &Pool) -> Duration {
    let timeouts = pool.timeouts();
    timeouts.create.or(timeouts.wait).unwrap_or_default()
}

fn manager_config() -> ManagerConfig {
    ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_pool_refuses_tls_it_could_not_obey() {
        // Building a pool connects nothing: the refusal comes first.
        let manager = Manager::from_config(Config::new(), NoTls, manager_config());
        let pool = Pool::builder(manager).build().unwrap();
        match PostgresStoreBuilder::default()
            .tls(Tls::new())
            .connect_pool(pool)
            .await
        {
            Err(e @ Error::Open { .. }) => assert!(e.to_string().contains("connect_pool"), "{e}"),
            other => panic!("expected Open, got {other:?}"),
        }
    }
}

/// Whether the store keeps the days' timings ([`sql::TIMINGS_TABLE`] of
/// `schema`): made here when missing if the store may create what is
/// missing and the role may create tables in the schema, and used when the
/// role may read and write it. Timings are a convenience: a role without
/// those rights opens the store, reads and writes without them.
async fn keeps_timings(
    client: &tokio_postgres::Client,
    schema: &str,
    create: bool,
) -> Result<bool> {
    let table = sql::qualified(schema, sql::TIMINGS_TABLE);
    let usable = || async {
        client
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL AND has_table_privilege($1, 'SELECT') \
                 AND has_table_privilege($1, 'INSERT') AND has_table_privilege($1, 'UPDATE')",
                &[&table],
            )
            .await
            .map(|row| row.get::<_, Option<bool>>(0) == Some(true))
            .map_err(open_error)
    };
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .map_err(open_error)?
        .get(0);
    if exists || !create {
        return usable().await;
    }
    let may: bool = client
        .query_one("SELECT has_schema_privilege($1, 'CREATE')", &[&schema])
        .await
        .map_err(open_error)?
        .get(0);
    if !may {
        return Ok(false);
    }
    // Two processes opening a new schema at once may both try: the loser's
    // error leaves the winner's table.
    let _ = client.batch_execute(&sql::create_timings(schema)).await;
    usable().await
}
