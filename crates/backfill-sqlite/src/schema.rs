//! The check of a table that already exists against the one the store
//! would have created (a [`TableDef`]): the records table, at the schema
//! version it claims, and the metadata tables.
//!
//! SQLite reports most of a table's definition through pragmas (columns,
//! declared types, `NOT NULL`, primary key, collations, `STRICT`, indexes);
//! the `CHECK`s only live in the `CREATE TABLE` text kept in
//! `sqlite_schema`, so they are read from it with a small tokenizer and
//! compared token by token (case and whitespace aside).

use backfill_core::adapter::{Difference, TableMismatch};
use backfill_core::Result;
use rusqlite::{Connection, OptionalExtension};

use crate::error::open as open_error;
use crate::sql::{Column, TableDef, COLLATION, DELETED, INDEXED};

/// What kind of object holds the table's name, if any.
pub(crate) fn object_kind(conn: &Connection, table: &str) -> rusqlite::Result<Option<String>> {
    // Names are case-insensitive in SQLite: `T` is in the way of `t` too.
    conn.query_row(
        "SELECT type FROM sqlite_schema WHERE name = ?1 COLLATE NOCASE",
        [table],
        |row| row.get(0),
    )
    .optional()
}

/// Whether the table has an index that serves a day's rows: a full index
/// whose first column is `event_date`, compared by bytes.
pub(crate) fn has_event_date_index(conn: &Connection, table: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (
             SELECT 1 FROM pragma_index_list(?1) AS l, pragma_index_xinfo(l.name) AS i
             WHERE l.partial = 0 AND i.seqno = 0
               AND i.name = ?2 COLLATE NOCASE AND i.coll = ?3 COLLATE NOCASE)",
        [table, INDEXED, COLLATION],
        |row| row.get(0),
    )
}

/// Whether `table` has an index named `name`.
pub(crate) fn has_index(conn: &Connection, table: &str, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_index_list(?1) WHERE name = ?2)",
        [table, name],
        |row| row.get(0),
    )
}

/// Whether the existing table has a column named `name`.
pub(crate) fn has_column(conn: &Connection, table: &str, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_table_xinfo(?1) WHERE name = ?2 COLLATE NOCASE)",
        [table, name],
        |row| row.get(0),
    )
}

/// Whether the existing records table has the column schema version 2
/// added.
pub(crate) fn has_deleted_column(conn: &Connection, table: &str) -> rusqlite::Result<bool> {
    has_column(conn, table, DELETED)
}

/// Checks the existing table `def.name` against the store's definition.
///
/// # Errors
///
/// [`Error::Open`](backfill_core::Error::Open) whose source is a
/// [`TableMismatch`] naming every difference, or SQLite's error.
pub(crate) fn verify(conn: &Connection, def: &TableDef) -> Result<()> {
    let differences = differences(conn, def).map_err(open_error)?;
    if differences.is_empty() {
        Ok(())
    } else {
        Err(open_error(TableMismatch::new(
            format!("\"{}\"", def.name),
            differences,
        )))
    }
}

/// A difference of the table as a whole.
fn in_table(problem: impl Into<String>) -> Difference {
    Difference::new(None, problem)
}

/// A difference in `column`.
fn in_column(column: &str, problem: impl Into<String>) -> Difference {
    Difference::new(Some(column), problem)
}

