//! Fetching a day by running a command or reading a file.
//!
//! Both read the [JSON Lines format](crate::jsonl): [`CommandFetch`] from
//! a shell command's standard output, [`FileFetch`] from a file per day. `{day}` in the template stands for the day, `YYYY-MM-DD`.
//!
//! A command's exit status says how a failed day is treated: 0 is success,
//! 75 (`EX_TEMPFAIL` from `sysexits.h`) a transient failure the job
//! retries, anything else (or death by a signal) a permanent one.

use std::collections::BTreeSet;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use backfill_core::{BoxError, Fetch, Fetched, Transient};
use chrono::NaiveDate;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};

use crate::jsonl::{read_day, ReadError, DEFAULT_MAX_LINE_BYTES};

/// The exit status that marks a command's failure as transient:
/// `EX_TEMPFAIL` from `sysexits.h`.
pub const EXIT_TEMPFAIL: i32 = 75;

/// How much of a command's standard error is kept for its error message:
/// the last 4 KiB.
const STDERR_TAIL_BYTES: usize = 4096;

/// The read buffer for a command's output or a file: large, so a typical
/// line is parsed in place rather than gathered from several reads.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// How long, after a command exited and its output ended, its standard
/// error may stay open before the message is made from what arrived. Only a
/// process that left the command's process group can hold it that long.
const STDERR_GRACE: Duration = Duration::from_secs(1);

/// Why a command or file fetch failed. Its text goes into the store's
/// ledger for the day, so it is one specific paragraph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The command could not be started.
    #[error("cannot start the fetch command (sh -c {}): {error}", Shown(.command))]
    Spawn {
        /// The command line, `{day}` substituted.
        command: String,
        /// Why.
        error: std::io::Error,
    },

    /// Waiting for the command failed.
    #[error("cannot wait for the fetch command: {0}")]
    Wait(std::io::Error),

    /// The command exited with a status other than 0. With status
    /// [`EXIT_TEMPFAIL`] the failure is transient and retried.
    #[error("fetch command exited with status {code}{}", Tail(.stderr))]
    Exit {
        /// The exit status.
        code: i32,
        /// The end of its standard error, trimmed, lines joined by ` | `.
        stderr: String,
    },

    /// The command was killed by a signal.
    #[error("fetch command was killed by signal {signal}{}{}", SignalName(*.signal), Tail(.stderr))]
    Signal {
        /// The signal's number.
        signal: i32,
        /// The end of its standard error, trimmed, lines joined by ` | `.
        stderr: String,
    },

    /// The command printed a malformed line (it was killed at once) or its
    /// output could not be read.
    #[error("fetch command output, {0}")]
    Output(ReadError),

    /// The day's file does not exist.
    #[error("no file {} for {day}", .path.display())]
    NoFile {
        /// The path looked for.
        path: PathBuf,
        /// The day.
        day: NaiveDate,
    },

    /// The day's file could not be opened.
    #[error("cannot open {}: {error}", .path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },

    /// The day's file holds a malformed line or could not be read.
    #[error("file {}, {problem}", .path.display())]
    File {
        /// The path.
        path: PathBuf,
        /// The line and what is wrong with it.
        problem: ReadError,
    },
}

impl FetchError {
    /// Whether the job should retry the day: a command that exited with
    /// [`EXIT_TEMPFAIL`].
    pub fn is_transient(&self) -> bool {
        matches!(self, FetchError::Exit { code, .. } if *code == EXIT_TEMPFAIL)
    }

    /// Boxes the error for [`Fetch`], wrapped in [`Transient`] when
    /// [`FetchError::is_transient`], so the job's retry policy applies.
    pub fn into_boxed(self) -> BoxError {
        if self.is_transient() {
            Box::new(Transient::new(self))
        } else {
            Box::new(self)
        }
    }
}

