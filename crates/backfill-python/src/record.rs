//! `Record` and `Listing`, and what a fetch yields converted to the
//! engine's records: dates, aware datetimes and values checked here, every
//! other rule by the engine's own constructor.

use backfill_core::Record;
use chrono::{DateTime, NaiveDate, Utc};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::errors::InvalidRecord;

/// A record: a key, the day it belongs to, its value and the instant it
/// was last updated upstream (the newest wins), or a tombstone.
#[pyclass(module = "backfill", name = "Record", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct PyRecord {
    pub(crate) inner: Record,
}

#[pymethods]
impl PyRecord {
    /// `Record(key, event_date, value, updated_at, deleted=False)`:
    /// `event_date` a `date` or `"YYYY-MM-DD"`, `updated_at` an aware
    /// `datetime` or an RFC 3339 string, `value` a string (stored as it is)
    /// or any JSON value (stored as canonical JSON: compact, keys sorted).
    #[new]
    #[pyo3(signature = (key, event_date, value=None, updated_at=None, deleted=false))]
    fn new(
        key: &Bound<'_, PyAny>,
        event_date: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
        updated_at: Option<&Bound<'_, PyAny>>,
        deleted: bool,
    ) -> PyResult<Self> {
        let key: String = key
            .extract()
            .map_err(|_| InvalidRecord::new_err("key: must be a str"))?;
        let updated_at = updated_at.ok_or_else(|| {
            InvalidRecord::new_err(format!("record {key:?}: updated_at is required"))
        })?;
        let inner = build_record(&key, event_date, value, updated_at, deleted)?;
        Ok(Self { inner })
    }

    #[getter]
    fn key(&self) -> &str {
        self.inner.key()
    }

    #[getter]
    fn event_date(&self) -> NaiveDate {
        self.inner.event_date()
    }

    #[getter]
    fn value(&self) -> &str {
        self.inner.value()
    }

    #[getter]
    fn updated_at(&self) -> DateTime<Utc> {
        self.inner.updated_at()
    }

    #[getter]
    fn deleted(&self) -> bool {
        self.inner.is_deleted()
    }

    fn __repr__(&self) -> String {
        format!(
            "Record(key={:?}, event_date={}, value={:?}, updated_at={}, deleted={})",
            self.inner.key(),
            self.inner.event_date(),
            self.inner.value(),
            self.inner.updated_at().to_rfc3339(),
            if self.inner.is_deleted() {
                "True"
            } else {
                "False"
            }
        )
    }

    fn __eq__(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

/// `event_date` from a `date` or an ISO day.
pub(crate) fn to_date(key: &str, value: &Bound<'_, PyAny>) -> PyResult<NaiveDate> {
    if let Ok(text) = value.cast::<PyString>() {
        let text = text.to_cow()?;
        let text = text.as_ref();
        // Exactly YYYY-MM-DD, as the command line takes a day.
        let shaped = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
        return shaped
            .then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
            .flatten()
            .ok_or_else(|| {
                InvalidRecord::new_err(format!(
                    "record {key:?}: event_date {text:?} is not a YYYY-MM-DD day"
                ))
            });
    }
    if value.is_instance_of::<pyo3::types::PyDateTime>() {
        return Err(InvalidRecord::new_err(format!(
            "record {key:?}: event_date must be a date, not a datetime"
        )));
    }
    let not_a_date = || {
        InvalidRecord::new_err(format!(
            "record {key:?}: event_date must be a date or a YYYY-MM-DD string"
        ))
    };
    if !value.is_instance_of::<pyo3::types::PyDate>() {
        return Err(not_a_date());
    }
    // One call: the proleptic Gregorian ordinal, 1 for 0001-01-01, as
    // chrono counts days from the common era.
    let ordinal: i32 = value
        .call_method0(pyo3::intern!(value.py(), "toordinal"))?
        .extract()?;
    NaiveDate::from_num_days_from_ce_opt(ordinal).ok_or_else(not_a_date)
}

/// `datetime(1970, 1, 1, tzinfo=timezone.utc)`, made once.
pub(crate) fn utc_epoch(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static EPOCH: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    EPOCH
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            let datetime = py.import("datetime")?;
            let utc = datetime.getattr("timezone")?.getattr("utc")?;
            let epoch = datetime
                .getattr("datetime")?
                .call1((1970, 1, 1, 0, 0, 0, 0, utc))?;
            Ok(epoch.unbind())
        })
        .map(|epoch| epoch.bind(py))
}

