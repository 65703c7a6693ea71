//! [`TableMismatch`]: the error every store gives for an existing table
//! that is not the table it would have created.

use std::fmt;

/// A table that exists under a store's name but is not the table the store
/// would have created: the source of the
/// [`Error::Open`](crate::Error::Open) that refuses it.
///
/// A table that merely looks right can store wrong data (a collation that
/// makes `a` and `A` one key, a column that turns `"042"` into 42), so a
/// store compares an existing table with its own definition and refuses
/// every difference, naming each one. Its message says the table, each
/// difference, and how to get past it:
///
/// ```
/// use backfill_core::adapter::{Difference, TableMismatch};
///
/// let mismatch = TableMismatch::new(
///     r#""public"."orders""#,
///     vec![
///         Difference::new(Some("key"), "collation NOCASE, expected BINARY"),
///         Difference::new(None, "the table is not STRICT"),
///     ],
/// );
/// assert_eq!(
///     mismatch.to_string(),
///     r#"table "public"."orders" exists but is not the table backfill creates, and writing to it could store wrong data: column "key": collation NOCASE, expected BINARY; the table is not STRICT (drop or rename it, or choose another table name)"#
/// );
/// ```
///
/// A caller finds it behind the error:
///
/// ```
/// # fn check(error: &backfill_core::Error) {
/// use backfill_core::adapter::TableMismatch;
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
    /// The mismatch of `table`, as the store names it in SQL (quoted, e.g.
    /// `"schema"."table"`), with every difference found: at least one.
    pub fn new(table: impl Into<String>, differences: Vec<Difference>) -> Self {
        Self {
            table: table.into(),
            differences,
        }
    }

    /// The table, as the store names it in SQL (e.g. `"schema"."table"`).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Each difference found, in the order the store found them.
    pub fn differences(&self) -> &[Difference] {
        &self.differences
    }
}

impl fmt::Display for TableMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "table {} exists but is not the table backfill creates, \
             and writing to it could store wrong data: ",
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

/// One way a [`TableMismatch`] differs from the table the store creates:
/// in a column, or in the table as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    column: Option<String>,
    problem: String,
}

impl Difference {
    /// A difference in `column`, or in the table as a whole with `None`.
    /// `problem` says what differs, the expected definition included (e.g.
    /// `type integer, expected bigint`); it follows `column "name": ` in
    /// the message.
    pub fn new(column: Option<&str>, problem: impl Into<String>) -> Self {
        Self {
            column: column.map(str::to_owned),
            problem: problem.into(),
        }
    }

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

/// `column "name": problem`, the name quoted as SQL quotes it; or the
/// problem alone.
impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.column {
            Some(column) => write!(
                f,
                "column \"{}\": {}",
                column.replace('"', "\"\""),
                self.problem
            ),
            None => f.write_str(&self.problem),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_names_its_column_quoted() {
        assert_eq!(
            Difference::new(Some("updated_at"), "is missing").to_string(),
            r#"column "updated_at": is missing"#
        );
        assert_eq!(
            Difference::new(Some(r#"a"b"#), "unexpected column (text)").to_string(),
            r#"column "a""b": unexpected column (text)"#
        );
        assert_eq!(
            Difference::new(None, "it is a view, not a table").to_string(),
            "it is a view, not a table"
        );
    }

    #[test]
    fn a_mismatch_says_the_table_each_difference_and_the_fix() {
        let mismatch = TableMismatch::new(
            r#""t""#,
            vec![
                Difference::new(Some("key"), "has collation NOCASE, expected BINARY"),
                Difference::new(None, "the table is WITHOUT ROWID"),
            ],
        );
        assert_eq!(mismatch.table(), r#""t""#);
        assert_eq!(mismatch.differences().len(), 2);
        assert_eq!(mismatch.differences()[0].column(), Some("key"));
        assert_eq!(
            mismatch.differences()[0].problem(),
            "has collation NOCASE, expected BINARY"
        );
        assert_eq!(
            mismatch.to_string(),
            r#"table "t" exists but is not the table backfill creates, and writing to it could store wrong data: column "key": has collation NOCASE, expected BINARY; the table is WITHOUT ROWID (drop or rename it, or choose another table name)"#
        );
    }
}
