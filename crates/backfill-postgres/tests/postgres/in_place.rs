//! A day synced before and fetched again: the store reads the day's stored
//! rows once and compares each record with its row. Records equal to their
//! rows, or older, send nothing; the rest, when each replaces a row of the
//! day, are updated where the rows lie, each only if it is still the
//! version read. A record of a key the day does not hold, or a row changed
//! by another writer between the read and the update, sends the records
//! through the merge, which judges each as ever.

use backfill_core::conformance::fixtures::{at, day, rec, tomb};
use backfill_core::{upsert, Counts, Record, Store, WriteOptions};
use backfill_testkit as testkit;

use crate::same_batch::{key_lookups, store, versions};

/// Day 0 as first synced: forty live records and one tombstone.
fn first() -> Vec<Record> {
    let mut records: Vec<Record> = (0..40)
        .map(|i| rec(&format!("a{i:02}"), day(0), &format!("v{i}"), at(1)))
        .collect();
    records.push(tomb("t0", day(0), at(1)));
    records
}

#[tokio::test]
async fn a_re_fetched_day_writes_only_its_changed_rows_in_place() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let s = store(&url).await;
    let admin = crate::admin(&url).await;
    upsert(&s, day(0), first(), WriteOptions::default())
        .await
        .unwrap();
    let before = versions(&admin, &s).await;
    let lookups = key_lookups(&admin, &s).await;

    let mut again = first();
    // Newer: updated where they lie.
    again[30] = rec("a30", day(0), "v30 again", at(2));
    again[31] = rec(
        "a31",
        day(0),
        "v31",
        at(1) + chrono::Duration::microseconds(1),
    );
    // Older: stale, nothing sent.
    again[32] = rec("a32", day(0), "v32 before", at(0));
    // The same instant, a greater value: newer.
    again[33] = rec("a33", day(0), "v33~", at(1));
    // A tombstone of a live row, and a live record over the tombstone.
    again[34] = tomb("a34", day(0), at(2));
    again[40] = rec("t0", day(0), "back", at(2));
    let counts = upsert(&s, day(0), again.clone(), WriteOptions::default())
        .await
        .unwrap();
    let mut want = Counts::default();
    want.unchanged = 35;
    want.updated = 3;
    want.stale = 1;
    want.deleted = 1;
    want.inserted = 1;
    assert_eq!(counts, want);

    // Only the five rows written have a new version; no key was looked up
    // in the primary key: each row was reached where it lies.
    let after = versions(&admin, &s).await;
    let written: Vec<&str> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(b, _)| b.0.as_str())
        .collect();
    assert_eq!(written, ["a30", "a31", "a33", "a34", "t0"]);
    assert_eq!(key_lookups(&admin, &s).await, lookups);

    let mut expected = again;
    expected[32] = first()[32].clone();
    expected.sort_by(|a, b| a.key().cmp(b.key()));
    assert_eq!(s.rows_with_tombstones().await.unwrap(), expected);

    // And once more: nothing at all.
    let counts = upsert(&s, day(0), expected.clone(), WriteOptions::default())
        .await
        .unwrap();
    assert_eq!((counts.unchanged, counts.written()), (41, 0));
    assert_eq!(versions(&admin, &s).await, after);
}

#[tokio::test]
async fn a_key_the_day_does_not_hold_sends_the_changed_records_through_the_merge() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let s = store(&url).await;
    upsert(&s, day(0), first(), WriteOptions::default())
        .await
        .unwrap();
    upsert(
        &s,
        day(1),
        vec![rec("m", day(1), "on day 1", at(1))],
        WriteOptions::default(),
    )
    .await
    .unwrap();

    let mut again = first();
    again[5] = rec("a05", day(0), "v5 again", at(2));
    // A new key, and one stored under day 1 that moves to day 0.
    again.push(rec("a99", day(0), "new", at(2)));
    again.push(rec("m", day(0), "moved", at(2)));
    let counts = upsert(&s, day(0), again.clone(), WriteOptions::default())
        .await
        .unwrap();
    let mut want = Counts::default();
    want.unchanged = 40;
    want.updated = 2;
    want.inserted = 1;
    assert_eq!(counts, want);
    again.sort_by(|a, b| a.key().cmp(b.key()));
    assert_eq!(s.rows_with_tombstones().await.unwrap(), again);
}

#[tokio::test]
async fn a_row_another_writer_changes_between_the_read_and_the_update_is_merged_again() {
    let Some(url) = testkit::url().await else {
        return;
    };
    let s = store(&url).await;
    upsert(&s, day(0), first(), WriteOptions::default())
        .await
        .unwrap();

    // Another writer holds a newer version of a03, not yet committed: the
    // store reads the version before it, and its update of a03 waits.
    let other = crate::admin(&url).await;
    other.batch_execute("BEGIN").await.unwrap();
    let sql = format!(
        r#"UPDATE "{}"."{}" SET value = 'theirs', updated_at = $1 WHERE key = 'a03'"#,
        s.schema(),
        s.table()
    );
    other.execute(&sql, &[&at(5)]).await.unwrap();

    let mut again = first();
    again[3] = rec("a03", day(0), "mine", at(3));
    again[4] = rec("a04", day(0), "mine", at(3));
    let write = {
        let (s, again) = (s.clone(), again.clone());
        tokio::spawn(async move { upsert(&s, day(0), again, WriteOptions::default()).await })
    };
    crate::blocked_behind(&url, &other, 1).await;
    other.batch_execute("COMMIT").await.unwrap();

    // The update missed a03 and was undone; the merge then found the other
    // writer's version newer than the record.
    let counts = write.await.unwrap().unwrap();
    let mut want = Counts::default();
    want.unchanged = 39;
    want.updated = 1;
    want.stale = 1;
    assert_eq!(counts, want);
    let rows = s.rows_with_tombstones().await.unwrap();
    assert_eq!(rows[3], rec("a03", day(0), "theirs", at(5)));
    assert_eq!(rows[4], again[4]);
}
