//! A day from a shell command's standard output, run in a process group
//! of its own.

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use backfill_core::Record;
use chrono::NaiveDate;
use tokio::io::{AsyncRead, BufReader, ReadBuf};
use tokio::process::{Child, ChildStdout};

use super::group::ProcessGroup;
use super::stderr::StderrTail;
use super::template::sealed::Open;
use super::{DayStream, FetchError, TemplateFetch};
use crate::jsonl::ChunkReader;

/// The exit status that marks a command's failure as transient:
/// `EX_TEMPFAIL` from `sysexits.h`.
pub const EXIT_TEMPFAIL: i32 = 75;

/// The shell's status for a command it found but cannot execute.
pub(super) const EXIT_CANNOT_EXECUTE: i32 = 126;

/// The shell's status for a command it did not find.
pub(super) const EXIT_NOT_FOUND: i32 = 127;

/// How long, once a command exited, its standard output may stay open with
/// nothing more on it before the fetch stops waiting: 5 s. Only a process
/// that left the command's process group (which is killed when the
/// command exits) can hold it that long; see [`FetchError::StdoutHeld`].
pub const STDOUT_GRACE: Duration = Duration::from_secs(5);

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
/// [`kill_running_commands`](super::kill_running_commands) kills every
/// group still running. Should this process die without doing it (killed
/// by `SIGKILL` or the OOM killer), a watchdog started with the first
/// command — a small `sh` in a process group of its own, on every Unix —
/// kills every group still running as soon as this process is gone.
///
/// Exit status 0 is success; [`EXIT_TEMPFAIL`] (75) a transient failure
/// the job retries; 126 and 127 (the shell cannot execute the command, or
/// does not find it), like a shell that cannot be started, a
/// [fatal](FetchError::is_fatal) error that stops the whole run, since no
/// day can succeed; any other status, or death by a signal, a permanent
/// failure whose message ends with the last of the command's standard
/// error. The status is known once the output ended, so a failure is the
/// stream's last item, after any records: the job writes none of them.
///
/// A process the command started outside its process group (`setsid`, a
/// daemon) survives the group and may keep the command's standard output
/// open, so that it never ends. Once the command exited, the fetch waits
/// for more of it only while it keeps coming: after [`STDOUT_GRACE`] with
/// nothing on it the day fails ([`FetchError::StdoutHeld`], naming the
/// process when it can be found, on Linux), rather than at the day's
/// timeout.
///
/// ```no_run
/// use backfill_cli::fetch::CommandFetch;
///
/// let fetch = CommandFetch::new("curl -fsS https://example.com/export?day={day}");
/// # let _ = fetch;
/// ```
pub type CommandFetch = TemplateFetch<FromCommand>;

/// The [`Source`](super::Source) of a [`CommandFetch`]: the template is a
/// shell command line, and the day's input the command's standard output.
#[derive(Debug, Clone, Copy, Default)]
pub struct FromCommand;

impl CommandFetch {
    /// The command line run for `day`.
    pub fn command_for(&self, day: NaiveDate) -> String {
        self.for_day(day)
    }
}

impl Open for FromCommand {
    /// Starts the command for `day` and reads its output up to the first
    /// record. The rest of the output is parsed as the stream is read, and
    /// the exit status comes at its end: a failure is the stream's last
    /// item.
    async fn open(&self, fetch: &CommandFetch, day: NaiveDate) -> Result<DayStream, FetchError> {
        let command = fetch.command_for(day);
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
        let activity = Arc::new(Activity::new());
        let stdout_fd = stdout.as_raw_fd();
        let mut running = Running {
            group,
            stderr: StderrTail::drain(stderr),
            output: fetch.reader(Watched {
                stdout,
                activity: Arc::clone(&activity),
            }),
            activity,
            stdout_fd,
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
}

/// A running command whose output is being read. Dropped, it kills the
/// command's process group (unless the command was reaped and its group
/// killed already).
struct Running {
    /// First, so it is dropped first: the group is killed before its pipes
    /// close.
    group: Option<ProcessGroup>,
    stderr: StderrTail,
    output: ChunkReader<BufReader<Watched>>,
    /// When the output last moved, or the waiting for it began.
    activity: Arc<Activity>,
    /// The descriptor of our end of the output's pipe, open as long as
    /// `output` is: to find who else holds the pipe.
    stdout_fd: RawFd,
    child: Child,
    status: Option<ExitStatus>,
}

/// When a command's output last gave bytes (or was last waited for from
/// scratch), shared by the reader and the one waiting.
#[derive(Debug)]
struct Activity {
    start: Instant,
    /// Since `start`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A command's standard output, noting in its [`Activity`] each read that
/// gives bytes.
#[derive(Debug)]
struct Watched {
    stdout: ChildStdout,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stdout).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.touch();
        }
        polled
    }
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

