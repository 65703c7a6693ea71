//! Typed columns: fields of a record's JSON `value` that a store keeps as
//! columns of their own, in the database's own types, so the synced table
//! is one analysts query directly.
//!
//! A [`Column`] names a column, its [`ColumnType`], the path to its field
//! in the value (a top-level field, or nested: `customer.id`) and whether
//! the field may be missing. [`Columns::extract`] reads a record's fields
//! as [`ColumnValue`]s, refusing — before anything is written — a value
//! that is not JSON, a required field that is missing, or a field that
//! does not fit its type, with an [`Error::InvalidColumn`] naming the key,
//! the column, the path and the offending text ([`ColumnError`]). A
//! tombstone has every
//! column NULL.
//!
//! Columns are a function of `value` alone: the contract's version
//! (`updated_at, deleted, value, event_date`) is unchanged by them, and so
//! are convergence, digests and a re-run that writes nothing.
//!
//! ```
//! use backfill_core::columns::{Column, ColumnValue, Columns};
//! use backfill_core::Record;
//! use chrono::{NaiveDate, TimeZone, Utc};
//!
//! let columns = Columns::new([
//!     Column::parse("total_cents:integer=total_cents")?,
//!     Column::parse("customer:text?=customer.id")?,
//! ])?;
//! let day = NaiveDate::from_ymd_opt(2026, 1, 15).unwrap();
//! let at = Utc.with_ymd_and_hms(2026, 1, 15, 9, 0, 0).unwrap();
//! let record = Record::new("order:1", day, r#"{"total_cents": 1250, "customer": {"id": "c7"}}"#, at)?;
//! assert_eq!(
//!     columns.extract(&record)?,
//!     vec![ColumnValue::Integer(1250), ColumnValue::Text("c7".into())]
//! );
//! # Ok::<(), backfill_core::Error>(())
//! ```

use std::collections::HashSet;
use std::str::FromStr;

use crate::adapter::check_identifier;
use crate::{Error, Result};

/// The most columns a store keeps beside its own five.
pub const MAX_COLUMNS: usize = 500;

/// The deepest path a column may take into a value.
pub const MAX_PATH_DEPTH: usize = 32;

/// The names a column may not take: the records table's own columns.
pub const RESERVED_NAMES: [&str; 5] = ["key", "event_date", "value", "updated_at", "deleted"];

mod extract;
mod fields;
pub(crate) mod kind;
mod value;

pub use crate::error::{ColumnError, ColumnProblem};
pub use kind::ColumnType;
pub use value::ColumnValue;

impl FromStr for ColumnType {
    type Err = Error;

    /// A type's name, or a Postgres spelling of it: `text`; `integer`,
    /// `bigint`, `int8`; `double`, `float8`, `double precision`;
    /// `numeric`, `decimal`; `boolean`, `bool`; `date`; `timestamptz`,
    /// `timestamp`; `json`, `jsonb`.
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "text" => ColumnType::Text,
            "integer" | "bigint" | "int8" => ColumnType::Integer,
            "double" | "float8" | "double precision" => ColumnType::Double,
            "numeric" | "decimal" => ColumnType::Numeric,
            "boolean" | "bool" => ColumnType::Boolean,
            "date" => ColumnType::Date,
            "timestamptz" | "timestamp" => ColumnType::Timestamp,
            "json" | "jsonb" => ColumnType::Json,
            _ => {
                return Err(Error::InvalidColumnDeclaration {
                    declaration: s.to_owned(),
                    reason: "unknown type: expected text, integer, double, numeric, \
                             boolean, date, timestamptz or json"
                        .to_owned(),
                })
            }
        })
    }
}

/// One typed column: its name, type, the path to its field in the value,
/// and whether the field may be missing (or JSON `null`): then the column
/// is NULL; a required field that is missing refuses the record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Column {
    name: String,
    ty: ColumnType,
    path: Vec<String>,
    nullable: bool,
    indexed: bool,
}

impl Column {
    /// A required column `name` of type `ty`, from the top-level field of
    /// the same name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] if `name` is not `[a-z_][a-z0-9_]*` (at most
    /// 63 bytes); [`Error::InvalidColumnDeclaration`] if it is one of the
    /// table's own columns ([`RESERVED_NAMES`]).
    pub fn new(name: impl Into<String>, ty: ColumnType) -> Result<Self> {
        let name = name.into();
        check_identifier("column", &name)?;
        if RESERVED_NAMES.contains(&name.as_str()) {
            return Err(Error::InvalidColumnDeclaration {
                declaration: name,
                reason: "the records table has a column of that name".to_owned(),
            });
        }
        Ok(Self {
            path: vec![name.clone()],
            name,
            ty,
            nullable: false,
            indexed: false,
        })
    }

    /// The path to the field: one name per level of nesting, as written in
    /// the JSON (any text: dots, quotes, unicode).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidColumnDeclaration`] for an empty path, or one deeper
    /// than [`MAX_PATH_DEPTH`].
    pub fn path<I, S>(mut self, segments: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let path: Vec<String> = segments.into_iter().map(Into::into).collect();
        if path.is_empty() || path.len() > MAX_PATH_DEPTH {
            return Err(Error::InvalidColumnDeclaration {
                declaration: self.name,
                reason: format!("a path has 1 to {MAX_PATH_DEPTH} fields"),
            });
        }
        self.path = path;
        Ok(self)
    }

