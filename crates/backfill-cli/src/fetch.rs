//! Fetching a day by running a command or reading a file.
//!
//! Both read the [JSON Lines format](crate::jsonl): [`CommandFetch`] from
//! a shell command's standard output, [`FileFetch`] from a file per day.
//! `{day}` in the template stands for the day, `YYYY-MM-DD`.
//!
//! A command's exit status says how a failed day is treated: 0 is success,
//! 75 (`EX_TEMPFAIL` from `sysexits.h`) a transient failure the job
//! retries, anything else (or death by a signal) a permanent one.
//!
//! Both stream: a day is parsed as it is read and handed to the job in
//! chunks ([`Fetched::stream`]), so a day of any size is fetched in bounded
//! memory. The output is read only as fast as the job takes the chunks: a
//! command that prints faster blocks on its full pipe. The fetch reads
//! ahead to the first record before it returns, for the day's `as_of` line
//! (which must come first, see [`jsonl`](crate::jsonl)); an error further
//! on — a malformed line, a failed exit status — is the stream's last
//! item, and the job then writes nothing of the day.

use std::collections::BTreeSet;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use backfill_core::{BoxError, Fetch, Fetched, Record, Transient};
use chrono::{DateTime, NaiveDate, Utc};
use futures_util::{Stream, StreamExt};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout};
use tokio::task::JoinHandle;

use crate::jsonl::{ChunkReader, Day, ReadError, DEFAULT_MAX_LINE_BYTES};

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
/// output is parsed as it streams, and handed over in chunks: a malformed
/// line fails the day at once. Its standard error is drained all along.
///
/// The whole process group is killed (`SIGKILL`) when the command is
/// done with — after it exited (so background children it left behind do
/// not outlive it), on a malformed line, and when the fetch or its stream
/// is dropped unfinished (the job's per-day timeout, a second Ctrl-C).
/// [`kill_running_commands`] kills every group still running.
///
/// Exit status 0 is success; [`EXIT_TEMPFAIL`] (75) a transient failure
/// the job retries; any other status, or death by a signal, a permanent
/// failure whose message ends with the last of the command's standard
/// error. The status is known once the output ended, so a failure is the
/// stream's last item, after any records: the job writes none of them.
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

    /// Starts the command for `day` and reads its output up to the first
    /// record (so its `as_of` line, if any, is known): what
    /// [`Fetch::fetch`] returns, before it becomes a [`Fetched`]. The rest
    /// of the output is parsed as the stream is read, and the exit status
    /// comes at its end: a failure is the stream's last item.
    ///
    /// # Errors
    ///
    /// [`FetchError`]: the command could not start, or printed a malformed
    /// line before its first record.
    pub async fn stream(&self, day: NaiveDate) -> Result<DayStream, FetchError> {
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
        let mut running = Running {
            group,
            stderr: StderrTail::drain(stderr),
            output: ChunkReader::new(
                BufReader::with_capacity(READ_BUFFER_BYTES, stdout),
                self.max_line_bytes,
            ),
            child,
            status: None,
        };
        running.read(Until::FirstRecord).await?;
        let as_of = running.output.as_of();
        // The state is dropped, and with it the group killed, when the
        // stream is dropped, after its last item, or right after an error.
        let chunks = futures_util::stream::unfold(Some(running), |running| async move {
            let mut running = running?;
            match running.next().await {
                Ok(Some(chunk)) => Some((Ok(chunk), Some(running))),
                Ok(None) => None,
                Err(error) => Some((Err(error), None)),
            }
        });
        Ok(DayStream::new(chunks, as_of))
    }

    /// Runs the command for `day` and collects its whole output in memory
    /// (see [`stream`](Self::stream) for a day of any size).
    ///
    /// # Errors
    ///
    /// [`FetchError`]: the command could not start, printed a malformed
    /// line, exited with a status other than 0, or was killed by a signal.
    pub async fn records(&self, day: NaiveDate) -> Result<Day, FetchError> {
        self.stream(day).await?.into_day().await
    }
}

#[async_trait]
impl Fetch for CommandFetch {
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError> {
        self.stream(day)
            .await
            .map(Fetched::from)
            .map_err(FetchError::into_boxed)
    }
}

