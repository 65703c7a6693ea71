//! Every SQL text of the store, built from validated names.
//!
//! DDL is free functions, run only when something is missing; the DML is
//! the fields of [`Statements`], built once per store. Each table's
//! definition is described once, as a [`TableDef`]: `CREATE TABLE` is built
//! from it, and so is the check of a table that already exists
//! (`schema.rs`). Three tables: the records table (one per store, named by
//! the user) and two metadata tables shared by every records table of the
//! database, [`TABLES`] (each records table's schema version) and [`DAYS`]
//! (each day's listing watermark).

use backfill_core::{MAX_KEY_BYTES, MAX_YEAR, MIN_YEAR};

/// The schema version this release creates and writes: 2, the records
/// table with its `deleted` column, and the metadata tables. Version 1 (the
/// release before tombstones) had neither; it is upgraded in place on open
/// (`migrate.rs`).
pub(crate) const SCHEMA_VERSION: i64 = 2;

/// The metadata table holding each records table's schema version.
pub(crate) const TABLES: &str = "backfill_tables";

/// The metadata table holding each records table's days: the listing
/// watermark, for now.
pub(crate) const DAYS: &str = "backfill_days";

/// Names a records table may not take: the metadata tables'.
pub(crate) const RESERVED: [&str; 2] = [TABLES, DAYS];

/// The declared type of text columns.
pub(crate) const TEXT: &str = "TEXT";

/// The declared type of integer columns.
pub(crate) const INTEGER: &str = "INTEGER";

/// Every text column's collation: bytes, like Rust's `str` order and
/// Postgres' `COLLATE "C"`, so the version order is the one the contract
/// defines. (Integer columns declare none; SQLite reports `BINARY`.)
pub(crate) const COLLATION: &str = "BINARY";

/// The column the store keeps an index on, for a day's rows.
pub(crate) const INDEXED: &str = "event_date";

/// The records table's tombstone flag, the column version 2 added.
pub(crate) const DELETED: &str = "deleted";

/// One column as the store creates it: `<name> <type> [NOT NULL] [DEFAULT
/// …] [COLLATE BINARY] [PRIMARY KEY] [CHECK (<check>)]`.
#[derive(Debug)]
pub(crate) struct Column {
    pub(crate) name: &'static str,
    /// [`TEXT`] or [`INTEGER`].
    pub(crate) sql_type: &'static str,
    pub(crate) not_null: bool,
    /// The `DEFAULT`, as SQLite reports it back (`pragma_table_xinfo`).
    pub(crate) default: Option<&'static str>,
    /// The column's one `CHECK` expression, if it has one.
    pub(crate) check: Option<String>,
    /// Weaker `CHECK`s that earlier versions of this crate created, still
    /// accepted in an existing table so that its file keeps opening: they
    /// differ only in what a writer other than this store could slip in,
    /// which reading back then refuses.
    pub(crate) earlier_checks: &'static [&'static str],
}

impl Column {
    fn text(name: &'static str, check: Option<String>) -> Self {
        Self {
            name,
            sql_type: TEXT,
            not_null: true,
            default: None,
            check,
            earlier_checks: &[],
        }
    }

    fn earlier(mut self, checks: &'static [&'static str]) -> Self {
        self.earlier_checks = checks;
        self
    }

    fn nullable(mut self) -> Self {
        self.not_null = false;
        self
    }

    /// The column's definition in `CREATE TABLE` or `ADD COLUMN`.
    fn definition(&self, primary_key: bool) -> String {
        let mut def = format!("{} {}", self.name, self.sql_type);
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
/// one column, as a table constraint otherwise).
#[derive(Debug)]
pub(crate) struct TableDef {
    pub(crate) name: String,
    pub(crate) columns: Vec<Column>,
    pub(crate) primary_key: &'static [&'static str],
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
                let pk = inline_pk && self.pk_position(c.name) == 1;
                format!("    {}", c.definition(pk))
            })
            .collect();
        if !inline_pk {
            items.push(format!("    PRIMARY KEY ({})", self.primary_key.join(", ")));
        }
        format!(
            "CREATE TABLE IF NOT EXISTS \"{}\" (\n{}\n) STRICT",
            self.name,
            items.join(",\n")
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

/// The records table's `deleted` column: 0 or 1, and a tombstone's value
/// is empty. Added by the upgrade from version 1, so it is the last column
/// of a new table and of an upgraded one alike, with a `DEFAULT` (which
/// `ADD COLUMN … NOT NULL` requires) that makes every existing row live.
fn deleted_column() -> Column {
    Column {
        name: DELETED,
        sql_type: INTEGER,
        not_null: true,
        default: Some("0"),
        check: Some("deleted IN (0, 1) AND (deleted = 0 OR value = '')".to_owned()),
        earlier_checks: &[],
    }
}

/// The records table of schema version `version` (1 or 2). The `CHECK`s
/// repeat the record rules in the table itself, so no writer (ours or
/// anyone's) can store a row that the other stores would refuse or that
/// this one could not read back.
pub(crate) fn records_table(table: &str, version: i64) -> TableDef {
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
    }
    TableDef {
        name: table.to_owned(),
        columns,
        primary_key: &["key"],
    }
}

