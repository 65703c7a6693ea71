//! The SQL: DDL as free functions (run once, at open, and only for what is
//! missing), the catalog queries that look before creating, and the DML as
//! the fields of [`Statements`], built once per store from the validated
//! names.
//!
//! Every name formatted into SQL here has passed
//! [`check_identifier`](backfill_core::adapter::check_identifier).

use backfill_core::columns::Columns;
use backfill_core::{MAX_KEY_BYTES, MAX_YEAR, MIN_YEAR};

/// The table's columns, in order, as every statement lists them.
pub(crate) const COLUMNS: &str = "key, event_date, value, updated_at, deleted";

/// The schema version this release creates and writes: 3 = the day ledger
/// (the ledger columns of `backfill_days`). Version 2 added tombstones (the
/// `deleted` column) and the shared metadata tables; version 1 is the
/// records table alone, without `deleted`.
pub(crate) const SCHEMA_VERSION: i32 = 3;

/// The shared table, one per schema, that records each records table's
/// schema version.
pub(crate) const TABLES_TABLE: &str = "backfill_tables";
/// The shared table, one per schema, that keeps each records table's days:
/// the listing watermark and the day ledger.
pub(crate) const DAYS_TABLE: &str = "backfill_days";
/// The shared table, one per schema, of the days a person accepted as they
/// are ([`Store::accept`](backfill_core::Store::accept)), per records
/// table: made by the first acceptance, and read beside [`DAYS_TABLE`] into
/// the ledger.
pub(crate) const ACCEPTED_TABLE: &str = "backfill_accepted";
/// The shared table, one per schema, of how long each day's last
/// successful apply took ([`Timing`](backfill_core::Timing)), per records
/// table, with the `synced_at` of the ledger row it belongs to: a ledger
/// row written by an earlier release, which does not know this table, has
/// no timing rather than another apply's. Made on open by a role that may
/// create tables in the schema; without it, timings are not kept.
pub(crate) const TIMINGS_TABLE: &str = "backfill_timings";

/// [`TIMINGS_TABLE`] of `schema`, made when missing.
pub(crate) fn create_timings(schema: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (records_table text NOT NULL, day date NOT NULL, \
         synced_at timestamptz NOT NULL, fetch_ms bigint NOT NULL CHECK (fetch_ms >= 0), \
         write_ms bigint NOT NULL CHECK (write_ms >= 0), PRIMARY KEY (records_table, day))",
        qualified(schema, TIMINGS_TABLE)
    )
}

/// Each of `columns` (`a, b, …`) qualified by `alias`.
fn prefixed(alias: &str, columns: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

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

/// A tombstone's value is empty: the table-level CHECK that comes with the
/// `deleted` column.
pub(crate) const TOMBSTONE_CHECK: &str = "NOT deleted OR value = ''";

/// Creates the schema. Run only when the catalog shows it missing: even
/// `IF NOT EXISTS` needs `CREATE` on the database.
pub(crate) fn create_schema(schema: &str) -> String {
    format!(r#"CREATE SCHEMA IF NOT EXISTS "{schema}""#)
}

/// Creates the records table at the current schema version. Text is
/// `COLLATE "C"` so comparisons and `ORDER BY` are by bytes; the CHECKs
/// repeat the record rules in the table itself. `deleted` comes last, so a
/// table created here and one upgraded from version 1 (where `ADD COLUMN`
/// appends it) look the same. `fill_factor` is the table's `fillfactor`
/// (see `PostgresStoreBuilder::fill_factor`).
pub(crate) fn create_table(schema: &str, table: &str, typed: &Columns, fill_factor: u8) -> String {
    let [(_, key), (_, event_date), (_, updated_at)] = checks();
    // The typed columns after the store's own, NULL-able (a tombstone's are
    // NULL), in the database's default collation.
    let typed: String = typed
        .iter()
        .map(|c| {
            format!(
                "    \"{}\" {} NULL,\n",
                c.name(),
                crate::typed::sql_type(c.column_type())
            )
        })
        .collect();
    format!(
        r#"CREATE TABLE IF NOT EXISTS {t} (
    key        text COLLATE "C" PRIMARY KEY CHECK ({key}),
    event_date date NOT NULL CHECK ({event_date}),
    value      text COLLATE "C" NOT NULL,
    updated_at timestamptz NOT NULL CHECK ({updated_at}),
    deleted    boolean NOT NULL DEFAULT false,
{typed}    CHECK ({TOMBSTONE_CHECK})
) WITH (fillfactor = {fill_factor})"#,
        t = qualified(schema, table)
    )
}

/// `CREATE INDEX IF NOT EXISTS` on each indexed typed column, named
/// [`index_name`].
pub(crate) fn create_column_indexes(schema: &str, table: &str, typed: &Columns) -> Vec<String> {
    typed
        .iter()
        .filter(|c| c.is_indexed())
        .map(|c| create_column_index(schema, table, c.name(), true))
        .collect()
}

/// `CREATE INDEX` on one typed column; `if_not_exists` for a table made
/// or columns added in this transaction, without it where an index is
/// found missing (so that a relation of its name is an error, not a
/// silent skip).
pub(crate) fn create_column_index(
    schema: &str,
    table: &str,
    column: &str,
    if_not_exists: bool,
) -> String {
    format!(
        r#"CREATE INDEX {}"{}" ON {} ("{column}")"#,
        if if_not_exists { "IF NOT EXISTS " } else { "" },
        index_name(table, column),
        qualified(schema, table)
    )
}

/// The longest name Postgres keeps (`NAMEDATALEN - 1`); longer ones are
/// cut, which would make two columns' index names one.
pub(crate) const MAX_NAME_BYTES: usize = 63;

/// The name of a typed column's index: `<table>:<column>` (no table's name
/// has a `:`), or, when that is longer than [`MAX_NAME_BYTES`], its first
/// bytes, `~` and a hash of the whole, so that every column of every
/// table has a name of its own that the server keeps as it is.
pub(crate) fn index_name(table: &str, column: &str) -> String {
    let full = format!("{table}:{column}");
    if full.len() <= MAX_NAME_BYTES {
        return full;
    }
    // FNV-1a over the whole name: stable across releases and platforms.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let suffix = format!("~{hash:016x}");
    let kept = backfill_core::text::prefix(&full, MAX_NAME_BYTES - suffix.len());
    format!("{kept}{suffix}")
}

/// The columns of a table that lead a valid, whole btree index.
pub(crate) const INDEXED_COLUMNS: &str = "\
SELECT DISTINCT a.attname::text FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_am am ON am.oid = ic.relam
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = $1 AND i.indisvalid AND i.indpred IS NULL AND am.amname = 'btree'";

/// The step from schema version 1 (the release before tombstones) to 2:
/// the `deleted` column, appended. Every existing row stays, live. Adding
/// a column with a constant default rewrites nothing; the CHECK is
/// validated with one scan.
pub(crate) fn upgrade_1_to_2(schema: &str, table: &str) -> String {
    format!(
        "ALTER TABLE {} ADD COLUMN deleted boolean NOT NULL DEFAULT false, ADD CHECK ({TOMBSTONE_CHECK})",
        qualified(schema, table)
    )
}

/// Creates the schema's table of records tables and their schema versions.
pub(crate) fn create_tables_table(schema: &str) -> String {
    format!(
        r#"CREATE TABLE IF NOT EXISTS {} (
    records_table  text COLLATE "C" PRIMARY KEY,
    schema_version integer NOT NULL
)"#,
        qualified(schema, TABLES_TABLE)
    )
}

