//! The table as found in the catalog, and whether it is the table the store
//! would have created.
//!
//! A table of the same name but another definition can make writes succeed
//! with wrong data: a collation other than `"C"` decides ties and order
//! differently from every other store, `timestamp` without time zone shifts
//! instants by the session's zone, a nullable or unchecked column lets
//! through what the record rules forbid. So opening compares the table with
//! what [`create_table`](crate::sql::create_table) makes, column by column,
//! and refuses any difference with a [`TableMismatch`] (core's, which the
//! SQLite store gives too). The same goes for the schema's shared metadata
//! tables, `backfill_tables` and `backfill_days`, and for a table of an older schema version about to be
//! upgraded (a records table of version 1, a `backfill_days` of version 2:
//! each must be exactly what its version created).

use backfill_core::adapter::{Difference, TableMismatch};
use backfill_core::columns::Columns;
use backfill_core::{MAX_KEY_BYTES, MAX_YEAR, MIN_YEAR};
use tokio_postgres::types::Oid;
use tokio_postgres::GenericClient;

use crate::sql;

/// Which table is compared, and so with what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A records table of schema version 1 (before tombstones): the shape
    /// an upgrade starts from.
    RecordsV1,
    /// A records table of the current schema version.
    Records,
    /// The schema's `backfill_tables`.
    Tables,
    /// The schema's `backfill_days` of schema version 2 (before the day
    /// ledger): the shape its upgrade starts from.
    DaysV2,
    /// The schema's `backfill_days` of the current schema version.
    Days,
}

