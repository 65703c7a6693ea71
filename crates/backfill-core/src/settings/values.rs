//! The text of a setting's value, both ways: what a file or a flag writes,
//! parsed once for every entry point, and printed back the same way.

use std::time::Duration;

use crate::{CheckAction, Job, Mode};

/// A duration as a flag or a file writes it: `90s`, `10m`, `1h30m`,
/// `250ms` (`humantime`'s syntax); `0` is zero.
///
/// # Errors
///
/// A message naming the text, for anything else.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration (10m, 1h30m, 90s): {e}"))
}

/// A duration the way [`parse_duration`] reads it back: `1s`, `5m`,
/// `1h 30m`, `250ms`.
pub fn format_duration(d: Duration) -> String {
    match d.is_zero() {
        true => "0".to_owned(),
        false => humantime::format_duration(d).to_string(),
    }
}

/// A size in bytes: a number with an optional unit, `B`, `kB`, `MB`, `GB`
/// (powers of 1000) or `KiB`, `MiB`, `GiB` (powers of 1024), any case;
/// more than zero.
///
/// # Errors
///
/// A message naming the text, for anything else.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let bad = || {
        format!("`{s}` is not a size: expected bytes or a number with a unit (64MiB, 512MB, 1GiB)")
    };
    let text = s.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let unit: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    number
        .checked_mul(unit)
        .and_then(|bytes| usize::try_from(bytes).ok())
        .filter(|bytes| *bytes > 0)
        .ok_or_else(bad)
}

/// A size the way [`parse_size`] reads it back: the largest binary unit
/// that divides it (`64MiB`), else bytes.
pub fn format_size(bytes: usize) -> String {
    for (unit, name) in [(1usize << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// A fraction from 0 to 1: `0.5`, or a percentage, `50%`.
///
/// # Errors
///
/// A message naming the text, for anything else.
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let bad = || format!("`{s}` is not a fraction: expected 0 to 1 (0.5) or a percentage (50%)");
    let fraction = match s.trim().strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map_err(|_| bad())? / 100.0,
        None => s.trim().parse::<f64>().map_err(|_| bad())?,
    };
    match (0.0..=1.0).contains(&fraction) {
        true => Ok(fraction),
        false => Err(bad()),
    }
}

/// Where a store URL's user information (`USER[:PASSWORD]`) is: its byte
/// range, if the URL has one.
fn userinfo(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let at = authority.rfind('@')?;
    Some(start..start + at)
}

/// Whether a store URL carries a password (`postgres://USER:PASSWORD@…`).
pub fn url_has_password(url: &str) -> bool {
    userinfo(url).is_some_and(|r| url[r].contains(':'))
}

/// A store URL without its password, for showing: `postgres://USER:***@…`.
pub fn url_without_password(url: &str) -> String {
    match userinfo(url) {
        Some(r) if url[r.clone()].contains(':') => {
            let colon = r.start + url[r.clone()].find(':').unwrap_or(0);
            format!("{}:***{}", &url[..colon], &url[r.end..])
        }
        _ => url.to_owned(),
    }
}

/// A `postgres://USER@HOST/DB` URL with `password` written into it
/// (percent-encoded): how a password read from an environment variable
/// (`password_env`) reaches the store.
///
/// # Errors
///
/// A message if the URL is not a Postgres one, names no user, or already
/// holds a password.
pub fn with_password(url: &str, password: &str) -> Result<String, String> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err("a password is for a postgres:// store".to_owned());
    }
    let Some(user) = userinfo(url) else {
        return Err(
            "the store names no user for the password (postgres://USER@HOST/DB)".to_owned(),
        );
    };
    if url[user.clone()].contains(':') {
        return Err("the store's URL holds a password already".to_owned());
    }
    let mut encoded = String::with_capacity(password.len());
    for b in password.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                encoded.push(b as char)
            }
            _ => encoded.push_str(&format!("%{b:02X}")),
        }
    }
    Ok(format!(
        "{}:{encoded}{}",
        &url[..user.end],
        &url[user.end..]
    ))
}

/// `job` in time zone `zone` (an IANA name).
#[cfg(feature = "config")]
pub(crate) fn with_zone(job: Job, zone: &str) -> crate::Result<Job> {
    Ok(job.time_zone(parse_zone(zone).map_err(crate::Error::InvalidSetting)?))
}

/// An IANA time zone by name.
#[cfg(feature = "config")]
pub(crate) fn parse_zone(zone: &str) -> Result<chrono_tz::Tz, String> {
    zone.parse().map_err(|_| {
        format!("`{zone}` is not a time zone: expected an IANA name such as Europe/Paris or UTC")
    })
}

