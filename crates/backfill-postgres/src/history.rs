//! History ([`backfill_core::history`]) as Postgres keeps it, beside the
//! records table `t`:
//!
//! - `t` itself: each key's row is its newest version, as delivered;
//! - `"t:versions"`: every other version, with `absent_from`, the
//!   earliest listing of its day at or after it that lacked it: the
//!   versions the table replaced, those it never took (stale, or buried
//!   by a listing's watermark), the live versions a listing turned into
//!   tombstones, and the tombstones a purge removed;
//! - `"t:listings"`: every listing instant of every day;
//! - the view `t_history` people query: each version with `valid_from`
//!   and `valid_to`, a listing's delete as a tombstone row at its instant.
//!
//! One rule joins the two tables: where `"t:versions"` holds a row of a
//! key's instant, it holds the version history keeps for that instant
//! (the one that [supersedes](backfill_core::Record::supersedes) the
//! others); where it holds none, the table's row of that instant is that
//! version, exactly as delivered. So a backfill of new keys writes history
//! nothing but its listings, and a row leaves the table for
//! `"t:versions"` only when the table replaces it (the merge returns the
//! row it replaced) or a purge removes it. History written before this
//! split, a copy of every version, keeps the rule and is read as it is.
//!
//! The `:` keeps the tables' names apart from every records table's (a
//! records table's name has none); the view's is the one name a person
//! types. Opening creates them when history is asked for, checks them
//! when they exist, and starts history from the table's rows when it
//! turns it on.

use backfill_core::columns::Columns;
use backfill_core::{Record, Result};
use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use crate::error::open_error;
use crate::sql::{self, qualified, DAYS_TABLE};
use crate::typed;

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

/// `"{table}:by_key"`: the versions table's index by `(key,
/// updated_at)`, which the view and the writes probe.
pub(crate) fn key_index_name(table: &str) -> String {
    format!("{table}:by_key")
}

/// `{table}_history`: the view.
pub(crate) fn view_name(table: &str) -> String {
    format!("{table}_history")
}

/// A relation's columns as the catalog reports them: `(name, type, not
/// null, collation)`.
type Shape = Vec<(String, String, bool, String)>;

fn shape(columns: &[(&str, &str, bool, &str)], typed: &Columns) -> Shape {
    columns
        .iter()
        .map(|&(n, ty, nn, co)| (n.to_owned(), ty.to_owned(), nn, co.to_owned()))
        // The typed columns last, NULL-able, in the database's collation.
        .chain(typed.iter().map(|c| {
            (
                c.name().to_owned(),
                typed::sql_type(c.column_type()).to_owned(),
                false,
                String::new(),
            )
        }))
        .collect()
}

/// The versions table's own columns, before the typed ones.
const VERSIONS_OWN: [(&str, &str, bool, &str); 6] = [
    ("key", "text", true, "C"),
    ("event_date", "date", true, ""),
    ("value", "text", true, "C"),
    ("updated_at", "timestamp with time zone", true, ""),
    ("deleted", "boolean", true, ""),
    ("absent_from", "timestamp with time zone", false, ""),
];

const LISTINGS_OWN: [(&str, &str, bool, &str); 2] = [
    ("day", "date", true, ""),
    ("as_of", "timestamp with time zone", true, ""),
];

const VIEW_OWN: [(&str, &str, bool, &str); 7] = [
    ("key", "text", false, "C"),
    ("event_date", "date", false, ""),
    ("value", "text", false, "C"),
    ("updated_at", "timestamp with time zone", false, ""),
    ("valid_from", "timestamp with time zone", false, ""),
    ("valid_to", "timestamp with time zone", false, ""),
    ("deleted", "boolean", false, ""),
];

/// What the store's history view says of itself (its comment): a view
/// with it is the store's, remade when the typed columns change; a view of
/// that name without it is someone else's, and refused.
fn view_comment(table: &str) -> String {
    format!("backfill: history of {table}, version 2")
}

/// The comment of the store's first history view, which read every
/// version from the versions table: the store's too, remade.
fn first_view_comment(table: &str) -> String {
    format!("backfill: history of {table}")
}

