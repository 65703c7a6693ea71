//! The table as found in the catalog, and whether it is the table the store
//! would have created.
//!
//! A table of the same name but another definition can make writes succeed
//! with wrong data: a collation other than `"C"` decides ties and order
//! differently from every other store, `timestamp` without time zone shifts
//! instants by the session's zone, a nullable or unchecked column lets
//! through what the record rules forbid. So opening compares the table with
//! what [`create_table`](crate::sql::create_table) makes, column by column,
//! and refuses any difference with a [`TableMismatch`].

use std::fmt;

use backfill_core::{MAX_KEY_BYTES, MAX_YEAR, MIN_YEAR};
use tokio_postgres::types::Oid;
use tokio_postgres::GenericClient;

use crate::sql;

/// A table that exists under the store's name but is not the table the
/// store would have created. The source of the
/// [`Error::Open`](backfill_core::Error::Open) that refuses it; its message
/// names each column and what differs.
///
/// ```
/// # fn check(error: &backfill_core::Error) {
/// use backfill_postgres::TableMismatch;
///
/// if let backfill_core::Error::Open { source, .. } = error {
///     if let Some(mismatch) = source.downcast_ref::<TableMismatch>() {
///         for difference in mismatch.differences() {
///             eprintln!("{:?}: {}", difference.column(), difference.problem());
///         }
///     }
/// }
/// # }
/// # let _ = check;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMismatch {
    table: String,
    differences: Vec<Difference>,
}

impl TableMismatch {
    /// The table, as `"schema"."table"`.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Each difference found, at least one.
    pub fn differences(&self) -> &[Difference] {
        &self.differences
    }
}

impl fmt::Display for TableMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "table {} exists but is not the table backfill creates: ",
            self.table
        )?;
        for (n, difference) in self.differences.iter().enumerate() {
            if n > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{difference}")?;
        }
        f.write_str(" (drop or rename it, or choose another table name)")
    }
}

impl std::error::Error for TableMismatch {}

/// One way a [`TableMismatch`] differs from the expected table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    column: Option<String>,
    problem: String,
}

impl Difference {
    /// The column concerned, when there is one.
    pub fn column(&self) -> Option<&str> {
        self.column.as_deref()
    }

    /// What differs, e.g. `type timestamp without time zone, expected
    /// timestamp with time zone`.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.column {
            Some(column) => write!(f, "column {column}: {}", self.problem),
            None => f.write_str(&self.problem),
        }
    }
}

/// What the catalog holds under the store's names.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) schema: bool,
    pub(crate) table: Option<Table>,
}

impl Found {
    /// Whether nothing needs creating.
    pub(crate) fn complete(&self) -> bool {
        self.table.as_ref().is_some_and(|t| t.event_date_index)
    }
}

/// A relation found under the table's name.
#[derive(Debug)]
pub(crate) struct Table {
    kind: String,
    columns: Vec<Column>,
    primary_key: Option<Vec<String>>,
    checks: Vec<(Vec<String>, String)>,
    pub(crate) event_date_index: bool,
}

#[derive(Debug)]
struct Column {
    name: String,
    data_type: String,
    collation: Option<String>,
    not_null: bool,
}

/// Reads the schema, the table, its columns, key, checks and index from
/// the catalog. Runs in a transaction under [`sql::DEPARSE_SETTINGS`].
pub(crate) async fn inspect(
    client: &impl GenericClient,
    schema: &str,
    table: &str,
) -> Result<Found, tokio_postgres::Error> {
    let schema_exists: bool = client.query_one(sql::FIND_SCHEMA, &[&schema]).await?.get(0);
    let relation = match schema_exists {
        true => {
            client
                .query_opt(sql::FIND_RELATION, &[&schema, &table])
                .await?
        }
        false => None,
    };
    let Some(relation) = relation else {
        return Ok(Found {
            schema: schema_exists,
            table: None,
        });
    };
    let oid: Oid = relation.get(0);
    let kind: String = relation.get(1);
    let columns = client
        .query(sql::COLUMNS_OF, &[&oid])
        .await?
        .iter()
        .map(|row| Column {
            name: row.get(0),
            data_type: row.get(1),
            collation: row.get(2),
            not_null: row.get(3),
        })
        .collect();
    let mut primary_key = None;
    let mut checks = Vec::new();
    for row in client.query(sql::CONSTRAINTS_OF, &[&oid]).await? {
        let kind: String = row.get(0);
        let columns: Vec<String> = row.get(1);
        let definition: String = row.get(2);
        match kind.as_str() {
            "p" => primary_key = Some(columns),
            _ => checks.push((columns, definition)),
        }
    }
    let event_date_index: bool = client
        .query_one(sql::HAS_EVENT_DATE_INDEX, &[&oid])
        .await?
        .get(0);
    Ok(Found {
        schema: true,
        table: Some(Table {
            kind,
            columns,
            primary_key,
            checks,
            event_date_index,
        }),
    })
}

