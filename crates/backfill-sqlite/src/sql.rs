//! Every SQL text of the store, built from validated names.
//!
//! DDL is free functions, run only when something is missing; the DML is
//! the fields of [`Statements`], built once per store. Each table's
//! definition is described once, as a [`TableDef`]: `CREATE TABLE` is built
//! from it, and so is the check of a table that already exists
//! (`schema.rs`). Three tables: the records table (one per store, named by
//! the user) and two metadata tables shared by every records table of the
//! database, [`TABLES`] (each records table's schema version) and [`DAYS`]
//! (each day's listing watermark and, from version 3, its ledger row).

use std::borrow::Cow;

use backfill_core::columns::{ColumnType, Columns};
use backfill_core::{MAX_KEY_BYTES, MAX_YEAR, MIN_YEAR};

/// The schema version this release creates and writes: 3, the records
/// table with its `deleted` column, the metadata tables, and the day
/// ledger's columns in [`DAYS`]. Version 1 (the release before tombstones)
/// had no `deleted` and no metadata tables, version 2 no ledger columns;
/// both are upgraded in place on open (`migrate.rs`).
pub(crate) const SCHEMA_VERSION: i64 = 3;

/// The metadata table holding each records table's schema version.
pub(crate) const TABLES: &str = "backfill_tables";

/// The metadata table holding each records table's days: the listing
/// watermark and the day's ledger row.
pub(crate) const DAYS: &str = "backfill_days";
/// The days a person accepted as they are, per records table
/// ([`Store::accept`](backfill_core::Store::accept)): made by the first
/// acceptance, so a file that never had one keeps the tables of schema
/// version 3 alone. Read beside [`DAYS`] into the ledger.
pub(crate) const ACCEPTED: &str = "backfill_accepted";

/// [`ACCEPTED`], made when missing.
pub(crate) fn create_accepted() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {ACCEPTED} (
    records_table TEXT NOT NULL,
    day TEXT NOT NULL CHECK ({}),
    accepted_at TEXT NOT NULL CHECK ({}),
    PRIMARY KEY (records_table, day)
) WITHOUT ROWID",
        date_check("day"),
        instant_check("accepted_at")
    )
}

/// How long each day's last successful apply took, per records table
/// ([`Timing`](backfill_core::Timing)), with the `synced_at` of the ledger
/// row it belongs to: a row of [`DAYS`] written by an earlier release,
/// which does not know this table, has no timing rather than another
/// apply's. Made by the first apply, in its transaction, so a file that
/// never had one keeps the tables of schema version 3 alone.
pub(crate) const TIMINGS: &str = "backfill_timings";

/// [`TIMINGS`], made when missing.
pub(crate) fn create_timings() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {TIMINGS} (
    records_table TEXT NOT NULL,
    day TEXT NOT NULL CHECK ({}),
    synced_at TEXT NOT NULL CHECK ({}),
    fetch_ms INTEGER NOT NULL CHECK (fetch_ms >= 0),
    write_ms INTEGER NOT NULL CHECK (write_ms >= 0),
    PRIMARY KEY (records_table, day)
) STRICT, WITHOUT ROWID",
        date_check("day"),
        instant_check("synced_at")
    )
}

/// Names a records table may not take: the metadata tables'.
pub(crate) const RESERVED: [&str; 4] = [TABLES, DAYS, ACCEPTED, TIMINGS];

/// The declared type of text columns.
pub(crate) const TEXT: &str = "TEXT";

/// The declared type of integer columns.
pub(crate) const INTEGER: &str = "INTEGER";

/// The declared type of double columns (typed columns only).
pub(crate) const REAL: &str = "REAL";

/// Every text column's collation: bytes, like Rust's `str` order and
/// Postgres' `COLLATE "C"`, so the version order is the one the contract
/// defines. (Integer columns declare none; SQLite reports `BINARY`.)
pub(crate) const COLLATION: &str = "BINARY";

/// The column the store keeps an index on, for a day's rows.
pub(crate) const INDEXED: &str = "event_date";

/// The records table's tombstone flag, the column version 2 added.
pub(crate) const DELETED: &str = "deleted";

/// The first of the ledger columns version 3 added to [`DAYS`]: a days
/// table without it is version 2's.
pub(crate) const SYNCED_AT: &str = "synced_at";

/// One column as the store creates it: `<name> <type> [NOT NULL] [DEFAULT
/// …] [COLLATE BINARY] [PRIMARY KEY] [CHECK (<check>)]`.
#[derive(Debug)]
pub(crate) struct Column {
    /// The store's own columns' names are `Borrowed`; a typed column's is
    /// `Owned`, and quoted in SQL (it may be an SQL keyword).
    pub(crate) name: Cow<'static, str>,
    /// [`TEXT`] or [`INTEGER`].
    pub(crate) sql_type: &'static str,
    pub(crate) not_null: bool,
    /// The `DEFAULT`, as SQLite reports it back (`pragma_table_xinfo`).
    pub(crate) default: Option<&'static str>,
    /// The column's one `CHECK` expression, if it has one.
    pub(crate) check: Option<String>,
    /// The `CHECK`s earlier versions of this crate created, still accepted
    /// in an existing table so that its file keeps opening: weaker ones,
    /// which differ only in what a writer other than this store could slip
    /// in (which reading back then refuses), or the same rule written
    /// another way.
    pub(crate) earlier_checks: Vec<Cow<'static, str>>,
}

impl Column {
    fn text(name: &'static str, check: Option<String>) -> Self {
        Self {
            name: Cow::Borrowed(name),
            sql_type: TEXT,
            not_null: true,
            default: None,
            check,
            earlier_checks: Vec::new(),
        }
    }

    fn integer(name: &'static str, check: Option<String>) -> Self {
        Self {
            sql_type: INTEGER,
            ..Self::text(name, check)
        }
    }

