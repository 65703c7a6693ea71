//! Jobs in other processes: killed at random moments (crash safety), and
//! running at the same time against one SQLite file, one Postgres table or
//! one Delta table (overlapping jobs; listings and merges moving their
//! keys, on Postgres never deadlocking; on Delta, many writers committing
//! to one table). Children are this test binary again, running
//! `worker_entry_point` with a job described in `BACKFILL_WORKER`.
//!
//! A failure prints the seed that reproduces it; `BACKFILL_SEED=<n>` runs
//! that seed first.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use backfill::conformance::fixtures::day;
use backfill::postgres::PostgresStore;
use backfill::sqlite::SqliteStore;
use backfill::{Digest, Fetched, Job, MemoryStore, Mode, Record, Retry, Store};
use backfill_testkit as testkit;
use chrono::{Datelike, NaiveDate, TimeZone, Utc};
use futures_util::StreamExt;
use serde_json::{json, Value};

const WORKER_ENV: &str = "BACKFILL_WORKER";

// ------------------------------------------------------------- datasets

/// SplitMix64: spreads seeds so that versions look random but replay.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The instant `Data::Moving`'s versions count from, whatever their day.
fn moving_base() -> chrono::DateTime<Utc> {
    Utc.from_utc_datetime(&day(0).and_hms_opt(0, 0, 0).unwrap())
}

/// What one job's upstream returns for a day.
#[derive(Debug, Clone, Copy)]
enum Data {
    /// Crash runs: every record of the day carries `version` seconds, so a
    /// wholly applied day holds one version and a torn one would show two.
    Versioned { version: u64, per_day: u32 },
    /// Overlapping jobs: versions drawn from the seed with many ties; keys
    /// `i % 10 == 0` of `deleted_day` were deleted upstream (only `seeded`
    /// data still has them).
    Drawn {
        seed: u64,
        per_day: u32,
        deleted_day: i64,
        seeded: bool,
    },
    /// A listing of the upstream that all `Drawn` jobs `seed * 1000 + 0 ..
    /// jobs` deliver from: every key at its winning version among theirs,
    /// the deleted keys of `deleted_day` gone.
    Winners {
        seed: u64,
        jobs: u64,
        per_day: u32,
        deleted_day: i64,
    },
    /// Keys that move between days: `keys` keys spread like UUIDs, the
    /// same for every job of a seed. Job 0 stores key `i` under day
    /// `i % 4`; every other job delivers a random half of them under the
    /// day it syncs, versions drawn with ties.
    Moving { seed: u64, job: u64, keys: u32 },
}