/// A running command whose output is being read. Dropped, it kills the
/// command's process group (unless the command was reaped and its group
/// killed already).
struct Running {
    /// First, so it is dropped first: the group is killed before its pipes
    /// close.
    group: Option<ProcessGroup>,
    stderr: StderrTail,
    output: ChunkReader<BufReader<ChildStdout>>,
    child: Child,
    status: Option<ExitStatus>,
}

/// How far [`Running::read`] reads.
#[derive(Debug, Clone, Copy)]
enum Until {
    FirstRecord,
    Chunk,
}

impl Running {
    /// The next chunk of records; `None`, once the output ended and the
    /// command exited with status 0.
    async fn next(&mut self) -> Result<Option<Vec<Record>>, FetchError> {
        match self.read(Until::Chunk).await? {
            Some(chunk) => Ok(Some(chunk)),
            None => self.finish().await.map(|()| None),
        }
    }

    /// Reads output while following the command's exit.
    async fn read(&mut self, until: Until) -> Result<Option<Vec<Record>>, FetchError> {
        let Self {
            output,
            child,
            status,
            group,
            ..
        } = self;
        let read = async move {
            match until {
                Until::FirstRecord => output.read_head().await.map(|_| None),
                Until::Chunk => output.next_chunk().await,
            }
        };
        tokio::pin!(read);
        loop {
            tokio::select! {
                read = &mut read => return read.map_err(FetchError::Output),
                exited = child.wait(), if status.is_none() => {
                    *status = Some(exited.map_err(FetchError::Wait)?);
                    // The command is done: whatever it left running in its
                    // group goes, and the output ends once the pipe drains
                    // even if a background child held it open.
                    if let Some(group) = group {
                        group.kill_after_exit();
                    }
                }
            }
        }
    }

    /// After the output ended: the command's exit status, as the stream's
    /// end or its last error.
    async fn finish(&mut self) -> Result<(), FetchError> {
        let status = match self.status {
            Some(status) => status,
            None => {
                let status = self.child.wait().await.map_err(FetchError::Wait)?;
                self.status = Some(status);
                if let Some(group) = &self.group {
                    group.kill_after_exit();
                }
                status
            }
        };
        if status.success() {
            return Ok(());
        }
        let stderr = self.stderr.text().await;
        Err(match (status.code(), status.signal()) {
            (Some(code), _) => FetchError::Exit { code, stderr },
            (None, Some(signal)) => FetchError::Signal { signal, stderr },
            // Neither an exit code nor a signal does not happen on Unix.
            (None, None) => FetchError::Exit { code: -1, stderr },
        })
    }
}

/// A command's standard error, drained by a task of its own so the command
/// never blocks on a full pipe, whether or not its output is being read;
/// its last [`STDERR_TAIL_BYTES`] are kept for the error message. The task
/// is aborted when this is dropped.
struct StderrTail {
    tail: Arc<Mutex<Vec<u8>>>,
    drain: Option<JoinHandle<()>>,
}

impl StderrTail {
    fn drain(stderr: impl AsyncRead + Unpin + Send + 'static) -> Self {
        let tail = Arc::new(Mutex::new(Vec::new()));
        let drain = tokio::spawn(keep_tail(stderr, Arc::clone(&tail)));
        Self {
            tail,
            drain: Some(drain),
        }
    }

    /// The tail as one line of text, once standard error ended or, if a
    /// process that left the group holds it open, after [`STDERR_GRACE`].
    async fn text(&mut self) -> String {
        if let Some(mut drain) = self.drain.take() {
            if tokio::time::timeout(STDERR_GRACE, &mut drain)
                .await
                .is_err()
            {
                drain.abort();
            }
        }
        tail_text(&self.tail.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(drain) = &self.drain {
            drain.abort();
        }
    }
}

/// A day being fetched by a [`CommandFetch`] or a [`FileFetch`]: the
/// `as_of` line's instant, read before any record, and the records as a
/// stream of chunks (see [`ChunkReader`]) ending with the first error.
///
/// It converts into a [`Fetched`]; [`DayStream::into_day`] collects it.
/// Dropping it stops the fetch (and kills a command's process group).
pub struct DayStream {
    as_of: Option<DateTime<Utc>>,
    chunks: Pin<Box<dyn Stream<Item = Result<Vec<Record>, FetchError>> + Send>>,
}

impl DayStream {
    fn new(
        chunks: impl Stream<Item = Result<Vec<Record>, FetchError>> + Send + 'static,
        as_of: Option<DateTime<Utc>>,
    ) -> Self {
        Self {
            as_of,
            // Fused: polled again after its end, it stays ended.
            chunks: Box::pin(chunks.fuse()),
        }
    }

