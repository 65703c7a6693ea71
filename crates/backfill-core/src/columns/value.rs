//! A column's value: a field of a record's JSON value read as its column's
//! type, and the rules of each type.

use chrono::{DateTime, Datelike, NaiveDate, SubsecRound, Timelike, Utc};
use serde_json::value::RawValue;

use super::fields::fields;
use super::{Column, ColumnError, ColumnProblem, ColumnType};
use crate::{Error, Result, MAX_YEAR, MIN_YEAR};

impl Column {
    /// This column's value in a live record's JSON value `root`, read down
    /// its path from `first`, the top-level field its path starts with
    /// (found in one pass for every column; `Err(())` when the value is
    /// not an object). `key` names the record in errors.
    pub(super) fn read(
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
pub(super) fn shorten(text: &str) -> String {
    crate::text::cut(text, 200).into_owned()
}
