//! The real `backfill` binary, spawned as a user or a scheduler runs it,
//! against SQLite files and the test Postgres.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use backfill_core::conformance::fixtures::jan;
use backfill_core::Store;
use backfill_sqlite::SqliteStore;
use chrono::{Datelike, NaiveDate};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_backfill");

fn sample() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fetch.py");
    format!("python3 {}", path.canonicalize().unwrap().display())
}

/// The command with a clean environment of its own options, in `dir`.
fn backfill(dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    command.current_dir(dir).stdin(Stdio::null());
    for (name, _) in std::env::vars() {
        if name.starts_with("BACKFILL_") {
            command.env_remove(name);
        }
    }
    command
}

fn run(command: &mut Command) -> Output {
    command.output().expect("the binary runs")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    )
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(output)))
}

fn totals(report: &Value) -> (u64, u64) {
    let days = report["days"].as_array().unwrap();
    let sum = |field: &str| {
        days.iter()
            .map(|d| d["counts"][field].as_u64().unwrap())
            .sum::<u64>()
    };
    (
        sum("inserted"),
        sum("inserted") + sum("updated") + sum("deleted"),
    )
}

fn synced_days(report: &Value) -> Vec<String> {
    report["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["day"].as_str().unwrap().to_owned())
        .collect()
}

fn range(command: &mut Command, from: u32, to: u32) -> &mut Command {
    command.arg("backfill").args([
        "--from",
        &jan(from).to_string(),
        "--to",
        &jan(to).to_string(),
    ])
}

async fn sqlite(dir: &Path) -> SqliteStore {
    SqliteStore::open(dir.join("backfill.db")).await.unwrap()
}

/// A first backfill writes every record; the same command again writes
/// nothing, on SQLite and on Postgres.
#[tokio::test]
async fn a_backfill_then_a_rerun_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores = vec![("sqlite".to_owned(), "sqlite://backfill.db".to_owned(), None)];
    if let Some(url) = backfill_testkit::url().await {
        let schema = backfill_testkit::unique_schema();
        stores.push(("postgres".to_owned(), url, Some(schema)));
    }
    for (name, url, schema) in stores {
        for pass in 0..2 {
            let mut command = backfill(dir.path());
            range(&mut command, 1, 5)
                .args(["--store", &url, "--json", "--concurrency", "2"])
                .args(["--fetch-cmd", &format!("{} {{day}}", sample())]);
            if let Some(schema) = &schema {
                command.args(["--schema", schema]);
            }
            let output = run(&mut command);
            assert_eq!(code(&output), 0, "{name}: {}", show(&output));
            let report = json(&output);
            let (inserted, written) = totals(&report);
            if pass == 0 {
                assert_eq!((inserted, written), (500, 500), "{name}");
            } else {
                assert_eq!(written, 0, "{name}: a re-run wrote");
            }
            assert_eq!(synced_days(&report).len(), 5);
        }
    }
}

