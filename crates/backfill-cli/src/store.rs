//! Opening a store from its URL, and showing a URL without its password.

use std::path::{Path, PathBuf};

use backfill_core::columns::Column;
use backfill_core::Store;
use backfill_postgres::tokio_postgres::error::SqlState;
use backfill_postgres::{PostgresStore, Tls};
use backfill_sqlite::SqliteStore;

use crate::args::StoreArgs;
use crate::Failure;

/// A store URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: a database file (relative to the working directory
    /// unless it starts with `/`).
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`, as given.
    Postgres(String),
    /// `delta://PATH` (a local directory, relative to the working
    /// directory unless it starts with `/`) or `delta+file:///PATH`: a
    /// Delta Lake table, as delta-rs names its location (`PATH`,
    /// `file:///PATH`).
    Delta(String),
}

/// Why a URL names no store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (store URL: {shown})")]
pub struct BadUrl {
    message: String,
    shown: String,
}

impl StoreUrl {
    /// Parses `sqlite://PATH`, `postgres://…` or `postgresql://…`.
    ///
    /// # Errors
    ///
    /// Any other form, with the URL shown without its password.
    pub fn parse(url: &str) -> Result<Self, BadUrl> {
        let bad = |message: &str| BadUrl {
            message: message.to_owned(),
            shown: redact(url),
        };
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(bad("no database path after sqlite://"));
            }
            if path.contains('\0') {
                return Err(bad("the database path contains a NUL character"));
            }
            return Ok(StoreUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(url.to_owned()));
        }
        if let Some(path) = url.strip_prefix("delta://") {
            if path.is_empty() {
                return Err(bad("no table directory after delta://"));
            }
            return Ok(StoreUrl::Delta(path.to_owned()));
        }
        if let Some(location) = url.strip_prefix("delta+") {
            let (scheme, rest) = location.split_once("://").unwrap_or_default();
            return match scheme {
                "file" => Ok(StoreUrl::Delta(location.to_owned())),
                "s3" | "s3a" if !rest.starts_with('/') && !rest.is_empty() => {
                    Ok(StoreUrl::Delta(location.to_owned()))
                }
                "s3" | "s3a" => Err(bad("no bucket after delta+s3://")),
                _ => Err(bad(
                    "a Delta table is delta://PATH or delta+file:///PATH (a local directory) \
                     or delta+s3://BUCKET/PATH (S3 and S3-compatible storage)",
                )),
            };
        }
        // A SQLite URL with one slash too few, or a bare path: say what
        // was meant.
        let path = url.strip_prefix("sqlite:").or_else(|| {
            // No scheme: `x.db`, `/srv/x.db`, `./data/x.db`, but not
            // `postgres:/h`.
            let scheme = url.split('/').next().unwrap_or_default().contains(':');
            (!url.contains("://") && !url.is_empty() && !scheme).then_some(url)
        });
        if let Some(path) = path.filter(|p| !p.is_empty() && !p.starts_with("//")) {
            let hint = if path.starts_with('/') {
                format!("sqlite://{path}")
            } else {
                format!("sqlite://{path} (relative to the working directory; sqlite:///abs/path.db for an absolute path)")
            };
            let what = if url.starts_with("sqlite:") {
                "a SQLite URL has two slashes before its path"
            } else {
                "not a store URL"
            };
            return Err(bad(&format!("{what}: for this SQLite file, write {hint}")));
        }
        Err(bad(
            "unsupported store: expected sqlite://PATH, postgres://USER:PASSWORD@HOST/DB \
             or delta://PATH",
        ))
    }

    /// Whether Postgres is asked to use TLS: any `sslmode` but `disable`.
    /// (`prefer` is taken as `require`: this command never falls back to
    /// plain text.)
    fn wants_tls(url: &str) -> bool {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        query.split('&').any(|pair| {
            matches!(
                pair.split_once('='),
                Some((
                    "sslmode",
                    "prefer" | "require" | "verify-ca" | "verify-full"
                ))
            )
        })
    }
}

/// How a store is to be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Create what is missing; write.
    Write { connections: usize },
    /// Read the ledger: create nothing.
    Read,
}

/// The table `args` name, as a metric's label: the table (`schema.table`
/// on Postgres), or a Delta table's location without credentials.
pub(crate) fn table_label(args: &StoreArgs) -> String {
    match StoreUrl::parse(&args.store) {
        Ok(StoreUrl::Postgres(_)) => format!("{}.{}", args.schema, args.table),
        Ok(StoreUrl::Delta(_)) => redact(&args.store),
        _ => args.table.clone(),
    }
}

