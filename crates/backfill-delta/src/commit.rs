//! Writing a change of some days as one commit, and committing it against
//! other writers.
//!
//! A change is decided on one snapshot: the days it read whole, and the
//! keys it writes. It commits only on top of that snapshot's version, or
//! of a later one whose commits since touched none of those days and added
//! none of those keys anywhere (a key of another day moving in). Anything
//! else is a lost race: the change is dropped, its files deleted, and the
//! write decided again on the new snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use backfill_core::columns::Columns;
use backfill_core::{LedgerEntry, Record};
use chrono::NaiveDate;
use delta_kernel::expressions::Scalar;
use deltalake::arrow::array::RecordBatch;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties, TransactionError};
use deltalake::kernel::{Action, Add};
use deltalake::logstore::get_actions;
use deltalake::logstore::object_store::ObjectStoreExt;
use deltalake::parquet::basic::Compression;
use deltalake::parquet::file::properties::WriterProperties;
use deltalake::parquet::schema::types::ColumnPath;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::table::config::TablePropertiesExt;
use deltalake::table::state::DeltaTableState;
use deltalake::writer::{DeltaWriter, RecordBatchWriter, WriteMode};
use deltalake::{DeltaTable, DeltaTableError, ObjectStore, Path};
use indexmap::IndexMap;
use tokio::task::JoinHandle;

use crate::error::{backend, Result};
use crate::rows::{
    epoch_days, history_batch, records_batch, DayHistory, Row, EVENT_DATE, KEY, UPDATED_AT, VALUE,
};
use crate::table::{Cache, DayRows, FileRows, Kinds, Probe, Reader};

/// What one day becomes.
#[derive(Debug)]
pub(crate) struct NewDay {
    /// Its records, tombstones included, in key order.
    pub(crate) records: Vec<Record>,
    /// Its ledger entry.
    pub(crate) ledger: Option<LedgerEntry>,
    /// Its share of history; `None` leaves it as it was.
    pub(crate) history: Option<DayHistory>,
}

/// What a change was decided on.
#[derive(Debug, Default)]
pub(crate) struct ReadSet<'a> {
    /// The days read whole: any commit touching them since is a conflict.
    pub(crate) days: BTreeSet<NaiveDate>,
    /// The keys written: a commit adding one of them anywhere is a conflict.
    pub(crate) keys: Option<&'a Probe<'a>>,
}

/// How a commit ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The change is in the table: the table as it made it.
    Committed(Box<DeltaTableState>),
    /// Another writer changed what it was decided on: decide again.
    Lost,
}

/// The actions that turn `old` days into `new` ones, writing the new files:
/// a day's records, its ledger row and its history rows each go to files
/// of their own, and only what changed is rewritten. `None` when nothing
/// changed.
pub(crate) async fn write_days(
    table: &DeltaTable,
    cache: &Cache,
    old: &BTreeMap<NaiveDate, DayRows>,
    new: BTreeMap<NaiveDate, NewDay>,
    typed: &Columns,
    ahead: Option<Ahead<'_>>,
) -> Result<Option<Vec<Action>>> {
    write_days_with(|| new_writer(table), cache, old, new, typed, false, ahead).await
}

/// A writer of the store's data files into `table`.
fn new_writer(table: &DeltaTable) -> Result<RecordBatchWriter> {
    RecordBatchWriter::for_table(table)
        .map(|writer| writer.with_writer_properties(writer_properties()))
        .map_err(backend)
}

/// A day's records file written on a thread of its own while the write is
/// decided, when the day's rows will most likely be its records as they
/// came: a day new to the table, none of whose keys another day holds (a
/// backfill into a new table, a daily sync's new day). Encoding the file
/// is most of a day's time, and deciding the day needs none of it, so the
/// two run at once. The file is taken when the decision's rows for the
/// day are those records, and deleted otherwise, or when the write fails
/// or is dropped.
pub(crate) struct Ahead<'a> {
    day: NaiveDate,
    /// The records written, in order.
    records: &'a [Record],
    /// Their keys' hashes, sorted, once known: the file's rows are kept
    /// in the cache without hashing them again.
    hashes: Option<&'a [u64]>,
    store: Arc<dyn ObjectStore>,
    task: Option<JoinHandle<Result<Vec<Add>>>>,
}