    /// Whether the field may be missing or `null` (the column is then
    /// NULL). Default: required.
    pub fn nullable(mut self, nullable: bool) -> Self {
        self.nullable = nullable;
        self
    }

    /// Whether the store keeps an index on the column. Default: no.
    pub fn indexed(mut self, indexed: bool) -> Self {
        self.indexed = indexed;
        self
    }

    /// A column from its declaration, as the command line takes it:
    /// `name:type[?][=path]`. `?` makes it nullable; the path is the field
    /// names joined by dots (`customer.id`), or a JSON array of them when a
    /// name holds a dot (`["a.b", "c"]`); without one, the top-level field
    /// `name`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidColumnDeclaration`] (or [`Error::InvalidName`])
    /// naming what is wrong.
    pub fn parse(declaration: &str) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidColumnDeclaration {
            declaration: declaration.to_owned(),
            reason: reason.to_owned(),
        };
        let (head, path) = match declaration.split_once('=') {
            Some((head, path)) => (head, Some(path.trim())),
            None => (declaration, None),
        };
        let (name, ty) = head
            .split_once(':')
            .ok_or_else(|| bad("expected name:type[?][=path]"))?;
        let (ty, nullable) = match ty.trim().strip_suffix('?') {
            Some(ty) => (ty, true),
            None => (ty, false),
        };
        let ty: ColumnType = ty.parse().map_err(|_| {
            bad("unknown type: expected text, integer, double, numeric, boolean, date, timestamptz or json")
        })?;
        let column = Column::new(name.trim(), ty)?.nullable(nullable);
        match path {
            None => Ok(column),
            Some(p) if p.starts_with('[') => {
                let segments: Vec<String> = serde_json::from_str(p)
                    .map_err(|_| bad("a bracketed path is a JSON array of strings"))?;
                column.path(segments)
            }
            Some(p) => {
                let segments: Vec<&str> = p.split('.').collect();
                if segments.iter().any(|s| s.is_empty()) {
                    return Err(bad("a dotted path has no empty field name"));
                }
                column.path(segments)
            }
        }
    }

    /// The column's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The column's type.
    pub fn column_type(&self) -> ColumnType {
        self.ty
    }

    /// The path to its field, one name per level.
    pub fn field_path(&self) -> &[String] {
        &self.path
    }

    /// Whether the field may be missing.
    pub fn is_nullable(&self) -> bool {
        self.nullable
    }

    /// Whether the store keeps an index on it.
    pub fn is_indexed(&self) -> bool {
        self.indexed
    }

    /// The path as errors and declarations show it: dotted, or a JSON
    /// array when a field name holds a dot, a bracket or a quote.
    pub fn path_text(&self) -> String {
        let plain = self
            .path
            .iter()
            .all(|s| !s.is_empty() && !s.contains(['.', '[', '"']));
        if plain {
            self.path.join(".")
        } else {
            serde_json::to_string(&self.path).expect("strings serialize")
        }
    }
}

/// A store's typed columns, in their order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Columns {
    columns: Vec<Column>,
    /// The top-level fields the paths start with: sorted, distinct.
    firsts: Vec<String>,
    /// Each column's index into `firsts`.
    first_of: Vec<usize>,
}

impl Columns {
    /// The columns, in this order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidColumnDeclaration`] for two columns of one name, or
    /// more than [`MAX_COLUMNS`].
    pub fn new(columns: impl IntoIterator<Item = Column>) -> Result<Self> {
        let columns: Vec<Column> = columns.into_iter().collect();
        if columns.len() > MAX_COLUMNS {
            return Err(Error::InvalidColumnDeclaration {
                declaration: format!("{} columns", columns.len()),
                reason: format!("at most {MAX_COLUMNS} columns"),
            });
        }
        let mut seen = HashSet::new();
        for c in &columns {
            if !seen.insert(c.name.as_str()) {
                return Err(Error::InvalidColumnDeclaration {
                    declaration: c.name.clone(),
                    reason: "two columns have this name".to_owned(),
                });
            }
        }
        let mut firsts: Vec<String> = columns.iter().map(|c| c.path[0].clone()).collect();
        firsts.sort_unstable();
        firsts.dedup();
        let first_of = columns
            .iter()
            .map(|c| {
                firsts
                    .binary_search(&c.path[0])
                    .expect("every first field is listed")
            })
            .collect();
        Ok(Self {
            columns,
            firsts,
            first_of,
        })
    }

    /// The columns, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Column> {
        self.columns.iter()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }
}

impl<'a> IntoIterator for &'a Columns {
    type Item = &'a Column;
    type IntoIter = std::slice::Iter<'a, Column>;

    fn into_iter(self) -> Self::IntoIter {
        self.columns.iter()
    }
}

#[cfg(test)]
mod tests;