/// Opens the store `args` name.
pub(crate) async fn open(args: &StoreArgs, access: Access) -> Result<Box<dyn Store>, Failure> {
    let url = StoreUrl::parse(&args.store).map_err(|e| Failure::Config(e.to_string()))?;
    let columns = args.typed_columns().map_err(Failure::Config)?;
    let shown = redact(&args.store);
    let secret = password(&args.store);
    // The driver's message is scrubbed of the password, should it ever
    // quote it; the URL is shown already redacted (scrubbing it again
    // would also hide a user or database that happens to equal it).
    let scrub = |error: &backfill_core::Error, mut text: String| {
        if let Some(secret) = &secret {
            text = text.replace(secret.as_str(), "***");
        }
        Failure::store(error, format!("{text} (store {shown})"))
    };
    match url {
        StoreUrl::Sqlite(path) => {
            if args.tls_root_cert.is_some() {
                return Err(Failure::Config(
                    "--tls-root-cert is for Postgres; this store is SQLite".into(),
                ));
            }
            if args.schema != backfill_postgres::DEFAULT_SCHEMA {
                return Err(Failure::Config(
                    "--schema is for Postgres; this store is SQLite".into(),
                ));
            }
            let mut builder = SqliteStore::builder(&path)
                .table(args.table.as_str())
                .columns(columns)
                .allow_column_changes(args.allow_column_changes && access != Access::Read)
                .history(args.history && access != Access::Read);
            // SQLite's own word for this is "unable to open database file".
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            if let Some(dir) = parent.filter(|dir| !dir.is_dir()) {
                return Err(Failure::Store(format!(
                    "the directory {} does not exist: create it first, or give another path \
                     (store {shown})",
                    dir.display()
                )));
            }
            if access == Access::Read {
                if !path.exists() {
                    return Err(Failure::Store(format!(
                        "no database at {} (nothing has been synced there)",
                        path.display()
                    )));
                }
                builder = builder.read_only(true);
            }
            let store = builder.open().await.map_err(|e| scrub(&e, e.to_string()))?;
            history_started(args, store.history_started_with());
            if access != Access::Read {
                // A database another process holds the write lock on (past
                // the busy timeout) is out of reach now: said before any
                // day is fetched, not once per day.
                store.check_write_lock().await.map_err(|e| {
                    scrub(&e, format!("the database is locked by another writer: {e}"))
                })?;
            }
            Ok(Box::new(store))
        }
        StoreUrl::Postgres(url) => {
            let mut builder = PostgresStore::builder()
                .schema(args.schema.as_str())
                .table(args.table.as_str())
                .columns(columns)
                .allow_column_changes(args.allow_column_changes && access != Access::Read)
                .history(args.history && access != Access::Read);
            match access {
                Access::Write { connections } => builder = builder.pool_size(connections.max(2)),
                Access::Read => builder = builder.create_if_missing(false),
            }
            if StoreUrl::wants_tls(&url) || args.tls_root_cert.is_some() {
                let mut tls = Tls::new();
                if let Some(file) = &args.tls_root_cert {
                    tls = tls.root_certificates_pem(read_pem(file)?);
                }
                builder = builder.tls(tls);
            }
            let store = builder.connect(&url).await.map_err(|error| {
                let text = postgres_text(&error, access);
                scrub(&error, text)
            })?;
            history_started(args, store.history_started_with());
            Ok(Box::new(store))
        }
        StoreUrl::Delta(location) => open_delta(args, access, &location, &columns, &scrub).await,
    }
}

/// Says on stderr that opening turned history on, and from how many rows.
fn history_started(args: &StoreArgs, started_with: Option<u64>) {
    let table = &args.table;
    match started_with {
        Some(0) => eprintln!("history is on for table {table} (the view {table}_history)"),
        Some(rows) => eprintln!(
            "history is on for table {table}: it starts from its {rows} rows, one version \
             each (the view {table}_history)"
        ),
        None => {}
    }
}

