//! [`DeltaStore`]: opening the table, and the [`Store`] contract on it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use backfill_core::columns::{Column, ColumnType, Columns};
use backfill_core::history::{history_of, one_per_instant, HistoryParts, HistoryRow, Version};
use backfill_core::{
    Counts, DayFailure, DayWrite, Digest, Error, LedgerEntry, MemoryStore, Record, Store,
};
use chrono::{DateTime, NaiveDate, Utc};
use delta_kernel::engine::arrow_conversion::TryIntoArrow;
use deltalake::kernel::{Action, MetadataExt, StructType};
use deltalake::operations::create::CreateBuilder;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::RecordBatchWriter;
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError, ObjectStore};
use tokio::sync::Mutex;

use crate::commit::{
    commit, discard, operation, write_days, write_days_with, writer_properties, Ahead, NewDay,
    Outcome, ReadSet,
};
use crate::error::{backend, corrupt, open, Result, BACKEND};
use crate::paged::{self, Paging};
use crate::rows::{
    check_typed, columns_property, declared, delta_columns, recorded_columns, DayHistory,
    COLUMNS_PROPERTY, EVENT_DATE, HISTORY_PROPERTY, OWN_COLUMNS,
};
use crate::table::{Cache, DayRows, Files, Probe, Reader};

/// How many times a write is decided again after losing a commit race
/// before it gives up (with a retryable error: the job tries the day again).
const MAX_ATTEMPTS: u32 = 100;

/// How long a snapshot this store has just read or committed is taken as
/// the latest by a day's first attempt, without asking storage again: a
/// commit made on it finds any version made since (it is refused, and the
/// winning commits are checked against what the write read), and a write
/// that would commit nothing on it is decided again on the latest, so this
/// saves a listing of the log a day, never a check.
const FRESH: Duration = Duration::from_secs(1);

/// A [`Store`] on a Delta Lake table: a directory or an object-store
/// prefix, partitioned by `event_date`, that any Delta reader reads.
///
/// See the [crate docs](crate) for the table's layout, the ledger and how
/// writers on many machines commit to one table.
pub struct DeltaStore {
    location: String,
    /// The typed columns, in the table's order.
    columns: Columns,
    /// The latest snapshot read or committed.
    table: Mutex<Latest>,
    /// The rows of the files read lately.
    cache: Cache,
    /// How a streamed day is read.
    paging: Paging,
    /// Days being applied through this store now.
    applying: AtomicUsize,
    /// How many rows history started from, when opening turned it on.
    history_started_with: Option<u64>,
}

impl fmt::Debug for DeltaStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaStore")
            .field("location", &self.location)
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}

/// The latest snapshot a store read or committed, and when it was.
struct Latest {
    table: DeltaTable,
    seen: Instant,
}

/// How to open a [`DeltaStore`]: where, with which storage options and
/// typed columns. From [`DeltaStore::builder`].
#[derive(Debug, Clone)]
pub struct DeltaStoreBuilder {
    location: String,
    storage_options: HashMap<String, String>,
    columns: Vec<Column>,
    allow_column_changes: bool,
    history: bool,
    paging: Paging,
}

impl DeltaStoreBuilder {
    /// delta-rs's storage options (as its `storage_options` names them: on
    /// S3, `aws_endpoint_url`, `aws_region`, `aws_access_key_id`, …), over
    /// the environment's.
    pub fn storage_options(mut self, options: HashMap<String, String>) -> Self {
        self.storage_options = options;
        self
    }

    /// One storage option (see [`storage_options`](Self::storage_options)).
    pub fn storage_option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.storage_options.insert(key.into(), value.into());
        self
    }

    /// A typed column: a field of each record's JSON value kept as a
    /// column of its own (see [typed columns](crate#typed-columns)).
    pub fn column(mut self, column: Column) -> Self {
        self.columns.push(column);
        self
    }

    /// Typed columns, after those declared so far.
    pub fn columns(mut self, columns: impl IntoIterator<Item = Column>) -> Self {
        self.columns.extend(columns);
        self
    }

    /// Whether opening may drop the table's typed columns the declaration
    /// lacks and remake those it declares with another type (every file
    /// of the table rewritten), rather than refuse the table. Off by
    /// default.
    pub fn allow_column_changes(mut self, allow: bool) -> Self {
        self.allow_column_changes = allow;
        self
    }

    /// Whether the table keeps [history](crate#history): every version of
    /// every key, read with [`Store::history`] and [`Store::as_of`]. Off
    /// by default; once a table keeps it, it always does (the table
    /// property `backfill.history`), whoever opens it.
    pub fn history(mut self, on: bool) -> Self {
        self.history = on;
        self
    }

    /// How many records of a streamed day are decided at once, and how many
    /// of its stored rows (50 000 of each by default): for tests that take
    /// a small day through the pages a large one is read in.
    #[doc(hidden)]
    pub fn page_rows(mut self, rows: usize) -> Self {
        self.paging.page_rows = rows.max(1);
        self.paging.range_rows = rows.max(1);
        self
    }

    /// Opens the table, creating it if there is none, and adds the typed
    /// columns it lacks, filled from its rows.
    ///
    /// # Errors
    ///
    /// As [`DeltaStore::open`]; [`Error::InvalidColumnDeclaration`] for a
    /// declaration that is not valid; [`Error::Open`] for a table whose
    /// typed columns differ from the declaration (naming the column), unless
    /// column changes are allowed; [`Error::InvalidColumn`] naming the
    /// first stored row a new column does not fit (nothing is changed).
    pub async fn open(self) -> Result<DeltaStore> {
        let columns = Columns::new(self.columns)?;
        let store = DeltaStore::open_table(
            &self.location,
            self.storage_options,
            Some((columns, self.allow_column_changes)),
            self.history,
        )
        .await?;
        Ok(DeltaStore {
            paging: self.paging,
            ..store
        })
    }
}