impl Data {
    /// The instant a listing of day `d` is true as of: after every version
    /// the upstream holds for that day.
    fn as_of(self, d: NaiveDate) -> chrono::DateTime<Utc> {
        let midnight = Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap());
        match self {
            Data::Versioned { version, .. } => midnight + chrono::Duration::seconds(version as i64),
            Data::Drawn { .. } | Data::Winners { .. } => midnight + chrono::Duration::seconds(4),
            // Between the versions: a listing buries later records of its
            // day only up to it.
            Data::Moving { .. } => moving_base() + chrono::Duration::seconds(2),
        }
    }

    fn records(self, d: NaiveDate) -> Vec<Record> {
        let midnight = Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap());
        match self {
            Data::Moving { seed, job, keys } => {
                let offset = (d - day(0)).num_days() as u32;
                let mut records: Vec<Record> = (0..keys)
                    .filter_map(|i| {
                        let r = mix(mix(seed) ^ mix(job * 1_000_000 + u64::from(i)));
                        let delivered = match job {
                            0 => i % 4 == offset,
                            _ => r.is_multiple_of(2),
                        };
                        let key = format!("{:016x}{:08x}", mix(seed ^ mix(u64::from(i))), i);
                        let at = moving_base() + chrono::Duration::seconds(((r >> 8) % 4) as i64);
                        let value = format!("j{job}:s{}", (r >> 16) % 3);
                        delivered.then(|| Record::new(key, d, value, at).unwrap())
                    })
                    .collect();
                records.sort_by(|a, b| a.key().cmp(b.key()));
                records
            }
            Data::Winners {
                seed,
                jobs,
                per_day,
                deleted_day,
            } => {
                let mut winners: std::collections::BTreeMap<String, Record> = Default::default();
                for job in 0..jobs {
                    let drawn = Data::Drawn {
                        seed: seed * 1000 + job,
                        per_day,
                        deleted_day,
                        seeded: false,
                    };
                    for r in drawn.records(d) {
                        match winners.get(r.key()) {
                            Some(w) if !r.supersedes(w) => {}
                            _ => {
                                winners.insert(r.key().to_owned(), r);
                            }
                        }
                    }
                }
                winners.into_values().collect()
            }
            Data::Versioned { version, per_day } => (0..per_day)
                .map(|i| {
                    let at = midnight + chrono::Duration::seconds(version as i64);
                    Record::new(format!("k:{d}:{i:04}"), d, format!("v{version}:{i}"), at).unwrap()
                })
                .collect(),
            Data::Drawn {
                seed,
                per_day,
                deleted_day,
                seeded,
            } => (0..per_day)
                .filter(|i| seeded || d != day(deleted_day) || i % 10 != 0)
                .map(|i| {
                    let r = mix(seed ^ mix(d.num_days_from_ce() as u64 * 100_000 + u64::from(i)));
                    let at = midnight + chrono::Duration::seconds((r % 4) as i64);
                    let value = format!("s{}", (r >> 8) % 5);
                    Record::new(format!("k:{d}:{i:04}"), d, value, at).unwrap()
                })
                .collect(),
        }
    }

    fn json(self) -> Value {
        match self {
            Data::Versioned { version, per_day } => json!({"versioned": [version, per_day]}),
            Data::Drawn {
                seed,
                per_day,
                deleted_day,
                seeded,
            } => json!({"drawn": [seed, per_day, deleted_day, seeded]}),
            Data::Winners {
                seed,
                jobs,
                per_day,
                deleted_day,
            } => json!({"winners": [seed, jobs, per_day, deleted_day]}),
            Data::Moving { seed, job, keys } => json!({"moving": [seed, job, keys]}),
        }
    }

    fn from_json(v: &Value) -> Self {
        if let Some(a) = v.get("versioned") {
            Data::Versioned {
                version: a[0].as_u64().unwrap(),
                per_day: a[1].as_u64().unwrap() as u32,
            }
        } else if let Some(a) = v.get("moving") {
            Data::Moving {
                seed: a[0].as_u64().unwrap(),
                job: a[1].as_u64().unwrap(),
                keys: a[2].as_u64().unwrap() as u32,
            }
        } else if let Some(a) = v.get("winners") {
            Data::Winners {
                seed: a[0].as_u64().unwrap(),
                jobs: a[1].as_u64().unwrap(),
                per_day: a[2].as_u64().unwrap() as u32,
                deleted_day: a[3].as_i64().unwrap(),
            }
        } else {
            let a = &v["drawn"];
            Data::Drawn {
                seed: a[0].as_u64().unwrap(),
                per_day: a[1].as_u64().unwrap() as u32,
                deleted_day: a[2].as_i64().unwrap(),
                seeded: a[3].as_bool().unwrap(),
            }
        }
    }
}

// ---------------------------------------------------- where jobs write

/// A store all processes can open: a SQLite file, a Postgres schema or a
/// Delta table (a directory, or a prefix on S3).
#[derive(Debug, Clone)]
enum Place {
    Sqlite(std::path::PathBuf),
    Postgres {
        url: String,
        schema: String,
    },
    #[cfg_attr(not(feature = "delta"), allow(dead_code))]
    Delta(String),
}

impl Place {
    async fn open(&self, pool: usize) -> Box<dyn Store> {
        self.open_paged(pool, None).await
    }

    /// Opens the store with slices of at most `page_rows` records
    /// (Postgres; the store's default when `None`).
    async fn open_paged(&self, pool: usize, page_rows: Option<usize>) -> Box<dyn Store> {
        match self {
            Place::Sqlite(path) => Box::new(
                SqliteStore::builder(path)
                    .busy_timeout(Duration::from_secs(10))
                    .open()
                    .await
                    .unwrap(),
            ),
            Place::Postgres { url, schema } => Box::new(
                match page_rows {
                    Some(rows) => PostgresStore::builder().page_rows(rows),
                    None => PostgresStore::builder(),
                }
                .schema(schema.clone())
                .pool_size(pool)
                .connect(url)
                .await
                .unwrap(),
            ),
            #[cfg(feature = "delta")]
            Place::Delta(location) => {
                Box::new(backfill::delta::DeltaStore::open(location).await.unwrap())
            }
            #[cfg(not(feature = "delta"))]
            Place::Delta(_) => unreachable!("the delta feature is off"),
        }
    }

