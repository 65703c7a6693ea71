//! A command's settings, in three layers: its flags and `BACKFILL_*`
//! variables, over a profile of the configuration file, over the library's
//! defaults ([`backfill_core::settings`]); and `backfill config`, which
//! shows the effective settings with where each comes from.

use std::path::{Path, PathBuf};

use backfill_core::columns::Column;
use backfill_core::settings::{
    url_without_password, with_password, Key, Profiles, Settings, CONFIG_FILE, KEYS,
};
use clap::parser::ValueSource;
use clap::ArgMatches;

use crate::args::{ConfigArgs, GlobalArgs, RunArgs, StoreArgs};
use crate::failure::{Failure, EXIT_OK};

/// Where an effective setting comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// The library's default.
    Default,
    /// A profile of a configuration file.
    File { path: PathBuf, profile: String },
    /// An environment variable.
    Env(&'static str),
    /// A flag.
    Flag(&'static str),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File { path, profile } => write!(f, "{} [{profile}]", path.display()),
            Source::Env(var) => f.write_str(var),
            Source::Flag(flag) => f.write_str(flag),
        }
    }
}

/// The effective settings of a command, and each one's source.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) settings: Settings,
    pub(crate) sources: Vec<(&'static Key, Source)>,
}

/// The clap argument of setting `key` (its flag's name, `tz` for
/// `time_zone`).
fn arg_id(key: &Key) -> &'static str {
    match key.name {
        "time_zone" => "tz",
        name => name,
    }
}

/// Resolves the settings of a command from its parsed flags (`matches`,
/// the subcommand's) and the configuration file `global` names, or
/// `backfill.toml` in the working directory if there is one.
pub(crate) fn resolve(global: &GlobalArgs, matches: &ArgMatches) -> Result<Resolved, Failure> {
    let (file, file_source) = match file_layer(global)? {
        Some((path, profile, layer)) => (layer, Some(Source::File { path, profile })),
        None => (Settings::default(), None),
    };
    let mut flags = Settings::default();
    let mut flag_sources = Vec::new();
    for key in KEYS {
        let id = arg_id(key);
        let Ok(Some(raw)) = matches.try_get_raw(id) else {
            continue;
        };
        let source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => Source::Flag(key.flag),
            Some(ValueSource::EnvVariable) => Source::Env(key.env.unwrap_or("environment")),
            _ => continue,
        };
        for value in raw {
            let text = value.to_string_lossy();
            flags
                .set_text(key.name, &text)
                .map_err(|e| Failure::Config(format!("{source}: {e}")))?;
        }
        flag_sources.push((key.name, source));
    }
    // A password named on the command line is read now; the file's was
    // read with its profile.
    if let (Some(var), Some(url)) = (
        &flags.password_env,
        flags.store.clone().or(file.store.clone()),
    ) {
        let password = std::env::var(var).map_err(|_| {
            Failure::Config(format!(
                "--password-env: the environment variable {var} is not set"
            ))
        })?;
        flags.store = Some(
            with_password(&url, &password)
                .map_err(|e| Failure::Config(format!("--password-env: {e}")))?,
        );
    }
    let settings = flags.over(&file).over(&Settings::defaults());
    let sources = KEYS
        .iter()
        .map(|key| {
            let source = match flag_sources.iter().find(|(name, _)| *name == key.name) {
                Some((_, source)) => source.clone(),
                None => match (&file_source, file.text(key.name)) {
                    (Some(source), Some(_)) => source.clone(),
                    _ => Source::Default,
                },
            };
            (key, source)
        })
        .collect();
    Ok(Resolved { settings, sources })
}

/// The chosen profile of the configuration file, if there is a file.
fn file_layer(global: &GlobalArgs) -> Result<Option<(PathBuf, String, Settings)>, Failure> {
    let path = match &global.config {
        Some(path) => path.clone(),
        None if Path::new(CONFIG_FILE).is_file() => PathBuf::from(CONFIG_FILE),
        None => {
            if let Some(profile) = &global.profile {
                return Err(Failure::Config(format!(
                    "--profile {profile}: no configuration file (--config FILE, or {CONFIG_FILE} here)"
                )));
            }
            return Ok(None);
        }
    };
    let profiles = Profiles::read(&path).map_err(|e| Failure::Config(e.to_string()))?;
    let chosen = profiles.chosen(global.profile.as_deref()).to_owned();
    let layer = profiles
        .settings(global.profile.as_deref(), &|var| std::env::var(var).ok())
        .map_err(|e| Failure::Config(e.to_string()))?;
    Ok(Some((path, chosen, layer)))
}