fn create_versions(schema: &str, table: &str, typed: &Columns) -> String {
    let [(_, key), (_, event_date), (_, updated_at)] = sql::checks();
    let typed: String = typed
        .iter()
        .map(|c| {
            format!(
                "    \"{}\" {} NULL,\n",
                c.name(),
                typed::sql_type(c.column_type())
            )
        })
        .collect();
    format!(
        r#"CREATE TABLE IF NOT EXISTS {t} (
    key         text COLLATE "C" NOT NULL CHECK ({key}),
    event_date  date NOT NULL CHECK ({event_date}),
    value       text COLLATE "C" NOT NULL,
    updated_at  timestamptz NOT NULL CHECK ({updated_at}),
    deleted     boolean NOT NULL,
    absent_from timestamptz NULL,
{typed}    PRIMARY KEY (event_date, key, updated_at),
    CHECK ({tombstone})
)"#,
        t = qualified(schema, &versions_name(table)),
        tombstone = sql::TOMBSTONE_CHECK,
    )
}

fn create_key_index(schema: &str, table: &str) -> String {
    format!(
        r#"CREATE INDEX IF NOT EXISTS "{i}" ON {t} (key, updated_at)"#,
        i = key_index_name(table),
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

/// The view: [`backfill_core::history::history_of`] in SQL over the
/// versions table and the table's rows of the instants it lacks, the
/// typed columns last (`NULL` in a tombstone row); commented as the
/// store's.
fn create_view(schema: &str, table: &str, typed: &Columns) -> String {
    let carried: String = typed
        .iter()
        .map(|c| format!(r#", "{}""#, c.name()))
        .collect();
    let nulls: String = typed
        .iter()
        .map(|c| format!(", NULL::{}", typed::sql_type(c.column_type())))
        .collect();
    format!(
        r#"CREATE VIEW {view} AS
WITH h AS (
    SELECT key, event_date, value, updated_at, deleted, absent_from{carried}
    FROM {versions}
    UNION ALL
    SELECT t.key, t.event_date, t.value, t.updated_at, t.deleted, NULL::timestamptz{carried}
    FROM {records} t
    WHERE NOT EXISTS (SELECT 1 FROM {versions} x
                      WHERE x.key = t.key AND x.updated_at = t.updated_at)
), v AS (
    SELECT key, event_date, value, updated_at, deleted{carried},
        CASE WHEN NOT deleted AND absent_from IS NOT NULL
                AND (next_at IS NULL OR absent_from < next_at)
            THEN absent_from END AS closed_at,
        next_at
    FROM (SELECT d.*, lead(d.updated_at) OVER (PARTITION BY d.key ORDER BY d.updated_at)
              AS next_at
          FROM (SELECT h.*, row_number() OVER (PARTITION BY h.key, h.updated_at
                    ORDER BY h.deleted DESC, h.value DESC, h.event_date DESC) AS nth
                FROM h) AS d
          WHERE d.nth = 1) AS w)
SELECT key, event_date, value, updated_at, updated_at AS valid_from,
    coalesce(closed_at, next_at) AS valid_to, deleted{carried}
FROM v WHERE closed_at IS NULL OR closed_at > updated_at
UNION ALL
SELECT key, event_date, ''::text COLLATE "C", closed_at, closed_at, next_at, true{nulls}
FROM v WHERE closed_at IS NOT NULL;
COMMENT ON VIEW {view} IS '{comment}'"#,
        view = qualified(schema, &view_name(table)),
        versions = qualified(schema, &versions_name(table)),
        records = qualified(schema, table),
        comment = view_comment(table),
    )
}

/// What a store that keeps history runs.
#[derive(Debug)]
pub(crate) struct HistoryStatements {
    /// A page's versions (`$1`–`$7`: keys, dates, values, instants,
    /// tombstone flags, the first listing of each one's day at or after
    /// it, whether the table took it as a tombstone (a listing's
    /// watermark buried it); then one array per typed column) that
    /// history must hold, once the table's rows are written, in key
    /// order: a version of an instant history holds a row of (it may
    /// supersede it), a buried one, and one the table does not hold
    /// (stale: its row is newer). A version history holds
    /// already, or one of its instant and day that supersedes it, is not
    /// touched (not even locked); nor is one that is the table's row.
    pub(crate) insert: String,
    /// The rows the table replaced (`$1`–`$5`, then the typed columns'
    /// arrays), in key order, each unless history holds a row of its
    /// instant already (it holds the version that won there).
    pub(crate) moved: String,
    /// Whether history holds a row of any of the instants `($1 keys, $2
    /// instants)`: one probe of its key index each.
    pub(crate) held: String,
    /// The listing instants of days `$1`, by day and instant.
    pub(crate) listings_of_days: String,
    /// A listing of day `$1` as of `$2`: the day's versions in the key
    /// range `($3, $4]` (NULL: unbounded) not among the listing's
    /// versions there (`$5` keys, `$6` instants) are absent from `$2` on,
    /// unless an earlier listing lacked them first.
    pub(crate) lacked: String,
    /// The same listing's share of the table: a live row of the day, not
    /// newer than `$2`, in the range and not among the listing's versions
    /// (one the listing held an older version of) goes to history absent
    /// from `$2`.
    pub(crate) lacked_live: String,
    /// The rows of keys `$1` that `Statements::unlist` turns into
    /// tombstones (live rows of day `$2` not newer than `$3`), as they are.
    pub(crate) unlisting: String,
    /// A listing of day `$1` as of `$2`, kept.
    pub(crate) listing: String,
    /// Every row of the view, by key and `valid_from`.
    pub(crate) all: String,
    /// The live rows valid at `$1`, by key.
    pub(crate) as_of: String,
}

impl HistoryStatements {
    pub(crate) fn new(schema: &str, table: &str, typed: &Columns) -> Self {
        let versions = qualified(schema, &versions_name(table));
        let listings = qualified(schema, &listings_name(table));
        let records = qualified(schema, table);
        let view = qualified(schema, &view_name(table));
        let names = typed::names(typed);
        let arrays = |from: usize| -> String {
            typed
                .iter()
                .enumerate()
                .map(|(i, c)| format!(", ${}::{}", i + from, typed::array_cast(c.column_type())))
                .collect()
        };
        let aliases: String = (0..typed.len()).map(|i| format!(", tc{i}")).collect();
        let picked: String = (0..typed.len()).map(|i| format!(", i.tc{i}")).collect();
        let carried: String = typed
            .iter()
            .map(|c| format!(r#", t."{}""#, c.name()))
            .collect();
        let set: String = typed
            .iter()
            .map(|c| format!(r#", "{0}" = EXCLUDED."{0}""#, c.name()))
            .collect();
        let incoming = |absent: bool| {
            let (absent_col, absent_arr, from) = match absent {
                true => (
                    ", absent_from, buried",
                    ", $6::timestamptz[], $7::bool[]",
                    8,
                ),
                false => ("", "", 6),
            };
            format!(
                r#"SELECT u.key COLLATE "C" AS key, u.event_date, u.value COLLATE "C" AS value,
             u.updated_at, u.deleted{absent_col}{aliases}
      FROM unnest($1::text[], $2::date[], $3::text[], $4::timestamptz[], $5::bool[]{absent_arr}{arrays})
          AS u(key, event_date, value, updated_at, deleted{absent_col}{aliases})"#,
                arrays = arrays(from),
            )
        };
        Self {
            insert: format!(
                r#"
INSERT INTO {versions} AS h (key, event_date, value, updated_at, deleted, absent_from{names})
SELECT i.key, i.event_date, i.value, i.updated_at, i.deleted, i.absent_from{picked}
FROM ({incoming}) AS i
-- The key's row in the table: one primary-key probe.
LEFT JOIN LATERAL (
    SELECT r.updated_at FROM {records} r WHERE r.key = i.key OFFSET 0
) t ON true
WHERE (i.buried OR t.updated_at IS NULL OR t.updated_at > i.updated_at
       OR EXISTS (SELECT 1 FROM {versions} x
                  WHERE x.key = i.key AND x.updated_at = i.updated_at))
  AND NOT EXISTS (
    SELECT 1 FROM {versions} v
    WHERE v.event_date = i.event_date AND v.key = i.key AND v.updated_at = i.updated_at
      AND (v.deleted, v.value) >= (i.deleted, i.value))
ORDER BY i.key
ON CONFLICT (event_date, key, updated_at) DO UPDATE SET
    value = EXCLUDED.value, deleted = EXCLUDED.deleted{set}
WHERE (EXCLUDED.deleted, EXCLUDED.value) > (h.deleted, h.value)"#,
                incoming = incoming(true),
            ),
            moved: format!(
                r#"
INSERT INTO {versions} (key, event_date, value, updated_at, deleted{names})
SELECT i.key, i.event_date, i.value, i.updated_at, i.deleted{picked}
FROM ({incoming}) AS i
WHERE NOT EXISTS (SELECT 1 FROM {versions} x
                  WHERE x.key = i.key AND x.updated_at = i.updated_at)
ORDER BY i.key
ON CONFLICT DO NOTHING"#,
                incoming = incoming(false),
            ),
            held: format!(
                r#"SELECT EXISTS (
    SELECT 1 FROM unnest($1::text[], $2::timestamptz[]) AS k(key, updated_at)
    CROSS JOIN LATERAL (
        SELECT 1 FROM {versions} x
        WHERE x.key = k.key COLLATE "C" AND x.updated_at = k.updated_at OFFSET 0
    ) s
)"#
            ),
            listings_of_days: format!(
                "SELECT day, as_of FROM {listings} WHERE day = ANY($1::date[]) ORDER BY day, as_of"
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
            lacked_live: format!(
                r#"
INSERT INTO {versions} (key, event_date, value, updated_at, deleted, absent_from{names})
SELECT t.key, t.event_date, t.value, t.updated_at, false, $2::timestamptz{carried}
FROM {records} t
WHERE t.event_date = $1::date AND NOT t.deleted AND t.updated_at <= $2::timestamptz
  AND ($3::text IS NULL OR t.key > $3::text COLLATE "C")
  AND ($4::text IS NULL OR t.key <= $4::text COLLATE "C")
  AND NOT EXISTS (
      SELECT 1 FROM unnest($5::text[], $6::timestamptz[]) AS l(key, updated_at)
      WHERE l.key COLLATE "C" = t.key AND l.updated_at = t.updated_at)
  AND NOT EXISTS (SELECT 1 FROM {versions} x
                  WHERE x.key = t.key AND x.updated_at = t.updated_at)
ORDER BY t.key
ON CONFLICT DO NOTHING"#
            ),
            unlisting: format!(
                "SELECT key, event_date, value, updated_at FROM {records} \
                 WHERE key = ANY($1::text[]) AND event_date = $2 AND NOT deleted \
                 AND updated_at <= $3 ORDER BY key"
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
    key_index: Option<i8>,
}

async fn present(tx: &Transaction<'_>, schema: &str, table: &str) -> Result<Present> {
    let names = [
        versions_name(table),
        listings_name(table),
        view_name(table),
        key_index_name(table),
    ];
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
            n if n == names[2] => found.view = Some(kind),
            _ => found.key_index = Some(kind),
        }
    }
    Ok(found)
}

/// The columns of relation `schema`.`name`, as [`Shape`] has them.
async fn columns_of(tx: &Transaction<'_>, schema: &str, name: &str) -> Result<Shape> {
    let rows = tx
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, \
                    coalesce(co.collname::text, '') \
             FROM pg_attribute a \
             LEFT JOIN pg_collation co ON co.oid = a.attcollation \
                 AND a.attcollation <> 0 AND co.collname <> 'default' \
             WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&qualified(schema, name)],
        )
        .await
        .map_err(open_error)?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect())
}

/// Checks that the relation `name` is of kind `kind` with the columns of
/// `expected`, and (for a table) the primary key `key`.
#[allow(clippy::too_many_arguments)]
async fn verify(
    tx: &Transaction<'_>,
    schema: &str,
    name: &str,
    found: i8,
    kind: u8,
    expected: &Shape,
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
    let got = columns_of(tx, schema, name).await?;
    if &got != expected {
        let describe = |cols: &Shape| {
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
            describe(expected)
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

/// The versions table's typed columns against the declaration: those it
/// has (in the declaration's order), those it lacks, and those it has
/// that are not declared.
struct TypedState {
    keep: Columns,
    add: Columns,
    drop: Vec<String>,
}

async fn typed_state(
    tx: &Transaction<'_>,
    schema: &str,
    table: &str,
    typed: &Columns,
) -> Result<TypedState> {
    let have: Vec<String> = columns_of(tx, schema, &versions_name(table))
        .await?
        .into_iter()
        .map(|(name, ..)| name)
        .filter(|name| !VERSIONS_OWN.iter().any(|(own, ..)| own == name))
        .collect();
    let (keep, add): (Vec<_>, Vec<_>) = typed
        .iter()
        .cloned()
        .partition(|c| have.iter().any(|h| h == c.name()));
    let drop = have
        .into_iter()
        .filter(|h| !typed.iter().any(|c| c.name() == h))
        .collect();
    Ok(TypedState {
        keep: Columns::new(keep)?,
        add: Columns::new(add)?,
        drop,
    })
}

/// Whether the view `schema`.`table_history` carries the store's comment:
/// `None` if not, else whether it is this version's.
async fn view_is_ours(tx: &Transaction<'_>, schema: &str, table: &str) -> Result<Option<bool>> {
    let comment: Option<String> = tx
        .query_one(
            "SELECT obj_description($1::text::regclass, 'pg_class')",
            &[&qualified(schema, &view_name(table))],
        )
        .await
        .map_err(open_error)?
        .get(0);
    Ok(match comment {
        Some(c) if c == view_comment(table) => Some(true),
        Some(c) if c == first_view_comment(table) => Some(false),
        _ => None,
    })
}

/// Drops the store's history view of `schema`.`table`, if there is one
/// (a view of that name the store did not make is left alone), before a
/// change to the columns it reads.
pub(crate) async fn drop_view(tx: &Transaction<'_>, schema: &str, table: &str) -> Result<()> {
    if present(tx, schema, table).await?.view == Some(b'v' as i8)
        && view_is_ours(tx, schema, table).await?.is_some()
    {
        tx.batch_execute(&format!(
            "DROP VIEW {}",
            qualified(schema, &view_name(table))
        ))
        .await
        .map_err(open_error)?;
    }
    Ok(())
}

/// What [`look`] found.
struct Looked {
    found: Present,
    typed: Option<TypedState>,
    /// The view is the store's, as the declaration makes it.
    view_current: bool,
}

impl Looked {
    fn complete(&self) -> bool {
        let typed_current = self
            .typed
            .as_ref()
            .is_some_and(|t| t.add.is_empty() && t.drop.is_empty());
        self.found.listings.is_some()
            && self.found.key_index.is_some()
            && typed_current
            && self.view_current
    }
}

/// Looks at history's objects and checks those that exist: the tables'
/// shapes (the versions table with the typed columns it has), and the view
/// the store's (its comment) or of no one's making.
async fn look(
    tx: &Transaction<'_>,
    schema: &str,
    table: &str,
    typed: &Columns,
    changes: bool,
) -> Result<Looked> {
    let found = present(tx, schema, table).await?;
    let mut state = None;
    if let Some(kind) = found.versions {
        if kind != b'r' as i8 {
            let expected = shape(&VERSIONS_OWN, typed);
            verify(
                tx,
                schema,
                &versions_name(table),
                kind,
                b'r',
                &expected,
                &[],
            )
            .await?;
        }
        let t = typed_state(tx, schema, table, typed).await?;
        if !t.drop.is_empty() && !changes {
            return Err(open_error(format!(
                "history's table {} has the typed column \"{}\" as the declaration does not: \
                 open it once with allow_column_changes to drop it",
                qualified(schema, &versions_name(table)),
                t.drop[0]
            )));
        }
        if t.drop.is_empty() {
            let expected = shape(&VERSIONS_OWN, &t.keep);
            let name = versions_name(table);
            verify(
                tx,
                schema,
                &name,
                kind,
                b'r',
                &expected,
                &["event_date", "key", "updated_at"],
            )
            .await?;
        }
        state = Some(t);
    }
    if let Some(kind) = found.key_index {
        let index = qualified(schema, &key_index_name(table));
        let ours = kind == b'i' as i8
            && found.versions.is_some()
            && tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_index \
                     WHERE indexrelid = $1::text::regclass AND indrelid = $2::text::regclass)",
                    &[&index, &qualified(schema, &versions_name(table))],
                )
                .await
                .map_err(open_error)?
                .get::<_, bool>(0);
        if !ours {
            return Err(open_error(format!(
                "{index} is not the index of history's versions the store keeps there (another \
                 relation has its name): rename or drop it, or keep this table's records under \
                 another name"
            )));
        }
    }
    if let Some(kind) = found.listings {
        let expected = shape(&LISTINGS_OWN, &Columns::default());
        let name = listings_name(table);
        verify(tx, schema, &name, kind, b'r', &expected, &["day", "as_of"]).await?;
    }
    let mut view_current = false;
    if let Some(kind) = found.view {
        let view = view_name(table);
        let ours = match kind == b'v' as i8 {
            true => view_is_ours(tx, schema, table).await?,
            false => None,
        };
        let Some(current) = ours else {
            return Err(open_error(format!(
                "{} is not the history view the store keeps there (another relation has its \
                 name, or a view the store did not make): rename or drop it, or keep this \
                 table's records under another name",
                qualified(schema, &view)
            )));
        };
        view_current = current && columns_of(tx, schema, &view).await? == shape(&VIEW_OWN, typed);
    }
    Ok(Looked {
        found,
        typed: state,
        view_current,
    })
}

/// Checks the history objects of `schema`.`table` where they exist and,
/// when history is `wanted` or on already (its versions table exists),
/// creates what is missing and brings history's typed columns in step
/// with the records table's (if `create`), starting history from the
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
    typed: &Columns,
    wanted: bool,
    (create, changes): (bool, bool),
) -> Result<HistoryOpened> {
    let found = present(tx, schema, table).await?;
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
    // History in step, the usual case, is looked at without a lock;
    // anything else is looked at again under the schema's creation lock
    // before it is refused or changed (a look taken while another open
    // changes history may be torn, or fail).
    let on = HistoryOpened {
        on: true,
        started_with: None,
    };
    if look(tx, schema, table, typed, changes)
        .await
        .is_ok_and(|l| l.complete())
    {
        return Ok(on);
    }
    tx.execute(sql::CREATE_LOCK, &[&format!("backfill:{schema}")])
        .await
        .map_err(open_error)?;
    let looked = look(tx, schema, table, typed, changes).await?;
    if looked.complete() {
        return Ok(on);
    }
    if !create {
        return Err(open_error(format!(
            "table {} keeps no history yet, or its history is not in step with it (\"{}\", \
             \"{}\", the view {}, the typed columns), and this store may not \
             change it (create_if_missing(false)): open it once with create_if_missing(true)",
            qualified(schema, table),
            versions_name(table),
            listings_name(table),
            view_name(table),
        )));
    }
    let ddl_error = |what: String| {
        move |e: tokio_postgres::Error| {
            open_error(format!(
                "cannot create or change {what}: {}",
                e.as_db_error()
                    .map_or_else(|| e.to_string(), ToString::to_string)
            ))
        }
    };
    let versions = qualified(schema, &versions_name(table));
    let view = qualified(schema, &view_name(table));
    // The view goes first: a column it reads cannot be dropped.
    if looked.found.view.is_some() && !looked.view_current {
        tx.batch_execute(&format!("DROP VIEW {view}"))
            .await
            .map_err(ddl_error(view.clone()))?;
    }
    if looked.found.listings.is_none() {
        tx.batch_execute(&create_listings(schema, table))
            .await
            .map_err(ddl_error(listings_name(table)))?;
    }
    let mut started_with = None;
    match &looked.typed {
        None => {
            tx.batch_execute(&create_versions(schema, table, typed))
                .await
                .map_err(ddl_error(versions_name(table)))?;
            started_with = Some(seed(tx, schema, table).await?);
        }
        Some(state) => {
            for name in &state.drop {
                tx.batch_execute(&format!(r#"ALTER TABLE {versions} DROP COLUMN "{name}""#))
                    .await
                    .map_err(ddl_error(versions.clone()))?;
            }
            if !state.add.is_empty() {
                fill_columns(tx, &versions, &state.add).await?;
            }
        }
    }
    if looked.found.key_index.is_none() {
        tx.batch_execute(&create_key_index(schema, table))
            .await
            .map_err(ddl_error(key_index_name(table)))?;
    }
    if looked.found.view.is_none() || !looked.view_current {
        tx.batch_execute(&create_view(schema, table, typed))
            .await
            .map_err(ddl_error(view_name(table)))?;
    }
    if !look(tx, schema, table, typed, changes).await?.complete() {
        return Err(open_error(format!(
            "history of {} is not complete after creating it",
            qualified(schema, table)
        )));
    }
    Ok(HistoryOpened {
        on: true,
        started_with,
    })
}

/// History started from the table's rows, which are each key's newest
/// version (tombstones included), and the days' latest listings; returns
/// how many rows.
async fn seed(tx: &Transaction<'_>, schema: &str, table: &str) -> Result<u64> {
    let rows: i64 = tx
        .query_one(
            &format!("SELECT count(*) FROM {}", qualified(schema, table)),
            &[],
        )
        .await
        .map_err(open_error)?
        .get(0);
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
    Ok(rows as u64)
}

/// Adds the typed `columns` to history's versions table `versions` and
/// fills them from each live version's value, a page at a time. A version
/// older than the declaration whose value does not fit a column keeps
/// `NULL` there: it was delivered before the column was asked of it.
async fn fill_columns(tx: &Transaction<'_>, versions: &str, columns: &Columns) -> Result<()> {
    let added: Vec<String> = columns
        .iter()
        .map(|c| {
            format!(
                r#"ADD COLUMN "{}" {} NULL"#,
                c.name(),
                typed::sql_type(c.column_type())
            )
        })
        .collect();
    tx.batch_execute(&format!("ALTER TABLE {versions} {}", added.join(", ")))
        .await
        .map_err(open_error)?;
    let page = tx
        .prepare(&format!(
            r#"SELECT key, event_date, value, updated_at FROM {versions}
               WHERE (event_date, key, updated_at) > ($1::date, $2::text COLLATE "C", $3::timestamptz)
                 AND NOT deleted
               ORDER BY event_date, key, updated_at LIMIT 10000"#
        ))
        .await
        .map_err(open_error)?;
    let arrays: String = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!(", ${}::{}", i + 4, typed::array_cast(c.column_type())))
        .collect();
    let aliases: String = (0..columns.len()).map(|i| format!(", tc{i}")).collect();
    let set: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!(r#""{}" = u.tc{i}"#, c.name()))
        .collect();
    let update = tx
        .prepare(&format!(
            r#"UPDATE {versions} AS s SET {}
               FROM unnest($1::date[], $2::text[], $3::timestamptz[]{arrays})
                   AS u(event_date, key, updated_at{aliases})
               WHERE s.event_date = u.event_date AND s.key = u.key COLLATE "C"
                 AND s.updated_at = u.updated_at"#,
            set.join(", ")
        ))
        .await
        .map_err(open_error)?;
    // Before every stored version: no key is empty.
    let first = NaiveDate::from_ymd_opt(1, 1, 1).expect("a date");
    let (mut date, mut key, mut at) = (
        first,
        String::new(),
        first.and_time(chrono::NaiveTime::MIN).and_utc(),
    );
    loop {
        let rows = tx
            .query(&page, &[&date, &key, &at])
            .await
            .map_err(open_error)?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        (key, date, at) = (last.get(0), last.get(1), last.get(3));
        let (mut dates, mut keys, mut instants) = (Vec::new(), Vec::new(), Vec::new());
        let mut flat = Vec::with_capacity(rows.len() * columns.len());
        for row in &rows {
            let record = Record::new(
                row.get::<_, String>(0),
                row.get::<_, NaiveDate>(1),
                row.get::<_, String>(2),
                row.get::<_, DateTime<Utc>>(3),
            )?;
            let Ok(values) = columns.extract(&record) else {
                continue;
            };
            flat.extend(values);
            dates.push(record.event_date());
            keys.push(record.key().to_owned());
            instants.push(record.updated_at());
        }
        let values = typed::arrays(columns.len(), &flat);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&dates, &keys, &instants];
        params.extend(values.iter().map(|v| v as &(dyn ToSql + Sync)));
        tx.execute(&update, &params).await.map_err(open_error)?;
    }
}