impl DeltaStore {
    /// Opens the table at `location` (a local directory, a `file://…` URL
    /// or an `s3://bucket/path` prefix: see [where it lives](crate#where-it-lives)),
    /// creating it if there is none.
    ///
    /// # Errors
    ///
    /// [`Error::Open`] when the location cannot be reached or holds a table
    /// of another shape (naming the column that differs).
    pub async fn open(location: &str) -> Result<Self> {
        Self::builder(location).open().await
    }

    /// A builder for the table at `location`: storage options, typed
    /// columns.
    pub fn builder(location: impl Into<String>) -> DeltaStoreBuilder {
        DeltaStoreBuilder {
            location: location.into(),
            storage_options: HashMap::new(),
            columns: Vec::new(),
            allow_column_changes: false,
            history: false,
            paging: Paging::default(),
        }
    }

    /// [`DeltaStore::open`] with delta-rs's storage options (as its
    /// `storage_options` names them: on S3, `aws_endpoint_url`,
    /// `aws_region`, `aws_access_key_id`, …, over the environment's).
    ///
    /// # Errors
    ///
    /// As [`DeltaStore::open`].
    pub async fn open_with(
        location: &str,
        storage_options: HashMap<String, String>,
    ) -> Result<Self> {
        Self::builder(location)
            .storage_options(storage_options)
            .open()
            .await
    }

    /// Opens the table at `location` if there is one, creating nothing: for
    /// readers of the ledger (`backfill status`). Its typed columns are
    /// taken as the table has them, each nullable.
    ///
    /// # Errors
    ///
    /// [`Error::Open`] as [`DeltaStore::open`], and when there is no Delta
    /// table at `location`.
    pub async fn open_existing(
        location: &str,
        storage_options: HashMap<String, String>,
    ) -> Result<Self> {
        Self::open_table(location, storage_options, None, false).await
    }

    /// Opens the table; with `declared` (the typed columns, and whether
    /// they may change the table's), creating it if there is none; with
    /// `history`, keeping history from now on.
    async fn open_table(
        location: &str,
        storage_options: HashMap<String, String>,
        declared: Option<(Columns, bool)>,
        history: bool,
    ) -> Result<Self> {
        let create = declared.is_some();
        if !create && !location.contains("://") && !std::path::Path::new(location).is_dir() {
            return Err(open(format!(
                "no Delta table at {location} (nothing has been synced there)"
            )));
        }
        crate::s3::register();
        let url = deltalake::ensure_table_uri(location).map_err(open)?;
        let shown = crate::shown_location(&url);
        let mut created = false;
        let table = loop {
            let builder = DeltaTableBuilder::from_url(url.clone())
                .map_err(open)?
                .with_storage_options(storage_options.clone());
            match builder.load().await {
                Ok(table) => break table,
                Err(DeltaTableError::NotATable(_)) if !create => {
                    return Err(open(format!(
                        "no Delta table at {shown} (nothing has been synced there)"
                    )));
                }
                Err(DeltaTableError::NotATable(_)) if !created => {}
                Err(e) => return Err(open(e)),
            }
            created = true;
            let made = CreateBuilder::new()
                .with_location(url.as_str())
                .with_storage_options(storage_options.clone())
                .with_columns(delta_columns(
                    declared.as_ref().map_or(&Columns::default(), |d| &d.0),
                ))
                .with_partition_columns([EVENT_DATE])
                // The store's own property, not one of Delta's.
                .with_raise_if_key_not_exists(false)
                .with_configuration([
                    (
                        COLUMNS_PROPERTY,
                        declared.as_ref().map(|d| columns_property(&d.0)),
                    ),
                    (HISTORY_PROPERTY, history.then(|| "true".to_owned())),
                ])
                .with_save_mode(SaveMode::Ignore)
                .await;
            match made {
                Ok(table) => break table,
                // Another writer created it first: open theirs.
                Err(
                    DeltaTableError::VersionAlreadyExists(_) | DeltaTableError::Transaction { .. },
                ) => {}
                Err(e) => return Err(open(e)),
            }
        };
        check_shape(&table, &shown)?;
        let cache = Cache::default();
        let (table, columns) = match declared {
            Some((columns, allow)) => {
                let change = Change {
                    declared: &columns,
                    allow,
                    location: &shown,
                    storage_options: &storage_options,
                    cache: &cache,
                };
                change.apply(table).await?
            }
            None => {
                let present = typed_columns(&table, &shown)?;
                let columns = present
                    .into_iter()
                    .map(|(name, ty)| Ok(Column::new(name, ty?)?.nullable(true)))
                    .collect::<Result<Vec<_>>>()?;
                (table, Columns::new(columns)?)
            }
        };
        let mut store = Self {
            location: shown,
            columns,
            table: Mutex::new(Latest {
                table,
                seen: Instant::now(),
            }),
            cache,
            paging: Paging::default(),
            applying: AtomicUsize::new(0),
            history_started_with: None,
        };
        if history {
            store.history_started_with = store.turn_on_history(created).await?;
        }
        Ok(store)
    }