/// Opens a Delta table (the `delta` feature).
#[cfg(feature = "delta")]
async fn open_delta(
    args: &StoreArgs,
    access: Access,
    location: &str,
    columns: &[Column],
    scrub: &impl Fn(&backfill_core::Error, String) -> Failure,
) -> Result<Box<dyn Store>, Failure> {
    use backfill_delta::DeltaStore;
    if let Some(option) = not_for_delta(args) {
        return Err(Failure::Config(format!(
            "{option} is not for a Delta table: its URL names the table"
        )));
    }
    let store = match access {
        Access::Write { .. } => {
            DeltaStore::builder(location)
                .columns(columns.iter().cloned())
                .allow_column_changes(args.allow_column_changes)
                .history(args.history)
                .open()
                .await
        }
        // Reading takes the table as it is, its typed columns and history
        // included.
        Access::Read => DeltaStore::open_existing(location, Default::default()).await,
    };
    let store = store.map_err(|e| scrub(&e, e.to_string()))?;
    match store.history_started_with() {
        Some(0) => eprintln!("history is on for the Delta table {}", store.location()),
        Some(rows) => eprintln!(
            "history is on for the Delta table {}: it starts from its {rows} rows, one version \
             each",
            store.location()
        ),
        None => {}
    }
    Ok(Box::new(store))
}

/// Without the `delta` feature, a Delta URL says how to get it.
#[cfg(not(feature = "delta"))]
async fn open_delta(
    _: &StoreArgs,
    _: Access,
    _: &str,
    _: &[Column],
    _: &impl Fn(&backfill_core::Error, String) -> Failure,
) -> Result<Box<dyn Store>, Failure> {
    Err(Failure::Config(
        "this build of backfill has no Delta store: install it with \
         `cargo install backfill-cli --features delta`"
            .into(),
    ))
}

/// The first option given that a Delta table does not take.
#[cfg_attr(not(feature = "delta"), allow(dead_code))]
fn not_for_delta(args: &StoreArgs) -> Option<&'static str> {
    if args.tls_root_cert.is_some() {
        return Some("--tls-root-cert");
    }
    if args.schema != backfill_postgres::DEFAULT_SCHEMA {
        return Some("--schema");
    }
    if args.table != backfill_sqlite::DEFAULT_TABLE {
        return Some("--table");
    }
    None
}

/// A Postgres store's error as this command words it: the server's or the
/// driver's message without the connection pool's ("Error occurred while
/// creating a new object"), and for `status`, a database, schema or table
/// that does not exist said as what it means there.
fn postgres_text(error: &backfill_core::Error, access: Access) -> String {
    let backfill_core::Error::Open { source, .. } = error else {
        return error.to_string();
    };
    // The driver's error, wherever the pool put it, with its causes.
    let driver = backfill_core::text::causes(&**source)
        .find_map(|e| e.downcast_ref::<backfill_postgres::tokio_postgres::Error>());
    let Some(driver) = driver else {
        return read_only_wording(&error.to_string(), access);
    };
    if let Some(db) = driver.as_db_error() {
        let missing_database = *db.code() == SqlState::INVALID_CATALOG_NAME;
        if missing_database && access == Access::Read {
            return format!("{} (nothing has been synced there)", db.message());
        }
        return format!("postgres: cannot open the store: {db}");
    }
    let text = backfill_core::text::Chain(driver);
    format!("postgres: cannot open the store: {text}")
}

/// `status` opens a Postgres store without creating anything; the store
/// says so in the words of its builder (`create_if_missing(false)`), which
/// a user of this command never set.
fn read_only_wording(text: &str, access: Access) -> String {
    const MAY_NOT_CREATE: &str = ", and this store may not create it (create_if_missing(false))";
    if access != Access::Read {
        return text.to_owned();
    }
    if let Some(missing) = text.strip_suffix(MAY_NOT_CREATE) {
        // "schema \"x\" does not exist", "table x.y does not exist"
        return format!("{missing} (nothing has been synced there)");
    }
    text.replace(
        "create_if_missing(false)",
        "`backfill status` creates and upgrades nothing",
    )
    .replace(
        "create_if_missing(true)",
        "run `backfill sync` or `backfill backfill` once",
    )
}

fn read_pem(file: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(file).map_err(|e| {
        Failure::Config(format!(
            "cannot read the root certificate file {}: {e}",
            file.display()
        ))
    })
}

/// The password of a `scheme://user:password@host` URL or of a
/// `password=` parameter, if any.
pub(crate) fn password(url: &str) -> Option<String> {
    backfill_core::lineage::url_password(url)
}

