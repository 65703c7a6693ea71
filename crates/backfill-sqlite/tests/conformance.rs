//! The shared conformance suite, against an in-memory database and a file.

use async_trait::async_trait;
use backfill_core::{Batch, Counts, Record, Result, Store};
use backfill_sqlite::SqliteStore;
use chrono::NaiveDate;

mod in_memory {
    use super::*;

    backfill_core::conformance_tests!(async { SqliteStore::open_in_memory().await.unwrap() });
}

mod on_file {
    use super::*;

    backfill_core::conformance_tests!(FileStore::new());
}

/// A store on a file in a temporary directory, removed when dropped.
#[derive(Debug)]
struct FileStore {
    store: SqliteStore,
    _dir: tempfile::TempDir,
}

impl FileStore {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("records.db"))
            .await
            .unwrap();
        Self { store, _dir: dir }
    }
}

#[async_trait]
impl Store for FileStore {
    async fn get(&self, key: &str) -> Result<Option<Record>> {
        self.store.get(key).await
    }
    async fn rows(&self) -> Result<Vec<Record>> {
        self.store.rows().await
    }
    async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
        self.store.day_rows(day).await
    }
    async fn apply(&self, batch: &Batch) -> Result<Counts> {
        self.store.apply(batch).await
    }
}