    /// Turns history on for the table unless it keeps it already: how many
    /// rows it starts from (its rows, one version each), `None` when it
    /// was on. Nothing but the table property is written: each row of a
    /// table that keeps history is a version of it unless the day's
    /// history rows say otherwise.
    async fn turn_on_history(&self, created: bool) -> Result<Option<u64>> {
        for attempt in 1..=MAX_ATTEMPTS {
            let table = self.latest().await?;
            if keeps_history(&table)? {
                return Ok(created.then_some(0));
            }
            let rows = match records_by_statistics(&Files::of(&table)?) {
                Some(rows) => rows,
                None => self.all_records().await?.len() as u64,
            };
            let metadata = table
                .snapshot()
                .map_err(backend)?
                .metadata()
                .clone()
                .add_config_key(HISTORY_PROPERTY.into(), "true".into())
                .map_err(|e| open(e.to_string()))?;
            let operation = DeltaOperation::SetTableProperties {
                properties: HashMap::from([(HISTORY_PROPERTY.to_owned(), "true".to_owned())]),
            };
            let actions = vec![Action::Metadata(metadata)];
            match commit(&self.cache, &table, actions, &ReadSet::default(), operation).await? {
                Outcome::Committed(state) => {
                    let mut latest = self.table.lock().await;
                    latest.table.state = Some(*state);
                    latest.seen = Instant::now();
                    return Ok(Some(rows));
                }
                Outcome::Lost => {
                    tokio::time::sleep(Duration::from_millis(u64::from(attempt.min(20)))).await;
                }
            }
        }
        Err(gave_up("turning history on"))
    }

    /// Whether the table keeps history (the table property, as the latest
    /// snapshot this store read has it).
    pub async fn keeps_history(&self) -> Result<bool> {
        keeps_history(&self.table.lock().await.table)
    }

    /// When opening turned history on for the table: how many rows it
    /// started from, one version each (0 for a new table). `None` when
    /// the table kept history already, or keeps none.
    pub fn history_started_with(&self) -> Option<u64> {
        self.history_started_with
    }

    /// The typed columns, in the table's order.
    pub fn columns(&self) -> &Columns {
        &self.columns
    }

    /// Where the table is, without any credentials the URL held.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The table's latest version.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the log cannot be read.
    pub async fn version(&self) -> Result<u64> {
        Ok(self.latest().await?.version().unwrap_or_default())
    }

    /// The latest snapshot.
    async fn latest(&self) -> Result<DeltaTable> {
        let mut latest = self.table.lock().await;
        latest.table.update_state().await.map_err(backend)?;
        latest.seen = Instant::now();
        Ok(latest.table.clone())
    }

    /// With `reuse`, the snapshot this store read or committed within
    /// [`FRESH`] if there is one (and `true`); else the latest (and
    /// `false`).
    async fn latest_or_fresh(&self, reuse: bool) -> Result<(DeltaTable, bool)> {
        if reuse {
            let latest = self.table.lock().await;
            if latest.seen.elapsed() < FRESH {
                return Ok((latest.table.clone(), true));
            }
        }
        Ok((self.latest().await?, false))
    }

    /// What every day of `days` holds, read whole.
    async fn read_whole(
        &self,
        table: &DeltaTable,
        files: &Files,
        days: &BTreeSet<NaiveDate>,
    ) -> Result<BTreeMap<NaiveDate, DayRows>> {
        let chosen: Vec<_> = days
            .iter()
            .flat_map(|day| files.of_day(*day))
            .cloned()
            .collect();
        self.reader(&table.object_store()).days(chosen).await
    }

    /// The latest snapshot, and every day of it read whole.
    async fn all_days(&self) -> Result<(DeltaTable, BTreeMap<NaiveDate, DayRows>)> {
        let table = self.latest().await?;
        let files = Files::of(&table)?;
        let days = self
            .reader(&table.object_store())
            .days(files.all().cloned().collect())
            .await?;
        Ok((table, days))
    }

    /// Every record of the table, by key, tombstones included.
    async fn all_records(&self) -> Result<BTreeMap<String, Record>> {
        let (_, days) = self.all_days().await?;
        let mut records = BTreeMap::new();
        for rows in days.into_values() {
            records.extend(rows.records);
        }
        Ok(records)
    }

    /// Reads files of `store` through the cache.
    fn reader<'a>(&'a self, store: &'a Arc<dyn ObjectStore>) -> Reader<'a> {
        Reader {
            store,
            cache: &self.cache,
        }
    }

    /// The latest snapshot and its files.
    async fn snapshot(&self) -> Result<(DeltaTable, Files)> {
        let table = self.latest().await?;
        let files = Files::of(&table)?;
        Ok((table, files))
    }