/// Without the `config` feature, only UTC is known by name.
#[cfg(not(feature = "config"))]
pub(crate) fn with_zone(_job: Job, zone: &str) -> crate::Result<Job> {
    Err(crate::Error::InvalidSetting(format!(
        "time zone `{zone}` needs backfill-core's `config` feature (or Job::time_zone)"
    )))
}

/// A setting's value read from its text into its layer's slot.
pub(crate) trait Parse {
    fn set(slot: &mut Option<Self>, text: &str) -> Result<(), String>
    where
        Self: Sized;
}

macro_rules! parse_with {
    ($($ty:ty => $parse:expr;)*) => {$(
        impl Parse for $ty {
            fn set(slot: &mut Option<Self>, text: &str) -> Result<(), String> {
                let parse: fn(&str) -> Result<$ty, String> = $parse;
                *slot = Some(parse(text)?);
                Ok(())
            }
        }
    )*};
}

parse_with! {
    String => |t| Ok(t.to_owned());
    bool => |t| t.trim().parse().map_err(|_| format!("`{t}` is not true or false"));
    u32 => |t| t.trim().parse().map_err(|_| format!("`{t}` is not a whole number"));
    f64 => parse_fraction;
    Mode => |t| t.trim().parse().map_err(|_| format!("`{t}` is not a mode: merge or replace"));
    CheckAction => |t| t.trim().parse();
    Duration => parse_duration;
    usize => parse_size;
}

/// Columns: each text is one more declaration.
impl Parse for Vec<String> {
    fn set(slot: &mut Option<Self>, text: &str) -> Result<(), String> {
        slot.get_or_insert_with(Vec::new).push(text.to_owned());
        Ok(())
    }
}

/// A value as its setting's text.
pub(crate) trait Text {
    fn text(&self) -> String;
}

impl Text for String {
    fn text(&self) -> String {
        self.clone()
    }
}

impl Text for bool {
    fn text(&self) -> String {
        self.to_string()
    }
}

impl Text for u32 {
    fn text(&self) -> String {
        self.to_string()
    }
}

impl Text for f64 {
    fn text(&self) -> String {
        self.to_string()
    }
}

impl Text for Mode {
    fn text(&self) -> String {
        self.as_str().to_owned()
    }
}

impl Text for CheckAction {
    fn text(&self) -> String {
        self.as_str().to_owned()
    }
}

impl Text for Duration {
    fn text(&self) -> String {
        format_duration(*self)
    }
}

/// The `usize` settings are sizes.
impl Text for usize {
    fn text(&self) -> String {
        format_size(*self)
    }
}

impl Text for Vec<String> {
    fn text(&self) -> String {
        let quoted: Vec<String> = self.iter().map(|c| format!("{c:?}")).collect();
        format!("[{}]", quoted.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_as_they_print() {
        for d in [1, 90, 300, 3600, 5400].map(Duration::from_secs) {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert!(parse_duration("ten minutes").is_err());
        for n in [1, 1000, 1 << 10, 64 << 20, 3 << 30] {
            assert_eq!(parse_size(&format_size(n)).unwrap(), n);
        }
        assert_eq!(format_size(64 << 20), "64MiB");
        assert_eq!(parse_size("512MB").unwrap(), 512_000_000);
        assert!(parse_size("0").is_err() && parse_size("lots").is_err());
        assert_eq!(parse_fraction("50%").unwrap(), 0.5);
        assert_eq!(parse_fraction("0.25").unwrap(), 0.25);
        assert!(parse_fraction("1.5").is_err());
    }

    #[test]
    fn passwords_go_into_urls_and_are_hidden_from_them() {
        let url = "postgres://etl@db:5432/w?sslmode=require";
        let with = with_password(url, "p@ss word").unwrap();
        assert_eq!(
            with,
            "postgres://etl:p%40ss%20word@db:5432/w?sslmode=require"
        );
        assert!(url_has_password(&with) && !url_has_password(url));
        assert_eq!(
            url_without_password(&with),
            "postgres://etl:***@db:5432/w?sslmode=require"
        );
        assert!(with_password(&with, "x").is_err());
        assert!(with_password("postgres://db/w", "x").is_err());
        assert!(with_password("sqlite://x.db", "x").is_err());
        assert_eq!(url_without_password("sqlite://a@b.db"), "sqlite://a@b.db");
    }
}
