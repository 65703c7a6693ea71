//! Every SQL text of one table, built from its validated name.
//!
//! DDL is free functions, run only when something is missing; the DML is
//! the fields of [`Statements`], built once per store. The table's
//! definition is described once, by [`columns`]: `CREATE TABLE` is built
//! from it, and so is the check of a table that already exists
//! (`schema.rs`).

use backfill_core::{MAX_KEY_BYTES, MAX_YEAR, MIN_YEAR};

/// Every column's declared type.
pub(crate) const TYPE: &str = "TEXT";

/// Every column's collation: bytes, like Rust's `str` order and Postgres'
/// `COLLATE "C"`, so the version order is the one the contract defines.
pub(crate) const COLLATION: &str = "BINARY";

/// The column the store keeps an index on, for a day's rows.
pub(crate) const INDEXED: &str = "event_date";

/// One column as the store creates it: `<name> TEXT NOT NULL COLLATE
/// BINARY [PRIMARY KEY] CHECK (<check>)`.
#[derive(Debug)]
pub(crate) struct Column {
    pub(crate) name: &'static str,
    pub(crate) primary_key: bool,
    /// The column's one `CHECK` expression.
    pub(crate) check: String,
    /// Weaker `CHECK`s that earlier versions of this crate created, still
    /// accepted in an existing table so that its file keeps opening: they
    /// differ only in what a writer other than this store could slip in,
    /// which reading back then refuses.
    pub(crate) earlier_checks: &'static [&'static str],
}

/// The table's columns. The `CHECK`s repeat the record rules in the table
/// itself, so no writer (ours or anyone's) can store a row that the other
/// stores would refuse or that this one could not read back.
pub(crate) fn columns() -> [Column; 4] {
    let (min, max) = (MIN_YEAR, MAX_YEAR);
    [
        Column {
            name: "key",
            primary_key: true,
            check: format!(
                "length(CAST(key AS BLOB)) BETWEEN 1 AND {MAX_KEY_BYTES} \
                 AND instr(CAST(key AS BLOB), x'00') = 0"
            ),
            earlier_checks: &[],
        },
        Column {
            name: "event_date",
            primary_key: false,
            // '+0 days' makes date() normalize, so 2026-02-30 is refused;
            // IS, not =, because a NULL would pass a CHECK.
            check: format!(
                "length(event_date) = 10 AND date(event_date, '+0 days') IS event_date \
                 AND event_date BETWEEN '{min:04}-01-01' AND '{max:04}-12-31'"
            ),
            earlier_checks: &["length(event_date) = 10 AND date(event_date) = event_date"],
        },
        Column {
            name: "value",
            primary_key: false,
            check: "instr(CAST(value AS BLOB), x'00') = 0".to_owned(),
            earlier_checks: &[],
        },
        Column {
            name: "updated_at",
            primary_key: false,
            // Exactly `INSTANT_FORMAT`: a valid date and time (no leap
            // second) to the second, then six digits of fraction and `Z`.
            check: format!(
                "length(updated_at) = 27 \
                 AND substr(updated_at, 1, 4) BETWEEN '{min:04}' AND '{max:04}' \
                 AND strftime('%Y-%m-%dT%H:%M:%S', substr(updated_at, 1, 19), '+0 days') \
                     IS substr(updated_at, 1, 19) \
                 AND substr(updated_at, 20) GLOB '.[0-9][0-9][0-9][0-9][0-9][0-9]Z'"
            ),
            earlier_checks: &["length(updated_at) = 27"],
        },
    ]
}

/// `CREATE TABLE IF NOT EXISTS`, run only when the table is missing (`IF
/// NOT EXISTS` because another process may be creating it too; the table
/// is checked after either way).
pub(crate) fn create_table(table: &str) -> String {
    let columns: Vec<String> = columns()
        .iter()
        .map(|c| {
            let primary_key = if c.primary_key { " PRIMARY KEY" } else { "" };
            format!(
                "    {name} {TYPE} NOT NULL COLLATE {COLLATION}{primary_key}\n        CHECK ({check})",
                name = c.name,
                check = c.check,
            )
        })
        .collect();
    format!(
        "CREATE TABLE IF NOT EXISTS \"{table}\" (\n{}\n) STRICT",
        columns.join(",\n")
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

/// The statements a store runs, built once from the validated table name.
#[derive(Debug)]
pub(crate) struct Statements {
    /// One row by key.
    pub(crate) get: String,
    /// The stored version of one key, as `(updated_at, value, event_date)`:
    /// read only to count what the upsert does.
    pub(crate) get_version: String,
    /// Every row, in key order.
    pub(crate) all: String,
    /// One day's rows, in key order.
    pub(crate) day: String,
    /// The one conditional write.
    pub(crate) upsert: String,
    /// Replace mode: the day's rows whose key is not in the batch.
    pub(crate) delete_missing: String,
}

impl Statements {
    pub(crate) fn new(table: &str) -> Self {
        let cols = "key, event_date, value, updated_at";
        Self {
            get: format!(r#"SELECT {cols} FROM "{table}" WHERE key = ?1"#),
            get_version: format!(
                r#"SELECT updated_at, value, event_date FROM "{table}" WHERE key = ?1"#
            ),
            all: format!(r#"SELECT {cols} FROM "{table}" ORDER BY key"#),
            day: format!(r#"SELECT {cols} FROM "{table}" WHERE event_date = ?1 ORDER BY key"#),
            // A stored row is overwritten only when the incoming
            // (updated_at, value, event_date) is greater.
            upsert: format!(
                r#"INSERT INTO "{table}" ({cols}) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (key) DO UPDATE SET
    event_date = excluded.event_date,
    value = excluded.value,
    updated_at = excluded.updated_at
WHERE (excluded.updated_at, excluded.value, excluded.event_date)
    > ("{table}".updated_at, "{table}".value, "{table}".event_date)"#
            ),
            // The batch's keys travel as an array bound to one parameter
            // (SQLite's carray).
            delete_missing: format!(
                r#"DELETE FROM "{table}" WHERE event_date = ?1 AND key NOT IN rarray(?2)"#
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn table() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&create_table("t")).unwrap();
        conn.execute_batch(&create_index("t")).unwrap();
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
    fn the_index_name_is_no_table_name() {
        assert_eq!(index_name("c"), "c:event_date");
        assert!(
            backfill_core::adapter::check_identifier("table", &index_name("c")).is_err(),
            "an index name must be outside the table name rule"
        );
    }
}