    /// Commits a change decided on `table`: its result once committed (or
    /// when nothing changed), `None` when another writer's commit
    /// conflicted with it and it must be decided again. A change that
    /// changes nothing on a `reused` snapshot (one not read from storage
    /// for it) is decided again too: only a commit checks what came since.
    async fn settle<T>(
        &self,
        table: &DeltaTable,
        decision: Decision<'_, T>,
        attempt: u32,
        reused: bool,
    ) -> Result<Option<T>> {
        if typed_columns(table, &self.location)?
            .iter()
            .map(|(name, ty)| (name.as_str(), ty.as_ref().ok().copied()))
            .ne(self
                .columns
                .iter()
                .map(|c| (c.name(), Some(c.column_type()))))
        {
            discard(&table.object_store(), &decision.written).await;
            if let Some(ahead) = decision.ahead {
                ahead.discard().await;
            }
            return Err(open(format!(
                "the typed columns of the Delta table at {} changed since it was opened: open it \
                 again",
                self.location
            )));
        }
        let read = ReadSet {
            days: decision
                .old
                .keys()
                .copied()
                .chain(decision.new.keys().copied())
                .collect(),
            keys: decision.keys,
        };
        let logged = operation(decision.new.keys().copied());
        let written = decision.written;
        let rest = match write_days(
            table,
            &self.cache,
            &decision.old,
            decision.new,
            &self.columns,
            decision.ahead,
        )
        .await
        {
            Ok(rest) => rest,
            Err(e) => {
                discard(&table.object_store(), &written).await;
                return Err(e);
            }
        };
        let actions: Vec<Action> = match rest {
            None if written.is_empty() => return Ok((!reused).then_some(decision.result)),
            rest => written
                .into_iter()
                .chain(rest.unwrap_or_default())
                .collect(),
        };
        match commit(&self.cache, table, actions, &read, logged).await? {
            Outcome::Committed(state) => {
                // The next write starts from the table as this one left it.
                let mut latest = self.table.lock().await;
                if latest.table.version() < Some(state.version()) {
                    latest.table.state = Some(*state);
                    latest.seen = Instant::now();
                }
                Ok(Some(decision.result))
            }
            Outcome::Lost => {
                // Back off a little, more as the races go on, so that
                // writers of one day take turns.
                let pause = u64::from(attempt.min(20)) * (1 + u64::from(attempt % 7));
                tokio::time::sleep(Duration::from_millis(pause)).await;
                Ok(None)
            }
        }
    }

    /// Applies a day read whole (one page): decided in memory.
    async fn apply_whole(&self, day: DayWrite, records: Vec<Record>) -> Result<Counts> {
        check_typed(&records, &self.columns)?;
        let probe = std::cell::OnceCell::new();
        let spare_core = self.applying.load(Ordering::Relaxed) == 1 && cores() > 1;
        let mut own: BTreeSet<NaiveDate> = day.days().iter().copied().collect();
        own.insert(day.day());
        for attempt in 1..=MAX_ATTEMPTS {
            // A day's first attempt may decide on the snapshot this store
            // has just read or committed.
            let (table, reused) = self.latest_or_fresh(attempt == 1).await?;
            let files = Files::of(&table)?;
            // A day new to the table most likely becomes its records as
            // they came (all of its own `event_date`: `own` is that day
            // alone): their file is written while the day is decided, when
            // a core is free for it (no other day is being applied through
            // this store).
            let new_day = spare_core
                && files.of_day(day.day()).is_empty()
                && own.len() == 1
                && !records.is_empty();
            let mut ahead = match new_day {
                true => Some(Ahead::start(&table, day.day(), &records, &self.columns)?),
                false => None,
            };
            let probe = probe.get_or_init(|| Probe::new(records.iter().map(Record::key)));
            if let Some(ahead) = &mut ahead {
                ahead.set_hashes(probe.hashes());
            }
            let decided = self
                .decide_apply(&table, &files, &day, &records, &own, probe)
                .await;
            let mut decision = match decided {
                Ok(decision) => decision,
                Err(e) => {
                    if let Some(ahead) = ahead {
                        ahead.discard().await;
                    }
                    return Err(e);
                }
            };
            decision.ahead = ahead;
            if let Some(counts) = self.settle(&table, decision, attempt, reused).await? {
                return Ok(counts);
            }
        }
        Err(gave_up("applying a day"))
    }

    /// Applies a streamed day larger than a page, page by page (see the
    /// `paged` module); `first` is its first page, read already.
    async fn apply_paged(&self, mut day: DayWrite, first: Vec<Record>) -> Result<Counts> {
        let mut first = Some(first);
        for attempt in 1..=MAX_ATTEMPTS {
            let page = match first.take() {
                Some(page) => page,
                None => {
                    day.rewind()?;
                    let page = day.next_page(self.paging.page_rows, self.paging.page_bytes)?;
                    page.unwrap_or_default()
                }
            };
            let (table, reused) = self.latest_or_fresh(attempt == 1).await?;
            if keeps_history(&table)? {
                // History is decided with the day's versions, in memory.
                day.rewind()?;
                let records = day.read_all()?;
                return self.apply_whole(day, records).await;
            }
            let files = Files::of(&table)?;
            let store = table.object_store();
            let reader = self.reader(&store);
            let decided = paged::decide(
                &table,
                &files,
                reader,
                &self.columns,
                self.paging,
                &mut day,
                page,
            )
            .await?;
            let Some(paged) = decided else {
                // Files not in key order: the day is read whole.
                day.rewind()?;
                let records = day.read_all()?;
                return self.apply_whole(day, records).await;
            };
            let decision = Decision {
                old: paged.old,
                new: paged.new,
                keys: Some(&paged.keys),
                written: paged.written,
                ahead: None,
                result: paged.counts,
            };
            if let Some(counts) = self.settle(&table, decision, attempt, reused).await? {
                return Ok(counts);
            }
        }
        Err(gave_up("applying a day"))
    }

