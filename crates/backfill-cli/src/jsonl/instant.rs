//! `event_date` and the instants (`updated_at`, `as_of`): the common shapes
//! read by hand, since chrono's general parsers are a good part of a
//! line's cost, and anything else left to chrono.

use chrono::{DateTime, NaiveDate, Utc};

use super::error::{cut, LineError, QUOTED_BYTES};

/// `text`, field `field`, as a `YYYY-MM-DD` date.
pub(super) fn parse_date(field: &'static str, text: &str) -> Result<NaiveDate, LineError> {
    ymd(text.as_bytes()).ok_or_else(|| LineError::BadDate {
        field,
        text: cut(text, QUOTED_BYTES).into_owned(),
    })
}

/// Exactly `YYYY-MM-DD`, a real date. By hand rather than with chrono's
/// `parse_from_str`, which reads its format string again for every line
/// and takes `2026-1-3` too.
fn ymd(b: &[u8]) -> Option<NaiveDate> {
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let year = i32::from(two_digits(b[0], b[1])?) * 100 + i32::from(two_digits(b[2], b[3])?);
    let month = two_digits(b[5], b[6])?;
    let day = two_digits(b[8], b[9])?;
    NaiveDate::from_ymd_opt(year, month.into(), day.into())
}

fn two_digits(tens: u8, ones: u8) -> Option<u8> {
    if tens.is_ascii_digit() && ones.is_ascii_digit() {
        Some((tens - b'0') * 10 + (ones - b'0'))
    } else {
        None
    }
}

/// `text`, field `field`, as an RFC 3339 instant, in UTC.
pub(super) fn parse_instant(field: &'static str, text: &str) -> Result<DateTime<Utc>, LineError> {
    if let Some(at) = common_instant(text.as_bytes()) {
        return Ok(at);
    }
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|reason| LineError::BadInstant {
            field,
            text: cut(text, QUOTED_BYTES).into_owned(),
            reason,
        })
}

/// The common shape of an RFC 3339 instant,
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, read by hand: chrono's
/// general parser is a good part of a line's cost. Anything else (lower
/// case, a space for `T`, a leap second, an error) is left to chrono,
/// which this agrees with on every instant it reads.
fn common_instant(b: &[u8]) -> Option<DateTime<Utc>> {
    if b.len() < 20 || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let date = ymd(&b[..10])?;
    let hour = two_digits(b[11], b[12])?;
    let minute = two_digits(b[14], b[15])?;
    let second = two_digits(b[17], b[18])?;
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            // Digits past nanoseconds are dropped, as chrono does.
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        let digits = i - start;
        if digits == 0 {
            return None;
        }
        if digits < 9 {
            nanos *= 10u32.pow((9 - digits) as u32);
        }
    }
    let offset_seconds = match &b[i..] {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = two_digits(*h1, *h2)?;
            let minutes = two_digits(*m1, *m2)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let seconds = i64::from(hours) * 3600 + i64::from(minutes) * 60;
            if *sign == b'-' {
                -seconds
            } else {
                seconds
            }
        }
        _ => return None,
    };
    let local = date.and_hms_nano_opt(hour.into(), minute.into(), second.into(), nanos)?;
    local
        .checked_sub_signed(chrono::TimeDelta::seconds(offset_seconds))
        .map(|utc| utc.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl::testing::{error, with_value};

    #[test]
    fn bad_dates_and_instants_are_refused() {
        let full = with_value(r#""v""#);
        for bad in [
            "2026-13-01",
            "2026-02-30",
            "2026-1-3",
            "20260103",
            "2026-01-03T00:00:00Z",
            "",
        ] {
            let e = error(&full.replace("\"2026-01-03\"", &format!("\"{bad}\"")));
            assert_eq!(e, format!("event_date {bad:?} is not a date (YYYY-MM-DD)"));
        }
        for bad in [
            "2026-01-03",
            "2026-01-03 09:30",
            "yesterday",
            "2026-01-03T25:00:00Z",
        ] {
            let e = error(&full.replace("\"2026-01-03T09:30:00Z\"", &format!("\"{bad}\"")));
            assert!(
                e.starts_with(&format!("updated_at {bad:?} is not an RFC 3339 instant")),
                "{e}"
            );
        }
        let e = error(&full.replace("2026-01-03T", "0000-01-03T"));
        assert!(e.contains("updated_at is outside years 1 to 9999"), "{e}");
        let e = error(&full.replace("\"k\"", "\"\""));
        assert!(e.contains("key is empty"), "{e}");
        let long = "x".repeat(10_000);
        let e = error(&full.replace("\"2026-01-03\"", &format!("\"{long}\"")));
        assert!(e.len() < 300, "a huge bad field is quoted cut: {e}");
        let e = error(&full.replace("\"k\"", &format!("\"{long}\"")));
        assert!(e.contains("key is 10000 bytes, more than 512"), "{e}");
    }

    #[test]
    fn instants_read_by_hand_agree_with_chrono() {
        for text in [
            "2026-01-03T09:30:00Z",
            "2026-01-03T09:30:00.1Z",
            "2026-01-03T09:30:00.123456789Z",
            "2026-01-03T09:30:00.1234567891234Z",
            "2026-01-03T23:59:59.999999999-23:59",
            "2026-01-03T00:00:00+14:00",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
            "2024-02-29T12:00:00-00:00",
            "2026-01-03T09:30:60Z",
            "2026-01-03t09:30:00z",
            "2026-01-03 09:30:00Z",
            "2026-01-03T09:30:00.Z",
            "2026-01-03T09:30:00",
            "2026-01-03T09:30:00+0100",
            "2026-01-03T09:30:00+01:60",
            "2026-01-03T24:00:00Z",
            "2023-02-29T00:00:00Z",
            "2026-01-03T09:30:00Zjunk",
            "+2026-01-03T09:30:00Z",
        ] {
            let chrono = DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|at| at.with_timezone(&Utc));
            if let Some(by_hand) = common_instant(text.as_bytes()) {
                assert_eq!(Some(by_hand), chrono, "{text}");
            }
            assert_eq!(parse_instant("updated_at", text).ok(), chrono, "{text}");
        }
        assert!(common_instant(b"2026-01-03T09:30:00.5+01:00").is_some());
        assert_eq!(ymd(b"2024-02-29"), NaiveDate::from_ymd_opt(2024, 2, 29));
        assert_eq!(ymd(b"0000-01-01"), NaiveDate::from_ymd_opt(0, 1, 1));
        assert_eq!(ymd(b"2023-02-29"), None);
    }
}
