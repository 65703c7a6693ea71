//! The writer killed between every pair of its steps. Every step a write
//! takes on storage — a data file, a ledger file, a log entry, a checkpoint
//! — is one call to the object store; a child process runs a job whose
//! object store ends the process the instant its `k`-th write returns,
//! for `k = 1, 2, …` until the job finishes without reaching it. After each
//! kill the table holds exactly the rows and ledger of the days committed
//! before it, as a reader opening the directory finds them; and the job run
//! again to completion on that table ends where it would have without a
//! kill.
//!
//! The job is a listing of each of four days (replace mode) on a table
//! already holding them: newer versions, keys the listing lacks turned to
//! tombstones, and keys moving in from the next day, so that one commit
//! changes two days; then of a fifth day new to the table, whose records'
//! file is written while the day is decided, all of them winning (keys
//! the first day's listing moved in, moving on at a newer version).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path as FsPath;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use backfill_core::{
    Digest, FixedClock, Job, LedgerEntry, MemoryStore, Mode, Record, Retry, RunReport, Store,
};
use backfill_delta::DeltaStore;
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use deltalake::logstore::{
    default_logstore, logstore_factories, object_store_factories, LogStore, LogStoreFactory,
    ObjectStoreFactory, ObjectStoreRef, StorageConfig,
};
use deltalake::DeltaResult;
use futures_util::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};
use url::Url;

/// The child's instructions: `<table directory> <k>`.
const CHILD_ENV: &str = "BACKFILL_KILL_POINT";
/// How a child killed at its kill point exits.
const KILLED: i32 = 86;
/// The days the table holds before the job.
const DAYS: i64 = 4;
/// The days the job lists: those, and one new to the table.
const JOB_DAYS: i64 = DAYS + 1;
const PER_DAY: u32 = 40;

fn day(n: i64) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 3, 1).unwrap() + chrono::Duration::days(n)
}

fn at(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 10, 0, 0, 0).unwrap() + chrono::Duration::seconds(secs)
}

/// What the table holds before the killed job: every day's keys at
/// instant 10.
fn stored(d: NaiveDate) -> Vec<Record> {
    let n = (d - day(0)).num_days();
    (0..PER_DAY)
        .map(|i| Record::new(format!("k{n}:{i:03}"), d, format!("old:{i}"), at(10)).unwrap())
        .collect()
}

/// The listing of day `d`: its keys but every tenth (tombstoned), every
/// third at a newer version, and every seventh key of the next day moved
/// here at a newer version.
fn listing(d: NaiveDate) -> Vec<Record> {
    let n = (d - day(0)).num_days();
    let next = (n + 1) % DAYS;
    let mut records: Vec<Record> = (0..PER_DAY)
        .filter(|i| i % 10 != 0)
        .map(|i| {
            let (value, secs) = if i % 3 == 0 {
                (format!("new:{i}"), 20)
            } else {
                (format!("old:{i}"), 10)
            };
            Record::new(format!("k{n}:{i:03}"), d, value, at(secs)).unwrap()
        })
        .collect();
    // Into the day new to the table, the keys already moved once, newer.
    let moved = if n < DAYS { at(30) } else { at(40) };
    records.extend(
        (0..PER_DAY)
            .filter(|i| i % 7 == 3)
            .map(|i| Record::new(format!("k{next}:{i:03}"), d, "moved", moved).unwrap()),
    );
    records
}

fn job(mode: Mode) -> Job {
    Job::new()
        .mode(mode)
        .concurrency(1)
        .retry(Retry::none())
        .clock(FixedClock(at(100)))
}

async fn fill(store: &dyn Store) -> RunReport {
    let fetch = |d: NaiveDate| async move { Ok::<_, std::io::Error>(stored(d)) };
    job(Mode::Merge)
        .backfill(store, &fetch, day(0)..=day(DAYS - 1))
        .await
        .expect("filling the table")
}