    /// What a day's write makes of the table as `table` has it.
    async fn decide_apply<'a>(
        &self,
        table: &DeltaTable,
        files: &Files,
        day: &DayWrite,
        records: &[Record],
        own: &BTreeSet<NaiveDate>,
        probe: &'a Probe<'a>,
    ) -> Result<Decision<'a, Counts>> {
        let store = table.object_store();
        // The days the write reads whole: its own, and those that hold
        // one of its keys (a key moving between days).
        let mut whole = own.clone();
        if let Some((first, last)) = records.first().zip(records.last()) {
            let elsewhere: Vec<_> = files
                .all()
                .filter(|f| !own.contains(&f.day) && f.may_hold_keys(first.key(), last.key()))
                .cloned()
                .collect();
            whole.extend(self.reader(&store).days_holding(elsewhere, probe).await?);
        }
        let old = self.read_whole(table, files, &whole).await?;
        // The reference store decides: the same rows, counts, ledger entry
        // and history as every other store.
        let mut memory = MemoryStore::from_parts(
            old.values().flat_map(|rows| rows.records.values().cloned()),
            old.values().filter_map(|rows| rows.ledger.clone()),
        );
        // Into days that hold nothing yet, a write that is no listing makes
        // each version its row as delivered: the days' history is their
        // rows, and no history row is decided.
        let fresh = day.as_of().is_none()
            && old
                .values()
                .all(|rows| rows.records.is_empty() && rows.history.is_empty());
        if keeps_history(table)? && !fresh {
            memory = memory.with_history_parts(history_parts(&old));
        }
        let applied = memory.apply_into_all(day, records)?;
        let mut new: BTreeMap<NaiveDate, NewDay> = whole
            .iter()
            .map(|&d| {
                let day = NewDay {
                    records: Vec::new(),
                    ledger: None,
                    history: None,
                };
                (d, day)
            })
            .collect();
        for row in applied.rows {
            let Some(to) = new.get_mut(&row.event_date()) else {
                return Err(corrupt(format!("a row of an unread day: {row:?}")));
            };
            to.records.push(row);
        }
        for entry in applied.ledger {
            if let Some(to) = new.get_mut(&entry.day) {
                to.ledger = Some(entry);
            }
        }
        if let Some(parts) = applied.history {
            share_history(&old, &mut new, parts)?;
        }
        Ok(Decision {
            old,
            new,
            keys: Some(probe),
            written: Vec::new(),
            ahead: None,
            result: applied.counts,
        })
    }

    /// What purging tombstones before `before` makes of the table.
    async fn decide_purge(
        &self,
        table: &DeltaTable,
        files: &Files,
        before: DateTime<Utc>,
    ) -> Result<Decision<'static, u64>> {
        let all: BTreeSet<NaiveDate> = files.by_day.keys().copied().collect();
        let mut old = self.read_whole(table, files, &all).await?;
        let mut new = unchanged(&old);
        let history = keeps_history(table)?;
        let mut purged = 0u64;
        let mut touched = BTreeSet::new();
        for (day, rows) in &mut new {
            let count = rows.records.len();
            let mut gone = Vec::new();
            rows.records.retain(|r| {
                let purge = r.is_deleted() && r.updated_at() < before;
                if purge && history {
                    gone.push(r.clone());
                }
                !purge
            });
            if rows.records.len() < count {
                purged += (count - rows.records.len()) as u64;
                touched.insert(*day);
            }
            if !gone.is_empty() {
                // Purging never removes history: a tombstone that was its
                // own version becomes a history row of its day.
                let before = &old[day].history;
                let mut share = before.clone();
                share.versions.extend(
                    gone.into_iter()
                        .filter(|record| share_holds(before, record).is_none())
                        .map(|record| Version {
                            record,
                            absent_from: None,
                        }),
                );
                share.normalize();
                rows.history = Some(share);
            }
        }
        if purged > 0 {
            for (day, rows) in &mut new {
                let Some(synced) = rows.ledger.as_mut().and_then(|e| e.synced.as_mut()) else {
                    continue;
                };
                if touched.contains(day) || synced.digest.covers_other_days() {
                    synced.digest = Digest::PURGED;
                }
            }
        }
        // Only the days that change are in the commit.
        let same: Vec<NaiveDate> = new
            .iter()
            .filter(|(day, rows)| {
                let before = &old[day];
                before.ledger == rows.ledger
                    && before.records.len() == rows.records.len()
                    && rows.history.is_none()
            })
            .map(|(day, _)| *day)
            .collect();
        for day in same {
            old.remove(&day);
            new.remove(&day);
        }
        Ok(Decision {
            old,
            new,
            keys: None,
            written: Vec::new(),
            ahead: None,
            result: purged,
        })
    }

    /// Day `day`'s ledger row as `edit` leaves it (its failure recorded,
    /// its acceptance set), the rest of the day as it is.
    async fn decide_ledger(
        &self,
        table: &DeltaTable,
        files: &Files,
        day: NaiveDate,
        edit: &(dyn Fn(&mut LedgerEntry) + Sync),
    ) -> Result<Decision<'static, ()>> {
        let old = self
            .read_whole(table, files, &BTreeSet::from([day]))
            .await?;
        let mut new = unchanged(&old);
        let to = new.entry(day).or_insert_with(|| NewDay {
            records: Vec::new(),
            ledger: None,
            history: None,
        });
        edit(to.ledger.get_or_insert_with(|| LedgerEntry::new(day)));
        Ok(Decision {
            old,
            new,
            keys: None,
            written: Vec::new(),
            ahead: None,
            result: (),
        })
    }

    /// Commits [`decide_ledger`](Self::decide_ledger)'s edit of day `day`,
    /// deciding again when another writer changed the day first.
    async fn edit_ledger(
        &self,
        day: NaiveDate,
        what: &str,
        edit: &(dyn Fn(&mut LedgerEntry) + Sync),
    ) -> Result<()> {
        for attempt in 1..=MAX_ATTEMPTS {
            let (table, files) = self.snapshot().await?;
            let decision = self.decide_ledger(&table, &files, day, edit).await?;
            if self
                .settle(&table, decision, attempt, false)
                .await?
                .is_some()
            {
                return Ok(());
            }
        }
        Err(gave_up(what))
    }
}