    fn json(&self) -> Value {
        match self {
            Place::Sqlite(path) => json!({"sqlite": path}),
            Place::Postgres { url, schema } => json!({"postgres": [url, schema]}),
            Place::Delta(location) => json!({"delta": location}),
        }
    }

    fn from_json(v: &Value) -> Self {
        if let Some(path) = v.get("sqlite") {
            Place::Sqlite(path.as_str().unwrap().into())
        } else if let Some(path) = v.get("delta") {
            Place::Delta(path.as_str().unwrap().into())
        } else {
            let a = &v["postgres"];
            Place::Postgres {
                url: a[0].as_str().unwrap().to_owned(),
                schema: a[1].as_str().unwrap().to_owned(),
            }
        }
    }
}

/// Where the kinds of store come from for one test.
async fn places(name: &str) -> Vec<(&'static str, Place, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut out = vec![(
        "sqlite",
        Place::Sqlite(dir.path().join(format!("{name}.db"))),
        Some(dir),
    )];
    #[cfg(feature = "delta")]
    for (kind, location, dir) in delta_tables(name) {
        out.push((kind, Place::Delta(location), dir));
    }
    if let Some(url) = testkit::url().await {
        out.push((
            "postgres",
            Place::Postgres {
                url,
                schema: testkit::unique_schema(),
            },
            None,
        ));
    }
    out
}

/// Where a Delta table named `name` goes: a local directory, and a prefix
/// of its own on S3 (`BACKFILL_S3_URL`, with the AWS variables pointing at
/// its server: `scripts/s3-server.sh` starts a local one) when there is
/// one, a skip without it (a failure with `CI` set).
#[cfg_attr(not(feature = "delta"), allow(dead_code))]
fn delta_tables(name: &str) -> Vec<(&'static str, String, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join(name).to_str().unwrap().to_owned();
    let mut out = vec![("delta", local, Some(dir))];
    if let Some(bucket) = testkit::s3_bucket() {
        let location = format!("{bucket}/{}/{name}", testkit::unique_schema());
        out.push(("delta on s3", location, None));
    }
    out
}

/// `location` with its last part replaced by `name`: another table beside it.
fn beside(location: &str, name: &str) -> String {
    match location.rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/{name}"),
        None => name.to_owned(),
    }
}

// --------------------------------------------------------------- jobs

/// One job: `days` (offsets, inclusive) of `data`, in `mode`.
#[derive(Debug, Clone)]
struct Spec {
    place: Place,
    data: Data,
    days: (i64, i64),
    mode: Mode,
    concurrency: usize,
    /// How long the fetch takes per day, like a real upstream.
    fetch_ms: u64,
    /// Whether each day arrives as a stream of chunks (the pause spread
    /// between them, runs spilled to temporary files) instead of at once.
    stream: bool,
    /// How many times a day is attempted (1: no retry).
    attempts: u32,
    /// When every day's fetch returns, at the earliest (milliseconds since
    /// the Unix epoch): jobs started one after another write at once.
    start_at: Option<u64>,
    /// The store's slice bound (Postgres), for many statements per day.
    page_rows: Option<usize>,
}

impl Spec {
    fn job(&self) -> Job {
        Job::new()
            .mode(self.mode)
            // A streamed day keeps at most ~16 KiB in memory: most of it
            // goes through temporary files.
            .stream_memory(16 << 10)
            .concurrency(self.concurrency)
            // Lock contention and lost connections are retried: none may
            // escape to the caller.
            .retry(
                Retry::default()
                    .max_attempts(self.attempts)
                    .backoff(Duration::from_millis(20), Duration::from_millis(500)),
            )
    }

