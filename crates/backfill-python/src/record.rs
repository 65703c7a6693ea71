//! `Record` and `Listing`, and what a fetch yields converted to the
//! engine's records: dates, aware datetimes and values checked here, every
//! other rule by the engine's own constructor.

use backfill_core::Record;
use chrono::{DateTime, NaiveDate, Utc};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

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
/// ([`backfill_core::json`]: compact, object keys sorted at every level,
/// numbers exactly as written), as the command line stores it.
///
/// Numbers keep their text: an `int` all its digits (beyond 64 bits too),
/// a `float` its `repr` (the shortest text that reads back as the same
/// double), a `decimal.Decimal` its `str`. Containers and keys are read as
/// `json.dumps` reads them (`dict`, `list`, `tuple`; `str`, `int`,
/// `float`, `bool` and `None` keys); NaN, infinities and anything else are
/// refused.
pub(crate) fn to_value(key: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_cow()?.into_owned());
    }
    let mut out = Vec::with_capacity(64);
    write_json(&mut out, value, 0)
        .map_err(|e| InvalidRecord::new_err(format!("record {key:?}: value is not JSON: {e}")))?;
    let text = String::from_utf8(out)
        .map_err(|_| InvalidRecord::new_err(format!("record {key:?}: value is not UTF-8")))?;
    backfill_core::json::canonical(&text)
        .map_err(|e| InvalidRecord::new_err(format!("record {key:?}: value is not JSON: {e}")))
}

/// Python's own `int.__repr__`, `float.__repr__` and `decimal.Decimal`,
/// looked up once.
struct Builtins {
    int_repr: Py<PyAny>,
    float_repr: Py<PyAny>,
    decimal: Py<PyAny>,
}

fn builtins(py: Python<'_>) -> PyResult<&Builtins> {
    static BUILTINS: pyo3::sync::PyOnceLock<Builtins> = pyo3::sync::PyOnceLock::new();
    BUILTINS.get_or_try_init(py, || {
        Ok(Builtins {
            int_repr: py.get_type::<PyInt>().getattr("__repr__")?.unbind(),
            float_repr: py.get_type::<PyFloat>().getattr("__repr__")?.unbind(),
            decimal: py.import("decimal")?.getattr("Decimal")?.unbind(),
        })
    })
}

/// Why a Python value is not JSON, in `json.dumps`'s words where it has
/// them.
fn not_json(what: String) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(what)
}

/// Writes `value` as JSON text (members in the dict's order; the caller
/// makes it canonical).
fn write_json(out: &mut Vec<u8>, value: &Bound<'_, PyAny>, depth: usize) -> PyResult<()> {
    if depth > backfill_core::json::MAX_DEPTH {
        return Err(not_json(format!(
            "nested deeper than {} levels (or contains itself)",
            backfill_core::json::MAX_DEPTH
        )));
    }
    let py = value.py();
    if value.is_none() {
        out.extend_from_slice(b"null");
    } else if let Ok(text) = value.cast::<PyString>() {
        write_str(out, &text.to_cow()?);
    } else if let Ok(b) = value.cast::<PyBool>() {
        out.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
    } else if let Some(text) = number_text(value)? {
        out.extend_from_slice(text.as_bytes());
    } else if value.is_instance(builtins(py)?.decimal.bind(py))? {
        if !value.call_method0("is_finite")?.is_truthy()? {
            return Err(not_json(format!("a Decimal that is not a number: {value}")));
        }
        let text = value.str()?.to_cow()?.into_owned();
        out.extend_from_slice(json_number(text)?.as_bytes());
    } else if let Ok(dict) = value.cast::<PyDict>() {
        out.push(b'{');
        for (i, (k, v)) in dict.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_key(out, &k)?;
            out.push(b':');
            write_json(out, &v, depth + 1)?;
        }
        out.push(b'}');
    } else if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        out.push(b'[');
        for (i, item) in value.try_iter()?.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json(out, &item?, depth + 1)?;
        }
        out.push(b']');
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "Object of type {} is not JSON serializable",
            value.get_type().name()?
        )));
    }
    Ok(())
}

/// A dict key as `json.dumps` writes it: a string, or a number, boolean
/// or `None` as its JSON text in quotes.
fn write_key(out: &mut Vec<u8>, key: &Bound<'_, PyAny>) -> PyResult<()> {
    if let Ok(text) = key.cast::<PyString>() {
        write_str(out, &text.to_cow()?);
    } else if let Ok(b) = key.cast::<PyBool>() {
        write_str(out, if b.is_true() { "true" } else { "false" });
    } else if key.is_none() {
        write_str(out, "null");
    } else if let Some(text) = number_text(key)? {
        write_str(out, &text);
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "keys must be str, int, float, bool or None, not {}",
            key.get_type().name()?
        )));
    }
    Ok(())
}

/// An `int`'s or a `float`'s JSON text, as `json.dumps` writes it (its
/// type's own `repr`, so an `IntEnum` is its number); `None` for any other
/// value. NaN and infinities are refused.
fn number_text(value: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let py = value.py();
    let repr = if value.is_instance_of::<PyInt>() {
        &builtins(py)?.int_repr
    } else if value.is_instance_of::<PyFloat>() {
        let x: f64 = value.extract()?;
        if !x.is_finite() {
            return Err(not_json(format!(
                "out of range float values are not JSON compliant: {x}"
            )));
        }
        &builtins(py)?.float_repr
    } else {
        return Ok(None);
    };
    let text: String = repr.bind(py).call1((value,))?.extract()?;
    json_number(text).map(Some)
}

/// `text` if it is a JSON number. `repr` and `str` of Python's numbers
/// are (`1e+16`, `1E+3`, `-0`); anything else is refused rather than
/// stored.
fn json_number(text: String) -> PyResult<String> {
    if backfill_core::json::is_number(&text) {
        Ok(text)
    } else {
        Err(not_json(format!(
            "a number that is not a JSON number: {text}"
        )))
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing a string into a Vec cannot fail.
    serde_json::to_writer(out, s).expect("serializing a string into memory");
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