    fn earlier(mut self, checks: &'static [&'static str]) -> Self {
        self.earlier_checks = checks.iter().map(|&c| Cow::Borrowed(c)).collect();
        self
    }

    fn nullable(mut self) -> Self {
        self.not_null = false;
        self
    }

    /// The column's definition in `CREATE TABLE` or `ADD COLUMN`; a typed
    /// column's name quoted (it may be an SQL keyword).
    fn definition(&self, primary_key: bool) -> String {
        let mut def = match &self.name {
            Cow::Borrowed(name) => format!("{name} {}", self.sql_type),
            Cow::Owned(name) => format!("\"{name}\" {}", self.sql_type),
        };
        if self.not_null {
            def.push_str(" NOT NULL");
        }
        if let Some(default) = self.default {
            def.push_str(&format!(" DEFAULT {default}"));
        }
        if self.sql_type == TEXT {
            def.push_str(&format!(" COLLATE {COLLATION}"));
        }
        if primary_key {
            def.push_str(" PRIMARY KEY");
        }
        if let Some(check) = &self.check {
            def.push_str(&format!("\n        CHECK ({check})"));
        }
        def
    }
}

/// A table as the store creates it: `STRICT`, with a rowid, these columns
/// in this order, and this primary key (declared on its column when it is
/// one column, as a table constraint otherwise); `WITHOUT ROWID` when
/// `clustered` (the rows kept in the primary key's order).
#[derive(Debug)]
pub(crate) struct TableDef {
    pub(crate) name: String,
    pub(crate) columns: Vec<Column>,
    pub(crate) primary_key: &'static [&'static str],
    pub(crate) clustered: bool,
}

impl TableDef {
    /// The 1-based position of `column` in the primary key, 0 if it is not
    /// part of it (as `pragma_table_xinfo` reports `pk`).
    pub(crate) fn pk_position(&self, column: &str) -> i64 {
        self.primary_key
            .iter()
            .position(|c| c.eq_ignore_ascii_case(column))
            .map_or(0, |i| i as i64 + 1)
    }

    /// `CREATE TABLE IF NOT EXISTS`, run only when the table is missing (`IF
    /// NOT EXISTS` because another process may be creating it too; the
    /// table is checked after either way).
    pub(crate) fn create(&self) -> String {
        let inline_pk = self.primary_key.len() == 1;
        let mut items: Vec<String> = self
            .columns
            .iter()
            .map(|c| {
                let pk = inline_pk && self.pk_position(&c.name) == 1;
                format!("    {}", c.definition(pk))
            })
            .collect();
        if !inline_pk {
            items.push(format!("    PRIMARY KEY ({})", self.primary_key.join(", ")));
        }
        format!(
            "CREATE TABLE IF NOT EXISTS \"{}\" (\n{}\n) STRICT{}",
            self.name,
            items.join(",\n"),
            if self.clustered {
                ", WITHOUT ROWID"
            } else {
                ""
            }
        )
    }
}

/// `date(x)`'s `CHECK`: `YYYY-MM-DD`, a real date, years 1–9999.
fn date_check(column: &str) -> String {
    let (min, max) = (MIN_YEAR, MAX_YEAR);
    // '+0 days' makes date() normalize, so 2026-02-30 is refused; IS, not
    // =, because a NULL would pass a CHECK.
    format!(
        "length({column}) = 10 AND date({column}, '+0 days') IS {column} \
         AND {column} BETWEEN '{min:04}-01-01' AND '{max:04}-12-31'"
    )
}

/// An instant's `CHECK`: exactly `INSTANT_FORMAT`, a valid date and time
/// (no leap second) to the second, then six digits of fraction and `Z`,
/// years 1–9999.
fn instant_check(column: &str) -> String {
    let (min, max) = (MIN_YEAR, MAX_YEAR);
    format!(
        "length({column}) = 27 \
         AND substr({column}, 1, 4) BETWEEN '{min:04}' AND '{max:04}' \
         AND strftime('%Y-%m-%dT%H:%M:%S', substr({column}, 1, 19), '+0 days') \
             IS substr({column}, 1, 19) \
         AND substr({column}, 20) GLOB '.[0-9][0-9][0-9][0-9][0-9][0-9]Z'"
    )
}

/// A typed instant column's `CHECK`: the same instants as
/// [`instant_check`] accepts, in fewer steps — its form by one `GLOB`, the
/// calendar by one date function. Measured on 300 000 inserts, the steps
/// of [`instant_check`] cost about 1.3 µs a row, these about 0.8 µs.
fn typed_instant_check(column: &str) -> String {
    format!(
        "{column} GLOB '[0-9][0-9][0-9][0-9]-[01][0-9]-[0-3][0-9]T[012][0-9]:[0-5][0-9]:[0-5][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]Z' \
         AND substr({column}, 12, 2) < '24' AND substr({column}, 1, 4) <> '0000' \
         AND date(substr({column}, 1, 10), '+0 days') IS substr({column}, 1, 10)"
    )
}

/// The records table's `deleted` column: 0 or 1, and a tombstone's value
/// is empty. Added by the upgrade from version 1, so it is the last column
/// of a new table and of an upgraded one alike, with a `DEFAULT` (which
/// `ADD COLUMN … NOT NULL` requires) that makes every existing row live.
fn deleted_column() -> Column {
    Column {
        name: Cow::Borrowed(DELETED),
        sql_type: INTEGER,
        not_null: true,
        default: Some("0"),
        check: Some("deleted IN (0, 1) AND (deleted = 0 OR value = '')".to_owned()),
        earlier_checks: Vec::new(),
    }
}

/// The records table of schema version `version` (1 or 2), with the
/// store's `typed` columns after its own (from version 2). The `CHECK`s
/// repeat the record rules in the table itself, so no writer (ours or
/// anyone's) can store a row that the other stores would refuse or that
/// this one could not read back.
pub(crate) fn records_table(table: &str, version: i64, typed: &Columns) -> TableDef {
    let mut columns = vec![
        Column::text(
            "key",
            Some(format!(
                "length(CAST(key AS BLOB)) BETWEEN 1 AND {MAX_KEY_BYTES} \
                 AND instr(CAST(key AS BLOB), x'00') = 0"
            )),
        ),
        Column::text("event_date", Some(date_check("event_date")))
            .earlier(&["length(event_date) = 10 AND date(event_date) = event_date"]),
        Column::text(
            "value",
            Some("instr(CAST(value AS BLOB), x'00') = 0".to_owned()),
        ),
        Column::text("updated_at", Some(instant_check("updated_at")))
            .earlier(&["length(updated_at) = 27"]),
    ];
    if version >= 2 {
        columns.push(deleted_column());
        columns.extend(typed.iter().map(typed_column));
    }
    TableDef {
        name: table.to_owned(),
        columns,
        primary_key: &["key"],
        clustered: false,
    }
}

