//! Bringing a schema to the store's tables on open, in the open's
//! transaction: the catalog read ([`schema::inspect`]), every table that
//! exists checked ([`schema::verify`]), then, if anything is missing, old
//! or refused (or the read failed), the same again under the schema's
//! creation lock, where it is decided, what is missing
//! created and what is old upgraded in place ([`create_or_upgrade`]), and
//! the result checked once more.
//!
//! A schema where all is in place, the usual case, is read and nothing
//! more, so a role without DDL rights (or a read-only replica) can open it.
//! With `create_if_missing(false)` nothing is created or upgraded: what is
//! missing is an error saying what, and how to create it ([`missing`]).

use std::fmt;

use backfill_core::columns::{Columns, RESERVED_NAMES};
use backfill_core::{Record, Result};
use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use crate::error::open_error;
use crate::schema::{self, Found, Shape};
use crate::sql;
use crate::typed;

/// Checks the store's tables in `schema` and, if `create`, creates what is
/// missing and upgrades what is old, in `tx` (which the caller commits).
///
/// # Errors
///
/// [`Error::Open`](backfill_core::Error::Open) for a table of another
/// shape (its source a [`TableMismatch`](crate::TableMismatch)), a schema
/// version newer than this release's, something missing or old that may
/// not (`create` is `false`) or cannot be created or upgraded, or the
/// server's error.
pub(crate) async fn prepare(
    tx: &Transaction<'_>,
    schema: &str,
    name: &str,
    typed: &Columns,
    (create, changes): (bool, bool),
    fill_factor: u8,
) -> Result<()> {
    tx.batch_execute(sql::DEPARSE_SETTINGS)
        .await
        .map_err(open_error)?;
    // The usual case, everything in place, is read without a lock. A read
    // that fails, or finds anything to do or to refuse, is taken again
    // under the schema's creation lock before anything is decided: another
    // open's upgrade committing between two of the read's queries leaves
    // it torn (a constraint gone between them) or failing, and concurrent
    // first opens would race to create the same things.
    if let Ok(found) = schema::inspect(&**tx, schema, name).await {
        if as_made((schema, name), &found, typed, changes) {
            return Ok(());
        }
    }
    tx.execute(sql::CREATE_LOCK, &[&format!("backfill:{schema}")])
        .await
        .map_err(open_error)?;
    let mut found = schema::inspect(&**tx, schema, name)
        .await
        .map_err(open_error)?;
    // Tables of another shape, or of a newer release, are refused
    // before anything is created or upgraded beside them.
    let dropping = changing(&found, typed, changes)?;
    check(schema, name, &found, typed, &dropping)?;
    let adding = absent(&found, typed, &dropping)?;
    let missing_indexes = unindexed(&found, typed);
    if found.complete() && adding.is_empty() && dropping.is_empty() && missing_indexes.is_empty() {
        return Ok(());
    }
    if !create {
        if let (true, Some(column)) = (found.complete(), missing_indexes.first()) {
            return Err(open_error(format!(
                "table {} has no index on the typed column \"{column}\" its declaration \
                 indexes, and this store may not create it (create_if_missing(false))",
                sql::qualified(schema, name),
            )));
        }
        if let Some(column) = dropping.first() {
            return Err(open_error(format!(
                "table {} has the typed column \"{column}\" as the declaration does not, and \
                 this store may not change it (create_if_missing(false))",
                sql::qualified(schema, name),
            )));
        }
        if let (true, Some(column)) = (found.complete(), adding.iter().next()) {
            return Err(open_error(format!(
                "table {} lacks the typed column \"{}\", and this store may not add it \
                 (create_if_missing(false)): open it once with create_if_missing(true), and it \
                 is added and filled from the table's rows",
                sql::qualified(schema, name),
                column.name()
            )));
        }
        return Err(open_error(missing(schema, name, &found)));
    }
    create_or_upgrade(tx, schema, name, &found, (typed, fill_factor)).await?;
    if !dropping.is_empty() {
        drop_columns(tx, schema, name, &dropping).await?;
    }
    let adding = absent(&found, typed, &dropping)?;
    if !adding.is_empty() {
        add_columns(tx, schema, name, &adding).await?;
    }
    // A declared index missing from a table that exists (made before, or
    // by someone else): made now, under a name of its own.
    found = schema::inspect(&**tx, schema, name)
        .await
        .map_err(open_error)?;
    for column in unindexed(&found, typed) {
        let index = sql::index_name(name, &column);
        tx.batch_execute(&sql::create_column_index(schema, name, &column, false))
            .await
            .map_err(|e| {
                open_error(format!(
                    "cannot create the index \"{index}\" on the typed column \"{column}\" of \
                     {}: {}",
                    sql::qualified(schema, name),
                    e.as_db_error()
                        .map_or_else(|| e.to_string(), ToString::to_string)
                ))
            })?;
    }
    // What exists now must be what the store creates, indexes and
    // version included.
    found = schema::inspect(&**tx, schema, name)
        .await
        .map_err(open_error)?;
    check(schema, name, &found, typed, &[])?;
    if !found.complete() {
        return Err(open_error(missing(schema, name, &found)));
    }
    if let Some(column) = unindexed(&found, typed).first() {
        return Err(open_error(format!(
            "table {} has no index on the typed column \"{column}\" after creating it",
            sql::qualified(schema, name),
        )));
    }
    Ok(())
}

