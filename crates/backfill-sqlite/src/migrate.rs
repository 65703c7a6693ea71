//! Bringing a database to the store's schema on open: the metadata tables
//! and the records table created when missing, a records table of an
//! earlier schema version upgraded in place, and every table checked.
//!
//! Opening first only *looks* (no lock, no write): a database where all is
//! in place, the usual case, is read and nothing more. If something must be
//! created or upgraded, the same steps run again under `BEGIN IMMEDIATE`,
//! SQLite's write lock, and commit together: two processes opening one new
//! file serialize there, and the second finds everything done. DDL is
//! transactional in SQLite, so an upgrade that fails half-way (a table of
//! another shape, a full disk) leaves the file as it was.
//!
//! Schema versions, recorded per records table in [`TABLES`]:
//!
//! | version | records table | metadata tables |
//! |---|---|---|
//! | 1 | `key, event_date, value, updated_at` (no version row) | none |
//! | 2 | … and `deleted` last | [`TABLES`], [`DAYS`] (`listing_watermark`) |
//! | 3 | the same | [`DAYS`] gains the ledger columns ([`sql::ledger_columns`]) |
//!
//! A records table with no version row and no `deleted` column is version 1.
//! An upgrade is a chain of steps ([`upgrade_step`]), one per version, so
//! the next version adds one arm.
//!
//! [`DAYS`] is shared by every records table of the database, so its shape
//! is not any one records table's version: it is version 2's (no ledger
//! columns) until the first records table is upgraded to 3 or created, and
//! version 3's after. Adding the ledger columns is therefore idempotent
//! (skipped when another table's upgrade already did it), and a days table
//! still lacking them is given them whenever this release opens the file
//! writable, whatever the records table's version.

use backfill_core::columns::{Column, Columns, RESERVED_NAMES};
use backfill_core::Result;
use rusqlite::{Connection, OptionalExtension};

use crate::error::open as open_error;
use crate::schema;
use crate::sql::{self, DAYS, SCHEMA_VERSION, TABLES};

/// How much opening may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// A read-only database: check only; what would need a write is an
    /// error, except a missing index (reads are right without it).
    ReadOnly,
    /// A first look at a writable database: check only, and report whether
    /// anything needs a write.
    Look,
    /// Under the write lock: do what is needed.
    Write,
}

/// Opens `table` on `conn`: creates or upgrades what is missing (unless
/// `read_only`) and checks every table the store uses.
///
/// # Errors
///
/// [`Error::Open`](backfill_core::Error::Open) for a table of another
/// definition than the store's (naming it and what differs), a schema
/// version this release does not know, a records table missing from a
/// read-only database or one that needs an upgrade there, or SQLite's own
/// error.
///
/// With `changes` (the builder's `allow_column_changes`), typed columns of
/// the table that the declaration lacks, or declares otherwise, are
/// dropped (and the latter added again, filled from the rows) instead of
/// refused.
///
/// With `history`, the history tables and view are created when missing
/// (and filled from the table's rows); a table whose history is on keeps
/// it whether asked or not.
pub(crate) fn prepare(
    conn: &Connection,
    table: &str,
    typed: &Columns,
    read_only: bool,
    changes: bool,
    history: bool,
) -> Result<crate::history::HistoryOpened> {
    let typed = Declared {
        columns: typed,
        changes,
    };
    // The look is one read transaction: its statements see one state of
    // the file, never the two sides of another process's upgrade
    // committing between them (a records table without `deleted`, then
    // with it).
    let look = |access: Access| -> Result<Option<crate::history::HistoryOpened>> {
        conn.execute_batch("BEGIN").map_err(open_error)?;
        let looked =
            create_or_upgrade(conn, table, &typed, access).and_then(|in_place| match in_place {
                true => crate::history::objects(conn, table, &typed, history, access),
                false => Ok(None),
            });
        // Only read: ending it cannot lose anything.
        let _ = conn.execute_batch("COMMIT");
        looked
    };
    if read_only {
        return look(Access::ReadOnly).map(|opened| opened.expect("a read-only look decides"));
    }
    if let Some(opened) = look(Access::Look)? {
        return Ok(opened);
    }
    conn.execute_batch("BEGIN IMMEDIATE").map_err(open_error)?;
    // Looked at again under the lock: another process may have done it.
    let done = create_or_upgrade(conn, table, &typed, Access::Write)
        .and_then(|_| crate::history::objects(conn, table, &typed, history, Access::Write))
        .and_then(|opened| {
            conn.execute_batch("COMMIT").map_err(open_error)?;
            Ok(opened.expect("a write decides"))
        });
    if done.is_err() && !conn.is_autocommit() {
        // The error is the one worth reporting; a failed rollback leaves
        // the transaction to be rolled back when the connection closes.
        let _ = conn.execute_batch("ROLLBACK");
    }
    done
}