/// The URL with any password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let mut shown = url.to_owned();
    if let Some((scheme, rest)) = url.split_once("://") {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if let Some((userinfo, host)) = authority.rsplit_once('@') {
            if let Some((user, _)) = userinfo.split_once(':') {
                shown = format!("{scheme}://{user}:***@{host}{}", &rest[end..]);
            }
        }
    }
    if let Some((base, query)) = shown.clone().split_once('?') {
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some(("password", _)) => "password=***".to_owned(),
                _ => pair.to_owned(),
            })
            .collect();
        shown = format!("{base}?{}", query.join("&"));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_stores() {
        assert_eq!(
            StoreUrl::parse("sqlite://backfill.db").unwrap(),
            StoreUrl::Sqlite("backfill.db".into())
        );
        assert_eq!(
            StoreUrl::parse("sqlite:///var/lib/x.db").unwrap(),
            StoreUrl::Sqlite("/var/lib/x.db".into())
        );
        assert!(matches!(
            StoreUrl::parse("postgresql://u@h/db").unwrap(),
            StoreUrl::Postgres(_)
        ));
        for (url, location) in [
            ("delta://lake/orders", "lake/orders"),
            ("delta:///srv/lake/orders", "/srv/lake/orders"),
            ("delta+file:///srv/lake/orders", "file:///srv/lake/orders"),
            ("delta+s3://lake/orders", "s3://lake/orders"),
            ("delta+s3a://lake/sales/orders", "s3a://lake/sales/orders"),
        ] {
            assert_eq!(
                StoreUrl::parse(url).unwrap(),
                StoreUrl::Delta(location.into()),
                "{url}"
            );
        }
        for bad in [
            "sqlite://",
            "backfill.db",
            "mysql://u:pw@h/db",
            "",
            "postgres:/h",
            "delta://",
            "delta+http://h/orders",
            "delta+s3:bucket",
            "delta+s3://",
            "delta+s3:///orders",
            "delta+gs://bucket/orders",
        ] {
            assert!(StoreUrl::parse(bad).is_err(), "{bad}");
        }
        let error = StoreUrl::parse("mysql://u:hunter2@h/db")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("hunter2"), "{error}");
        assert!(error.contains("mysql://u:***@h/db"), "{error}");
    }

    #[test]
    fn a_path_or_a_short_sqlite_url_is_told_the_url_to_write() {
        let says = |url: &str| StoreUrl::parse(url).unwrap_err().to_string();
        assert!(says("/var/x.db").contains("write sqlite:///var/x.db"));
        assert!(says("x.db").contains("write sqlite://x.db"));
        assert!(says("sqlite:/var/x.db").contains("write sqlite:///var/x.db"));
        assert!(says("sqlite:x.db").contains("write sqlite://x.db"));
        assert!(says("mysql://h/db").contains("unsupported store"));
        assert!(says("postgres:/h").contains("unsupported store"));
        assert!(says("").contains("unsupported store"));
    }

    #[test]
    fn status_words_a_missing_schema_or_table_as_nothing_synced() {
        let text = "postgres: cannot open the store: schema \"s\" does not exist, and this \
                    store may not create it (create_if_missing(false))";
        assert_eq!(
            read_only_wording(text, Access::Read),
            "postgres: cannot open the store: schema \"s\" does not exist (nothing has been \
             synced there)"
        );
        assert_eq!(
            read_only_wording(text, Access::Write { connections: 2 }),
            text
        );
        let upgrade = read_only_wording(
            "… which this store may not do (create_if_missing(false)); open it once with a \
             role that may run DDL on it (its owner) and create_if_missing(true)",
            Access::Read,
        );
        assert!(!upgrade.contains("create_if_missing"), "{upgrade}");
    }

    #[test]
    fn passwords_are_never_shown() {
        let cases = [
            (
                "postgres://u:hunter2@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            (
                "postgres://u:p%40ss@h/db?sslmode=require",
                "postgres://u:***@h/db?sslmode=require",
            ),
            (
                "postgres://u@h/db?password=hunter2&x=1",
                "postgres://u@h/db?password=***&x=1",
            ),
            ("postgres://u:a@b@h/db", "postgres://u:***@h/db"),
            ("sqlite://data.db", "sqlite://data.db"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown);
        }
        assert_eq!(
            password("postgres://u:hunter2@h/db").as_deref(),
            Some("hunter2")
        );
        assert_eq!(
            password("postgres://u@h/db?password=pw").as_deref(),
            Some("pw")
        );
        assert_eq!(password("postgres://u@h/db"), None);
    }

    #[test]
    fn tls_only_when_the_url_asks_for_it() {
        assert!(StoreUrl::wants_tls("postgres://h/db?sslmode=require"));
        assert!(StoreUrl::wants_tls(
            "postgres://h/db?a=b&sslmode=verify-full"
        ));
        assert!(!StoreUrl::wants_tls("postgres://h/db"));
        assert!(!StoreUrl::wants_tls("postgres://h/db?sslmode=disable"));
        assert!(StoreUrl::wants_tls("postgres://h/db?sslmode=prefer"));
    }
}
