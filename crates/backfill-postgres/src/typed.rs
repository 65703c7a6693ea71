//! Typed columns in Postgres: each [`ColumnType`]'s column type, and a
//! [`ColumnValue`] as a parameter in Postgres' binary format (binary `COPY`
//! and the merge's arrays alike).

use std::error::Error as StdError;

use backfill_core::columns::{ColumnType, ColumnValue, Columns};
use tokio_postgres::types::private::BytesMut;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// The column's type as `CREATE TABLE` writes it, and as the catalog
/// (`format_type`) shows it.
pub(crate) fn sql_type(ty: ColumnType) -> &'static str {
    match ty {
        ColumnType::Integer => "bigint",
        ColumnType::Double => "double precision",
        ColumnType::Numeric => "numeric",
        ColumnType::Boolean => "boolean",
        ColumnType::Date => "date",
        ColumnType::Timestamp => "timestamp with time zone",
        ColumnType::Json => "jsonb",
        _ => "text",
    }
}

/// The column's type as a parameter.
pub(crate) fn pg_type(ty: ColumnType) -> Type {
    match ty {
        ColumnType::Integer => Type::INT8,
        ColumnType::Double => Type::FLOAT8,
        ColumnType::Numeric => Type::NUMERIC,
        ColumnType::Boolean => Type::BOOL,
        ColumnType::Date => Type::DATE,
        ColumnType::Timestamp => Type::TIMESTAMPTZ,
        ColumnType::Json => Type::JSONB,
        _ => Type::TEXT,
    }
}

/// The array type of [`pg_type`], as the merge's `unnest` takes it.
pub(crate) fn array_cast(ty: ColumnType) -> &'static str {
    match ty {
        ColumnType::Integer => "bigint[]",
        ColumnType::Double => "float8[]",
        ColumnType::Numeric => "numeric[]",
        ColumnType::Boolean => "boolean[]",
        ColumnType::Date => "date[]",
        ColumnType::Timestamp => "timestamptz[]",
        ColumnType::Json => "jsonb[]",
        _ => "text[]",
    }
}

/// The typed columns' names, quoted, each after a comma: what statements
/// append to the table's own columns.
pub(crate) fn names(columns: &Columns) -> String {
    columns
        .iter()
        .map(|c| format!(r#", "{}""#, c.name()))
        .collect()
}

/// Rows of `n` typed columns, one row after another in `flat`, as one
/// array per column: the merge's and the upgrade's parameters.
pub(crate) fn arrays(n: usize, flat: &[ColumnValue]) -> Vec<Vec<Param<'_>>> {
    let rows = flat.len().checked_div(n).unwrap_or(0);
    (0..n)
        .map(|c| (0..rows).map(|r| Param(&flat[r * n + c])).collect())
        .collect()
}

/// A typed column's value as a binary parameter.
#[derive(Debug)]
pub(crate) struct Param<'a>(pub(crate) &'a ColumnValue);

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self.0 {
            ColumnValue::Null => Ok(IsNull::Yes),
            ColumnValue::Text(s) => s.as_str().to_sql(ty, out),
            ColumnValue::Integer(n) => n.to_sql(ty, out),
            ColumnValue::Double(x) => x.to_sql(ty, out),
            ColumnValue::Boolean(b) => b.to_sql(ty, out),
            ColumnValue::Date(d) => d.to_sql(ty, out),
            ColumnValue::Timestamp(t) => t.to_sql(ty, out),
            ColumnValue::Json(text) => {
                // jsonb's binary form: version 1, then the text.
                out.extend_from_slice(&[1]);
                out.extend_from_slice(text.as_bytes());
                Ok(IsNull::No)
            }
            ColumnValue::Numeric(text) => {
                numeric(text, out)?;
                Ok(IsNull::No)
            }
            _ => Err("a column value this release cannot send".into()),
        }
    }

    fn accepts(ty: &Type) -> bool {
        [
            Type::TEXT,
            Type::INT8,
            Type::FLOAT8,
            Type::NUMERIC,
            Type::BOOL,
            Type::DATE,
            Type::TIMESTAMPTZ,
            Type::JSONB,
        ]
        .contains(ty)
    }

    to_sql_checked!();
}