impl<'a> Ahead<'a> {
    /// Starts writing `records` (all of `day`, in key order) to a file of
    /// their own in `table`.
    pub(crate) fn start(
        table: &DeltaTable,
        day: NaiveDate,
        records: &'a [Record],
        typed: &Columns,
    ) -> Result<Self> {
        let batch = records_batch(records.iter(), None, typed)?;
        let mut writer = new_writer(table)?;
        // A thread of its own, not a task: a task spawned here waits for
        // this one to yield before another worker may take it.
        let runtime = tokio::runtime::Handle::current();
        let task = tokio::task::spawn_blocking(move || {
            runtime.block_on(async move {
                writer
                    .write_partition(batch, &partition(day), WriteMode::Default)
                    .await
                    .map_err(backend)?;
                writer.flush().await.map_err(backend)
            })
        });
        Ok(Ahead {
            day,
            records,
            hashes: None,
            store: table.object_store(),
            task: Some(task),
        })
    }

    /// The sorted hashes of its records' keys.
    pub(crate) fn set_hashes(&mut self, hashes: &'a [u64]) {
        self.hashes = Some(hashes);
    }

    /// Whether its file holds exactly `records`.
    fn holds(&self, records: &[Record]) -> bool {
        self.records == records
    }

    /// The files written, once they are.
    async fn finish(mut self) -> Result<Vec<Add>> {
        let task = self.task.take().expect("a task until finished");
        task.await
            .map_err(|e| backend(DeltaTableError::Generic(e.to_string())))?
    }

    /// Deletes the files, once written.
    pub(crate) async fn discard(mut self) {
        if let Some(task) = self.task.take() {
            delete_written(&self.store, task).await;
        }
    }
}

impl Drop for Ahead<'_> {
    /// Neither taken nor discarded (the write was dropped mid-way): the
    /// files are deleted once written, if the runtime still runs.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let store = Arc::clone(&self.store);
                runtime.spawn(async move { delete_written(&store, task).await });
            } else {
                task.abort();
            }
        }
    }
}

impl std::fmt::Debug for Ahead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead")
            .field("day", &self.day)
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

/// Deletes the files `task` writes, once it has.
async fn delete_written(store: &Arc<dyn ObjectStore>, task: JoinHandle<Result<Vec<Add>>>) {
    if let Ok(Ok(added)) = task.await {
        let actions: Vec<Action> = added.into_iter().map(Action::Add).collect();
        discard(store, &actions).await;
    }
}