/// The declared typed columns, and whether opening may drop and remake
/// the table's typed columns that differ.
pub(crate) struct Declared<'a> {
    pub(crate) columns: &'a Columns,
    pub(crate) changes: bool,
}

/// The typed columns of the records table (at schema version `v`, 2 or
/// later) that differ from the declaration, `present` being the declared
/// columns the table has: those to drop (and add again when declared).
/// None when any difference is not in a typed column the table has: that
/// table is refused as it is.
fn changing(conn: &Connection, table: &str, v: i64, present: &[Column]) -> Result<Vec<String>> {
    let def = sql::records_table(table, v, &Columns::new(present.to_vec())?);
    let mut names: Vec<String> = Vec::new();
    for d in schema::differences(conn, &def).map_err(open_error)? {
        match d.column() {
            Some(c)
                if !RESERVED_NAMES.contains(&c)
                    && schema::has_column(conn, table, c).map_err(open_error)? =>
            {
                if !names.iter().any(|n| n == c) {
                    names.push(c.to_owned());
                }
            }
            _ => return Ok(Vec::new()),
        }
    }
    Ok(names)
}

/// Checks every table and, with [`Access::Write`], creates or upgrades
/// what is missing. Returns whether all was in place (always `true` unless
/// [`Access::Look`] found something to do).
///
/// Long on purpose: the steps from "nothing there" to the current version
/// read in the order they run, each with the check that guards it, and
/// splitting them would scatter that order over several functions.
fn create_or_upgrade(
    conn: &Connection,
    table: &str,
    declared: &Declared<'_>,
    access: Access,
) -> Result<bool> {
    let typed = declared.columns;
    let records = sql::records_table(table, SCHEMA_VERSION, typed);
    let metadata = [sql::tables_table(), sql::days_table(SCHEMA_VERSION)];
    // The metadata tables: checked where they exist, whatever comes next;
    // a days table without the ledger columns as version 2's.
    let mut missing_metadata = Vec::new();
    let mut days_lack_ledger = false;
    for def in &metadata {
        if schema::object_kind(conn, &def.name)
            .map_err(open_error)?
            .is_some()
        {
            if def.name == DAYS && !has_ledger_columns(conn)? {
                days_lack_ledger = true;
                schema::verify(conn, &sql::days_table(2))?;
            } else {
                schema::verify(conn, def)?;
            }
        } else {
            missing_metadata.push(def);
        }
    }
    let registered: Option<i64> = if missing_metadata.iter().any(|d| d.name == TABLES) {
        None
    } else {
        conn.query_row(sql::VERSION, [table], |row| row.get(0))
            .optional()
            .map_err(open_error)?
    };

    // The records table, and which version it is.
    let exists = schema::object_kind(conn, table)
        .map_err(open_error)?
        .is_some();
    // A view or another object of that name is refused by `verify`, with
    // what it is; so is a table missing its columns.
    let has_deleted = exists && schema::has_deleted_column(conn, table).map_err(open_error)?;
    let version = match (exists, registered) {
        (false, _) => None,
        (true, Some(v)) => Some(v),
        // Version 1 had no version rows. A table that has the column
        // version 2 added but no row (its metadata lost, or created by
        // hand to the store's definition) is checked as the current
        // version below (versions 2 and 3 have the same records table;
        // the days table is seen to apart) and registered.
        (true, None) => Some(if has_deleted { SCHEMA_VERSION } else { 1 }),
    };
    if let Some(v) = version {
        if v > SCHEMA_VERSION {
            return Err(open_error(format!(
                "table \"{table}\" has schema version {v} (recorded in {TABLES}); this \
                 release of backfill-sqlite knows versions up to {SCHEMA_VERSION}: use a \
                 newer release"
            )));
        }
        if v < 1 || (v == 1 && has_deleted) {
            return Err(open_error(format!(
                "table \"{table}\" is recorded in {TABLES} as schema version {v}, which does \
                 not match its columns"
            )));
        }
    }
    // Declared typed columns the table lacks are added and filled from its
    // rows (below); the table is checked with those it has.
    let (mut present, mut adding): (Vec<Column>, Vec<Column>) = match version {
        Some(v) if v >= 2 => {
            let mut present = Vec::new();
            let mut adding = Vec::new();
            for c in typed.iter() {
                if schema::has_column(conn, table, c.name()).map_err(open_error)? {
                    present.push(c.clone());
                } else {
                    adding.push(c.clone());
                }
            }
            (present, adding)
        }
        _ => (Vec::new(), Vec::new()),
    };
    // Typed columns to drop: with `changes`, those the table has and the
    // declaration lacks or declares otherwise (the latter added again).
    let dropping = match version {
        Some(v) if declared.changes && v >= 2 => changing(conn, table, v, &present)?,
        _ => Vec::new(),
    };
    if !dropping.is_empty() {
        let (keep, remake) = present
            .into_iter()
            .partition(|c| !dropping.iter().any(|d| d == c.name()));
        present = keep;
        adding.extend(remake);
    }
    if let Some(v) = version {
        // Checked at the version it claims, before anything is changed.
        let present = Columns::new(present)?;
        if dropping.is_empty() {
            schema::verify(conn, &sql::records_table(table, v, &present))?;
        }
    }

    let needs_write = version != Some(SCHEMA_VERSION)
        || registered != Some(SCHEMA_VERSION)
        || !missing_metadata.is_empty()
        || days_lack_ledger
        || !adding.is_empty()
        || !dropping.is_empty();
    if needs_write {
        match access {
            Access::Look => return Ok(false),
            Access::ReadOnly => match version {
                None => {
                    return Err(open_error(format!(
                        "table \"{table}\" does not exist, and a read-only store creates nothing"
                    )))
                }
                Some(v) if v < SCHEMA_VERSION => {
                    return Err(open_error(format!(
                        "table \"{table}\" has schema version {v} and must be upgraded to \
                         version {SCHEMA_VERSION} (version 2: a `deleted` column and the \
                         {TABLES} and {DAYS} tables; version 3: the day ledger's columns in \
                         {DAYS}) before this release can use it: open it once writable, with \
                         rights to change the schema, and it is upgraded in place"
                    )))
                }
                Some(_) if days_lack_ledger => {
                    return Err(open_error(format!(
                        "table {DAYS} lacks the day ledger's columns (schema version \
                         {SCHEMA_VERSION}) that table \"{table}\" needs: open it once \
                         writable, with rights to change the schema, and it is upgraded in \
                         place"
                    )))
                }
                Some(_) if !dropping.is_empty() => {
                    return Err(open_error(format!(
                        "table \"{table}\" has the typed column {} as the declaration does \
                         not: open it once writable to drop or remake it",
                        dropping[0]
                    )))
                }
                Some(_) if !adding.is_empty() => {
                    return Err(open_error(format!(
                        "table \"{table}\" lacks the typed column {}: open it once writable, \
                         and it is added and filled from the table's rows",
                        adding[0].name()
                    )))
                }
                // The current version, its metadata lost: the records
                // table reads right without it, and nothing is written.
                Some(_) => {}
            },
            Access::Write => {
                for def in &missing_metadata {
                    conn.execute_batch(&def.create()).map_err(open_error)?;
                    schema::verify(conn, def)?;
                }
                match version {
                    None => {
                        conn.execute_batch(&records.create()).map_err(open_error)?;
                        // Watermarks of a table of that name that no longer
                        // exists would delete the new table's rows.
                        conn.execute(sql::FORGET_DAYS, [table])
                            .map_err(open_error)?;
                    }
                    Some(mut v) => {
                        while v < SCHEMA_VERSION {
                            upgrade_step(conn, table, v)?;
                            v += 1;
                        }
                    }
                }
                if days_lack_ledger {
                    // A new records table, or one already at version 3,
                    // beside a days table no step has given its columns.
                    add_ledger_columns(conn)?;
                    schema::verify(conn, &sql::days_table(SCHEMA_VERSION))?;
                }
                for column in &dropping {
                    drop_column(conn, table, column)?;
                }
                if !adding.is_empty() {
                    add_columns(conn, table, &Columns::new(adding.clone())?)?;
                }
                conn.execute(sql::REGISTER, rusqlite::params![table, SCHEMA_VERSION])
                    .map_err(open_error)?;
            }
        }
    }

    if needs_write && access == Access::Write {
        // Checked again when just created or upgraded: another process may
        // have created it first, with another definition (`IF NOT EXISTS`
        // says nothing), and an upgrade must end in the new definition.
        schema::verify(conn, &records)?;
    }
    // A read-only store reads right without the index, only slower.
    if access != Access::ReadOnly
        && !schema::has_event_date_index(conn, table).map_err(open_error)?
    {
        if access == Access::Look {
            return Ok(false);
        }
        conn.execute_batch(&sql::create_index(table))
            .map_err(open_error)?;
    }
    // The typed columns' indexes, by name.
    if access == Access::Look {
        for column in typed.iter().filter(|c| c.is_indexed()) {
            let name = sql::column_index_name(table, column.name());
            if !schema::has_index(conn, table, &name).map_err(open_error)? {
                return Ok(false);
            }
        }
    }
    if access == Access::Write {
        for create in sql::create_column_indexes(table, typed) {
            conn.execute_batch(&create).map_err(open_error)?;
        }
    }
    Ok(true)
}

