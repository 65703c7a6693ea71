//! The configuration file: named profiles of [`Settings`], in TOML.
//!
//! ```toml
//! # backfill.toml
//! profile = "dev"            # the profile used when none is named
//!
//! [profiles.dev]
//! store = "sqlite://dev.db"
//! fetch_cmd = "python3 fetch.py {day}"
//!
//! [profiles.prod]
//! store = "postgres://etl@db.internal/warehouse"
//! password_env = "WAREHOUSE_PASSWORD"   # the password itself never is here
//! schema = "sync"
//! table = "orders"
//! columns = ["amount:numeric", "customer:text=customer.id"]
//! mode = "replace"
//! retries = 5
//! retry_delay = "10s"
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use toml::Spanned;

use super::{url_has_password, values, with_password, Settings};

/// The file the command line reads profiles from when `--config` names
/// none, in the working directory, if it exists.
pub const CONFIG_FILE: &str = "backfill.toml";

/// How an environment variable is read: `std::env::var` in use, a map in
/// tests.
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The largest configuration file read: profiles fit in a few KiB.
const MAX_BYTES: u64 = 1 << 20;

/// What is wrong with a configuration file: the file, the line and the key
/// where known, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// The line (from 1), where the error has a place.
    pub line: Option<usize>,
    /// The key, where the error is one key's.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// A configuration file's profiles, read and checked: every key known,
/// every value of its type and parsed ([`Profiles::settings`] then only
/// resolves environment variables).
#[derive(Debug, Clone)]
pub struct Profiles {
    path: PathBuf,
    /// Line starts, for spans.
    lines: Vec<usize>,
    default: Option<Spanned<String>>,
    profiles: BTreeMap<String, Spanned<Profile>>,
}

/// The file as TOML holds it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    profile: Option<Spanned<String>>,
    #[serde(default)]
    profiles: BTreeMap<String, Spanned<Profile>>,
}

/// One profile as TOML holds it: every [`Settings`] key, flat.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    store: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    schema: Option<String>,
    table: Option<String>,
    columns: Option<Vec<String>>,
    allow_column_changes: Option<bool>,
    history: Option<bool>,
    fetch_cmd: Option<String>,
    fetch_files: Option<String>,
    mode: Option<Spanned<String>>,
    concurrency: Option<Spanned<u32>>,
    retries: Option<u32>,
    retry_delay: Option<Spanned<String>>,
    max_retry_delay: Option<Spanned<String>>,
    day_timeout: Option<Spanned<String>>,
    fail_fast: Option<bool>,
    lenient_event_dates: Option<bool>,
    stream_memory: Option<Spanned<Size>>,
    time_zone: Option<Spanned<String>>,
    skip_unchanged: Option<bool>,
    allow_empty_replace: Option<bool>,
    max_delete_fraction: Option<Spanned<Fraction>>,
    check_volume: Option<Spanned<String>>,
    check_empty: Option<Spanned<String>>,
    check_fraction: Option<Spanned<Fraction>>,
    check_window: Option<u32>,
}

/// A size: bytes, or text with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

/// A fraction: a number, or text (`"50%"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Fraction {
    Number(f64),
    Text(String),
}

