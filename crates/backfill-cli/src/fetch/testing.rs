//! Commands, lines and process checks the fetchers' tests share.

use std::path::Path;
use std::time::Duration;

use chrono::NaiveDate;
use nix::errno::Errno;
use nix::unistd::Pid;

/// Command tests take this shared; the one that kills every running
/// command takes it alone, so it kills no other test's command.
pub(super) static COMMANDS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The day the tests fetch.
pub(super) fn day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 1, 3).unwrap()
}

/// A record line of `key` on `day` (either may hold `{day}`).
pub(super) fn line(key: &str, day: &str) -> String {
    format!(
        r#"{{"key":"{key}","event_date":"{day}","value":{{"b":1,"a":2}},"updated_at":"{day}T09:30:00Z"}}"#
    )
}

/// A shell word printing `text` with `printf '%s\n'`.
pub(super) fn print(text: &str) -> String {
    format!("printf '%s\\n' '{}'", text.replace('\'', r"'\''"))
}

/// Whether process `pid` is gone: no such process, or a zombie (dead,
/// waiting to be reaped by whoever adopted it).
pub(super) fn is_gone(pid: i32) -> bool {
    match nix::sys::signal::kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => true,
        _ => std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
                after.trim_start().starts_with('Z')
            })
            .unwrap_or(true),
    }
}

/// Whether process `pid` is gone within five seconds.
pub(super) async fn wait_until_gone(pid: i32) -> bool {
    for _ in 0..100 {
        if is_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The pid a command wrote into `path`, once it is there.
pub(super) async fn read_pid(path: &Path) -> i32 {
    for _ in 0..100 {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no pid in {}", path.display());
}