/// Drops the typed column `column` of the records table `table`, and the
/// store's index on it, in the open transaction.
fn drop_column(conn: &Connection, table: &str, column: &str) -> Result<()> {
    // Any name a table's column may have, quoted.
    let index = sql::column_index_name(table, column).replace('"', "\"\"");
    let column = column.replace('"', "\"\"");
    conn.execute_batch(&format!(
        r#"DROP INDEX IF EXISTS "{index}"; ALTER TABLE "{table}" DROP COLUMN "{column}""#
    ))
    .map_err(open_error)
}

/// Adds the typed `columns` to the records table `table`, which has rows,
/// and fills them from each live row's value, in the open transaction
/// (a tombstone's stay NULL): one `ADD COLUMN` each, then the rows in key
/// order, a page at a time, each updated once. A row whose value does not
/// fit fails the upgrade with [`Error::InvalidColumn`] naming its key, and
/// the transaction rolls back: nothing is added.
///
/// [`Error::InvalidColumn`]: backfill_core::Error::InvalidColumn
fn add_columns(conn: &Connection, table: &str, columns: &Columns) -> Result<()> {
    for sql in sql::add_typed_columns(table, columns) {
        conn.execute_batch(&sql).map_err(open_error)?;
    }
    let page = format!(
        r#"SELECT key, event_date, value, updated_at FROM "{table}"
           WHERE deleted = 0 AND key > ?1 ORDER BY key LIMIT 10000"#
    );
    let set: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!(r#""{}" = ?{}"#, c.name(), i + 2))
        .collect();
    let update = format!(r#"UPDATE "{table}" SET {} WHERE key = ?1"#, set.join(", "));
    let mut after = String::new();
    loop {
        let rows: Vec<(String, String, String, String)> = conn
            .prepare(&page)
            .and_then(|mut stmt| {
                stmt.query_map([&after], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect()
            })
            .map_err(open_error)?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = last.0.clone();
        let mut stmt = conn.prepare_cached(&update).map_err(open_error)?;
        for (key, date, value, instant) in rows {
            let record = crate::typed::stored_record(&key, &date, &value, &instant)?;
            let values: Vec<rusqlite::types::Value> = columns
                .extract(&record)?
                .into_iter()
                .map(crate::typed::sql_value)
                .collect();
            let params = std::iter::once(rusqlite::types::Value::Text(key)).chain(values);
            stmt.execute(rusqlite::params_from_iter(params))
                .map_err(open_error)?;
        }
    }
}

/// Upgrades the records table `table` from schema version `from` to
/// `from + 1`, in the open transaction; the metadata tables already exist.
fn upgrade_step(conn: &Connection, table: &str, from: i64) -> Result<()> {
    match from {
        // Every existing row stays, live (`deleted` defaults to 0).
        1 => conn
            .execute_batch(&sql::add_deleted_column(table))
            .map_err(open_error),
        // The records table is unchanged; the shared days table gains the
        // ledger columns unless another records table's upgrade gave them.
        // Days synced before have them all NULL: they read as missing.
        2 => add_ledger_columns(conn),
        _ => unreachable!("no upgrade from schema version {from}"),
    }
}

/// Whether [`DAYS`] (which exists) has the ledger columns of version 3.
fn has_ledger_columns(conn: &Connection) -> Result<bool> {
    schema::has_column(conn, DAYS, sql::SYNCED_AT).map_err(open_error)
}

/// Adds the ledger columns to [`DAYS`] if it lacks them (idempotent: the
/// table is shared by every records table of the database).
fn add_ledger_columns(conn: &Connection) -> Result<()> {
    if has_ledger_columns(conn)? {
        return Ok(());
    }
    for alter in sql::add_ledger_columns() {
        conn.execute_batch(&alter).map_err(open_error)?;
    }
    Ok(())
}
