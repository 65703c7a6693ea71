//! Reading a record's typed columns: the value read once ([`fields`]),
//! the fields the columns start with kept raw, each column's field then
//! read down its path (`value.rs`).

use super::fields::{fields, LINEAR_NAMES};
use super::value::shorten;
use super::{ColumnError, ColumnProblem, ColumnValue, Columns};
use crate::{Error, Record, Result};

impl Columns {
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