/// The error of a write that lost every race it ran.
fn gave_up(what: &str) -> Error {
    Error::backend(
        BACKEND,
        true,
        format!("{what}: other writers kept changing the same days ({MAX_ATTEMPTS} attempts)"),
    )
}

/// The cores this process may run on (read once: on Linux it reads the
/// cgroup's quota files).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// A day being applied, counted in its store's `applying` while it is.
struct Applying<'a>(&'a AtomicUsize);

impl<'a> Applying<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Applying(count)
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A change decided on one snapshot.
struct Decision<'a, T> {
    /// The days read whole, as they were.
    old: BTreeMap<NaiveDate, DayRows>,
    /// What they become.
    new: BTreeMap<NaiveDate, NewDay>,
    /// The keys written, for a change that may move keys between days.
    keys: Option<&'a Probe<'a>>,
    /// Actions of files written already (a streamed day's records).
    written: Vec<Action>,
    /// A day's records file being written while the day was decided.
    ahead: Option<Ahead<'a>>,
    result: T,
}

/// Refuses a table of another shape than this store writes.
fn check_shape(table: &DeltaTable, location: &str) -> Result<()> {
    let snapshot = table.snapshot().map_err(open)?;
    let schema = snapshot.schema();
    for wanted in delta_columns(&Columns::default()) {
        let found = schema.field(wanted.name());
        let problem = match found {
            None => "is missing".to_owned(),
            Some(found) if found.data_type() != wanted.data_type() => {
                format!("is {} (wanted {})", found.data_type(), wanted.data_type())
            }
            Some(_) => continue,
        };
        return Err(open(format!(
            "the Delta table at {location} has another shape: column {:?} {problem}",
            wanted.name()
        )));
    }
    let partitions = snapshot.metadata().partition_columns();
    if partitions.len() != 1 || partitions[0] != EVENT_DATE {
        return Err(open(format!(
            "the Delta table at {location} has another shape: partitioned by {partitions:?}, \
             not by [\"{EVENT_DATE}\"]"
        )));
    }
    Ok(())
}

/// How many records the files hold, by their statistics (each day's
/// ledger row left out), for a table that keeps no history yet: `None`
/// when a file has no statistics.
fn records_by_statistics(files: &Files) -> Option<u64> {
    let mut rows = 0;
    for file in files.all() {
        rows += file.rows?;
        if file.may_hold_ledger() {
            // A day's ledger row, in its file or with its records.
            rows = rows.checked_sub(1)?;
        }
    }
    Some(rows)
}

/// Whether `table` keeps history: its table property.
fn keeps_history(table: &DeltaTable) -> Result<bool> {
    let snapshot = table.snapshot().map_err(backend)?;
    Ok(snapshot
        .metadata()
        .configuration()
        .get(HISTORY_PROPERTY)
        .is_some_and(|on| on == "true"))
}

/// Where `share` holds a version of `record`'s key and instant.
fn share_holds(share: &DayHistory, record: &Record) -> Option<usize> {
    share
        .versions
        .binary_search_by(|v| {
            (v.record.key(), v.record.updated_at()).cmp(&(record.key(), record.updated_at()))
        })
        .ok()
}

/// Every version of a day: its history rows, and each of its records
/// whose key and instant no history row holds, as delivered.
fn day_versions(rows: &DayRows) -> impl Iterator<Item = Version> + '_ {
    let shared = rows.history.versions.iter().cloned();
    let own = rows
        .records
        .values()
        .filter(|record| share_holds(&rows.history, record).is_none())
        .map(|record| Version {
            record: record.clone(),
            absent_from: None,
        });
    shared.chain(own)
}

/// The history of the days `old` read, for the reference store.
fn history_parts(old: &BTreeMap<NaiveDate, DayRows>) -> HistoryParts {
    let mut parts = HistoryParts::default();
    for (day, rows) in old {
        parts.versions.extend(day_versions(rows));
        parts
            .listings
            .extend(rows.history.listings.iter().map(|at| (*day, *at)));
    }
    parts
}