/// A typed column as the table keeps it: `NULL`-able (a tombstone's are
/// `NULL`), in SQLite's own type for it — `INTEGER` for integers and
/// booleans, `REAL` for doubles, `TEXT` for the rest (a numeric as its
/// exact decimal text, a date as `YYYY-MM-DD`, an instant in UTC as
/// `updated_at` is written, so text order is time order) — with a `CHECK`
/// of its form. (That a required field is there is the write path's to
/// check: a `CHECK` on it could not be added to a table with rows.)
fn typed_column(c: &backfill_core::columns::Column) -> Column {
    let name = c.name();
    let q = format!("\"{name}\"");
    let (sql_type, form) = match c.column_type() {
        ColumnType::Integer => (INTEGER, None),
        ColumnType::Boolean => (INTEGER, Some(format!("{q} IN (0, 1)"))),
        ColumnType::Double => (REAL, None),
        ColumnType::Date => (TEXT, Some(date_check(&q))),
        ColumnType::Timestamp => (TEXT, Some(typed_instant_check(&q))),
        ColumnType::Json => (TEXT, Some(format!("json_valid({q})"))),
        ColumnType::Numeric => (
            TEXT,
            Some(format!("{q} <> '' AND {q} NOT GLOB '*[^0-9eE.+-]*'")),
        ),
        _ => (TEXT, None),
    };
    // The form an instant's CHECK had when typed columns came: the same
    // instants, in more steps.
    let earlier = match c.column_type() {
        ColumnType::Timestamp => vec![Cow::Owned(format!(
            "{q} IS NULL OR ({})",
            instant_check(&q)
        ))],
        _ => Vec::new(),
    };
    Column {
        name: Cow::Owned(name.to_owned()),
        sql_type,
        not_null: false,
        default: None,
        check: form.map(|form| format!("{q} IS NULL OR ({form})")),
        earlier_checks: earlier,
    }
}

/// `ADD COLUMN` of each typed column of `columns` (the upgrade that adds
/// declared columns to a table with rows; their `CHECK`s hold for the
/// NULLs every row starts with).
pub(crate) fn add_typed_columns(table: &str, columns: &Columns) -> Vec<String> {
    columns
        .iter()
        .map(|c| {
            format!(
                r#"ALTER TABLE "{table}" ADD COLUMN {}"#,
                typed_column(c).definition(false)
            )
        })
        .collect()
}

/// The name of the store's index on typed column `column`: as
/// [`index_name`], the `:` keeps it apart from every table's name.
pub(crate) fn column_index_name(table: &str, column: &str) -> String {
    format!("{table}:{column}")
}

/// `CREATE INDEX IF NOT EXISTS` on each indexed typed column.
pub(crate) fn create_column_indexes(table: &str, typed: &Columns) -> Vec<String> {
    typed
        .iter()
        .filter(|c| c.is_indexed())
        .map(|c| {
            format!(
                "CREATE INDEX IF NOT EXISTS \"{}\" ON \"{table}\" (\"{}\")",
                column_index_name(table, c.name()),
                c.name()
            )
        })
        .collect()
}

/// [`TABLES`]: one row per records table, its schema version.
pub(crate) fn tables_table() -> TableDef {
    TableDef {
        name: TABLES.to_owned(),
        columns: vec![
            Column::text("records_table", None),
            Column {
                name: Cow::Borrowed("schema_version"),
                sql_type: INTEGER,
                not_null: true,
                default: None,
                check: None,
                earlier_checks: Vec::new(),
            },
        ],
        primary_key: &["records_table"],
        clustered: false,
    }
}

/// [`DAYS`] as schema version `version` (2 or 3) has it: one row per
/// records table and day that needed one, with the day's listing watermark
/// (`NULL`: no listing applied yet) and, from version 3, its ledger row
/// ([`ledger_columns`]).
pub(crate) fn days_table(version: i64) -> TableDef {
    let mut columns = vec![
        Column::text("records_table", None),
        Column::text("day", Some(date_check("day"))),
        nullable_instant("listing_watermark"),
    ];
    if version >= 3 {
        columns.extend(ledger_columns());
    }
    TableDef {
        name: DAYS.to_owned(),
        columns,
        primary_key: &["records_table", "day"],
        clustered: false,
    }
}

/// A `NULL`-able instant in [`INSTANT_FORMAT`](crate::INSTANT_FORMAT).
fn nullable_instant(name: &'static str) -> Column {
    Column::text(
        name,
        Some(format!("{name} IS NULL OR ({})", instant_check(name))),
    )
    .nullable()
}

/// The day ledger's columns of [`DAYS`], which version 3 added after
/// `listing_watermark`, all `NULL`-able (a day synced before the upgrade
/// has none set): the last success (`synced_at` … `collapsed`, set
/// together, `run_id` and `as_of` possibly `NULL`) and the last failure
/// after it (`failed_at` … `error`).
pub(crate) fn ledger_columns() -> Vec<Column> {
    let count = |name: &'static str, min: i64| {
        Column::integer(name, Some(format!("{name} IS NULL OR {name} >= {min}"))).nullable()
    };
    vec![
        nullable_instant(SYNCED_AT),
        Column::text("run_id", None).nullable(),
        Column::text(
            "mode",
            Some("mode IS NULL OR mode IN ('merge', 'replace')".to_owned()),
        )
        .nullable(),
        nullable_instant("as_of"),
        Column::text(
            "digest",
            Some(
                "digest IS NULL OR (length(digest) = 32 AND digest NOT GLOB '*[^0-9a-f]*')"
                    .to_owned(),
            ),
        )
        .nullable(),
        count("inserted", 0),
        count("updated", 0),
        count("unchanged", 0),
        count("stale", 0),
        count("deleted", 0),
        count("unlisted", 0),
        count("collapsed", 0),
        nullable_instant("failed_at"),
        Column::text("failed_run_id", None).nullable(),
        count("attempts", 1),
        Column::text("error", None).nullable(),
    ]
}

