//! The conformance suite every [`Store`] must pass.
//!
//! **Test support, exempt from semver**: cases may be added or tightened in
//! any release. Enabled by the `conformance` feature; add it to your
//! adapter's `[dev-dependencies]` only.
//!
//! Each `pub async fn` proves one behaviour of the write-path contract
//! against the store it is given, and panics with a readable message if the
//! store breaks it. Cases only add keys under their own prefixes and days, so
//! they may run one after another on one store; run concurrently, each needs
//! a store (or table) of its own, as `conformance_tests!` gives it.
//!
//! Run them all, one `#[tokio::test]` per case inside a module named
//! `conformance`, with [`conformance_tests!`](crate::conformance_tests):
//!
//! ```text
//! backfill_core::conformance_tests!(async { MyStore::connect("…").await.unwrap() });
//! ```
//!
//! The suite compares every store with [`MemoryStore`], the reference
//! implementation, byte for byte.

use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use futures_util::future::join_all;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::error::{Error, Field, Problem};
use crate::record::{Record, MAX_KEY_BYTES};
use crate::store::{Batch, Counts, Mode, Store};
use crate::write::{upsert, EventDates, WriteOptions};
use crate::{Error as BackfillErrorKind, Job, MemoryStore, Retry, Transient};

/// Expands to one `#[tokio::test]` per conformance case, inside a module
/// named `conformance`, so `cargo test conformance` runs exactly the suite
/// and a failure names the behaviour.
///
/// The argument is an expression evaluated afresh in each test; it must be
/// a future whose output is the store under test (anything implementing
/// [`Store`](crate::Store)). Names from the calling module are in scope.
/// The calling crate needs `tokio` with the `macros` and `rt-multi-thread`
/// features among its dev-dependencies.
///
/// ```text
/// async fn make_store() -> MyStore { MyStore::open_in_memory().await.unwrap() }
/// backfill_core::conformance_tests!(make_store());
/// ```
///
/// For a store that needs a service, `optional:` takes a future of
/// `Option<store>`; `None` ends each test early (print why, and fail instead
/// when the service is required, e.g. in CI):
///
/// ```text
/// backfill_core::conformance_tests!(optional: test_postgres_store());
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (optional: $make:expr) => {
        $crate::conformance_tests!(@list optional $make);
    };
    ($make:expr) => {
        $crate::conformance_tests!(@list required $make);
    };
    (@list $mode:ident $make:expr) => {
        $crate::conformance_tests!(@cases $mode $make;
            insert_into_empty,
            newer_version_wins,
            stale_version_is_skipped,
            identical_reapply_writes_nothing,
            tie_on_updated_at_resolved_by_value,
            tie_on_value_resolved_by_event_date,
            duplicate_keys_collapse_to_winner,
            replace_deletes_only_missing_keys_of_that_day,
            replace_with_empty_batch_empties_the_day,
            invalid_record_writes_nothing,
            wrong_day_rejected_in_strict_mode,
            other_days_accepted_in_lenient_mode,
            failure_mid_batch_leaves_nothing,
            same_range_twice,
            daily_then_weekly_equals_weekly_alone,
            any_order_converges,
            concurrent_overlapping_batches_converge,
            unicode_keys_and_values,
            sub_microsecond_timestamps,
            large_batch,
            empty_batch,
            get_unknown_key,
            day_rows_returns_one_day,
            key_moves_between_days,
            inverted_range_is_an_error,
            failed_fetch_fails_only_its_day,
            longest_key_and_large_value,
            concurrency_matches_sequential,
            transient_failure_is_retried,
            permanent_failure_is_listed_and_the_rest_written,
            dry_run_touches_nothing,
            cancelled_backfill_leaves_whole_days,
            panicking_fetch_fails_only_its_day,
            hung_fetch_times_out,
        );
    };
    (@cases $mode:ident $make:expr; $($case:ident),* $(,)?) => {
        mod conformance {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[$crate::__tokio::test(flavor = "multi_thread", worker_threads = 2, crate = "backfill_core::__tokio")]
                async fn $case() {
                    let store = $crate::conformance_tests!(@make $mode $make);
                    $crate::conformance::$case(&store).await;
                }
            )*
        }
    };
    (@make required $make:expr) => {
        $make.await
    };
    (@make optional $make:expr) => {
        match $make.await {
            Some(store) => store,
            // The factory printed why the store is unavailable.
            None => return,
        }
    };
}

