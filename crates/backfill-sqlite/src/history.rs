//! History's objects on open ([`objects`]): beside the records table `t`,
//! the table of versions `"t:versions"`, the table of listings
//! `"t:listings"`, and the view `t_history` people query. Created when history is asked for, checked where they exist,
//! kept in step with the records table's typed columns, and started from
//! the table's rows when history is turned on. History, once on, stays
//! on: a store that did not ask for it finds it on and writes it.

use backfill_core::columns::Columns;
use backfill_core::Result;
use rusqlite::{Connection, OptionalExtension};

use crate::error::open as open_error;
use crate::migrate::{Access, Declared};
use crate::schema;
use crate::sql;

/// Whether the table keeps history, and whether this open turned it on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HistoryOpened {
    /// The table keeps history: the store writes it.
    pub(crate) on: bool,
    /// This open turned it on, with one version for each of this many
    /// rows the table held.
    pub(crate) started_with: Option<u64>,
}

/// The versions table's own columns, before the typed ones.
const OWN_COLUMNS: [&str; 6] = [
    "key",
    "event_date",
    "value",
    "updated_at",
    "deleted",
    "absent_from",
];

/// History's objects of `table`: checked where they exist and, with
/// [`Access::Write`], created or brought in step with the records table's
/// typed columns (`declared`, which the records table has by now) when
/// history is `wanted` or on already (one of its tables is there). `None`
/// when [`Access::Look`] found something to do.
pub(crate) fn objects(
    conn: &Connection,
    table: &str,
    declared: &Declared<'_>,
    wanted: bool,
    access: Access,
) -> Result<Option<HistoryOpened>> {
    let typed = declared.columns;
    let versions = sql::history_versions_name(table);
    let listings = sql::history_listings_table(table);
    let view = sql::history_view_name(table);
    let present = |name: &str| -> Result<bool> {
        Ok(schema::object_kind(conn, name)
            .map_err(open_error)?
            .is_some())
    };
    let has_versions = present(&versions)?;
    let has_listings = present(&listings.name)?;
    // History is on where one of its tables is (their names are the
    // store's own); an object named like the view alone is the user's.
    if !wanted && !has_versions && !has_listings {
        return Ok(Some(HistoryOpened::default()));
    }
    // The versions table's typed columns: those declared it has, those it
    // lacks, and those it has that are no longer declared.
    let (mut keep, mut add, mut drop) = (Vec::new(), Vec::new(), Vec::<String>::new());
    if has_versions {
        for column in typed.iter() {
            match schema::has_column(conn, &versions, column.name()).map_err(open_error)? {
                true => keep.push(column.clone()),
                false => add.push(column.clone()),
            }
        }
        for name in column_names(conn, &versions)? {
            let own = OWN_COLUMNS.iter().any(|c| c.eq_ignore_ascii_case(&name));
            if !own && !typed.iter().any(|c| c.name().eq_ignore_ascii_case(&name)) {
                drop.push(name);
            }
        }
        if !drop.is_empty() && !declared.changes {
            return Err(open_error(format!(
                "history's table \"{versions}\" has the typed column {} as the declaration \
                 does not: open it once writable with allow_column_changes to drop it",
                drop[0]
            )));
        }
        if drop.is_empty() {
            schema::verify(
                conn,
                &sql::history_versions_table(table, &Columns::new(keep.clone())?),
            )?;
        }
    }
    if has_listings {
        schema::verify(conn, &listings)?;
    }
    let create_view = sql::create_history_view(table, typed);
    let view_text = view_text(conn, &view)?;
    let view_current = view_text.as_deref() == Some(create_view.as_str());
    let complete =
        has_versions && has_listings && view_current && add.is_empty() && drop.is_empty();
    if complete {
        return Ok(Some(HistoryOpened {
            on: true,
            started_with: None,
        }));
    }
    match access {
        Access::Look => Ok(None),
        Access::ReadOnly => Err(open_error(format!(
            "table \"{table}\" keeps no history yet, or its history is not in step with the \
             table (its objects, or its typed columns): open it once writable, with history \
             on, and it is brought in step"
        ))),
        Access::Write => {
            // The view goes first: a column it names cannot be dropped.
            if view_text.is_some() {
                conn.execute_batch(&format!(r#"DROP VIEW "{view}""#))
                    .map_err(open_error)?;
            }
            let def = sql::history_versions_table(table, typed);
            if !has_listings {
                conn.execute_batch(&listings.create()).map_err(open_error)?;
            }
            let mut started_with = None;
            if has_versions {
                for name in &drop {
                    let name = name.replace('"', "\"\"");
                    conn.execute_batch(&format!(
                        r#"ALTER TABLE "{versions}" DROP COLUMN "{name}""#
                    ))
                    .map_err(open_error)?;
                }
                if !add.is_empty() {
                    fill_columns(conn, &versions, &Columns::new(add)?)?;
                }
            } else {
                conn.execute_batch(&def.create()).map_err(open_error)?;
                let [rows, days] = sql::seed_history(table, typed);
                let seeded = conn.execute(&rows, []).map_err(open_error)?;
                conn.execute(&days, []).map_err(open_error)?;
                started_with = Some(seeded as u64);
            }
            schema::verify(conn, &def)?;
            schema::verify(conn, &listings)?;
            conn.execute_batch(&create_view).map_err(open_error)?;
            Ok(Some(HistoryOpened {
                on: true,
                started_with,
            }))
        }
    }
}

/// The text of the view `name` if it is the store's history view (its
/// text carries [`sql::HISTORY_VIEW_MARK`]); `None` if there is none.
///
/// # Errors
///
/// Another object of that name, or a view that is not the store's.
fn view_text(conn: &Connection, name: &str) -> Result<Option<String>> {
    let found: Option<(String, Option<String>)> = conn
        .query_row(
            "SELECT type, sql FROM sqlite_schema WHERE name = ?1 COLLATE NOCASE",
            [name],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .map_err(open_error)?;
    let Some((kind, text)) = found else {
        return Ok(None);
    };
    if kind != "view" {
        return Err(open_error(format!(
            "\"{name}\" is a {kind}, where the store keeps its history view: rename it, \
             or keep this table's records under another name"
        )));
    }
    match text {
        Some(text) if text.contains(sql::HISTORY_VIEW_MARK) => Ok(Some(text)),
        _ => Err(open_error(format!(
            "view \"{name}\" is not the history view the store creates: drop it, and opening \
             creates the store's"
        ))),
    }
}

/// The columns of `table`, in order.
fn column_names(conn: &Connection, table: &str) -> Result<Vec<String>> {
    conn.prepare("SELECT name FROM pragma_table_xinfo(?1) ORDER BY cid")
        .and_then(|mut stmt| {
            stmt.query_map([table], |row| row.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(open_error)
}

/// Adds the typed `columns` to history's versions table `versions` and
/// fills them from each live version's value, a page at a time. A version
/// older than the declaration whose value does not fit a column keeps
/// `NULL` there: it was delivered before the column was asked of it.
fn fill_columns(conn: &Connection, versions: &str, columns: &Columns) -> Result<()> {
    for add in sql::add_typed_columns(versions, columns) {
        conn.execute_batch(&add).map_err(open_error)?;
    }
    let page = format!(
        r#"SELECT key, event_date, value, updated_at FROM "{versions}"
           WHERE deleted = 0 AND (key, updated_at) > (?1, ?2)
           ORDER BY key, updated_at LIMIT 10000"#
    );
    let set: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!(r#""{}" = ?{}"#, c.name(), i + 3))
        .collect();
    let update = format!(
        r#"UPDATE "{versions}" SET {} WHERE key = ?1 AND updated_at = ?2"#,
        set.join(", ")
    );
    let (mut key, mut at) = (String::new(), String::new());
    loop {
        let rows: Vec<(String, String, String, String)> = conn
            .prepare(&page)
            .and_then(|mut stmt| {
                stmt.query_map([&key, &at], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect()
            })
            .map_err(open_error)?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        (key, at) = (last.0.clone(), last.3.clone());
        let mut stmt = conn.prepare_cached(&update).map_err(open_error)?;
        for (k, date, value, instant) in rows {
            let record = crate::typed::stored_record(&k, &date, &value, &instant)?;
            let Ok(values) = columns.extract(&record) else {
                continue;
            };
            let params = [
                rusqlite::types::Value::Text(k),
                rusqlite::types::Value::Text(instant),
            ]
            .into_iter()
            .chain(values.into_iter().map(crate::typed::sql_value));
            stmt.execute(rusqlite::params_from_iter(params))
                .map_err(open_error)?;
        }
    }
}