/// Fetches a day by running a shell command and reading its standard
/// output in the [JSON Lines format](crate::jsonl).
///
/// For day `D` the template runs as `sh -c TEMPLATE` with every `{day}`
/// replaced by `D` (`YYYY-MM-DD`) and `BACKFILL_DAY=D` in its environment,
/// standard input from `/dev/null`, in a process group of its own. Its
/// output is parsed as it streams: a malformed line fails the day at once.
///
/// The whole process group is killed (`SIGKILL`) when the command is
/// done with — after it exited (so background children it left behind do
/// not outlive it), on a malformed line, and when the fetch is dropped
/// unfinished (the job's per-day timeout, a second Ctrl-C).
/// [`kill_running_commands`] kills every group still running.
///
/// Exit status 0 is success; [`EXIT_TEMPFAIL`] (75) a transient failure
/// the job retries; any other status, or death by a signal, a permanent
/// failure whose message ends with the last of the command's standard
/// error.
///
/// ```no_run
/// use backfill_cli::fetch::CommandFetch;
///
/// let fetch = CommandFetch::new("curl -fsS https://example.com/export?day={day}");
/// # let _ = fetch;
/// ```
#[derive(Debug, Clone)]
pub struct CommandFetch {
    template: String,
    max_line_bytes: usize,
}

impl CommandFetch {
    /// A fetch running `template` (a `sh -c` command line) for each day.
    pub fn new(template: impl Into<String>) -> Self {
        Self {
            template: template.into(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }

    /// The longest output line accepted, in bytes (default
    /// [`DEFAULT_MAX_LINE_BYTES`]).
    pub fn max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max;
        self
    }

    /// The template, as given.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The command line run for `day`.
    pub fn command_for(&self, day: NaiveDate) -> String {
        substitute(&self.template, day)
    }

    /// Runs the command for `day` and reads its output.
    ///
    /// # Errors
    ///
    /// [`FetchError`]: the command could not start, printed a malformed
    /// line, exited with a status other than 0, or was killed by a signal.
    pub async fn run(&self, day: NaiveDate) -> Result<Fetched, FetchError> {
        let command = self.command_for(day);
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("BACKFILL_DAY", day.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|error| FetchError::Spawn {
                command: command.clone(),
                error,
            })?;
        // Before anything can fail: from here on, returning or being
        // dropped kills the group.
        let group = child.id().map(ProcessGroup::register);
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            unreachable!("stdout and stderr are piped")
        };

        let mut tail = Vec::new();
        let mut drain = Box::pin(keep_tail(stderr, &mut tail));
        let read = read_day(
            BufReader::with_capacity(READ_BUFFER_BYTES, stdout),
            self.max_line_bytes,
        );
        tokio::pin!(read);
        let mut fetched = None;
        let mut status: Option<ExitStatus> = None;
        let mut stderr_done = false;
        // Output, exit and standard error are followed together: a command
        // blocked writing a full stderr pipe would never exit otherwise.
        while fetched.is_none() || status.is_none() || !stderr_done {
            tokio::select! {
                parsed = &mut read, if fetched.is_none() => match parsed {
                    Ok(day) => fetched = Some(day),
                    // The group is killed as `group` drops.
                    Err(problem) => return Err(FetchError::Output(problem)),
                },
                exited = child.wait(), if status.is_none() => {
                    status = Some(exited.map_err(FetchError::Wait)?);
                    // The command is done: whatever it left running in its
                    // group goes, and the output ends once the pipe drains
                    // even if a background child held it open.
                    if let Some(group) = &group {
                        group.kill_after_exit();
                    }
                }
                () = &mut drain, if !stderr_done => stderr_done = true,
                () = tokio::time::sleep(STDERR_GRACE), if fetched.is_some() && status.is_some() => {
                    break;
                }
            }
        }
        drop(drain);
        let (Some(fetched), Some(status)) = (fetched, status) else {
            unreachable!("the loop ends with both")
        };
        if status.success() {
            return Ok(fetched);
        }
        let stderr = tail_text(&tail);
        Err(match (status.code(), status.signal()) {
            (Some(code), _) => FetchError::Exit { code, stderr },
            (None, Some(signal)) => FetchError::Signal { signal, stderr },
            // Neither an exit code nor a signal does not happen on Unix.
            (None, None) => FetchError::Exit { code: -1, stderr },
        })
    }
}