// ----------------------------------------------------------------- helpers

/// Day `n` of the suite's calendar (2026-01-01 is day 0).
fn day(n: i64) -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 1, 1).unwrap() + Duration::days(n)
}

/// `secs` seconds after the suite's epoch.
fn at(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::seconds(secs)
}

fn rec(key: &str, d: NaiveDate, value: &str, when: DateTime<Utc>) -> Record {
    Record::new(key, d, value, when).unwrap_or_else(|e| panic!("test record is invalid: {e}"))
}

async fn apply(store: &dyn Store, d: NaiveDate, records: Vec<Record>) -> Counts {
    apply_with(store, d, records, WriteOptions::default()).await
}

async fn apply_with(
    store: &dyn Store,
    d: NaiveDate,
    records: Vec<Record>,
    options: WriteOptions,
) -> Counts {
    upsert(store, d, records, options)
        .await
        .unwrap_or_else(|e| panic!("upsert for {d} failed: {e}"))
}

async fn rows(store: &dyn Store) -> Vec<Record> {
    store.rows().await.expect("reading rows")
}

/// The rows whose key starts with `prefix`, in key order.
async fn rows_under(store: &dyn Store, prefix: &str) -> Vec<Record> {
    rows(store)
        .await
        .into_iter()
        .filter(|r| r.key().starts_with(prefix))
        .collect()
}

async fn get(store: &dyn Store, key: &str) -> Option<Record> {
    store.get(key).await.expect("reading one key")
}

fn counts(inserted: u64, updated: u64, unchanged: u64, stale: u64, deleted: u64) -> Counts {
    Counts {
        inserted,
        updated,
        unchanged,
        stale,
        deleted,
        collapsed: 0,
    }
}

async fn oracle(batches: &[(NaiveDate, Vec<Record>, WriteOptions)]) -> Vec<Record> {
    let memory = MemoryStore::new();
    for (d, records, options) in batches {
        apply_with(&memory, *d, records.clone(), *options).await;
    }
    rows(&memory).await
}

// ------------------------------------------------------------ the cases

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
        counts(0, 1, 1, 0, 1),
        "b deleted, c updated, a unchanged"
    );
    let expected = vec![d0[0].clone(), newer_c, d1[0].clone(), d1[1].clone()];
    assert_eq!(rows_under(store, "replace/").await, expected);
    let c = apply_with(store, day(10), fixed, replace).await;
    assert_eq!(c.written(), 0, "re-running a replace writes nothing");
    assert_eq!(rows_under(store, "replace/").await, expected);
}

/// Replace mode with an empty batch empties exactly that day.
pub async fn replace_with_empty_batch_empties_the_day(store: &dyn Store) {
    let replace = WriteOptions::default().mode(Mode::Replace);
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
    assert_eq!(c, counts(0, 0, 0, 0, 1));
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
        let batch = Batch::new(day(30), mode, records);
        let result = store.apply(&batch).await;
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
    }
    let c = apply(store, day(30), vec![rec("atomic/a", day(30), "v1", at(1))]).await;
    assert_eq!(c, counts(0, 0, 1, 0, 0), "the store still works afterwards");
}

fn seeded_fetch(
    prefix: &'static str,
    per_day: u32,
    version: i64,
) -> impl Fn(NaiveDate) -> std::future::Ready<Result<Vec<Record>, std::io::Error>> + Send + Sync {
    move |d: NaiveDate| {
        let records = (0..per_day)
            .map(|i| {
                let when = d.and_hms_opt(1, 0, 0).unwrap().and_utc() + Duration::seconds(version);
                rec(
                    &format!("{prefix}{d}:{i}"),
                    d,
                    &format!("{{\"i\":{i},\"v\":{version}}}"),
                    when,
                )
            })
            .collect();
        std::future::ready(Ok(records))
    }
}

/// Backfilling the same range twice: the second run inserts nothing, writes
/// nothing and leaves the row count unchanged.
pub async fn same_range_twice(store: &dyn Store) {
    let fetch = seeded_fetch("twice/", 25, 0);
    let job = Job::new();
    let first = job
        .backfill(store, &fetch, day(40)..=day(46))
        .await
        .unwrap();
    assert_eq!(first.totals().inserted, 7 * 25);
    let after_first = rows(store).await;
    let second = job
        .backfill(store, &fetch, day(40)..=day(46))
        .await
        .unwrap();
    assert_eq!(second.totals().written(), 0);
    assert_eq!(second.totals().unchanged, 7 * 25);
    assert_eq!(second.days.len(), 7);
    assert_eq!(rows(store).await, after_first);
}