/// The step from schema version 2 to 3 on the shared [`DAYS`]: the ledger
/// columns, in order, every existing row's left `NULL`.
pub(crate) fn add_ledger_columns() -> Vec<String> {
    ledger_columns()
        .iter()
        .map(|c| format!("ALTER TABLE {DAYS} ADD COLUMN {}", c.definition(false)))
        .collect()
}

/// The step from schema version 1 to 2 on the records table: the `deleted`
/// column, every existing row live. (The metadata tables are created apart,
/// when missing.)
pub(crate) fn add_deleted_column(table: &str) -> String {
    format!(
        "ALTER TABLE \"{table}\" ADD COLUMN {}",
        deleted_column().definition(false)
    )
}

/// The name of the store's index on `event_date`. Table names are
/// `[a-z_][a-z0-9_]*` (SQLite ignores case), so a name with a `:` can never
/// be another table's, and tables and indexes share one namespace in
/// SQLite: `{table}_event_date` was the name of the table `c_event_date`.
pub(crate) fn index_name(table: &str) -> String {
    format!("{table}:{INDEXED}")
}

/// `CREATE INDEX IF NOT EXISTS` on `event_date`, run only when the table
/// has no index that serves a day's rows.
pub(crate) fn create_index(table: &str) -> String {
    format!(
        "CREATE INDEX IF NOT EXISTS \"{}\" ON \"{table}\" ({INDEXED})",
        index_name(table)
    )
}

/// The table of every version history keeps of records table `table`
/// ([`backfill_core::history`]): one row per `(key, updated_at)`, the
/// version as delivered, and the earliest listing of its day at or after
/// it that lacked it (`absent_from`). The `:` keeps the name apart from
/// every records table's (see [`index_name`]); people read the view,
/// [`history_view_name`].
pub(crate) fn history_versions_name(table: &str) -> String {
    format!("{table}:versions")
}

/// The table of every listing instant of each day of records table
/// `table`, which history needs all of (the days table keeps the latest).
pub(crate) fn history_listings_name(table: &str) -> String {
    format!("{table}:listings")
}

/// The view people query for history: `{table}_history`.
pub(crate) fn history_view_name(table: &str) -> String {
    format!("{table}_history")
}

/// [`history_versions_name`]'s definition: the records table's columns
/// and `CHECK`s, then `absent_from`, then the `typed` columns as the
/// records table has them (a version's as delivered; `NULL` in a
/// tombstone, and in a version older than a column's declaration whose
/// value does not fit it).
///
/// Kept in the order of `(event_date, key, updated_at)`, its primary key:
/// a day's versions, written in key order, go in one stretch of the table
/// (no index to keep beside it, however the keys are spread), and a
/// listing finds its day's versions in that stretch. Two versions of one
/// instant of a key with different `event_date`s are two rows; the view
/// shows the one that supersedes the other.
pub(crate) fn history_versions_table(table: &str, typed: &Columns) -> TableDef {
    let mut columns = records_table(table, SCHEMA_VERSION, &Columns::default()).columns;
    for column in &mut columns {
        column.earlier_checks.clear();
        // The same instants as the records table's check, in fewer steps
        // (every version is checked once more, as history takes it).
        if column.name == "updated_at" {
            column.check = Some(typed_instant_check("updated_at"));
        }
    }
    columns.push(
        Column::text(
            "absent_from",
            Some(format!(
                "absent_from IS NULL OR ({})",
                typed_instant_check("absent_from")
            )),
        )
        .nullable(),
    );
    columns.extend(typed.iter().map(typed_column));
    TableDef {
        name: history_versions_name(table),
        columns,
        primary_key: &["event_date", "key", "updated_at"],
        clustered: true,
    }
}

/// [`history_listings_name`]'s definition.
pub(crate) fn history_listings_table(table: &str) -> TableDef {
    TableDef {
        name: history_listings_name(table),
        columns: vec![
            Column::text("day", Some(date_check("day"))),
            Column::text("as_of", Some(instant_check("as_of"))),
        ],
        primary_key: &["day", "as_of"],
        clustered: true,
    }
}

/// What the store's history view says of itself, first in its text: a
/// view with it is the store's, remade when the typed columns change; a
/// view of that name without it is someone else's, and refused.
pub(crate) const HISTORY_VIEW_MARK: &str = "/* backfill: history of ";