#[async_trait]
impl Fetch for CommandFetch {
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError> {
        self.run(day).await.map_err(FetchError::into_boxed)
    }
}

/// Fetches a day by reading a file in the [JSON Lines format](crate::jsonl),
/// at a path template where `{day}` stands for the day (`YYYY-MM-DD`),
/// e.g. `exports/{day}.jsonl`. A missing file fails the day.
#[derive(Debug, Clone)]
pub struct FileFetch {
    template: String,
    max_line_bytes: usize,
}

impl FileFetch {
    /// A fetch reading the file at `template` for each day.
    pub fn new(template: impl Into<String>) -> Self {
        Self {
            template: template.into(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }

    /// The longest line accepted, in bytes (default
    /// [`DEFAULT_MAX_LINE_BYTES`]).
    pub fn max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max;
        self
    }

    /// The template, as given.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The path read for `day`.
    pub fn path_for(&self, day: NaiveDate) -> PathBuf {
        PathBuf::from(substitute(&self.template, day))
    }

    /// Reads the file of `day`.
    ///
    /// # Errors
    ///
    /// [`FetchError`]: no such file, it cannot be opened or read, or it
    /// holds a malformed line.
    pub async fn run(&self, day: NaiveDate) -> Result<Fetched, FetchError> {
        let path = self.path_for(day);
        let file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(FetchError::NoFile { path, day });
            }
            Err(error) => return Err(FetchError::Open { path, error }),
        };
        let reader = BufReader::with_capacity(READ_BUFFER_BYTES, file);
        read_day(reader, self.max_line_bytes)
            .await
            .map_err(|problem| FetchError::File { path, problem })
    }
}

#[async_trait]
impl Fetch for FileFetch {
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError> {
        self.run(day).await.map_err(FetchError::into_boxed)
    }
}

fn substitute(template: &str, day: NaiveDate) -> String {
    template.replace("{day}", &day.format("%Y-%m-%d").to_string())
}

/// The process groups of commands still running, by group id (the
/// command's pid).
///
/// A group id is only killed while it is in this set, and it leaves the
/// set once the command is reaped and what it left is killed: after that
/// the id may be reused by an unrelated process. The lock is held while
/// killing, so [`kill_running_commands`] never races a removal.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn live_groups() -> MutexGuard<'static, BTreeSet<i32>> {
    // A panic while holding the lock leaves a set that is still right.
    LIVE_GROUPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Kills (`SIGKILL`) the process group of every command a [`CommandFetch`]
/// is running, in every task. For a program about to exit on a second
/// Ctrl-C: dropping a fetch kills its group too, but exiting drops nothing.
pub fn kill_running_commands() {
    let live = live_groups();
    for &pgid in live.iter() {
        // ESRCH (all gone already) is fine.
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// How many commands [`CommandFetch`] is running now, in every task.
pub fn running_commands() -> usize {
    live_groups().len()
}

/// A command's process group, killed when dropped unless the command was
/// already reaped and its group killed.
#[derive(Debug)]
struct ProcessGroup {
    pgid: i32,
}

impl ProcessGroup {
    fn register(pid: u32) -> Self {
        // A pid always fits in an i32 (`pid_t`).
        let pgid = i32::try_from(pid).unwrap_or(i32::MAX);
        live_groups().insert(pgid);
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
            }
        }
    }

    /// After the command (the group's leader) exited and was reaped: kills
    /// what is left in the group, once. The id is then forgotten, since
    /// once the group is empty it may be reused.
    fn kill_after_exit(&self) {
        self.kill(true);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill(true);
    }
}