/// `(name, type, collation)` of each column the store creates, in order;
/// every one is NOT NULL.
const EXPECTED_COLUMNS: [(&str, &str, Option<&str>); 4] = [
    ("key", "text", Some(r#"pg_catalog."C""#)),
    ("event_date", "date", None),
    ("value", "text", Some(r#"pg_catalog."C""#)),
    ("updated_at", "timestamp with time zone", None),
];

/// The CHECKs of [`sql::checks`] as `pg_get_constraintdef` shows them under
/// [`sql::DEPARSE_SETTINGS`], per column.
fn expected_checks() -> [(&'static str, String); 3] {
    [
        (
            "key",
            format!("CHECK ((octet_length(key) >= 1) AND (octet_length(key) <= {MAX_KEY_BYTES}))"),
        ),
        (
            "event_date",
            format!(
                "CHECK ((event_date >= '{MIN_YEAR:04}-01-01'::date) AND (event_date <= '{MAX_YEAR:04}-12-31'::date))"
            ),
        ),
        (
            "updated_at",
            format!(
                "CHECK ((updated_at >= '{MIN_YEAR:04}-01-01 00:00:00+00'::timestamp with time zone) \
                 AND (updated_at < '{:04}-01-01 00:00:00+00'::timestamp with time zone))",
                MAX_YEAR + 1
            ),
        ),
    ]
}

/// A CHECK definition without what deparsing may add or drop from one
/// server version to the next: whitespace and parentheses.
fn normalize(definition: &str) -> String {
    definition
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '(' && *c != ')')
        .collect()
}

/// Every way `table` differs from what the store creates (empty when it is
/// the same). The `event_date` index is not compared here: a missing one
/// is created, or reported, by the caller.
fn differences(table: &Table) -> Vec<Difference> {
    let mut found = Vec::new();
    let mut push = |column: Option<&str>, problem: String| {
        found.push(Difference {
            column: column.map(str::to_owned),
            problem,
        })
    };
    if table.kind != "r" {
        let kind = match table.kind.as_str() {
            "v" => "a view",
            "m" => "a materialized view",
            "p" => "a partitioned table",
            "f" => "a foreign table",
            "i" | "I" => "an index",
            "S" => "a sequence",
            _ => "another kind of relation",
        };
        push(None, format!("the name belongs to {kind}, not a table"));
        return found;
    }
    // Columns whose type is right: their checks are compared too.
    let mut typed = Vec::new();
    for (name, data_type, collation) in EXPECTED_COLUMNS {
        let Some(column) = table.columns.iter().find(|c| c.name == name) else {
            push(Some(name), format!("missing (expected {data_type})"));
            continue;
        };
        if column.data_type != data_type {
            push(
                Some(name),
                format!("type {}, expected {data_type}", column.data_type),
            );
            continue;
        }
        typed.push(name);
        if column.collation.as_deref() != collation {
            push(
                Some(name),
                format!(
                    "collation {}, expected {}",
                    column.collation.as_deref().unwrap_or("none"),
                    collation.unwrap_or("none")
                ),
            );
        }
        if !column.not_null {
            push(Some(name), "may be NULL, expected NOT NULL".to_owned());
        }
    }
    for column in &table.columns {
        if !EXPECTED_COLUMNS
            .iter()
            .any(|(name, ..)| *name == column.name)
        {
            push(
                Some(&column.name),
                format!("unexpected column ({})", column.data_type),
            );
        }
    }
    match &table.primary_key {
        Some(key) if key == &["key"] => {}
        Some(key) => push(
            Some("key"),
            format!(
                "the primary key is ({}), expected primary key (key)",
                key.join(", ")
            ),
        ),
        None => push(
            Some("key"),
            "no primary key, expected primary key (key)".to_owned(),
        ),
    }
    let expected = expected_checks();
    for (columns, definition) in &table.checks {
        let known = expected
            .iter()
            .any(|(_, e)| normalize(e) == normalize(definition));
        if !known {
            let column = (!columns.is_empty()).then(|| columns.join(", "));
            push(column.as_deref(), format!("unexpected {definition}"));
        }
    }
    for (column, definition) in &expected {
        let present = table
            .checks
            .iter()
            .any(|(_, d)| normalize(d) == normalize(definition));
        if !present && typed.contains(column) {
            push(Some(column), format!("{definition} is missing"));
        }
    }
    found
}

/// `Ok` when `table` is what the store creates, else the mismatch.
pub(crate) fn verify(schema: &str, name: &str, table: &Table) -> Result<(), TableMismatch> {
    let differences = differences(table);
    if differences.is_empty() {
        Ok(())
    } else {
        Err(TableMismatch {
            table: sql::qualified(schema, name),
            differences,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created() -> Table {
        Table {
            kind: "r".into(),
            columns: EXPECTED_COLUMNS
                .iter()
                .map(|(name, data_type, collation)| Column {
                    name: (*name).into(),
                    data_type: (*data_type).into(),
                    collation: collation.map(Into::into),
                    not_null: true,
                })
                .collect(),
            primary_key: Some(vec!["key".into()]),
            // As Postgres 15 shows them, with its extra parentheses.
            checks: vec![
                (
                    vec!["key".into()],
                    "CHECK (((octet_length(key) >= 1) AND (octet_length(key) <= 512)))".into(),
                ),
                (
                    vec!["event_date".into()],
                    "CHECK (((event_date >= '0001-01-01'::date) AND (event_date <= '9999-12-31'::date)))".into(),
                ),
                (
                    vec!["updated_at".into()],
                    "CHECK (((updated_at >= '0001-01-01 00:00:00+00'::timestamp with time zone) AND (updated_at < '10000-01-01 00:00:00+00'::timestamp with time zone)))".into(),
                ),
            ],
            event_date_index: true,
        }
    }

    fn problems(table: &Table) -> Vec<String> {
        differences(table).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_table_the_store_creates_has_no_difference() {
        assert_eq!(problems(&created()), Vec::<String>::new());
    }

    #[test]
    fn each_difference_names_its_column() {
        let mut t = created();
        t.columns[2].collation = Some(r#"pg_catalog."und-x-icu""#.into());
        t.columns[3].data_type = "timestamp without time zone".into();
        t.columns[1].not_null = false;
        t.primary_key = None;
        t.checks.remove(0);
        assert_eq!(
            problems(&t),
            [
                "column event_date: may be NULL, expected NOT NULL",
                r#"column value: collation pg_catalog."und-x-icu", expected pg_catalog."C""#,
                "column updated_at: type timestamp without time zone, expected timestamp with time zone",
                "column key: no primary key, expected primary key (key)",
                "column key: CHECK ((octet_length(key) >= 1) AND (octet_length(key) <= 512)) is missing",
            ]
        );
    }

    #[test]
    fn views_extra_columns_and_foreign_checks_are_refused() {
        let mut t = created();
        t.kind = "v".into();
        assert_eq!(problems(&t), ["the name belongs to a view, not a table"]);
        let mut t = created();
        t.columns.push(Column {
            name: "source".into(),
            data_type: "text".into(),
            collation: None,
            not_null: false,
        });
        t.checks
            .push((vec!["value".into()], "CHECK ((value <> ''::text))".into()));
        assert_eq!(
            problems(&t),
            [
                "column source: unexpected column (text)",
                "column value: unexpected CHECK ((value <> ''::text))",
            ]
        );
    }

    #[test]
    fn checks_compare_without_parentheses_or_spaces() {
        assert_eq!(
            normalize("CHECK (((a >= 1) AND (a <= 2)))"),
            normalize("CHECK ((a >= 1) AND (a <= 2))")
        );
        assert_ne!(normalize("CHECK (a >= 1)"), normalize("CHECK (a >= 2)"));
    }
}