/// Whether `found` is the schema as the store makes it for `typed`: every
/// table complete and of its shape, no typed column to add, change or
/// index. Anything else, a refusal included, is decided under the lock.
fn as_made((schema, name): (&str, &str), found: &Found, typed: &Columns, changes: bool) -> bool {
    let Ok(dropping) = changing(found, typed, changes) else {
        return false;
    };
    found.complete()
        && dropping.is_empty()
        && check(schema, name, found, typed, &dropping).is_ok()
        && absent(found, typed, &dropping).is_ok_and(|adding| adding.is_empty())
        && unindexed(found, typed).is_empty()
}

/// The typed columns the declaration indexes that the existing table has
/// without an index.
fn unindexed(found: &Found, typed: &Columns) -> Vec<String> {
    let Some(table) = &found.table else {
        return Vec::new();
    };
    typed
        .iter()
        .filter(|c| c.is_indexed() && table.has_column(c.name()))
        .filter(|c| !table.indexed.iter().any(|i| i == c.name()))
        .map(|c| c.name().to_owned())
        .collect()
}

/// With `changes` (the builder's `allow_column_changes`), the columns of
/// an existing table of the current shape that differ from the
/// declaration — typed columns it lacks or declares otherwise — to be
/// dropped (and the declared ones added again). None when any difference
/// is not in such a column: that table is refused as it is.
fn changing(found: &Found, typed: &Columns, changes: bool) -> Result<Vec<String>> {
    let Some(table) = found
        .table
        .as_ref()
        .filter(|_| changes && found.table_shape() == Shape::Records)
    else {
        return Ok(Vec::new());
    };
    let present = Columns::new(typed.iter().filter(|c| table.has_column(c.name())).cloned())?;
    let differences = schema::differences(table, Shape::Records, &present);
    let typed_column = |c: &str| !RESERVED_NAMES.contains(&c) && table.has_column(c);
    if !differences
        .iter()
        .all(|d| d.column().is_some_and(typed_column))
    {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = Vec::new();
    for column in differences.iter().filter_map(|d| d.column()) {
        if !names.iter().any(|n| n == column) {
            names.push(column.to_owned());
        }
    }
    Ok(names)
}

/// Drops the columns `names` of the existing table, with their indexes,
/// in the open's transaction.
async fn drop_columns(
    tx: &Transaction<'_>,
    schema: &str,
    name: &str,
    names: &[String],
) -> Result<()> {
    let t = sql::qualified(schema, name);
    // History's view reads the table's typed columns: it goes first, and
    // history's preparing makes it again.
    crate::history::drop_view(tx, schema, name).await?;
    let drops: Vec<String> = names
        .iter()
        .map(|c| format!("DROP COLUMN \"{}\"", c.replace('"', "\"\"")))
        .collect();
    tx.batch_execute(&format!("ALTER TABLE {t} {}", drops.join(", ")))
        .await
        .map_err(|e| {
            let why = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned());
            open_error(format!(
                "dropping the typed column(s) {} of table {t} failed: {why}; open it once with \
                 a role that may run DDL on it (its owner) on a writable server",
                names.join(", ")
            ))
        })
}

/// The declared typed columns an existing table of the current shape
/// lacks, or has otherwise (`dropping`, to be added again): none for a
/// table to be created, which gets them all.
fn absent(found: &Found, typed: &Columns, dropping: &[String]) -> Result<Columns> {
    let Some(table) = found
        .table
        .as_ref()
        .filter(|_| found.table_shape() == Shape::Records)
    else {
        return Ok(Columns::default());
    };
    Columns::new(
        typed
            .iter()
            .filter(|c| !table.has_column(c.name()) || dropping.iter().any(|d| d == c.name()))
            .cloned(),
    )
}

