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
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, SubsecRound, Timelike, Utc};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::adapter::check_identifier;
use crate::{Error, Record, Result, MAX_YEAR, MIN_YEAR};

/// The most columns a store keeps beside its own five.
pub const MAX_COLUMNS: usize = 500;

/// The deepest path a column may take into a value.
pub const MAX_PATH_DEPTH: usize = 32;

/// The names a column may not take: the records table's own columns.
pub const RESERVED_NAMES: [&str; 5] = ["key", "event_date", "value", "updated_at", "deleted"];

/// A column's type, and what a field must be to fit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ColumnType {
    /// A JSON string.
    Text,
    /// A JSON number written as an integer (no fraction, no exponent) that
    /// fits 64 bits signed.
    Integer,
    /// A finite JSON number (`1e400` does not fit).
    Double,
    /// A JSON number, kept exactly as written (Postgres `numeric`).
    Numeric,
    /// `true` or `false`.
    Boolean,
    /// A JSON string `YYYY-MM-DD`, a real date, years 1 to 9999.
    Date,
    /// A JSON string, an RFC 3339 instant with its offset (`Z` or
    /// `±hh:mm`), kept in UTC to the microsecond; years 1 to 9999 (in
    /// UTC), no leap second.
    Timestamp,
    /// Any JSON value, kept as its JSON text (Postgres `jsonb`).
    Json,
}

impl ColumnType {
    /// The type's name as declarations write it.
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Integer => "integer",
            ColumnType::Double => "double",
            ColumnType::Numeric => "numeric",
            ColumnType::Boolean => "boolean",
            ColumnType::Date => "date",
            ColumnType::Timestamp => "timestamptz",
            ColumnType::Json => "json",
        }
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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

    /// This column's value in a live record's JSON value `root`, read down
    /// its path from `first`, the top-level field its path starts with
    /// (found in one pass for every column; `Err(())` when the value is
    /// not an object). `key` names the record in errors.
    fn read(
        &self,
        key: &str,
        root: &str,
        first: std::result::Result<Option<&RawValue>, ()>,
    ) -> Result<ColumnValue> {
        let fail = |problem: ColumnProblem, text: &str| {
            Error::InvalidColumn(Box::new(ColumnError {
                key: key.to_owned(),
                column: self.name.clone(),
                path: self.path_text(),
                problem,
                text: shorten(text),
            }))
        };
        let Ok(first) = first else {
            return Err(fail(ColumnProblem::Missing, root));
        };
        let Some(mut raw) = first else {
            return self.missing(&fail);
        };
        for field in &self.path[1..] {
            if raw.get() == "null" {
                return self.missing(&fail);
            }
            // `raw` is valid JSON already: the one way this fails is a
            // level that is not an object.
            let mut inner = [None];
            if !matches!(
                fields(raw.get(), std::slice::from_ref(field), &mut inner),
                Ok(true)
            ) {
                return Err(fail(ColumnProblem::Missing, raw.get()));
            }
            match inner[0] {
                Some(inner) => raw = inner,
                None => return self.missing(&fail),
            }
        }
        let text = raw.get();
        if text == "null" {
            return self.missing(&fail);
        }
        let wrong = || fail(ColumnProblem::WrongType(self.ty), text);
        Ok(match self.ty {
            ColumnType::Json => ColumnValue::Json(text.to_owned()),
            ColumnType::Boolean => match text {
                "true" => ColumnValue::Boolean(true),
                "false" => ColumnValue::Boolean(false),
                _ => return Err(wrong()),
            },
            ColumnType::Integer => {
                if !crate::json::is_number(text) {
                    return Err(wrong());
                }
                if text.contains(['.', 'e', 'E']) {
                    return Err(wrong());
                }
                // "-0" is the integer 0.
                ColumnValue::Integer(
                    text.parse::<i64>()
                        .map_err(|_| fail(ColumnProblem::OutOfRange, text))?,
                )
            }
            ColumnType::Double => {
                if !crate::json::is_number(text) {
                    return Err(wrong());
                }
                let x: f64 = text.parse().map_err(|_| wrong())?;
                if !x.is_finite() {
                    return Err(fail(ColumnProblem::OutOfRange, text));
                }
                ColumnValue::Double(x)
            }
            ColumnType::Numeric => {
                if !crate::json::is_number(text) {
                    return Err(wrong());
                }
                if !numeric_fits(text) {
                    return Err(fail(ColumnProblem::OutOfRange, text));
                }
                ColumnValue::Numeric(text.to_owned())
            }
            ColumnType::Text | ColumnType::Date | ColumnType::Timestamp => {
                // `text` is valid JSON: a string without an escape is its
                // own content between the quotes, borrowed as it is.
                let s: std::borrow::Cow<'_, str> = match text.strip_prefix('"') {
                    Some(rest) if !rest.contains('\\') => {
                        rest.strip_suffix('"').ok_or_else(wrong)?.into()
                    }
                    _ => serde_json::from_str::<String>(text)
                        .map_err(|_| wrong())?
                        .into(),
                };
                if s.contains('\0') {
                    return Err(fail(ColumnProblem::ContainsNul, text));
                }
                match self.ty {
                    ColumnType::Text => ColumnValue::Text(s.into_owned()),
                    ColumnType::Date => ColumnValue::Date(
                        parse_date(&s).ok_or_else(|| fail(ColumnProblem::NotADate, text))?,
                    ),
                    _ => ColumnValue::Timestamp(
                        parse_instant(&s).ok_or_else(|| fail(ColumnProblem::NotAnInstant, text))?,
                    ),
                }
            }
        })
    }

    fn missing(&self, fail: &dyn Fn(ColumnProblem, &str) -> Error) -> Result<ColumnValue> {
        if self.nullable {
            Ok(ColumnValue::Null)
        } else {
            Err(fail(ColumnProblem::Missing, ""))
        }
    }
}