/// Gives each day of `new` its share of `parts` (the history of the days
/// a write read, as the reference store left it): its listings, and its
/// versions other than those its new records are, as delivered.
///
/// A record that is not its day's version of its instant as it is (a
/// tombstone a listing made, or a version another day's version of the
/// same instant won in history) is never read back as one: its day's
/// share keeps the version the day had at that instant before the write
/// (when read, of versions of one instant under several days the winner
/// is taken, [`one_per_instant`]), or the record itself, which the winner
/// in another day's files supersedes.
fn share_history(
    old: &BTreeMap<NaiveDate, DayRows>,
    new: &mut BTreeMap<NaiveDate, NewDay>,
    parts: HistoryParts,
) -> Result<()> {
    let mut shares: BTreeMap<NaiveDate, DayHistory> = new
        .keys()
        .map(|day| (*day, DayHistory::default()))
        .collect();
    for (day, at) in parts.listings {
        let Some(share) = shares.get_mut(&day) else {
            return Err(corrupt(format!("a listing of an unread day: {day}")));
        };
        share.listings.push(at);
    }
    // The records, by day, that are their versions as they are.
    let mut rows: BTreeMap<NaiveDate, BTreeSet<usize>> = BTreeMap::new();
    for version in parts.versions {
        let day = version.record.event_date();
        let (Some(share), Some(to)) = (shares.get_mut(&day), new.get(&day)) else {
            return Err(corrupt(format!("a version of an unread day: {version:?}")));
        };
        let row = to
            .records
            .binary_search_by(|r| r.key().cmp(version.record.key()))
            .ok()
            .filter(|i| version.absent_from.is_none() && to.records[*i] == version.record);
        match row {
            Some(i) => {
                rows.entry(day).or_default().insert(i);
            }
            None => share.versions.push(version),
        }
    }
    let empty = DayRows::default();
    for (day, mut share) in shares {
        share.normalize();
        let to = new.get_mut(&day).expect("a share of each day");
        let before = old.get(&day).unwrap_or(&empty);
        let is_row = rows.remove(&day).unwrap_or_default();
        let mut kept = Vec::new();
        for (i, record) in to.records.iter().enumerate() {
            if is_row.contains(&i) || share_holds(&share, record).is_some() {
                continue;
            }
            let had = match share_holds(&before.history, record) {
                Some(at) => before.history.versions[at].clone(),
                None => {
                    let stored = before
                        .records
                        .get(record.key())
                        .filter(|r| r.updated_at() == record.updated_at());
                    Version {
                        record: stored.unwrap_or(record).clone(),
                        absent_from: None,
                    }
                }
            };
            kept.push(had);
        }
        if !kept.is_empty() {
            share.versions.extend(kept);
            share.normalize();
        }
        to.history = Some(share);
    }
    Ok(())
}

/// `old`'s days as they are, ready to be changed.
fn unchanged(old: &BTreeMap<NaiveDate, DayRows>) -> BTreeMap<NaiveDate, NewDay> {
    old.iter()
        .map(|(day, rows)| {
            let new = NewDay {
                records: rows.records.values().cloned().collect(),
                ledger: rows.ledger.clone(),
                history: None,
            };
            (*day, new)
        })
        .collect()
}

#[async_trait]
impl Store for DeltaStore {
    async fn get(&self, key: &str) -> Result<Option<Record>> {
        let table = self.latest().await?;
        let files = Files::of(&table)?;
        let chosen: Vec<_> = files
            .all()
            .filter(|f| f.may_hold_keys(key, key))
            .cloned()
            .collect();
        let store = table.object_store();
        let days = self.reader(&store).days(chosen).await?;
        Ok(days
            .into_values()
            .find_map(|mut rows| rows.records.remove(key))
            .filter(|record| !record.is_deleted()))
    }

    async fn rows(&self) -> Result<Vec<Record>> {
        Ok(self
            .all_records()
            .await?
            .into_values()
            .filter(|r| !r.is_deleted())
            .collect())
    }

    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
        let table = self.latest().await?;
        let files = Files::of(&table)?;
        let mut days = self
            .read_whole(&table, &files, &BTreeSet::from([day]))
            .await?;
        let rows = days.remove(&day).unwrap_or_default();
        Ok(rows
            .records
            .into_values()
            .filter(|r| !r.is_deleted())
            .collect())
    }

    async fn rows_with_tombstones(&self) -> Result<Vec<Record>> {
        Ok(self.all_records().await?.into_values().collect())
    }

    async fn apply(&self, day: DayWrite) -> Result<Counts> {
        let _applying = Applying::enter(&self.applying);
        // The day's pages may be read from the job's temporary files.
        let paging = self.paging;
        let (day, first) = tokio::task::spawn_blocking(move || {
            let mut day = day;
            let first = day.next_page(paging.page_rows, paging.page_bytes);
            (day, first)
        })
        .await
        .map_err(|e| corrupt(format!("reading the day's pages: {e}")))?;
        let first = first?.unwrap_or_default();
        if day.is_done() {
            self.apply_whole(day, first).await
        } else {
            self.apply_paged(day, first).await
        }
    }

    async fn purge_tombstones(&self, before: DateTime<Utc>) -> Result<u64> {
        for attempt in 1..=MAX_ATTEMPTS {
            let (table, files) = self.snapshot().await?;
            let decision = self.decide_purge(&table, &files, before).await?;
            if let Some(purged) = self.settle(&table, decision, attempt, false).await? {
                return Ok(purged);
            }
        }
        Err(gave_up("purging tombstones"))
    }

    async fn ledger(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<LedgerEntry>> {
        let table = self.latest().await?;
        let files = Files::of(&table)?;
        let chosen: Vec<_> = files
            .by_day
            .range(days)
            .flat_map(|(_, files)| files)
            .filter(|f| f.may_hold_ledger())
            .cloned()
            .collect();
        let store = table.object_store();
        let read = self.reader(&store).days(chosen).await?;
        Ok(read.into_values().filter_map(|rows| rows.ledger).collect())
    }

    async fn history(&self) -> Result<Vec<HistoryRow>> {
        let (table, days) = self.all_days().await?;
        if !keeps_history(&table)? {
            return Err(Error::HistoryOff);
        }
        // A key's versions of one instant under two days (it moved between
        // them): the one that wins.
        let versions = one_per_instant(days.values().flat_map(day_versions));
        Ok(history_of(&versions))
    }

    async fn record_failure(&self, day: NaiveDate, failure: &DayFailure) -> Result<()> {
        let edit = |entry: &mut LedgerEntry| entry.failure = Some(failure.clone());
        self.edit_ledger(day, "recording a failure", &edit).await
    }

    async fn accept(&self, day: NaiveDate, at: Option<DateTime<Utc>>) -> Result<()> {
        let edit = |entry: &mut LedgerEntry| entry.accepted = at;
        self.edit_ledger(day, "recording an acceptance", &edit)
            .await
    }
}

