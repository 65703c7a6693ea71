//! The shared conformance suite, every case, on a Delta table in a local
//! directory, and on one in S3-compatible object storage.

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

/// On `BACKFILL_S3_URL` (`s3://bucket`, with the AWS variables pointing at
/// its server: `scripts/s3-server.sh` starts a local one), a table under a
/// prefix of each test's own; spread over the buckets `bucket-0` … when
/// `BACKFILL_S3_SPREAD` says there are that many (a local server lists a
/// prefix by scanning its whole bucket).
mod s3 {
    use super::*;
    use backfill_testkit as testkit;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The next of the spread buckets.
    static SPREAD: AtomicUsize = AtomicUsize::new(0);

    async fn store() -> Option<DeltaStore> {
        let bucket = testkit::s3_bucket()?;
        let spread: usize = std::env::var("BACKFILL_S3_SPREAD")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let bucket = match spread {
            0 => bucket,
            n => format!("{bucket}-{}", SPREAD.fetch_add(1, Ordering::Relaxed) % n),
        };
        let location = format!("{bucket}/{}", testkit::unique_schema());
        Some(
            DeltaStore::open(&location)
                .await
                .expect("opening the table on S3"),
        )
    }

    backfill_core::conformance_tests!(optional: store());
}