/// `--only missing` runs exactly the days a partial run left; `--dry-run`
/// shows them first and writes nothing.
#[tokio::test]
async fn only_missing_runs_what_a_partial_run_left() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("{} {{day}}", sample());
    let output = run(range(&mut backfill(dir.path()), 1, 3).args(["--fetch-cmd", &fetch]));
    assert_eq!(code(&output), 0, "{}", show(&output));

    let output = run(range(&mut backfill(dir.path()), 1, 6).args([
        "--fetch-cmd",
        &fetch,
        "--only",
        "missing",
        "--dry-run",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let plan = text(&output.stdout);
    assert!(plan.contains("would sync 3 days"), "{plan}");
    assert!(
        plan.contains("2026-01-04") && !plan.contains("  2026-01-03\n"),
        "{plan}"
    );
    assert_eq!(sqlite(dir.path()).await.rows().await.unwrap().len(), 300);

    let output = run(range(&mut backfill(dir.path()), 1, 6).args([
        "--fetch-cmd",
        &fetch,
        "--only",
        "missing",
        "--json",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let report = json(&output);
    assert_eq!(
        synced_days(&report),
        ["2026-01-04", "2026-01-05", "2026-01-06"]
    );
    assert_eq!(report["not_selected"].as_array().unwrap().len(), 3);
    assert_eq!(sqlite(dir.path()).await.rows().await.unwrap().len(), 600);
}

/// A day whose command fails makes the run exit 2 naming it, the other
/// days written; `--only failed` then runs that day alone.
#[tokio::test]
async fn only_failed_resumes_a_failed_day() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(range(&mut backfill(dir.path()), 1, 4).args([
        "--fetch-cmd",
        &format!("{} {{day}} --fail-on 2026-01-03", sample()),
    ]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let out = text(&output.stdout);
    assert!(out.contains("2026-01-03  FAILED"), "{}", show(&output));
    assert!(
        out.contains("upstream returned HTTP 500 for 2026-01-03"),
        "{out}"
    );
    let store = sqlite(dir.path()).await;
    assert_eq!(store.rows().await.unwrap().len(), 300);
    assert!(store.day_rows(jan(3)).await.unwrap().is_empty());

    let output = run(range(&mut backfill(dir.path()), 1, 4).args([
        "--fetch-cmd",
        &format!("{} {{day}}", sample()),
        "--only",
        "failed",
        "--json",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(synced_days(&json(&output)), ["2026-01-03"]);
    assert_eq!(store.rows().await.unwrap().len(), 400);
}

/// Exit 75 is a transient failure: the day is tried again and succeeds.
#[test]
fn exit_75_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("tried");
    let fetch = format!(
        "if [ ! -e {m}-{{day}} ]; then touch {m}-{{day}}; echo busy >&2; exit 75; fi; {} {{day}}",
        sample(),
        m = marker.display()
    );
    let output = run(range(&mut backfill(dir.path()), 1, 2).args([
        "--fetch-cmd",
        &fetch,
        "--retries",
        "1",
        "--json",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let report = json(&output);
    for day in report["days"].as_array().unwrap() {
        assert_eq!(day["attempts"], 2, "{day}");
    }
    assert!(text(&output.stderr).contains("attempt 1 failed, retrying"));

    // With no retry left, exit 75 fails the day.
    let output =
        run(range(&mut backfill(dir.path()), 5, 5).args(["--fetch-cmd", &fetch, "--retries", "0"]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    assert!(
        text(&output.stdout).contains("status 75"),
        "{}",
        show(&output)
    );
}

/// A malformed line fails its day with the line number, and nothing of
/// that day is written; a later good line does not save it.
#[tokio::test]
async fn a_malformed_line_fails_its_day_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!(
        r#"{} {{day}} --records 3; if [ {{day}} = 2026-01-02 ]; then echo '{{"key": "x", "event_date": "2026-01-02", "value": 1}}'; {} {{day}} --records 1; fi"#,
        sample(),
        sample()
    );
    let output = run(range(&mut backfill(dir.path()), 1, 3).args(["--fetch-cmd", &fetch]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let out = text(&output.stdout);
    assert!(out.contains("2026-01-02  FAILED"), "{out}");
    assert!(out.contains("line 4"), "{out}");
    assert!(out.contains("updated_at"), "{out}");
    let store = sqlite(dir.path()).await;
    assert!(store.day_rows(jan(2)).await.unwrap().is_empty());
    assert_eq!(store.day_rows(jan(3)).await.unwrap().len(), 3);
}

/// `--fetch-files`: one file per day; a missing file fails its day (it is
/// not an empty day).
#[tokio::test]
async fn files_fetch_reads_a_day_per_file_and_a_missing_file_fails_its_day() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("exports")).unwrap();
    for d in [1, 3] {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{} 2026-01-0{d} --records 7", sample()))
            .output()
            .unwrap();
        std::fs::write(
            dir.path().join(format!("exports/2026-01-0{d}.jsonl")),
            out.stdout,
        )
        .unwrap();
    }
    let output =
        run(range(&mut backfill(dir.path()), 1, 3).args(["--fetch-files", "exports/{day}.jsonl"]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    assert!(
        text(&output.stdout).contains("exports/2026-01-02.jsonl"),
        "{}",
        show(&output)
    );
    let store = sqlite(dir.path()).await;
    assert_eq!(store.rows().await.unwrap().len(), 14);
}

fn alive(pid: i32) -> bool {
    // A zombie has exited; only its parent's wait is missing.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(") ").next().unwrap_or("").chars().next();
            state != Some('Z')
        })
        .unwrap_or(false)
}

/// A command that hangs is killed by the day's timeout, with the children
/// it started; the day fails and the run ends.
#[test]
fn a_hung_command_is_killed_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let fetch = format!(
        "sleep 300 & echo $! >> {p}; echo $$ >> {p}; sleep 300",
        p = pids.display()
    );
    let started = Instant::now();
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--fetch-cmd",
        &fetch,
        "--day-timeout",
        "1s",
        "--retries",
        "0",
    ]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        text(&output.stdout).contains("timed out"),
        "{}",
        show(&output)
    );
    let pids: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived its day");
    }
}

/// Ctrl-C stops starting days, lets the day in flight finish and commit,
/// and exits 130: whole days only, the rest missing, resumable with
/// `--only missing`.
#[tokio::test]
async fn sigint_finishes_the_day_in_flight_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("sleep 0.5; {} {{day}}", sample());
    let child = range(&mut backfill(dir.path()), 1, 20)
        .args(["--fetch-cmd", &fetch])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 130, "{}", show(&output));
    assert!(
        text(&output.stderr).contains("interrupted"),
        "{}",
        show(&output)
    );
    assert!(
        text(&output.stdout).contains("not started (stopped)"),
        "{}",
        show(&output)
    );
    let store = sqlite(dir.path()).await;
    let mut synced = 0;
    for d in 1..=20 {
        let rows = store.day_rows(jan(d)).await.unwrap().len();
        assert!(rows == 0 || rows == 100, "day {d} has {rows} rows");
        synced += usize::from(rows == 100);
    }
    assert!((1..20).contains(&synced), "{synced} days synced");

    let output = run(range(&mut backfill(dir.path()), 1, 20).args([
        "--fetch-cmd",
        &format!("{} {{day}}", sample()),
        "--only",
        "missing",
        "--json",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(synced_days(&json(&output)).len(), 20 - synced);
    assert_eq!(store.rows().await.unwrap().len(), 2000);
}

/// `status --json` is the ledger: one object per day with its state and
/// its entry (last sync with counts and digest, last failure).
#[test]
fn status_json_is_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(range(&mut backfill(dir.path()), 1, 2).args([
        "--fetch-cmd",
        &format!("{} {{day}} --fail-on 2026-01-02", sample()),
        "--run-id",
        "nightly-42",
    ]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let output = run(backfill(dir.path()).args([
        "status",
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-03",
        "--json",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let days = json(&output);
    let days = days.as_array().unwrap();
    assert_eq!(days.len(), 3);
    assert_eq!(days[0]["day"], "2026-01-01");
    assert_eq!(days[0]["state"], "synced");
    let synced = &days[0]["entry"]["synced"];
    assert_eq!(synced["run_id"], "nightly-42");
    assert_eq!(synced["mode"], "merge");
    assert_eq!(synced["counts"]["inserted"], 100);
    assert_eq!(synced["digest"].as_str().unwrap().len(), 32);
    assert!(synced["at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(days[1]["state"], "failed");
    let failure = &days[1]["entry"]["failure"];
    assert_eq!(failure["attempts"], 1);
    assert!(failure["error"].as_str().unwrap().contains("HTTP 500"));
    assert_eq!(days[2]["state"], "missing");
    assert!(days[2]["entry"].is_null());

    // One line per day (in a pipe, `status` now folds missing days and adds
    // the totals: `--format table` is this every-day view).
    let output = run(backfill(dir.path()).args([
        "status",
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-03",
        "--format",
        "table",
    ]));
    assert_eq!(code(&output), 0);
    let lines = text(&output.stdout);
    assert_eq!(lines.lines().count(), 4, "{lines}");
    assert!(lines
        .lines()
        .nth(2)
        .unwrap()
        .starts_with("2026-01-02  failed"));
}

/// N processes, each with its shard, in parallel against one Postgres,
/// leave exactly what one process leaves.
#[tokio::test]
async fn shards_in_parallel_converge_to_one_process() {
    let Some(url) = backfill_testkit::url().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("{} {{day}} --records 50", sample());
    let (sharded, single) = (
        backfill_testkit::unique_schema(),
        backfill_testkit::unique_schema(),
    );
    let children: Vec<_> = (0..3)
        .map(|i| {
            range(&mut backfill(dir.path()), 1, 20)
                .args(["--store", &url, "--schema", &sharded, "--fetch-cmd", &fetch])
                .args(["--shard", &format!("{i}/3"), "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut covered = Vec::new();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert_eq!(code(&output), 0, "{}", show(&output));
        covered.extend(synced_days(&json(&output)));
    }
    covered.sort();
    let all: Vec<String> = (1..=20).map(|d| jan(d).to_string()).collect();
    assert_eq!(covered, all, "each day exactly once");
    let output = run(range(&mut backfill(dir.path()), 1, 20).args([
        "--store",
        &url,
        "--schema",
        &single,
        "--fetch-cmd",
        &fetch,
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));

    let rows = |schema: String| {
        let url = url.clone();
        async move {
            let store = backfill_postgres::PostgresStore::builder()
                .schema(schema)
                .connect(&url)
                .await
                .unwrap();
            store.rows_with_tombstones().await.unwrap()
        }
    };
    let (a, b) = (rows(sharded).await, rows(single).await);
    assert_eq!(a.len(), 1000);
    assert_eq!(a, b);
}

/// A store that cannot be opened is exit 1 with a clear message, never the
/// password (exit 3 when it cannot be reached: the Postgres URLs here
/// name a closed port); so is a URL of no known store, and reading a
/// database that does not exist.
#[test]
fn a_bad_store_is_exit_1_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("{} {{day}}", sample());
    for (url, status) in [
        ("postgres://app:hunter2@127.0.0.1:1/db", 3),
        ("postgres://app@127.0.0.1:1/db?password=hunter2", 3),
        ("mysql://app:hunter2@127.0.0.1/db", 1),
        ("backfill.db", 1),
    ] {
        let output = run(range(&mut backfill(dir.path()), 1, 2).args([
            "--store",
            url,
            "--fetch-cmd",
            &fetch,
        ]));
        assert_eq!(code(&output), status, "{url}: {}", show(&output));
        let all = show(&output);
        assert!(!all.contains("hunter2"), "{all}");
        assert!(text(&output.stderr).starts_with("error: "), "{all}");
    }
    let output = run(range(&mut backfill(dir.path()), 1, 2).args([
        "--store",
        "postgres://app:hunter2@127.0.0.1:1/db",
        "--fetch-cmd",
        &fetch,
    ]));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("app:***@127.0.0.1:1/db") && stderr.contains("refused"),
        "{stderr}"
    );

    // A password equal to the user name: the user is still shown.
    let output = run(range(&mut backfill(dir.path()), 1, 2).args([
        "--store",
        "postgres://hunter2:hunter2@127.0.0.1:1/db",
        "--fetch-cmd",
        &fetch,
    ]));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("postgres://hunter2:***@127.0.0.1:1/db"),
        "{stderr}"
    );

    let output = run(backfill(dir.path()).args([
        "status",
        "--from",
        "2026-01-01",
        "--to",
        "2026-01-02",
        "--store",
        "sqlite://nothing.db",
    ]));
    assert_eq!(code(&output), 1, "{}", show(&output));
    assert!(text(&output.stderr).contains("no database at nothing.db"));
    assert!(
        !dir.path().join("nothing.db").exists(),
        "status created a database"
    );

    // A table name that is not a plain lowercase identifier.
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--table",
        "x; DROP TABLE y",
        "--fetch-cmd",
        &fetch,
    ]));
    assert_eq!(code(&output), 1, "{}", show(&output));
}

/// Usage errors are exit 1 and say what is wrong; `--help` is exit 0 with
/// examples.
#[test]
fn usage_errors_exit_1_and_help_has_examples() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["backfill", "--from", "2026-01-01", "--fetch-cmd", "true"],
        vec![
            "backfill",
            "--from",
            "2026-01-05",
            "--to",
            "2026-01-01",
            "--fetch-cmd",
            "true",
        ],
        vec!["backfill", "--from", "2026-01-01", "--to", "2026-01-02"],
        vec![
            "backfill",
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
            "--fetch-cmd",
            "a",
            "--fetch-files",
            "b",
        ],
        vec![
            "backfill",
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
            "--fetch-cmd",
            "a",
            "--shard",
            "3/3",
        ],
        vec!["sync", "--tz", "Mars/Olympus", "--fetch-cmd", "true"],
        vec![
            "backfill",
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
            "--fetch-cmd",
            "",
        ],
        vec![
            "backfill",
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
            "--fetch-files",
            "  ",
        ],
        vec!["frobnicate"],
    ] {
        let output = run(backfill(dir.path()).args(&args));
        assert_eq!(code(&output), 1, "{args:?}: {}", show(&output));
        assert!(!text(&output.stderr).is_empty());
    }
    for command in ["sync", "backfill", "status", "purge-tombstones"] {
        let output = run(backfill(dir.path()).args([command, "--help"]));
        assert_eq!(code(&output), 0);
        assert!(text(&output.stdout).contains("Example"), "{command} --help");
    }
    assert!(!dir.path().join("backfill.db").exists());
}

/// Replace mode over the command line: a later listing that lacks a key
/// deletes it (a tombstone), and `purge-tombstones` removes old tombstones.
#[tokio::test]
async fn replace_deletes_what_a_listing_lacks_and_purge_removes_tombstones() {
    let dir = tempfile::tempdir().unwrap();
    let day = |records: u32| format!("{} {{day}} --records {records}", sample());
    let output = run(range(&mut backfill(dir.path()), 1, 1).args(["--fetch-cmd", &day(5)]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--fetch-cmd",
        &day(3),
        "--mode",
        "replace",
        "--json",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(json(&output)["days"][0]["counts"]["unlisted"], 2);
    let store = sqlite(dir.path()).await;
    assert_eq!(store.rows().await.unwrap().len(), 3);
    assert_eq!(store.rows_with_tombstones().await.unwrap().len(), 5);
    // An empty listing is refused unless allowed.
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--fetch-cmd",
        "true",
        "--mode",
        "replace",
    ]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    assert_eq!(store.rows().await.unwrap().len(), 3);

    let output =
        run(backfill(dir.path()).args(["purge-tombstones", "--before", "2100-01-01", "--json"]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(json(&output)["purged"], 2);
    assert_eq!(store.rows_with_tombstones().await.unwrap().len(), 3);
}

// ---------------------------------------------------------------------------
// Safe defaults, the library's settings as flags, and the messages and
// output a person reads (issue 17).

fn stderr_lines(output: &Output) -> Vec<String> {
    text(&output.stderr).lines().map(str::to_owned).collect()
}

fn status_json(dir: &Path, from: u32, to: u32) -> Vec<Value> {
    let output = run(backfill(dir).args([
        "status",
        "--from",
        &jan(from).to_string(),
        "--to",
        &jan(to).to_string(),
        "--json",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    json(&output).as_array().unwrap().clone()
}

/// `--skip-unchanged` over the command line's streamed fetch: a re-run of
/// the same days counts their records `skipped`, not `unchanged`, and
/// leaves each day's ledger row as the first run wrote it.
#[test]
fn skip_unchanged_skips_streamed_days_and_keeps_their_ledger_rows() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("{} {{day}} --records 20", sample());
    let output = run(range(&mut backfill(dir.path()), 1, 3).args(["--fetch-cmd", &fetch]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let before = status_json(dir.path(), 1, 3);

    let output = run(range(&mut backfill(dir.path()), 1, 3).args([
        "--fetch-cmd",
        &fetch,
        "--skip-unchanged",
        "--json",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let report = json(&output);
    for day in report["days"].as_array().unwrap() {
        assert_eq!(day["counts"]["skipped"], 20, "{day}");
        assert_eq!(day["counts"]["unchanged"], 0, "{day}");
        assert_eq!(day["counts"]["inserted"], 0, "{day}");
    }
    let after = status_json(dir.path(), 1, 3);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(a["state"], "synced", "{a}");
        let (b, a) = (&b["entry"]["synced"], &a["entry"]["synced"]);
        assert_eq!(a["at"], b["at"], "synced_at changed: {a} vs {b}");
        assert_eq!(a["run_id"], b["run_id"], "run_id changed: {a} vs {b}");
        assert_eq!(a["counts"], b["counts"]);
    }
}

/// Replace refuses, by default, a listing that would delete more than half
/// of a day, naming the flag that allows it; the empty-listing refusal
/// names `--allow-empty-replace`. The report and the ledger say so in the
/// command's words, not the library's.
#[tokio::test]
async fn replace_refuses_deleting_most_of_a_day_and_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let day = |records: u32| format!("{} {{day}} --records {records}", sample());
    let output = run(range(&mut backfill(dir.path()), 1, 1).args(["--fetch-cmd", &day(100)]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let store = sqlite(dir.path()).await;

    let replace = |fetch: &str, extra: &[&str]| {
        run(range(&mut backfill(dir.path()), 1, 1)
            .args(["--fetch-cmd", fetch, "--mode", "replace"])
            .args(extra))
    };
    let ledger_error = || {
        status_json(dir.path(), 1, 1)[0]["entry"]["failure"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };

    // 3 records for a day of 100: refused, nothing deleted.
    let output = replace(&day(3), &[]);
    assert_eq!(code(&output), 2, "{}", show(&output));
    let out = text(&output.stdout);
    assert!(
        out.contains("would delete 97 of the day's 100 live rows"),
        "{out}"
    );
    assert!(out.contains("--max-delete-fraction 0.97"), "{out}");
    assert!(!out.contains("replace guard"), "{out}");
    assert!(text(&output.stderr).contains("--max-delete-fraction"));
    assert_eq!(store.day_rows(jan(1)).await.unwrap().len(), 100);
    let error = ledger_error();
    assert!(error.contains("--max-delete-fraction"), "{error}");
    assert!(!error.contains("replace guard"), "{error}");

    // The same in the JSON report.
    let output = replace(&day(3), &["--json"]);
    assert_eq!(code(&output), 2, "{}", show(&output));
    let failed = json(&output)["failed"][0]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(failed.contains("--max-delete-fraction"), "{failed}");

    // An empty listing names its own flag.
    let output = replace("true", &[]);
    assert_eq!(code(&output), 2, "{}", show(&output));
    let out = text(&output.stdout);
    assert!(out.contains("--allow-empty-replace"), "{out}");
    assert!(!out.contains("replace guard"), "{out}");
    assert!(ledger_error().contains("--allow-empty-replace"));

    // Half of the day is allowed; the flag allows more.
    let output = replace(&day(50), &["--json"]);
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(json(&output)["days"][0]["counts"]["unlisted"], 50);
    let output = replace(&day(3), &["--max-delete-fraction", "100%", "--json"]);
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(json(&output)["days"][0]["counts"]["unlisted"], 47);
    assert_eq!(store.day_rows(jan(1)).await.unwrap().len(), 3);
    let output = replace(&day(1), &["--max-delete-fraction", "0.5"]);
    assert_eq!(code(&output), 2, "{}", show(&output));
    let output = run(range(&mut backfill(dir.path()), 1, 1)
        .args(["--fetch-cmd", &day(1), "--mode", "replace"])
        .env("BACKFILL_MAX_DELETE_FRACTION", "0.7"));
    assert_eq!(code(&output), 0, "{}", show(&output));

    // An allowed empty listing empties the day, whatever the fraction.
    let output = replace("true", &["--allow-empty-replace"]);
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert!(store.day_rows(jan(1)).await.unwrap().is_empty());

    let output = replace(&day(3), &["--max-delete-fraction", "1.5"]);
    assert_eq!(code(&output), 1, "{}", show(&output));
}

/// The delays of `--retry-delay` and `--max-retry-delay` (or their
/// environment variables) are the ones the run waits; the default first
/// delay is a second or more, not a few hundred milliseconds.
#[test]
fn retry_delays_are_flags_with_a_patient_default() {
    let dir = tempfile::tempdir().unwrap();
    let delays = |output: &Output| -> Vec<f64> {
        stderr_lines(output)
            .iter()
            .filter_map(|l| l.split("retrying in ").nth(1))
            .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    let busy = "echo busy >&2; exit 75";
    let started = Instant::now();
    let output = run(range(&mut backfill(dir.path()), 1, 1)
        .args(["--fetch-cmd", busy, "--retries", "3"])
        .args(["--retry-delay", "200ms"])
        .env("BACKFILL_MAX_RETRY_DELAY", "300ms"));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let waited = delays(&output);
    assert_eq!(waited.len(), 3, "{}", show(&output));
    // Each delay is drawn from the upper half of 200, 300 (capped), 300 ms.
    for (delay, full) in waited.iter().zip([0.2, 0.3, 0.3]) {
        assert!(
            *delay >= full / 2.0 - 0.05 && *delay <= full + 0.05,
            "{waited:?}"
        );
    }
    assert!(started.elapsed() >= Duration::from_millis(350));

    let output =
        run(range(&mut backfill(dir.path()), 2, 2).args(["--fetch-cmd", busy, "--retries", "1"]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let waited = delays(&output);
    assert!(
        waited.len() == 1 && waited[0] >= 0.95,
        "default delay {waited:?}: {}",
        show(&output)
    );
}

/// `--fail-fast` starts no day after a failure and says, on one line,
/// which days were left and how to resume them.
#[test]
fn fail_fast_leaves_the_rest_on_one_line_with_the_command_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(range(&mut backfill(dir.path()), 1, 6).args([
        "--fetch-cmd",
        &format!("{} {{day}} --records 5 --fail-on 2026-01-02", sample()),
        "--fail-fast",
    ]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let out = text(&output.stdout);
    assert!(
        out.contains("2026-01-03 … 2026-01-06  not started (stopped by a failed day): 4 days"),
        "{out}"
    );
    assert_eq!(out.matches("not started").count(), 1, "{out}");
    let err = text(&output.stderr);
    assert!(
        err.contains(
            "backfill backfill --from 2026-01-01 --to 2026-01-06 --only missing-or-failed"
        ),
        "{err}"
    );
}

/// `--lenient-event-dates` accepts a record of another day than the one
/// fetched; without it the day fails.
#[tokio::test]
async fn lenient_event_dates_accept_records_of_other_days() {
    let dir = tempfile::tempdir().unwrap();
    // Day 1's fetch prints day 2's records.
    let fetch = format!(": {{day}}; {} 2026-01-02 --records 4", sample());
    let output = run(range(&mut backfill(dir.path()), 1, 1).args(["--fetch-cmd", &fetch]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    assert!(
        text(&output.stdout).contains("event_date"),
        "{}",
        show(&output)
    );
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--fetch-cmd",
        &fetch,
        "--lenient-event-dates",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(
        sqlite(dir.path())
            .await
            .day_rows(jan(2))
            .await
            .unwrap()
            .len(),
        4
    );
}

/// `--stream-memory` is the day's memory budget: at one byte every chunk
/// goes to a temporary file (here in a `TMPDIR` that does not exist, so
/// the day fails saying so), where the default keeps a small day in
/// memory.
#[test]
fn stream_memory_is_the_budget_before_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("{} {{day}} --records 50", sample());
    let missing = dir.path().join("no-such-tmp");
    let output = run(range(&mut backfill(dir.path()), 1, 1)
        .args(["--fetch-cmd", &fetch, "--stream-memory", "1"])
        .env("TMPDIR", &missing));
    assert_eq!(code(&output), 2, "{}", show(&output));
    assert!(
        text(&output.stdout).contains("temporary file"),
        "{}",
        show(&output)
    );
    let output = run(range(&mut backfill(dir.path()), 1, 1)
        .args(["--fetch-cmd", &fetch])
        .env("BACKFILL_STREAM_MEMORY", "64MiB")
        .env("TMPDIR", &missing));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--fetch-cmd",
        &fetch,
        "--stream-memory",
        "64 parsecs",
    ]));
    assert_eq!(code(&output), 1, "{}", show(&output));
}

/// `--help` says which days `--only missing` picks in the ledger's own
/// three states: a day whose only attempt failed is `failed`.
#[test]
fn only_missing_help_matches_the_ledger_states() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(backfill(dir.path()).args(["backfill", "--help"]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let help = text(&output.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!help.contains("never synced"), "{help}");
    assert!(
        help.contains("missing: Days with no attempt recorded: a day whose only attempt failed is `failed`, not `missing`"),
        "{help}"
    );
    assert!(
        help.contains("`synced` (its last attempt succeeded), `failed` (its last attempt failed"),
        "{help}"
    );
    for flag in [
        "--max-delete-fraction",
        "--retry-delay",
        "--max-retry-delay",
        "--fail-fast",
        "--lenient-event-dates",
        "--stream-memory",
        "BACKFILL_RETRY_DELAY",
    ] {
        assert!(help.contains(flag), "{flag} not in --help");
    }
}

/// A day is exactly `YYYY-MM-DD` (or `today`, `yesterday`).
#[test]
fn a_day_is_exactly_yyyy_mm_dd() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &[
            "backfill",
            "--from",
            "2026-1-2",
            "--to",
            "2026-01-03",
            "--fetch-cmd",
            "true",
        ][..],
        &["sync", "--day", "2026-01-2", "--fetch-cmd", "true"],
        &["status", "--from", "2026-01-01", "--to", "2026-01-3"],
    ] {
        let output = run(backfill(dir.path()).args(args));
        assert_eq!(code(&output), 1, "{}", show(&output));
        assert!(
            text(&output.stderr).contains("YYYY-MM-DD"),
            "{}",
            show(&output)
        );
    }
    assert!(!dir.path().join("backfill.db").exists());
}

/// A SQLite file in a directory that does not exist, a bare path and
/// `sqlite:/x.db` are each told what to do.
#[test]
fn sqlite_store_mistakes_say_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("{} {{day}}", sample());
    let cases: [(&str, &[&str]); 5] = [
        (
            "sqlite://no/such/dir/x.db",
            &["the directory no/such/dir does not exist"],
        ),
        ("/abs/x.db", &["sqlite:///abs/x.db"]),
        ("x.db", &["sqlite://x.db", "sqlite:///"]),
        ("sqlite:/srv/x.db", &["sqlite:///srv/x.db"]),
        ("sqlite:x.db", &["sqlite://x.db"]),
    ];
    for (url, says) in cases {
        let output = run(range(&mut backfill(dir.path()), 1, 1).args([
            "--store",
            url,
            "--fetch-cmd",
            &fetch,
        ]));
        assert_eq!(code(&output), 1, "{url}: {}", show(&output));
        let err = text(&output.stderr);
        for said in says {
            assert!(err.contains(said), "{url}: {err}");
        }
        assert!(!err.contains("Error code 14"), "{url}: {err}");
    }
    let output = run(backfill(dir.path()).args(["status", "--store", "sqlite://no/such/dir/x.db"]));
    assert_eq!(code(&output), 1, "{}", show(&output));
    assert!(
        text(&output.stderr).contains("no/such/dir does not exist"),
        "{}",
        show(&output)
    );
}

/// A server that accepts connections and never answers (a hung host, a
/// proxy with nothing behind it) is a store out of reach: exit 3 once the
/// URL's `connect_timeout` has passed, not a command that hangs.
#[test]
fn a_postgres_that_accepts_and_never_answers_is_out_of_reach() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accept every connection and hold it open without a word.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let store = format!("postgres://app@127.0.0.1:{port}/db?connect_timeout=1");
    let started = Instant::now();
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--store",
        &store,
        "--fetch-cmd",
        "true",
    ]));
    assert_eq!(code(&output), 3, "{}", show(&output));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let err = text(&output.stderr);
    assert!(err.contains("did not answer"), "{err}");
    assert!(!err.contains("creating a new object"), "{err}");
}

/// Postgres errors are the server's or the driver's, without the pool's
/// wording; `status` on a database, schema or table that does not exist
/// says nothing has been synced there, as it does for SQLite.
#[tokio::test]
async fn postgres_errors_read_like_the_server_and_status_finds_nothing_synced() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--store",
        "postgres://app:hunter2@127.0.0.1:1/db",
        "--fetch-cmd",
        "true",
    ]));
    // A refused connection is a store that cannot be reached: exit 3.
    assert_eq!(code(&output), 3, "{}", show(&output));
    let err = text(&output.stderr);
    assert!(!err.contains("creating a new object"), "{err}");
    assert!(
        err.contains("the server at 127.0.0.1:1 refused the connection (server down?)"),
        "{err}"
    );

    let Some(url) = backfill_testkit::url().await else {
        return;
    };
    let (base, _) = url.rsplit_once('/').unwrap();
    let status = |store: &str, extra: &[&str]| {
        run(backfill(dir.path())
            .args(["status", "--store", store])
            .args(extra))
    };
    let schema = backfill_testkit::unique_schema();
    for (store, extra, what) in [
        (
            format!("{base}/no_such_database"),
            vec![],
            "database \"no_such_database\" does not exist",
        ),
        (
            url.clone(),
            vec!["--schema", schema.as_str()],
            "does not exist",
        ),
    ] {
        let output = status(&store, &extra);
        assert_eq!(code(&output), 1, "{}", show(&output));
        let err = text(&output.stderr);
        assert!(err.contains(what), "{err}");
        assert!(err.contains("nothing has been synced there"), "{err}");
        assert!(!err.contains("create_if_missing"), "{err}");
        assert!(!err.contains("creating a new object"), "{err}");
    }
    // A schema with the store's tables, but not this records table.
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--store",
        &url,
        "--schema",
        &schema,
        "--fetch-cmd",
        &format!("{} {{day}} --records 1", sample()),
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let output = status(&url, &["--schema", &schema, "--table", "other_records"]);
    assert_eq!(code(&output), 1, "{}", show(&output));
    let err = text(&output.stderr);
    assert!(err.contains("nothing has been synced there"), "{err}");
    assert!(!err.contains("create_if_missing"), "{err}");
}

/// `status` with no range is the last 30 days, today included; in a pipe
/// a run of missing days is one line and the totals end it; a calendar
/// fits `COLUMNS`.
#[test]
fn status_defaults_to_30_days_folds_missing_days_and_fits_the_width() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(backfill(dir.path()).args([
        "sync",
        "--day",
        "today",
        "--fetch-cmd",
        &format!("{} {{day}} --records 2", sample()),
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let today = chrono::Utc::now().date_naive();

    let output = run(backfill(dir.path()).args(["status", "--json"]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let days = json(&output);
    let days = days.as_array().unwrap();
    assert_eq!(days.len(), 30);
    assert_eq!(days[29]["day"], today.to_string());
    assert_eq!(days[29]["state"], "synced");
    assert_eq!(days[0]["day"], (today - chrono::Days::new(29)).to_string());

    let output = run(backfill(dir.path()).arg("status"));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let out = text(&output.stdout);
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(out.contains("missing (29 days)"), "{out}");
    assert!(
        out.trim_end()
            .ends_with("30 days: 1 synced, 0 failed, 29 missing"),
        "{out}"
    );

    let output = run(backfill(dir.path())
        .args(["status", "--format", "calendar"])
        .env("COLUMNS", "32"));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let out = text(&output.stdout);
    for line in out.lines() {
        assert!(line.chars().count() <= 32, "{line:?}\n{out}");
    }
}

/// After a Ctrl-C the days not started are one line, and stderr ends with
/// the command that runs what is left, which does.
#[tokio::test]
async fn sigint_says_the_days_left_on_one_line_and_how_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("sleep 0.5; {} {{day}} --records 10", sample());
    let child = range(&mut backfill(dir.path()), 1, 20)
        .args(["--fetch-cmd", &fetch])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 130, "{}", show(&output));
    let out = text(&output.stdout);
    assert_eq!(out.matches("not started").count(), 1, "{out}");
    assert!(
        out.contains(" … 2026-01-20  not started (stopped): "),
        "{out}"
    );
    let lines = stderr_lines(&output);
    let resume = lines.last().unwrap().trim();
    assert!(
        resume.starts_with(
            "backfill backfill --from 2026-01-01 --to 2026-01-20 --only missing-or-failed"
        ),
        "{}",
        show(&output)
    );
    // As a person pastes it: through the shell, `backfill` on the PATH.
    let path = format!(
        "{}:{}",
        Path::new(BIN).parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut shell = Command::new("sh");
    shell
        .args(["-c", resume])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .env("PATH", path);
    for (name, _) in std::env::vars() {
        if name.starts_with("BACKFILL_") {
            shell.env_remove(name);
        }
    }
    let output = run(&mut shell);
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(sqlite(dir.path()).await.rows().await.unwrap().len(), 200);
}

/// On a terminal, nothing redraws the progress bar after the last lines:
/// neither after the report of a run stopped by Ctrl-C, nor after the
/// message of a second Ctrl-C. The terminal is `script`'s pseudo-terminal.
#[test]
fn the_progress_bar_is_not_redrawn_after_the_last_message() {
    if Command::new("script").arg("--version").output().is_err() {
        backfill_testkit::skip("no `script` (util-linux) for a pseudo-terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    for (fetch, interrupts, last) in [
        // The fetch's parent is the command: its pid is `$PPID`.
        ("echo $PPID > {pid}; sleep 30", 2, "interrupted again"),
        ("echo $PPID > {pid}; sleep 1", 1, "to resume"),
    ] {
        let _ = std::fs::remove_file(&pid);
        let typescript = dir.path().join("typescript");
        let fetch = fetch.replace("{pid}", &pid.display().to_string());
        let line =
            format!("{BIN} backfill --from 2026-01-01 --to 2026-01-09 --fetch-cmd '{fetch}'");
        let mut script = Command::new("script");
        script
            .args(["-q", "-f", "-e", "-c", &line])
            .arg(&typescript)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = script.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let command = loop {
            if let Some(pid) = std::fs::read_to_string(&pid)
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the fetch never started");
            std::thread::sleep(Duration::from_millis(50));
        };
        for _ in 0..interrupts {
            std::thread::sleep(Duration::from_millis(500));
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(command),
                nix::sys::signal::Signal::SIGINT,
            )
            .unwrap();
        }
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130));
        let screen = String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).into_owned();
        let at = screen
            .rfind(last)
            .unwrap_or_else(|| panic!("no {last:?} in {screen:?}"));
        let after = &screen[at..];
        assert!(
            !after.contains("/9 days"),
            "the bar after {last:?}: {after:?}"
        );
        assert!(after.contains("--only missing-or-failed"), "{after:?}");
    }
}

// Faults of the fetch, the store and the process itself (issue 17 §1,
// items 3–8).

/// A fetch command that cannot run — not found (status 127), not
/// executable (126) — is a configuration error, not a failure of the day:
/// the run stops at the first day, exits 1 naming the command, and leaves
/// the ledger of every day as it was.
#[test]
fn a_fetch_command_that_cannot_run_stops_the_run_and_leaves_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let good = format!("{} {{day}} --records 2", sample());
    let output = run(range(&mut backfill(dir.path()), 1, 6).args(["--fetch-cmd", &good]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    // A script without its executable bit.
    std::fs::write(dir.path().join("fetch.sh"), "#!/bin/sh\necho '{}'\n").unwrap();
    for (fetch, status) in [
        ("definitely-not-a-command-xyz {day}", "127"),
        ("./fetch.sh {day}", "126"),
    ] {
        let output = run(range(&mut backfill(dir.path()), 1, 6).args([
            "--fetch-cmd",
            fetch,
            "--concurrency",
            "2",
        ]));
        assert_eq!(code(&output), 1, "{fetch}: {}", show(&output));
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("error: the fetch command cannot run")
                && stderr.contains(&format!("status {status}"))
                && stderr.contains(fetch),
            "{fetch}: {}",
            show(&output)
        );
        // Only the days already in flight were tried.
        let tried = stderr.matches("FAILED").count();
        assert!((1..=2).contains(&tried), "{tried} days tried: {stderr}");
        let output = run(backfill(dir.path()).args([
            "status",
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-06",
            "--json",
        ]));
        assert_eq!(code(&output), 0, "{}", show(&output));
        for day in json(&output).as_array().unwrap() {
            assert_eq!(day["state"], "synced", "{fetch}: {day}");
            assert!(day["entry"]["failure"].is_null(), "{fetch}: {day}");
        }
    }
}

/// A store that cannot be reached — connection refused, a host name that
/// does not resolve, a server that drops the connection (restarting), a
/// SQLite database locked at open — exits 3, which a scheduler retries; a
/// store that is reached but refuses (a wrong password, no such database)
/// stays exit 1.
#[tokio::test]
async fn an_unreachable_store_exits_3_and_a_refusing_one_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("{} {{day}}", sample());
    // A server that closes every connection at once.
    let dropping = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dropping.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for connection in dropping.incoming() {
            drop(connection);
        }
    });
    for url in [
        "postgres://app:hunter2@127.0.0.1:1/db".to_owned(),
        "postgres://app:hunter2@no-such-host.invalid/db".to_owned(),
        format!("postgres://app:hunter2@127.0.0.1:{port}/db"),
    ] {
        let url = url.as_str();
        let output = run(range(&mut backfill(dir.path()), 1, 2).args([
            "--store",
            url,
            "--fetch-cmd",
            &fetch,
        ]));
        assert_eq!(code(&output), 3, "{url}: {}", show(&output));
        assert!(text(&output.stderr).starts_with("error: "), "{url}");
        assert!(!show(&output).contains("hunter2"), "{}", show(&output));
        let output = run(backfill(dir.path()).args([
            "status",
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-02",
            "--store",
            url,
        ]));
        assert_eq!(code(&output), 3, "status {url}: {}", show(&output));
    }

    if let Some(url) = backfill_testkit::url().await {
        let schema = backfill_testkit::unique_schema();
        let base = "postgres://postgres:postgres@";
        if let Some(rest) = url.strip_prefix(base) {
            let (server, _) = rest.rsplit_once('/').unwrap();
            for bad in [
                format!("postgres://postgres:wrong@{server}/postgres"),
                format!("{base}{server}/no_such_database"),
            ] {
                let output = run(range(&mut backfill(dir.path()), 1, 1).args([
                    "--store",
                    &bad,
                    "--schema",
                    &schema,
                    "--fetch-cmd",
                    &fetch,
                ]));
                assert_eq!(code(&output), 1, "{bad}: {}", show(&output));
            }
        }
    }

    // A SQLite database another process holds an exclusive lock on.
    let db = dir.path().join("locked.db");
    let mut holder = holding_a_lock(&db, &["CREATE TABLE t (x)", "BEGIN EXCLUSIVE"]);
    let output = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--store",
        "sqlite://locked.db",
        "--fetch-cmd",
        &fetch,
    ]));
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(code(&output), 3, "{}", show(&output));
    assert!(text(&output.stderr).contains("locked"), "{}", show(&output));
}

/// Another process (Python's `sqlite3`) that runs `statements` on the
/// database `db` and then holds on, its transaction open, for 60 s; returned
/// once it holds the lock.
fn holding_a_lock(db: &Path, statements: &[&str]) -> std::process::Child {
    let mut holder = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys, time\n\
             c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
             for statement in sys.argv[2:]:\n    c.execute(statement)\n\
             print('locked', flush=True)\n\
             time.sleep(60)\n",
        )
        .arg(db)
        .args(statements)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    holder
}

/// A SQLite store that opens (WAL mode, its tables in place) while another
/// process holds the write lock: exit 3 before any day is fetched, with
/// the lock named, not one "database is locked" per day. Released, the
/// same command runs.
#[test]
fn a_write_locked_sqlite_store_exits_3_and_fetches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fetch = format!("sh -c 'touch fetched-$1; {} $1' sh {{day}}", sample());
    let first = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--store",
        "sqlite://busy.db",
        "--fetch-cmd",
        &fetch,
    ]));
    assert_eq!(code(&first), 0, "{}", show(&first));
    for held in ["BEGIN IMMEDIATE", "BEGIN EXCLUSIVE"] {
        let mut holder = holding_a_lock(&dir.path().join("busy.db"), &[held]);
        let output = run(range(&mut backfill(dir.path()), 2, 4).args([
            "--store",
            "sqlite://busy.db",
            "--fetch-cmd",
            &fetch,
        ]));
        let _ = holder.kill();
        let _ = holder.wait();
        assert_eq!(code(&output), 3, "{held}: {}", show(&output));
        let err = text(&output.stderr);
        assert!(err.contains("locked by another writer"), "{held}: {err}");
        for day in 2..=4 {
            assert!(
                !dir.path().join(format!("fetched-{}", jan(day))).exists(),
                "{held}: day {day} was fetched"
            );
        }
    }
    let after = run(range(&mut backfill(dir.path()), 2, 4).args([
        "--store",
        "sqlite://busy.db",
        "--fetch-cmd",
        &fetch,
    ]));
    assert_eq!(code(&after), 0, "{}", show(&after));
}

/// `backfill` alone prints its usage on stderr and exits 1, like every
/// other usage error.
#[test]
fn no_arguments_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&mut backfill(dir.path()));
    assert_eq!(code(&output), 1, "{}", show(&output));
    assert!(text(&output.stderr).contains("Usage"), "{}", show(&output));
}

/// A UTF-8 byte-order mark at the start of a file or of a command's output
/// is skipped, with CRLF line ends, as a file written on Windows has them.
#[tokio::test]
async fn a_byte_order_mark_is_skipped_in_files_and_command_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("exports")).unwrap();
    let lines = Command::new("sh")
        .arg("-c")
        .arg(format!("{} 2026-01-01 --records 4", sample()))
        .output()
        .unwrap();
    let mut file = b"\xEF\xBB\xBF".to_vec();
    file.extend(text(&lines.stdout).replace('\n', "\r\n").into_bytes());
    std::fs::write(dir.path().join("exports/2026-01-01.jsonl"), file).unwrap();
    let output =
        run(range(&mut backfill(dir.path()), 1, 1).args(["--fetch-files", "exports/{day}.jsonl"]));
    assert_eq!(code(&output), 0, "{}", show(&output));

    let fetch = format!("printf '\\357\\273\\277'; {} {{day}} --records 5", sample());
    let output = run(range(&mut backfill(dir.path()), 2, 2).args(["--fetch-cmd", &fetch]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let store = sqlite(dir.path()).await;
    assert_eq!(store.day_rows(jan(1)).await.unwrap().len(), 4);
    assert_eq!(store.day_rows(jan(2)).await.unwrap().len(), 5);
}

/// Killed outright (SIGKILL, as the OOM killer kills), the command takes
/// its fetch commands and their children with it: nothing it started is
/// left running.
#[test]
fn fetch_commands_die_with_a_killed_backfill() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let fetch = format!(
        "sleep 300 & echo $! >> {p}; echo $$ >> {p}; wait",
        p = pids.display()
    );
    let mut child = range(&mut backfill(dir.path()), 1, 2)
        .args(["--fetch-cmd", &fetch, "--concurrency", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let read = || -> Vec<i32> {
        std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while read().len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    let pids = read();
    assert_eq!(pids.len(), 4, "{pids:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<i32> = pids.into_iter().filter(|p| alive(*p)).collect();
    for pid in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(left.is_empty(), "{left:?} outlived the killed command");
}

/// A command that exits 0 while a process it started outside its process
/// group (`setsid`) still holds its stdout fails its day within seconds,
/// naming that process, rather than waiting for the day's timeout.
#[test]
fn a_day_whose_stdout_is_held_by_an_escaped_process_fails_in_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let escaped = dir.path().join("escaped");
    // The command waits for the process to have left its group.
    let fetch = format!(
        "setsid sh -c 'echo $$ > {e}.tmp; mv {e}.tmp {e}; exec sleep 60' & \
         while [ ! -e {e} ]; do sleep 0.05; done; {} {{day}} --records 3; exit 0",
        sample(),
        e = escaped.display()
    );
    let started = Instant::now();
    let output =
        run(range(&mut backfill(dir.path()), 1, 1).args(["--fetch-cmd", &fetch, "--retries", "0"]));
    let took = started.elapsed();
    let pid: i32 = std::fs::read_to_string(&escaped)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(code(&output), 2, "{}", show(&output));
    assert!(took < Duration::from_secs(30), "{took:?}");
    let out = text(&output.stdout);
    assert!(
        out.contains("standard output is still held open") && out.contains(&format!("pid {pid}")),
        "{}",
        show(&output)
    );
}

/// `--column` and `--columns FILE`: typed columns in the SQLite table,
/// queried with plain SQL; a record that does not fit fails its day and
/// writes nothing of it; every command on the table takes the same
/// declaration (here from `BACKFILL_COLUMNS`); Postgres keeps the same.
#[tokio::test]
async fn typed_columns_are_kept_and_bad_data_fails_its_day() {
    let dir = tempfile::tempdir().unwrap();
    for d in 1..=3 {
        let day = jan(d);
        let total = if d == 2 {
            r#""12 EUR""#.to_owned()
        } else {
            format!("{}", d * 100)
        };
        let lines = format!(
            "{{\"key\": \"o:{day}\", \"event_date\": \"{day}\", \"updated_at\": \"{day}T09:00:00Z\", \
             \"value\": {{\"status\": \"placed\", \"total_cents\": {total}, \"customer\": {{\"id\": \"c{d}\"}}}}}}\n"
        );
        std::fs::write(dir.path().join(format!("{day}.jsonl")), lines).unwrap();
    }
    let file = dir.path().join("columns.json");
    std::fs::write(
        &file,
        r#"["total_cents:integer", {"name": "customer", "type": "text", "path": "customer.id", "index": true}]"#,
    )
    .unwrap();
    let output = run(range(&mut backfill(dir.path()), 1, 3)
        .args(["--fetch-files", "{day}.jsonl", "--column", "status:text"])
        .env("BACKFILL_COLUMNS", &file));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let out = text(&output.stdout);
    assert!(out.contains("2026-01-02  FAILED"), "{out}");
    assert!(
        out.contains("column total_cents (path total_cents): the field is not an integer"),
        "{out}"
    );
    let conn = rusqlite::Connection::open(dir.path().join("backfill.db")).unwrap();
    let rows: Vec<(String, i64, String)> = conn
        .prepare("SELECT status, total_cents, customer FROM backfill_records ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        [
            ("placed".into(), 100, "c1".into()),
            ("placed".into(), 300, "c3".into())
        ]
    );
    // The same declaration reads the ledger; none is refused, naming a column.
    let status = run(backfill(dir.path())
        .args([
            "status",
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-03",
            "--column",
            "status:text",
        ])
        .env("BACKFILL_COLUMNS", &file));
    assert_eq!(code(&status), 0, "{}", show(&status));
    let bare =
        run(backfill(dir.path()).args(["status", "--from", "2026-01-01", "--to", "2026-01-03"]));
    assert_ne!(code(&bare), 0, "{}", show(&bare));
    assert!(text(&bare.stderr).contains("status"), "{}", show(&bare));
    // A file that never ends is refused, not read to the end.
    let endless = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--fetch-files",
        "{day}.jsonl",
        "--columns",
        "/dev/zero",
    ]));
    assert_ne!(code(&endless), 0);
    assert!(
        text(&endless.stderr).contains("larger than"),
        "{}",
        show(&endless)
    );
    // A bad declaration is a usage error, before anything runs.
    let bad = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--fetch-files",
        "{day}.jsonl",
        "--column",
        "key:text",
    ]));
    assert_ne!(code(&bad), 0);
    assert!(text(&bad.stderr).contains("key"), "{}", show(&bad));
    // Another declaration (`customer` gone, `total_cents` a double) is
    // refused, naming the column, unless changes are allowed.
    let changed = |allow: bool| {
        let mut command = backfill(dir.path());
        range(&mut command, 1, 1).args([
            "--fetch-files",
            "{day}.jsonl",
            "--column",
            "status:text",
            "--column",
            "total_cents:double",
        ]);
        if allow {
            command.arg("--allow-column-changes");
        }
        run(&mut command)
    };
    let refused = changed(false);
    assert_ne!(code(&refused), 0, "{}", show(&refused));
    assert!(
        text(&refused.stderr).contains("total_cents"),
        "{}",
        show(&refused)
    );
    let allowed = changed(true);
    assert_eq!(code(&allowed), 0, "{}", show(&allowed));
    let rows: Vec<(String, f64)> = conn
        .prepare("SELECT typeof(total_cents), total_cents FROM backfill_records ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, [("real".into(), 100.0), ("real".into(), 300.0)]);
    let customer: i64 = conn
        .query_row(
            "SELECT count(*) FROM pragma_table_info('backfill_records') WHERE name = 'customer'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(customer, 0, "the undeclared column is dropped");
    // Postgres keeps the same columns, in its own types.
    let Some(url) = backfill_testkit::url().await else {
        return;
    };
    let schema = backfill_testkit::unique_schema();
    let output = run(range(&mut backfill(dir.path()), 1, 3)
        .args(["--fetch-files", "{day}.jsonl", "--column", "status:text"])
        .args(["--store", &url, "--schema", &schema])
        .env("BACKFILL_COLUMNS", &file));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let (client, connection) = url
        .parse::<backfill_postgres::tokio_postgres::Config>()
        .unwrap()
        .connect(backfill_postgres::tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let sql = format!(
        "SELECT status, total_cents, customer FROM \"{schema}\".backfill_records ORDER BY key"
    );
    let rows: Vec<(String, i64, String)> = client
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        [
            ("placed".into(), 100, "c1".into()),
            ("placed".into(), 300, "c3".into())
        ]
    );
}

/// A profile of `backfill.toml` configures a run; flags and `BACKFILL_*`
/// variables win over it; `backfill config` says where each setting
/// comes from, the password hidden.
#[tokio::test]
async fn a_profile_configures_the_run_and_flags_win_over_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("days")).unwrap();
    let line = |key: &str, day: u32, total: u32| {
        format!(
            r#"{{"key":"{key}","event_date":"2026-01-{day:02}","value":{{"total":{total}}},"updated_at":"2026-01-{day:02}T09:00:00Z"}}"#
        )
    };
    for day in 1..=2 {
        let lines = [
            line(&format!("a{day}"), day, 1),
            line(&format!("b{day}"), day, 2),
        ]
        .join("\n");
        std::fs::write(
            dir.path().join(format!("days/2026-01-{day:02}.jsonl")),
            lines,
        )
        .unwrap();
    }
    std::fs::write(
        dir.path().join("backfill.toml"),
        r#"profile = "shop"

[profiles.shop]
store = "sqlite://shop.db"
table = "orders"
columns = ["total:integer"]
fetch_files = "days/{day}.jsonl"
retries = 4
retry_delay = "3s"

[profiles.warehouse]
store = "postgres://etl@localhost:1/w"
password_env = "WAREHOUSE_PASSWORD"
"#,
    )
    .unwrap();
    let output = run(range(&mut backfill(dir.path()), 1, 2).arg("--json"));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(totals(&json(&output)), (4, 4));
    let store = SqliteStore::builder(dir.path().join("shop.db"))
        .table("orders")
        .columns(vec![
            backfill_core::columns::Column::parse("total:integer").unwrap()
        ])
        .open()
        .await
        .unwrap();
    assert_eq!(store.rows().await.unwrap().len(), 4);

    // Where each setting comes from.
    let output = run(backfill(dir.path())
        .args(["config", "--json", "--retries", "1"])
        .env("BACKFILL_TABLE", "other"));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let settings = json(&output);
    let source = |key: &str| settings[key]["source"].as_str().unwrap().to_owned();
    let value = |key: &str| settings[key]["value"].as_str().map(str::to_owned);
    assert_eq!(source("store"), "backfill.toml [shop]");
    assert_eq!(value("retries").as_deref(), Some("1"));
    assert_eq!(source("retries"), "--retries");
    assert_eq!(
        (value("table").as_deref(), source("table").as_str()),
        (Some("other"), "BACKFILL_TABLE")
    );
    assert_eq!(
        (
            value("retry_delay").as_deref(),
            source("retry_delay").as_str()
        ),
        (Some("3s"), "backfill.toml [shop]")
    );
    assert_eq!(
        (
            value("max_retry_delay").as_deref(),
            source("max_retry_delay").as_str()
        ),
        (Some("5m"), "default")
    );
    assert_eq!(value("columns").as_deref(), Some(r#"["total:integer"]"#));

    // The password comes from its variable, and is never shown.
    let output = run(backfill(dir.path())
        .args(["config", "--profile", "warehouse"])
        .env("WAREHOUSE_PASSWORD", "hunter2-secret"));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let shown = text(&output.stdout);
    assert!(
        shown.contains("postgres://etl:***@localhost:1/w"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
    let output = run(backfill(dir.path()).args(["config", "--profile", "warehouse"]));
    assert_eq!(code(&output), 1, "{}", show(&output));
    assert!(
        text(&output.stderr).contains(
            "backfill.toml:13: password_env: the environment variable WAREHOUSE_PASSWORD is not set"
        ),
        "{}",
        show(&output)
    );
}

/// A file with an unknown key, a value of the wrong type, a password, or
/// a profile it lacks: one error naming the file, the line and the key,
/// exit 1, and nothing run.
#[test]
fn a_bad_configuration_file_is_exit_1_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[profiles.default]\nstore = \"sqlite://x.db\"\nretry_dealy = \"2s\"\n",
            "bad.toml:3: unknown field `retry_dealy`",
        ),
        ("[profiles.default]\nretries = \"two\"\n", "bad.toml:2: "),
        (
            "[profiles.default]\n\nday_timeout = \"forever\"\n",
            "bad.toml:3: day_timeout: `forever` is not a duration",
        ),
        (
            "[profiles.default]\nmode = \"upsert\"\n",
            "bad.toml:2: mode: `upsert` is not a mode",
        ),
        (
            "[profiles.default]\nstore = \"postgres://u:pw@h/db\"\n",
            "bad.toml:2: store: holds a password",
        ),
        (
            "[profiles.other]\n",
            "bad.toml: no profile \"default\" (the file has other)",
        ),
    ];
    for (file, says) in cases {
        std::fs::write(dir.path().join("bad.toml"), file).unwrap();
        let output = run(range(&mut backfill(dir.path()), 1, 1).args([
            "--config",
            "bad.toml",
            "--fetch-cmd",
            "touch fetched",
        ]));
        assert_eq!(code(&output), 1, "{file}: {}", show(&output));
        assert!(
            text(&output.stderr).contains(says),
            "{file}: {}",
            show(&output)
        );
        assert!(!dir.path().join("fetched").exists() && !dir.path().join("backfill.db").exists());
    }
    // No file, but a profile asked for.
    let output = run(backfill(dir.path()).args(["config", "--profile", "prod"]));
    assert_eq!(code(&output), 1, "{}", show(&output));
    assert!(
        text(&output.stderr).contains("no configuration file"),
        "{}",
        show(&output)
    );
}

