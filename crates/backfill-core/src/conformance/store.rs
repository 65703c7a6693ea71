//! The store contract: what [`Store::apply`] and the reads must do, case by
//! case. A store author reads these first.

use chrono::{Duration, NaiveDate};
use futures_util::future::join_all;

use super::helpers::*;
use crate::error::{Error, Field, Problem};
use crate::ledger::SyncStamp;
use crate::record::{Record, MAX_KEY_BYTES};
use crate::stream::{DayWrite, Header};
use crate::{upsert, Counts, EventDates, Mode, ReplaceGuard, Store, WriteOptions};

/// Records land in an empty store, all counted as inserted, readable back
/// exactly, in key order.
pub async fn insert_into_empty(store: &dyn Store) {
    let records = vec![
        rec("insert/b", day(0), r#"{"n":2}"#, at(2)),
        rec("insert/a", day(0), r#"{"n":1}"#, at(1)),
        rec("insert/c", day(0), "", at(3)),
    ];
    let c = apply(store, day(0), records.clone()).await;
    assert_eq!(
        c,
        counts(3, 0, 0, 0, 0),
        "counts after inserting 3 new keys"
    );
    let mut expected = records;
    expected.sort_by(|a, b| a.key().cmp(b.key()));
    assert_eq!(rows_under(store, "insert/").await, expected);
    assert_eq!(get(store, "insert/a").await.as_ref(), Some(&expected[0]));
}

/// A version with a later `updated_at` replaces the stored one.
pub async fn newer_version_wins(store: &dyn Store) {
    let old = rec("newer/k", day(0), "old", at(10));
    let new = rec("newer/k", day(0), "new", at(11));
    apply(store, day(0), vec![old]).await;
    let c = apply(store, day(0), vec![new.clone()]).await;
    assert_eq!(c, counts(0, 1, 0, 0, 0));
    assert_eq!(get(store, "newer/k").await, Some(new));
}

/// An older re-delivery is skipped and counted stale: it never clobbers a
/// newer row.
pub async fn stale_version_is_skipped(store: &dyn Store) {
    let new = rec("stale/k", day(0), "new", at(11));
    let old = rec("stale/k", day(0), "old-but-greater-value", at(10));
    apply(store, day(0), vec![new.clone()]).await;
    let c = apply(store, day(0), vec![old]).await;
    assert_eq!(c, counts(0, 0, 0, 1, 0), "an older version must be stale");
    assert_eq!(get(store, "stale/k").await, Some(new));
}

/// Re-applying identical records writes nothing and counts them unchanged.
pub async fn identical_reapply_writes_nothing(store: &dyn Store) {
    let records: Vec<_> = (0..20)
        .map(|i| rec(&format!("same/{i:02}"), day(0), &format!("v{i}"), at(i)))
        .collect();
    apply(store, day(0), records.clone()).await;
    let before = rows(store).await;
    for _ in 0..3 {
        let c = apply(store, day(0), records.clone()).await;
        assert_eq!(c, counts(0, 0, 20, 0, 0));
        assert_eq!(c.written(), 0);
    }
    assert_eq!(rows(store).await, before);
}

/// Equal `updated_at`: the greater value (by bytes) wins, whichever arrives
/// first.
pub async fn tie_on_updated_at_resolved_by_value(store: &dyn Store) {
    // "é" (c3 a9) > "z" (7a) and "a" > "Z": byte order, not locale order.
    let pairs = [("a", "b"), ("z", "é"), ("Z", "a"), ("", "\u{1F600}")];
    for (i, (low, high)) in pairs.into_iter().enumerate() {
        let (ka, kb) = (format!("tie/{i}/low-first"), format!("tie/{i}/high-first"));
        apply(store, day(0), vec![rec(&ka, day(0), low, at(5))]).await;
        let c = apply(store, day(0), vec![rec(&ka, day(0), high, at(5))]).await;
        assert_eq!(c, counts(0, 1, 0, 0, 0), "{high:?} must supersede {low:?}");
        apply(store, day(0), vec![rec(&kb, day(0), high, at(5))]).await;
        let c = apply(store, day(0), vec![rec(&kb, day(0), low, at(5))]).await;
        assert_eq!(
            c,
            counts(0, 0, 0, 1, 0),
            "{low:?} must be stale against {high:?}"
        );
        assert_eq!(
            get(store, &ka).await.unwrap().value(),
            high,
            "{low:?} then {high:?}"
        );
        assert_eq!(
            get(store, &kb).await.unwrap().value(),
            high,
            "{high:?} then {low:?}"
        );
    }
}

/// Equal `updated_at` and value: the later `event_date` wins, whichever
/// arrives first.
pub async fn tie_on_value_resolved_by_event_date(store: &dyn Store) {
    let early = |k: &str| rec(k, day(1), "same", at(5));
    let late = |k: &str| rec(k, day(2), "same", at(5));
    apply(store, day(1), vec![early("tie-date/a")]).await;
    let c = apply(store, day(2), vec![late("tie-date/a")]).await;
    assert_eq!(c, counts(0, 1, 0, 0, 0));
    apply(store, day(2), vec![late("tie-date/b")]).await;
    let c = apply(store, day(1), vec![early("tie-date/b")]).await;
    assert_eq!(c, counts(0, 0, 0, 1, 0));
    assert_eq!(get(store, "tie-date/a").await, Some(late("tie-date/a")));
    assert_eq!(get(store, "tie-date/b").await, Some(late("tie-date/b")));
}

/// Several versions of one key inside one batch collapse to the winner,
/// whatever their order in the batch.
pub async fn duplicate_keys_collapse_to_winner(store: &dyn Store) {
    let versions = [
        rec("dup/k", day(0), "b", at(7)),
        rec("dup/k", day(0), "a", at(9)),
        rec("dup/k", day(0), "c", at(8)),
        rec("dup/k", day(0), "a", at(9)),
    ];
    let c = apply(store, day(0), versions.to_vec()).await;
    assert_eq!((c.inserted, c.collapsed), (1, 3));
    let winner = versions[1].clone();
    assert_eq!(get(store, "dup/k").await, Some(winner.clone()));
    let mut reversed = versions.to_vec();
    reversed.reverse();
    let c = apply(store, day(0), reversed).await;
    assert_eq!((c.unchanged, c.collapsed, c.written()), (1, 3, 0));
    assert_eq!(get(store, "dup/k").await, Some(winner));
}

/// Replace mode deletes the day's rows missing from the batch, and nothing
/// else: not other days, not keys that are in the batch.
pub async fn replace_deletes_only_missing_keys_of_that_day(store: &dyn Store) {
    let replace = WriteOptions::default().mode(Mode::Replace);
    let d0: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|k| rec(&format!("replace/{k}"), day(10), "v1", at(1)))
        .collect();
    let d1: Vec<_> = ["d", "e"]
        .iter()
        .map(|k| rec(&format!("replace/{k}"), day(11), "v1", at(1)))
        .collect();
    apply(store, day(10), d0.clone()).await;
    apply(store, day(11), d1.clone()).await;
    let newer_c = rec("replace/c", day(10), "v2", at(2));
    let fixed = vec![d0[0].clone(), newer_c.clone()];
    let c = apply_with(store, day(10), fixed.clone(), replace).await;
    assert_eq!(
        c,
        Counts {
            unlisted: 1,
            ..counts(0, 1, 1, 0, 1)
        },
        "b deleted, c updated, a unchanged"
    );
    let expected = vec![d0[0].clone(), newer_c, d1[0].clone(), d1[1].clone()];
    assert_eq!(rows_under(store, "replace/").await, expected);
    // Deleted means a tombstone of the version it replaced, not a gap.
    let b = versions_under(store, "replace/b").await;
    assert_eq!(b, vec![d0[1].to_tombstone()]);
    let c = apply_with(store, day(10), fixed, replace).await;
    assert_eq!(c.written(), 0, "re-running a replace writes nothing");
    assert_eq!(rows_under(store, "replace/").await, expected);
}

/// Replace mode with an empty batch, explicitly allowed, empties exactly
/// that day.
pub async fn replace_with_empty_batch_empties_the_day(store: &dyn Store) {
    let replace = WriteOptions::default()
        .mode(Mode::Replace)
        .replace_guard(ReplaceGuard::default().allow_empty(true));
    apply(
        store,
        day(20),
        vec![rec("empty-replace/a", day(20), "v", at(1))],
    )
    .await;
    apply(
        store,
        day(21),
        vec![rec("empty-replace/b", day(21), "v", at(1))],
    )
    .await;
    let c = apply_with(store, day(20), Vec::new(), replace).await;
    assert_eq!(
        c,
        Counts {
            unlisted: 1,
            ..counts(0, 0, 0, 0, 1)
        }
    );
    let left = rows_under(store, "empty-replace/").await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].key(), "empty-replace/b");
}