/// Adds the typed `columns` to the existing table and fills them from each
/// live row's value, in the open's transaction (a tombstone's stay NULL):
/// one `ALTER TABLE`, then the rows in key order, 10 000 at a time, each
/// updated once. A row whose value does not fit fails the open with
/// [`Error::InvalidColumn`](backfill_core::Error::InvalidColumn) naming its
/// key; the transaction rolls back, and nothing is added.
async fn add_columns(
    tx: &Transaction<'_>,
    schema: &str,
    name: &str,
    columns: &Columns,
) -> Result<()> {
    let t = sql::qualified(schema, name);
    let names: Vec<&str> = columns.iter().map(|c| c.name()).collect();
    let upgrade_error = |e: tokio_postgres::Error| {
        let why = e
            .as_db_error()
            .map_or_else(|| e.to_string(), |d| d.message().to_owned());
        open_error(format!(
            "adding the typed column(s) {} to table {t} failed: {why}; open it once with a \
             role that may run DDL on it (its owner) on a writable server",
            names.join(", ")
        ))
    };
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
    tx.batch_execute(&format!("ALTER TABLE {t} {}", added.join(", ")))
        .await
        .map_err(upgrade_error)?;
    for index in sql::create_column_indexes(schema, name, columns) {
        tx.batch_execute(&index).await.map_err(upgrade_error)?;
    }
    let page = tx
        .prepare(&format!(
            r#"SELECT key, event_date, value, updated_at FROM {t}
               WHERE NOT deleted AND key > $1::text COLLATE "C" ORDER BY key LIMIT 10000"#
        ))
        .await
        .map_err(open_error)?;
    let arrays: String = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!(", ${}::{}", i + 2, typed::array_cast(c.column_type())))
        .collect();
    let aliases: String = (0..columns.len()).map(|i| format!(", tc{i}")).collect();
    let set: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!(r#""{}" = u.tc{i}"#, c.name()))
        .collect();
    let update = tx
        .prepare(&format!(
            r#"UPDATE {t} AS s SET {} FROM unnest($1::text[]{arrays}) AS u(key{aliases})
               WHERE s.key = u.key COLLATE "C""#,
            set.join(", ")
        ))
        .await
        .map_err(open_error)?;
    let mut after = String::new();
    loop {
        let rows = tx.query(&page, &[&after]).await.map_err(open_error)?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = last.get(0);
        let mut keys: Vec<String> = Vec::with_capacity(rows.len());
        let mut flat = Vec::with_capacity(rows.len() * columns.len());
        for row in &rows {
            let record = Record::new(
                row.get::<_, String>(0),
                row.get::<_, NaiveDate>(1),
                row.get::<_, String>(2),
                row.get::<_, DateTime<Utc>>(3),
            )?;
            columns.extract_into(&record, &mut flat)?;
            keys.push(record.key().to_owned());
        }
        let values = typed::arrays(columns.len(), &flat);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&keys];
        params.extend(values.iter().map(|v| v as &(dyn ToSql + Sync)));
        tx.execute(&update, &params).await.map_err(open_error)?;
    }
}

/// Refuses what may not be opened, created beside or upgraded: a schema
/// version newer than this release's, and any table of another shape than
/// the one its version has.
///
/// The records table is not checked when `dropping` (see [`changing`]):
/// every way it differs is in columns about to be dropped.
fn check(
    schema: &str,
    name: &str,
    found: &Found,
    typed: &Columns,
    dropping: &[String],
) -> Result<()> {
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
    let none = Columns::default();
    // Declared columns the table lacks are added and filled; it is
    // checked with those it has.
    let present = Columns::new(
        typed
            .iter()
            .filter(|c| found.table.as_ref().is_some_and(|t| t.has_column(c.name())))
            .cloned(),
    )?;
    for (relation, table, shape, typed) in [
        (sql::TABLES_TABLE, &found.tables, Shape::Tables, &none),
        (sql::DAYS_TABLE, &found.days, found.days_shape(), &none),
        (name, &found.table, found.table_shape(), &present),
    ] {
        if relation == name && !dropping.is_empty() {
            continue;
        }
        if let Some(table) = table {
            schema::verify(schema, relation, table, shape, typed).map_err(open_error)?;
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
    (typed, fill_factor): (&Columns, u8),
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
            tx.batch_execute(&sql::create_table(schema, name, typed, fill_factor))
                .await
                .map_err(open_error)?;
            for index in sql::create_column_indexes(schema, name, typed) {
                tx.batch_execute(&index).await.map_err(open_error)?;
            }
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
