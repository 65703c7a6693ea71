//! A run's file format: per record, the key and value with their lengths,
//! the event date as days since 1 January of year 1, `updated_at` in
//! microseconds, and the deleted flag. Written and read by this process
//! only, within one attempt.

use std::io::{Read, Write};

use chrono::{DateTime, Datelike, NaiveDate};

use crate::record::Record;

pub(super) fn encode(record: &Record, out: &mut impl Write) -> std::io::Result<()> {
    out.write_all(&(record.key().len() as u32).to_le_bytes())?;
    out.write_all(record.key().as_bytes())?;
    out.write_all(&(record.value().len() as u64).to_le_bytes())?;
    out.write_all(record.value().as_bytes())?;
    out.write_all(&record.event_date().num_days_from_ce().to_le_bytes())?;
    out.write_all(&record.updated_at().timestamp_micros().to_le_bytes())?;
    out.write_all(&[u8::from(record.is_deleted())])
}

pub(super) fn decode(input: &mut impl Read) -> std::io::Result<Option<Record>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let corrupt =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let key = read_text(input, u32::from_le_bytes(len) as usize)?;
    let mut len = [0u8; 8];
    input.read_exact(&mut len)?;
    let value = read_text(input, u64::from_le_bytes(len) as usize)?;
    let mut date = [0u8; 4];
    input.read_exact(&mut date)?;
    let event_date = NaiveDate::from_num_days_from_ce_opt(i32::from_le_bytes(date))
        .ok_or_else(|| corrupt("a bad date in a spilled run"))?;
    let mut micros = [0u8; 8];
    input.read_exact(&mut micros)?;
    let updated_at = DateTime::from_timestamp_micros(i64::from_le_bytes(micros))
        .ok_or_else(|| corrupt("a bad instant in a spilled run"))?;
    let mut deleted = [0u8; 1];
    input.read_exact(&mut deleted)?;
    let mut record = Record::new_unchecked(key, event_date, value, updated_at);
    if deleted[0] == 1 {
        record = record.to_tombstone();
    }
    Ok(Some(record))
}

fn read_text(input: &mut impl Read, len: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; len];
    input.read_exact(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "spilled text is not UTF-8")
    })
}