/// `--store delta://DIR` with `--column`: the table keeps the typed
/// columns (their names and types in the table the Delta store reopens), a
/// record that does not fit fails its day, and writing with another
/// declaration is refused, naming the column.
#[cfg(feature = "delta")]
#[tokio::test]
async fn delta_tables_keep_typed_columns_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    for d in 1..=3 {
        let day = jan(d);
        let total = if d == 2 {
            r#""12 EUR""#.to_owned()
        } else {
            format!("{}", d * 100)
        };
        let line = format!(
            "{{\"key\": \"o:{day}\", \"event_date\": \"{day}\", \"updated_at\": \"{day}T09:00:00Z\", \
             \"value\": {{\"status\": \"placed\", \"total_cents\": {total}}}}}\n"
        );
        std::fs::write(dir.path().join(format!("{day}.jsonl")), line).unwrap();
    }
    let columns = ["--column", "status:text", "--column", "total_cents:integer"];
    let output = run(range(&mut backfill(dir.path()), 1, 3)
        .args(["--store", "delta://orders", "--fetch-files", "{day}.jsonl"])
        .args(columns));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let out = text(&output.stdout);
    assert!(
        out.contains("column total_cents (path total_cents): the field is not an integer"),
        "{out}"
    );
    let location = dir.path().join("orders").display().to_string();
    let store = backfill_delta::DeltaStore::open_existing(&location, Default::default())
        .await
        .unwrap();
    let kept: Vec<_> = store
        .columns()
        .iter()
        .map(|c| (c.name().to_owned(), c.column_type().name()))
        .collect();
    assert_eq!(
        kept,
        [
            ("status".to_owned(), "text"),
            ("total_cents".to_owned(), "integer")
        ]
    );
    assert_eq!(store.day_rows(jan(1)).await.unwrap().len(), 1);
    assert!(store.day_rows(jan(2)).await.unwrap().is_empty());
    // Writing without the declaration is refused, naming a column.
    let bare = run(range(&mut backfill(dir.path()), 1, 1).args([
        "--store",
        "delta://orders",
        "--fetch-files",
        "{day}.jsonl",
    ]));
    assert_ne!(code(&bare), 0, "{}", show(&bare));
    assert!(text(&bare.stderr).contains("status"), "{}", show(&bare));
}

