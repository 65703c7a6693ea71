//! History ([`backfill_core::history`]) as Postgres keeps it, beside the
//! records table `t`:
//!
//! - `"t:versions"`: every version, one row per `(key, updated_at)`, with
//!   `absent_from`, the earliest listing of its day at or after it that
//!   lacked it;
//! - `"t:listings"`: every listing instant of every day;
//! - the view `t_history` people query: each version with `valid_from`
//!   and `valid_to`, a listing's delete as a tombstone row at its instant.
//!
//! The `:` keeps the tables' names apart from every records table's (a
//! records table's name has none); the view's is the one name a person
//! types. Opening creates them when history is asked for, checks them
//! when they exist, and starts history from the table's rows when it
//! turns it on.

use backfill_core::Result;
use deadpool_postgres::Transaction;

use crate::error::open_error;
use crate::sql::{self, qualified, DAYS_TABLE};

/// The most bytes a records table's name may have with history on: the
/// longest name derived from it, `"{table}:versions"`, must still be a
/// Postgres identifier (63 bytes).
pub(crate) const MAX_TABLE_BYTES: usize = 63 - ":versions".len();

/// `"{table}:versions"`.
pub(crate) fn versions_name(table: &str) -> String {
    format!("{table}:versions")
}

/// `"{table}:listings"`.
pub(crate) fn listings_name(table: &str) -> String {
    format!("{table}:listings")
}

/// `{table}_history`: the view.
pub(crate) fn view_name(table: &str) -> String {
    format!("{table}_history")
}

/// The tables' and the view's columns as the catalog reports them:
/// `(name, type, not null, collation)`.
type Shape = &'static [(&'static str, &'static str, bool, &'static str)];

const VERSIONS_SHAPE: Shape = &[
    ("key", "text", true, "C"),
    ("event_date", "date", true, ""),
    ("value", "text", true, "C"),
    ("updated_at", "timestamp with time zone", true, ""),
    ("deleted", "boolean", true, ""),
    ("absent_from", "timestamp with time zone", false, ""),
];

const LISTINGS_SHAPE: Shape = &[
    ("day", "date", true, ""),
    ("as_of", "timestamp with time zone", true, ""),
];

const VIEW_SHAPE: Shape = &[
    ("key", "text", false, "C"),
    ("event_date", "date", false, ""),
    ("value", "text", false, "C"),
    ("updated_at", "timestamp with time zone", false, ""),
    ("valid_from", "timestamp with time zone", false, ""),
    ("valid_to", "timestamp with time zone", false, ""),
    ("deleted", "boolean", false, ""),
];

fn create_versions(schema: &str, table: &str) -> String {
    let [(_, key), (_, event_date), (_, updated_at)] = sql::checks();
    format!(
        r#"CREATE TABLE IF NOT EXISTS {t} (
    key         text COLLATE "C" NOT NULL CHECK ({key}),
    event_date  date NOT NULL CHECK ({event_date}),
    value       text COLLATE "C" NOT NULL,
    updated_at  timestamptz NOT NULL CHECK ({updated_at}),
    deleted     boolean NOT NULL,
    absent_from timestamptz NULL,
    PRIMARY KEY (key, updated_at),
    CHECK ({tombstone})
)"#,
        t = qualified(schema, &versions_name(table)),
        tombstone = sql::TOMBSTONE_CHECK,
    )
}

/// A listing finds its day's versions by this index, in key order (a
/// streamed listing's pages each a key range).
fn create_versions_index(schema: &str, table: &str) -> String {
    format!(
        r#"CREATE INDEX IF NOT EXISTS "{table}:versions:day" ON {t} (event_date, key)"#,
        t = qualified(schema, &versions_name(table)),
    )
}

fn create_listings(schema: &str, table: &str) -> String {
    format!(
        r#"CREATE TABLE IF NOT EXISTS {t} (
    day   date NOT NULL,
    as_of timestamptz NOT NULL,
    PRIMARY KEY (day, as_of)
)"#,
        t = qualified(schema, &listings_name(table)),
    )
}

