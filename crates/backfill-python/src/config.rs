//! A profile of the command line's configuration file, for
//! `Job.from_config` and `store_from_config`.

use backfill_core::settings::{Profiles, Settings, CONFIG_FILE};
use pyo3::exceptions::PyValueError;
use pyo3::PyResult;

/// The settings of profile `profile` of the configuration file at `path`
/// (`backfill.toml` by default), its password variable read.
pub(crate) fn profile_settings(
    path: Option<std::path::PathBuf>,
    profile: Option<&str>,
) -> PyResult<Settings> {
    let path = path.unwrap_or_else(|| CONFIG_FILE.into());
    let profiles = Profiles::read(&path).map_err(|e| PyValueError::new_err(e.to_string()))?;
    profiles
        .settings(profile, &|var| std::env::var(var).ok())
        .map_err(|e| PyValueError::new_err(e.to_string()))
}