/// Syncing day by day then backfilling the week with a later fetch ends
/// exactly where backfilling that week alone ends, in merge and in replace
/// mode.
pub async fn daily_then_weekly_equals_weekly_alone(store: &dyn Store) {
    for (mode, prefix) in [(Mode::Merge, "weekly-m/"), (Mode::Replace, "weekly-r/")] {
        let job = Job::new().mode(mode);
        let offset = if mode == Mode::Merge { 50 } else { 60 };
        let week = day(offset)..=day(offset + 6);
        // The daily job saw the first version; the weekly re-fetch sees
        // corrections to some keys and, upstream having deleted them, not
        // the last keys of each day.
        let daily = seeded_fetch(prefix, 10, 0);
        let weekly = move |d: NaiveDate| {
            let records = (0..8)
                .map(|i| {
                    let version = if i % 3 == 0 { 60 } else { 0 };
                    let when =
                        d.and_hms_opt(1, 0, 0).unwrap().and_utc() + Duration::seconds(version);
                    rec(
                        &format!("{prefix}{d}:{i}"),
                        d,
                        &format!("{{\"i\":{i},\"v\":{version}}}"),
                        when,
                    )
                })
                .collect::<Vec<_>>();
            std::future::ready(Ok::<_, std::io::Error>(records))
        };
        for d in week.clone().start().iter_days().take(7) {
            job.sync_one_day(store, &daily, Some(d)).await.unwrap();
        }
        job.backfill(store, &weekly, week.clone()).await.unwrap();

        let alone = MemoryStore::new();
        job.backfill(&alone, &weekly, week).await.unwrap();
        let expected = if mode == Mode::Replace {
            rows(&alone).await
        } else {
            // Merge keeps keys the weekly fetch no longer returns.
            let reference = MemoryStore::new();
            for d in day(offset).iter_days().take(7) {
                job.sync_one_day(&reference, &daily, Some(d)).await.unwrap();
            }
            job.backfill(&reference, &weekly, day(offset)..=day(offset + 6))
                .await
                .unwrap();
            let merged = rows(&reference).await;
            // Every key the weekly fetch returned holds the weekly version.
            for row in rows(&alone).await {
                assert!(merged.contains(&row));
            }
            merged
        };
        assert_eq!(rows_under(store, prefix).await, expected, "{mode:?}");
    }
}

/// One generated scenario for [`any_order_converges`].
#[derive(Debug, Clone)]
struct Scenario {
    /// `(day, records)` batches, as a fetch might return them.
    batches: Vec<(NaiveDate, Vec<Record>)>,
    /// The order batches are applied in; every batch appears at least once.
    order: Vec<usize>,
}

fn scenario_strategy(prefix: String) -> impl Strategy<Value = Scenario> {
    use proptest::collection::vec;
    const KEYS: [&str; 5] = ["a", "b", "Z", "é", "ключ"];
    const VALUES: [&str; 5] = ["", "a", "b", "z", "é"];
    let version = (0..KEYS.len(), 0..3i64, 0..VALUES.len(), 0..3i64, 0..2usize);
    (
        vec(version, 1..24),
        vec(0..64usize, 0..6),
        vec(0..1000u32, 64),
    )
        .prop_map(move |(versions, repeats, priorities)| {
            // Group versions into batches by (day, split): each day may be
            // fetched twice with different contents.
            let mut batches: Vec<(NaiveDate, Vec<Record>)> = Vec::new();
            for d in 0..3 {
                for split in 0..2 {
                    let records: Vec<_> = versions
                        .iter()
                        .filter(|v| v.1 == d && v.4 == split)
                        .map(|&(k, d, v, t, _)| {
                            rec(&format!("{prefix}{}", KEYS[k]), day(d), VALUES[v], at(t))
                        })
                        .collect();
                    if !records.is_empty() {
                        batches.push((day(d), records));
                    }
                }
            }
            let mut order: Vec<usize> = (0..batches.len())
                .chain(repeats.iter().map(|r| r % batches.len()))
                .collect();
            let mut slots: Vec<(u32, usize)> = order
                .iter()
                .enumerate()
                .map(|(i, b)| (priorities[i], *b))
                .collect();
            slots.sort();
            order = slots.into_iter().map(|(_, b)| b).collect();
            Scenario { batches, order }
        })
}