/// Every way the existing table differs from `def`. Long because it is one
/// list of checks (kind, STRICT, columns, types, NULLs, defaults, primary
/// key, collations, unique indexes, foreign keys, CHECKs), read top to
/// bottom like the table definition it compares with.
pub(crate) fn differences(conn: &Connection, def: &TableDef) -> rusqlite::Result<Vec<Difference>> {
    let table = def.name.as_str();
    let mut found = Vec::new();
    let Some((kind, without_rowid, strict)) = conn
        .query_row(
            "SELECT type, wr, strict FROM pragma_table_list
             WHERE schema = 'main' AND name = ?1 COLLATE NOCASE",
            [table],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, bool>(1)?,
                    row.get::<_, bool>(2)?,
                ))
            },
        )
        .optional()?
    else {
        found.push(in_table("it does not exist"));
        return Ok(found);
    };
    if kind != "table" {
        found.push(in_table(format!("it is a {kind}, not a table")));
        return Ok(found);
    }
    if !strict {
        found.push(in_table(
            "the table is not STRICT, so declared types are not enforced",
        ));
    }
    if without_rowid != def.clustered {
        found.push(in_table(match without_rowid {
            true => "the table is WITHOUT ROWID",
            false => "the table has a rowid, where the store's is WITHOUT ROWID",
        }));
    }

    let expected = &def.columns;
    let mut stmt = conn.prepare(
        "SELECT name, type, \"notnull\", pk, hidden, dflt_value
         FROM pragma_table_xinfo(?1) ORDER BY cid",
    )?;
    type Info = (String, String, bool, i64, i64, Option<String>);
    let actual: Vec<Info> = stmt
        .query_map([table], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    for column in expected {
        if !actual
            .iter()
            .any(|a| a.0.eq_ignore_ascii_case(&column.name))
        {
            found.push(in_column(&column.name, "is missing"));
        }
    }
    let primary_key = def
        .primary_key
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    for (name, declared, not_null, pk, hidden, default) in &actual {
        let Some(column) = expected.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
            found.push(in_column(name, "is not one the store creates"));
            continue;
        };
        let name = &*column.name;
        if *hidden != 0 {
            found.push(in_column(name, "is generated or hidden"));
        }
        let expected_type = column.sql_type;
        if !declared.eq_ignore_ascii_case(expected_type) {
            found.push(in_column(
                name,
                format!(
                    "is declared {}, expected {expected_type}",
                    if declared.is_empty() {
                        "without a type"
                    } else {
                        declared
                    }
                ),
            ));
        }
        match (column.not_null, *not_null) {
            (true, false) => {
                found.push(in_column(name, "allows NULL, expected NOT NULL"));
            }
            (false, true) => found.push(in_column(name, "is NOT NULL, expected to allow NULL")),
            _ => {}
        }
        if default.as_deref() != column.default {
            found.push(in_column(
                name,
                format!(
                    "has {}, expected {}",
                    default
                        .as_deref()
                        .map_or_else(|| "no DEFAULT".to_owned(), |d| format!("DEFAULT {d}")),
                    column
                        .default
                        .map_or_else(|| "none".to_owned(), |d| format!("DEFAULT {d}")),
                ),
            ));
        }
        match (def.pk_position(name), *pk) {
            (0, 0) => {}
            (0, _) => found.push(in_column(
                name,
                format!("is part of the primary key, expected {primary_key} alone"),
            )),
            (_, 0) if def.primary_key.len() == 1 => {
                found.push(in_column(name, "is not the primary key"));
            }
            (_, 0) => found.push(in_column(
                name,
                format!("is not part of the primary key ({primary_key})"),
            )),
            (want, got) if want != got => found.push(in_column(
                name,
                format!("is at position {got} of the primary key, expected ({primary_key})"),
            )),
            _ => {}
        }
        let collation = column_collation(conn, table, name)?;
        if !collation.eq_ignore_ascii_case(COLLATION) {
            found.push(in_column(
                name,
                format!("has collation {collation}, expected {COLLATION}"),
            ));
        }
    }

    // Uniqueness follows the index's collation, not the column's: a
    // `PRIMARY KEY (key COLLATE NOCASE)` makes `a` and `A` one row.
    let mut stmt = conn.prepare(
        "SELECT l.name, l.origin, i.name, i.coll
         FROM pragma_index_list(?1) AS l, pragma_index_xinfo(l.name) AS i
         WHERE l.\"unique\" = 1 AND i.key = 1 ORDER BY l.name, i.seqno",
    )?;
    let unique: Vec<(String, String, Option<String>, String)> = stmt
        .query_map([table], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    for (index, origin, column, collation) in &unique {
        // An index on an expression names no column: the table's.
        let on = |problem: String| match column {
            Some(column) => in_column(column, problem),
            None => in_table(format!("an expression {problem}")),
        };
        if origin == "pk" {
            if !collation.eq_ignore_ascii_case(COLLATION) {
                found.push(on(format!(
                    "has collation {collation} in the primary key, expected {COLLATION}"
                )));
            }
        } else {
            found.push(on(format!(
                "has unique index \"{index}\", which the store does not create \
                 (it would refuse valid batches)"
            )));
        }
    }
    let foreign_keys: i64 = conn.query_row(
        "SELECT count(*) FROM pragma_foreign_key_list(?1)",
        [table],
        |row| row.get(0),
    )?;
    if foreign_keys > 0 {
        found.push(in_table(
            "the table has a FOREIGN KEY the store does not create",
        ));
    }

    let create: String = conn.query_row(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1 COLLATE NOCASE",
        [table],
        |row| row.get(0),
    )?;
    let present: Vec<&str> = actual.iter().map(|a| a.0.as_str()).collect();
    found.extend(check_differences(&create, &present, expected));
    Ok(found)
}