/// The history view of `table`: one row per version, valid from its
/// `updated_at` (`valid_from`) to the next version's (`valid_to`, `NULL`
/// while it is the newest); a live version a listing lacked is closed at
/// that listing's instant, where a tombstone row opens
/// ([`backfill_core::history::history_of`], in SQL); the `typed` columns
/// last (`NULL` in a tombstone).
pub(crate) fn create_history_view(table: &str, typed: &Columns) -> String {
    let names: Vec<String> = typed.iter().map(|c| format!(r#""{}""#, c.name())).collect();
    let carried: String = names.iter().map(|n| format!(", {n}")).collect();
    let nulls: String = names.iter().map(|_| ", NULL").collect();
    format!(
        r#"CREATE VIEW "{view}" AS {HISTORY_VIEW_MARK}{table} */
WITH v AS (
    SELECT key, event_date, value, updated_at, deleted{carried},
        CASE WHEN deleted = 0 AND absent_from IS NOT NULL
                AND (next_at IS NULL OR absent_from < next_at)
            THEN absent_from END AS closed_at,
        next_at
    FROM (SELECT *, lead(updated_at) OVER (PARTITION BY key ORDER BY updated_at) AS next_at
          FROM (SELECT *, row_number() OVER (PARTITION BY key, updated_at
                    ORDER BY deleted DESC, value DESC, event_date DESC) AS nth
                FROM "{versions}")
          WHERE nth = 1))
SELECT key, event_date, value, updated_at, updated_at AS valid_from,
    coalesce(closed_at, next_at) AS valid_to, deleted{carried}
FROM v WHERE closed_at IS NULL OR closed_at > updated_at
UNION ALL
SELECT key, event_date, '', closed_at, closed_at, next_at, 1{nulls}
FROM v WHERE closed_at IS NOT NULL"#,
        view = history_view_name(table),
        versions = history_versions_name(table),
    )
}

/// What a store that keeps history runs besides the records' statements.
#[derive(Debug)]
pub(crate) struct HistoryStatements {
    /// A version new to history (`?1` key, `?2` event_date, `?3` value,
    /// `?4` updated_at, `?5` deleted, `?6` the earliest listing of its day
    /// at or after it, the typed columns from `?7`); of two versions of
    /// one instant and day, the one that supersedes the other.
    pub(crate) insert: String,
    /// The listing instants of day `?1`, in order.
    pub(crate) listings_of_day: String,
    /// A listing of day `?1` as of `?2`: the versions of the day it lacks
    /// (those not staged in [`LISTED`]) are absent from `?2` on, unless an
    /// earlier listing lacked them first.
    pub(crate) lacked: String,
    /// A listing of day `?1` as of `?2`, kept.
    pub(crate) listing: String,
    /// Every row of the view, by key and `valid_from`.
    pub(crate) all: String,
    /// The live rows valid at `?1`, by key.
    pub(crate) as_of: String,
}

impl HistoryStatements {
    pub(crate) fn new(table: &str, typed: &Columns) -> Self {
        let versions = history_versions_name(table);
        let listings = history_listings_name(table);
        let view = history_view_name(table);
        let names: Vec<String> = typed.iter().map(|c| format!(r#""{}""#, c.name())).collect();
        let typed_cols: String = names.iter().map(|n| format!(", {n}")).collect();
        let typed_values: String = (0..names.len()).map(|i| format!(", ?{}", i + 7)).collect();
        let typed_set: String = names
            .iter()
            .map(|n| format!(", {n} = excluded.{n}"))
            .collect();
        Self {
            insert: format!(
                r#"INSERT INTO "{versions}" (key, event_date, value, updated_at, deleted, absent_from{typed_cols})
VALUES (?1, ?2, ?3, ?4, ?5, ?6{typed_values})
ON CONFLICT (event_date, key, updated_at) DO UPDATE SET
    value = excluded.value, deleted = excluded.deleted{typed_set}
WHERE (excluded.deleted, excluded.value) > (deleted, value)"#
            ),
            listings_of_day: format!(
                r#"SELECT as_of FROM "{listings}" WHERE day = ?1 ORDER BY as_of"#
            ),
            lacked: format!(
                r#"UPDATE "{versions}" SET absent_from = ?2
WHERE event_date = ?1 AND updated_at <= ?2 AND (absent_from IS NULL OR absent_from > ?2)
    AND NOT EXISTS (SELECT 1 FROM {LISTED} AS l
        WHERE l.key = "{versions}".key AND l.updated_at = "{versions}".updated_at)"#
            ),
            listing: format!(
                r#"INSERT INTO "{listings}" (day, as_of) VALUES (?1, ?2) ON CONFLICT DO NOTHING"#
            ),
            all: format!(
                r#"SELECT key, event_date, value, updated_at, deleted, valid_to FROM "{view}"
ORDER BY key, valid_from"#
            ),
            as_of: format!(
                r#"SELECT key, event_date, value, updated_at, deleted FROM "{view}"
WHERE valid_from <= ?1 AND (valid_to IS NULL OR valid_to > ?1) AND deleted = 0
ORDER BY key"#
            ),
        }
    }
}

/// Turning history on for a table with rows: one version per key, its
/// stored one (tombstones included) with its typed columns, and each
/// day's latest listing.
pub(crate) fn seed_history(table: &str, typed: &Columns) -> [String; 2] {
    let typed_cols: String = typed
        .iter()
        .map(|c| format!(r#", "{}""#, c.name()))
        .collect();
    [
        format!(
            r#"INSERT INTO "{versions}" (key, event_date, value, updated_at, deleted{typed_cols})
SELECT key, event_date, value, updated_at, deleted{typed_cols} FROM "{table}""#,
            versions = history_versions_name(table)
        ),
        format!(
            r#"INSERT INTO "{listings}" (day, as_of)
SELECT day, listing_watermark FROM {DAYS}
WHERE records_table = '{table}' AND listing_watermark IS NOT NULL"#,
            listings = history_listings_name(table)
        ),
    ]
}

/// The version row of `?1`: insert, or overwrite a stale one.
pub(crate) const REGISTER: &str = "INSERT INTO backfill_tables (records_table, schema_version)
VALUES (?1, ?2)
ON CONFLICT (records_table) DO UPDATE SET schema_version = excluded.schema_version";

/// The schema version recorded for `?1`.
pub(crate) const VERSION: &str =
    "SELECT schema_version FROM backfill_tables WHERE records_table = ?1";

/// The day rows of `?1`, dropped when its records table is created anew:
/// watermarks of a table that no longer exists must not delete the new
/// table's rows.
pub(crate) const FORGET_DAYS: &str = "DELETE FROM backfill_days WHERE records_table = ?1";

/// Where a listing stages its keys, page by page, for the tombstoning of
/// the rows it lacks: a table in the connection's own `temp` schema (a
/// temporary file past SQLite's page cache, so a listing of any size is
/// held on disk, not in memory), created by the first listing and emptied
/// by each. The `:` keeps it apart from every records table name (see
/// [`index_name`]), which an unqualified name in `temp` would shadow.
pub(crate) const LISTED: &str = r#"temp."backfill:listed""#;

/// Creates [`LISTED`] if this connection has not yet (inside a listing's
/// transaction: a rollback takes it away again, and the next listing
/// creates it anew).
pub(crate) const LISTED_CREATE: &str = r#"CREATE TEMP TABLE IF NOT EXISTS "backfill:listed" (key TEXT NOT NULL PRIMARY KEY, updated_at TEXT NOT NULL) WITHOUT ROWID"#;

/// Empties [`LISTED`], before and after each listing.
pub(crate) const LISTED_CLEAR: &str = r#"DELETE FROM temp."backfill:listed""#;

/// Stages one listed key `?1`, of version `?2` (its `updated_at`: what
/// history asks of a listing), in [`LISTED`].
pub(crate) const LISTED_ADD: &str =
    r#"INSERT INTO temp."backfill:listed" (key, updated_at) VALUES (?1, ?2)"#;

/// The statements a store runs, built once from the validated table name.
#[derive(Debug)]
pub(crate) struct Statements {
    /// One live row by key.
    pub(crate) get: String,
    /// The stored version of one key, as `(updated_at, deleted, value,
    /// event_date)`, tombstone or not: read only to count what the upsert
    /// does.
    pub(crate) get_version: String,
    /// Every live row, in key order.
    pub(crate) all: String,
    /// One day's live rows, in key order.
    pub(crate) day: String,
    /// Every row, tombstones included, in key order.
    pub(crate) all_with_tombstones: String,
    /// The write of a record whose key is absent (a no-op when it is
    /// present), with the watermark rule.
    pub(crate) insert_absent: String,
    /// The write of a record over a stored version it supersedes (a no-op
    /// otherwise: the version order is the statement's own WHERE), with the
    /// watermark rule.
    pub(crate) update_older: String,
    /// The listing watermark of day `?1`, if any.
    pub(crate) watermark: String,
    /// The rows of day `?1` in the key range `[?2, ?3]`, in key order:
    /// key, value, `updated_at`, tombstone flag. The unary `+` keeps the
    /// range out of the index choice (a random-key day's range spans the
    /// primary key): the day's index serves.
    pub(crate) day_range: String,
    /// A listing's day: `(live rows, live rows it would tombstone)`, the
    /// listed keys being those in [`LISTED`].
    pub(crate) count_unlisted: String,
    /// A listing's day: its unlisted live rows become their own tombstones.
    pub(crate) unlist: String,
    /// The batch's day's ledger row, last in the batch's transaction: its
    /// success, its failure cleared, and a listing's watermark raised.
    pub(crate) synced: String,
    /// The ledger rows of days `?1..=?2`, in day order.
    pub(crate) ledger_read: String,
    /// Day `?1`'s failure, its success kept.
    pub(crate) failed: String,
    /// Day `?1`'s timing: `?2` its `synced_at`, `?3` and `?4` its fetch
    /// and write in milliseconds ([`TIMINGS`]).
    pub(crate) timing: String,
    /// The timings of days `?1..=?2` that belong to their ledger rows, in
    /// day order.
    pub(crate) timings_read: String,
    /// The acceptances of days `?1..=?2` ([`ACCEPTED`]), in day order.
    pub(crate) accepted_read: String,
    /// Day `?1` accepted at `?2`.
    pub(crate) accept: String,
    /// Day `?1`'s acceptance taken back.
    pub(crate) unaccept: String,
    /// Tombstones older than an instant, removed.
    pub(crate) purge: String,
    /// Before [`Statements::purge`], in its transaction: the digest of
    /// every day whose tombstones it removes, and of every day whose batch
    /// held records of other days (a digest marked by its first bit, hex
    /// `8`–`f`) when it removes any, becomes
    /// [`Digest::PURGED`](backfill_core::Digest::PURGED).
    pub(crate) purge_digests: String,
    /// History's statements, when the table keeps it.
    pub(crate) history: Option<HistoryStatements>,
}

impl Statements {
    pub(crate) fn new(table: &str, typed: &Columns, history: bool) -> Self {
        let cols = "key, event_date, value, updated_at, deleted";
        // The typed columns: named, bound from ?7 on, and NULL in what a
        // write turns into a tombstone (the watermark rule, or a listing).
        let names: Vec<String> = typed.iter().map(|c| format!("\"{}\"", c.name())).collect();
        let buried = "?5 = 0 AND ?4 <= ?6";
        let typed_cols: String = names.iter().map(|n| format!(", {n}")).collect();
        let typed_values: String = (0..names.len())
            .map(|i| {
                format!(
                    ",\n        CASE WHEN {buried} THEN NULL ELSE ?{} END",
                    i + 7
                )
            })
            .collect();
        let typed_set: String = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!(
                    ",\n    {n} = CASE WHEN {buried} THEN NULL ELSE ?{} END",
                    i + 7
                )
            })
            .collect();
        let typed_null: String = names.iter().map(|n| format!(", {n} = NULL")).collect();
        // The table name is a checked identifier (`[a-z_][a-z0-9_]*`), so
        // it is safe as a string literal too.
        Self {
            get: format!(r#"SELECT {cols} FROM "{table}" WHERE key = ?1 AND deleted = 0"#),
            get_version: format!(
                r#"SELECT updated_at, deleted, value, event_date FROM "{table}" WHERE key = ?1"#
            ),
            all: format!(r#"SELECT {cols} FROM "{table}" WHERE deleted = 0 ORDER BY key"#),
            day: format!(
                r#"SELECT {cols} FROM "{table}" WHERE event_date = ?1 AND deleted = 0 ORDER BY key"#
            ),
            all_with_tombstones: format!(r#"SELECT {cols} FROM "{table}" ORDER BY key"#),
            // ?1 key, ?2 event_date, ?3 value, ?4 updated_at, ?5 deleted:
            // the incoming version as sent; ?6 the listing watermark of the
            // record's own day as it is before this batch (NULL if none),
            // read once per day inside the same IMMEDIATE transaction (no
            // other writer can move it meanwhile). The watermark rule: a
            // live record at or before it is written as its own tombstone.
            // The version compare in DO UPDATE's WHERE is of the *incoming*
            // version, not the tombstone it may become (`excluded`), so
            // whether a record is written does not depend on the watermark.
            insert_absent: format!(
                r#"INSERT INTO "{table}" ({cols}{typed_cols})
VALUES (?1, ?2,
        CASE WHEN {buried} THEN '' ELSE ?3 END,
        ?4,
        CASE WHEN {buried} THEN 1 ELSE ?5 END{typed_values})
ON CONFLICT (key) DO NOTHING"#
            ),
            update_older: format!(
                r#"UPDATE "{table}" SET
    event_date = ?2,
    value = CASE WHEN {buried} THEN '' ELSE ?3 END,
    updated_at = ?4,
    deleted = CASE WHEN {buried} THEN 1 ELSE ?5 END{typed_set}
WHERE key = ?1 AND (?4, ?5, ?3, ?2) > (updated_at, deleted, value, event_date)"#
            ),
            watermark: format!(
                "SELECT listing_watermark FROM {DAYS} WHERE records_table = '{table}' AND day = ?1"
            ),
            day_range: format!(
                r#"SELECT key, value, updated_at, deleted FROM "{table}"
WHERE event_date = ?1 AND +key >= ?2 AND +key <= ?3 ORDER BY key"#
            ),
            // ?1 the day, ?2 as_of; the listed keys are staged in
            // LISTED, whose primary key answers each NOT IN.
            count_unlisted: format!(
                r#"SELECT count(*), count(*) FILTER (WHERE updated_at <= ?2 AND key NOT IN (SELECT key FROM {LISTED}))
FROM "{table}" WHERE event_date = ?1 AND deleted = 0"#
            ),
            // Same key, event_date and updated_at: the tombstone beats
            // exactly that version and every older one.
            unlist: format!(
                r#"UPDATE "{table}" SET deleted = 1, value = ''{typed_null}
WHERE event_date = ?1 AND deleted = 0 AND updated_at <= ?2 AND key NOT IN (SELECT key FROM {LISTED})"#
            ),
            // ?1 day, ?2 synced_at, ?3 run_id, ?4 mode, ?5 as_of (NULL in
            // merge mode; also the watermark a listing raises the day's
            // to, never lowering it), ?6 digest, ?7–?13 the counts. One
            // row change per batch, whatever it did.
            synced: format!(
                r#"INSERT INTO {DAYS} (records_table, day, listing_watermark,
    synced_at, run_id, mode, as_of, digest,
    inserted, updated, unchanged, stale, deleted, unlisted, collapsed)
VALUES ('{table}', ?1, ?5, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
ON CONFLICT (records_table, day) DO UPDATE SET
    listing_watermark = CASE
        WHEN {DAYS}.listing_watermark IS NULL
            OR excluded.listing_watermark > {DAYS}.listing_watermark
        THEN excluded.listing_watermark
        ELSE {DAYS}.listing_watermark END,
    synced_at = excluded.synced_at, run_id = excluded.run_id, mode = excluded.mode,
    as_of = excluded.as_of, digest = excluded.digest,
    inserted = excluded.inserted, updated = excluded.updated,
    unchanged = excluded.unchanged, stale = excluded.stale, deleted = excluded.deleted,
    unlisted = excluded.unlisted, collapsed = excluded.collapsed,
    failed_at = NULL, failed_run_id = NULL, attempts = NULL, error = NULL"#
            ),
            ledger_read: format!(
                r#"SELECT day, listing_watermark, synced_at, run_id, mode, as_of, digest,
    inserted, updated, unchanged, stale, deleted, unlisted, collapsed,
    failed_at, failed_run_id, attempts, error
FROM {DAYS} WHERE records_table = '{table}' AND day BETWEEN ?1 AND ?2 ORDER BY day"#
            ),
            // ?1 day, ?2 failed_at, ?3 failed_run_id, ?4 attempts, ?5 error.
            failed: format!(
                r#"INSERT INTO {DAYS} (records_table, day, failed_at, failed_run_id, attempts, error)
VALUES ('{table}', ?1, ?2, ?3, ?4, ?5)
ON CONFLICT (records_table, day) DO UPDATE SET
    failed_at = excluded.failed_at, failed_run_id = excluded.failed_run_id,
    attempts = excluded.attempts, error = excluded.error"#
            ),
            timing: format!(
                r#"INSERT INTO {TIMINGS} (records_table, day, synced_at, fetch_ms, write_ms)
VALUES ('{table}', ?1, ?2, ?3, ?4)
ON CONFLICT (records_table, day) DO UPDATE SET synced_at = excluded.synced_at,
    fetch_ms = excluded.fetch_ms, write_ms = excluded.write_ms"#
            ),
            timings_read: format!(
                r#"SELECT t.day, t.fetch_ms, t.write_ms FROM {TIMINGS} t
JOIN {DAYS} d ON d.records_table = t.records_table AND d.day = t.day AND d.synced_at = t.synced_at
WHERE t.records_table = '{table}' AND t.day BETWEEN ?1 AND ?2 ORDER BY t.day"#
            ),
            accepted_read: format!(
                r#"SELECT day, accepted_at FROM {ACCEPTED}
WHERE records_table = '{table}' AND day BETWEEN ?1 AND ?2 ORDER BY day"#
            ),
            accept: format!(
                r#"INSERT INTO {ACCEPTED} (records_table, day, accepted_at) VALUES ('{table}', ?1, ?2)
ON CONFLICT (records_table, day) DO UPDATE SET accepted_at = excluded.accepted_at"#
            ),
            unaccept: format!(
                r#"DELETE FROM {ACCEPTED} WHERE records_table = '{table}' AND day = ?1"#
            ),
            purge: format!(r#"DELETE FROM "{table}" WHERE deleted = 1 AND updated_at < ?1"#),
            purge_digests: format!(
                r#"UPDATE {DAYS} SET digest = '{purged}'
WHERE records_table = '{table}' AND digest IS NOT NULL AND (day IN (
    SELECT DISTINCT event_date FROM "{table}" WHERE deleted = 1 AND updated_at < ?1)
  OR (substr(digest, 1, 1) >= '8' AND EXISTS (
    SELECT 1 FROM "{table}" WHERE deleted = 1 AND updated_at < ?1)))"#,
                purged = backfill_core::Digest::PURGED
            ),
            history: history.then(|| HistoryStatements::new(table, typed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn table() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&records_table("t", SCHEMA_VERSION, &Columns::default()).create())
            .unwrap();
        conn.execute_batch(&create_index("t")).unwrap();
        conn.execute_batch(&days_table(SCHEMA_VERSION).create())
            .unwrap();
        conn
    }

    fn insert(conn: &Connection, key: &str, date: &str, value: &str, at: &str) -> bool {
        conn.execute(
            "INSERT INTO t (key, event_date, value, updated_at) VALUES (?1, ?2, ?3, ?4)",
            [key, date, value, at],
        )
        .is_ok()
    }

    #[test]
    fn checks_take_what_records_allow_at_the_bounds() {
        let conn = table();
        let at = "2026-01-01T00:00:00.000000Z";
        let max_key = "k".repeat(MAX_KEY_BYTES);
        for (key, date, at) in [
            (max_key.as_str(), "2026-01-01", at),
            ("low", "0001-01-01", "0001-01-01T00:00:00.000000Z"),
            ("high", "9999-12-31", "9999-12-31T23:59:59.999999Z"),
            ("leap", "2024-02-29", "2024-02-29T12:00:00.500000Z"),
        ] {
            assert!(insert(&conn, key, date, "v", at), "{key}");
        }
    }

    #[test]
    fn checks_refuse_what_records_forbid() {
        let conn = table();
        let (d, at) = ("2026-01-01", "2026-01-01T00:00:00.000000Z");
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        for (what, key, date, value, at) in [
            ("empty key", "", d, "v", at),
            ("long key", long_key.as_str(), d, "v", at),
            ("NUL in key", "a\0b", d, "v", at),
            ("NUL in value", "k", d, "a\0b", at),
            ("year 0", "k", "0000-06-01", "v", at),
            ("February 30", "k", "2026-02-30", "v", at),
            ("short date", "k", "2026-1-01", "v", at),
            ("instant year 0", "k", d, "v", "0000-01-01T00:00:00.000000Z"),
            ("leap second", "k", d, "v", "2026-12-31T23:59:60.000000Z"),
            ("no T", "k", d, "v", "2026-01-01 00:00:00.000000Z"),
            ("no Z", "k", d, "v", "2026-01-01T00:00:00.0000000"),
            ("millis", "k", d, "v", "2026-01-01T00:00:00.000Z"),
        ] {
            assert!(!insert(&conn, key, date, value, at), "{what}");
        }
    }

    #[test]
    fn a_tombstone_is_0_or_1_and_has_an_empty_value() {
        let conn = table();
        let row = |key: &str, value: &str, deleted: i64| {
            conn.execute(
                "INSERT INTO t VALUES (?1, '2026-01-01', ?2, '2026-01-01T00:00:00.000000Z', ?3)",
                rusqlite::params![key, value, deleted],
            )
            .is_ok()
        };
        assert!(row("live", "v", 0));
        assert!(row("gone", "", 1));
        assert!(
            !row("gone-with-value", "v", 1),
            "a tombstone's value is empty"
        );
        assert!(!row("two", "", 2));
        assert!(!row("minus", "", -1));
        assert!(
            insert(
                &conn,
                "default",
                "2026-01-01",
                "v",
                "2026-01-01T00:00:00.000000Z"
            ),
            "a row written without `deleted` is live"
        );
        let deleted: i64 = conn
            .query_row("SELECT deleted FROM t WHERE key = 'default'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(deleted, 0);
    }

    #[test]
    fn the_days_table_checks_its_day_and_watermark() {
        let conn = table();
        let row = |day: &str, mark: Option<&str>| {
            conn.execute(
                "INSERT INTO backfill_days (records_table, day, listing_watermark)
                 VALUES ('t', ?1, ?2)",
                rusqlite::params![day, mark],
            )
            .is_ok()
        };
        assert!(row("2026-01-01", Some("2026-01-01T00:00:00.000000Z")));
        assert!(row("2026-01-02", None));
        assert!(!row("2026-02-30", None));
        assert!(!row("2026-01-03", Some("2026-01-03 00:00:00")));
        assert!(!row("2026-01-01", None), "one row per table and day");
    }

    #[test]
    fn the_ledger_columns_check_their_shapes() {
        let conn = table();
        let row = |column: &str, value: rusqlite::types::Value| {
            conn.execute(
                &format!(
                    "INSERT OR REPLACE INTO backfill_days (records_table, day, {column})
                     VALUES ('t', '2026-01-01', ?1)"
                ),
                [value],
            )
            .is_ok()
        };
        use rusqlite::types::Value::{Blob, Integer, Null, Text};
        let text = |s: &str| Text(s.to_owned());
        for (column, good, bad) in [
            (
                "synced_at",
                text("2026-01-01T00:00:00.000000Z"),
                text("2026-01-01 00:00:00"),
            ),
            ("as_of", text("2026-01-01T00:00:00.000000Z"), text("x")),
            ("failed_at", text("2026-01-01T00:00:00.000000Z"), Integer(1)),
            ("mode", text("merge"), text("Merge")),
            ("mode", text("replace"), text("upsert")),
            (
                "digest",
                text("0123456789abcdef0123456789abcdef"),
                text("0123456789ABCDEF0123456789ABCDEF"),
            ),
            ("digest", text(&"f".repeat(32)), text(&"f".repeat(31))),
            ("digest", text(&"0".repeat(32)), text(&"g".repeat(32))),
            ("inserted", Integer(0), Integer(-1)),
            ("collapsed", Integer(7), text("seven")),
            ("attempts", Integer(1), Integer(0)),
            ("run_id", text("any text"), Blob(vec![1])),
            ("error", text(""), Blob(vec![1])),
        ] {
            assert!(row(column, good.clone()), "{column} = {good:?}");
            assert!(row(column, Null), "{column} = NULL");
            assert!(!row(column, bad.clone()), "{column} = {bad:?}");
        }
    }

    /// A listing of millions of keys stays one pass over its day: the
    /// day's rows by the `event_date` index, each key looked up in the
    /// staged keys' primary key (not a scan of them, nor a copy).
    #[test]
    fn unlisted_rows_are_found_by_index() {
        let conn = table();
        conn.execute(LISTED_CREATE, []).unwrap();
        let sql = Statements::new("t", &Columns::default(), false);
        for statement in [&sql.count_unlisted, &sql.unlist] {
            let mut plan = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {statement}"))
                .unwrap();
            let plan: Vec<String> = plan
                .query_map(["2026-01-01", "2026-01-01T00:00:00.000000Z"], |r| r.get(3))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(
                plan,
                [
                    "SEARCH t USING INDEX t:event_date (event_date=?)",
                    "USING INDEX sqlite_autoindex_backfill:listed_1 FOR IN-OPERATOR",
                ],
                "{statement}"
            );
        }
    }

    #[test]
    fn the_index_name_is_no_table_name() {
        assert_eq!(index_name("c"), "c:event_date");
        assert!(
            backfill_core::adapter::check_identifier("table", &index_name("c")).is_err(),
            "an index name must be outside the table name rule"
        );
    }
}
