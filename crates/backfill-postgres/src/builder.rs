//! [`PostgresStoreBuilder`]: names, page sizes, the pool, TLS, and opening
//! (creating only what is missing, checking what exists).

use std::fmt;
use std::sync::Arc;

use backfill_core::adapter::check_identifier;
use backfill_core::{Error, Result};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Transaction};
use tokio_postgres::{Config, NoTls};

use crate::error::open_error;
use crate::schema::{self, Found, Shape};
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
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        use tokio_postgres::config::SslMode;

        self.check_names()?;
        let mut config: Config = url.parse().map_err(open_error)?;
        if config.get_ssl_mode() == SslMode::Disable {
            return Err(open_error(
                "connect_tls requires TLS, but the connection string says sslmode=disable \
                 (use connect for a plain-text connection)",
            ));
        }
        config.ssl_mode(SslMode::Require);
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
        for pem in &self.root_pems {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert =
                    cert.map_err(|e| open_error(format!("unreadable root certificate PEM: {e}")))?;
                roots.add(cert).map_err(open_error)?;
            }
        }
        if roots.is_empty() {
            return Err(open_error("no root certificate to verify the server with"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(open_error)?
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
        let mut client = pool.get().await.map_err(open_error)?;
        let tx = client.transaction().await.map_err(open_error)?;
        tx.batch_execute(sql::DEPARSE_SETTINGS)
            .await
            .map_err(open_error)?;
        let (schema, name) = (self.schema.as_str(), self.table.as_str());
        let mut found = schema::inspect(&*tx, schema, name)
            .await
            .map_err(open_error)?;
        // Tables of another shape, or of a newer release, are refused
        // before anything is created or upgraded beside them.
        check(schema, name, &found)?;
        if !found.complete() {
            if !self.create_if_missing {
                return Err(open_error(missing(schema, name, &found)));
            }
            // Concurrent first opens would race to create the same things;
            // an advisory lock held to the end of the transaction serialises
            // them, and the catalog is read again under it.
            tx.execute(sql::CREATE_LOCK, &[&format!("backfill:{schema}")])
                .await
                .map_err(open_error)?;
            found = schema::inspect(&*tx, schema, name)
                .await
                .map_err(open_error)?;
            check(schema, name, &found)?;
            create_or_upgrade(&tx, schema, name, &found).await?;
            // What exists now must be what the store creates, index and
            // version included.
            found = schema::inspect(&*tx, schema, name)
                .await
                .map_err(open_error)?;
            check(schema, name, &found)?;
            if !found.complete() {
                return Err(open_error(missing(schema, name, &found)));
            }
        }
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

/// Refuses what may not be opened, created beside or upgraded: a schema
/// version newer than this release's, and any table of another shape than
/// the one its version has.
fn check(schema: &str, name: &str, found: &Found) -> Result<()> {
    let newer = |version: i32, what: String| {
        open_error(format!(
            "{what} is at schema version {version}, newer than this release of \
             backfill-postgres knows (version {}); use a newer release",
            sql::SCHEMA_VERSION
        ))
    };
    let t = sql::qualified(schema, name);
    if let Some(version) = found.version.filter(|v| *v > sql::SCHEMA_VERSION) {
        return Err(newer(version, format!("table {t}")));
    }
    if let Some(newest) = found.newest.filter(|v| *v > sql::SCHEMA_VERSION) {
        return Err(newer(newest, format!("a table of schema \"{schema}\"")));
    }
    for (relation, table, shape) in [
        (sql::TABLES_TABLE, &found.tables, Shape::Tables),
        (sql::DAYS_TABLE, &found.days, found.days_shape()),
        (name, &found.table, found.table_shape()),
    ] {
        if let Some(table) = table {
            schema::verify(schema, relation, table, shape).map_err(open_error)?;
        }
    }
    Ok(())
}

/// Creates what is missing and upgrades what is old, under the creation
/// lock, in the open's transaction: all of it commits or none.
async fn create_or_upgrade(
    tx: &Transaction<'_>,
    schema: &str,
    name: &str,
    found: &Found,
) -> Result<()> {
    // An upgrade names what went wrong: typically a role that may not run
    // DDL on a table it did not create, or a read-only server.
    let upgrade_error = |e: tokio_postgres::Error| {
        open_error(Upgrade {
            table: sql::qualified(schema, name),
            from: found.table_version().unwrap_or(sql::SCHEMA_VERSION),
            source: e,
        })
    };
    let upgrading = found
        .table_version()
        .is_some_and(|v| v < sql::SCHEMA_VERSION);
    let ddl = |e| {
        if upgrading {
            upgrade_error(e)
        } else {
            open_error(e)
        }
    };
    if !found.schema {
        tx.batch_execute(&sql::create_schema(schema))
            .await
            .map_err(ddl)?;
    }
    if found.tables.is_none() {
        tx.batch_execute(&sql::create_tables_table(schema))
            .await
            .map_err(ddl)?;
    }
    if found.days.is_none() {
        tx.batch_execute(&sql::create_days_table(schema))
            .await
            .map_err(ddl)?;
    } else if found.days_need_ledger() {
        // The schema's shared `backfill_days` gets the ledger's columns
        // once: under the lock, the catalog read again shows whether an
        // open of another records table already added them.
        tx.batch_execute(&sql::upgrade_days_2_to_3(schema))
            .await
            .map_err(|e| {
                open_error(Upgrade {
                    table: sql::qualified(schema, sql::DAYS_TABLE),
                    from: 2,
                    source: e,
                })
            })?;
    }
    match found.table_version() {
        // A table made by someone else in the current shape: registered.
        None if found.table.is_some() => {}
        None => {
            tx.batch_execute(&sql::create_table(schema, name))
                .await
                .map_err(open_error)?;
            // Watermarks left by a dropped table of the same name would
            // delete the new table's rows.
            tx.execute(&sql::forget_days(schema), &[&name])
                .await
                .map_err(open_error)?;
        }
        Some(version) => {
            // One step per version, so the next one adds an arm.
            for step in version..sql::SCHEMA_VERSION {
                match step {
                    1 => tx
                        .batch_execute(&sql::upgrade_1_to_2(schema, name))
                        .await
                        .map_err(upgrade_error)?,
                    // The records table itself is unchanged: its ledger
                    // lives in the shared `backfill_days`, upgraded above.
                    2 => {}
                    _ => unreachable!("no schema version {step}"),
                }
            }
        }
    }
    if !found.table.as_ref().is_some_and(|t| t.event_date_index) {
        tx.batch_execute(&sql::create_index(schema, name))
            .await
            .map_err(ddl)?;
    }
    if found.version != Some(sql::SCHEMA_VERSION) {
        tx.execute(&sql::register(schema), &[&name, &sql::SCHEMA_VERSION])
            .await
            .map_err(ddl)?;
    }
    Ok(())
}

/// Why upgrading a table failed.
#[derive(Debug)]
struct Upgrade {
    table: String,
    from: i32,
    source: tokio_postgres::Error,
}

impl fmt::Display for Upgrade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "table {} is at schema version {} and upgrading it in place to version {} failed; \
             open it once with a role that may run DDL on it (its owner) on a writable server",
            self.table,
            self.from,
            sql::SCHEMA_VERSION
        )
    }
}