/// [`write_days`] through the writers `writer` makes; with `every_file`,
/// each old file is removed and each new day written whole, changed or not
/// (a change of the table's columns). A day whose records `ahead` has
/// written takes its file; otherwise `ahead`'s file is deleted. The rows of
/// each new file are moved into `cache`: the next write of its day, a probe
/// by another day's write and a conflict check read them from memory (a
/// file whose commit loses is never read).
pub(crate) async fn write_days_with(
    writer: impl Fn() -> Result<RecordBatchWriter>,
    cache: &Cache,
    old: &BTreeMap<NaiveDate, DayRows>,
    mut new: BTreeMap<NaiveDate, NewDay>,
    typed: &Columns,
    every_file: bool,
    mut ahead: Option<Ahead<'_>>,
) -> Result<Option<Vec<Action>>> {
    // The day `ahead` wrote, when its rows are those records: its file is
    // taken, and its rows made ready for the cache while the file is
    // finished.
    let ahead_day = |ahead: &Ahead<'_>| {
        let fresh = old.get(&ahead.day).is_none_or(|old| old.files.is_empty());
        fresh
            && new
                .get(&ahead.day)
                .is_some_and(|new| ahead.holds(&new.records))
    };
    let ready = match ahead.take_if(|ahead| ahead_day(ahead)) {
        Some(written) => {
            let records = match new.get_mut(&written.day) {
                Some(day) => std::mem::take(&mut day.records),
                None => Vec::new(),
            };
            let rows = cache
                .admits(records.iter().map(Row::record_size).sum())
                .then(|| {
                    let rows = records.into_iter().map(Row::Record).collect();
                    Arc::new(match written.hashes {
                        Some(hashes) => FileRows::with_hashes(rows, hashes.to_vec()),
                        None => FileRows::new(rows),
                    })
                });
            Some((written, rows))
        }
        None => None,
    };
    if let Some(unused) = ahead {
        unused.discard().await;
    }
    let empty = DayRows::default();
    for (day, new) in &mut new {
        if new.history.is_none() {
            new.history = Some(old.get(day).unwrap_or(&empty).history.clone());
        }
    }
    let mut removes = Vec::new();
    let mut records_of: Vec<(NaiveDate, &[Record])> = Vec::new();
    let mut ledgers: Vec<(NaiveDate, &LedgerEntry)> = Vec::new();
    let mut histories: Vec<(NaiveDate, &DayHistory)> = Vec::new();
    for (&day, new) in &new {
        let old = old.get(&day).unwrap_or(&empty);
        let history = new.history.as_ref().expect("set above");
        let mut changed = Kinds {
            records: old.records.len() != new.records.len()
                || old
                    .records
                    .values()
                    .zip(&new.records)
                    .any(|(old, new)| old != new),
            ledger: old.ledger.as_ref() != new.ledger.as_ref(),
            history: old.history != *history,
        };
        // A file holding more than one kind (compacted by another engine)
        // goes when any does, and every kind is written again.
        let mixed = old.files.iter().any(|(_, kinds)| kinds.mixed());
        if every_file || (mixed && !changed.none()) {
            changed = Kinds {
                records: true,
                ledger: true,
                history: true,
            };
        }
        for (file, kinds) in &old.files {
            if (changed.records && kinds.records)
                || (changed.ledger && kinds.ledger)
                || (changed.history && kinds.history)
                || kinds.none()
            {
                removes.push(Action::Remove(file.remove.clone()));
            }
        }
        if changed.records && !new.records.is_empty() {
            records_of.push((day, &new.records));
        }
        if changed.ledger {
            if let Some(entry) = &new.ledger {
                ledgers.push((day, entry));
            }
        }
        if changed.history && !history.is_empty() {
            histories.push((day, history));
        }
    }
    let taken = ready.as_ref().map(|(written, _)| written.day);
    if removes.is_empty()
        && records_of.is_empty()
        && ledgers.is_empty()
        && histories.is_empty()
        && ready.is_none()
    {
        return Ok(None);
    }
    // The kinds of file by writers of their own at once: a day's ledger
    // row and history rows are files of their own, and their writes need
    // not wait for the records'.
    let (records_added, ledgers_added, histories_added) = futures_util::try_join!(
        async {
            let mut added = write_files(&writer, &records_of, typed, records_of_day).await?;
            if let Some((written, rows)) = ready {
                let day = written.day;
                let files = written.finish().await?;
                if let Some((path, rows)) = only_file(&files, day).zip(rows) {
                    cache.put(&path, &rows);
                }
                added.extend(files);
            }
            Ok(added)
        },
        write_files(&writer, &ledgers, typed, ledger_of_day),
        write_files(&writer, &histories, typed, history_of_day),
    )?;
    for (&day, written) in &mut new {
        // A day too large for the cache is not turned into its rows (nor
        // the day `ahead` wrote, whose rows are in the cache already).
        let fits = cache.admits(written.records.iter().map(Row::record_size).sum());
        if let Some(path) = only_file(&records_added, day).filter(|_| fits && Some(day) != taken) {
            let records = std::mem::take(&mut written.records);
            let rows = records.into_iter().map(Row::Record).collect();
            cache.put(&path, &Arc::new(FileRows::new(rows)));
        }
        if let Some((path, entry)) = only_file(&ledgers_added, day).zip(written.ledger.take()) {
            cache.put(&path, &Arc::new(FileRows::new(vec![Row::Ledger(entry)])));
        }
        if let Some((path, history)) = only_file(&histories_added, day).zip(written.history.take())
        {
            let rows = (history.listings.into_iter().map(Row::Listing))
                .chain(history.versions.into_iter().map(Row::Version))
                .collect();
            cache.put(&path, &Arc::new(FileRows::new(rows)));
        }
    }
    let adds = records_added
        .into_iter()
        .chain(ledgers_added)
        .chain(histories_added);
    Ok(Some(
        removes.into_iter().chain(adds.map(Action::Add)).collect(),
    ))
}