/// The view: [`backfill_core::history::history_of`] in SQL.
fn create_view(schema: &str, table: &str) -> String {
    format!(
        r#"CREATE VIEW {view} AS
WITH v AS (
    SELECT key, event_date, value, updated_at, deleted,
        CASE WHEN NOT deleted AND absent_from IS NOT NULL
                AND (next_at IS NULL OR absent_from < next_at)
            THEN absent_from END AS closed_at,
        next_at
    FROM (SELECT h.*, lead(h.updated_at) OVER (PARTITION BY h.key ORDER BY h.updated_at)
              AS next_at
          FROM {versions} h) AS w)
SELECT key, event_date, value, updated_at, updated_at AS valid_from,
    coalesce(closed_at, next_at) AS valid_to, deleted
FROM v WHERE closed_at IS NULL OR closed_at > updated_at
UNION ALL
SELECT key, event_date, ''::text COLLATE "C", closed_at, closed_at, next_at, true
FROM v WHERE closed_at IS NOT NULL"#,
        view = qualified(schema, &view_name(table)),
        versions = qualified(schema, &versions_name(table)),
    )
}

/// What a store that keeps history runs.
#[derive(Debug)]
pub(crate) struct HistoryStatements {
    /// A page's versions (`$1`–`$5`: keys, dates, values, instants,
    /// tombstone flags) new to history, in key order; a version history
    /// holds already, or one of its instant that supersedes it, is not
    /// touched (not even locked).
    pub(crate) insert: String,
    /// A listing of day `$1` as of `$2`: the day's versions in the key
    /// range `($3, $4]` (NULL: unbounded) not among the listing's
    /// versions there (`$5` keys, `$6` instants) are absent from `$2` on,
    /// unless an earlier listing lacked them first.
    pub(crate) lacked: String,
    /// A listing of day `$1` as of `$2`, kept.
    pub(crate) listing: String,
    /// Every row of the view, by key and `valid_from`.
    pub(crate) all: String,
    /// The live rows valid at `$1`, by key.
    pub(crate) as_of: String,
}

impl HistoryStatements {
    pub(crate) fn new(schema: &str, table: &str) -> Self {
        let versions = qualified(schema, &versions_name(table));
        let listings = qualified(schema, &listings_name(table));
        let view = qualified(schema, &view_name(table));
        Self {
            insert: format!(
                r#"
INSERT INTO {versions} AS h (key, event_date, value, updated_at, deleted, absent_from)
SELECT i.key, i.event_date, i.value, i.updated_at, i.deleted,
       (SELECT min(l.as_of) FROM {listings} l
        WHERE l.day = i.event_date AND l.as_of >= i.updated_at)
FROM (SELECT u.key COLLATE "C" AS key, u.event_date, u.value COLLATE "C" AS value,
             u.updated_at, u.deleted
      FROM unnest($1::text[], $2::date[], $3::text[], $4::timestamptz[], $5::bool[])
          AS u(key, event_date, value, updated_at, deleted)) AS i
WHERE NOT EXISTS (
    SELECT 1 FROM {versions} v
    WHERE v.key = i.key AND v.updated_at = i.updated_at
      AND (v.deleted, v.value, v.event_date) >= (i.deleted, i.value, i.event_date))
ORDER BY i.key
ON CONFLICT (key, updated_at) DO UPDATE SET
    event_date = EXCLUDED.event_date, value = EXCLUDED.value, deleted = EXCLUDED.deleted,
    absent_from = CASE WHEN EXCLUDED.event_date = h.event_date
        THEN h.absent_from ELSE EXCLUDED.absent_from END
WHERE (EXCLUDED.deleted, EXCLUDED.value, EXCLUDED.event_date)
    > (h.deleted, h.value, h.event_date)"#
            ),
            lacked: format!(
                r#"
UPDATE {versions} AS h SET absent_from = $2::timestamptz
WHERE h.event_date = $1::date AND h.updated_at <= $2::timestamptz
  AND (h.absent_from IS NULL OR h.absent_from > $2::timestamptz)
  AND ($3::text IS NULL OR h.key > $3::text COLLATE "C")
  AND ($4::text IS NULL OR h.key <= $4::text COLLATE "C")
  AND NOT EXISTS (
      SELECT 1 FROM unnest($5::text[], $6::timestamptz[]) AS l(key, updated_at)
      WHERE l.key COLLATE "C" = h.key AND l.updated_at = h.updated_at)"#
            ),
            listing: format!(
                "INSERT INTO {listings} (day, as_of) VALUES ($1::date, $2::timestamptz) \
                 ON CONFLICT DO NOTHING"
            ),
            all: format!(
                "SELECT key, event_date, value, updated_at, deleted, valid_to FROM {view} \
                 ORDER BY key, valid_from"
            ),
            as_of: format!(
                "SELECT key, event_date, value, updated_at, deleted FROM {view} \
                 WHERE valid_from <= $1 AND (valid_to IS NULL OR valid_to > $1) AND NOT deleted \
                 ORDER BY key"
            ),
        }
    }
}

