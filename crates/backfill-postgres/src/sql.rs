//! The SQL: DDL as free functions (run once, at open, and only for what is
//! missing), the catalog queries that look before creating, and the DML as
//! the fields of [`Statements`], built once per store from the validated
//! names.
//!
//! Every name formatted into SQL here has passed
//! [`check_identifier`](backfill_core::adapter::check_identifier).

use backfill_core::{MAX_KEY_BYTES, MAX_YEAR, MIN_YEAR};

/// The table's columns, in order, as every statement lists them.
pub(crate) const COLUMNS: &str = "key, event_date, value, updated_at";

/// `"schema"."table"`.
pub(crate) fn qualified(schema: &str, table: &str) -> String {
    format!(r#""{schema}"."{table}""#)
}

/// The record rules of `backfill_core`, as CHECK constraints: one per
/// column that has a rule, as `(column, expression)`.
pub(crate) fn checks() -> [(&'static str, String); 3] {
    [
        ("key", format!("octet_length(key) BETWEEN 1 AND {MAX_KEY_BYTES}")),
        (
            "event_date",
            format!("event_date BETWEEN '{MIN_YEAR:04}-01-01' AND '{MAX_YEAR:04}-12-31'"),
        ),
        (
            "updated_at",
            format!(
                "updated_at >= '{MIN_YEAR:04}-01-01 00:00:00+00' AND updated_at < '{:04}-01-01 00:00:00+00'",
                MAX_YEAR + 1
            ),
        ),
    ]
}

/// Creates the schema. Run only when the catalog shows it missing: even
/// `IF NOT EXISTS` needs `CREATE` on the database.
pub(crate) fn create_schema(schema: &str) -> String {
    format!(r#"CREATE SCHEMA IF NOT EXISTS "{schema}""#)
}

/// Creates the table. Text is `COLLATE "C"` so comparisons and `ORDER BY`
/// are by bytes; the CHECKs repeat the record rules in the table itself.
pub(crate) fn create_table(schema: &str, table: &str) -> String {
    let [(_, key), (_, event_date), (_, updated_at)] = checks();
    format!(
        r#"CREATE TABLE IF NOT EXISTS {t} (
    key        text COLLATE "C" PRIMARY KEY CHECK ({key}),
    event_date date NOT NULL CHECK ({event_date}),
    value      text COLLATE "C" NOT NULL,
    updated_at timestamptz NOT NULL CHECK ({updated_at})
)"#,
        t = qualified(schema, table)
    )
}

/// Creates the `event_date` index without naming it: the server picks a
/// free name, so it can never collide with another relation (a name built
/// from the table's could be truncated to the table's own, or be taken by
/// another table). Run only when the catalog shows no such index.
pub(crate) fn create_index(schema: &str, table: &str) -> String {
    format!("CREATE INDEX ON {} (event_date)", qualified(schema, table))
}

/// Session settings under which the catalog deparses CHECK constraints
/// the same way everywhere (timestamps in UTC, dates in ISO).
pub(crate) const DEPARSE_SETTINGS: &str =
    "SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD'";

/// Serialises concurrent first opens of one table: `$1` is
/// `backfill:<schema>.<table>`. Taken only when something must be created.
pub(crate) const CREATE_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// Whether schema `$1` exists.
pub(crate) const FIND_SCHEMA: &str =
    "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)";

/// The relation `$1`.`$2`, if any: its oid and kind.
pub(crate) const FIND_RELATION: &str = "\
SELECT c.oid, c.relkind::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2";

/// The columns of table `$1` (an oid): name, type as SQL writes it,
/// collation (schema-qualified) and whether it is NOT NULL.
pub(crate) const COLUMNS_OF: &str = "\
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
       CASE WHEN a.attcollation = 0 THEN NULL
            ELSE quote_ident(cn.nspname) || '.' || quote_ident(co.collname) END,
       a.attnotnull
FROM pg_attribute a
LEFT JOIN pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum";

/// The constraints of table `$1` that can change what a write does: its
/// primary key (`p`) and CHECKs (`c`), with the columns each names and
/// its definition.
pub(crate) const CONSTRAINTS_OF: &str = "\
SELECT con.contype::text,
       ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
             ORDER BY k.n),
       pg_get_constraintdef(con.oid)
FROM pg_constraint con
WHERE con.conrelid = $1 AND con.contype IN ('p', 'c')
ORDER BY con.contype, pg_get_constraintdef(con.oid)";

/// Whether table `$1` has a valid, non-partial B-tree index that leads
/// with `event_date`.
pub(crate) const HAS_EVENT_DATE_INDEX: &str = "\
SELECT EXISTS (
    SELECT 1 FROM pg_index i
    JOIN pg_class ic ON ic.oid = i.indexrelid
    JOIN pg_am am ON am.oid = ic.relam
    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = 'event_date'
    WHERE i.indrelid = $1 AND i.indkey[0] = a.attnum AND i.indisvalid
      AND i.indpred IS NULL AND am.amname = 'btree'
)";

/// The DML of one table, built once from the validated names.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) schema: String,
    pub(crate) table: String,
    /// One key: `$1` key.
    pub(crate) get: String,
    /// Every row, in key order.
    pub(crate) all: String,
    /// One day's rows, in key order: `$1` day.
    pub(crate) day: String,
    /// The stored versions of some keys: `$1` keys.
    pub(crate) versions: String,
    /// The one write: a chunk as four arrays `$1`–`$4`; returns the counts
    /// and the keys a concurrent writer raced past.
    pub(crate) merge: String,
    /// Replace mode: delete the rows of day `$1` whose key is not in `$2`.
    pub(crate) delete_missing: String,
}

impl Statements {
    pub(crate) fn new(schema: &str, table: &str) -> Self {
        let t = qualified(schema, table);
        let cols = COLUMNS;
        Self {
            schema: schema.to_owned(),
            table: table.to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_repeats_the_record_rules_from_core() {
        let ddl = create_table("s", "t");
        assert!(ddl.contains(&format!("octet_length(key) BETWEEN 1 AND {MAX_KEY_BYTES})")));
        assert!(ddl.contains("event_date BETWEEN '0001-01-01' AND '9999-12-31'"));
        assert!(ddl.contains(
            "updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'"
        ));
        assert!(ddl.contains(r#""s"."t""#));
    }

    #[test]
    fn the_index_is_never_named_by_us() {
        assert_eq!(
            create_index("s", "t"),
            r#"CREATE INDEX ON "s"."t" (event_date)"#
        );
    }
}