/// What one column holds for one record.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ColumnValue {
    /// NULL: a tombstone, or a nullable field that is missing or `null`.
    Null,
    /// A [`ColumnType::Text`] value.
    Text(String),
    /// A [`ColumnType::Integer`] value.
    Integer(i64),
    /// A [`ColumnType::Double`] value.
    Double(f64),
    /// A [`ColumnType::Numeric`] value: the number as the JSON writes it.
    Numeric(String),
    /// A [`ColumnType::Boolean`] value.
    Boolean(bool),
    /// A [`ColumnType::Date`] value.
    Date(NaiveDate),
    /// A [`ColumnType::Timestamp`] value, in UTC, to the microsecond.
    Timestamp(DateTime<Utc>),
    /// A [`ColumnType::Json`] value: its JSON text, as the value writes it.
    Json(String),
}

/// A record whose value does not fit a column: its key, the column, the
/// path to the field, what is wrong, and the offending text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ColumnError {
    /// The record's key.
    pub key: String,
    /// The column.
    pub column: String,
    /// The path to its field, as [`Column::path_text`] shows it.
    pub path: String,
    /// What is wrong.
    pub problem: ColumnProblem,
    /// The offending text: at most 200 bytes of it, empty for a missing
    /// field.
    pub text: String,
}

impl fmt::Display for ColumnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid record {:?}: column {} (path {}): {}",
            self.key, self.column, self.path, self.problem
        )?;
        if !self.text.is_empty() {
            write!(f, ": {}", self.text)?;
        }
        Ok(())
    }
}

impl std::error::Error for ColumnError {}

/// Why a record's field does not fit its column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnProblem {
    /// Columns are declared, and the value is not JSON.
    NotJson,
    /// A required field is missing or `null` (or a level of its path is
    /// not an object).
    Missing,
    /// The field is not of the column's type.
    WrongType(ColumnType),
    /// The number does not fit the type (past 64 bits, or not finite).
    OutOfRange,
    /// A text holds a NUL character, which no store keeps.
    ContainsNul,
    /// Not a `YYYY-MM-DD` date in years 1 to 9999.
    NotADate,
    /// Not an RFC 3339 instant with an offset, in years 1 to 9999.
    NotAnInstant,
}

impl fmt::Display for ColumnProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnProblem::NotJson => f.write_str("the value is not JSON"),
            ColumnProblem::Missing => f.write_str("the field is missing"),
            ColumnProblem::WrongType(ty) => write!(f, "the field is not {}", article(*ty)),
            ColumnProblem::OutOfRange => f.write_str("the number is out of range"),
            ColumnProblem::ContainsNul => f.write_str("the text contains a NUL character"),
            ColumnProblem::NotADate => f.write_str("the field is not a date (YYYY-MM-DD)"),
            ColumnProblem::NotAnInstant => {
                f.write_str("the field is not an instant with an offset (RFC 3339)")
            }
        }
    }
}