async fn check_scenario(
    store: &dyn Store,
    prefix: &str,
    scenario: &Scenario,
) -> Result<(), String> {
    for &i in &scenario.order {
        let (d, records) = &scenario.batches[i];
        upsert(store, *d, records.clone(), WriteOptions::default())
            .await
            .map_err(|e| format!("upsert failed: {e}"))?;
    }
    // The winner of every key, computed directly from the contract.
    let mut winners: Vec<Record> = Vec::new();
    for (_, records) in &scenario.batches {
        for r in records {
            match winners.iter_mut().find(|w| w.key() == r.key()) {
                Some(w) if r.supersedes(w) => *w = r.clone(),
                Some(_) => {}
                None => winners.push(r.clone()),
            }
        }
    }
    winners.sort_by(|a, b| a.key().cmp(b.key()));
    let got = rows_under(store, prefix).await;
    if got != winners {
        return Err(format!("stored {got:#?}\nbut the winners are {winners:#?}"));
    }
    let memory: Vec<_> = scenario
        .order
        .iter()
        .map(|&i| {
            (
                scenario.batches[i].0,
                scenario.batches[i].1.clone(),
                WriteOptions::default(),
            )
        })
        .collect();
    if got != oracle(&memory).await {
        return Err("differs from MemoryStore fed the same batches".into());
    }
    for (d, records) in &scenario.batches {
        let c = upsert(store, *d, records.clone(), WriteOptions::default())
            .await
            .map_err(|e| format!("re-apply failed: {e}"))?;
        if c.written() != 0 {
            return Err(format!("re-applying a batch wrote rows: {c:?}"));
        }
    }
    Ok(())
}

/// Property: random batches of random versions, applied in a random order
/// with repeats, end with exactly the winner of every key (and the same rows
/// as `MemoryStore`), and re-applying any of them writes nothing. A failure
/// is shrunk to a small scenario and printed with its seed.
pub async fn any_order_converges(store: &dyn Store) {
    static CASE: AtomicUsize = AtomicUsize::new(0);
    let cases: u32 = std::env::var("BACKFILL_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let seed: u64 = std::env::var("BACKFILL_PROPTEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x00c0_ffee);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let fresh_prefix = || format!("converge/{}/", CASE.fetch_add(1, Ordering::Relaxed));

    for _ in 0..cases {
        let prefix = fresh_prefix();
        let mut tree = scenario_strategy(prefix.clone())
            .new_tree(&mut runner)
            .expect("generating a scenario");
        let Err(first) = check_scenario(store, &prefix, &tree.current()).await else {
            continue;
        };
        // Shrink: each try runs under a fresh prefix, so earlier tries
        // cannot influence it.
        let mut smallest = (tree.current(), first);
        let mut steps = 0;
        if tree.simplify() {
            while steps < 256 {
                steps += 1;
                let prefix = fresh_prefix();
                let candidate = rebase(&tree.current(), &prefix);
                match check_scenario(store, &prefix, &candidate).await {
                    Err(why) => {
                        smallest = (candidate, why);
                        if !tree.simplify() {
                            break;
                        }
                    }
                    Ok(()) => {
                        if !tree.complicate() {
                            break;
                        }
                    }
                }
            }
        }
        panic!(
            "convergence broken (BACKFILL_PROPTEST_SEED={seed}); smallest failing scenario:\n{:#?}\n{}",
            smallest.0, smallest.1
        );
    }
}