/// The killed job: a listing of each day, as of instant 50.
async fn relist(store: &dyn Store) -> RunReport {
    let fetch = |d: NaiveDate| async move {
        Ok::<_, std::io::Error>(backfill_core::Fetched::new(listing(d)).as_of(at(50)))
    };
    job(Mode::Replace)
        .backfill(store, &fetch, day(0)..=day(JOB_DAYS - 1))
        .await
        .expect("the listings")
}

/// What a table holds: every row, tombstones included, and each day's
/// ledger entry as far as a write decides it (its digest and counts; the
/// run id differs from run to run).
type State = (Vec<Record>, BTreeMap<NaiveDate, (Digest, String)>);

async fn state(store: &dyn Store) -> State {
    let rows = store.rows_with_tombstones().await.expect("rows");
    let ledger = store
        .ledger(day(0)..=day(JOB_DAYS - 1))
        .await
        .expect("ledger")
        .into_iter()
        .filter_map(|e: LedgerEntry| {
            let synced = e.synced?;
            Some((e.day, (synced.digest, format!("{:?}", synced.counts))))
        })
        .collect();
    (rows, ledger)
}

/// The states a crash may leave: the table filled, then after each of the
/// job's days in turn (the job runs them in order, one at a time).
async fn prefixes() -> Vec<State> {
    let mut out = Vec::new();
    for done in 0..=JOB_DAYS {
        let oracle = MemoryStore::new();
        fill(&oracle).await;
        if done > 0 {
            let fetch = |d: NaiveDate| async move {
                Ok::<_, std::io::Error>(backfill_core::Fetched::new(listing(d)).as_of(at(50)))
            };
            job(Mode::Replace)
                .backfill(&oracle, &fetch, day(0)..=day(done - 1))
                .await
                .expect("the oracle's listings");
        }
        out.push(state(&oracle).await);
    }
    out
}

fn copy_dir(from: &FsPath, to: &FsPath) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_killed_between_any_two_steps_leaves_whole_days() {
    if std::env::var(CHILD_ENV).is_ok() {
        return child().await;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base");
    fill(&DeltaStore::open(base.to_str().unwrap()).await.unwrap()).await;
    let prefixes = prefixes().await;
    assert_eq!(
        state(&DeltaStore::open(base.to_str().unwrap()).await.unwrap()).await,
        prefixes[0]
    );

    let mut reached = Vec::new();
    for k in 1.. {
        assert!(k < 1000, "the job never finished");
        let table = dir.path().join(format!("killed-{k}"));
        copy_dir(&base, &table);
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "a_writer_killed_between_any_two_steps_leaves_whole_days",
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, format!("{} {k}", table.display()))
            .status()
            .unwrap();
        let finished = match status.code() {
            Some(KILLED) => false,
            Some(0) => true,
            _ => panic!("kill point {k}: the child failed ({status})"),
        };
        let store = DeltaStore::open(table.to_str().unwrap()).await.unwrap();
        let found = state(&store).await;
        let Some(done) = prefixes.iter().position(|p| *p == found) else {
            panic!(
                "kill point {k}: the table is in no state the job passes through \
                 (a day half-written, or its ledger apart from its rows)"
            );
        };
        if finished {
            assert_eq!(done, JOB_DAYS as usize, "the finished job left days undone");
            break;
        }
        reached.push(done);
        // Run again, the job ends where it would have without a kill: the
        // same rows and digests (the days it re-applies count their rows
        // as unchanged).
        relist(&store).await;
        let (rows, ledger) = state(&store).await;
        let digests = |l: &BTreeMap<NaiveDate, (Digest, String)>| -> Vec<(NaiveDate, Digest)> {
            l.iter().map(|(d, (digest, _))| (*d, *digest)).collect()
        };
        let (want_rows, want_ledger) = &prefixes[JOB_DAYS as usize];
        assert!(
            rows == *want_rows && digests(&ledger) == digests(want_ledger),
            "kill point {k}: the job run again ends elsewhere"
        );
        drop(store);
        std::fs::remove_dir_all(&table).unwrap();
    }
    // Every day's commit was preceded and followed by kill points.
    for done in 0..JOB_DAYS as usize {
        assert!(
            reached.contains(&done),
            "no kill point left {done} days done: {reached:?}"
        );
    }
    println!(
        "{} kill points; days done at each: {reached:?}",
        reached.len()
    );
}