/// The columns schema version 3 appends to `backfill_days` for the day
/// ledger, in order, all NULL-able: `(name, type, CHECK)`. A day's success
/// is `synced_at` to `collapsed` (all set, or none), its last failure
/// after it `failed_at` to `error`.
pub(crate) const LEDGER_COLUMNS: [(&str, &str, Option<&str>); 16] = [
    ("synced_at", "timestamptz", None),
    ("run_id", r#"text COLLATE "C""#, None),
    ("mode", "text", Some("mode IN ('merge', 'replace')")),
    ("as_of", "timestamptz", None),
    ("digest", "text", Some("digest ~ '^[0-9a-f]{32}$'")),
    ("inserted", "bigint", Some("inserted >= 0")),
    ("updated", "bigint", Some("updated >= 0")),
    ("unchanged", "bigint", Some("unchanged >= 0")),
    ("stale", "bigint", Some("stale >= 0")),
    ("deleted", "bigint", Some("deleted >= 0")),
    ("unlisted", "bigint", Some("unlisted >= 0")),
    ("collapsed", "bigint", Some("collapsed >= 0")),
    ("failed_at", "timestamptz", None),
    ("failed_run_id", "text", None),
    ("attempts", "integer", Some("attempts >= 1")),
    ("error", "text", None),
];

/// The ledger columns of a success, in order, as [`Statements`] lists
/// them.
pub(crate) const LEDGER_SYNCED: &str = "synced_at, run_id, mode, as_of, digest, \
    inserted, updated, unchanged, stale, deleted, unlisted, collapsed";
/// The ledger columns of a failure, in order.
pub(crate) const LEDGER_FAILED: &str = "failed_at, failed_run_id, attempts, error";

/// One ledger column as a column definition.
fn ledger_column((name, data_type, check): (&str, &str, Option<&str>)) -> String {
    match check {
        Some(check) => format!("{name:<17} {data_type} NULL CHECK ({check})"),
        None => format!("{name:<17} {data_type} NULL"),
    }
}

/// Creates the schema's table of days at the current schema version: per
/// records table and day, the listing watermark (the latest `as_of` of a
/// listing applied for it) and the day ledger.
pub(crate) fn create_days_table(schema: &str) -> String {
    let ledger: String = LEDGER_COLUMNS
        .into_iter()
        .map(|c| format!("    {},\n", ledger_column(c)))
        .collect();
    format!(
        r#"CREATE TABLE IF NOT EXISTS {} (
    records_table     text COLLATE "C" NOT NULL,
    day               date NOT NULL,
    listing_watermark timestamptz NULL,
{ledger}    PRIMARY KEY (records_table, day)
)"#,
        qualified(schema, DAYS_TABLE)
    )
}

/// The step of the shared `backfill_days` from schema version 2 to 3: the
/// ledger columns, appended after `listing_watermark`. All NULL-able
/// without a default, so nothing is rewritten; every existing day keeps its
/// watermark and reads as never synced. Run once per schema, under the
/// creation lock, only when the catalog shows the table without them
/// (several records tables share it).
pub(crate) fn upgrade_days_2_to_3(schema: &str) -> String {
    let columns: Vec<String> = LEDGER_COLUMNS
        .into_iter()
        .map(|c| format!("ADD COLUMN {}", ledger_column(c)))
        .collect();
    format!(
        "ALTER TABLE {} {}",
        qualified(schema, DAYS_TABLE),
        columns.join(", ")
    )
}