/// `--history`: turned on by a backfill (and said so), kept by a sync run
/// without the flag; `rows --as-of` reads the table as it was, `rows` as
/// it is, `history` every version with when it was valid; the lines read
/// back as a fetch store the same text. A store without history says so.
/// On SQLite, Postgres and (with the `delta` feature) a Delta table.
#[tokio::test]
async fn history_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores = vec![("sqlite".to_owned(), "sqlite://backfill.db".to_owned(), None)];
    if cfg!(feature = "delta") {
        stores.push(("delta".to_owned(), "delta://orders".to_owned(), None));
    }
    if let Some(url) = backfill_testkit::url().await {
        stores.push((
            "postgres".to_owned(),
            url,
            Some(backfill_testkit::unique_schema()),
        ));
    }
    std::fs::create_dir(dir.path().join("v1")).unwrap();
    std::fs::create_dir(dir.path().join("v2")).unwrap();
    let line = |key: &str, value: &str, at: &str| {
        format!(
            r#"{{"key":"{key}","event_date":"2026-01-01","value":{value},"updated_at":"{at}"}}"#
        )
    };
    std::fs::write(
        dir.path().join("v1/2026-01-01.jsonl"),
        [
            line("a", r#"{"n":1,"s":"x"}"#, "2026-01-01T10:00:00Z"),
            line("b", r#""plain""#, "2026-01-01T10:00:00Z"),
        ]
        .join("\n"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("v2/2026-01-01.jsonl"),
        line("a", r#"{"n":2}"#, "2026-01-02T10:00:00Z"),
    )
    .unwrap();
    for (name, url, schema) in stores {
        let with_store = |command: &mut Command| {
            command.args(["--store", &url]);
            if let Some(schema) = &schema {
                command.args(["--schema", schema]);
            }
        };
        let mut first = backfill(dir.path());
        range(&mut first, 1, 1).args(["--history", "--fetch-files", "v1/{day}.jsonl"]);
        with_store(&mut first);
        let output = run(&mut first);
        assert_eq!(code(&output), 0, "{name}: {}", show(&output));
        let said = match name.as_str() {
            "delta" => "history is on for the Delta table",
            _ => "history is on for table backfill_records",
        };
        assert!(
            text(&output.stderr).contains(said),
            "{name}: {}",
            show(&output)
        );
        let mut second = backfill(dir.path());
        second.args([
            "sync",
            "--day",
            "2026-01-01",
            "--fetch-files",
            "v2/{day}.jsonl",
        ]);
        with_store(&mut second);
        assert_eq!(code(&run(&mut second)), 0, "{name}");

        // Another table of the same store: a Delta table's URL names it.
        let copied = |command: &mut Command| match name.as_str() {
            "delta" => {
                command.args(["--store", "delta://copied"]);
            }
            _ => {
                with_store(command);
                command.args(["--table", "copied"]);
            }
        };
        let lines_of = |args: &[&str], copy: bool| -> Vec<Value> {
            let mut command = backfill(dir.path());
            command.args(args);
            match copy {
                true => copied(&mut command),
                false => with_store(&mut command),
            }
            let output = run(&mut command);
            assert_eq!(code(&output), 0, "{name} {args:?}: {}", show(&output));
            text(&output.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let lines = |args: &[&str]| lines_of(args, false);
        let then = lines(&["rows", "--as-of", "2026-01-02T00:00:00Z"]);
        let values: Vec<&str> = then.iter().map(|l| l["value"].as_str().unwrap()).collect();
        assert_eq!(values, [r#"{"n":1,"s":"x"}"#, "plain"], "{name}");
        let now = lines(&["rows"]);
        let values: Vec<&str> = now.iter().map(|l| l["value"].as_str().unwrap()).collect();
        assert_eq!(values, [r#"{"n":2}"#, "plain"], "{name}");
        let history = lines(&["history"]);
        let spans: Vec<(&str, &str, Option<&str>)> = history
            .iter()
            .map(|l| {
                (
                    l["key"].as_str().unwrap(),
                    l["valid_from"].as_str().unwrap(),
                    l["valid_to"].as_str(),
                )
            })
            .collect();
        assert_eq!(
            spans,
            [
                ("a", "2026-01-01T10:00:00Z", Some("2026-01-02T10:00:00Z")),
                ("a", "2026-01-02T10:00:00Z", None),
                ("b", "2026-01-01T10:00:00Z", None),
            ],
            "{name}"
        );

        // The lines of `rows --as-of`, fetched into another table, store
        // the same text.
        std::fs::create_dir_all(dir.path().join("then")).unwrap();
        let text_lines: Vec<String> = then.iter().map(Value::to_string).collect();
        std::fs::write(
            dir.path().join("then/2026-01-01.jsonl"),
            text_lines.join("\n"),
        )
        .unwrap();
        let mut copy = backfill(dir.path());
        range(&mut copy, 1, 1).args(["--fetch-files", "then/{day}.jsonl"]);
        copied(&mut copy);
        assert_eq!(code(&run(&mut copy)), 0, "{name}");
        assert_eq!(lines_of(&["rows"], true), then, "{name}");

        // A table without history.
        let mut none = backfill(dir.path());
        none.args(["rows", "--as-of", "2026-01-02T00:00:00Z"]);
        copied(&mut none);
        let output = run(&mut none);
        assert_eq!(code(&output), 1, "{name}: {}", show(&output));
        assert!(
            text(&output.stderr).contains("keeps no history"),
            "{name}: {}",
            show(&output)
        );
    }
}

/// A one-request HTTP receiver on loopback: the request it got (head and
/// body), answered `200 OK`.
struct Receiver {
    url: String,
    got: std::sync::mpsc::Receiver<(String, String)>,
}

impl Receiver {
    fn start() -> Self {
        Self::answering("200 OK")
    }

    /// A receiver of every request, answering each with `status`.
    fn answering(status: &'static str) -> Self {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (send, got) = std::sync::mpsc::channel();
        std::thread::spawn(move || loop {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                head.push_str(&line);
            }
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().unwrap())
                })
                .expect("a body of known length");
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let mut stream = stream;
            stream
                .write_all(
                    format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .unwrap();
            if send.send((head, String::from_utf8(body).unwrap())).is_err() {
                return;
            }
        });
        Receiver { url, got }
    }

    fn request(&self) -> (String, String) {
        self.got
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a request")
    }
}

/// `--metrics-file` and `--metrics-push`: the run's numbers in Prometheus'
/// text format, read by a Prometheus text parser, equal to the JSON report;
/// the same text pushed to a Pushgateway's group of the table; a receiver
/// that is down is a warning, and the run's exit status stays its own.
#[test]
fn metrics_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    for d in 1..=3 {
        let day = jan(d);
        let lines: Vec<String> = (0..4)
            .map(|i| {
                format!(
                    r#"{{"key":"o:{day}:{i}","event_date":"{day}","value":{i},"updated_at":"{day}T09:00:00Z"}}"#
                )
            })
            .collect();
        let mut text = lines.join("\n");
        if d == 2 {
            text.push_str("\nnot json");
        }
        std::fs::write(dir.path().join(format!("{day}.jsonl")), text).unwrap();
    }
    std::fs::create_dir(dir.path().join("metrics")).unwrap();
    let receiver = Receiver::start();
    let started = chrono::Utc::now().timestamp() as f64;
    let output = run(range(&mut backfill(dir.path()), 1, 3).args([
        "--fetch-files",
        "{day}.jsonl",
        "--json",
        "--metrics-file",
        "metrics/orders.prom",
        "--metrics-push",
        &receiver.url,
    ]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let report = json(&output);
    let file = std::fs::read_to_string(dir.path().join("metrics/orders.prom")).unwrap();
    let scrape = prometheus_parse::Scrape::parse(file.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let value = |metric: &str, label: Option<(&str, &str)>| -> f64 {
        let found: Vec<f64> = scrape
            .samples
            .iter()
            .filter(|s| s.metric == metric)
            .filter(|s| s.labels.get("table") == Some("backfill_records"))
            .filter(|s| label.is_none_or(|(name, value)| s.labels.get(name) == Some(value)))
            .map(|s| match s.value {
                prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("{metric} is {other:?}, not a gauge"),
            })
            .collect();
        assert_eq!(found.len(), 1, "{metric} {label:?} in\n{file}");
        found[0]
    };
    let days = |outcome| value("backfill_run_days", Some(("outcome", outcome)));
    assert_eq!(days("synced"), 2.0);
    assert_eq!(days("failed"), 1.0);
    assert_eq!(days("skipped"), 0.0);
    assert_eq!(days("not_started"), 0.0);
    assert_eq!(report["failed"].as_array().unwrap().len(), 1);
    let (inserted, written) = totals(&report);
    assert_eq!(inserted, 8);
    assert_eq!(
        value("backfill_run_rows", Some(("kind", "inserted"))),
        inserted as f64
    );
    let changed: f64 = ["inserted", "updated", "deleted"]
        .iter()
        .map(|kind| value("backfill_run_rows", Some(("kind", kind))))
        .sum();
    assert_eq!(changed, written as f64);
    let elapsed = report["elapsed_ms"].as_f64().unwrap() / 1000.0;
    assert!((value("backfill_run_duration_seconds", None) - elapsed).abs() < 0.002);
    let ended = value("backfill_run_end_timestamp_seconds", None);
    let success = value("backfill_last_success_timestamp_seconds", None);
    assert!(started - 1.0 <= success && success <= ended, "{file}");

    // The same text, to the table's group.
    let (head, body) = receiver.request();
    let first = head.lines().next().unwrap();
    assert_eq!(
        first,
        "PUT /metrics/job/backfill/table@base64/YmFja2ZpbGxfcmVjb3Jkcw HTTP/1.1"
    );
    assert_eq!(body, file);

    // A Pushgateway that is down: a warning, and the run's exit status is
    // its own; the file is replaced whole, nothing left beside it.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", down.local_addr().unwrap());
    drop(down);
    let output = run(range(&mut backfill(dir.path()), 3, 3).args([
        "--fetch-files",
        "{day}.jsonl",
        "--metrics-file",
        "metrics/orders.prom",
        "--metrics-push",
        &url,
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert!(
        text(&output.stderr).contains("warning: cannot push the metrics"),
        "{}",
        show(&output)
    );
    let again = std::fs::read_to_string(dir.path().join("metrics/orders.prom")).unwrap();
    assert!(
        again.contains(r#"backfill_run_days{outcome="synced",table="backfill_records"} 1"#),
        "{again}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("metrics"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["orders.prom"]);
}

/// The lineage events a run sent to a receiver or wrote to a file, as
/// JSON.
fn events(lines: &str) -> Vec<Value> {
    lines
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// `--openlineage-url` and `--openlineage-file`: START, then FAIL for a run
/// with a failed day (its error in `errorMessage`) or COMPLETE, both to a
/// Marquez-like receiver and to a JSON Lines file; the run id is the
/// report's, the counts are the report's, the table is the output; no
/// secret of the command, its environment or the API key is in any event;
/// a receiver that is down or answers an error is a warning.
#[test]
fn openlineage_from_the_command_line() {
    const SECRET: &str = "wJalrXUtnFEMI-K7MDENG";
    let dir = tempfile::tempdir().unwrap();
    for d in 1..=3 {
        let day = jan(d);
        let lines: Vec<String> = (0..u64::from(d) + 1)
            .map(|i| {
                format!(
                    r#"{{"key":"o:{day}:{i}","event_date":"{day}","value":{i},"updated_at":"{day}T09:00:00Z"}}"#
                )
            })
            .collect();
        std::fs::write(dir.path().join(format!("{day}.jsonl")), lines.join("\n")).unwrap();
    }
    // Day 2 fails, and its fetch says a secret of its environment.
    let fetch = format!(
        "TOKEN=tok-{SECRET} sh -c 'if [ {{day}} = {} ]; then echo \"denied for $AWS_SECRET_ACCESS_KEY\" >&2; exit 1; fi; cat {{day}}.jsonl'",
        jan(2)
    );
    let receiver = Receiver::start();
    let output = run(range(&mut backfill(dir.path()), 1, 3)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .args(["--fetch-cmd", &fetch, "--json"])
        .args(["--openlineage-url", &receiver.url])
        .args(["--openlineage-file", "lineage.jsonl"])
        .args(["--openlineage-api-key", "key-0123456789"]));
    assert_eq!(code(&output), 2, "{}", show(&output));
    let report = json(&output);
    let run_id = report["run_id"].as_str().unwrap();

    let (start_head, start) = receiver.request();
    let (end_head, end) = receiver.request();
    for head in [&start_head, &end_head] {
        assert!(head.starts_with("POST /api/v1/lineage HTTP/1.1"), "{head}");
        assert!(head.contains("Bearer key-0123456789"), "{head}");
    }
    let file = std::fs::read_to_string(dir.path().join("lineage.jsonl")).unwrap();
    assert_eq!(events(&file), events(&format!("{start}\n{end}")));
    for text in [&file, &start_head, &end_head] {
        assert!(!text.contains(SECRET), "{text}");
    }
    assert!(!file.contains("key-0123456789"), "{file}");
    let [start, end] = <[Value; 2]>::try_from(events(&file)).unwrap();

    assert_eq!(start["eventType"], "START");
    assert_eq!(end["eventType"], "FAIL");
    for event in [&start, &end] {
        assert_eq!(event["run"]["runId"], run_id);
        assert_eq!(event["run"]["facets"]["backfill"]["runId"], run_id);
        assert_eq!(event["job"]["namespace"], "backfill");
        assert_eq!(event["job"]["name"], "sh");
        let output = &event["outputs"][0];
        let db = dir.path().canonicalize().unwrap().join("backfill.db");
        assert_eq!(output["namespace"], format!("sqlite://{}", db.display()));
        assert_eq!(output["name"], "backfill_records");
        assert!(chrono::DateTime::parse_from_rfc3339(event["eventTime"].as_str().unwrap()).is_ok());
    }
    let facet = &end["run"]["facets"]["backfill"];
    assert_eq!(facet["firstDay"], jan(1).to_string());
    assert_eq!(facet["lastDay"], jan(3).to_string());
    assert_eq!(facet["days"]["synced"], 2);
    assert_eq!(facet["days"]["failed"], 1);
    assert_eq!(facet["failedDays"], serde_json::json!([jan(2).to_string()]));
    let days = report["days"].as_array().unwrap();
    for kind in [
        "inserted",
        "updated",
        "deleted",
        "unchanged",
        "stale",
        "unlisted",
        "collapsed",
    ] {
        let sum: u64 = days
            .iter()
            .map(|d| d["counts"][kind].as_u64().unwrap())
            .sum();
        assert_eq!(facet["counts"][kind], sum, "{kind}");
    }
    let (inserted, written) = totals(&report);
    assert_eq!(inserted, 2 + 4);
    assert_eq!(
        end["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"],
        written
    );
    let error = end["run"]["facets"]["errorMessage"]["message"]
        .as_str()
        .unwrap();
    assert!(error.starts_with(&format!("{}: ", jan(2))), "{error}");
    assert!(error.contains("denied for ***"), "{error}");
    assert!(start["run"]["facets"].get("errorMessage").is_none());

    // A run where no day fails: COMPLETE; a server that is down only
    // warns, the events still reach the file.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", down.local_addr().unwrap());
    drop(down);
    let output = run(range(&mut backfill(dir.path()), 3, 3)
        .args(["--fetch-files", "{day}.jsonl", "--json"])
        .args(["--openlineage-url", &url])
        .args(["--openlineage-file", "lineage.jsonl"]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let stderr = text(&output.stderr);
    assert_eq!(
        stderr
            .matches("warning: cannot send the lineage event")
            .count(),
        2,
        "{}",
        show(&output)
    );
    let all = events(&std::fs::read_to_string(dir.path().join("lineage.jsonl")).unwrap());
    assert_eq!(all.len(), 4);
    assert_eq!(all[2]["eventType"], "START");
    assert_eq!(all[3]["eventType"], "COMPLETE");
    assert_eq!(all[3]["run"]["runId"], json(&output)["run_id"]);
    assert_eq!(all[3]["job"]["name"], "{day}.jsonl");
    assert!(all[3]["run"]["facets"].get("errorMessage").is_none());

    // A server that answers an error, and a file that cannot be written:
    // warnings, and the run's exit status is its own.
    let failing = Receiver::answering("500 Internal Server Error");
    let output = run(range(&mut backfill(dir.path()), 3, 3)
        .args(["--fetch-files", "{day}.jsonl"])
        .args(["--openlineage-url", &format!("{}/custom/path", failing.url)])
        .args(["--openlineage-file", "no/such/dir/lineage.jsonl"]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let (head, _) = failing.request();
    assert!(head.starts_with("POST /custom/path HTTP/1.1"), "{head}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("warning: cannot send the lineage event")
            && stderr.contains("warning: cannot write the lineage event"),
        "{}",
        show(&output)
    );
}

/// A Postgres store's URL holds a password: the events name the table by
/// host, port, database, schema and table, and never hold the password;
/// a store that cannot be reached sends FAIL, with no START before it.
#[tokio::test]
async fn openlineage_never_shows_the_store_password() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(format!("{}.jsonl", jan(1))),
        format!(
            r#"{{"key":"a","event_date":"{}","value":1,"updated_at":"{}T09:00:00Z"}}"#,
            jan(1),
            jan(1)
        ),
    )
    .unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("postgres://app:hunter2-lineage@127.0.0.1:{port}/shop?connect_timeout=2");
    let output = run(range(&mut backfill(dir.path()), 1, 1)
        .args(["--store", &url, "--fetch-files", "{day}.jsonl"])
        .args(["--openlineage-file", "down.jsonl"]));
    assert_eq!(code(&output), 3, "{}", show(&output));
    let file = std::fs::read_to_string(dir.path().join("down.jsonl")).unwrap();
    assert!(!file.contains("hunter2"), "{file}");
    let [fail] = <[Value; 1]>::try_from(events(&file)).unwrap();
    assert_eq!(fail["eventType"], "FAIL");
    assert_eq!(
        fail["outputs"][0]["namespace"],
        format!("postgres://127.0.0.1:{port}")
    );
    assert_eq!(fail["outputs"][0]["name"], "shop.public.backfill_records");
    assert!(fail["run"]["facets"]["errorMessage"]["message"].is_string());

    // A real run, as a role of its own with a password.
    let Some(admin) = backfill_testkit::url().await else {
        return;
    };
    let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let role = backfill_testkit::unique_schema();
    let password = format!("pw-{role}-s3cret");
    let rest = admin.split_once('@').unwrap().1;
    let (host_port, database) = rest.split('?').next().unwrap().split_once('/').unwrap();
    client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{password}'; \
             GRANT CREATE ON DATABASE \"{database}\" TO {role};"
        ))
        .await
        .unwrap();
    let url = format!("postgres://{role}:{password}@{rest}");
    let schema = backfill_testkit::unique_schema();
    let output = run(range(&mut backfill(dir.path()), 1, 1)
        .args(["--store", &url, "--schema", &schema, "--json"])
        .args(["--fetch-files", "{day}.jsonl"])
        .args(["--openlineage-file", "pg.jsonl"]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    let file = std::fs::read_to_string(dir.path().join("pg.jsonl")).unwrap();
    assert!(!file.contains(&password), "{file}");
    let [start, complete] = <[Value; 2]>::try_from(events(&file)).unwrap();
    assert_eq!(start["eventType"], "START");
    assert_eq!(complete["eventType"], "COMPLETE");
    let host_port = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    };
    assert_eq!(
        complete["outputs"][0]["namespace"],
        format!("postgres://{host_port}")
    );
    assert_eq!(
        complete["outputs"][0]["name"],
        format!("{database}.{schema}.backfill_records")
    );
    assert_eq!(
        complete["run"]["facets"]["backfill"]["counts"]["inserted"],
        1
    );
    assert_eq!(complete["run"]["runId"], json(&output)["run_id"]);
}

/// The browser that renders `status --format html` in the page test:
/// `BACKFILL_CHROMIUM`, else Chromium on the path.
fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("BACKFILL_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// `status --format html`: one page with nothing fetched from anywhere,
/// opened in a real headless Chromium: the failed day's error is on the
/// page as text (its markup escaped), every day's row says what the
/// ledger says (its counts, run, and how long its fetch and its write
/// took), and a phone-sized screenshot is taken.
#[test]
fn the_status_page_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    for d in 1..=6 {
        let day = jan(d);
        let lines: Vec<String> = (0..u64::from(d))
            .map(|i| {
                format!(
                    r#"{{"key":"o:{day}:{i}","event_date":"{day}","value":{i},"updated_at":"{day}T09:00:00Z"}}"#
                )
            })
            .collect();
        std::fs::write(dir.path().join(format!("{day}.jsonl")), lines.join("\n")).unwrap();
    }
    let fetch = format!(
        "if [ {{day}} = {} ]; then echo 'upstream said <b>503</b> & \"retry\"' >&2; exit 1; fi; \
         cat {{day}}.jsonl",
        jan(3)
    );
    let output = run(range(&mut backfill(dir.path()), 1, 6).args(["--fetch-cmd", &fetch]));
    assert_eq!(code(&output), 2, "{}", show(&output));

    let page = run(backfill(dir.path()).args([
        "status",
        "--from",
        &jan(1).to_string(),
        "--to",
        &jan(8).to_string(),
        "--format",
        "html",
    ]));
    assert_eq!(code(&page), 0, "{}", show(&page));
    let html = text(&page.stdout);
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("<script"));
    assert!(html.contains("upstream said &lt;b&gt;503&lt;/b&gt; &amp; &quot;retry&quot;"));
    let file = dir.path().join("status.html");
    std::fs::write(&file, &html).unwrap();

    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set and there is no Chromium (.ci/run installs Debian's chromium)"
        );
        eprintln!(
            "skipped: no Chromium on the path (apt-get install chromium, or BACKFILL_CHROMIUM)"
        );
        return;
    };
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", file.display());
    let headless = |extra: &[&str]| {
        let output = Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                &format!("--user-data-dir={}", profile.path().display()),
            ])
            .args(extra)
            .arg(&url)
            .stdin(Stdio::null())
            .output()
            .expect("Chromium runs");
        assert!(output.status.success(), "{}", show(&output));
        output
    };
    let shot = dir.path().join("status.png");
    headless(&[
        "--window-size=412,1400",
        &format!("--screenshot={}", shot.display()),
    ]);
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a screenshot"
    );

    // The page as Chromium rendered it: the failed day's error is text on
    // it (no element made of it), and each day's row says what the
    // ledger says.
    let dom = text(&headless(&["--dump-dom"]).stdout);
    assert!(
        dom.contains(r#"upstream said &lt;b&gt;503&lt;/b&gt; &amp; "retry""#),
        "{dom}"
    );
    assert!(!dom.contains("<b>503</b>"), "{dom}");
    let row_text = |day: NaiveDate| -> String {
        let attribute = dom
            .find(&format!("data-day=\"{day}\""))
            .unwrap_or_else(|| panic!("a row for {day}"));
        let start = dom[..attribute].rfind("<tr").unwrap();
        let row = &dom[start..start + dom[start..].find("</tr>").unwrap()];
        let mut cells = String::new();
        let mut in_tag = false;
        for c in row.chars() {
            match c {
                '<' => {
                    in_tag = true;
                    cells.push(' ');
                }
                '>' => in_tag = false,
                c if !in_tag => cells.push(c),
                _ => {}
            }
        }
        cells.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let store = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = sqlite(dir.path()).await;
        store.ledger(jan(1)..=jan(8)).await.unwrap()
    });
    assert_eq!(store.len(), 6);
    for entry in &store {
        let row = row_text(entry.day);
        match (&entry.synced, &entry.failure) {
            (Some(synced), None) => {
                let run = synced.run_id.as_ref().unwrap().as_str().to_owned();
                let inserted = synced.counts.inserted;
                assert_eq!(inserted, u64::from(entry.day.day()));
                // How long its fetch and its write took, as the ledger has
                // them.
                let timing = synced.timing.expect("SQLite keeps the timing");
                let took = |d: std::time::Duration| match d.as_millis() {
                    ms @ 0..=999 => format!("{ms}ms"),
                    ms => format!("{}.{}s", ms / 1000, ms % 1000 / 100),
                };
                let (fetch, write) = (took(timing.fetch), took(timing.write));
                assert!(
                    row.starts_with(&format!("{} synced", entry.day))
                        && row.contains(&format!(
                            " {fetch} {write} merge {inserted} {inserted} 0 0 0 0 {run}"
                        )),
                    "{row}"
                );
            }
            (None, Some(failure)) => {
                assert_eq!(entry.day, jan(3));
                assert!(row.starts_with(&format!("{} failed", entry.day)), "{row}");
                assert!(failure.error.contains("upstream said <b>503</b>"));
            }
            other => panic!("{other:?}"),
        }
    }
    for missing in [jan(7), jan(8)] {
        assert!(row_text(missing).starts_with(&format!("{missing} missing")));
    }
}

/// The per-day checks from the command line: 60 days where weekends bring
/// 60 % of a weekday's records and 10 February 10 %. With the defaults
/// (warn) the day is written and flagged in the report, the log and
/// `status`, weekends are not; with `--check-volume fail` it is refused,
/// written by nothing, until `backfill accept`, which a re-run keeps.
#[test]
fn checks_flag_a_day_at_a_tenth_and_accept_keeps_it_good() {
    let dir = tempfile::tempdir().unwrap();
    let exports = dir.path().join("exports");
    std::fs::create_dir(&exports).unwrap();
    let first = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
    let small = NaiveDate::from_ymd_opt(2026, 2, 10).unwrap();
    for day in first.iter_days().take(60) {
        let n = if day == small {
            10
        } else if day.weekday().number_from_monday() >= 6 {
            60
        } else {
            100
        };
        let lines: String = (0..n)
            .map(|i| {
                format!(
                    "{{\"key\":\"order:{day}:{i}\",\"event_date\":\"{day}\",\"value\":{{\"n\":{i}}},\"updated_at\":\"{day}T12:00:00Z\"}}\n"
                )
            })
            .collect();
        std::fs::write(exports.join(format!("{day}.jsonl")), lines).unwrap();
    }
    let sixty = |dir: &Path, extra: &[&str]| -> Output {
        run(backfill(dir)
            .args([
                "backfill",
                "--from",
                "2026-01-01",
                "--to",
                "2026-03-01",
                "--fetch-files",
                "exports/{day}.jsonl",
                "--json",
            ])
            .args(extra))
    };
    let status = |dir: &Path| -> Vec<Value> {
        let output = run(backfill(dir).args([
            "status",
            "--from",
            "2026-01-01",
            "--to",
            "2026-03-01",
            "--json",
        ]));
        assert_eq!(code(&output), 0, "{}", show(&output));
        json(&output).as_array().unwrap().clone()
    };
    let flagged = |days: &[Value], field: &str| -> Vec<String> {
        days.iter()
            .filter(|d| !d[field].is_null())
            .map(|d| d["day"].as_str().unwrap().to_owned())
            .collect()
    };

    // Warned: written, flagged in the report, the log and status.
    let output = sixty(dir.path(), &["--concurrency", "4"]);
    assert_eq!(code(&output), 0, "{}", show(&output));
    let report = json(&output);
    let days = report["days"].as_array().unwrap();
    assert_eq!(days.len(), 60);
    assert_eq!(flagged(days, "flag"), ["2026-02-10"]);
    let flag = &days[40]["flag"];
    assert_eq!(
        (
            &flag["check"],
            &flag["action"],
            &flag["fetched"],
            &flag["median"]
        ),
        (&"volume".into(), &"warn".into(), &10.into(), &100.into())
    );
    assert!(
        text(&output.stderr).contains("2026-02-10 synced: inserted 10")
            && text(&output.stderr).contains("FLAGGED volume check: 10 records fetched"),
        "{}",
        show(&output)
    );
    let days = status(dir.path());
    assert_eq!(flagged(&days, "flag"), ["2026-02-10"]);
    // `status` judges by the same settings as the runs.
    let output = run(backfill(dir.path()).args([
        "status",
        "--from",
        "2026-01-01",
        "--to",
        "2026-03-01",
        "--json",
        "--check-volume",
        "off",
    ]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(
        flagged(json(&output).as_array().unwrap(), "flag"),
        Vec::<String>::new()
    );
    let output = run(backfill(dir.path()).args([
        "status",
        "--from",
        "2026-01-01",
        "--to",
        "2026-03-01",
        "--format",
        "calendar",
    ]));
    let calendar = text(&output.stdout);
    assert!(
        calendar.contains("▲ synced, flagged 1")
            && calendar.contains("  2026-02-10  volume check: 10 records fetched"),
        "{calendar}"
    );

    // Refused: nothing of it written, the reason in the ledger.
    let strict = tempfile::tempdir().unwrap();
    std::fs::rename(&exports, strict.path().join("exports")).unwrap();
    let output = sixty(strict.path(), &["--check-volume", "fail"]);
    assert_eq!(code(&output), 2, "{}", show(&output));
    let report = json(&output);
    assert_eq!(report["days"].as_array().unwrap().len(), 59);
    assert_eq!(report["failed"][0]["day"], "2026-02-10");
    let days = status(strict.path());
    assert_eq!(days[40]["state"], "failed");
    let error = days[40]["entry"]["failure"]["error"].as_str().unwrap();
    assert!(
        error.contains("volume check: 10 records fetched, fewer than 25"),
        "{error}"
    );

    // Accepted: the next run writes it, and a re-run keeps it accepted.
    let output = run(backfill(strict.path()).args(["accept", "2026-02-10"]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    for _ in 0..2 {
        let output = sixty(strict.path(), &["--check-volume", "fail"]);
        assert_eq!(code(&output), 0, "{}", show(&output));
        assert_eq!(
            flagged(json(&output)["days"].as_array().unwrap(), "flag"),
            Vec::<String>::new()
        );
    }
    let days = status(strict.path());
    assert_eq!(days[40]["state"], "synced");
    assert!(days[40]["entry"]["accepted"].is_string(), "{}", days[40]);
    assert_eq!(flagged(&days, "flag"), Vec::<String>::new());
    // Taken back: flagged again.
    let output = run(backfill(strict.path()).args(["accept", "2026-02-10", "--undo"]));
    assert_eq!(code(&output), 0, "{}", show(&output));
    assert_eq!(flagged(&status(strict.path()), "flag"), ["2026-02-10"]);
}
