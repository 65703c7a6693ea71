//! A watchdog that kills the commands' process groups should this process
//! die without doing it: killed outright (`SIGKILL`, the OOM killer), or
//! aborted.
//!
//! Dying, a process kills nothing of its own accord, and the groups of the
//! commands it ran would go on attached to init. So with the first command
//! a small `sh` is started, in a process group of its own (a Ctrl-C at the
//! terminal does not reach it), reading a pipe that only this process
//! writes: `+ PGID` when a command's group starts, `- PGID` when it is
//! gone. However this process ends, the kernel closes its end of the pipe;
//! the watchdog then reads the end of it, kills (`SIGKILL`) every group
//! still listed, and exits. On a normal exit the list is empty by then.
//!
//! This works alike on every Unix, and covers each command's whole group,
//! not only its leader — what Linux's parent-death signal
//! (`PR_SET_PDEATHSIG`) on the leader would not do (nor would it survive
//! the exit of the thread that started the command). A group started in
//! the instant between a command's start and its line reaching the
//! watchdog, or left while the watchdog itself was killed, is not covered.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, PoisonError};

/// The watchdog's program. Each line names a group to kill at the end of
/// the input (`+`) or not to any more (`-`); anything but a process group
/// id above 1 is ignored (`kill -9 -1` would kill every process).
const SCRIPT: &str = r#"
trap '' INT HUP
groups=' '
while read -r op pgid; do
  case $pgid in ''|*[!0-9]*) continue ;; esac
  [ "$pgid" -gt 1 ] || continue
  case $op in
    +) groups="$groups$pgid " ;;
    -) case $groups in *" $pgid "*) groups="${groups%% $pgid *} ${groups#* $pgid }" ;; esac ;;
  esac
done
for pgid in $groups; do kill -9 -"$pgid" 2>/dev/null; done
"#;

/// This process's watchdog, once a command was started.
static WATCHDOG: Mutex<Option<Watchdog>> = Mutex::new(None);

/// A running watchdog and the pipe it reads.
#[derive(Debug)]
pub(super) struct Watchdog {
    child: Child,
    stdin: ChildStdin,
}

impl Watchdog {
    /// Starts a watchdog with nothing to kill.
    pub(super) fn start() -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg("backfill-watchdog")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let Some(stdin) = child.stdin.take() else {
            unreachable!("stdin is piped")
        };
        Ok(Self { child, stdin })
    }

    /// Adds (`+`) or removes (`-`) a group to kill.
    pub(super) fn send(&mut self, op: char, pgid: i32) -> std::io::Result<()> {
        // One write per line, so no line is ever half sent.
        self.stdin.write_all(format!("{op} {pgid}\n").as_bytes())
    }
}

fn watchdog() -> std::sync::MutexGuard<'static, Option<Watchdog>> {
    // A panic while holding the lock leaves a watchdog that is still right.
    WATCHDOG.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Has the watchdog kill `pgid` should this process die. `live` is every
/// group running, `pgid` among them: a watchdog (re)started now is told
/// all of them. Without a watchdog (no `sh` to start), commands run
/// unwatched.
pub(super) fn watch(pgid: i32, live: &BTreeSet<i32>) {
    let mut slot = watchdog();
    if let Some(running) = slot.as_mut() {
        if running.send('+', pgid).is_ok() {
            return;
        }
        // It is gone (killed): reap it, and start another.
        if let Some(mut gone) = slot.take() {
            let _ = gone.child.try_wait();
        }
    }
    let Ok(mut fresh) = Watchdog::start() else {
        return;
    };
    if live.iter().all(|&pgid| fresh.send('+', pgid).is_ok()) {
        *slot = Some(fresh);
    }
}

/// Tells the watchdog `pgid` is gone: its id may be reused from now on.
pub(super) fn unwatch(pgid: i32) {
    if let Some(running) = watchdog().as_mut() {
        // A watchdog that is gone is replaced at the next `watch`.
        let _ = running.send('-', pgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    /// A `sleep` in a process group of its own.
    fn sleeper() -> Child {
        Command::new("sleep")
            .arg("100")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    /// Whether `child` ended (and is reaped) within five seconds.
    fn ends(child: &mut Child) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn pgid(child: &Child) -> i32 {
        i32::try_from(child.id()).unwrap()
    }

    #[test]
    fn the_groups_listed_when_the_pipe_closes_are_killed() {
        let (mut listed, mut removed) = (sleeper(), sleeper());
        let mut watchdog = Watchdog::start().unwrap();
        watchdog.send('+', pgid(&listed)).unwrap();
        watchdog.send('+', pgid(&removed)).unwrap();
        watchdog.send('-', pgid(&removed)).unwrap();
        // Nonsense is ignored, and never reaches `kill`.
        for (op, pgid) in [('+', 1), ('+', 0), ('+', -5), ('?', pgid(&removed))] {
            watchdog.send(op, pgid).unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(listed.try_wait().unwrap().is_none(), "not before the end");
        // As if this process died: its end of the pipe closes.
        let Watchdog { mut child, stdin } = watchdog;
        drop(stdin);
        assert!(ends(&mut listed), "a listed group is killed");
        assert!(ends(&mut child), "the watchdog exits");
        assert!(
            removed.try_wait().unwrap().is_none(),
            "a group taken off the list is left alone"
        );
        removed.kill().unwrap();
        removed.wait().unwrap();
    }
}
