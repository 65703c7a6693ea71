//! The shared conformance suite, every case, on a Delta table in a local
//! directory.

use backfill_delta::DeltaStore;

backfill_core::conformance_tests!(with_guard: async {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let location = dir.path().join("table");
    let store = DeltaStore::open(location.to_str().unwrap())
        .await
        .expect("opening the table");
    (store, dir)
});

backfill_core::column_conformance_tests!(unsupported: "DeltaStore keeps no typed columns yet");