/// What a [`Shape`] expects.
struct Expected {
    /// `(name, type, collation, NOT NULL)` of each column, in order.
    columns: Vec<(&'static str, &'static str, Option<&'static str>, bool)>,
    primary_key: &'static [&'static str],
    /// `(column, definition)` of each CHECK, as `pg_get_constraintdef`
    /// shows it under [`sql::DEPARSE_SETTINGS`].
    checks: Vec<(&'static str, String)>,
}

const C: Option<&str> = Some(r#"pg_catalog."C""#);
/// The database's default collation, as the catalog names it.
const DEFAULT: Option<&str> = Some(r#"pg_catalog."default""#);
const TIMESTAMPTZ: &str = "timestamp with time zone";

/// The columns of [`sql::LEDGER_COLUMNS`] as the catalog shows them.
const LEDGER_COLUMNS: [(&str, &str, Option<&str>, bool); 16] = [
    ("synced_at", TIMESTAMPTZ, None, false),
    ("run_id", "text", C, false),
    ("mode", "text", DEFAULT, false),
    ("as_of", TIMESTAMPTZ, None, false),
    ("digest", "text", DEFAULT, false),
    ("inserted", "bigint", None, false),
    ("updated", "bigint", None, false),
    ("unchanged", "bigint", None, false),
    ("stale", "bigint", None, false),
    ("deleted", "bigint", None, false),
    ("unlisted", "bigint", None, false),
    ("collapsed", "bigint", None, false),
    ("failed_at", TIMESTAMPTZ, None, false),
    ("failed_run_id", "text", DEFAULT, false),
    ("attempts", "integer", None, false),
    ("error", "text", DEFAULT, false),
];

/// The CHECKs of [`sql::LEDGER_COLUMNS`] as `pg_get_constraintdef` shows
/// them.
fn ledger_checks() -> Vec<(&'static str, String)> {
    let mut checks = vec![
        (
            "mode",
            "CHECK ((mode = ANY (ARRAY['merge'::text, 'replace'::text])))".to_owned(),
        ),
        (
            "digest",
            "CHECK ((digest ~ '^[0-9a-f]{32}$'::text))".to_owned(),
        ),
        ("attempts", "CHECK ((attempts >= 1))".to_owned()),
    ];
    for count in [
        "inserted",
        "updated",
        "unchanged",
        "stale",
        "deleted",
        "unlisted",
        "collapsed",
    ] {
        checks.push((count, format!("CHECK (({count} >= 0))")));
    }
    checks
}

impl Shape {
    fn expected(self) -> Expected {
        let v1 = [
            ("key", "text", C, true),
            ("event_date", "date", None, true),
            ("value", "text", C, true),
            ("updated_at", "timestamp with time zone", None, true),
        ];
        let days_v2 = [
            ("records_table", "text", C, true),
            ("day", "date", None, true),
            ("listing_watermark", "timestamp with time zone", None, false),
        ];
        match self {
            Shape::RecordsV1 => Expected {
                columns: v1.to_vec(),
                primary_key: &["key"],
                checks: record_checks().to_vec(),
            },
            Shape::Records => {
                let mut columns = v1.to_vec();
                columns.push(("deleted", "boolean", None, true));
                let mut checks = record_checks().to_vec();
                checks.push((
                    "deleted",
                    "CHECK ((NOT deleted) OR (value = ''::text))".to_owned(),
                ));
                Expected {
                    columns,
                    primary_key: &["key"],
                    checks,
                }
            }
            Shape::Tables => Expected {
                columns: vec![
                    ("records_table", "text", C, true),
                    ("schema_version", "integer", None, true),
                ],
                primary_key: &["records_table"],
                checks: Vec::new(),
            },
            Shape::DaysV2 => Expected {
                columns: days_v2.to_vec(),
                primary_key: &["records_table", "day"],
                checks: Vec::new(),
            },
            Shape::Days => {
                let mut columns = days_v2.to_vec();
                columns.extend(LEDGER_COLUMNS);
                Expected {
                    columns,
                    primary_key: &["records_table", "day"],
                    checks: ledger_checks(),
                }
            }
        }
    }
}

/// What the catalog holds under the store's names.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) schema: bool,
    /// The records table.
    pub(crate) table: Option<Table>,
    /// The schema's `backfill_tables`.
    pub(crate) tables: Option<Table>,
    /// The schema's `backfill_days`.
    pub(crate) days: Option<Table>,
    /// The schema version `backfill_tables` records for the records table
    /// (read only when `backfill_tables` has the expected shape).
    pub(crate) version: Option<i32>,
    /// The newest schema version `backfill_tables` records for any table.
    pub(crate) newest: Option<i32>,
}

impl Found {
    /// The records table's schema version: what `backfill_tables` says;
    /// without a row, 1 for a table without `deleted` (the release before
    /// versions were recorded), else `None` (the current shape, made by
    /// someone else and not registered yet).
    pub(crate) fn table_version(&self) -> Option<i32> {
        let table = self.table.as_ref()?;
        match self.version {
            Some(version) => Some(version),
            None if !table.has_column("deleted") => Some(1),
            None => None,
        }
    }

    /// The shape the records table is checked against.
    pub(crate) fn table_shape(&self) -> Shape {
        match self.table.as_ref() {
            Some(table)
                if !table.has_column("deleted") && matches!(self.version, None | Some(1)) =>
            {
                Shape::RecordsV1
            }
            _ => Shape::Records,
        }
    }

    /// The shape `backfill_days` is checked against: version 2 without
    /// the ledger's first column, else the current one.
    pub(crate) fn days_shape(&self) -> Shape {
        match self.days.as_ref() {
            Some(days) if !days.has_column(LEDGER_COLUMNS[0].0) => Shape::DaysV2,
            _ => Shape::Days,
        }
    }

    /// Whether `backfill_days` exists without the day ledger's columns
    /// (schema version 2), so it must be upgraded.
    pub(crate) fn days_need_ledger(&self) -> bool {
        self.days.is_some() && self.days_shape() == Shape::DaysV2
    }

    /// Whether nothing needs creating, upgrading or registering.
    pub(crate) fn complete(&self) -> bool {
        self.table.as_ref().is_some_and(|t| t.event_date_index)
            && self.tables.is_some()
            && self.days.is_some()
            && !self.days_need_ledger()
            && self.version == Some(sql::SCHEMA_VERSION)
    }
}

/// A relation found under one of the store's names.
#[derive(Debug)]
pub(crate) struct Table {
    kind: String,
    columns: Vec<Column>,
    primary_key: Option<Vec<String>>,
    checks: Vec<(Vec<String>, String)>,
    pub(crate) event_date_index: bool,
    /// The columns that lead a valid btree index.
    pub(crate) indexed: Vec<String>,
}

impl Table {
    /// Whether the relation has a column of that name.
    pub(crate) fn has_column(&self, name: &str) -> bool {
        self.columns.iter().any(|c| c.name == name)
    }
}

#[derive(Debug)]
struct Column {
    name: String,
    data_type: String,
    collation: Option<String>,
    not_null: bool,
}

/// Reads the schema, the records table (columns, key, checks, index), the
/// metadata tables and the recorded versions from the catalog. Runs in a
/// transaction under [`sql::DEPARSE_SETTINGS`].
pub(crate) async fn inspect(
    client: &impl GenericClient,
    schema: &str,
    table: &str,
) -> Result<Found, tokio_postgres::Error> {
    let schema_exists: bool = client.query_one(sql::FIND_SCHEMA, &[&schema]).await?.get(0);
    let mut found = Found {
        schema: schema_exists,
        table: None,
        tables: None,
        days: None,
        version: None,
        newest: None,
    };
    if !schema_exists {
        return Ok(found);
    }
    found.table = relation(client, schema, table).await?;
    found.tables = relation(client, schema, sql::TABLES_TABLE).await?;
    found.days = relation(client, schema, sql::DAYS_TABLE).await?;
    // Only a `backfill_tables` of the expected shape is read; another one
    // is refused by the caller with its differences.
    if found
        .tables
        .as_ref()
        .is_some_and(|t| differences(t, Shape::Tables, &Columns::default()).is_empty())
    {
        let row = client.query_one(&sql::versions(schema), &[&table]).await?;
        found.version = row.get(0);
        found.newest = row.get(1);
    }
    Ok(found)
}

/// The relation `schema.name`, if any, as the catalog describes it.
async fn relation(
    client: &impl GenericClient,
    schema: &str,
    name: &str,
) -> Result<Option<Table>, tokio_postgres::Error> {
    let Some(relation) = client
        .query_opt(sql::FIND_RELATION, &[&schema, &name])
        .await?
    else {
        return Ok(None);
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
    let indexed = client
        .query(sql::INDEXED_COLUMNS, &[&oid])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    Ok(Some(Table {
        kind,
        columns,
        primary_key,
        checks,
        event_date_index,
        indexed,
    }))
}

/// The CHECKs of [`sql::checks`] as `pg_get_constraintdef` shows them under
/// [`sql::DEPARSE_SETTINGS`], per column.
fn record_checks() -> [(&'static str, String); 3] {
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

/// Every way `table` differs from `shape` (empty when it is the same). The
/// `event_date` index is not compared here: a missing one is created, or
/// reported, by the caller.
pub(crate) fn differences(table: &Table, shape: Shape, typed: &Columns) -> Vec<Difference> {
    let expected = shape.expected();
    // The store's typed columns, after its own, in the current shape only.
    let own: Vec<(&str, &str)> = match shape {
        Shape::Records => typed
            .iter()
            .map(|c| (c.name(), crate::typed::sql_type(c.column_type())))
            .collect(),
        _ => Vec::new(),
    };
    let mut found = Vec::new();
    let mut push = |column: Option<&str>, problem: String| {
        found.push(Difference::new(column, problem));
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
    for &(name, data_type, collation, not_null) in &expected.columns {
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
        if not_null && !column.not_null {
            push(Some(name), "may be NULL, expected NOT NULL".to_owned());
        }
        if !not_null && column.not_null {
            push(Some(name), "NOT NULL, expected nullable".to_owned());
        }
    }
    // A typed column: its type, the database's default collation, NULL
    // allowed (a tombstone's are NULL).
    for &(name, data_type) in &own {
        let Some(column) = table.columns.iter().find(|c| c.name == name) else {
            push(
                Some(name),
                format!("missing (expected {data_type}, a typed column)"),
            );
            continue;
        };
        if column.data_type != data_type {
            push(
                Some(name),
                format!(
                    "type {}, expected {data_type} (a typed column)",
                    column.data_type
                ),
            );
            continue;
        }
        // Text shows the database's default collation; other types none.
        let default = (data_type == "text").then_some(r#"pg_catalog."default""#);
        if column.collation.as_deref() != default {
            push(
                Some(name),
                format!(
                    "collation {}, expected {}",
                    column.collation.as_deref().unwrap_or("none"),
                    default.unwrap_or("none")
                ),
            );
        }
        if column.not_null {
            push(Some(name), "NOT NULL, expected nullable".to_owned());
        }
    }
    for column in &table.columns {
        let declared = own.iter().any(|(name, _)| *name == column.name);
        if !declared
            && !expected
                .columns
                .iter()
                .any(|(name, ..)| *name == column.name)
        {
            push(
                Some(&column.name),
                format!("unexpected column ({})", column.data_type),
            );
        }
    }
    let wanted = expected.primary_key.join(", ");
    match &table.primary_key {
        Some(key) if key == expected.primary_key => {}
        Some(key) => push(
            Some(expected.primary_key[0]),
            format!(
                "the primary key is ({}), expected primary key ({wanted})",
                key.join(", ")
            ),
        ),
        None => push(
            Some(expected.primary_key[0]),
            format!("no primary key, expected primary key ({wanted})"),
        ),
    }
    for (columns, definition) in &table.checks {
        let known = expected
            .checks
            .iter()
            .any(|(_, e)| normalize(e) == normalize(definition));
        if !known {
            let column = (!columns.is_empty()).then(|| columns.join(", "));
            push(column.as_deref(), format!("unexpected {definition}"));
        }
    }
    for (column, definition) in &expected.checks {
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

/// `Ok` when `table`, found as `schema.name`, is what `shape` expects,
/// else the mismatch.
pub(crate) fn verify(
    schema: &str,
    name: &str,
    table: &Table,
    shape: Shape,
    typed: &Columns,
) -> Result<(), TableMismatch> {
    let differences = differences(table, shape, typed);
    if differences.is_empty() {
        Ok(())
    } else {
        Err(TableMismatch::new(
            sql::qualified(schema, name),
            differences,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A relation as the catalog would show `shape`'s table.
    fn shaped(shape: Shape) -> Table {
        let expected = shape.expected();
        Table {
            kind: "r".into(),
            columns: expected
                .columns
                .iter()
                .map(|(name, data_type, collation, not_null)| Column {
                    name: (*name).into(),
                    data_type: (*data_type).into(),
                    collation: collation.map(Into::into),
                    not_null: *not_null,
                })
                .collect(),
            primary_key: Some(expected.primary_key.iter().map(|c| (*c).into()).collect()),
            checks: expected
                .checks
                .iter()
                .map(|(column, definition)| (vec![(*column).into()], definition.clone()))
                .collect(),
            event_date_index: false,
            indexed: Vec::new(),
        }
    }

    fn created() -> Table {
        let mut table = created_v1();
        table.columns.push(Column {
            name: "deleted".into(),
            data_type: "boolean".into(),
            collation: None,
            not_null: true,
        });
        table.checks.push((
            vec!["deleted".into(), "value".into()],
            "CHECK (((NOT deleted) OR (value = ''::text)))".into(),
        ));
        table
    }

    fn created_v1() -> Table {
        Table {
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
            indexed: Vec::new(),
            ..shaped(Shape::RecordsV1)
        }
    }

    fn problems(table: &Table) -> Vec<String> {
        problems_as(table, Shape::Records)
    }

    /// Each difference as `column c: problem`, or the problem alone: the
    /// column and the problem exactly (the message's own form, quoting
    /// included, is core's `Difference` display).
    fn problems_as(table: &Table, shape: Shape) -> Vec<String> {
        differences(table, shape, &Columns::default())
            .iter()
            .map(|d| match d.column() {
                Some(column) => format!("column {column}: {}", d.problem()),
                None => d.problem().to_owned(),
            })
            .collect()
    }

    #[test]
    fn each_version_has_its_shape() {
        assert_eq!(
            problems_as(&created_v1(), Shape::RecordsV1),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(&created_v1()),
            ["column deleted: missing (expected boolean)"]
        );
        assert_eq!(
            problems_as(&created(), Shape::RecordsV1),
            [
                "column deleted: unexpected column (boolean)",
                "column deleted, value: unexpected CHECK (((NOT deleted) OR (value = ''::text)))",
            ]
        );
        let mut t = created();
        t.checks.pop();
        assert_eq!(
            problems(&t),
            ["column deleted: CHECK ((NOT deleted) OR (value = ''::text)) is missing"]
        );
    }

    #[test]
    fn the_metadata_tables_have_their_shapes() {
        for shape in [Shape::Tables, Shape::DaysV2, Shape::Days] {
            assert_eq!(problems_as(&shaped(shape), shape), Vec::<String>::new());
        }
        let mut days = shaped(Shape::Days);
        days.columns[2].not_null = true;
        days.primary_key = Some(vec!["day".into()]);
        assert_eq!(
            problems_as(&days, Shape::Days),
            [
                "column listing_watermark: NOT NULL, expected nullable",
                "column records_table: the primary key is (day), expected primary key (records_table, day)",
            ]
        );
        let mut tables = shaped(Shape::Tables);
        tables.columns[1].data_type = "text".into();
        tables.columns[0].collation = Some(r#"pg_catalog."default""#.into());
        assert_eq!(
            problems_as(&tables, Shape::Tables),
            [
                r#"column records_table: collation pg_catalog."default", expected pg_catalog."C""#,
                "column schema_version: type text, expected integer",
            ]
        );
    }

    #[test]
    fn the_ledger_columns_are_those_the_store_creates() {
        let names: Vec<&str> = LEDGER_COLUMNS.iter().map(|c| c.0).collect();
        let created: Vec<&str> = sql::LEDGER_COLUMNS.iter().map(|c| c.0).collect();
        assert_eq!(names, created);
        // Every CHECK the DDL writes is expected, on its own column.
        let checked: Vec<&str> = sql::LEDGER_COLUMNS
            .iter()
            .filter(|c| c.2.is_some())
            .map(|c| c.0)
            .collect();
        let mut expected: Vec<&str> = ledger_checks().iter().map(|c| c.0).collect();
        expected.sort_unstable_by_key(|c| names.iter().position(|n| n == c));
        assert_eq!(expected, checked);
    }

    #[test]
    fn the_days_table_of_each_version_has_its_shape() {
        // A version-2 table checked as the current one lacks the ledger.
        let v2 = shaped(Shape::DaysV2);
        let missing = problems_as(&v2, Shape::Days);
        assert_eq!(missing.len(), LEDGER_COLUMNS.len());
        assert_eq!(
            missing[0],
            "column synced_at: missing (expected timestamp with time zone)"
        );
        assert_eq!(missing[15], "column error: missing (expected text)");
        // A current one checked as version 2 has unexpected columns.
        let v3 = shaped(Shape::Days);
        assert!(problems_as(&v3, Shape::DaysV2)
            .iter()
            .any(|p| p == "column synced_at: unexpected column (timestamp with time zone)"));
        // Each ledger column is compared: type, collation, nullability,
        // CHECK.
        let mut days = shaped(Shape::Days);
        let at = |days: &Table, name: &str| days.columns.iter().position(|c| c.name == name);
        let i = at(&days, "digest").unwrap();
        days.columns[i].collation = C.map(Into::into);
        let i = at(&days, "inserted").unwrap();
        days.columns[i].data_type = "integer".into();
        let i = at(&days, "attempts").unwrap();
        days.columns[i].not_null = true;
        days.checks.retain(|(c, _)| c[0] != "mode");
        for (columns, definition) in &mut days.checks {
            if columns[0] == "stale" {
                *definition = "CHECK ((stale > 0))".into();
            }
        }
        assert_eq!(
            problems_as(&days, Shape::Days),
            [
                r#"column digest: collation pg_catalog."C", expected pg_catalog."default""#,
                "column inserted: type integer, expected bigint",
                "column attempts: NOT NULL, expected nullable",
                "column stale: unexpected CHECK ((stale > 0))",
                "column mode: CHECK ((mode = ANY (ARRAY['merge'::text, 'replace'::text]))) is missing",
                "column stale: CHECK ((stale >= 0)) is missing",
            ]
        );
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