/// The same scenario with its keys moved under `prefix`.
fn rebase(scenario: &Scenario, prefix: &str) -> Scenario {
    let batches = scenario
        .batches
        .iter()
        .map(|(d, records)| {
            let moved = records
                .iter()
                .map(|r| {
                    let suffix = r.key().splitn(3, '/').nth(2).unwrap_or(r.key());
                    rec(
                        &format!("{prefix}{suffix}"),
                        r.event_date(),
                        r.value(),
                        r.updated_at(),
                    )
                })
                .collect();
            (*d, moved)
        })
        .collect();
    Scenario {
        batches,
        order: scenario.order.clone(),
    }
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

/// A backfill whose start is after its end fails with `InvalidRange`
/// before fetching anything.
pub async fn inverted_range_is_an_error(store: &dyn Store) {
    let calls = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<_, std::io::Error>(vec![rec(
            "inverted/k",
            d,
            "v",
            at(1),
        )]))
    };
    let before = rows(store).await;
    match Job::new().backfill(store, &fetch, day(5)..=day(4)).await {
        Err(Error::InvalidRange { start, end }) => assert_eq!((start, end), (day(5), day(4))),
        other => panic!("expected InvalidRange, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(rows(store).await, before);
}

/// A day whose fetch fails is reported with its error; every other day of
/// the backfill is still written.
pub async fn failed_fetch_fails_only_its_day(store: &dyn Store) {
    let fetch = |d: NaiveDate| {
        let result = if d == day(121) {
            Err(std::io::Error::other("upstream returned 503"))
        } else {
            Ok(vec![rec(&format!("fetch-fail/{d}"), d, "v", at(1))])
        };
        std::future::ready(result)
    };
    match Job::new()
        .backfill(store, &fetch, day(120)..=day(122))
        .await
    {
        Err(Error::Backfill(failure)) => {
            assert_eq!(failure.failed.len(), 1);
            let (failed_day, error) = &failure.failed[0];
            assert_eq!(*failed_day, day(121));
            assert!(
                matches!(error, Error::Fetch { day: d, .. } if *d == day(121)),
                "{error:?}"
            );
            let ok: Vec<_> = failure.report.days.iter().map(|r| r.day).collect();
            assert_eq!(ok, [day(120), day(122)]);
        }
        other => panic!("expected Backfill error, got {other:?}"),
    }
    let keys: Vec<_> = rows_under(store, "fetch-fail/")
        .await
        .into_iter()
        .map(|r| r.key().to_owned())
        .collect();
    assert_eq!(
        keys,
        [
            format!("fetch-fail/{}", day(120)),
            format!("fetch-fail/{}", day(122))
        ]
    );
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

// --------------------------------------------------------- the engine

/// A job that retries quickly, for tests.
fn quick_job() -> Job {
    Job::new().retry(Retry::default().attempts(3).backoff(
        std::time::Duration::from_millis(1),
        std::time::Duration::from_millis(5),
    ))
}

/// `per_day` records per day under `prefix`.
fn day_records(prefix: &str, d: NaiveDate, per_day: usize) -> Vec<Record> {
    (0..per_day)
        .map(|i| {
            rec(
                &format!("{prefix}{d}/{i:03}"),
                d,
                &format!("{{\"i\":{i}}}"),
                at(i as i64),
            )
        })
        .collect()
}

/// Outcome of one day in [`concurrency_matches_sequential`]'s scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DayFate {
    Ok,
    FailsOnce,
    FailsAlways,
}

async fn run_fated(
    store: &dyn Store,
    prefix: &str,
    first: i64,
    fates: &[(DayFate, usize)],
    concurrency: usize,
) -> (Vec<(String, Record)>, Vec<NaiveDate>) {
    let attempts: std::sync::Mutex<std::collections::HashMap<NaiveDate, u32>> = Default::default();
    let fetch = |d: NaiveDate| {
        let index = (d - day(first)).num_days() as usize;
        let (fate, per_day) = fates[index];
        let attempt = {
            let mut seen = attempts.lock().unwrap();
            let n = seen.entry(d).or_insert(0);
            *n += 1;
            *n
        };
        let records = day_records(prefix, d, per_day);
        async move {
            // Yield so concurrent days interleave.
            tokio::task::yield_now().await;
            match fate {
                DayFate::FailsOnce if attempt == 1 => Err(Transient::new("503").into()),
                DayFate::FailsAlways => Err(BoxErrorOf::from("upstream bug")),
                _ => Ok(records),
            }
        }
    };
    let last = first + fates.len() as i64 - 1;
    let failed = match quick_job()
        .concurrency(concurrency)
        .backfill(store, &fetch, day(first)..=day(last))
        .await
    {
        Ok(_) => Vec::new(),
        Err(BackfillErrorKind::Backfill(e)) => e.failed.iter().map(|(d, _)| *d).collect(),
        Err(other) => panic!("unexpected error: {other}"),
    };
    let rows = rows_under(store, prefix)
        .await
        .into_iter()
        .map(|r| (r.key()[prefix.len()..].to_owned(), r))
        .map(|(suffix, r)| {
            let plain =
                Record::new(suffix.clone(), r.event_date(), r.value(), r.updated_at()).unwrap();
            (suffix, plain)
        })
        .collect();
    (rows, failed)
}

type BoxErrorOf = crate::BoxError;

/// Property: a backfill at concurrency 8 ends byte-identical to the same
/// backfill at concurrency 1, over random ranges with days that fail once
/// (retried) or always (reported), and both report the same failed days.
pub async fn concurrency_matches_sequential(store: &dyn Store) {
    use proptest::collection::vec;
    use proptest::prelude::*;
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let fate = prop_oneof![
        6 => Just(DayFate::Ok),
        2 => Just(DayFate::FailsOnce),
        1 => Just(DayFate::FailsAlways),
    ];
    let strategy = (0..30i64, vec((fate, 0..20usize), 1..20));
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    for _ in 0..12 {
        let (first, fates) = strategy.new_tree(&mut runner).unwrap().current();
        let n = RUN.fetch_add(1, Ordering::Relaxed);
        let one = run_fated(store, &format!("conc1/{n}/"), 200 + first, &fates, 1).await;
        let eight = run_fated(store, &format!("conc8/{n}/"), 200 + first, &fates, 8).await;
        let expected_failed: Vec<_> = fates
            .iter()
            .enumerate()
            .filter(|(_, (f, _))| *f == DayFate::FailsAlways)
            .map(|(i, _)| day(200 + first + i as i64))
            .collect();
        assert_eq!(
            one.1, expected_failed,
            "failed days at concurrency 1 for {fates:?}"
        );
        assert_eq!(
            eight.1, expected_failed,
            "failed days at concurrency 8 for {fates:?}"
        );
        assert_eq!(
            one.0, eight.0,
            "rows differ between concurrency 1 and 8 for {fates:?}"
        );
    }
}

/// A fetch that fails transiently twice succeeds on the third attempt, and
/// the report says 3 attempts.
pub async fn transient_failure_is_retried(store: &dyn Store) {
    let calls = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let result = if n < 2 {
            Err(Transient::new(format!("503 on try {}", n + 1)))
        } else {
            Ok(day_records("retry/", d, 5))
        };
        std::future::ready(result)
    };
    let report = quick_job()
        .sync_one_day(store, &fetch, Some(day(300)))
        .await
        .unwrap();
    assert_eq!((report.attempts, report.counts.inserted), (3, 5));
    // A fetch error not marked transient is not retried.
    let plain =
        |_: NaiveDate| std::future::ready(Err::<Vec<Record>, _>(std::io::Error::other("bug")));
    let calls_before = calls.load(Ordering::SeqCst);
    match quick_job()
        .sync_one_day(store, &plain, Some(day(301)))
        .await
    {
        Err(BackfillErrorKind::Fetch { .. }) => {}
        other => panic!("expected Fetch, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), calls_before);
    // Retries give up after the policy's attempts.
    let always = AtomicUsize::new(0);
    let flaky = |_: NaiveDate| {
        always.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Err::<Vec<Record>, _>(Transient::new("503")))
    };
    let result = quick_job()
        .sync_one_day(store, &flaky, Some(day(302)))
        .await;
    assert!(
        matches!(result, Err(BackfillErrorKind::Fetch { .. })),
        "{result:?}"
    );
    assert_eq!(always.load(Ordering::SeqCst), 3);
}

/// A day that keeps failing is listed in the error, with its cause, while
/// every other day of a concurrent backfill is written.
pub async fn permanent_failure_is_listed_and_the_rest_written(store: &dyn Store) {
    let fetch = |d: NaiveDate| {
        let result = if d == day(312) || d == day(315) {
            Err(std::io::Error::other("schema changed upstream"))
        } else {
            Ok(day_records("permanent/", d, 3))
        };
        std::future::ready(result)
    };
    let job = quick_job().concurrency(4);
    match job.backfill(store, &fetch, day(310)..=day(317)).await {
        Err(BackfillErrorKind::Backfill(e)) => {
            let failed: Vec<_> = e.failed.iter().map(|(d, _)| *d).collect();
            assert_eq!(failed, [day(312), day(315)]);
            assert!(e
                .failed
                .iter()
                .all(|(_, err)| matches!(err, BackfillErrorKind::Fetch { .. })));
            assert_eq!(e.report.days.len(), 6);
            let days: Vec<_> = e.report.days.iter().map(|r| r.day).collect();
            let mut sorted = days.clone();
            sorted.sort();
            assert_eq!(days, sorted, "reports come in day order");
        }
        other => panic!("expected Backfill error, got {other:?}"),
    }
    for d in 310..=317 {
        let expected = if d == 312 || d == 315 { 0 } else { 3 };
        assert_eq!(
            store.day_rows(day(d)).await.unwrap().len(),
            expected,
            "day {d}"
        );
    }
}

/// A dry run returns the plan without fetching or writing.
pub async fn dry_run_touches_nothing(store: &dyn Store) {
    let calls = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<_, std::io::Error>(day_records("dry/", d, 2)))
    };
    let before = rows(store).await;
    let report = quick_job()
        .dry_run(true)
        .concurrency(4)
        .backfill(store, &fetch, day(320)..=day(324))
        .await
        .unwrap();
    assert!(report.dry_run);
    assert_eq!(report.planned, (320..=324).map(day).collect::<Vec<_>>());
    assert!(report.days.is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(rows(store).await, before);
}