/// Writes each day's batch (made by `batch` as it is written, not all at
/// once) to the day's partition through a writer `writer` makes: the files
/// added (none for no day).
async fn write_files<T>(
    writer: &impl Fn() -> Result<RecordBatchWriter>,
    days: &[(NaiveDate, T)],
    typed: &Columns,
    batch: fn(&T, &Columns) -> Result<RecordBatch>,
) -> Result<Vec<Add>> {
    if days.is_empty() {
        return Ok(Vec::new());
    }
    let mut writer = writer()?;
    for (day, rows) in days {
        let (day, batch) = (*day, batch(rows, typed)?);
        writer
            .write_partition(batch, &partition(day), WriteMode::Default)
            .await
            .map_err(backend)?;
    }
    writer.flush().await.map_err(backend)
}

/// Rows in a row group at most: what a writer holds before it writes
/// them out, and a reader reads at once.
const ROW_GROUP_ROWS: usize = 1 << 17;

/// How the store's data files are encoded: Snappy, as delta-rs writes
/// them, row groups of at most [`ROW_GROUP_ROWS`], with no dictionary for the columns whose values are all or mostly
/// distinct (a key is in one row of the table; a value and an instant
/// seldom repeat), where building one costs time and saves no space.
pub(crate) fn writer_properties() -> WriterProperties {
    [KEY, VALUE, UPDATED_AT]
        .into_iter()
        .fold(
            WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_max_row_group_row_count(Some(ROW_GROUP_ROWS)),
            |builder, column| {
                builder.set_column_dictionary_enabled(ColumnPath::from(column), false)
            },
        )
        .build()
}

/// A day's records as a batch.
fn records_of_day(records: &&[Record], typed: &Columns) -> Result<RecordBatch> {
    records_batch(records.iter(), None, typed)
}

/// A day's ledger row as a batch.
fn ledger_of_day(entry: &&LedgerEntry, typed: &Columns) -> Result<RecordBatch> {
    records_batch(std::iter::empty(), Some(entry), typed)
}

/// A day's history rows as a batch.
fn history_of_day(history: &&DayHistory, typed: &Columns) -> Result<RecordBatch> {
    history_batch(history, typed)
}

/// The file of `added` that is the only one of `day`'s, if there is one:
/// a file whose rows are those written for the day, to keep in the cache.
fn only_file(added: &[Add], day: NaiveDate) -> Option<Path> {
    let mut of_day = added
        .iter()
        .filter(|add| day_of(&add.partition_values) == Some(day));
    match (of_day.next(), of_day.next()) {
        (Some(add), None) => Some(file_path(add)),
        _ => None,
    }
}

/// Where an added file is, in the table's object store.
fn file_path(add: &Add) -> Path {
    Path::parse(&add.path).unwrap_or_else(|_| Path::from(add.path.as_str()))
}

pub(crate) fn partition(day: NaiveDate) -> IndexMap<String, Scalar> {
    IndexMap::from([(EVENT_DATE.to_owned(), Scalar::Date(epoch_days(day)))])
}

/// Commits `actions` on top of `table`'s snapshot, or of a later version
/// whose commits since do not conflict with `read`. Unless it commits, the
/// files the actions add are deleted.
pub(crate) async fn commit(
    cache: &Cache,
    table: &DeltaTable,
    actions: Vec<Action>,
    read: &ReadSet<'_>,
    operation: DeltaOperation,
) -> Result<Outcome> {
    let outcome = try_commit(cache, table, &actions, read, operation).await;
    if !matches!(outcome, Ok(Outcome::Committed(_))) {
        discard(&table.object_store(), &actions).await;
    }
    outcome
}