fn article(ty: ColumnType) -> &'static str {
    match ty {
        ColumnType::Text => "a string",
        ColumnType::Integer => "an integer",
        ColumnType::Double => "a number",
        ColumnType::Numeric => "a number",
        ColumnType::Boolean => "true or false",
        ColumnType::Date => "a date",
        ColumnType::Timestamp => "an instant",
        ColumnType::Json => "JSON",
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

    /// `record`'s value in each column, in order: every column NULL for a
    /// tombstone.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidColumn`] for the first column the record's value
    /// does not fit (a value that is not JSON, when any column is
    /// declared, is [`ColumnProblem::NotJson`]).
    pub fn extract(&self, record: &Record) -> Result<Vec<ColumnValue>> {
        let mut values = Vec::with_capacity(self.columns.len());
        self.extract_into(record, &mut values)?;
        Ok(values)
    }

    /// [`extract`](Self::extract), appending the values to `out`: one
    /// buffer for many records, the first record's values first.
    ///
    /// # Errors
    ///
    /// As [`extract`](Self::extract); `out` is then left as it was.
    ///
    /// # Example
    ///
    /// ```
    /// use backfill_core::columns::{Column, ColumnValue, Columns};
    /// use backfill_core::Record;
    /// use chrono::{NaiveDate, TimeZone, Utc};
    ///
    /// let columns = Columns::new([Column::parse("total:integer")?])?;
    /// let day = NaiveDate::from_ymd_opt(2026, 1, 5).unwrap();
    /// let at = Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
    /// let mut values = Vec::new();
    /// for (key, value) in [("a", r#"{"total": 1}"#), ("b", r#"{"total": 2}"#)] {
    ///     columns.extract_into(&Record::new(key, day, value, at)?, &mut values)?;
    /// }
    /// assert_eq!(values, [ColumnValue::Integer(1), ColumnValue::Integer(2)]);
    /// # Ok::<(), backfill_core::Error>(())
    /// ```
    pub fn extract_into(&self, record: &Record, out: &mut Vec<ColumnValue>) -> Result<()> {
        if record.is_deleted() || self.columns.is_empty() {
            out.extend(std::iter::repeat_n(ColumnValue::Null, self.columns.len()));
            return Ok(());
        }
        let value = record.value();
        // One pass over the value: it is checked to be JSON, and the
        // top-level fields the columns read are kept, raw, the rest skipped.
        let mut few = [None; LINEAR_NAMES];
        let mut many = Vec::new();
        let found = match self.firsts.len() <= LINEAR_NAMES {
            true => &mut few[..self.firsts.len()],
            false => {
                many.resize(self.firsts.len(), None);
                &mut many[..]
            }
        };
        let is_object = fields(value, &self.firsts, found).map_err(|_| {
            Error::InvalidColumn(Box::new(ColumnError {
                key: record.key().to_owned(),
                column: self.columns[0].name.clone(),
                path: self.columns[0].path_text(),
                problem: ColumnProblem::NotJson,
                text: shorten(value),
            }))
        })?;
        let root = value.trim_matches([' ', '\t', '\n', '\r']);
        let before = out.len();
        out.reserve(self.columns.len());
        for (c, &i) in self.columns.iter().zip(&self.first_of) {
            let first = if is_object { Ok(found[i]) } else { Err(()) };
            match c.read(record.key(), root, first) {
                Ok(v) => out.push(v),
                Err(e) => {
                    out.truncate(before);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

impl<'a> IntoIterator for &'a Columns {
    type Item = &'a Column;
    type IntoIter = std::slice::Iter<'a, Column>;

    fn into_iter(self) -> Self::IntoIter {
        self.columns.iter()
    }
}

/// Reads the JSON `text` once, checking that it is JSON: when it is an
/// object, sets `found[i]` to the raw value of its member `wanted[i]`
/// (`wanted` sorted; numbers stay raw text and are never rounded; names
/// are compared unescaped; a name given twice is the last one, as JSON
/// parsers and Postgres' `jsonb` read it) and returns `true`; `false` for
/// JSON that is not an object. Members not wanted are skipped, not kept.
fn fields<'a>(
    text: &'a str,
    wanted: &[String],
    found: &mut [Option<&'a RawValue>],
) -> serde_json::Result<bool> {
    if !text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        serde_json::from_str::<IgnoredAny>(text)?;
        return Ok(false);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_map(Members { wanted, found })?;
    de.end()?;
    Ok(true)
}

/// The visitor of [`fields`]: an object's members.
struct Members<'w, 'f, 'a> {
    wanted: &'w [String],
    found: &'f mut [Option<&'a RawValue>],
}

impl<'de> Visitor<'de> for Members<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while let Some(wanted) = map.next_key_seed(Name(self.wanted))? {
            match wanted {
                Some(i) => self.found[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Up to how many wanted names [`Name`] compares one by one.
const LINEAR_NAMES: usize = 16;

/// A member's name: its index among the wanted names, if it is one.
struct Name<'w>(&'w [String]);

impl<'de> DeserializeSeed<'de> for Name<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> std::result::Result<Self::Value, E> {
        // A few names are compared length first, which most members differ
        // in; many are searched.
        Ok(match self.0.len() <= LINEAR_NAMES {
            true => self
                .0
                .iter()
                .position(|w| w.len() == name.len() && w == name),
            false => self.0.binary_search_by(|w| w.as_str().cmp(name)).ok(),
        })
    }
}

/// Whether a JSON number fits Postgres' `numeric` (the widest a store
/// keeps): at most 131 072 digits before the point and 16 383 after.
fn numeric_fits(text: &str) -> bool {
    let body = text.trim_start_matches('-');
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => match body[at + 1..].parse::<i64>() {
            Ok(e) => (&body[..at], e),
            Err(_) => return false,
        },
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let int = int.trim_start_matches('0');
    let before = int.len() as i64 + exponent;
    let after = frac.len() as i64 - exponent;
    before <= 131_072 && after <= 16_383
}

/// `YYYY-MM-DD`, exactly, a real date in years 1 to 9999.
fn parse_date(s: &str) -> Option<NaiveDate> {
    if s.len() != 10 {
        return None;
    }
    // Four, two and two digits: what `%Y-%m-%d` alone would also read
    // with fewer digits or a sign.
    let digits = s
        .bytes()
        .enumerate()
        .all(|(i, b)| matches!(i, 4 | 7) == (b == b'-') && (b == b'-' || b.is_ascii_digit()));
    if !digits {
        return None;
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    (MIN_YEAR..=MAX_YEAR).contains(&d.year()).then_some(d)
}

/// An RFC 3339 instant with its offset, in years 1 to 9999, no leap
/// second, as UTC truncated to whole microseconds (what both stores keep,
/// as for a record's `updated_at`).
fn parse_instant(s: &str) -> Option<DateTime<Utc>> {
    let t = DateTime::parse_from_rfc3339(s).ok()?.with_timezone(&Utc);
    ((MIN_YEAR..=MAX_YEAR).contains(&t.year()) && t.nanosecond() < 1_000_000_000)
        .then(|| t.trunc_subsecs(6))
}

/// At most 200 bytes of an offending text, cut at a character boundary.
fn shorten(text: &str) -> String {
    crate::text::cut(text, 200).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::fixtures::{at, day, rec, tomb};

    fn one(declaration: &str, value: &str) -> Result<ColumnValue> {
        let columns = Columns::new([Column::parse(declaration)?])?;
        columns
            .extract(&rec("k1", day(0), value, at(0)))
            .map(|mut v| v.remove(0))
    }

    fn problem(declaration: &str, value: &str) -> (ColumnProblem, String) {
        match one(declaration, value) {
            Err(Error::InvalidColumn(e)) => (e.problem, e.text),
            other => panic!("{declaration} on {value}: expected InvalidColumn, got {other:?}"),
        }
    }

    #[test]
    fn declarations_parse_with_types_nullability_and_paths() {
        let c = Column::parse("total_cents:bigint=order.total_cents").unwrap();
        assert_eq!(
            (c.name(), c.column_type(), c.field_path(), c.is_nullable()),
            (
                "total_cents",
                ColumnType::Integer,
                &["order".to_owned(), "total_cents".to_owned()][..],
                false
            )
        );
        let c = Column::parse("status:text?").unwrap();
        assert_eq!(
            (c.field_path(), c.is_nullable()),
            (&["status".to_owned()][..], true)
        );
        let c = Column::parse(r#"odd:json=["a.b", "c\"d", "ü"]"#).unwrap();
        assert_eq!(c.field_path(), ["a.b", "c\"d", "ü"]);
        assert_eq!(c.path_text(), r#"["a.b","c\"d","ü"]"#);
        for t in [
            "double precision",
            "FLOAT8",
            "jsonb",
            "timestamp",
            "decimal",
            "bool",
        ] {
            assert!(Column::parse(&format!("c:{t}")).is_ok(), "{t}");
        }
    }

    #[test]
    fn hostile_declarations_are_refused() {
        for bad in [
            "no_type",
            "c:varchar",
            "c:integer=a..b",
            "c:integer=",
            "c:integer=[1, 2]",
            "Upper:text",
            "select;drop:text",
            "key:text",
            "value:json",
            "deleted:boolean",
            "event_date:date",
            "updated_at:timestamptz",
            ":text",
        ] {
            assert!(
                matches!(
                    Column::parse(bad),
                    Err(Error::InvalidColumnDeclaration { .. } | Error::InvalidName { .. })
                ),
                "{bad} was accepted"
            );
        }
        // An SQL keyword is a name like any other (stores quote every name).
        assert!(Column::parse("select:text").is_ok());
        let deep = format!("c:text={}", vec!["a"; MAX_PATH_DEPTH + 1].join("."));
        assert!(Column::parse(&deep).is_err());
        let twice = Columns::new([
            Column::parse("a:text").unwrap(),
            Column::parse("a:integer").unwrap(),
        ]);
        assert!(matches!(twice, Err(Error::InvalidColumnDeclaration { .. })));
        let many: Vec<Column> = (0..=MAX_COLUMNS)
            .map(|i| Column::parse(&format!("c{i}:text")).unwrap())
            .collect();
        assert!(Columns::new(many).is_err());
        let hundred: Vec<Column> = (0..100)
            .map(|i| Column::parse(&format!("c{i}:integer=f{i}")).unwrap())
            .collect();
        let columns = Columns::new(hundred).unwrap();
        let value = format!(
            "{{{}}}",
            (0..100)
                .map(|i| format!("\"f{i}\": {i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let got = columns.extract(&rec("k", day(0), &value, at(0))).unwrap();
        let want: Vec<ColumnValue> = (0..100).map(ColumnValue::Integer).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn extract_into_appends_and_leaves_the_buffer_as_it_was_on_error() {
        // Names of one length, one of them wanted, and more wanted names
        // than are compared one by one.
        for n in [3, LINEAR_NAMES + 1] {
            let columns = Columns::new(
                (0..n).map(|i| Column::parse(&format!("c{i}:integer=f{i:02}")).unwrap()),
            )
            .unwrap();
            let members = |last: &str| {
                let mut m: Vec<String> = (0..n - 1).map(|i| format!(r#""f{i:02}": {i}"#)).collect();
                m.push(format!(r#""g00": 0, "f{:02}": {last}"#, n - 1));
                format!("{{{}}}", m.join(", "))
            };
            let mut out = vec![ColumnValue::Text("before".into())];
            columns
                .extract_into(&rec("a", day(0), &members("7"), at(0)), &mut out)
                .unwrap();
            assert_eq!(out.len(), 1 + n);
            assert_eq!(out[n], ColumnValue::Integer(7));
            assert_eq!(out[1], ColumnValue::Integer(0));
            let bad = columns.extract_into(&rec("b", day(0), &members(r#""x""#), at(0)), &mut out);
            assert!(matches!(bad, Err(Error::InvalidColumn(_))), "{bad:?}");
            assert_eq!(out.len(), 1 + n, "a refused record appends nothing");
            columns
                .extract_into(&tomb("c", day(0), at(0)), &mut out)
                .unwrap();
            assert_eq!(out.len(), 1 + 2 * n);
            assert!(out[1 + n..].iter().all(|v| *v == ColumnValue::Null));
        }
    }

    #[test]
    fn integers_at_and_past_64_bit_bounds() {
        assert_eq!(
            one("n:integer", r#"{"n": 9223372036854775807}"#).unwrap(),
            ColumnValue::Integer(i64::MAX)
        );
        assert_eq!(
            one("n:integer", r#"{"n": -9223372036854775808}"#).unwrap(),
            ColumnValue::Integer(i64::MIN)
        );
        assert_eq!(
            one("n:integer", r#"{"n": -0}"#).unwrap(),
            ColumnValue::Integer(0)
        );
        for past in [
            "9223372036854775808",
            "-9223372036854775809",
            "100000000000000000000000",
        ] {
            assert_eq!(
                problem("n:integer", &format!(r#"{{"n": {past}}}"#)),
                (ColumnProblem::OutOfRange, past.to_owned())
            );
        }
        for not in ["1.0", "1e3", "\"12\"", "true", "[1]"] {
            assert_eq!(
                problem("n:integer", &format!(r#"{{"n": {not}}}"#)).0,
                ColumnProblem::WrongType(ColumnType::Integer),
                "{not}"
            );
        }
    }

    #[test]
    fn doubles_and_numerics() {
        assert_eq!(
            one("x:double", r#"{"x": -0}"#).unwrap(),
            ColumnValue::Double(-0.0)
        );
        assert_eq!(
            one("x:double", r#"{"x": 1.5e3}"#).unwrap(),
            ColumnValue::Double(1500.0)
        );
        assert_eq!(
            problem("x:double", r#"{"x": 1e400}"#).0,
            ColumnProblem::OutOfRange
        );
        assert_eq!(
            problem("x:double", r#"{"x": -1e400}"#).0,
            ColumnProblem::OutOfRange
        );
        // NaN is not JSON at all.
        assert_eq!(
            problem("x:double", r#"{"x": NaN}"#).0,
            ColumnProblem::NotJson
        );
        assert_eq!(
            problem("x:double", r#"{"x": "1.5"}"#).0,
            ColumnProblem::WrongType(ColumnType::Double)
        );
        // A numeric keeps the number exactly as written, even past f64.
        assert_eq!(
            one("x:numeric", r#"{"x": 1e400}"#).unwrap(),
            ColumnValue::Numeric("1e400".into())
        );
        assert_eq!(
            one("x:numeric", r#"{"x": 0.10000000000000000000001}"#).unwrap(),
            ColumnValue::Numeric("0.10000000000000000000001".into())
        );
        // Past what Postgres' numeric keeps.
        assert_eq!(
            problem("x:numeric", r#"{"x": 1e200000}"#).0,
            ColumnProblem::OutOfRange
        );
        assert_eq!(
            problem("x:numeric", r#"{"x": 1e-20000}"#).0,
            ColumnProblem::OutOfRange
        );
    }

    #[test]
    fn text_boolean_json_date_and_instant() {
        assert_eq!(
            one("s:text", r#"{"s": "a\u00e9\"b"}"#).unwrap(),
            ColumnValue::Text("aé\"b".into())
        );
        assert_eq!(
            problem("s:text", r#"{"s": "a\u0000b"}"#).0,
            ColumnProblem::ContainsNul
        );
        assert_eq!(
            problem("s:text", r#"{"s": 12}"#).0,
            ColumnProblem::WrongType(ColumnType::Text)
        );
        assert_eq!(
            one("b:boolean", r#"{"b": false}"#).unwrap(),
            ColumnValue::Boolean(false)
        );
        assert_eq!(
            problem("b:boolean", r#"{"b": "true"}"#).0,
            ColumnProblem::WrongType(ColumnType::Boolean)
        );
        assert_eq!(
            one("j:json", r#"{"j": {"z": [1, 2.50]}}"#).unwrap(),
            ColumnValue::Json(r#"{"z": [1, 2.50]}"#.into())
        );
        assert_eq!(
            one("d:date", r#"{"d": "2024-02-29"}"#).unwrap(),
            ColumnValue::Date(NaiveDate::from_ymd_opt(2024, 2, 29).unwrap())
        );
        for bad in [
            "2026-02-30",
            "2026-1-05",
            // Ten characters, but not four, two and two digits.
            "02026-1-05",
            "+2026-1-05",
            "2026-01-5 ",
            " 2026-01-5",
            "2026-001-5",
            "2026-01-0x",
            "20260105",
            "0000-01-01",
            "2026-01-05T00:00:00Z",
        ] {
            assert_eq!(
                problem("d:date", &format!(r#"{{"d": "{bad}"}}"#)).0,
                ColumnProblem::NotADate,
                "{bad}"
            );
        }
        assert_eq!(
            one("t:timestamptz", r#"{"t": "2026-01-05T10:00:00.5+02:00"}"#).unwrap(),
            ColumnValue::Timestamp("2026-01-05T08:00:00.5Z".parse().unwrap())
        );
        // Kept to the microsecond, as both stores keep it.
        assert_eq!(
            one(
                "t:timestamptz",
                r#"{"t": "2026-01-05T10:00:00.123456789Z"}"#
            )
            .unwrap(),
            ColumnValue::Timestamp("2026-01-05T10:00:00.123456Z".parse().unwrap())
        );
        for bad in [
            "2026-01-05T10:00:00",
            "2026-01-05",
            "yesterday",
            "2016-12-31T23:59:60Z",
            "0000-12-31T23:00:00Z",
            "9999-12-31T23:00:00-02:00",
        ] {
            assert_eq!(
                problem("t:timestamptz", &format!(r#"{{"t": "{bad}"}}"#)).0,
                ColumnProblem::NotAnInstant,
                "{bad}"
            );
        }
    }

    #[test]
    fn paths_nesting_missing_fields_and_tombstones() {
        let nested = r#"{"customer": {"id": "c7", "a.b": {"c\"d": 5}}, "gone": null}"#;
        assert_eq!(
            one("c:text=customer.id", nested).unwrap(),
            ColumnValue::Text("c7".into())
        );
        assert_eq!(
            one(r#"c:integer=["customer", "a.b", "c\"d"]"#, nested).unwrap(),
            ColumnValue::Integer(5)
        );
        // Missing, null, or below a null: NULL when nullable, refused otherwise.
        for path in ["nope", "gone", "gone.deeper", "customer.nope"] {
            assert_eq!(
                one(&format!("c:text?={path}"), nested).unwrap(),
                ColumnValue::Null
            );
            assert_eq!(
                problem(&format!("c:text={path}"), nested).0,
                ColumnProblem::Missing
            );
        }
        // A level that is not an object.
        assert_eq!(
            problem("c:text?=customer.id.x", nested).0,
            ColumnProblem::Missing
        );
        // Not JSON, or not an object at the top.
        assert_eq!(problem("c:text", "plain text").0, ColumnProblem::NotJson);
        assert_eq!(problem("c:text?", "[1, 2]").0, ColumnProblem::Missing);
        // The last of a name given twice, as jsonb reads it.
        assert_eq!(
            one("n:integer", r#"{"n": 1, "n": 2}"#).unwrap(),
            ColumnValue::Integer(2)
        );
        // Names are compared unescaped; whitespace around the value is JSON's.
        assert_eq!(
            one("n:integer", " \n{\"\\u006e\": 4}\t").unwrap(),
            ColumnValue::Integer(4)
        );
        // The whole value is checked, past the fields the columns read.
        for broken in [
            r#"{"n": 1, "x": tru}"#,
            r#"{"n": 1} x"#,
            r#"{"n": 1, "x": "\q"}"#,
        ] {
            assert_eq!(
                problem("n:integer", broken).0,
                ColumnProblem::NotJson,
                "{broken}"
            );
        }
        // Unicode field names, and deep nesting.
        assert_eq!(
            one("u:integer=ключ", r#"{"ключ": 3}"#).unwrap(),
            ColumnValue::Integer(3)
        );
        let deep = format!(
            "{}7{}",
            r#"{"a":"#.repeat(MAX_PATH_DEPTH),
            "}".repeat(MAX_PATH_DEPTH)
        );
        let path = vec!["a"; MAX_PATH_DEPTH].join(".");
        assert_eq!(
            one(&format!("d:integer={path}"), &deep).unwrap(),
            ColumnValue::Integer(7)
        );
        // A tombstone has every column NULL, required or not.
        let columns = Columns::new([Column::parse("c:text").unwrap()]).unwrap();
        assert_eq!(
            columns.extract(&tomb("k1", day(0), at(0))).unwrap(),
            vec![ColumnValue::Null]
        );
    }

    #[test]
    fn the_error_names_the_key_the_column_the_path_and_the_text() {
        let err = one(
            "total:integer=order.total",
            r#"{"order": {"total": "12 EUR"}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid record "k1": column total (path order.total): the field is not an integer: "12 EUR""#
        );
        let long = format!(r#"{{"s": "{}"}}"#, "x".repeat(1000));
        let (_, text) = problem("s:integer", &long);
        assert!(text.len() < 210 && text.ends_with('…'), "{text}");
    }
}