    async fn run(&self, store: &dyn Store) -> backfill::Result<backfill::RunReport> {
        let (data, pause, stream) = (self.data, Duration::from_millis(self.fetch_ms), self.stream);
        let start_at = self.start_at;
        // The upstream says when each listing was taken, so that every
        // job's listings and deliveries are of one consistent upstream.
        let fetch = move |d: NaiveDate| async move {
            let records = data.records(d);
            if let Some(at) = start_at {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as u64;
                tokio::time::sleep(Duration::from_millis(at.saturating_sub(now))).await;
            }
            if !stream {
                tokio::time::sleep(pause).await;
                return Ok::<_, std::io::Error>(Fetched::new(records).as_of(data.as_of(d)));
            }
            // Ten chunks, the pause spread between them, so that a kill
            // lands while the day is still arriving as often as while it
            // is written.
            let size = records.len().div_ceil(10).max(1);
            let chunks: Vec<Vec<Record>> = records.chunks(size).map(<[Record]>::to_vec).collect();
            let chunks = futures_util::stream::iter(chunks).then(move |chunk| async move {
                tokio::time::sleep(pause / 10).await;
                Ok::<_, std::io::Error>(chunk)
            });
            Ok(Fetched::stream(chunks).as_of(data.as_of(d)))
        };
        self.job()
            .backfill(store, &fetch, day(self.days.0)..=day(self.days.1))
            .await
    }