/// A batch holding one record that breaks a rule is rejected with
/// `InvalidRecord` naming the field, and nothing of it is written.
pub async fn invalid_record_writes_nothing(store: &dyn Store) {
    apply(
        store,
        day(0),
        vec![rec("invalid/seed", day(0), "v1", at(1))],
    )
    .await;
    let before = rows(store).await;
    let far = NaiveDate::from_ymd_opt(10_000, 1, 1).unwrap();
    let cases = [
        ("", day(0), "v", at(1), Field::Key, "empty key"),
        (
            "invalid/nul\0",
            day(0),
            "v",
            at(1),
            Field::Key,
            "NUL in key",
        ),
        (
            "invalid/v",
            day(0),
            "a\0b",
            at(1),
            Field::Value,
            "NUL in value",
        ),
        ("invalid/d", far, "v", at(1), Field::EventDate, "year 10000"),
    ];
    let long_key = format!("invalid/{}", "k".repeat(MAX_KEY_BYTES));
    let cases = cases
        .into_iter()
        .map(|(k, d, v, t, f, what)| (k.to_owned(), d, v, t, f, what))
        .chain([(long_key, day(0), "v", at(1), Field::Key, "key too long")]);
    for (key, d, value, when, field, what) in cases {
        let bad = Record::new_unchecked(key, d, value.to_owned(), when);
        let batch = vec![
            rec("invalid/seed", day(0), "v2", at(2)),
            rec("invalid/new", day(0), "v", at(1)),
            bad,
        ];
        let options = WriteOptions::default().event_dates(EventDates::Lenient);
        match upsert(store, day(0), batch, options).await {
            Err(Error::InvalidRecord { field: f, .. }) => assert_eq!(f, field, "{what}"),
            other => panic!("{what}: expected InvalidRecord, got {other:?}"),
        }
        assert_eq!(
            rows(store).await,
            before,
            "{what}: the store must be unchanged"
        );
    }
}