/// Reads `stderr` to its end, keeping its last [`STDERR_TAIL_BYTES`]
/// (and at most twice that between trims) in `tail`.
async fn keep_tail(mut stderr: impl AsyncRead + Unpin, tail: &mut Vec<u8>) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_TAIL_BYTES {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                }
            }
        }
    }
}

/// The last [`STDERR_TAIL_BYTES`] of standard error as one line of text:
/// invalid UTF-8 replaced, surrounding space trimmed, blank lines dropped,
/// lines joined by ` | `.
fn tail_text(tail: &[u8]) -> String {
    let mut start = tail.len().saturating_sub(STDERR_TAIL_BYTES);
    // Do not start inside a character cut by the 4 KiB window.
    let mut skipped = 0;
    while skipped < 3 && start < tail.len() && tail[start] & 0xC0 == 0x80 {
        start += 1;
        skipped += 1;
    }
    String::from_utf8_lossy(&tail[start..])
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// `: <stderr>` when there is any.
struct Tail<'a>(&'a str);

impl fmt::Display for Tail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, ": {}", self.0)
        }
    }
}

/// ` (SIGKILL)` for a known signal number.
struct SignalName(i32);

impl fmt::Display for SignalName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Signal::try_from(self.0) {
            Ok(signal) => write!(f, " ({})", signal.as_str()),
            Err(_) => Ok(()),
        }
    }
}