    /// Reads output while following the command's exit; once it exited,
    /// for as long as the output keeps coming (see [`STDOUT_GRACE`]).
    async fn read(&mut self, until: Until) -> Result<Option<Vec<Record>>, FetchError> {
        let Self {
            output,
            child,
            status,
            group,
            activity,
            stderr,
            stdout_fd,
        } = self;
        // Idle is counted from here at the earliest: not while the job was
        // busy with the last chunk and nothing read.
        activity.touch();
        let read = async move {
            match until {
                Until::FirstRecord => output.read_head().await.map(|_| None),
                Until::Chunk => output.next_chunk().await,
            }
        };
        tokio::pin!(read);
        loop {
            let idle_until = tokio::time::Instant::from_std(activity.last() + STDOUT_GRACE);
            tokio::select! {
                read = &mut read => return read.map_err(FetchError::Output),
                exited = child.wait(), if status.is_none() => {
                    *status = Some(exited.map_err(FetchError::Wait)?);
                    activity.touch();
                    // The command is done: whatever it left running in its
                    // group goes, and the output ends once the pipe drains
                    // unless a process outside the group holds it open.
                    if let Some(group) = group {
                        group.kill_after_exit();
                    }
                }
                () = tokio::time::sleep_until(idle_until), if status.is_some() => {
                    if activity.last().elapsed() < STDOUT_GRACE {
                        continue; // it moved meanwhile
                    }
                    let Some(status) = *status else { continue };
                    if !status.success() {
                        return Err(exit_error(status, stderr.text().await));
                    }
                    let (pid, name) = match holder_of(*stdout_fd) {
                        Some((pid, name)) => (Some(pid), name),
                        None => (None, None),
                    };
                    return Err(FetchError::StdoutHeld {
                        after: STDOUT_GRACE,
                        pid,
                        name,
                    });
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
        Err(exit_error(status, self.stderr.text().await))
    }
}

/// The error of a command that exited with a status other than 0.
fn exit_error(status: ExitStatus, stderr: String) -> FetchError {
    match (status.code(), status.signal()) {
        (Some(code), _) => FetchError::Exit { code, stderr },
        (None, Some(signal)) => FetchError::Signal { signal, stderr },
        // Neither an exit code nor a signal does not happen on Unix.
        (None, None) => FetchError::Exit { code: -1, stderr },
    }
}

/// Another process holding the pipe whose end this process has open as
/// `fd`, and its name: found through `/proc`, so on Linux only (elsewhere,
/// or when that process is not ours to look at, `None`).
fn holder_of(fd: RawFd) -> Option<(i32, Option<String>)> {
    use std::os::unix::fs::MetadataExt;
    let pipe = std::fs::metadata(format!("/proc/self/fd/{fd}")).ok()?;
    let link = format!("pipe:[{}]", pipe.ino());
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            if pid == me {
                return None;
            }
            let holds = std::fs::read_dir(entry.path().join("fd"))
                .ok()?
                .flatten()
                .any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|to| to.as_os_str() == link.as_str())
                });
            if !holds {
                return None;
            }
            let name = std::fs::read_to_string(entry.path().join("comm"))
                .ok()
                .map(|name| name.trim().to_owned());
            Some((i32::try_from(pid).ok()?, name))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    use backfill_core::{Error, Fetch, Job, MemoryStore, Retry, Store, Transient};
    use futures_util::StreamExt;