    /// The day's `as_of` line's instant, if it had one.
    pub fn as_of(&self) -> Option<DateTime<Utc>> {
        self.as_of
    }

    /// Reads the rest of the day into memory.
    ///
    /// # Errors
    ///
    /// The stream's error, if any.
    pub async fn into_day(mut self) -> Result<Day, FetchError> {
        let mut records = Vec::new();
        while let Some(chunk) = self.chunks.next().await {
            records.extend(chunk?);
        }
        Ok(Day {
            records,
            as_of: self.as_of,
        })
    }
}

impl fmt::Debug for DayStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DayStream")
            .field("as_of", &self.as_of)
            .finish_non_exhaustive()
    }
}

impl Stream for DayStream {
    type Item = Result<Vec<Record>, FetchError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.chunks.as_mut().poll_next(cx)
    }
}

impl From<DayStream> for Fetched {
    fn from(day: DayStream) -> Self {
        let fetched = Fetched::stream(
            day.chunks
                .map(|chunk| chunk.map_err(FetchError::into_boxed)),
        );
        match day.as_of {
            Some(at) => fetched.as_of(at),
            None => fetched,
        }
    }
}

/// Fetches a day by reading a file in the [JSON Lines format](crate::jsonl),
/// at a path template where `{day}` stands for the day (`YYYY-MM-DD`),
/// e.g. `exports/{day}.jsonl`. A missing file fails the day. The file is
/// parsed as it is read and handed over in chunks.
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

    /// Opens the file of `day` and reads it up to the first record (so its
    /// `as_of` line, if any, is known): what [`Fetch::fetch`] returns,
    /// before it becomes a [`Fetched`]. The rest is parsed as the stream is
    /// read; a malformed line there is the stream's last item.
    ///
    /// # Errors
    ///
    /// [`FetchError`]: no such file, it cannot be opened or read, or it
    /// holds a malformed line before its first record.
    pub async fn stream(&self, day: NaiveDate) -> Result<DayStream, FetchError> {
        let path = self.path_for(day);
        let file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(FetchError::NoFile { path, day });
            }
            Err(error) => return Err(FetchError::Open { path, error }),
        };
        let mut reader = ChunkReader::new(
            BufReader::with_capacity(READ_BUFFER_BYTES, file),
            self.max_line_bytes,
        );
        let as_of = match reader.read_head().await {
            Ok(as_of) => as_of,
            Err(problem) => return Err(FetchError::File { path, problem }),
        };
        let chunks = reader.into_chunks().map(move |chunk| {
            chunk.map_err(|problem| FetchError::File {
                path: path.clone(),
                problem,
            })
        });
        Ok(DayStream::new(chunks, as_of))
    }

    /// Reads the whole file of `day` into memory (see
    /// [`stream`](Self::stream) for a file of any size).
    ///
    /// # Errors
    ///
    /// [`FetchError`]: no such file, it cannot be opened or read, or it
    /// holds a malformed line.
    pub async fn records(&self, day: NaiveDate) -> Result<Day, FetchError> {
        self.stream(day).await?.into_day().await
    }
}