/// A command line in a message, cut when long.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 200;
        if self.0.len() <= SHOWN {
            return write!(f, "{:?}", self.0);
        }
        let mut end = SHOWN;
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{:?}…", &self.0[..end])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Instant;

    use backfill_core::{Error, Job, MemoryStore, Retry};
    use nix::errno::Errno;

    /// Command tests take this shared; the one that kills every running
    /// command takes it alone, so it kills no other test's command.
    static COMMANDS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

    fn day() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 1, 3).unwrap()
    }

    fn line(key: &str, day: &str) -> String {
        format!(
            r#"{{"key":"{key}","event_date":"{day}","value":{{"b":1,"a":2}},"updated_at":"{day}T09:30:00Z"}}"#
        )
    }

    /// A shell word printing `text` with `printf '%s\n'`.
    fn print(text: &str) -> String {
        format!("printf '%s\\n' '{}'", text.replace('\'', r"'\''"))
    }

    /// A shell word printing `text` with `$VARIABLES` expanded.
    fn print_expanding(text: &str) -> String {
        format!(
            "printf '%s\\n' \"{}\"",
            text.replace('\\', "\\\\").replace('"', "\\\"")
        )
    }

    /// Whether process `pid` is gone: no such process, or a zombie (dead,
    /// waiting to be reaped by whoever adopted it).
    fn is_gone(pid: i32) -> bool {
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

    async fn wait_until_gone(pid: i32) -> bool {
        for _ in 0..100 {
            if is_gone(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    async fn read_pid(path: &Path) -> i32 {
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

    #[tokio::test]
    async fn a_command_day_is_parsed_and_day_substituted() {
        let _shared = COMMANDS.read().await;
        let script = format!(
            "{}; {}; [ \"$BACKFILL_DAY\" = {{day}} ] || exit 9; echo; {}",
            print(&line("a-{day}", "{day}")),
            print(r#"{"as_of":"2026-01-04T00:00:00Z"}"#),
            print_expanding(&line("b-$BACKFILL_DAY", "2026-01-03")),
        );
        let fetch = CommandFetch::new(script);
        let fetched = fetch.run(day()).await.unwrap();
        let keys: Vec<_> = fetched.records().iter().map(|r| r.key()).collect();
        assert_eq!(keys, ["a-2026-01-03", "b-2026-01-03"]);
        assert_eq!(fetched.records()[0].value(), r#"{"a":2,"b":1}"#);
        assert!(fetched.listing_as_of().is_some());
        let command = fetch.command_for(day());
        assert!(
            command.contains("a-2026-01-03") && !command.contains("{day}"),
            "{command}"
        );
    }

    #[tokio::test]
    async fn a_command_may_print_several_days_and_plenty_of_stderr() {
        let _shared = COMMANDS.read().await;
        // 1 MiB of stderr first: a command is never blocked on a full pipe.
        let script = format!(
            "head -c 1048576 /dev/zero | tr '\\0' 'e' >&2; {}; {}; echo 'the end' >&2",
            print(&line("x", "2026-01-03")),
            print(&line("y", "2026-01-04")),
        );
        let fetched = CommandFetch::new(script).run(day()).await.unwrap();
        let days: Vec<_> = fetched
            .records()
            .iter()
            .map(|r| r.event_date().to_string())
            .collect();
        assert_eq!(days, ["2026-01-03", "2026-01-04"]);
    }

    #[tokio::test]
    async fn a_failing_command_reports_its_status_and_stderr_tail() {
        let _shared = COMMANDS.read().await;
        let script = "echo 'noise that is cut away' >&2; \
                      head -c 8000 /dev/zero | tr '\\0' 'n' >&2; echo >&2; \
                      echo '  upstream said no  ' >&2; echo >&2; echo 'HTTP 500' >&2; exit 3";
        let error = CommandFetch::new(script).run(day()).await.unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with("fetch command exited with status 3: nnnn"),
            "{text}"
        );
        assert!(
            text.ends_with("nnnn | upstream said no | HTTP 500"),
            "{text}"
        );
        assert!(!text.contains("noise"), "only the last 4 KiB: {text}");
        assert!(!error.is_transient());

        let error = CommandFetch::new("exit 4").run(day()).await.unwrap_err();
        assert_eq!(error.to_string(), "fetch command exited with status 4");

        let error = CommandFetch::new("echo bye >&2; kill -9 $$")
            .run(day())
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "fetch command was killed by signal 9 (SIGKILL): bye"
        );
    }

    #[tokio::test]
    async fn exit_75_is_retried_and_other_failures_are_not() {
        let _shared = COMMANDS.read().await;
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("tried");
        let script = format!(
            "if [ -e '{m}' ]; then {}; else touch '{m}'; echo 'busy, try later' >&2; exit 75; fi",
            print(&line("k", "{day}")),
            m = marker.display(),
        );
        let fetch = CommandFetch::new(script);
        let job = Job::new().retry(Retry::default().backoff(Duration::ZERO, Duration::ZERO));
        let store = MemoryStore::new();
        let report = job.sync_day(&store, &fetch, day()).await.unwrap();
        assert_eq!(report.attempts, 2);
        assert_eq!(report.counts.inserted, 1);

        let boxed = CommandFetch::new("exit 75").fetch(day()).await.unwrap_err();
        assert!(boxed.is::<Transient>());
        let error = Error::Fetch {
            day: day(),
            source: boxed,
        };
        assert!(error.is_retryable());
        assert_eq!(
            error.to_string(),
            "fetching 2026-01-03 failed: fetch command exited with status 75 (transient)"
        );

        let boxed = CommandFetch::new("exit 3").fetch(day()).await.unwrap_err();
        assert!(!Error::Fetch {
            day: day(),
            source: boxed
        }
        .is_retryable());
        let error = job
            .sync_day(&store, &CommandFetch::new("exit 3"), day())
            .await
            .unwrap_err();
        assert!(!error.is_retryable(), "{error}");
    }

    #[tokio::test]
    async fn a_malformed_line_fails_at_once_and_kills_the_command() {
        let _shared = COMMANDS.read().await;
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let script = format!(
            "{}; echo $$ > '{}'; {}; sleep 100",
            print(&line("ok", "{day}")),
            pidfile.display(),
            print(r#"{"key":"k","event_date":"2026-01-03","value":"v"}"#),
        );
        let started = Instant::now();
        let error = CommandFetch::new(script).run(day()).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            error.to_string(),
            "fetch command output, line 2: missing field `updated_at`"
        );
        let shell = read_pid(&pidfile).await;
        assert!(wait_until_gone(shell).await, "the command was killed");

        let error = CommandFetch::new(format!("{}; sleep 100", print(&"x".repeat(5000))))
            .max_line_bytes(1024)
            .run(day())
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "fetch command output, line 1: longer than 1024 bytes"
        );
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
        let outcome = tokio::time::timeout(Duration::from_secs(1), fetch.run(day())).await;
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
        let fetched = CommandFetch::new(script).run(day()).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(fetched.records().len(), 1);
        let child = read_pid(&child_file).await;
        assert!(
            wait_until_gone(child).await,
            "the background child was killed"
        );
    }

    #[tokio::test]
    async fn kill_running_commands_kills_every_group() {
        let _alone = COMMANDS.write().await;
        assert_eq!(running_commands(), 0);
        let fetch = CommandFetch::new("sleep 100");
        let running = tokio::spawn(async move { fetch.run(day()).await });
        for _ in 0..100 {
            if running_commands() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(running_commands(), 1);
        kill_running_commands();
        let error = tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("ended when killed")
            .unwrap()
            .unwrap_err();
        assert!(error.to_string().contains("killed by signal 9"), "{error}");
        assert_eq!(running_commands(), 0);
    }

    #[tokio::test]
    async fn a_command_that_cannot_start_is_a_permanent_error() {
        let _shared = COMMANDS.read().await;
        let error = CommandFetch::new("definitely-not-a-command-xyz {day}")
            .run(day())
            .await
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("fetch command exited with status 127: "),
            "{error}"
        );
        assert!(!error.is_transient());
        let spawn = FetchError::Spawn {
            command: "x".into(),
            error: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(
            spawn.to_string(),
            "cannot start the fetch command (sh -c \"x\"): entity not found"
        );
    }

    #[tokio::test]
    async fn files_are_read_per_day() {
        let dir = tempfile::tempdir().unwrap();
        let template = format!("{}/{{day}}.jsonl", dir.path().display());
        let fetch = FileFetch::new(&template);
        let path = dir.path().join("2026-01-03.jsonl");
        std::fs::write(
            &path,
            format!(
                "{}\r\n\n{}\n",
                line("a", "2026-01-03"),
                line("b", "2026-01-03")
            ),
        )
        .unwrap();
        let fetched = fetch.run(day()).await.unwrap();
        assert_eq!(fetched.records().len(), 2);

        let error = fetch.run(day().succ_opt().unwrap()).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "no file {}/2026-01-04.jsonl for 2026-01-04",
                dir.path().display()
            )
        );
        let boxed = fetch.fetch(day().succ_opt().unwrap()).await.unwrap_err();
        assert!(!Error::Fetch {
            day: day(),
            source: boxed
        }
        .is_retryable());

        std::fs::write(
            &path,
            format!("{}\n{{\"as_of\":1}}\n", line("a", "2026-01-03")),
        )
        .unwrap();
        let error = fetch.run(day()).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "file {}, line 2: invalid type: integer `1`, expected a string",
                path.display()
            )
        );

        let relative = FileFetch::new("exports/{day}.jsonl");
        let error = relative.run(day()).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "no file exports/2026-01-03.jsonl for 2026-01-03"
        );

        std::fs::create_dir(dir.path().join("2026-01-05.jsonl")).unwrap();
        let error = fetch
            .run(NaiveDate::from_ymd_opt(2026, 1, 5).unwrap())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("line 1: cannot read"), "{error}");
    }

    #[test]
    fn stderr_tails_start_on_a_character() {
        let mut tail = vec![b'x'; 10];
        tail.extend("é".repeat(STDERR_TAIL_BYTES).as_bytes());
        let text = tail_text(&tail);
        assert!(
            text.starts_with('é') && !text.contains('\u{FFFD}'),
            "{}",
            &text[..10]
        );
        assert_eq!(tail_text(b"\n  a  \r\n\n b\xff \n"), "a | b\u{FFFD}");
    }
}