/// Records the schema version of table `$1` as `$2`.
pub(crate) fn register(schema: &str) -> String {
    format!(
        "INSERT INTO {} (records_table, schema_version) VALUES ($1, $2) \
         ON CONFLICT (records_table) DO UPDATE SET schema_version = EXCLUDED.schema_version",
        qualified(schema, TABLES_TABLE)
    )
}

/// Removes the day rows of records table `$1`: run when that table is
/// created, so that a dropped table's watermarks never apply to a new one.
pub(crate) fn forget_days(schema: &str) -> String {
    format!(
        "DELETE FROM {} WHERE records_table = $1",
        qualified(schema, DAYS_TABLE)
    )
}

/// The schema version recorded for table `$1` (NULL if none), and the
/// newest recorded for any table of the schema.
pub(crate) fn versions(schema: &str) -> String {
    let t = qualified(schema, TABLES_TABLE);
    format!(
        "SELECT (SELECT schema_version FROM {t} WHERE records_table = $1), \
                (SELECT max(schema_version) FROM {t})"
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

/// Serialises opens that create or upgrade something in one schema: `$1`
/// is `backfill:<schema>`. Schema-wide, because the metadata tables are
/// shared by every records table of the schema. Taken only when something
/// must be created or upgraded.
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
    /// One live key: `$1` key.
    pub(crate) get: String,
    /// Every live row, in key order.
    pub(crate) all: String,
    /// One day's live rows, in key order: `$1` day.
    pub(crate) day: String,
    /// Every row, tombstones included, in key order.
    pub(crate) with_tombstones: String,
    /// The advisory locks of some days, in date order: `$1` the days,
    /// `$2` whether each is locked exclusively (else shared).
    pub(crate) lock_days: String,
    /// Whether any of days `$1` has a listing watermark, whether day `$2`
    /// was ever synced (its ledger has a success), and whether its ledger
    /// holds digest `$3` (NULL: no) — the batch applied last was the same
    /// records. Read after the days are locked: with their shared lock
    /// held, no listing can set a watermark before the transaction ends.
    pub(crate) watermarked: String,
    /// How many rows of day `$1` lie in the key range `[$2, $3]`, and the
    /// SHA-256 of them all in key order, one zero byte between two rows,
    /// each row as its key, a zero byte, its `updated_at` as Postgres
    /// sends it (8 bytes, microseconds since 2000, big-endian), its
    /// tombstone flag (1 byte) and its value: `write::same_rows` computes
    /// the same of a slice. Neither a key nor a value holds a zero byte, so
    /// the bytes hashed tell every row apart, and a row's bytes sort as its
    /// key does (bytewise, a key before those it is a prefix of): the
    /// rows are sorted as one value each, no key beside them. The day's
    /// rows are read through its index (`OFFSET 0` keeps the range out of
    /// that choice: a random-key day's range spans the primary key).
    pub(crate) day_digest: String,
    /// [`Statements::day_digest`] only where day `$1`'s ledger holds digest
    /// `$4` (else no row is read: a count of 0 and the digest of nothing),
    /// so that it can be sent with [`Statements::watermarked`], before
    /// that says whether the batch is the one applied last.
    pub(crate) batch_digest: String,
    /// A day's rows, in no order, as binary `COPY` sends them, for
    /// [`Statements::in_place`]: key, value, `updated_at`, tombstone flag,
    /// and where and by whom each was written (`ctid`, `xmin`). Read
    /// through the day's index. `COPY` takes no parameters: the text
    /// before the day's date (`YYYY-MM-DD`), after it (where more
    /// conditions and a `LIMIT` may follow), and last.
    pub(crate) day_rows: [String; 3],
    /// The write of records that each replace a stored row of their own
    /// day read by [`Statements::day_rows`]: each row updated where it
    /// lies (`$1` its `ctid`), only if it still holds the key `$2` and is
    /// of the day `$6` and the very version read (its `xmin` `$7`), with the
    /// value, instant and flag `$3`–`$5` and the
    /// typed columns `$8…`. Returns the rows updated. Run with hash and
    /// merge joins off, so that each row is found by its `ctid` from the
    /// arrays in their order: rows are locked in key order, as every
    /// other write locks them.
    pub(crate) in_place: String,
    /// Whether no stored key lies in `[$1, $2]`: one index descent.
    pub(crate) key_range_empty: String,
    /// Whether none of the keys `$1` (sorted) is stored: one index descent
    /// per key, in key order, stopping at the first stored one. Asked when
    /// a slice's range holds stored rows (keys that interleave with the
    /// table's: UUIDs, hashed ids).
    pub(crate) keys_absent: String,
    /// The write of a slice whose key range holds no stored row, in a
    /// batch whose days have no watermark: binary `COPY` of the slice, in
    /// key order. A key another writer inserted after the check fails it
    /// with `unique_violation`.
    pub(crate) copy_in: String,
    /// The conflict-handling write, of every slice that is not copied
    /// in: a slice as five arrays `$1`–`$5`, and `$6` the day whose stored
    /// rows are read by one scan (NULL: every key probed); returns the
    /// counts and the keys a concurrent writer raced past.
    pub(crate) merge: String,
    /// A listing's write of a slice: the merge, with the listing's
    /// unlisted keys of the slice's key range written in the same ordered
    /// upsert as their own tombstones. After the typed columns' arrays,
    /// the keys `$L` ([`Statements::unlisted`] read them), the listed day
    /// `$L+1` and its `as_of` `$L+2`, where `$L` is 7 plus the number of
    /// typed columns. Returns the merge's counts and how many rows became
    /// tombstones (`unlisted`).
    pub(crate) list: String,
    /// The live rows of day `$1`.
    pub(crate) live: String,
    /// Whether day `$1` has a live row: one index entry read at most.
    pub(crate) any_live: String,
    /// A listing's candidates, read without a lock: the keys of the live
    /// rows of day `$1` not newer than `$2` whose key is in `($3, $4]`
    /// (NULL: unbounded) but not in `$5`, in key order.
    pub(crate) unlisted: String,
    /// A listing's unlisted rows that another writer changed under its
    /// write, judged again (the write locked them): those of keys `$1`
    /// still live rows of day `$2` not newer than `$3` become their own
    /// tombstones.
    pub(crate) unlist: String,
    /// The day ledger's success, last in an apply's transaction: the row
    /// of day `$1` synced at `$3` by run `$4` in mode `$5` with digest `$6`
    /// and counts `$7`–`$13`, its failure cleared, its watermark raised to
    /// `$2` (a listing's `as_of`; NULL in merge mode) if lower.
    ///
    /// With [`Statements::timings`], also day `$1`'s timing, `$14` and
    /// `$15` its fetch and write in milliseconds (none when NULL).
    pub(crate) synced: String,
    /// The day ledger's failure, in a transaction of its own: day `$1`
    /// failed at `$2` in run `$3` after `$4` attempts with error `$5`; the
    /// last success and the watermark are kept.
    pub(crate) failed: String,
    /// The ledger rows of days `$1` to `$2`, in day order; with
    /// [`Statements::timings`], each success's fetch and write in
    /// milliseconds after them (NULL where unknown).
    pub(crate) ledger: String,
    /// Whether the schema keeps [`TIMINGS_TABLE`].
    pub(crate) timings: bool,
    /// [`ACCEPTED_TABLE`], qualified, as `to_regclass` takes it.
    pub(crate) accepted_table: String,
    /// [`ACCEPTED_TABLE`], made when missing.
    pub(crate) create_accepted: String,
    /// The acceptances of days `$1` to `$2`, in day order.
    pub(crate) accepted: String,
    /// Day `$1` accepted at `$2`.
    pub(crate) accept: String,
    /// Day `$1`'s acceptance taken back.
    pub(crate) unaccept: String,
    /// Removes the tombstones older than `$1`.
    pub(crate) purge: String,
    /// History's statements, when the table keeps it.
    pub(crate) history: Option<crate::history::HistoryStatements>,
}

impl Statements {
    /// Every statement's text for `schema`.`table`. Long because it is the
    /// store's whole SQL, one field after another, each text beside the
    /// names it is built from; a reader looks a statement up here by name.
    pub(crate) fn new(
        schema: &str,
        table: &str,
        typed: &Columns,
        history: bool,
        timings: bool,
    ) -> Self {
        let t = qualified(schema, table);
        let timings_table = qualified(schema, TIMINGS_TABLE);
        let days = qualified(schema, DAYS_TABLE);
        let cols = COLUMNS;
        // The typed columns: in the COPY and the merge's upsert after the
        // store's own, their arrays `$7…` after the day scan's `$6`.
        let typed_names = crate::typed::names(typed);
        let quoted: Vec<String> = typed.iter().map(|c| format!(r#""{}""#, c.name())).collect();
        // Their arrays' parameters, from `$first` on.
        let typed_arrays_from = |first: usize| -> String {
            typed
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    format!(
                        ", ${}::{}",
                        i + first,
                        crate::typed::array_cast(c.column_type())
                    )
                })
                .collect()
        };
        let typed_arrays = typed_arrays_from(7);
        // Inside the statement they are `tc0`, `tc1`, …: a typed column may
        // be named like one of its own (`action`, `seen`).
        let internal: Vec<String> = (0..typed.len()).map(|i| format!("tc{i}")).collect();
        let typed_alias: String = internal.iter().map(|n| format!(", {n}")).collect();
        let typed_picked: String = internal.iter().map(|n| format!(", i.{n}")).collect();
        let typed_written: String = internal
            .iter()
            .map(|n| format!(", CASE WHEN buried THEN NULL ELSE {n} END"))
            .collect();
        let typed_set: String = quoted
            .iter()
            .map(|q| format!(",\n        {q} = EXCLUDED.{q}"))
            .collect();
        let typed_null: String = quoted.iter().map(|q| format!(", {q} = NULL")).collect();
        // The table's name as `backfill_days` keys it: a literal, since the
        // name passed check_identifier (lowercase letters, digits, `_`).
        let name = format!("'{table}'");
        // `Statements::day_digest`, which `batch_digest` extends. The
        // row's bytes are one expression, aggregated and sorted by: one
        // column to sort, evaluated once.
        let digested = format!(
            r#"SELECT count(*), sha256(coalesce(string_agg(s.row, decode('00', 'hex') ORDER BY s.row), ''::bytea))
FROM (SELECT textsend(r.key) || decode('00', 'hex') || timestamptz_send(r.updated_at)
        || boolsend(r.deleted) || textsend(r.value) AS row
    FROM (SELECT key, value, updated_at, deleted FROM {t} WHERE event_date = $1::date OFFSET 0) r
    WHERE r.key >= $2::text COLLATE "C" AND r.key <= $3::text COLLATE "C") s"#
        );
        // Day locks are keyed by schema, table and day. `to_char` rather
        // than `::text`: the key must not depend on a session's DateStyle.
        let lock_key = format!(
            "hashtextextended('backfill:{schema}.{table}:' || to_char(d.day::timestamp, 'YYYY-MM-DD'), 0)"
        );
        // The conflict-handling write, set-based. `classified` sees the
        // table as of the statement's snapshot and decides each record by
        // its version; only rows absent or older there go to the upsert. A
        // live record at or before its day's listing watermark is written
        // as its own tombstone (`buried`). The upsert overwrites a row only
        // if it is still the very version classified (same key and xmin:
        // nothing committed over it since the snapshot), so `was_live` and
        // the decision are exact; any other row it meets was committed
        // meanwhile by another writer, is left alone (but locked), and is
        // returned in `raced` to be merged again by the caller.
        //
        // A listing's variant adds its unlisted keys to `incoming`, each as
        // the tombstone of the version this statement sees, if that is
        // still a live row of the listed day not newer than its `as_of`:
        // the same `updated_at`, so it wins over that version only (a
        // tombstone orders after a live row of the same instant). Records
        // and tombstones go through the one upsert in key order, so a
        // listing takes its rows in one ordered pass, like every other
        // write: no schedule of writers can deadlock.
        let merge = |listing: bool| {
            let unlisted = match listing {
                false => String::new(),
                true => {
                    let l = typed.len() + 7;
                    let nulls: String = typed
                        .iter()
                        .map(|c| format!(", NULL::{}", crate::typed::sql_type(c.column_type())))
                        .collect();
                    format!(
                        r#"
    UNION ALL
    SELECT r.key, r.event_date, '', r.updated_at, true{nulls}, true
    FROM unnest(${l}::text[]) AS u(key)
    JOIN {t} r ON r.key = u.key COLLATE "C"
    WHERE r.event_date = ${d}::date AND NOT r.deleted AND r.updated_at <= ${a}::timestamptz"#,
                        d = l + 1,
                        a = l + 2,
                    )
                }
            };
            // With history, the rows the upsert replaced, as the statement
            // found them: the upsert wrote only rows still as seen (their
            // `xmin`), so each is exactly the version it replaced.
            let (stored_kept, moved_cte, moved_columns) = match history {
                false => (String::new(), String::new(), String::new()),
                true => (
                    "\n           i.s_key, i.s_date, i.s_value, i.s_at, i.s_deleted,".to_owned(),
                    r#" moved AS (
    SELECT c.s_key, c.s_date, c.s_value, c.s_at, c.s_deleted
    FROM written w JOIN classified c ON c.key = w.key
    WHERE c.s_key IS NOT NULL
),"#
                    .to_owned(),
                    r#",
    (SELECT array_agg(s_key ORDER BY s_key) FROM moved) AS moved_keys,
    (SELECT array_agg(s_date ORDER BY s_key) FROM moved) AS moved_dates,
    (SELECT array_agg(s_value ORDER BY s_key) FROM moved) AS moved_values,
    (SELECT array_agg(s_at ORDER BY s_key) FROM moved) AS moved_instants,
    (SELECT array_agg(s_deleted ORDER BY s_key) FROM moved) AS moved_deleted,
    (SELECT array_agg(c.key ORDER BY c.key) FROM written w JOIN classified c ON c.key = w.key
     WHERE c.buried) AS buried_keys"#
                        .to_owned(),
                ),
            };
            format!(
                r#"
WITH incoming AS (
    SELECT i.key COLLATE "C" AS key, i.event_date, i.value COLLATE "C" AS value,
           i.updated_at, i.deleted{typed_picked}, false AS unlisted
    FROM unnest($1::text[], $2::date[], $3::text[], $4::timestamptz[], $5::bool[]{typed_arrays})
        AS i(key, event_date, value, updated_at, deleted{typed_alias}){unlisted}
), stored AS (
    -- The stored rows of day `$6` (NULL: none), found by one scan of its
    -- index and joined by hash: a day's rows were mostly written
    -- together, so this reads few pages in order, where a probe per key
    -- descends the primary key once per record.
    SELECT r.key, r.event_date, r.value, r.updated_at, r.deleted, r.xmin
    FROM {t} r WHERE r.event_date = $6::date
), probed AS (
    SELECT i.key, i.event_date, i.value, i.updated_at, i.deleted{typed_picked}, i.unlisted,
           coalesce(d.key, p.key) AS s_key, coalesce(d.event_date, p.event_date) AS s_date,
           coalesce(d.value, p.value) AS s_value, coalesce(d.updated_at, p.updated_at) AS s_at,
           coalesce(d.deleted, p.deleted) AS s_deleted, coalesce(d.xmin, p.xmin) AS s_xmin
    FROM incoming i
    LEFT JOIN stored d ON d.key = i.key
    -- Every other key: one primary-key probe, whatever the table's size
    -- or statistics (OFFSET 0 keeps the planner from turning the lookup
    -- into a hash join that scans the whole table for every slice).
    LEFT JOIN LATERAL (
        SELECT r.key, r.event_date, r.value, r.updated_at, r.deleted, r.xmin
        FROM {t} r WHERE d.key IS NULL AND r.key = i.key OFFSET 0
    ) p ON true
), classified AS (
    SELECT i.key, i.event_date, i.value, i.updated_at, i.deleted{typed_picked}, i.unlisted,
           i.s_xmin::text AS seen,{stored_kept}
           coalesce(NOT i.s_deleted, false) AS was_live,
           CASE
               WHEN i.s_key IS NULL THEN 'w'
               WHEN (i.updated_at, i.deleted, i.value, i.event_date)
                  > (i.s_at, i.s_deleted, i.s_value, i.s_date) THEN 'w'
               WHEN (i.updated_at, i.deleted, i.value, i.event_date)
                  = (i.s_at, i.s_deleted, i.s_value, i.s_date) THEN 'n'
               ELSE 's'
           END AS action,
           coalesce(NOT i.deleted AND i.updated_at <= w.listing_watermark, false) AS buried
    FROM probed i
    LEFT JOIN {days} w ON w.records_table = {name} AND w.day = i.event_date
), written AS (
    INSERT INTO {t} AS s ({cols}{typed_names})
    SELECT key, event_date, CASE WHEN buried THEN '' ELSE value END, updated_at,
           deleted OR buried{typed_written}
    FROM classified
    WHERE action = 'w'
    ORDER BY key
    ON CONFLICT (key) DO UPDATE SET
        event_date = EXCLUDED.event_date,
        value = EXCLUDED.value,
        updated_at = EXCLUDED.updated_at,
        deleted = EXCLUDED.deleted{typed_set}
    -- A hashed subplan: one probe per conflicting row.
    WHERE (s.key, s.xmin::text) IN (
        SELECT key, seen FROM classified WHERE action = 'w' AND seen IS NOT NULL)
    RETURNING s.key, s.deleted, (s.xmax = 0) AS fresh
),{moved_cte} outcome AS (
    -- Live before: as classified, unless the row was gone when inserted.
    SELECT count(*) FILTER (WHERE NOT w.deleted AND NOT (c.was_live AND NOT w.fresh)) AS inserted,
           count(*) FILTER (WHERE NOT w.deleted AND c.was_live AND NOT w.fresh) AS updated,
           count(*) FILTER (WHERE w.deleted AND NOT c.unlisted) AS deleted,
           count(*) FILTER (WHERE c.unlisted) AS unlisted,
           count(*) AS written
    FROM written w JOIN classified c ON c.key = w.key
), decided AS (
    -- Every decision's count in one pass over the slice.
    SELECT count(*) FILTER (WHERE action = 'n') AS unchanged,
           count(*) FILTER (WHERE action = 's') AS stale,
           count(*) FILTER (WHERE action = 'w') AS to_write
    FROM classified
)
SELECT
    o.inserted, o.updated, o.deleted, o.unlisted, d.unchanged, d.stale,
    -- Rows meant to be written that the upsert left alone: normally none,
    -- and then not even looked for. EXCEPT hashes or sorts; it can never
    -- become a nested loop over the slice.
    CASE WHEN d.to_write <> o.written
    THEN (SELECT array_agg(key) FROM (
              SELECT key FROM classified WHERE action = 'w'
              EXCEPT ALL
              SELECT key FROM written) AS skipped)
    END AS raced{moved_columns}
FROM outcome o, decided d
"#
            )
        };
        Self {
            schema: schema.to_owned(),
            table: table.to_owned(),
            get: format!("SELECT {cols} FROM {t} WHERE key = $1 AND NOT deleted"),
            all: format!("SELECT {cols} FROM {t} WHERE NOT deleted ORDER BY key"),
            day: format!(
                "SELECT {cols} FROM {t} WHERE event_date = $1 AND NOT deleted ORDER BY key"
            ),
            with_tombstones: format!("SELECT {cols} FROM {t} ORDER BY key"),
            // OFFSET 0 keeps the ordered list a subquery of its own, so
            // the locks are taken row by row in date order (two batches
            // never wait for each other's days crosswise).
            lock_days: format!(
                r#"
SELECT CASE WHEN d.exclusive THEN pg_advisory_xact_lock({lock_key})
            ELSE pg_advisory_xact_lock_shared({lock_key}) END
FROM (SELECT * FROM unnest($1::date[], $2::bool[]) AS u(day, exclusive)
      ORDER BY day OFFSET 0) AS d"#
            ),
            watermarked: format!(
                "SELECT EXISTS (SELECT 1 FROM {days} WHERE records_table = {name} \
                 AND day = ANY($1::date[]) AND listing_watermark IS NOT NULL), \
                 EXISTS (SELECT 1 FROM {days} WHERE records_table = {name} \
                 AND day = $2::date AND synced_at IS NOT NULL), \
                 EXISTS (SELECT 1 FROM {days} WHERE records_table = {name} \
                 AND day = $2::date AND digest = $3::text)"
            ),
            day_digest: digested.clone(),
            // The ledger's condition is planned as a one-time filter: a
            // day whose ledger holds another digest reads no row.
            batch_digest: format!(
                "{digested}\nWHERE EXISTS (SELECT 1 FROM {days} WHERE records_table = {name} \
                 AND day = $1::date AND digest = $4::text)"
            ),
            day_rows: [
                format!(
                    "COPY (SELECT key, value, updated_at, deleted, ctid, xmin FROM {t} \
                     WHERE event_date = '"
                ),
                "'::date".to_owned(),
                ") TO STDOUT (FORMAT binary)".to_owned(),
            ],
            in_place: {
                let typed_arrays = typed_arrays_from(8);
                let typed_set: String = quoted
                    .iter()
                    .zip(&internal)
                    .map(|(q, n)| format!(", {q} = u.{n}"))
                    .collect();
                format!(
                    r#"UPDATE {t} AS r
SET value = u.value, updated_at = u.updated_at, deleted = u.deleted{typed_set}
FROM unnest($1::tid[], $2::text[], $3::text[], $4::timestamptz[], $5::bool[],
            $7::xid[]{typed_arrays})
    AS u(at, key, value, updated_at, deleted, seen{typed_alias})
WHERE r.ctid = u.at AND r.key = u.key COLLATE "C" AND r.event_date = $6::date
  AND r.xmin = u.seen"#
                )
            },
            // COLLATE "C", as the column: the range is the primary key's
            // byte order, whatever the database's default collation.
            key_range_empty: format!(
                r#"SELECT NOT EXISTS (SELECT 1 FROM {t}
                   WHERE key >= $1::text COLLATE "C" AND key <= $2::text COLLATE "C")"#
            ),
            // OFFSET 0 keeps a probe per key, in the array's order, as in
            // the merge below; EXISTS stops at the first stored key.
            keys_absent: format!(
                r#"SELECT NOT EXISTS (
    SELECT 1 FROM unnest($1::text[]) AS k(key)
    CROSS JOIN LATERAL (
        SELECT 1 FROM {t} r WHERE r.key = k.key COLLATE "C" OFFSET 0
    ) s
)"#
            ),
            copy_in: format!("COPY {t} ({cols}{typed_names}) FROM STDIN (FORMAT binary)"),
            merge: merge(false),
            list: merge(true),
            live: format!("SELECT count(*) FROM {t} WHERE event_date = $1 AND NOT deleted"),
            any_live: format!(
                "SELECT EXISTS (SELECT 1 FROM {t} WHERE event_date = $1 AND NOT deleted)"
            ),
            unlisted: format!(
                r#"
SELECT r.key FROM {t} r
WHERE r.event_date = $1 AND NOT r.deleted AND r.updated_at <= $2
  AND ($3::text IS NULL OR r.key > $3::text)
  AND ($4::text IS NULL OR r.key <= $4::text)
  AND NOT EXISTS (
      SELECT 1 FROM unnest($5::text[]) AS k(key) WHERE k.key COLLATE "C" = r.key)
ORDER BY r.key"#
            ),
            unlist: format!(
                r#"
UPDATE {t} AS s SET value = '', deleted = true{typed_null}
WHERE s.key = ANY($1::text[]) AND s.event_date = $2 AND NOT s.deleted AND s.updated_at <= $3"#
            ),
            // One upsert per apply, whatever the batch's size: the whole
            // row is written at once, so concurrent applies of one day
            // leave it as the last committer wrote it. `greatest` ignores
            // NULL: a merge keeps the watermark, a listing raises it.
            synced: format!(
                r#"{timing}
INSERT INTO {days} AS w (records_table, day, listing_watermark, {LEDGER_SYNCED})
VALUES ({name}, $1::date, $2::timestamptz, $3::timestamptz, $4::text, $5::text, $2::timestamptz,
        $6::text, $7::bigint, $8::bigint, $9::bigint, $10::bigint, $11::bigint, $12::bigint,
        $13::bigint)
ON CONFLICT (records_table, day) DO UPDATE SET
    listing_watermark = greatest(w.listing_watermark, EXCLUDED.listing_watermark),
    synced_at = EXCLUDED.synced_at, run_id = EXCLUDED.run_id, mode = EXCLUDED.mode,
    as_of = EXCLUDED.as_of, digest = EXCLUDED.digest,
    inserted = EXCLUDED.inserted, updated = EXCLUDED.updated,
    unchanged = EXCLUDED.unchanged, stale = EXCLUDED.stale, deleted = EXCLUDED.deleted,
    unlisted = EXCLUDED.unlisted, collapsed = EXCLUDED.collapsed,
    failed_at = NULL, failed_run_id = NULL, attempts = NULL, error = NULL"#,
                timing = if timings {
                    format!(
                        "WITH timing AS (
INSERT INTO {timings_table} AS t (records_table, day, synced_at, fetch_ms, write_ms)
SELECT {name}, $1::date, $3::timestamptz, $14::bigint, $15::bigint
WHERE $14::bigint IS NOT NULL AND $15::bigint IS NOT NULL
ON CONFLICT (records_table, day) DO UPDATE SET synced_at = EXCLUDED.synced_at,
    fetch_ms = EXCLUDED.fetch_ms, write_ms = EXCLUDED.write_ms)"
                    )
                } else {
                    String::new()
                }
            ),
            failed: format!(
                r#"
INSERT INTO {days} AS w (records_table, day, {LEDGER_FAILED})
VALUES ({name}, $1::date, $2::timestamptz, $3::text, $4::integer, $5::text)
ON CONFLICT (records_table, day) DO UPDATE SET
    failed_at = EXCLUDED.failed_at, failed_run_id = EXCLUDED.failed_run_id,
    attempts = EXCLUDED.attempts, error = EXCLUDED.error"#
            ),
            ledger: if timings {
                let synced = prefixed("d", LEDGER_SYNCED);
                let failed = prefixed("d", LEDGER_FAILED);
                format!(
                    "SELECT d.day, d.listing_watermark, {synced}, {failed}, t.fetch_ms, t.write_ms \
                     FROM {days} d LEFT JOIN {timings_table} t ON t.records_table = d.records_table \
                     AND t.day = d.day AND t.synced_at = d.synced_at \
                     WHERE d.records_table = {name} AND d.day BETWEEN $1 AND $2 ORDER BY d.day"
                )
            } else {
                format!(
                    "SELECT day, listing_watermark, {LEDGER_SYNCED}, {LEDGER_FAILED} FROM {days} \
                     WHERE records_table = {name} AND day BETWEEN $1 AND $2 ORDER BY day"
                )
            },
            timings,
            accepted_table: qualified(schema, ACCEPTED_TABLE),
            create_accepted: format!(
                "CREATE TABLE IF NOT EXISTS {accepted} (records_table text NOT NULL, \
                 day date NOT NULL, accepted_at timestamptz NOT NULL, \
                 PRIMARY KEY (records_table, day))",
                accepted = qualified(schema, ACCEPTED_TABLE)
            ),
            accepted: format!(
                "SELECT day, accepted_at FROM {accepted} \
                 WHERE records_table = {name} AND day BETWEEN $1 AND $2 ORDER BY day",
                accepted = qualified(schema, ACCEPTED_TABLE)
            ),
            accept: format!(
                "INSERT INTO {accepted} (records_table, day, accepted_at) \
                 VALUES ({name}, $1::date, $2::timestamptz) \
                 ON CONFLICT (records_table, day) DO UPDATE SET accepted_at = EXCLUDED.accepted_at",
                accepted = qualified(schema, ACCEPTED_TABLE)
            ),
            unaccept: format!(
                "DELETE FROM {accepted} WHERE records_table = {name} AND day = $1::date",
                accepted = qualified(schema, ACCEPTED_TABLE)
            ),
            purge: format!(
                r#"
WITH doomed AS (
    SELECT r.key FROM {t} r
    WHERE r.deleted AND r.updated_at < $1
    ORDER BY r.key
    FOR UPDATE
), purged AS (
    DELETE FROM {t} AS s USING doomed d
    WHERE s.key = d.key AND s.deleted AND s.updated_at < $1
    RETURNING s.key, s.event_date, s.value, s.updated_at
),{kept} digests AS (
    UPDATE {days} SET digest = '{purged}'
    WHERE records_table = {name} AND digest IS NOT NULL
      AND (day IN (SELECT event_date FROM purged)
        -- A day whose batch held records of other days (its digest's
        -- first bit set, hex 8 to f) may have covered any of them.
        OR (digest >= '8' COLLATE "C" AND EXISTS (SELECT 1 FROM purged)))
)
SELECT count(*) FROM purged"#,
                purged = backfill_core::Digest::PURGED,
                // History keeps what a purge removes: a tombstone history
                // holds no row of the instant of goes there.
                kept = match history {
                    false => String::new(),
                    true => format!(
                        r#" kept AS (
    INSERT INTO {v} (key, event_date, value, updated_at, deleted)
    SELECT p.key, p.event_date, p.value, p.updated_at, true FROM purged p
    WHERE NOT EXISTS (SELECT 1 FROM {v} x WHERE x.key = p.key AND x.updated_at = p.updated_at)
    ORDER BY p.key
    ON CONFLICT DO NOTHING
),"#,
                        v = qualified(schema, &crate::history::versions_name(table)),
                    ),
                },
            ),
            history: history.then(|| crate::history::HistoryStatements::new(schema, table, typed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_repeats_the_record_rules_from_core() {
        let ddl = create_table("s", "t", &Columns::default(), 80);
        assert!(ddl.contains(&format!("octet_length(key) BETWEEN 1 AND {MAX_KEY_BYTES})")));
        assert!(ddl.contains("event_date BETWEEN '0001-01-01' AND '9999-12-31'"));
        assert!(ddl.contains(
            "updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00'"
        ));
        assert!(ddl.contains(r#""s"."t""#));
        // `deleted` is the last column, as an upgrade from version 1 appends it.
        let columns = ddl.rsplit_once("updated_at timestamptz").unwrap().1;
        assert!(columns.contains("deleted    boolean NOT NULL DEFAULT false"));
        assert!(ddl.contains("CHECK (NOT deleted OR value = '')"));
        assert!(
            upgrade_1_to_2("s", "t").contains("ADD COLUMN deleted boolean NOT NULL DEFAULT false")
        );
    }

    #[test]
    fn the_crate_docs_show_the_days_table_this_release_creates() {
        let docs = include_str!("lib.rs");
        let ddl = create_days_table("schema");
        for column in LEDGER_COLUMNS {
            let line = ledger_column(column);
            assert!(ddl.contains(&format!("    {line},\n")), "{line}");
            assert!(docs.contains(&format!("//!     {line},\n")), "{line}");
            assert!(upgrade_days_2_to_3("s").contains(&format!("ADD COLUMN {line}")));
        }
        assert!(docs.contains(&format!(
            "INSERT INTO \"schema\".backfill_tables VALUES ('table', {SCHEMA_VERSION});"
        )));
    }

    #[test]
    fn index_names_fit_and_differ() {
        assert_eq!(index_name("orders", "total"), "orders:total");
        let table = "t".repeat(60);
        let (a, b) = (
            index_name(&table, "customer_id"),
            index_name(&table, "customer_name"),
        );
        assert_ne!(a, b);
        assert!(
            a.len() <= MAX_NAME_BYTES && b.len() <= MAX_NAME_BYTES,
            "{a} {b}"
        );
        assert!(a.starts_with("tttt") && a.contains('~'));
        // Multi-byte characters are never cut in the middle.
        let wide = "é".repeat(40);
        let name = index_name(&wide, "c");
        assert!(name.len() <= MAX_NAME_BYTES);
        assert_eq!(index_name(&wide, "c"), name, "stable");
    }

    #[test]
    fn the_index_is_never_named_by_us() {
        assert_eq!(
            create_index("s", "t"),
            r#"CREATE INDEX ON "s"."t" (event_date)"#
        );
    }
}