/// In strict mode a record of another day rejects the batch with
/// `WrongDay`; nothing is written.
pub async fn wrong_day_rejected_in_strict_mode(store: &dyn Store) {
    apply(store, day(0), vec![rec("strict/seed", day(0), "v1", at(1))]).await;
    let before = rows(store).await;
    let batch = vec![
        rec("strict/seed", day(0), "v2", at(2)),
        rec("strict/other", day(1), "v", at(1)),
    ];
    match upsert(store, day(0), batch, WriteOptions::default()).await {
        Err(Error::WrongDay {
            expected, found, ..
        }) => assert_eq!((expected, found), (day(0), day(1))),
        other => panic!("expected WrongDay, got {other:?}"),
    }
    assert_eq!(rows(store).await, before);
}

/// In lenient mode records of other days are merged like any other.
pub async fn other_days_accepted_in_lenient_mode(store: &dyn Store) {
    let lenient = WriteOptions::default().event_dates(EventDates::Lenient);
    let batch = vec![
        rec("lenient/a", day(0), "v", at(1)),
        rec("lenient/b", day(1), "v", at(1)),
    ];
    let c = apply_with(store, day(0), batch.clone(), lenient).await;
    assert_eq!(c.inserted, 2);
    assert_eq!(rows_under(store, "lenient/").await, batch);
}

/// A store that fails part-way through a batch leaves nothing of it: the
/// store refuses a record that breaks the rules (sent here around `upsert`,
/// after valid rows in key order) and must roll back the whole batch.
pub async fn failure_mid_batch_leaves_nothing(store: &dyn Store) {
    let seed = vec![
        rec("atomic/a", day(30), "v1", at(1)),
        rec("atomic/b", day(30), "v1", at(1)),
    ];
    apply(store, day(30), seed).await;
    let before = rows(store).await;
    // Sorted by key: the refused record comes last, after an update, an
    // unchanged row and an insert have been applied.
    let refused = Record::new_unchecked(
        format!("atomic/z{}", "z".repeat(MAX_KEY_BYTES)),
        day(30),
        "v".to_owned(),
        at(1),
    );
    for mode in [Mode::Merge, Mode::Replace] {
        let records = vec![
            rec("atomic/a", day(30), "v2", at(2)),
            rec("atomic/c", day(30), "v1", at(1)),
            refused.clone(),
        ];
        let stamp = SyncStamp {
            at: at(100),
            run_id: None,
        };
        let header = Header {
            day: day(30),
            mode,
            as_of: at(100),
            guard: ReplaceGuard::off(),
            stamp,
        };
        let result = store.apply(DayWrite::whole(header, records, 0)).await;
        assert!(
            result.is_err(),
            "{mode:?}: a store must refuse a record whose key is {} bytes (got {result:?})",
            refused.key().len()
        );
        assert_eq!(
            rows(store).await,
            before,
            "{mode:?}: a failed batch must leave nothing"
        );
        let ledger = store.ledger(day(30)..=day(30)).await.unwrap();
        assert!(
            ledger
                .iter()
                .all(|e| e.synced.as_ref().is_some_and(|s| s.counts.inserted == 2)),
            "{mode:?}: a failed batch must leave its ledger row as it was: {ledger:?}"
        );
    }
    let c = apply(store, day(30), vec![rec("atomic/a", day(30), "v1", at(1))]).await;
    assert_eq!(c, counts(0, 0, 1, 0, 0), "the store still works afterwards");
}

