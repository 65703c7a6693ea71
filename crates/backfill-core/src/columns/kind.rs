//! A column's type: what a field must be to fit it.

use std::fmt;

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

/// The type as an error names what a field must be.
pub(crate) fn article(ty: ColumnType) -> &'static str {
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