/// The table's typed columns, in its order: every column but its own, with
/// the type [`COLUMNS_PROPERTY`] records for it (an error for a column this
/// store did not add).
fn typed_columns(table: &DeltaTable, location: &str) -> Result<Vec<(String, Result<ColumnType>)>> {
    let snapshot = table.snapshot().map_err(open)?;
    let recorded = recorded_columns(
        snapshot
            .metadata()
            .configuration()
            .get(COLUMNS_PROPERTY)
            .map(String::as_str),
    )?;
    Ok(snapshot
        .schema()
        .fields()
        .filter(|f| !OWN_COLUMNS.contains(&f.name().as_str()))
        .map(|f| {
            let ty = recorded
                .iter()
                .find(|(name, _)| name == f.name())
                .map(|(_, ty)| *ty)
                .ok_or_else(|| {
                    open(format!(
                        "the Delta table at {location} has a column {:?} that is not one of \
                         its typed columns",
                        f.name()
                    ))
                });
            (f.name().clone(), ty)
        })
        .collect())
}

/// Bringing a table's typed columns to a declaration.
struct Change<'a> {
    declared: &'a Columns,
    allow: bool,
    location: &'a str,
    storage_options: &'a HashMap<String, String>,
    cache: &'a Cache,
}

impl Change<'_> {
    /// The table with the declared typed columns, and the declaration in
    /// the table's order: unchanged when they are the table's; else, each
    /// missing one added and (when allowed) each other one dropped or
    /// remade, every file rewritten, in one commit with the new schema.
    async fn apply(&self, mut table: DeltaTable) -> Result<(DeltaTable, Columns)> {
        for attempt in 1..=MAX_ATTEMPTS {
            let present = typed_columns(&table, self.location)?;
            let mut refused = None;
            for (name, ty) in &present {
                let why = match (declared(self.declared, name), ty) {
                    (None, _) => format!("column {name:?} is not declared"),
                    (Some(_), Err(e)) => e.to_string(),
                    (Some(c), Ok(ty)) if c.column_type() != *ty => {
                        format!("column {name:?} is {ty}, declared {}", c.column_type())
                    }
                    _ => continue,
                };
                refused.get_or_insert(why);
            }
            let missing = self
                .declared
                .iter()
                .any(|c| !present.iter().any(|(name, _)| name == c.name()));
            if refused.is_none() && !missing {
                let ordered = present
                    .iter()
                    .filter_map(|(name, _)| declared(self.declared, name).cloned());
                return Ok((table, Columns::new(ordered)?));
            }
            if let Some(why) = refused.filter(|_| !self.allow) {
                return Err(open(format!(
                    "the Delta table at {} has other typed columns than declared: {why} \
                     (allow_column_changes lets opening change them)",
                    self.location
                )));
            }
            match self.rewrite(&table).await? {
                Outcome::Committed(state) => {
                    table.state = Some(*state);
                    return Ok((table, self.declared.clone()));
                }
                Outcome::Lost => {
                    tokio::time::sleep(Duration::from_millis(u64::from(attempt.min(20)))).await;
                    table.update_state().await.map_err(backend)?;
                }
            }
        }
        Err(gave_up("changing the typed columns"))
    }

    /// Every day of `table` rewritten with the declared columns, committed
    /// with the new schema; an error, before anything is written, naming the
    /// first stored row (by day, then key) a declared column does not fit.
    async fn rewrite(&self, table: &DeltaTable) -> Result<Outcome> {
        let files = Files::of(table)?;
        let store = table.object_store();
        let reader = Reader {
            store: &store,
            cache: self.cache,
        };
        let old = reader.days(files.all().cloned().collect()).await?;
        let mut values = Vec::with_capacity(self.declared.len());
        for rows in old.values() {
            for record in rows.records.values() {
                values.clear();
                self.declared.extract_into(record, &mut values)?;
            }
        }
        let new = unchanged(&old);
        let schema = StructType::try_new(delta_columns(self.declared)).map_err(open)?;
        let metadata = table
            .snapshot()
            .map_err(backend)?
            .metadata()
            .clone()
            .with_schema(&schema)
            .and_then(|m| {
                m.add_config_key(COLUMNS_PROPERTY.into(), columns_property(self.declared))
            })
            .map_err(|e| open(e.to_string()))?;
        let arrow: deltalake::arrow::datatypes::Schema =
            (&schema).try_into_arrow().map_err(open)?;
        let arrow = Arc::new(arrow);
        let writer = || {
            RecordBatchWriter::try_new(
                table.table_url().as_str(),
                Arc::clone(&arrow),
                Some(vec![EVENT_DATE.to_owned()]),
                Some(self.storage_options.clone()),
            )
            .map(|writer| writer.with_writer_properties(writer_properties()))
            .map_err(backend)
        };
        let mut actions = vec![Action::Metadata(metadata)];
        actions.extend(
            write_days_with(writer, self.cache, &old, new, self.declared, true, None)
                .await?
                .unwrap_or_default(),
        );
        let read = ReadSet {
            days: old.keys().copied().collect(),
            keys: None,
        };
        commit(
            self.cache,
            table,
            actions,
            &read,
            operation(old.keys().copied()),
        )
        .await
    }
}
