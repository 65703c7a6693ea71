//! The process groups of the commands running: each command's group is
//! killed when it is done with, and all of them on demand.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::watchdog;

/// The process groups of commands still running, by group id (the
/// command's pid).
///
/// A group id is only killed while it is in this set, and it leaves the
/// set once the command is reaped and what it left is killed: after that
/// the id may be reused by an unrelated process. The lock is held while
/// killing, so [`kill_running_commands`] never races a removal.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

pub(super) fn live_groups() -> MutexGuard<'static, BTreeSet<i32>> {
    // A panic while holding the lock leaves a set that is still right.
    LIVE_GROUPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Kills (`SIGKILL`) the process group of every command a
/// [`CommandFetch`](super::CommandFetch) is running, in every task. For a
/// program about to exit on a second Ctrl-C: dropping a fetch kills its
/// group too, but exiting drops nothing.
pub fn kill_running_commands() {
    let live = live_groups();
    for &pgid in live.iter() {
        // ESRCH (all gone already) is fine.
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// How many commands [`CommandFetch`](super::CommandFetch) is running now, in every task.
pub fn running_commands() -> usize {
    live_groups().len()
}

/// A command's process group, killed when dropped unless the command was
/// already reaped and its group killed.
#[derive(Debug)]
pub(super) struct ProcessGroup {
    pgid: i32,
}

impl ProcessGroup {
    /// Registers the group of the command `pid` (its leader), and has the
    /// [watchdog](super::watchdog) kill it should this process die first.
    pub(super) fn register(pid: u32) -> Self {
        // A pid always fits in an i32 (`pid_t`).
        let pgid = i32::try_from(pid).unwrap_or(i32::MAX);
        let mut live = live_groups();
        live.insert(pgid);
        watchdog::watch(pgid, &live);
        Self { pgid }
    }

    /// Kills the group if it is still registered, and, if `forget`, takes
    /// it out of the registry for good.
    fn kill(&self, forget: bool) {
        let mut live = live_groups();
        if live.contains(&self.pgid) {
            // ESRCH (nothing left in the group) is fine.
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
            if forget {
                live.remove(&self.pgid);
                watchdog::unwatch(self.pgid);
            }
        }
    }

    /// After the command (the group's leader) exited and was reaped: kills
    /// what is left in the group, once. The id is then forgotten, since
    /// once the group is empty it may be reused.
    pub(super) fn kill_after_exit(&self) {
        self.kill(true);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    use backfill_core::Fetch;
    use futures_util::StreamExt;

    use crate::fetch::testing::{day, line, print, read_pid, wait_until_gone, COMMANDS};
    use crate::fetch::CommandFetch;

    #[tokio::test]
    async fn dropping_the_stream_midway_kills_the_command_and_its_children() {
        let _shared = COMMANDS.read().await;
        let dir = tempfile::tempdir().unwrap();
        let (child_file, shell_file) = (dir.path().join("child"), dir.path().join("shell"));
        let script = format!(
            "sleep 100 & echo $! > '{}'; echo $$ > '{}'; yes '{}' | head -n 30000; sleep 100",
            child_file.display(),
            shell_file.display(),
            line("k", "{day}"),
        );
        let mut stream = CommandFetch::new(script).stream(day()).await.unwrap();
        let (child, shell) = (read_pid(&child_file).await, read_pid(&shell_file).await);
        assert!(stream.next().await.unwrap().is_ok());
        assert!(live_groups().contains(&shell));
        drop(stream);
        assert!(!live_groups().contains(&shell), "killed and forgotten");
        assert!(
            wait_until_gone(shell).await,
            "the command {shell} was killed"
        );
        assert!(
            wait_until_gone(child).await,
            "its background child {child} was killed"
        );

        // As a Fetched, the same.
        let script = format!(
            "echo $$ > '{}'; {}; sleep 100",
            shell_file.display(),
            print(&line("k", "{day}"))
        );
        std::fs::remove_file(&shell_file).unwrap();
        let fetched = CommandFetch::new(script).fetch(day()).await.unwrap();
        let shell = read_pid(&shell_file).await;
        drop(fetched);
        assert!(wait_until_gone(shell).await, "the command was killed");
    }

    #[tokio::test]
    async fn dropping_the_fetch_kills_the_command_and_its_children() {
        let _shared = COMMANDS.read().await;
        let dir = tempfile::tempdir().unwrap();
        let (child_file, shell_file) = (dir.path().join("child"), dir.path().join("shell"));
        let script = format!(
            "sleep 100 & echo $! > '{}'; echo $$ > '{}'; sleep 100",
            child_file.display(),
            shell_file.display(),
        );
        let fetch = CommandFetch::new(script);
        let started = Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(1), fetch.records(day())).await;
        assert!(outcome.is_err(), "timed out");
        assert!(started.elapsed() < Duration::from_secs(5));
        let (child, shell) = (read_pid(&child_file).await, read_pid(&shell_file).await);
        assert!(
            wait_until_gone(shell).await,
            "the command {shell} was killed"
        );
        assert!(
            wait_until_gone(child).await,
            "its background child {child} was killed"
        );
    }

    #[tokio::test]
    async fn a_finished_command_leaves_nothing_running() {
        let _shared = COMMANDS.read().await;
        let dir = tempfile::tempdir().unwrap();
        let child_file = dir.path().join("child");
        // The background child holds stdout open: the fetch must not wait
        // for it to end on its own.
        let script = format!(
            "sleep 100 & echo $! > '{}'; {}",
            child_file.display(),
            print(&line("k", "{day}"))
        );
        let started = Instant::now();
        let fetched = CommandFetch::new(script).records(day()).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(fetched.records.len(), 1);
        let child = read_pid(&child_file).await;
        assert!(
            wait_until_gone(child).await,
            "the background child was killed"
        );
    }

    #[tokio::test]
    async fn kill_running_commands_kills_every_group() {
        let _alone = COMMANDS.write().await;
        let dir = tempfile::tempdir().unwrap();
        let shell_file = dir.path().join("shell");
        let fetch = CommandFetch::new(format!("echo $$ > '{}'; sleep 100", shell_file.display()));
        let running = tokio::spawn(async move { fetch.records(day()).await });
        let shell = read_pid(&shell_file).await;
        assert!(live_groups().contains(&shell), "registered while it runs");
        assert!(running_commands() >= 1);
        kill_running_commands();
        let error = tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("ended when killed")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "fetch command was killed by signal 9 (SIGKILL)"
        );
        assert!(!live_groups().contains(&shell), "forgotten once reaped");
    }
}