    fn spawn(&self) -> Child {
        let spec = json!({
            "place": self.place.json(),
            "data": self.data.json(),
            "days": [self.days.0, self.days.1],
            "replace": self.mode == Mode::Replace,
            "concurrency": self.concurrency,
            "fetch_ms": self.fetch_ms,
            "stream": self.stream,
            "attempts": self.attempts,
            "start_at": self.start_at,
            "page_rows": self.page_rows,
        });
        Command::new(std::env::current_exe().unwrap())
            .args([
                "worker_entry_point",
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(WORKER_ENV, spec.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning a worker")
    }

    fn from_json(v: &Value) -> Self {
        Spec {
            place: Place::from_json(&v["place"]),
            data: Data::from_json(&v["data"]),
            days: (
                v["days"][0].as_i64().unwrap(),
                v["days"][1].as_i64().unwrap(),
            ),
            mode: if v["replace"].as_bool().unwrap() {
                Mode::Replace
            } else {
                Mode::Merge
            },
            concurrency: v["concurrency"].as_u64().unwrap() as usize,
            fetch_ms: v["fetch_ms"].as_u64().unwrap(),
            stream: v["stream"].as_bool().unwrap(),
            attempts: v["attempts"].as_u64().unwrap() as u32,
            start_at: v["start_at"].as_u64(),
            page_rows: v["page_rows"].as_u64().map(|n| n as usize),
        }
    }
}

/// Not a test of its own: the entry point of the child processes the tests
/// below start. Without `BACKFILL_WORKER` it returns at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_entry_point() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let spec = Spec::from_json(&serde_json::from_str(&spec).unwrap());
    let store = spec
        .place
        .open_paged(spec.concurrency, spec.page_rows)
        .await;
    if let Err(e) = spec.run(&*store).await {
        panic!("worker job failed: {e}");
    }
}

fn wait(child: Child, what: &str) {
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{what} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Starts every job in a process of its own, all writing from the same
/// instant `delay_ms` from now, and waits for each to succeed (`what`
/// names them in a failure, with their number).
fn race(jobs: &[Spec], delay_ms: u64, what: &str) {
    let start_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + delay_ms;
    let children: Vec<_> = jobs
        .iter()
        .map(|job| {
            Spec {
                start_at: Some(start_at),
                ..job.clone()
            }
            .spawn()
        })
        .collect();
    for (n, child) in children.into_iter().enumerate() {
        wait(child, &format!("{what} {}", n + 1));
    }
}

fn seeds(count: u64) -> Vec<u64> {
    let mut seeds: Vec<u64> = (1..=count).collect();
    if let Some(seed) = std::env::var("BACKFILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        seeds.insert(0, seed);
    }
    seeds
}

// ---------------------------------------------------------- the tests

/// Checks that every day holds either nothing or all `per_day` rows of
/// one single version: no reader may ever see a day half-written.
fn assert_whole_days(rows: &[Record], per_day: usize, context: &str) {
    let mut by_day: std::collections::BTreeMap<NaiveDate, Vec<&Record>> = Default::default();
    for r in rows {
        by_day.entry(r.event_date()).or_default().push(r);
    }
    for (d, rows) in by_day {
        assert_eq!(
            rows.len(),
            per_day,
            "{context}: {d} holds {} rows",
            rows.len()
        );
        let first = rows[0].updated_at();
        assert!(
            rows.iter().all(|r| r.updated_at() == first),
            "{context}: {d} mixes versions: a partially written day"
        );
    }
}

/// Checks, with no writer running, that each day has a synced ledger row
/// if and only if its rows are in the store, and that the row's digest is
/// that of exactly those rows: the ledger commits with the day's rows.
async fn assert_ledger_matches_rows(store: &dyn Store, days: i64, context: &str) {
    let ledger = store.ledger(day(0)..=day(days - 1)).await.unwrap();
    for n in 0..days {
        let rows = store.day_rows(day(n)).await.unwrap();
        let synced = ledger
            .iter()
            .find(|e| e.day == day(n))
            .and_then(|e| e.synced.as_ref());
        match synced {
            Some(synced) => assert_eq!(
                synced.digest,
                Digest::of(&rows),
                "{context}: {} has a ledger row whose digest is not its rows'",
                day(n)
            ),
            None => assert!(
                rows.is_empty(),
                "{context}: {} has rows but no ledger row",
                day(n)
            ),
        }
    }
}

/// A backfill in a child process, SIGKILLed at a random moment, 20 times
/// per store while a reader polls (every other run's days streamed in
/// chunks, through temporary files); then run to completion. Every poll sees
/// whole days only; after every kill each day has a ledger row exactly when
/// its rows are there, with their digest; the end state equals the oracle
/// byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_backfills_leave_whole_days_and_converge() {
    const DAYS: i64 = 20;
    const PER_DAY: u32 = 1000;
    for (name, place, _dir) in places("crash").await {
        let reader = place.open(1).await;
        // Every day of one version, two days at a time; every other run
        // a listing of the days (replace mode), true as of its version.
        let versioned = |version: u64, fetch_ms| Spec {
            place: place.clone(),
            data: Data::Versioned {
                version,
                per_day: PER_DAY,
            },
            days: (0, DAYS - 1),
            mode: if version.is_multiple_of(2) {
                Mode::Replace
            } else {
                Mode::Merge
            },
            concurrency: 2,
            fetch_ms,
            stream: version % 4 < 2,
            attempts: 10,
            start_at: None,
            page_rows: None,
        };
        let (mut polls, mut interrupted) = (0, 0);
        // In increasing order, so each run's versions are the newest (a
        // replayed BACKFILL_SEED included): a day's ledger digest is then
        // always that of its rows.
        let mut ordered = seeds(20);
        ordered.sort_unstable();
        ordered.dedup();
        for seed in ordered {
            let spec = versioned(seed, 15);
            // The run takes ~250 ms; most kills land inside it.
            let kill_after = Duration::from_millis(5 + mix(seed) % 300);
            let context =
                format!("{name}, seed {seed} (BACKFILL_SEED={seed}), killed after {kill_after:?}");
            println!("{context}");
            let mut child = spec.spawn();
            let started = Instant::now();
            while started.elapsed() < kill_after {
                assert_whole_days(&reader.rows().await.unwrap(), PER_DAY as usize, &context);
                polls += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if child.try_wait().unwrap().is_none() {
                interrupted += 1;
            }
            child.kill().unwrap();
            child.wait().unwrap();
            assert_whole_days(&reader.rows().await.unwrap(), PER_DAY as usize, &context);
            assert_ledger_matches_rows(&*reader, DAYS, &context).await;
        }
        // Kills that land after the child finished prove nothing: most must
        // cut a run short.
        assert!(
            interrupted >= 10,
            "{name}: only {interrupted} of 20 kills interrupted a run"
        );
        // Re-run the last version to completion, here.
        let last = *seeds(20).iter().max().unwrap();
        let spec = versioned(last, 0);
        spec.run(&*reader).await.unwrap();
        let oracle = MemoryStore::new();
        spec.run(&oracle).await.unwrap();
        assert_eq!(
            reader.rows_with_tombstones().await.unwrap(),
            oracle.rows_with_tombstones().await.unwrap(),
            "{name}"
        );
        println!("{name}: 20 kill points ({interrupted} mid-run), {polls} polls, all whole");
    }
}

/// The daily job, two overlapping backfills and a listing (replace mode) of
/// one day, each in its own process, all at once against one store; for
/// several seeds. All succeed (lock waits and deadlocks are retried, never
/// surfaced) and the store ends exactly where the oracle does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_jobs_in_separate_processes_converge() {
    const PER_DAY: u32 = 300;
    const DELETED_DAY: i64 = 7;
    for (name, place, _dir) in places("overlap").await {
        for seed in seeds(6) {
            let context = format!("{name}, seed {seed} (BACKFILL_SEED={seed})");
            // A fresh table per seed.
            let place = match &place {
                Place::Sqlite(path) => {
                    Place::Sqlite(path.with_file_name(format!("overlap-{seed}.db")))
                }
                Place::Postgres { url, .. } => Place::Postgres {
                    url: url.clone(),
                    schema: testkit::unique_schema(),
                },
                Place::Delta(location) => {
                    Place::Delta(beside(location, &format!("overlap-{seed}")))
                }
            };
            let drawn = |job: u64, seeded: bool| Data::Drawn {
                seed: seed * 1000 + job,
                per_day: PER_DAY,
                deleted_day: DELETED_DAY,
                seeded,
            };
            let spec = |data, days, mode, concurrency| Spec {
                place: place.clone(),
                data,
                days,
                mode,
                concurrency,
                fetch_ms: 2,
                // Half the seeds deliver their days as streams.
                stream: seed % 2 == 1,
                attempts: 10,
                start_at: None,
                page_rows: None,
            };
            let initial = spec(drawn(0, true), (0, 15), Mode::Merge, 2);
            // The listing of the deleted day lists what the upstream that
            // all jobs deliver from holds by then.
            let listing = Data::Winners {
                seed,
                jobs: 4,
                per_day: PER_DAY,
                deleted_day: DELETED_DAY,
            };
            let jobs = [
                spec(drawn(1, false), (15, 15), Mode::Merge, 1), // the daily job
                spec(drawn(2, false), (0, 10), Mode::Merge, 2),  // backfill A
                spec(drawn(3, false), (5, 15), Mode::Merge, 2),  // backfill B, overlapping A
                spec(listing, (DELETED_DAY, DELETED_DAY), Mode::Replace, 1),
            ];
            let store = place.open(2).await;
            initial.run(&*store).await.unwrap();
            let children: Vec<_> = jobs.iter().map(Spec::spawn).collect();
            for (child, job) in
                children
                    .into_iter()
                    .zip(["daily", "backfill A", "backfill B", "replace"])
            {
                wait(child, &format!("{context}: {job}"));
            }
            // The oracle: the same batches, one after another (upstream
            // no longer has the deleted keys, so no job can bring them
            // back, whatever the interleaving).
            let oracle = MemoryStore::new();
            initial.run(&oracle).await.unwrap();
            for job in &jobs {
                job.run(&oracle).await.unwrap();
            }
            assert_eq!(
                store.rows_with_tombstones().await.unwrap(),
                oracle.rows_with_tombstones().await.unwrap(),
                "{context}"
            );
            let expected = oracle.rows().await.unwrap();
            let deleted = expected
                .iter()
                .filter(|r| r.event_date() == day(DELETED_DAY))
                .count();
            assert_eq!(deleted, PER_DAY as usize * 9 / 10, "{context}");
        }
        println!("{name}: overlapping jobs converged for every seed");
    }
}

/// Listings and merges of other days that move their keys, each in its own
/// process, writing at the same instant, with no retry: keys spread like
/// UUIDs, each job delivering a random half of them under the day it
/// syncs, so every job moves keys out of the days the listings list, in
/// slices of 50 records (many statements per day, every interleaving
/// between them). Every day succeeds, the server detects no deadlock, and
/// the store ends exactly as one serial order of the jobs leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_merges_moving_their_keys_never_deadlock() {
    let Some(url) = testkit::url().await else {
        return;
    };
    const KEYS: u32 = 1_200;
    let (admin, connection) = url
        .parse::<backfill::postgres::tokio_postgres::Config>()
        .unwrap()
        .connect(backfill::postgres::tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let deadlocks = || async {
        admin
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap();
        admin
            .query_one(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let before = deadlocks().await;
    let mut races = 0;
    for seed in seeds(16) {
        let context = format!("seed {seed} (BACKFILL_SEED={seed})");
        let place = Place::Postgres {
            url: url.clone(),
            schema: testkit::unique_schema(),
        };
        let spec = |job, d, mode| Spec {
            place: place.clone(),
            data: Data::Moving {
                seed,
                job,
                keys: KEYS,
            },
            days: (d, d),
            mode,
            concurrency: 1,
            fetch_ms: 0,
            // Half the seeds deliver their days as streams.
            stream: seed % 2 == 1,
            attempts: 1,
            start_at: None,
            page_rows: Some(50),
        };
        let initial = Spec {
            days: (0, 3),
            ..spec(0, 0, Mode::Merge)
        };
        // Two merges and two listings, each of its own day.
        let jobs = [
            spec(1, 0, Mode::Merge),
            spec(2, 1, Mode::Replace),
            spec(3, 2, Mode::Merge),
            spec(4, 3, Mode::Replace),
        ];
        let store = place.open(2).await;
        initial.run(&*store).await.unwrap();
        race(&jobs, 1_500, &format!("{context}: job"));
        races += 1;
        // The oracle: the jobs one after another, in some order.
        let stored = store.rows_with_tombstones().await.unwrap();
        let mut orders = Vec::new();
        permutations(&mut [0, 1, 2, 3], 0, &mut orders);
        let mut matched = None;
        for order in &orders {
            let oracle = MemoryStore::new();
            initial.run(&oracle).await.unwrap();
            for &j in order {
                jobs[j].run(&oracle).await.unwrap();
            }
            if oracle.rows_with_tombstones().await.unwrap() == stored {
                matched = Some(order.clone());
                break;
            }
        }
        assert!(
            matched.is_some(),
            "{context}: the store matches no serial order of the jobs"
        );
    }
    let after = deadlocks().await;
    assert_eq!(
        after - before,
        0,
        "deadlocks the server detected in {races} races"
    );
    println!("{races} races of listings and moving merges: no deadlock, each a serial order");
}

/// Eight writers on one Delta table at the same instant, each in its own
/// process, with no retry: merges of four days, two writers per day, each
/// delivering a random half of keys spread like UUIDs under its day, so
/// that keys move between days under every writer. Delta lets one commit
/// of each version through; every writer that loses checks the winners
/// and commits again or decides again. Every day succeeds, and the table
/// ends exactly as the jobs one after another leave a `MemoryStore`
/// (merges commute: every serial order ends there), with each day's
/// ledger row that of its rows.
#[cfg(feature = "delta")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_writers_on_one_delta_table_converge() {
    for (kind, location, _dir) in delta_tables("writers") {
        eight_writers_converge(kind, &location).await;
    }
}

#[cfg(feature = "delta")]
async fn eight_writers_converge(kind: &str, location: &str) {
    const KEYS: u32 = 800;
    for seed in seeds(3) {
        let context = format!("{kind}, seed {seed} (BACKFILL_SEED={seed})");
        let place = Place::Delta(beside(location, &format!("writers-{seed}")));
        let spec = |job, d| Spec {
            place: place.clone(),
            data: Data::Moving {
                seed,
                job,
                keys: KEYS,
            },
            days: (d, d),
            mode: Mode::Merge,
            concurrency: 1,
            fetch_ms: 0,
            stream: job % 2 == 1,
            attempts: 1,
            start_at: None,
            page_rows: None,
        };
        let initial = Spec {
            days: (0, 3),
            ..spec(0, 0)
        };
        let jobs: Vec<Spec> = (1..=8).map(|job| spec(job, (job % 4) as i64)).collect();
        let store = place.open(1).await;
        initial.run(&*store).await.unwrap();
        race(&jobs, 3_000, &format!("{context}: writer"));
        let oracle = MemoryStore::new();
        initial.run(&oracle).await.unwrap();
        for job in &jobs {
            job.run(&oracle).await.unwrap();
        }
        assert_eq!(
            store.rows_with_tombstones().await.unwrap(),
            oracle.rows_with_tombstones().await.unwrap(),
            "{context}"
        );
        let ledger = store.ledger(day(0)..=day(3)).await.unwrap();
        assert_eq!(ledger.len(), 4, "{context}: a ledger row per day");
        assert!(
            ledger
                .iter()
                .all(|e| e.synced.is_some() && e.failure.is_none()),
            "{context}"
        );
    }
    // Eight writers of eight different days, each with keys of its own:
    // none reads what another writes, so a lost commit goes again on top
    // of the winners without deciding again.
    let place = Place::Delta(beside(location, "days"));
    let jobs: Vec<Spec> = (0..8)
        .map(|d| Spec {
            place: place.clone(),
            data: Data::Drawn {
                seed: 7,
                per_day: 300,
                deleted_day: -1,
                seeded: true,
            },
            days: (d, d),
            mode: if d % 2 == 0 {
                Mode::Merge
            } else {
                Mode::Replace
            },
            concurrency: 1,
            fetch_ms: 0,
            stream: d % 3 == 0,
            attempts: 1,
            start_at: None,
            page_rows: None,
        })
        .collect();
    let store = place.open(1).await;
    let start_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_000;
    let children: Vec<_> = jobs
        .iter()
        .map(|job| {
            Spec {
                start_at: Some(start_at),
                ..job.clone()
            }
            .spawn()
        })
        .collect();
    for (n, child) in children.into_iter().enumerate() {
        wait(child, &format!("writer of day {n}"));
    }
    let oracle = MemoryStore::new();
    for job in &jobs {
        job.run(&oracle).await.unwrap();
    }
    assert_eq!(
        store.rows_with_tombstones().await.unwrap(),
        oracle.rows_with_tombstones().await.unwrap(),
        "{kind}: eight days at once"
    );
    assert_ledger_matches_rows(&*store, 8, &format!("{kind}: eight days at once")).await;
    println!("8 writers on one Delta table ({kind}): the serial state for every seed");
}

/// Two listings and two merges of other days that move their keys, each in
/// its own process, committing to one Delta table at the same instant with
/// no retry: every day succeeds and the table ends exactly as one serial
/// order of the jobs leaves it.
#[cfg(feature = "delta")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_moving_merges_on_one_delta_table_end_in_a_serial_order() {
    for (kind, location, _dir) in delta_tables("listings") {
        listings_and_moving_merges_end_in_a_serial_order(kind, &location).await;
    }
}

#[cfg(feature = "delta")]
async fn listings_and_moving_merges_end_in_a_serial_order(kind: &str, location: &str) {
    const KEYS: u32 = 600;
    for seed in seeds(4) {
        let context = format!("{kind}, seed {seed} (BACKFILL_SEED={seed})");
        let place = Place::Delta(beside(location, &format!("listings-{seed}")));
        let spec = |job, d, mode| Spec {
            place: place.clone(),
            data: Data::Moving {
                seed,
                job,
                keys: KEYS,
            },
            days: (d, d),
            mode,
            concurrency: 1,
            fetch_ms: 0,
            stream: seed % 2 == 1,
            attempts: 1,
            start_at: None,
            page_rows: None,
        };
        let initial = Spec {
            days: (0, 3),
            ..spec(0, 0, Mode::Merge)
        };
        let jobs = [
            spec(1, 0, Mode::Merge),
            spec(2, 1, Mode::Replace),
            spec(3, 2, Mode::Merge),
            spec(4, 3, Mode::Replace),
        ];
        let store = place.open(1).await;
        initial.run(&*store).await.unwrap();
        race(&jobs, 2_000, &format!("{context}: job"));
        let stored = store.rows_with_tombstones().await.unwrap();
        let mut orders = Vec::new();
        permutations(&mut [0, 1, 2, 3], 0, &mut orders);
        let mut matched = false;
        for order in &orders {
            let oracle = MemoryStore::new();
            initial.run(&oracle).await.unwrap();
            for &j in order {
                jobs[j].run(&oracle).await.unwrap();
            }
            if oracle.rows_with_tombstones().await.unwrap() == stored {
                matched = true;
                break;
            }
        }
        assert!(
            matched,
            "{context}: the table matches no serial order of the jobs"
        );
    }
    println!(
        "listings and moving merges on one Delta table ({kind}): a serial order for every seed"
    );
}

/// Every order of `items[k..]` after `items[..k]`, appended to `out`.
fn permutations(items: &mut [usize], k: usize, out: &mut Vec<Vec<usize>>) {
    if k == items.len() {
        out.push(items.to_vec());
        return;
    }
    for i in k..items.len() {
        items.swap(k, i);
        permutations(items, k + 1, out);
        items.swap(k, i);
    }
}
