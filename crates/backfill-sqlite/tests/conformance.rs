//! The shared conformance suite, against an in-memory database and a file.

use backfill_sqlite::SqliteStore;

mod in_memory {
    use super::*;

    backfill_core::conformance_tests!(async { SqliteStore::open_in_memory().await.unwrap() });
}

mod on_file {
    use super::*;

    // The temporary directory lives as long as each test, beside the store.
    backfill_core::conformance_tests!(with_guard: async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("records.db"))
            .await
            .unwrap();
        (store, dir)
    });
}
