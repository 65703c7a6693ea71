//! [`MemoryStore`]: the reference store, and the oracle other stores are
//! compared to.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::NaiveDate;

use crate::error::Result;
use crate::record::Record;
use crate::store::{Batch, Counts, Mode, Store};

/// A store in a `BTreeMap`, written as plainly as the contract reads.
///
/// Good for tests, examples and as the oracle in differential tests: every
/// adapter must end with the same rows as a `MemoryStore` given the same
/// batches.
#[derive(Debug, Default)]
pub struct MemoryStore {
    // Keyed by `String`, whose `Ord` is byte order, like the stores' `COLLATE "C"`.
    rows: Mutex<BTreeMap<String, Record>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Record>> {
        // A panic elsewhere cannot leave the map half-written: `apply`
        // validates before it mutates, and each mutation is one map call.
        self.rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<Record>> {
        Ok(self.lock().get(key).cloned())
    }

    async fn rows(&self) -> Result<Vec<Record>> {
        Ok(self.lock().values().cloned().collect())
    }

    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
        Ok(self
            .lock()
            .values()
            .filter(|r| r.event_date() == day)
            .cloned()
            .collect())
    }

    async fn apply(&self, batch: &Batch) -> Result<Counts> {
        // Refuse the whole batch before touching anything: atomic by
        // construction, since nothing below can fail.
        for record in batch.records() {
            record.validate()?;
        }
        let mut rows = self.lock();
        let mut counts = Counts::default();
        for record in batch.records() {
            match rows.get_mut(record.key()) {
                None => {
                    rows.insert(record.key().to_owned(), record.clone());
                    counts.inserted += 1;
                }
                Some(stored) if record.supersedes(stored) => {
                    *stored = record.clone();
                    counts.updated += 1;
                }
                Some(stored) if stored == record => counts.unchanged += 1,
                Some(_) => counts.stale += 1,
            }
        }
        if batch.mode() == Mode::Replace {
            let before = rows.len();
            let records = batch.records();
            rows.retain(|key, row| {
                row.event_date() != batch.day()
                    || records
                        .binary_search_by(|r| r.key().cmp(key.as_str()))
                        .is_ok()
            });
            counts.deleted = (before - rows.len()) as u64;
        }
        Ok(counts)
    }
}
