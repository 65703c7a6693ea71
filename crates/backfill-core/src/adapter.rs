//! Helpers for store authors: what every adapter needs before it builds SQL,
//! and the error it gives for an existing table it cannot use.
//!
//! Users of a store never call these; an adapter calls them on the names it
//! is given, so that no adapter ever formats an unchecked name into SQL and
//! every adapter accepts exactly the same names. A store re-exports
//! [`TableMismatch`] and [`Difference`], which its users match on.

mod mismatch;

pub use mismatch::{Difference, TableMismatch};

use crate::error::{Error, Field, Problem, Result};
use crate::record::Record;

/// The longest table or schema name: Postgres' identifier limit, in bytes.
pub const MAX_IDENTIFIER_BYTES: usize = 63;

/// Checks a table or schema name against `[a-z_][a-z0-9_]*`, at most
/// [`MAX_IDENTIFIER_BYTES`] bytes.
///
/// Only lowercase is accepted. Postgres folds unquoted names to lowercase
/// and SQLite ignores case, so a name like `Orders` would be a different
/// table in Postgres from the `orders` a person types in `psql`, and the
/// same table in SQLite: one rule for every store keeps a name meaning the
/// same thing everywhere, quoted or not.
///
/// ```
/// use backfill_core::adapter::check_identifier;
/// use backfill_core::Error;
///
/// assert!(check_identifier("table", "daily_orders").is_ok());
/// assert!(matches!(
///     check_identifier("table", "Orders"),
///     Err(Error::InvalidName { what: "table", .. })
/// ));
/// ```
///
/// # Errors
///
/// [`Error::InvalidName`] naming `what` and the name.
pub fn check_identifier(what: &'static str, name: &str) -> Result<()> {
    let mut bytes = name.bytes();
    let valid_start = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    let valid_rest = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if valid_start && valid_rest && name.len() <= MAX_IDENTIFIER_BYTES {
        Ok(())
    } else {
        Err(Error::InvalidName {
            what,
            name: name.to_owned(),
        })
    }
}

/// Refuses the first record whose value is longer than `max` bytes, the
/// most a store's engine takes in one row or message: an invalid record
/// named by its key, before anything of its page is written, rather than
/// the engine's own opaque error halfway through.
///
/// # Errors
///
/// [`Error::InvalidRecord`] with [`Problem::TooLong`] on the value.
pub fn check_value_sizes(records: &[Record], max: usize) -> Result<()> {
    match records.iter().find(|r| r.value().len() > max) {
        Some(record) => Err(Error::InvalidRecord {
            key: record.key().to_owned(),
            field: Field::Value,
            problem: Problem::TooLong {
                len: record.value().len(),
                max,
            },
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for good in ["records", "_t", "t1_x", &"a".repeat(63)] {
            assert!(check_identifier("table", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1abc",
            "a-b",
            "a b",
            "x\"; DROP TABLE y; --",
            "tä",
            &"a".repeat(64),
        ] {
            assert!(
                matches!(
                    check_identifier("table", bad),
                    Err(Error::InvalidName { what: "table", .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn mixed_case_is_refused() {
        for bad in ["Orders", "ORDERS", "T1_x", "ordersA"] {
            assert!(
                matches!(
                    check_identifier("table", bad),
                    Err(Error::InvalidName { what: "table", .. })
                ),
                "{bad}"
            );
        }
    }
}