/// Dropping a running backfill starts no new day, and leaves every day
/// either complete or absent.
pub async fn cancelled_backfill_leaves_whole_days(store: &dyn Store) {
    let started = AtomicUsize::new(0);
    let fetch = |d: NaiveDate| {
        started.fetch_add(1, Ordering::SeqCst);
        // Two hung days fill both slots of the concurrency-2 run.
        let hang = d == day(333) || d == day(334);
        async move {
            if hang {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            Ok::<_, std::io::Error>(day_records("cancel/", d, 50))
        }
    };
    let job = quick_job().concurrency(2);
    let run = job.backfill(store, &fetch, day(330)..=day(349));
    let cut = tokio::time::timeout(std::time::Duration::from_millis(300), run).await;
    assert!(
        cut.is_err(),
        "the backfill should still be waiting on the hung day"
    );
    let launched = started.load(Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        launched,
        "no day may start after the drop"
    );
    assert_eq!(
        launched, 5,
        "only the days up to the two hung ones may have started"
    );
    for d in 330..=349 {
        let n = store.day_rows(day(d)).await.unwrap().len();
        assert!(
            n == 0 || n == 50,
            "day {d} holds {n} rows: partially written"
        );
    }
    assert_eq!(store.day_rows(day(333)).await.unwrap().len(), 0);
    assert_eq!(store.day_rows(day(332)).await.unwrap().len(), 50);
}

/// A fetch that panics fails its own day with `Panicked`; the store and the
/// other days are unaffected.
pub async fn panicking_fetch_fails_only_its_day(store: &dyn Store) {
    let fetch = |d: NaiveDate| {
        assert!(d != day(341), "upstream client bug on {d}");
        std::future::ready(Ok::<_, std::io::Error>(day_records("panic/", d, 4)))
    };
    let fetch = move |d: NaiveDate| async move { fetch(d).await };
    match quick_job()
        .concurrency(2)
        .backfill(store, &fetch, day(340)..=day(342))
        .await
    {
        Err(BackfillErrorKind::Backfill(e)) => {
            assert_eq!(e.failed.len(), 1);
            assert!(
                matches!(&e.failed[0], (d, BackfillErrorKind::Panicked { message, .. })
                if *d == day(341) && message.contains("upstream client bug"))
            );
        }
        other => panic!("expected Backfill error, got {other:?}"),
    }
    assert_eq!(rows_under(store, "panic/").await.len(), 8);
    let c = apply(store, day(341), day_records("panic/", day(341), 4)).await;
    assert_eq!(c.inserted, 4, "the store still works after the panic");
}

/// A fetch that never returns fails its day with `Timeout` under the job's
/// per-day timeout (retried like any transient failure).
pub async fn hung_fetch_times_out(store: &dyn Store) {
    let calls = AtomicUsize::new(0);
    let fetch = |_: NaiveDate| {
        calls.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<Result<Vec<Record>, std::io::Error>>()
    };
    let job = quick_job()
        .retry(
            Retry::default()
                .attempts(2)
                .backoff(std::time::Duration::ZERO, std::time::Duration::ZERO),
        )
        .day_timeout(std::time::Duration::from_millis(50));
    match job.sync_one_day(store, &fetch, Some(day(350))).await {
        Err(BackfillErrorKind::Timeout { day: d, .. }) => assert_eq!(d, day(350)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a timeout is retried");
    assert!(store.day_rows(day(350)).await.unwrap().is_empty());
}

#[cfg(test)]
mod memory_store {
    use crate::MemoryStore;

    crate::conformance_tests!(async { MemoryStore::new() });
}