impl Profiles {
    /// Reads and checks the file at `path`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] if it cannot be read, is not TOML, or holds an
    /// unknown key, a value of the wrong type or a password.
    pub fn read(path: impl AsRef<Path>) -> Result<Profiles, ConfigError> {
        let path = path.as_ref();
        let error = |message: String| ConfigError {
            path: path.to_owned(),
            line: None,
            key: None,
            message,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| {
                std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_BYTES + 1), &mut text)
            })
            .map_err(|e| error(e.to_string()))?;
        if text.len() as u64 > MAX_BYTES {
            return Err(error(format!(
                "larger than {MAX_BYTES} bytes, which no profile needs"
            )));
        }
        Profiles::parse(path, &text)
    }

    /// Checks `text`, the file at `path`.
    ///
    /// # Errors
    ///
    /// As [`Profiles::read`].
    pub fn parse(path: impl Into<PathBuf>, text: &str) -> Result<Profiles, ConfigError> {
        let mut lines = vec![0];
        lines.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        let mut profiles = Profiles {
            path: path.into(),
            lines,
            default: None,
            profiles: BTreeMap::new(),
        };
        let document: Document = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| profiles.line(s.start));
            profiles.error(line, None, e.message().trim().to_owned())
        })?;
        profiles.default = document.profile;
        profiles.profiles = document.profiles;
        // Every value parsed now, so that a bad one is found whatever
        // profile is used.
        for name in profiles.profiles.keys() {
            profiles.layer(name, None)?;
        }
        Ok(profiles)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The profiles' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }

    /// The profile to use: `name` if given, else the file's `profile`,
    /// else `default`.
    pub fn chosen<'a>(&'a self, name: Option<&'a str>) -> &'a str {
        name.or(self.default.as_ref().map(|d| d.get_ref().as_str()))
            .unwrap_or("default")
    }

    /// The settings of the profile [`Profiles::chosen`] names, the
    /// password of `password_env` read from the environment (through
    /// `env`, `std::env::var` in use) and written into the store's URL.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the profile if it does not exist, or the
    /// line of `password_env` if its variable is not set.
    pub fn settings(
        &self,
        name: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let chosen = self.chosen(name);
        if !self.profiles.contains_key(chosen) {
            let known: Vec<&str> = self.names().collect();
            let line = match name {
                None => self.default.as_ref().map(|d| self.line(d.span().start)),
                Some(_) => None,
            };
            return Err(self.error(
                line,
                None,
                format!(
                    "no profile {chosen:?} (the file has {})",
                    match known.is_empty() {
                        true => "none: add a [profiles.NAME] table".to_owned(),
                        false => known.join(", "),
                    }
                ),
            ));
        }
        self.layer(chosen, Some(env))
    }

    /// Profile `name`'s layer, its values parsed; the password read through
    /// `env` (`None`: only checked, the URL left without it).
    fn layer(&self, name: &str, env: Option<Env<'_>>) -> Result<Settings, ConfigError> {
        let p = self.profiles[name].get_ref();
        let at = |span: std::ops::Range<usize>| Some(self.line(span.start));
        if let Some(zone) = &p.time_zone {
            values::parse_zone(zone.get_ref())
                .map_err(|m| self.error(at(zone.span()), Some("time_zone"), m))?;
        }
        if let Some(c) = &p.concurrency {
            if !(1..=256).contains(c.get_ref()) {
                return Err(self.error(
                    at(c.span()),
                    Some("concurrency"),
                    format!("{} is not from 1 to 256", c.get_ref()),
                ));
            }
        }
        let store = match &p.store {
            None => None,
            Some(url) => Some(self.store_url(url, p.password_env.as_ref(), env)?),
        };
        let mut settings = Settings {
            store,
            password_env: p.password_env.as_ref().map(|v| v.get_ref().clone()),
            schema: p.schema.clone(),
            table: p.table.clone(),
            columns: p.columns.clone(),
            allow_column_changes: p.allow_column_changes,
            history: p.history,
            fetch_cmd: p.fetch_cmd.clone(),
            fetch_files: p.fetch_files.clone(),
            concurrency: p.concurrency.as_ref().map(|c| *c.get_ref()),
            retries: p.retries,
            fail_fast: p.fail_fast,
            lenient_event_dates: p.lenient_event_dates,
            time_zone: p.time_zone.as_ref().map(|z| z.get_ref().clone()),
            skip_unchanged: p.skip_unchanged,
            allow_empty_replace: p.allow_empty_replace,
            check_window: p.check_window,
            ..Settings::default()
        };
        // The values a file writes as text, read as a flag's are.
        let size = p.stream_memory.as_ref().map(|s| match s.get_ref() {
            Size::Bytes(n) => (n.to_string(), s.span()),
            Size::Text(t) => (t.clone(), s.span()),
        });
        let fraction = |f: &Option<Spanned<Fraction>>| {
            f.as_ref().map(|f| match f.get_ref() {
                Fraction::Number(n) => (n.to_string(), f.span()),
                Fraction::Text(t) => (t.clone(), f.span()),
            })
        };
        let text =
            |v: &Option<Spanned<String>>| v.as_ref().map(|v| (v.get_ref().clone(), v.span()));
        let texts = [
            ("mode", text(&p.mode)),
            ("retry_delay", text(&p.retry_delay)),
            ("max_retry_delay", text(&p.max_retry_delay)),
            ("day_timeout", text(&p.day_timeout)),
            ("stream_memory", size),
            ("max_delete_fraction", fraction(&p.max_delete_fraction)),
            ("check_volume", text(&p.check_volume)),
            ("check_empty", text(&p.check_empty)),
            ("check_fraction", fraction(&p.check_fraction)),
        ];
        for (key, value) in texts {
            if let Some((value, span)) = value {
                settings
                    .set_text(key, &value)
                    .map_err(|m| self.error(at(span), Some(key), m))?;
            }
        }
        Ok(settings)
    }

    /// The store's URL with the password of `password_env`'s variable, if
    /// any. A URL that holds a password itself is refused: a file that
    /// is shared or committed must not carry one.
    fn store_url(
        &self,
        url: &Spanned<String>,
        password_env: Option<&Spanned<String>>,
        env: Option<Env<'_>>,
    ) -> Result<String, ConfigError> {
        let line = Some(self.line(url.span().start));
        if url_has_password(url.get_ref()) {
            return Err(self.error(
                line,
                Some("store"),
                "holds a password: set password_env to the environment variable that holds it"
                    .to_owned(),
            ));
        }
        let Some(var) = password_env else {
            return Ok(url.get_ref().clone());
        };
        let var_line = Some(self.line(var.span().start));
        // Checked with a stand-in when the variable is not read.
        let password = match env {
            None => None,
            Some(env) => Some(env(var.get_ref()).ok_or_else(|| {
                self.error(
                    var_line,
                    Some("password_env"),
                    format!("the environment variable {} is not set", var.get_ref()),
                )
            })?),
        };
        let with = with_password(url.get_ref(), password.as_deref().unwrap_or("-"))
            .map_err(|m| self.error(var_line, Some("password_env"), m))?;
        Ok(match password {
            Some(_) => with,
            None => url.get_ref().clone(),
        })
    }

    fn line(&self, offset: usize) -> usize {
        self.lines.partition_point(|start| *start <= offset)
    }

    fn error(&self, line: Option<usize>, key: Option<&str>, message: String) -> ConfigError {
        ConfigError {
            path: self.path.clone(),
            line,
            key: key.map(str::to_owned),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Mode;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const FILE: &str = r#"profile = "dev"

[profiles.dev]
store = "sqlite://dev.db"
retries = 5
retry_delay = "10s"
stream_memory = "16MiB"
max_delete_fraction = "25%"

[profiles.prod]
store = "postgres://etl@db.internal:5432/warehouse?sslmode=require"
password_env = "WAREHOUSE_PASSWORD"
mode = "replace"
columns = ["amount:numeric"]
"#;

    #[test]
    fn a_profile_is_its_settings() {
        let p = Profiles::parse("backfill.toml", FILE).unwrap();
        assert_eq!(p.names().collect::<Vec<_>>(), ["dev", "prod"]);
        let dev = p.settings(None, &no_env).unwrap();
        assert_eq!(dev.store.as_deref(), Some("sqlite://dev.db"));
        assert_eq!(dev.retries, Some(5));
        assert_eq!(dev.retry_delay, Some(Duration::from_secs(10)));
        assert_eq!(dev.stream_memory, Some(16 << 20));
        assert_eq!(dev.max_delete_fraction, Some(0.25));
        assert_eq!(dev.mode, None);
        let env = |v: &str| (v == "WAREHOUSE_PASSWORD").then(|| "p@ss word".to_owned());
        let prod = p.settings(Some("prod"), &env).unwrap();
        assert_eq!(
            prod.store.as_deref(),
            Some("postgres://etl:p%40ss%20word@db.internal:5432/warehouse?sslmode=require")
        );
        assert_eq!(prod.mode, Some(Mode::Replace));
    }

    /// Every setting a profile can hold: the defaults, each written as a
    /// file writes it, read back as they are.
    #[test]
    fn every_setting_reads_back_from_a_profile() {
        let defaults = Settings::defaults();
        let mut text = String::from("[profiles.all]\n");
        for key in crate::settings::KEYS {
            let Some(value) = defaults.text(key.name) else {
                continue;
            };
            let bare = value == "true"
                || value == "false"
                || value.starts_with('[')
                || value.parse::<f64>().is_ok();
            match bare {
                true => text.push_str(&format!("{} = {value}\n", key.name)),
                false => text.push_str(&format!("{} = {value:?}\n", key.name)),
            }
        }
        let p = Profiles::parse("b.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let read = p.settings(Some("all"), &no_env).unwrap();
        assert_eq!(read, defaults.over(&Settings::default()), "{text}");
        let checks = "[profiles.a]\ncheck_volume = \"fail\"\ncheck_fraction = \"10%\"\n";
        let a = Profiles::parse("b.toml", checks).unwrap();
        let a = a.settings(Some("a"), &no_env).unwrap();
        assert_eq!(a.check_volume, Some(crate::CheckAction::Fail));
        assert_eq!(a.check_fraction, Some(0.1));
        let error = Profiles::parse("b.toml", "[profiles.a]\ncheck_empty = \"loud\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("b.toml:2: check_empty: "), "{error}");
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_key() {
        let error = |text: &str| Profiles::parse("b.toml", text).unwrap_err().to_string();
        assert_eq!(
            error("[profiles.a]\nstore = \"sqlite://x\"\nretry_dealy = \"1s\"\n")
                .split_once(" unknown field")
                .map(|(at, _)| at),
            Some("b.toml:3:")
        );
        assert!(error("[profiles.a]\n\nretry_delay = \"ten\"\n")
            .starts_with("b.toml:3: retry_delay: `ten` is not a duration"));
        assert!(error("[profiles.a]\nretries = \"two\"\n").starts_with("b.toml:2: "));
        assert!(error("[profiles.a]\nmode = \"upsert\"\n").starts_with("b.toml:2: mode: "));
        assert!(
            error("[profiles.a]\nstore = \"postgres://u:secret@h/db\"\n")
                .starts_with("b.toml:2: store: holds a password")
        );
        let p = Profiles::parse("b.toml", FILE).unwrap();
        assert_eq!(
            p.settings(Some("prod"), &no_env).unwrap_err().to_string(),
            "b.toml:12: password_env: the environment variable WAREHOUSE_PASSWORD is not set"
        );
        assert_eq!(
            p.settings(Some("staging"), &no_env)
                .unwrap_err()
                .to_string(),
            "b.toml: no profile \"staging\" (the file has dev, prod)"
        );
    }
}