#[async_trait]
impl Fetch for FileFetch {
    async fn fetch(&self, day: NaiveDate) -> Result<Fetched, BoxError> {
        self.stream(day)
            .await
            .map(Fetched::from)
            .map_err(FetchError::into_boxed)
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
async fn keep_tail(mut stderr: impl AsyncRead + Unpin, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_TAIL_BYTES {
                    let cut = tail.len() - STDERR_TAIL_BYTES;
                    tail.drain(..cut);
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

    use backfill_core::{Error, Job, MemoryStore, Retry, Store};

    use crate::jsonl::{CHUNK_BYTES, CHUNK_RECORDS};
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
            print(r#"{"as_of":"2026-01-04T00:00:00Z"}"#),
            print(&line("a-{day}", "{day}")),
            print_expanding(&line("b-$BACKFILL_DAY", "2026-01-03")),
        );
        let fetch = CommandFetch::new(script);
        let fetched = fetch.records(day()).await.unwrap();
        let keys: Vec<_> = fetched.records.iter().map(|r| r.key()).collect();
        assert_eq!(keys, ["a-2026-01-03", "b-2026-01-03"]);
        assert_eq!(fetched.records[0].value(), r#"{"a":2,"b":1}"#);
        assert!(fetched.as_of.is_some());
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
        let fetched = CommandFetch::new(script).records(day()).await.unwrap();
        let days: Vec<_> = fetched
            .records
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
        let error = CommandFetch::new(script).records(day()).await.unwrap_err();
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

        let error = CommandFetch::new("exit 4")
            .records(day())
            .await
            .unwrap_err();
        assert_eq!(error.to_string(), "fetch command exited with status 4");

        let error = CommandFetch::new("echo bye >&2; kill -9 $$")
            .records(day())
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

        // The status is known at the end of the output: the stream's last
        // item.
        let fetched = CommandFetch::new("exit 75").fetch(day()).await.unwrap();
        let boxed = fetched.collect().await.unwrap_err();
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

        let fetched = CommandFetch::new("exit 3").fetch(day()).await.unwrap();
        let boxed = fetched.collect().await.unwrap_err();
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
    async fn records_come_in_bounded_chunks_with_the_as_of_known_first() {
        let _shared = COMMANDS.read().await;
        let script = format!(
            "{}; yes '{}' | head -n 50000",
            print(r#"{"as_of":"2026-01-04T00:00:00Z"}"#),
            line("k", "{day}")
        );
        let fetched = CommandFetch::new(&script).fetch(day()).await.unwrap();
        assert!(fetched.is_stream());
        assert!(fetched.listing_as_of().is_some(), "set before any record");

        let mut stream = CommandFetch::new(&script).stream(day()).await.unwrap();
        assert!(stream.as_of().is_some());
        let mut sizes = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            let bytes: usize = chunk.iter().map(|r| r.key().len() + r.value().len()).sum();
            assert!(chunk.len() <= CHUNK_RECORDS && bytes <= CHUNK_BYTES);
            sizes.push(chunk.len());
        }
        assert!(sizes.len() >= 2, "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 50_000);
    }

    /// The output is read only as fast as the stream is: a command printing
    /// two million lines to a consumer that stalls after its first chunk
    /// is held back by its full pipe, never read ahead into memory.
    #[tokio::test]
    async fn a_slow_consumer_holds_a_large_output_back() {
        let _shared = COMMANDS.read().await;
        let dir = tempfile::tempdir().unwrap();
        let progress = dir.path().join("progress");
        // 200 batches of 10 000 lines; `progress` says how many batches
        // were written into the pipe.
        let script = format!(
            "i=0; while [ $i -lt 200 ]; do yes '{}' | head -n 10000; i=$((i+1)); echo $i > '{}'; done",
            line("k", "{day}"),
            progress.display(),
        );
        let mut stream = CommandFetch::new(script).stream(day()).await.unwrap();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.len(), CHUNK_RECORDS);
        // A reader that buffered the output would be well past 100 000
        // lines by now, even in a debug build.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let written: u32 = std::fs::read_to_string(&progress)
            .map(|text| text.trim().parse().unwrap())
            .unwrap_or(0);
        assert!(
            written <= 3,
            "{written} batches of 10 000 lines written while one chunk was taken"
        );
        // Taking more lets it go on, a chunk at a time.
        for _ in 0..5 {
            assert_eq!(stream.next().await.unwrap().unwrap().len(), CHUNK_RECORDS);
        }
        assert!(running_commands() >= 1);
    }

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
    async fn a_failure_after_records_writes_nothing_and_exit_75_is_retried() {
        let _shared = COMMANDS.read().await;
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("tried");
        // 20 000 records (several chunks) either way; the first run then
        // fails with status 75.
        let script = format!(
            "yes '{}' | head -n 20000 | awk '{{ sub(/\"k\"/, \"\\\"k\" NR \"\\\"\"); print }}';              if [ ! -e '{m}' ]; then touch '{m}'; echo 'busy' >&2; exit 75; fi",
            line("k", "{day}"),
            m = marker.display(),
        );
        let fetch = CommandFetch::new(script);
        let store = MemoryStore::new();
        let once = Job::new().retry(Retry::none());
        let error = once.sync_day(&store, &fetch, day()).await.unwrap_err();
        assert!(error.is_retryable(), "{error}");
        assert!(error.to_string().contains("status 75: busy"), "{error}");
        assert!(store.rows().await.unwrap().is_empty(), "nothing written");

        std::fs::remove_file(&marker).unwrap();
        let job = Job::new().retry(Retry::default().backoff(Duration::ZERO, Duration::ZERO));
        let report = job.sync_day(&store, &fetch, day()).await.unwrap();
        assert_eq!(report.attempts, 2);
        assert_eq!(report.counts.inserted, 20_000);
        assert_eq!(store.rows().await.unwrap().len(), 20_000);
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
        let error = CommandFetch::new(script).records(day()).await.unwrap_err();
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

        // After records were handed over: the stream's last item.
        std::fs::remove_file(&pidfile).unwrap();
        let script = format!(
            "yes '{}' | head -n {}; echo $$ > '{}'; {}; sleep 100",
            line("ok", "{day}"),
            CHUNK_RECORDS + 1,
            pidfile.display(),
            print(r#"{"as_of":"2026-01-04T00:00:00Z"}"#),
        );
        let mut stream = CommandFetch::new(script).stream(day()).await.unwrap();
        assert_eq!(stream.as_of(), None);
        let started = Instant::now();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.len(), CHUNK_RECORDS);
        let error = stream.next().await.unwrap().unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "fetch command output, line {}: as_of must come before the first record (line 1)",
                CHUNK_RECORDS + 2
            )
        );
        assert!(stream.next().await.is_none(), "the stream ends");
        assert!(started.elapsed() < Duration::from_secs(5));
        let shell = read_pid(&pidfile).await;
        assert!(wait_until_gone(shell).await, "the command was killed");

        let error = CommandFetch::new(format!("{}; sleep 100", print(&"x".repeat(5000))))
            .max_line_bytes(1024)
            .records(day())
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

    #[tokio::test]
    async fn a_command_that_cannot_start_is_a_permanent_error() {
        let _shared = COMMANDS.read().await;
        let error = CommandFetch::new("definitely-not-a-command-xyz {day}")
            .records(day())
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
        let fetched = fetch.records(day()).await.unwrap();
        assert_eq!(fetched.records.len(), 2);

        let error = fetch.records(day().succ_opt().unwrap()).await.unwrap_err();
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
        let error = fetch.records(day()).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "file {}, line 2: invalid type: integer `1`, expected a string",
                path.display()
            )
        );

        // A large file streams, its as_of known before any record.
        let mut text = String::from("\n{\"as_of\":\"2026-01-04T00:00:00Z\"}\n");
        for i in 0..20_000 {
            text.push_str(&line(&format!("k{i}"), "2026-01-03"));
            text.push('\n');
        }
        std::fs::write(&path, text).unwrap();
        let fetched = fetch.fetch(day()).await.unwrap();
        assert!(fetched.is_stream() && fetched.listing_as_of().is_some());
        assert_eq!(fetched.collect().await.unwrap().0.len(), 20_000);
        let chunks: Vec<_> = fetch.stream(day()).await.unwrap().collect().await;
        assert_eq!(chunks.len(), 20_000_usize.div_ceil(CHUNK_RECORDS));
        assert!(chunks.iter().all(|chunk| chunk.is_ok()));

        let relative = FileFetch::new("exports/{day}.jsonl");
        let error = relative.records(day()).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "no file exports/2026-01-03.jsonl for 2026-01-03"
        );

        std::fs::create_dir(dir.path().join("2026-01-05.jsonl")).unwrap();
        let error = fetch
            .records(NaiveDate::from_ymd_opt(2026, 1, 5).unwrap())
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