/// Writes the effective settings into the parsed arguments a command runs
/// with: the store's, the fetch's, and the job's (`run.settings`).
pub(crate) fn apply(resolved: &Resolved, run: &mut RunArgs) -> Result<(), Failure> {
    apply_store(resolved, &mut run.store)?;
    let s = &resolved.settings;
    run.fetch.fetch_cmd = s.fetch_cmd.clone();
    run.fetch.fetch_files = s.fetch_files.clone();
    if run.fetch.fetch_cmd.is_some() && run.fetch.fetch_files.is_some() {
        return Err(Failure::Config(
            "both a fetch command and fetch files: give one of fetch_cmd and fetch_files".into(),
        ));
    }
    run.settings = s.clone();
    Ok(())
}

/// Writes the effective store settings into `store`.
pub(crate) fn apply_store(resolved: &Resolved, store: &mut StoreArgs) -> Result<(), Failure> {
    let s = &resolved.settings;
    store.store = s.store.clone().unwrap_or_default();
    store.schema = s.schema.clone().unwrap_or_default();
    store.table = s.table.clone().unwrap_or_default();
    store.allow_column_changes = s.allow_column_changes.unwrap_or(false);
    store.history = s.history.unwrap_or(false);
    store.columns = s
        .columns
        .iter()
        .flatten()
        .map(|d| Column::parse(d).map_err(|e| Failure::Config(format!("column {d:?}: {e}"))))
        .collect::<Result<_, _>>()?;
    Ok(())
}

/// `backfill config`: every setting, its effective value (passwords
/// hidden) and its source.
pub(crate) fn show(args: &ConfigArgs, resolved: &Resolved) -> Result<u8, Failure> {
    let value = |key: &Key| -> Option<String> {
        let text = resolved.settings.text(key.name)?;
        Some(match key.name {
            "store" => url_without_password(&text),
            _ => text,
        })
    };
    if args.run.json {
        let settings: serde_json::Map<String, serde_json::Value> = resolved
            .sources
            .iter()
            .map(|(key, source)| {
                (
                    key.name.to_owned(),
                    serde_json::json!({
                        "value": value(key),
                        "source": source.to_string(),
                    }),
                )
            })
            .collect();
        return Ok(print(format!("{}\n", serde_json::Value::Object(settings))));
    }
    let width = KEYS.iter().map(|k| k.name.len()).max().unwrap_or(0);
    let values: Vec<String> = resolved
        .sources
        .iter()
        .map(|(key, _)| value(key).unwrap_or_else(|| "-".into()))
        .collect();
    let value_width = values
        .iter()
        .map(|v| v.chars().count())
        .max()
        .unwrap_or(0)
        .min(48);
    let mut text = format!("{:width$}  {:value_width$}  source\n", "setting", "value");
    for ((key, source), value) in resolved.sources.iter().zip(values) {
        text += &format!("{:width$}  {value:value_width$}  {source}\n", key.name);
    }
    Ok(print(text))
}

/// Writes `text` to stdout; a reader that went away (`| head`) is no
/// failure.
fn print(text: String) -> u8 {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    EXIT_OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// README's settings table is the library's: each setting's row names
    /// its flag, variable, Python argument and default as `KEYS` and
    /// `Settings::defaults` do, and every flag and variable is the
    /// command line's.
    #[test]
    fn the_readme_settings_table_is_the_librarys() {
        let readme = include_str!("../../../docs/guide/cli.md");
        let command = crate::args::Cli::command();
        let backfill = command.find_subcommand("backfill").unwrap();
        let defaults = Settings::defaults();
        let quoted = |x: Option<String>| x.map_or("—".to_owned(), |x| format!("`{x}`"));
        for key in KEYS {
            let row = readme
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", key.name)))
                .unwrap_or_else(|| panic!("README has no row for {}", key.name));
            let cells: Vec<&str> = row.split(" | ").map(str::trim).collect();
            assert_eq!(cells[1], format!("`{}`", key.flag), "{row}");
            assert_eq!(cells[2], quoted(key.env.map(str::to_owned)), "{row}");
            assert_eq!(
                cells[3].split(' ').next().unwrap(),
                quoted(key.python.map(str::to_owned)),
                "{row}"
            );
            assert_eq!(cells[4], quoted(defaults.text(key.name)), "{row}");
            // The flag and the variable are the command line's own.
            let arg = backfill
                .get_arguments()
                .find(|a| a.get_id() == arg_id(key))
                .unwrap_or_else(|| panic!("`backfill backfill` has no argument for {}", key.name));
            assert_eq!(format!("--{}", arg.get_long().unwrap()), key.flag);
            assert_eq!(
                arg.get_env().map(|e| e.to_string_lossy().into_owned()),
                key.env.map(str::to_owned),
                "{}",
                key.name
            );
        }
    }
}
