//! The shared conformance suite, against an in-memory database, a file,
//! and a store that writes a streamed day two records at a time.

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

mod in_pages_of_two {
    use super::*;

    // Every streamed day of the suite spans many pages.
    backfill_core::conformance_tests!(async {
        SqliteStore::builder_in_memory()
            .page_rows(2)
            .open()
            .await
            .unwrap()
    });
}