/// `updated_at` from an aware `datetime` or an RFC 3339 string.
pub(crate) fn to_instant(key: &str, value: &Bound<'_, PyAny>) -> PyResult<DateTime<Utc>> {
    if let Ok(text) = value.cast::<PyString>() {
        let text = text.to_cow()?;
        let text = text.as_ref();
        return DateTime::parse_from_rfc3339(text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| {
                InvalidRecord::new_err(format!(
                    "record {key:?}: updated_at {text:?} is not an RFC 3339 instant with an offset"
                ))
            });
    }
    if value.is_instance_of::<pyo3::types::PyDateTime>() {
        // The instant as an exact distance from an aware epoch: one
        // subtraction and three attributes (the stable ABI reads a datetime
        // attribute by attribute). A naive datetime cannot be subtracted
        // from an aware one.
        let py = value.py();
        let naive = || {
            InvalidRecord::new_err(format!(
                "record {key:?}: updated_at is a naive datetime; give it a time zone"
            ))
        };
        let delta = value.sub(utc_epoch(py)?).map_err(|_| naive())?;
        let part = |name: &Bound<'_, PyString>| -> PyResult<i64> { delta.getattr(name)?.extract() };
        let micros = part(pyo3::intern!(py, "days"))? * 86_400_000_000
            + part(pyo3::intern!(py, "seconds"))? * 1_000_000
            + part(pyo3::intern!(py, "microseconds"))?;
        return DateTime::from_timestamp_micros(micros).ok_or_else(|| {
            InvalidRecord::new_err(format!("record {key:?}: updated_at is out of range"))
        });
    }
    Err(InvalidRecord::new_err(format!(
        "record {key:?}: updated_at must be an aware datetime or an RFC 3339 string"
    )))
}

/// A record's `value`: a string as it is, anything else as canonical JSON
/// (compact, object keys sorted at every level), as the command line
/// stores it.
pub(crate) fn to_value(key: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_cow()?.into_owned());
    }
    let py = value.py();
    // `json.dumps(…, allow_nan=False)`, looked up once, not per record.
    static DUMPS: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let dumps = DUMPS.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("allow_nan", false)?;
        let dumps = py.import("json")?.getattr("dumps")?;
        Ok(py
            .import("functools")?
            .getattr("partial")?
            .call((dumps,), Some(&kwargs))?
            .unbind())
    })?;
    let text: String = dumps
        .bind(py)
        .call1((value,))
        .map_err(|e| InvalidRecord::new_err(format!("record {key:?}: value is not JSON: {e}")))?
        .extract()?;
    let parsed: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| InvalidRecord::new_err(format!("record {key:?}: value: {e}")))?;
    Ok(parsed.to_string())
}

pub(crate) fn build_record(
    key: &str,
    event_date: &Bound<'_, PyAny>,
    value: Option<&Bound<'_, PyAny>>,
    updated_at: &Bound<'_, PyAny>,
    deleted: bool,
) -> PyResult<Record> {
    let day = to_date(key, event_date)?;
    let at = to_instant(key, updated_at)?;
    let made = if deleted {
        if value.is_some_and(|v| !v.is_none()) {
            return Err(InvalidRecord::new_err(format!(
                "record {key:?}: a tombstone (deleted=True) has no value"
            )));
        }
        Record::tombstone(key, day, at)
    } else {
        let value = match value {
            Some(v) if !v.is_none() => to_value(key, v)?,
            _ => {
                return Err(InvalidRecord::new_err(format!(
                    "record {key:?}: value is required unless deleted=True"
                )))
            }
        };
        Record::new(key, day, value, at)
    };
    made.map_err(|e| InvalidRecord::new_err(e.to_string()))
}

/// One item a fetch yields: a `Record` or a dict with its fields.
pub(crate) fn to_record<'py>(item: &Bound<'py, PyAny>) -> PyResult<Record> {
    if let Ok(record) = item.cast::<PyRecord>() {
        return Ok(record.get().inner.clone());
    }
    let Ok(dict) = item.cast::<PyDict>() else {
        return Err(InvalidRecord::new_err(format!(
            "a fetch yields Record objects or dicts, not {}",
            item.get_type().name()?
        )));
    };
    let py = item.py();
    let field = |name: &Bound<'py, PyString>| dict.get_item(name);
    let key: String = field(pyo3::intern!(py, "key"))?
        .ok_or_else(|| InvalidRecord::new_err("a record dict has no \"key\""))?
        .extract()
        .map_err(|_| InvalidRecord::new_err("key: must be a str"))?;
    let event_date = field(pyo3::intern!(py, "event_date"))?
        .ok_or_else(|| InvalidRecord::new_err(format!("record {key:?}: no event_date")))?;
    let updated_at = field(pyo3::intern!(py, "updated_at"))?
        .ok_or_else(|| InvalidRecord::new_err(format!("record {key:?}: no updated_at")))?;
    let deleted = match field(pyo3::intern!(py, "deleted"))? {
        Some(d) => d.is_truthy()?,
        None => false,
    };
    let value = field(pyo3::intern!(py, "value"))?;
    build_record(&key, &event_date, value.as_ref(), &updated_at, deleted)
}

/// A replace listing: the day's records as of an instant (`as_of`).
#[pyclass(module = "backfill", name = "Listing", frozen)]
#[derive(Debug)]
pub(crate) struct PyListing {
    pub(crate) records: Py<PyAny>,
    pub(crate) as_of: DateTime<Utc>,
}

#[pymethods]
impl PyListing {
    /// `Listing(records, as_of)`: `records` any iterable, `as_of` an aware
    /// datetime or RFC 3339 string.
    #[new]
    fn new(records: Py<PyAny>, as_of: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Self {
            records,
            as_of: to_instant("listing", as_of)?,
        })
    }
}