/// Whether the table keeps history, and whether this open turned it on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HistoryOpened {
    /// The table keeps history: the store writes it.
    pub(crate) on: bool,
    /// This open turned it on, with one version for each of this many
    /// rows the table held.
    pub(crate) started_with: Option<u64>,
}

/// Which of the history objects exist, and of what kind (`pg_class.relkind`).
#[derive(Debug, Default)]
struct Present {
    versions: Option<i8>,
    listings: Option<i8>,
    view: Option<i8>,
    index: bool,
}

async fn present(tx: &Transaction<'_>, schema: &str, table: &str) -> Result<Present> {
    let names = [versions_name(table), listings_name(table), view_name(table)];
    let rows = tx
        .query(
            "SELECT c.relname::text, c.relkind::\"char\" FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = ANY($2::text[])",
            &[&schema, &names.as_slice()],
        )
        .await
        .map_err(open_error)?;
    let mut found = Present::default();
    for row in rows {
        let (name, kind): (String, i8) = (row.get(0), row.get(1));
        match name {
            n if n == names[0] => found.versions = Some(kind),
            n if n == names[1] => found.listings = Some(kind),
            _ => found.view = Some(kind),
        }
    }
    if found.versions.is_some() {
        found.index = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'i')",
                &[&schema, &format!("{table}:versions:day")],
            )
            .await
            .map_err(open_error)?
            .get(0);
    }
    Ok(found)
}