impl std::error::Error for Upgrade {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// What is missing, and how to get it, for an `Error::Open`.
fn missing(schema: &str, table: &str, found: &Found) -> String {
    let t = sql::qualified(schema, table);
    let why = "and this store may not create it (create_if_missing(false))";
    if !found.schema {
        format!("schema \"{schema}\" does not exist, {why}")
    } else if found.table.is_none() {
        format!("table {t} does not exist, {why}")
    } else if let Some(version) = found.table_version().filter(|v| *v < sql::SCHEMA_VERSION) {
        format!(
            "table {t} is at schema version {version} and must be upgraded in place to version {}, \
             which this store may not do (create_if_missing(false)); open it once with a role \
             that may run DDL on it (its owner) and create_if_missing(true)",
            sql::SCHEMA_VERSION
        )
    } else if found.days_need_ledger() {
        format!(
            "table {} lacks the columns of the day ledger (schema version 3), {}; add them \
             with `{}`",
            sql::qualified(schema, sql::DAYS_TABLE),
            "and this store may not add them (create_if_missing(false))",
            sql::upgrade_days_2_to_3(schema)
        )
    } else if found.tables.is_none() || found.days.is_none() {
        let which = if found.tables.is_none() {
            sql::TABLES_TABLE
        } else {
            sql::DAYS_TABLE
        };
        format!(
            "table {} does not exist, {why}; create it with `{}`",
            sql::qualified(schema, which),
            if found.tables.is_none() {
                sql::create_tables_table(schema)
            } else {
                sql::create_days_table(schema)
            }
        )
    } else if found.version.is_none() {
        format!(
            "table {t} has no schema version in {}, {why}; record it with \
             `INSERT INTO {} (records_table, schema_version) VALUES ('{table}', {})`",
            sql::qualified(schema, sql::TABLES_TABLE),
            sql::qualified(schema, sql::TABLES_TABLE),
            sql::SCHEMA_VERSION
        )
    } else {
        format!(
            "table {t} has no index on (event_date), {why}; create one with `{}`",
            sql::create_index(schema, table)
        )
    }
}

fn manager_config() -> ManagerConfig {
    ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    }
}