/// The child: the job on `<table>`, through an object store that ends the
/// process once its `k`-th write returns.
async fn child() {
    let spec = std::env::var(CHILD_ENV).unwrap();
    let (table, k) = spec.rsplit_once(' ').unwrap();
    let kill_after: u64 = k.parse().unwrap();
    let url = Url::parse("killfile://").unwrap();
    let factory = Arc::new(KillFactory { kill_after });
    object_store_factories().insert(url.clone(), factory.clone());
    logstore_factories().insert(url, factory);
    let store = DeltaStore::open(&format!("killfile://{table}"))
        .await
        .unwrap();
    relist(&store).await;
}

/// `killfile:///path`: the local directory at `/path`, through [`Kill`].
struct KillFactory {
    kill_after: u64,
}

impl ObjectStoreFactory for KillFactory {
    fn parse_url_opts(
        &self,
        url: &Url,
        _config: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, deltalake::Path)> {
        let file = Url::parse(&format!("file://{}", url.path())).unwrap();
        let (inner, path) = object_store::parse_url(&file)?;
        let store = Kill {
            inner: Arc::from(inner),
            writes: Arc::new(AtomicU64::new(0)),
            kill_after: self.kill_after,
        };
        Ok((Arc::new(store), path))
    }
}

impl LogStoreFactory for KillFactory {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

/// An object store that ends the process the instant its `kill_after`-th
/// write (a put, a completed multipart upload, a copy, a rename, a delete)
/// has returned.
#[derive(Debug)]
struct Kill {
    inner: Arc<dyn ObjectStore>,
    writes: Arc<AtomicU64>,
    kill_after: u64,
}

impl Kill {
    fn wrote(writes: &AtomicU64, kill_after: u64) {
        if writes.fetch_add(1, Ordering::SeqCst) + 1 == kill_after {
            // No destructor, no flush: what a crash leaves.
            std::process::exit(KILLED);
        }
    }

    fn done<T>(&self, result: object_store::Result<T>) -> object_store::Result<T> {
        Self::wrote(&self.writes, self.kill_after);
        result
    }
}

impl fmt::Display for Kill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kill({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Kill {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.done(self.inner.put_opts(location, payload, opts).await)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(KillUpload {
            inner,
            writes: self.writes.clone(),
            kill_after: self.kill_after,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        use futures_util::StreamExt;
        let (writes, kill_after) = (self.writes.clone(), self.kill_after);
        self.inner
            .delete_stream(locations)
            .map(move |deleted| {
                Kill::wrote(&writes, kill_after);
                deleted
            })
            .boxed()
    }

    /// In key order, as S3 lists (a local directory lists in no order,
    /// and delta-rs sorts only what it knows to be local).
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        use futures_util::{stream, StreamExt, TryStreamExt};
        let listed = self.inner.list(prefix);
        stream::once(async move {
            let mut all: Vec<ObjectMeta> = listed.try_collect().await?;
            all.sort_by(|a, b| a.location.cmp(&b.location));
            Ok::<_, object_store::Error>(stream::iter(all.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let mut listed = self.inner.list_with_delimiter(prefix).await?;
        listed.objects.sort_by(|a, b| a.location.cmp(&b.location));
        listed.common_prefixes.sort();
        Ok(listed)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.done(self.inner.copy_opts(from, to, options).await)
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.done(self.inner.rename_opts(from, to, options).await)
    }
}

/// A multipart upload whose completion is one write of [`Kill`].
#[derive(Debug)]
struct KillUpload {
    inner: Box<dyn MultipartUpload>,
    writes: Arc<AtomicU64>,
    kill_after: u64,
}

#[async_trait]
impl MultipartUpload for KillUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let result = self.inner.complete().await;
        Kill::wrote(&self.writes, self.kill_after);
        result
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}