/// Checks that the relation `name` is of kind `kind` with the columns of
/// `shape`, and (for a table) the primary key `key`.
async fn verify(
    tx: &Transaction<'_>,
    schema: &str,
    name: &str,
    found: i8,
    kind: u8,
    shape: Shape,
    key: &[&str],
) -> Result<()> {
    let t = qualified(schema, name);
    let what = if kind == b'v' { "view" } else { "table" };
    if found != kind as i8 {
        return Err(open_error(format!(
            "{t} is not the history {what} the store keeps there (another kind of relation has \
             its name): rename it, or keep this table's records under another name"
        )));
    }
    let rows = tx
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, \
                    coalesce(co.collname::text, '') \
             FROM pg_attribute a \
             LEFT JOIN pg_collation co ON co.oid = a.attcollation \
                 AND a.attcollation <> 0 AND co.collname <> 'default' \
             WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&t],
        )
        .await
        .map_err(open_error)?;
    let got: Vec<(String, String, bool, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let expected: Vec<(String, String, bool, String)> = shape
        .iter()
        .map(|&(n, ty, nn, co)| (n.to_owned(), ty.to_owned(), nn, co.to_owned()))
        .collect();
    if got != expected {
        let describe = |cols: &[(String, String, bool, String)]| {
            cols.iter()
                .map(|(n, ty, nn, co)| {
                    let mut d = format!("{n} {ty}");
                    if !co.is_empty() {
                        d.push_str(&format!(" COLLATE \"{co}\""));
                    }
                    if *nn {
                        d.push_str(" NOT NULL");
                    }
                    d
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(open_error(format!(
            "{t} is not the history {what} the store keeps: it has ({}) where the store's has \
             ({})",
            describe(&got),
            describe(&expected)
        )));
    }
    if !key.is_empty() {
        let pk: Option<Vec<String>> = tx
            .query_one(
                "SELECT array_agg(a.attname::text ORDER BY k.ord) \
                 FROM pg_index i \
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = $1::text::regclass AND i.indisprimary",
                &[&t],
            )
            .await
            .map_err(open_error)?
            .get(0);
        if pk.as_deref().unwrap_or_default() != key {
            return Err(open_error(format!(
                "{t} is not the history table the store keeps: its primary key is not ({})",
                key.join(", ")
            )));
        }
    }
    Ok(())
}

/// Checks the history objects of `schema`.`table` where they exist and,
/// when history is `wanted` or on already (its versions table exists),
/// creates what is missing (if `create`), starting history from the
/// table's rows when its versions table is new. Runs in opening's
/// transaction, after the records table is in place.
///
/// # Errors
///
/// [`Error::Open`](backfill_core::Error::Open) for an object of another
/// shape, a table name too long for the history names, something missing
/// that may not be created, or the server's error.
pub(crate) async fn prepare(
    tx: &Transaction<'_>,
    schema: &str,
    table: &str,
    wanted: bool,
    create: bool,
) -> Result<HistoryOpened> {
    let mut found = present(tx, schema, table).await?;
    if !wanted && found.versions.is_none() && found.listings.is_none() {
        return Ok(HistoryOpened::default());
    }
    if table.len() > MAX_TABLE_BYTES {
        return Err(open_error(format!(
            "table \"{table}\" is too long a name to keep history beside it (at most \
             {MAX_TABLE_BYTES} bytes: history's tables are \"{table}:versions\" and \
             \"{table}:listings\")"
        )));
    }
    check(tx, schema, table, &found).await?;
    if found.versions.is_some() && found.listings.is_some() && found.view.is_some() && found.index {
        return Ok(HistoryOpened {
            on: true,
            started_with: None,
        });
    }
    if !create {
        return Err(open_error(format!(
            "table {} keeps no history yet, or only part of it is there (\"{}\", \"{}\", the \
             view {} and its index), and this store may not create it \
             (create_if_missing(false)): open it once with create_if_missing(true)",
            qualified(schema, table),
            versions_name(table),
            listings_name(table),
            view_name(table),
        )));
    }
    // Under the schema's creation lock, looked at again.
    tx.execute(sql::CREATE_LOCK, &[&format!("backfill:{schema}")])
        .await
        .map_err(open_error)?;
    found = present(tx, schema, table).await?;
    check(tx, schema, table, &found).await?;
    let started = found.versions.is_none();
    let ddl_error = |what: String| {
        move |e: tokio_postgres::Error| {
            open_error(format!(
                "cannot create {what}: {}",
                e.as_db_error()
                    .map_or_else(|| e.to_string(), ToString::to_string)
            ))
        }
    };
    if found.versions.is_none() {
        tx.batch_execute(&create_versions(schema, table))
            .await
            .map_err(ddl_error(versions_name(table)))?;
    }
    if found.listings.is_none() {
        tx.batch_execute(&create_listings(schema, table))
            .await
            .map_err(ddl_error(listings_name(table)))?;
    }
    tx.batch_execute(&create_versions_index(schema, table))
        .await
        .map_err(ddl_error(format!("{table}:versions:day")))?;
    if found.view.is_none() {
        tx.batch_execute(&create_view(schema, table))
            .await
            .map_err(ddl_error(view_name(table)))?;
    }
    let mut started_with = None;
    if started {
        let versions = qualified(schema, &versions_name(table));
        let seeded = tx
            .execute(
                &format!(
                    "INSERT INTO {versions} (key, event_date, value, updated_at, deleted) \
                     SELECT key, event_date, value, updated_at, deleted FROM {}",
                    qualified(schema, table)
                ),
                &[],
            )
            .await
            .map_err(open_error)?;
        tx.execute(
            &format!(
                "INSERT INTO {} (day, as_of) SELECT day, listing_watermark FROM {} \
                 WHERE records_table = $1 AND listing_watermark IS NOT NULL \
                 ON CONFLICT DO NOTHING",
                qualified(schema, &listings_name(table)),
                qualified(schema, DAYS_TABLE)
            ),
            &[&table],
        )
        .await
        .map_err(open_error)?;
        started_with = Some(seeded);
    }
    found = present(tx, schema, table).await?;
    check(tx, schema, table, &found).await?;
    Ok(HistoryOpened {
        on: true,
        started_with,
    })
}

/// Checks each history object that exists.
async fn check(tx: &Transaction<'_>, schema: &str, table: &str, found: &Present) -> Result<()> {
    if let Some(kind) = found.versions {
        let name = versions_name(table);
        verify(
            tx,
            schema,
            &name,
            kind,
            b'r',
            VERSIONS_SHAPE,
            &["key", "updated_at"],
        )
        .await?;
    }
    if let Some(kind) = found.listings {
        let name = listings_name(table);
        verify(
            tx,
            schema,
            &name,
            kind,
            b'r',
            LISTINGS_SHAPE,
            &["day", "as_of"],
        )
        .await?;
    }
    if let Some(kind) = found.view {
        verify(tx, schema, &view_name(table), kind, b'v', VIEW_SHAPE, &[]).await?;
    }
    Ok(())
}