/// Several tasks applying overlapping batches at once, each twice, converge
/// to the winners: no lost update, no deadlock, no stale overwrite.
pub async fn concurrent_overlapping_batches_converge(store: &dyn Store) {
    const KEYS: usize = 300;
    const BATCHES: usize = 8;
    // Batch b covers keys [b*30, b*30+120): every key is in several
    // batches, with versions that differ by batch.
    let batch = |b: usize| -> Vec<Record> {
        (b * 30..b * 30 + 120)
            .map(|k| {
                let k = k % KEYS;
                let t = ((k * 7 + b * 13) % 5) as i64;
                rec(
                    &format!("concurrent/{k:03}"),
                    day(70),
                    &format!("b{b}"),
                    at(t),
                )
            })
            .collect()
    };
    let batches: Vec<Vec<Record>> = (0..BATCHES).map(batch).collect();
    let runs = batches
        .iter()
        .chain(batches.iter().rev())
        .map(|records| async move {
            upsert(store, day(70), records.clone(), WriteOptions::default()).await
        });
    for result in join_all(runs).await {
        result.unwrap_or_else(|e| panic!("a concurrent upsert failed: {e}"));
    }
    let expected = oracle(
        &batches
            .iter()
            .map(|r| (day(70), r.clone(), WriteOptions::default()))
            .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(rows_under(store, "concurrent/").await, expected);
}

/// Keys and values in any script, emoji and SQL-looking text round-trip
/// exactly, and rows come back in key byte order.
pub async fn unicode_keys_and_values(store: &dyn Store) {
    let keys = ["ключ", "键", "🔑", "é", "z", "Z", "e\u{301}", "a b", "it's"];
    let values = [
        r#"{"name":"Zoë","emoji":"🦀"}"#,
        "مرحبا",
        "line1\nline2\ttab",
        "'; DROP TABLE records; --",
        "\u{feff}bom",
        "\\x00 is not a NUL",
        "e\u{301}",
        "😀😀😀",
        "",
    ];
    let records: Vec<_> = keys
        .iter()
        .zip(values)
        .map(|(k, v)| rec(&format!("unicode/{k}"), day(0), v, at(1)))
        .collect();
    apply(store, day(0), records.clone()).await;
    let mut expected = records;
    expected.sort_by(|a, b| a.key().as_bytes().cmp(b.key().as_bytes()));
    assert_eq!(rows_under(store, "unicode/").await, expected);
    for r in &expected {
        assert_eq!(get(store, r.key()).await.as_ref(), Some(r));
    }
    let c = apply(store, day(0), expected.clone()).await;
    assert_eq!(c.unchanged, expected.len() as u64);
}

/// Sub-microsecond digits are truncated when a record is built, so the store
/// keeps whole microseconds, and a re-delivery differing only below a
/// microsecond is unchanged.
pub async fn sub_microsecond_timestamps(store: &dyn Store) {
    let base = at(100);
    let first = rec("micros/k", day(0), "v", base + Duration::nanoseconds(1_999));
    let same_micro = rec("micros/k", day(0), "v", base + Duration::nanoseconds(1_001));
    let next_micro = rec("micros/k", day(0), "v", base + Duration::nanoseconds(2_000));
    apply(store, day(0), vec![first]).await;
    let stored = get(store, "micros/k").await.unwrap();
    assert_eq!(stored.updated_at(), base + Duration::microseconds(1));
    let c = apply(store, day(0), vec![same_micro]).await;
    assert_eq!(c, counts(0, 0, 1, 0, 0));
    let c = apply(store, day(0), vec![next_micro]).await;
    assert_eq!(c, counts(0, 1, 0, 0, 0));
    let stored = get(store, "micros/k").await.unwrap();
    assert_eq!(stored.updated_at(), base + Duration::microseconds(2));
}

/// A 10 000-record batch applies in one go, and its re-run is unchanged.
pub async fn large_batch(store: &dyn Store) {
    let records: Vec<_> = (0..10_000)
        .map(|i| {
            rec(
                &format!("large/{i:05}"),
                day(80),
                &format!("{{\"i\":{i}}}"),
                at(i),
            )
        })
        .collect();
    let c = apply(store, day(80), records.clone()).await;
    assert_eq!(c, counts(10_000, 0, 0, 0, 0));
    let c = apply(store, day(80), records.clone()).await;
    assert_eq!(c, counts(0, 0, 10_000, 0, 0));
    assert_eq!(rows_under(store, "large/").await, records);
    assert_eq!(store.day_rows(day(80)).await.unwrap().len(), 10_000);
}

/// An empty batch (merge mode) writes nothing and reports all zeros.
pub async fn empty_batch(store: &dyn Store) {
    apply(store, day(90), vec![rec("empty/a", day(90), "v", at(1))]).await;
    let before = rows(store).await;
    let c = apply(store, day(90), Vec::new()).await;
    assert_eq!(c, Counts::default());
    assert_eq!(rows(store).await, before);
}

/// Reading a key that was never written gives `None`, not an error; keys
/// are case- and byte-exact.
pub async fn get_unknown_key(store: &dyn Store) {
    assert_eq!(get(store, "unknown/never-written").await, None);
    apply(store, day(0), vec![rec("unknown/Key", day(0), "v", at(1))]).await;
    assert_eq!(get(store, "unknown/key").await, None);
    assert_eq!(get(store, "unknown/Key ").await, None);
    assert!(get(store, "unknown/Key").await.is_some());
}

/// `day_rows` returns exactly one day's rows, in key order.
pub async fn day_rows_returns_one_day(store: &dyn Store) {
    for d in 100..103 {
        let records = (0..5)
            .rev()
            .map(|i| rec(&format!("day-rows/{d}/{i}"), day(d), "v", at(1)))
            .collect();
        apply(store, day(d), records).await;
    }
    let got = store.day_rows(day(101)).await.unwrap();
    let keys: Vec<_> = got.iter().map(Record::key).collect();
    let expected: Vec<_> = (0..5).map(|i| format!("day-rows/101/{i}")).collect();
    assert_eq!(keys, expected);
    assert!(store.day_rows(day(200)).await.unwrap().is_empty());
}

/// A newer version of a key may carry another `event_date`: the row moves
/// to that day, and replacing its old day leaves it alone.
pub async fn key_moves_between_days(store: &dyn Store) {
    let lenient = WriteOptions::default().event_dates(EventDates::Lenient);
    apply(store, day(110), vec![rec("moves/k", day(110), "v1", at(1))]).await;
    let moved = rec("moves/k", day(111), "v2", at(2));
    let c = apply_with(store, day(110), vec![moved.clone()], lenient).await;
    assert_eq!(c.updated, 1);
    assert!(store.day_rows(day(110)).await.unwrap().is_empty());
    assert_eq!(store.day_rows(day(111)).await.unwrap(), vec![moved.clone()]);
    let replace = WriteOptions::default().mode(Mode::Replace);
    let c = apply_with(store, day(110), Vec::new(), replace).await;
    assert_eq!(c.deleted, 0);
    assert_eq!(get(store, "moves/k").await, Some(moved));
}

/// The longest allowed key (512 bytes, multi-byte characters) and a 1 MiB
/// value round-trip exactly.
pub async fn longest_key_and_large_value(store: &dyn Store) {
    let prefix = "longest/";
    // 168 three-byte characters + 8 prefix bytes = 512 bytes.
    let key = format!("{prefix}{}", "€".repeat((MAX_KEY_BYTES - prefix.len()) / 3));
    assert_eq!(key.len(), MAX_KEY_BYTES);
    let value = "x".repeat(1 << 20);
    let record = rec(&key, day(0), &value, at(1));
    let c = apply(store, day(0), vec![record.clone()]).await;
    assert_eq!(c.inserted, 1);
    assert_eq!(get(store, &key).await, Some(record.clone()));
    let c = apply(store, day(0), vec![record]).await;
    assert_eq!(c.unchanged, 1);
    match Record::new(format!("{key}x"), day(0), "v", at(1)) {
        Err(Error::InvalidRecord {
            field: Field::Key,
            problem: Problem::TooLong { len: 513, max: 512 },
            ..
        }) => {}
        other => panic!("a 513-byte key must be rejected, got {other:?}"),
    }
}