    use crate::fetch::testing::{day, line, print, read_pid, wait_until_gone, COMMANDS};
    use crate::fetch::{running_commands, FetchError};
    use crate::jsonl::{CHUNK_BYTES, CHUNK_RECORDS};

    /// A shell word printing `text` with `$VARIABLES` expanded.
    fn print_expanding(text: &str) -> String {
        format!(
            "printf '%s\\n' \"{}\"",
            text.replace('\\', "\\\\").replace('"', "\\\"")
        )
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
    async fn stdout_held_open_after_the_exit_fails_the_day_naming_the_holder() {
        let _shared = COMMANDS.read().await;
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("escaped");
        // The escaped process holds stdout and prints nothing more. (The
        // command waits for it to have left the group: exiting first, its
        // group would be killed with the process still in it.)
        let escape = |pidfile: &std::path::Path| {
            format!(
                "setsid sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 60' & \
                 while [ ! -e {p} ]; do sleep 0.05; done",
                p = pidfile.display()
            )
        };
        let script = format!(
            "{}; {}; exit 0",
            escape(&pidfile),
            print(&line("k", "{day}"))
        );
        let started = Instant::now();
        let error = CommandFetch::new(script).records(day()).await.unwrap_err();
        let took = started.elapsed();
        let escaped = read_pid(&pidfile).await;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(escaped),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert!(
            took >= STDOUT_GRACE && took < STDOUT_GRACE + Duration::from_secs(5),
            "{took:?}"
        );
        assert!(
            matches!(error, FetchError::StdoutHeld { pid: Some(pid), .. } if pid == escaped),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "fetch command exited with status 0, but its standard output is still held \
                 open 5s later, by pid {escaped} (sleep) outside the command's process group: \
                 the day may be incomplete, so nothing of it is written (a background process \
                 should not keep the command's output: `… > /dev/null &`)"
            )
        );
        assert!(!error.is_transient() && !error.is_fatal());

        // A failed status is the error, held output or not.
        std::fs::remove_file(&pidfile).unwrap();
        let script = format!("{}; echo 'no luck' >&2; exit 3", escape(&pidfile));
        let error = CommandFetch::new(script).records(day()).await.unwrap_err();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(read_pid(&pidfile).await),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert_eq!(
            error.to_string(),
            "fetch command exited with status 3: no luck"
        );

        // An escaped process that goes on printing is read to its end.
        let (slow, started) = (dir.path().join("slow.sh"), dir.path().join("started"));
        std::fs::write(
            &slow,
            format!(
                "touch '{}'; sleep 1; {}; sleep 2; {}\n",
                started.display(),
                print(&line("a", "2026-01-03")),
                print(&line("b", "2026-01-03"))
            ),
        )
        .unwrap();
        let script = format!(
            "setsid sh '{}' & while [ ! -e '{}' ]; do sleep 0.05; done; exit 0",
            slow.display(),
            started.display()
        );
        let fetched = CommandFetch::new(script).records(day()).await.unwrap();
        let keys: Vec<_> = fetched.records.iter().map(|r| r.key()).collect();
        assert_eq!(keys, ["a", "b"]);
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
        assert!(error.is_fatal());
        let boxed = error.into_boxed();
        assert!(boxed.is::<backfill_core::Fatal>(), "{boxed}");
        let not_executable = CommandFetch::new("/dev/null {day}")
            .records(day())
            .await
            .unwrap_err();
        assert!(
            not_executable
                .to_string()
                .starts_with("fetch command exited with status 126: "),
            "{not_executable}"
        );
        assert!(not_executable.is_fatal());
        for code in [1, 2, 75, 125, 128] {
            let error = FetchError::Exit {
                code,
                stderr: String::new(),
            };
            assert!(!error.is_fatal(), "{code}");
        }
        let busy = FetchError::Spawn {
            command: "x".into(),
            error: std::io::Error::from_raw_os_error(nix::errno::Errno::EAGAIN as i32),
        };
        assert!(!busy.is_fatal(), "no process slot to spare is passing");
        let spawn = FetchError::Spawn {
            command: "x".into(),
            error: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(
            spawn.to_string(),
            "cannot start the fetch command (sh -c \"x\"): entity not found"
        );
        assert!(spawn.is_fatal());
    }
}