/// [`commit`], the files left to it.
async fn try_commit(
    cache: &Cache,
    table: &DeltaTable,
    actions: &[Action],
    read: &ReadSet<'_>,
    operation: DeltaOperation,
) -> Result<Outcome> {
    let mut table = table.clone();
    let store = table.object_store();
    let reader = Reader {
        store: &store,
        cache,
    };
    // How many times in a row a commit failed with no newer version to be
    // seen: past a few, the change is decided again from a fresh snapshot.
    let mut unseen = 0;
    loop {
        let snapshot = table.snapshot().map_err(backend)?;
        // Expired log entries are cleaned up when a checkpoint is made, as
        // Delta engines do, rather than looked for after every commit.
        let interval = snapshot.table_config().checkpoint_interval().get();
        let checkpoint = (snapshot.version() + 2).is_multiple_of(interval);
        let properties = CommitProperties::default()
            .with_max_retries(0)
            .with_cleanup_expired_logs(checkpoint.then_some(true).or(Some(false)));
        let committed = CommitBuilder::from(properties)
            .with_actions(actions.to_vec())
            .build(Some(snapshot), table.log_store(), operation.clone())
            .await;
        match committed {
            Ok(done) => return Ok(Outcome::Committed(Box::new(done.snapshot))),
            Err(e) if lost_race(&e) => {}
            Err(e) => return Err(backend(e)),
        }
        let from = table.version().unwrap_or_default();
        table.update_state().await.map_err(backend)?;
        let to = table.version().unwrap_or_default();
        for version in from + 1..=to {
            let winner = match table
                .log_store()
                .read_commit_entry(version)
                .await
                .map_err(backend)?
            {
                Some(bytes) => get_actions(version, &bytes).map_err(backend)?,
                // Cleaned up already: its changes cannot be told apart.
                None => Vec::new(),
            };
            if winner.is_empty() || conflicts(reader, &winner, read).await? {
                return Ok(Outcome::Lost);
            }
        }
        if to == from {
            // The commit failed without a newer version to be seen yet:
            // look again in a moment.
            unseen += 1;
            if unseen > 20 {
                return Ok(Outcome::Lost);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        } else {
            unseen = 0;
        }
    }
}

/// Whether delta-rs refused a commit because another writer took its
/// version first.
fn lost_race(e: &DeltaTableError) -> bool {
    matches!(
        e,
        DeltaTableError::VersionAlreadyExists(_)
            | DeltaTableError::Transaction {
                source: TransactionError::MaxCommitAttempts(_)
                    | TransactionError::VersionAlreadyExists(_)
            }
    )
}

/// Whether a winning commit's actions touch what a change read.
async fn conflicts(reader: Reader<'_>, winner: &[Action], read: &ReadSet<'_>) -> Result<bool> {
    for action in winner {
        match action {
            Action::Metadata(_) | Action::Protocol(_) => return Ok(true),
            Action::Remove(remove) => {
                let day = remove.partition_values.as_ref().and_then(day_of);
                if day.is_none_or(|day| read.days.contains(&day)) {
                    return Ok(true);
                }
            }
            Action::Add(add) => {
                let Some(day) = day_of(&add.partition_values) else {
                    return Ok(true);
                };
                if read.days.contains(&day) {
                    return Ok(true);
                }
                let Some(ours) = read.keys.filter(|keys| !keys.is_empty()) else {
                    continue;
                };
                if reader
                    .holds(&file_path(add), add.size.max(0) as u64, day, ours)
                    .await?
                {
                    return Ok(true);
                }
            }
            _ => {}
        }
    }
    Ok(false)
}

fn day_of(values: &std::collections::HashMap<String, Option<String>>) -> Option<NaiveDate> {
    values.get(EVENT_DATE)?.as_deref()?.parse().ok()
}

/// Deletes the files a change added and did not commit. Best effort: a file
/// left behind is in no version and goes with the next `VACUUM`.
pub(crate) async fn discard(store: &Arc<dyn ObjectStore>, actions: &[Action]) {
    for action in actions {
        if let Action::Add(add) = action {
            let _ = store.delete(&file_path(add)).await;
        }
    }
}

/// The operation a day's write is logged as: a write replacing the days it
/// rewrote.
pub(crate) fn operation(days: impl IntoIterator<Item = NaiveDate>) -> DeltaOperation {
    let days: Vec<String> = days.into_iter().map(|day| format!("'{day}'")).collect();
    DeltaOperation::Write {
        mode: SaveMode::Overwrite,
        partition_by: Some(vec![EVENT_DATE.to_owned()]),
        predicate: Some(format!("{EVENT_DATE} IN ({})", days.join(", "))),
    }
}