/// The column's collation, from SQLite itself (the last `COLLATE` of its
/// definition, or `BINARY`).
fn column_collation(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<String> {
    let (_, collation, _, _, _) = conn.column_metadata(None, table, column)?;
    Ok(collation.map_or_else(
        || COLLATION.to_owned(),
        |c| c.to_string_lossy().into_owned(),
    ))
}

/// Each present column's `CHECK`s in `create` against the store's (a
/// missing column is reported once, as missing).
fn check_differences(create: &str, present: &[&str], columns: &[Column]) -> Vec<Difference> {
    let Some(checks) = checks(create) else {
        return vec![in_table("its CREATE TABLE text could not be read")];
    };
    let mut found = Vec::new();
    let present = columns
        .iter()
        .filter(|c| present.iter().any(|p| p.eq_ignore_ascii_case(&c.name)));
    for column in present {
        let own: Vec<&Check> = checks
            .iter()
            .filter(|c| {
                c.column
                    .as_deref()
                    .is_some_and(|n| n.eq_ignore_ascii_case(&column.name))
            })
            .collect();
        let Some(check) = &column.check else {
            if !own.is_empty() {
                found.push(in_column(
                    &column.name,
                    format!("has {}, expected no CHECK", written(&own)),
                ));
            }
            continue;
        };
        let accepted: Vec<Option<Vec<String>>> = std::iter::once(check.as_str())
            .chain(column.earlier_checks.iter().map(|c| c.as_ref()))
            .map(normalize)
            .collect();
        match own.as_slice() {
            [one] if accepted.iter().flatten().any(|a| *a == one.tokens) => {}
            [] => found.push(in_column(
                &column.name,
                format!("has no CHECK, expected CHECK ({})", collapse(check)),
            )),
            _ => found.push(in_column(
                &column.name,
                format!(
                    "has {}, expected CHECK ({})",
                    written(&own),
                    collapse(check)
                ),
            )),
        }
    }
    for check in checks.iter().filter(|c| c.column.is_none()) {
        found.push(in_table(format!(
            "a table CHECK ({}) is not one the store creates",
            check.text
        )));
    }
    found
}

/// Checks as the table's text writes them: `CHECK (…) CHECK (…)`.
fn written(checks: &[&Check]) -> String {
    checks
        .iter()
        .map(|c| format!("CHECK ({})", c.text))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One `CHECK` of a `CREATE TABLE`.
#[derive(Debug)]
struct Check {
    /// The column whose definition holds it; `None` for a table constraint.
    column: Option<String>,
    /// Its expression as written, whitespace collapsed (for messages).
    text: String,
    /// Its expression, normalized (for comparing).
    tokens: Vec<String>,
}

/// Every `CHECK` in a `CREATE TABLE` text, with the column it belongs to;
/// `None` if the text cannot be read.
fn checks(create: &str) -> Option<Vec<Check>> {
    let tokens = tokenize(create)?;
    // The column definitions sit between the first `(` and its match.
    let open = tokens.iter().position(|t| t.kind == Kind::Punct('('))?;
    let mut checks = Vec::new();
    let mut depth = 0usize;
    let mut item_start = open + 1;
    let mut i = open + 1;
    while i < tokens.len() {
        match tokens[i].kind {
            Kind::Punct('(') => depth += 1,
            Kind::Punct(')') if depth == 0 => {
                item_checks(create, &tokens[item_start..i], &mut checks)?;
                return Some(checks);
            }
            Kind::Punct(')') => depth -= 1,
            Kind::Punct(',') if depth == 0 => {
                item_checks(create, &tokens[item_start..i], &mut checks)?;
                item_start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The `CHECK`s of one column definition or table constraint.
fn item_checks(create: &str, item: &[Token], checks: &mut Vec<Check>) -> Option<()> {
    const TABLE_CONSTRAINTS: [&str; 5] = ["constraint", "primary", "unique", "check", "foreign"];
    let column = match &item.first()?.kind {
        Kind::Word(w) if TABLE_CONSTRAINTS.contains(&w.as_str()) => None,
        Kind::Word(name) | Kind::Ident(name) => Some(name.clone()),
        _ => return None,
    };
    let mut i = 0;
    while i < item.len() {
        let is_check = matches!(&item[i].kind, Kind::Word(w) if w == "check")
            && item.get(i + 1).map(|t| &t.kind) == Some(&Kind::Punct('('));
        if !is_check {
            // Skip parenthesized groups (a DEFAULT, a type's size) whole.
            if item[i].kind == Kind::Punct('(') {
                i = matching(item, i)?;
            }
            i += 1;
            continue;
        }
        let close = matching(item, i + 1)?;
        let inner = &item[i + 2..close];
        let text = match (inner.first(), inner.last()) {
            (Some(first), Some(last)) => collapse(&create[first.start..last.end]),
            _ => String::new(),
        };
        checks.push(Check {
            column: column.clone(),
            text,
            tokens: inner.iter().map(Token::normalized).collect(),
        });
        i = close + 1;
    }
    Some(())
}

/// The index of the `)` that closes the `(` at `open`.
fn matching(tokens: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        match token.kind {
            Kind::Punct('(') => depth += 1,
            Kind::Punct(')') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn normalize(expression: &str) -> Option<Vec<String>> {
    Some(
        tokenize(expression)?
            .iter()
            .map(Token::normalized)
            .collect(),
    )
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// A keyword, a bare name or a number, lowercased.
    Word(String),
    /// A quoted name (`"x"`, `[x]`, `` `x` ``), unquoted and lowercased:
    /// SQLite names ignore case.
    Ident(String),
    /// A string literal, quotes included, case kept.
    Str(String),
    Punct(char),
}

#[derive(Debug)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
}

impl Token {
    /// The form two equivalent expressions share: a quoted name and the
    /// same name bare compare equal, and so do keywords in any case.
    fn normalized(&self) -> String {
        match &self.kind {
            Kind::Word(w) | Kind::Ident(w) => w.clone(),
            Kind::Str(s) => s.clone(),
            Kind::Punct(c) => c.to_string(),
        }
    }
}

/// SQLite's lexical structure, enough to find and compare `CHECK`s:
/// comments and whitespace dropped, quotes honoured. `None` for an
/// unterminated quote or comment.
fn tokenize(text: &str) -> Option<Vec<Token>> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let b = bytes[i];
        let kind = match b {
            _ if b.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = text[i..].find('\n').map_or(bytes.len(), |n| i + n + 1);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = i + 2 + text[i + 2..].find("*/")? + 2;
                continue;
            }
            b'\'' | b'"' | b'`' | b'[' => {
                let close = if b == b'[' { b']' } else { b };
                i = quoted_end(bytes, i, close)?;
                let inner = &text[start + 1..i - 1];
                if b == b'\'' {
                    Kind::Str(text[start..i].to_owned())
                } else {
                    let doubled = [close as char; 2].iter().collect::<String>();
                    let name = inner.replace(&doubled, &(close as char).to_string());
                    Kind::Ident(name.to_lowercase())
                }
            }
            _ if is_word_byte(b) => {
                while i < bytes.len() && is_word_byte(bytes[i]) {
                    i += 1;
                }
                Kind::Word(text[start..i].to_lowercase())
            }
            _ => {
                let c = text[i..].chars().next()?;
                i += c.len_utf8();
                Kind::Punct(c)
            }
        };
        tokens.push(Token {
            kind,
            start,
            end: i,
        });
    }
    Some(tokens)
}

/// The end (one past the closing quote) of the quoted text at `open`; a
/// doubled quote is part of the text.
fn quoted_end(bytes: &[u8], open: usize, close: u8) -> Option<usize> {
    let mut i = open + 1;
    loop {
        if *bytes.get(i)? == close {
            if close != b']' && bytes.get(i + 1) == Some(&close) {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || !b.is_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;
    use backfill_core::columns::Columns;

    use crate::sql::{self, SCHEMA_VERSION};

    #[test]
    fn the_stores_own_tables_have_no_difference() {
        let conn = Connection::open_in_memory().unwrap();
        for def in [
            sql::records_table("t", SCHEMA_VERSION, &Columns::default()),
            sql::records_table("v1", 1, &Columns::default()),
            sql::tables_table(),
            sql::days_table(2),
            sql::days_table(SCHEMA_VERSION),
        ] {
            let all: Vec<&str> = def.columns.iter().map(|c| &*c.name).collect();
            assert_eq!(
                check_differences(&def.create(), &all, &def.columns),
                Vec::<Difference>::new(),
                "{}",
                def.name
            );
            conn.execute_batch(&def.create()).unwrap();
            assert_eq!(differences(&conn, &def).unwrap(), Vec::<Difference>::new());
            conn.execute_batch(&format!("DROP TABLE \"{}\"", def.name))
                .unwrap();
        }
    }

    #[test]
    fn an_upgraded_days_table_is_the_new_one() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&sql::days_table(2).create()).unwrap();
        let v3 = sql::days_table(3);
        let before = differences(&conn, &v3).unwrap();
        assert!(
            before
                .iter()
                .any(|d| d.column() == Some("synced_at") && d.problem() == "is missing"),
            "{before:?}"
        );
        for alter in sql::add_ledger_columns() {
            conn.execute_batch(&alter).unwrap();
        }
        assert_eq!(differences(&conn, &v3).unwrap(), Vec::<Difference>::new());
        let after = differences(&conn, &sql::days_table(2)).unwrap();
        assert!(
            after
                .iter()
                .any(|d| d.column() == Some("error")
                    && d.problem() == "is not one the store creates"),
            "{after:?}"
        );
    }

    #[test]
    fn an_upgraded_table_is_the_new_one() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&sql::records_table("t", 1, &Columns::default()).create())
            .unwrap();
        let v2 = sql::records_table("t", 2, &Columns::default());
        assert!(!differences(&conn, &v2).unwrap().is_empty());
        conn.execute_batch(&sql::add_deleted_column("t")).unwrap();
        assert_eq!(differences(&conn, &v2).unwrap(), Vec::<Difference>::new());
        assert!(
            !differences(&conn, &sql::records_table("t", 1, &Columns::default()))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn checks_are_compared_by_tokens() {
        let found = checks(
            "CREATE TABLE \"t\" (\n  \"key\" TEXT /* a ( comment */ CHECK(Length(key)>0), -- x\n  \
             v TEXT DEFAULT ('a,b') CONSTRAINT c CHECK (v <> 'A'), CHECK (1))",
        )
        .unwrap();
        let seen: Vec<(Option<&str>, &str, String)> = found
            .iter()
            .map(|c| (c.column.as_deref(), c.text.as_str(), c.tokens.join(" ")))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    Some("key"),
                    "Length(key)>0",
                    "length ( key ) > 0".to_owned()
                ),
                (Some("v"), "v <> 'A'", "v < > 'A'".to_owned()),
                (None, "1", "1".to_owned()),
            ]
        );
    }

    #[test]
    fn unreadable_text_is_a_difference_not_a_panic() {
        for text in [
            "CREATE TABLE t (a TEXT CHECK ('x)",
            "CREATE TABLE t (a",
            "/*",
        ] {
            let columns = sql::tables_table().columns;
            assert!(
                !check_differences(text, &["records_table"], &columns).is_empty(),
                "{text}"
            );
        }
    }
}