/// [`TABLES`]: one row per records table, its schema version.
pub(crate) fn tables_table() -> TableDef {
    TableDef {
        name: TABLES.to_owned(),
        columns: vec![
            Column::text("records_table", None),
            Column {
                name: "schema_version",
                sql_type: INTEGER,
                not_null: true,
                default: None,
                check: None,
                earlier_checks: &[],
            },
        ],
        primary_key: &["records_table"],
    }
}

/// [`DAYS`]: one row per records table and day that needed one, for now
/// the day's listing watermark (`NULL`: no listing applied yet). Schema
/// version 3 (the day ledger) adds columns here.
pub(crate) fn days_table() -> TableDef {
    TableDef {
        name: DAYS.to_owned(),
        columns: vec![
            Column::text("records_table", None),
            Column::text("day", Some(date_check("day"))),
            Column::text(
                "listing_watermark",
                Some(format!(
                    "listing_watermark IS NULL OR ({})",
                    instant_check("listing_watermark")
                )),
            )
            .nullable(),
        ],
        primary_key: &["records_table", "day"],
    }
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
    /// The one conditional write of a record: the version order and the
    /// watermark rule, decided by SQLite.
    pub(crate) upsert: String,
    /// The listing watermark of day `?1`, if any.
    pub(crate) watermark: String,
    /// A listing's day: `(live rows, live rows it would tombstone)`.
    pub(crate) count_unlisted: String,
    /// A listing's day: its unlisted live rows become their own tombstones.
    pub(crate) tombstone_unlisted: String,
    /// A listing's day: the watermark raised to `as_of`, only if higher.
    pub(crate) raise_watermark: String,
    /// Tombstones older than an instant, removed.
    pub(crate) purge: String,
}

impl Statements {
    pub(crate) fn new(table: &str) -> Self {
        let cols = "key, event_date, value, updated_at, deleted";
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
            upsert: format!(
                r#"INSERT INTO "{table}" ({cols})
VALUES (?1, ?2,
        CASE WHEN ?5 = 0 AND ?4 <= ?6 THEN '' ELSE ?3 END,
        ?4,
        CASE WHEN ?5 = 0 AND ?4 <= ?6 THEN 1 ELSE ?5 END)
ON CONFLICT (key) DO UPDATE SET
    event_date = excluded.event_date,
    value = excluded.value,
    updated_at = excluded.updated_at,
    deleted = excluded.deleted
WHERE (?4, ?5, ?3, ?2)
    > ("{table}".updated_at, "{table}".deleted, "{table}".value, "{table}".event_date)"#
            ),
            watermark: format!(
                "SELECT listing_watermark FROM {DAYS} WHERE records_table = '{table}' AND day = ?1"
            ),
            // ?1 the day, ?2 the listed keys (an array bound to one
            // parameter: SQLite's carray), ?3 as_of.
            count_unlisted: format!(
                r#"SELECT count(*), count(*) FILTER (WHERE updated_at <= ?3 AND key NOT IN rarray(?2))
FROM "{table}" WHERE event_date = ?1 AND deleted = 0"#
            ),
            // Same key, event_date and updated_at: the tombstone beats
            // exactly that version and every older one.
            tombstone_unlisted: format!(
                r#"UPDATE "{table}" SET deleted = 1, value = ''
WHERE event_date = ?1 AND deleted = 0 AND updated_at <= ?3 AND key NOT IN rarray(?2)"#
            ),
            // No write when the watermark is already as high: a re-applied
            // listing writes nothing at all.
            raise_watermark: format!(
                r#"INSERT INTO {DAYS} (records_table, day, listing_watermark) VALUES ('{table}', ?1, ?2)
ON CONFLICT (records_table, day) DO UPDATE SET listing_watermark = excluded.listing_watermark
WHERE {DAYS}.listing_watermark IS NULL OR excluded.listing_watermark > {DAYS}.listing_watermark"#
            ),
            purge: format!(r#"DELETE FROM "{table}" WHERE deleted = 1 AND updated_at < ?1"#),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn table() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&records_table("t", SCHEMA_VERSION).create())
            .unwrap();
        conn.execute_batch(&create_index("t")).unwrap();
        conn.execute_batch(&days_table().create()).unwrap();
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
                "INSERT INTO backfill_days VALUES ('t', ?1, ?2)",
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
    fn the_index_name_is_no_table_name() {
        assert_eq!(index_name("c"), "c:event_date");
        assert!(
            backfill_core::adapter::check_identifier("table", &index_name("c")).is_err(),
            "an index name must be outside the table name rule"
        );
    }
}
