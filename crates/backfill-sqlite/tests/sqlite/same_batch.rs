//! A batch applied again: the store compares the day's stored rows with it
//! field by field in one ordered read before merging any record, and
//! writes nothing when they are the same. A stored row that differs in
//! anything the merge reads — only its `updated_at` by a microsecond, only
//! its tombstone flag, one byte deep in its value, its day — sends the
//! batch through the merge, which judges each record as ever.

use backfill_core::conformance::fixtures::{awkward_day as batch, day};
use backfill_core::{upsert, Counts, Record, Store, WriteOptions};
use backfill_sqlite::SqliteStore;

use super::raw;

#[tokio::test]
async fn a_batch_applied_again_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::builder(dir.path().join("db.sqlite"))
        .open()
        .await
        .unwrap();
    upsert(&store, day(0), batch(), WriteOptions::default())
        .await
        .unwrap();
    let before = store.total_changes().await.unwrap();
    for _ in 0..2 {
        let again = upsert(&store, day(0), batch(), WriteOptions::default())
            .await
            .unwrap();
        let mut want = Counts::default();
        want.unchanged = 25;
        assert_eq!(again, want);
    }
    // The ledger's row and its timing, twice: no record.
    assert_eq!(store.total_changes().await.unwrap() - before, 4);
}

/// A key, the SET clause changing its stored row behind the store's back,
/// and what the batch applied again must then count.
type Tamper = (&'static str, &'static str, fn(&Counts) -> bool);

#[tokio::test]
async fn a_row_that_differs_in_anything_the_merge_reads_is_never_taken_as_unchanged() {
    tampered_rows_are_merged(false).await;
}

/// The same tampered rows under a day fetched again with one other record
/// changed upstream (no longer the batch applied before): the records
/// equal to their rows, found in one ordered read of the day, are counted
/// unchanged, and the tampered row still goes to the merge.
#[tokio::test]
async fn a_lookback_day_takes_only_rows_equal_in_everything_as_unchanged() {
    tampered_rows_are_merged(true).await;
}

/// Each tampering case on a fresh store; with `lookback`, `a/ünï` is
/// also newer in the batch applied again.
async fn tampered_rows_are_merged(lookback: bool) {
    let cases: [Tamper; 4] = [
        // Older by one microsecond: the record is newer and is written.
        ("f/03", "updated_at = '2026-01-01T00:00:02.999999Z'", |c| {
            c.updated == 1 && c.unchanged == 24
        }),
        // A tombstone of the same instant orders after the live record,
        // which is then stale.
        ("f/03", "deleted = 1, value = ''", |c| {
            c.stale == 1 && c.unchanged == 24
        }),
        // One byte deep in the long value, made smaller: the record wins.
        (
            "b/long",
            "value = substr(value, 1, 4999) || 'w' || substr(value, 5001)",
            |c| c.updated == 1 && c.unchanged == 24,
        ),
        // Moved to another day with a smaller value: the record wins it
        // back.
        ("f/03", "event_date = '2026-01-02', value = 'v2'", |c| {
            c.updated == 1 && c.unchanged == 24
        }),
    ];
    for (i, (key, set, expect)) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let store = SqliteStore::builder(&path).open().await.unwrap();
        upsert(&store, day(0), batch(), WriteOptions::default())
            .await
            .unwrap();
        let changed = raw(&path)
            .execute(
                &format!("UPDATE backfill_records SET {set} WHERE key = ?1"),
                [key],
            )
            .unwrap();
        assert_eq!(changed, 1, "case {i}");
        let mut fetched = batch();
        if lookback {
            let r = &fetched[0];
            assert_eq!(r.key(), "a/ünï");
            let newer = r.updated_at() + chrono::Duration::hours(1);
            fetched[0] = Record::new(r.key(), r.event_date(), r.value(), newer).unwrap();
        }
        let before = store.total_changes().await.unwrap();
        let mut again = upsert(&store, day(0), fetched.clone(), WriteOptions::default())
            .await
            .unwrap();
        let written = store.total_changes().await.unwrap() - before;
        if lookback {
            // `a/ünï` updated; the rest as without it.
            assert!(again.updated >= 1, "case {i}: {again:?}");
            again.updated -= 1;
            again.unchanged += 1;
        }
        assert!(expect(&again), "case {i}: {again:?}");
        // The ledger's row and its timing, `a/ünï`, and the tampered row
        // unless it is newer: nothing else is written.
        let rows = u64::from(lookback) + again.updated;
        assert_eq!(written, 2 + rows, "case {i}: {again:?}");
        let mut want = fetched;
        if set.starts_with("deleted") {
            want.retain(|r| r.key() != *key);
        }
        want.retain(|r| !r.is_deleted());
        assert_eq!(store.rows().await.unwrap(), want, "case {i}");
    }
}