/// The most base-10 000 digit groups a numeric may have before its point
/// (Postgres: 131 072 decimal digits) and decimal digits after it (16 383).
const MAX_WEIGHT: usize = 131_072 / 4;
const MAX_SCALE: usize = 16_383;

/// A JSON number (checked by `backfill_core::columns`) in Postgres'
/// binary `numeric` form: digit groups of base 10 000, the weight of the
/// first, the sign and the display scale (the number's own digits after
/// the point: `12.50` keeps two).
fn numeric(text: &str, out: &mut BytesMut) -> Result<(), Box<dyn StdError + Sync + Send>> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], body[at + 1..].parse::<i64>()?),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{int}{frac}");
    // value = digits × 10^point_shift
    let shift = exponent - frac.len() as i64;
    let (int_part, frac_part): (String, String) = if shift >= 0 {
        let zeros = usize::try_from(shift)?;
        if digits.len() + zeros > MAX_WEIGHT * 4 {
            return Err(format!("{text} has more digits than numeric keeps").into());
        }
        (format!("{digits}{}", "0".repeat(zeros)), String::new())
    } else {
        let scale = usize::try_from(-shift)?;
        if scale > MAX_SCALE {
            return Err(format!("{text} has more decimals than numeric keeps").into());
        }
        if digits.len() > scale {
            let (i, f) = digits.split_at(digits.len() - scale);
            (i.to_owned(), f.to_owned())
        } else {
            (
                String::new(),
                format!("{}{digits}", "0".repeat(scale - digits.len())),
            )
        }
    };
    let dscale = frac_part.len();
    let int_part = int_part.trim_start_matches('0');
    let pad_int = (4 - int_part.len() % 4) % 4;
    let int_padded = format!("{}{int_part}", "0".repeat(pad_int));
    let pad_frac = (4 - frac_part.len() % 4) % 4;
    let frac_padded = format!("{frac_part}{}", "0".repeat(pad_frac));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes()
            .chunks(4)
            .map(|c| c.iter().fold(0i16, |n, d| n * 10 + i16::from(d - b'0')))
            .collect()
    };
    let mut groups = group(&int_padded);
    let int_groups = groups.len() as i64;
    groups.extend(group(&frac_padded));
    let mut weight = int_groups - 1;
    // Leading zero groups move the weight; trailing ones are dropped.
    let lead = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..lead);
    weight -= lead as i64;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.extend_from_slice(&i16::try_from(groups.len())?.to_be_bytes());
    out.extend_from_slice(&i16::try_from(weight)?.to_be_bytes());
    let sign: u16 = if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    };
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&u16::try_from(dscale)?.to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(text: &str) -> (i16, i16, u16, u16, Vec<i16>) {
        let mut out = BytesMut::new();
        numeric(text, &mut out).unwrap();
        let b = &out[..];
        let at = |i: usize| i16::from_be_bytes([b[i], b[i + 1]]);
        let n = at(0);
        let digits = (0..n as usize).map(|k| at(8 + 2 * k)).collect();
        (n, at(2), at(4) as u16, at(6) as u16, digits)
    }

    #[test]
    fn numerics_encode_as_postgres_does() {
        assert_eq!(encoded("12.50"), (2, 0, 0, 2, vec![12, 5000]));
        assert_eq!(encoded("0"), (0, 0, 0, 0, vec![]));
        assert_eq!(encoded("-0"), (0, 0, 0, 0, vec![]));
        assert_eq!(
            encoded("-1234567.891"),
            (3, 1, 0x4000, 3, vec![123, 4567, 8910])
        );
        assert_eq!(encoded("0.0001"), (1, -1, 0, 4, vec![1]));
        assert_eq!(encoded("1e400"), (1, 100, 0, 0, vec![1]));
        assert_eq!(encoded("1.5E-3"), (1, -1, 0, 4, vec![15]));
        assert_eq!(encoded("10000"), (1, 1, 0, 0, vec![1]));
    }
}
