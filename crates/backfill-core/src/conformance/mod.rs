//! The conformance suite every [`Store`](crate::Store) must pass.
//!
//! **Test support, exempt from semver**: cases may be added or tightened in
//! any release. Enabled by the `conformance` feature; add it to your
//! adapter's `[dev-dependencies]` only.
//!
//! Each `pub async fn` proves one behaviour against the store it is given,
//! and panics with a readable message if the store breaks it. The cases are
//! grouped by what they prove:
//!
//! - `store.rs`: the write-path contract itself, [`Store::apply`] and the
//!   reads ([`insert_into_empty`], [`stale_version_is_skipped`], …);
//! - `deletes.rs`: tombstones, listings, the watermark, the guard, purge
//!   ([`listings_commute`], …);
//! - `ledger.rs`: the day ledger ([`ledger_row_commits_with_the_rows`], …);
//! - `job.rs`: the job engine through a store: backfills, retries, failures
//!   and cancellation leave whole days ([`same_range_twice`], …);
//! - `property.rs`: generated scenarios that shrink to a readable failure
//!   ([`any_order_converges`], [`concurrency_matches_sequential`]).
//!
//! The typed-column cases are in [`columns`], run by
//! [`column_conformance_tests!`](crate::column_conformance_tests) through a
//! [`TypedStore`](columns::TypedStore): a store that keeps no typed
//! columns lists them as skipped.
//!
//! Tests of a store beyond the suite build their days, instants, records
//! and listings with [`fixtures`], the calendar the suite itself uses.
//!
//! What the engine does without a store (plans, dry runs, timeouts) is
//! tested in core itself and is not repeated here.
//!
//! Cases only add keys under their own prefixes and days, so they may run
//! one after another on one store; run concurrently, each needs a store (or
//! table) of its own, as [`conformance_tests!`](crate::conformance_tests)
//! gives it. The suite compares every store with
//! [`MemoryStore`](crate::MemoryStore), the reference implementation, byte
//! for byte.
//!
//! [`Store::apply`]: crate::Store::apply

pub mod columns;
mod deletes;
pub mod fixtures;
mod helpers;
mod history;
mod job;
mod ledger;
mod property;
mod store;
mod stream;

pub use self::deletes::*;
pub use self::history::*;
pub use self::job::*;
pub use self::ledger::*;
pub use self::property::*;
pub use self::store::*;
pub use self::stream::*;

/// Expands to one test per conformance case, inside a module named
/// `conformance`, so `cargo test conformance` runs exactly the suite and a
/// failure names the behaviour.
///
/// The argument is an expression evaluated afresh in each test, inside the
/// test's own runtime (a multi-threaded tokio runtime with two workers,
/// which the expansion builds itself: the calling crate needs no tokio
/// features). Names from the calling module are in scope. Three forms:
///
/// ```text
/// // A future of the store under test (anything implementing `Store`).
/// backfill_core::conformance_tests!(async { MyStore::open_in_memory().await.unwrap() });
///
/// // A future of `(store, guard)`: the guard (a temporary directory, a
/// // server handle) lives as long as the test, beside the store.
/// backfill_core::conformance_tests!(with_guard: async {
///     let dir = tempfile::tempdir().unwrap();
///     let store = MyStore::open(dir.path().join("records.db")).await.unwrap();
///     (store, dir)
/// });
///
/// // A future of `Option<store>`, for a store that needs a service:
/// // `None` ends each test early (print why, and fail instead when the
/// // service is required, e.g. in CI).
/// backfill_core::conformance_tests!(optional: test_postgres_store());
/// ```
#[macro_export]
macro_rules! conformance_tests {
    // The one list of cases. A unit test in `backfill_core` fails when a
    // `pub async fn` case is missing from it.
    (@list $form:tt) => {
        $crate::conformance_tests! { @cases $form;
            // store.rs: the write-path contract
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
            concurrent_overlapping_batches_converge,
            unicode_keys_and_values,
            sub_microsecond_timestamps,
            large_batch,
            empty_batch,
            get_unknown_key,
            day_rows_returns_one_day,
            key_moves_between_days,
            longest_key_and_large_value,
            // deletes.rs: tombstones, listings, the watermark, the guard
            tombstone_beats_live_version_of_the_same_instant,
            tombstone_then_later_and_earlier_versions,
            counts_follow_what_happened_to_each_key,
            listing_deletes_only_what_it_lacks_as_of_its_instant,
            listings_commute,
            version_delivered_after_a_listing_that_omitted_it_arrives_deleted,
            watermark_of_each_records_own_day_applies,
            moved_key_is_not_deleted_by_its_old_days_listing,
            empty_listing_is_refused_unless_allowed,
            too_large_a_replace_is_refused,
            purge_removes_old_tombstones_and_reopens_the_door,
            reads_see_live_rows_only,
            deletes_match_the_reference_store,
            // ledger.rs: the day ledger
            ledger_row_says_what_the_apply_did,
            ledger_row_commits_with_the_rows,
            missing_empty_and_failed_days_differ,
            failure_then_success_clears_it,
            concurrent_runs_of_a_day_leave_one_consistent_row,
            unchanged_batches_are_skipped_by_digest,
            purge_invalidates_the_digests_of_the_days_it_touched,
            purge_invalidates_a_day_that_held_another_days_tombstone,
            job_records_failures_and_dry_runs_write_nothing,
            acceptance_outlives_reruns_and_failures,
            timing_is_the_last_applys,
            // stream.rs: streamed days
            streamed_day_equals_one_batch,
            unchanged_streams_are_skipped_by_digest,
            failure_mid_stream_leaves_nothing,
            empty_stream_is_an_empty_day,
            // job.rs: the engine through a store
            same_range_twice,
            daily_then_weekly_equals_weekly_alone,
            failed_fetch_fails_only_its_day,
            transient_failure_is_retried,
            permanent_failure_is_listed_and_the_rest_written,
            cancelled_backfill_leaves_whole_days,
            panicking_fetch_fails_only_its_day,
            // property.rs: generated scenarios
            any_order_converges,
            listings_and_deletes_converge,
            concurrency_matches_sequential,
        }
    };
    (@cases names; $($case:ident),* $(,)?) => {
        &[$(stringify!($case)),*]
    };
    (@cases ($form:ident $make:expr); $($case:ident),* $(,)?) => {
        mod conformance {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $case() {
                    $crate::__private::tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                        .expect("building the test's runtime")
                        .block_on(async {
                            $crate::conformance_tests!(@run $form $make, $case);
                        });
                }
            )*
        }
    };
    (@run required $make:expr, $case:ident) => {
        let store = $make.await;
        $crate::conformance::$case(&store).await;
    };
    (@run guarded $make:expr, $case:ident) => {
        let (store, _guard) = $make.await;
        $crate::conformance::$case(&store).await;
    };
    (@run optional $make:expr, $case:ident) => {
        // `None`: the factory printed why the store is unavailable.
        if let Some(store) = $make.await {
            $crate::conformance::$case(&store).await;
        }
    };
    (optional: $make:expr) => {
        $crate::conformance_tests!(@list (optional $make));
    };
    (with_guard: $make:expr) => {
        $crate::conformance_tests!(@list (guarded $make));
    };
    ($make:expr) => {
        $crate::conformance_tests!(@list (required $make));
    };
}

/// The name of every case [`conformance_tests!`](crate::conformance_tests)
/// runs, in its order.
pub const CASES: &[&str] = crate::conformance_tests!(@list names);

/// Expands to one test per [typed-column case](columns), inside a module
/// named `column_conformance` (so `cargo test conformance` runs them with
/// the rest of the suite), each in a runtime of its own as
/// [`conformance_tests!`](crate::conformance_tests) builds it. Three forms:
///
/// ```text
/// // A future of a `TypedStore` (a fresh table of its own per test).
/// backfill_core::column_conformance_tests!(async { MyHarness::new().await });
///
/// // A future of `Option<TypedStore>`, for a store that needs a service:
/// // `None` ends each test early (print why; fail instead in CI).
/// backfill_core::column_conformance_tests!(optional: my_harness());
///
/// // A store that keeps no typed columns: each case is listed as
/// // ignored, with the reason (`cargo test` shows it).
/// backfill_core::column_conformance_tests!(unsupported: "MyStore keeps no typed columns");
/// ```
#[macro_export]
macro_rules! column_conformance_tests {
    (@list $form:tt) => {
        $crate::column_conformance_tests! { @cases $form;
            columns_hold_each_records_fields,
            a_record_that_does_not_fit_writes_nothing_of_its_day,
            the_records_counts_and_digests_are_unchanged_by_columns,
            a_column_declared_later_is_filled_from_the_rows,
            a_declaration_that_differs_is_refused_naming_the_column,
            a_streamed_day_keeps_the_columns,
            columns_change_only_when_allowed,
        }
    };
    (@cases names; $($case:ident),* $(,)?) => {
        &[$(stringify!($case)),*]
    };
    (@cases (unsupported $why:literal); $($case:ident),* $(,)?) => {
        mod column_conformance {
            $(
                #[test]
                #[ignore = $why]
                fn $case() {
                    eprintln!("skipped: {}", $why);
                }
            )*
        }
    };
    (@cases ($form:ident $make:expr); $($case:ident),* $(,)?) => {
        mod column_conformance {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $case() {
                    $crate::__private::tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                        .expect("building the test's runtime")
                        .block_on(async {
                            $crate::column_conformance_tests!(@run $form $make, $case);
                        });
                }
            )*
        }
    };
    (@run required $make:expr, $case:ident) => {
        let harness = $make.await;
        $crate::conformance::columns::$case(&harness).await;
    };
    (@run optional $make:expr, $case:ident) => {
        if let Some(harness) = $make.await {
            $crate::conformance::columns::$case(&harness).await;
        }
    };
    (unsupported: $why:literal) => {
        $crate::column_conformance_tests!(@list (unsupported $why));
    };
    (optional: $make:expr) => {
        $crate::column_conformance_tests!(@list (optional $make));
    };
    ($make:expr) => {
        $crate::column_conformance_tests!(@list (required $make));
    };
}

/// The name of every typed-column case
/// [`column_conformance_tests!`](crate::column_conformance_tests) runs.
pub const COLUMN_CASES: &[&str] = crate::column_conformance_tests!(@list names);

/// Expands to one test per [history](crate::history) case, inside a module
/// named `history_conformance` (so `cargo test conformance` runs them with
/// the rest of the suite), each in a runtime of its own as
/// [`conformance_tests!`](crate::conformance_tests) builds it, given a
/// store that keeps history. The forms are those of `conformance_tests!`,
/// plus one for a store that keeps none:
///
/// ```text
/// backfill_core::history_conformance_tests!(async { MyStore::open_with_history().await });
/// backfill_core::history_conformance_tests!(with_guard: async { /* (store, guard) */ });
/// backfill_core::history_conformance_tests!(optional: my_store_with_history());
/// backfill_core::history_conformance_tests!(unsupported: "MyStore keeps no history");
/// ```
#[macro_export]
macro_rules! history_conformance_tests {
    (@list $form:tt) => {
        $crate::history_conformance_tests! { @cases $form;
            history_keeps_every_version_in_its_place,
            history_is_the_same_in_any_order,
            history_tombstones_close_and_revivals_reopen,
            history_dates_a_listings_delete_at_its_instant,
            history_follows_a_key_between_days,
            history_resolves_ties_by_the_version_order,
            as_of_reads_each_instant,
            history_of_streamed_and_skipped_days,
            purge_never_removes_history,
            history_matches_the_model,
        }
    };
    (@cases names; $($case:ident),* $(,)?) => {
        &[$(stringify!($case)),*]
    };
    (@cases (unsupported $why:literal); $($case:ident),* $(,)?) => {
        mod history_conformance {
            $(
                #[test]
                #[ignore = $why]
                fn $case() {
                    eprintln!("skipped: {}", $why);
                }
            )*
        }
    };
    (@cases ($form:ident $make:expr); $($case:ident),* $(,)?) => {
        mod history_conformance {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $case() {
                    $crate::__private::tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all()
                        .build()
                        .expect("building the test's runtime")
                        .block_on(async {
                            $crate::conformance_tests!(@run $form $make, $case);
                        });
                }
            )*
        }
    };
    (unsupported: $why:literal) => {
        $crate::history_conformance_tests!(@list (unsupported $why));
    };
    (optional: $make:expr) => {
        $crate::history_conformance_tests!(@list (optional $make));
    };
    (with_guard: $make:expr) => {
        $crate::history_conformance_tests!(@list (guarded $make));
    };
    ($make:expr) => {
        $crate::history_conformance_tests!(@list (required $make));
    };
}

/// The name of every history case
/// [`history_conformance_tests!`](crate::history_conformance_tests) runs.
pub const HISTORY_CASES: &[&str] = crate::history_conformance_tests!(@list names);

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// Every `pub async fn` of the case files is in the macro's list, and
    /// the list names nothing else: a case written but not listed would
    /// silently never run against any store.
    #[test]
    fn every_case_is_listed_once() {
        let sources = [
            include_str!("store.rs"),
            include_str!("deletes.rs"),
            include_str!("ledger.rs"),
            include_str!("stream.rs"),
            include_str!("job.rs"),
            include_str!("property.rs"),
        ];
        let written: BTreeSet<&str> = sources
            .iter()
            .flat_map(|source| source.lines())
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .map(|rest| rest.split(['(', '<']).next().unwrap())
            .collect();
        let listed: BTreeSet<&str> = super::CASES.iter().copied().collect();
        assert_eq!(listed.len(), super::CASES.len(), "a case is listed twice");
        assert_eq!(
            written.difference(&listed).collect::<Vec<_>>(),
            Vec::<&&str>::new(),
            "cases missing from conformance_tests!"
        );
        assert_eq!(
            listed.difference(&written).collect::<Vec<_>>(),
            Vec::<&&str>::new(),
            "listed cases that do not exist"
        );
    }

    /// The same of the history cases.
    #[test]
    fn every_history_case_is_listed_once() {
        let written: BTreeSet<&str> = include_str!("history.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .map(|rest| rest.split(['(', '<']).next().unwrap())
            .collect();
        let listed: BTreeSet<&str> = super::HISTORY_CASES.iter().copied().collect();
        assert_eq!(
            listed.len(),
            super::HISTORY_CASES.len(),
            "a case is listed twice"
        );
        assert_eq!(
            listed, written,
            "history_conformance_tests! lists every case"
        );
    }

    /// The same of the typed-column cases.
    #[test]
    fn every_column_case_is_listed_once() {
        let written: BTreeSet<&str> = include_str!("columns.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .map(|rest| rest.split(['(', '<']).next().unwrap())
            .collect();
        let listed: BTreeSet<&str> = super::COLUMN_CASES.iter().copied().collect();
        assert_eq!(
            listed.len(),
            super::COLUMN_CASES.len(),
            "a case is listed twice"
        );
        assert_eq!(
            listed, written,
            "column_conformance_tests! lists every case"
        );
    }
}

#[cfg(test)]
mod memory_store {
    use crate::MemoryStore;

    crate::conformance_tests!(async { MemoryStore::new() });

    mod with_history {
        use crate::MemoryStore;

        crate::history_conformance_tests!(async { MemoryStore::with_history() });
        // Keeping history changes nothing the live table does.
        crate::conformance_tests!(async { MemoryStore::with_history() });
    }

    // The reference store keeps records only.
    crate::column_conformance_tests!(unsupported: "MemoryStore keeps no typed columns");
}

/// History kept day by day, as a store that keeps each day's share beside
/// the day's rows does (a Delta table's partitions): each write loads the
/// shares of the days it reads only (its own, its records' `event_date`s,
/// and every day holding one of its keys), decides the day in a
/// [`MemoryStore`](crate::MemoryStore) with
/// [`with_history_parts`](crate::MemoryStore::with_history_parts) and
/// keeps what each of those days' share became; history is read as every
/// day's versions, one per instant. It must be the reference's history:
/// history is local to days.
#[cfg(test)]
mod day_local_history {
    use std::collections::{BTreeMap, BTreeSet};
    use std::ops::RangeInclusive;
    use std::sync::Mutex;

    use tokio::sync::Mutex as AsyncMutex;

    use async_trait::async_trait;
    use chrono::{DateTime, NaiveDate, Utc};

    use crate::history::{history_of, one_per_instant, HistoryParts, HistoryRow, Version};
    use crate::ledger::{DayFailure, LedgerEntry};
    use crate::{Counts, DayWrite, MemoryStore, Record, Result, Store};

    /// Each day's share of history.
    type Share = (Vec<Version>, BTreeSet<DateTime<Utc>>);

    #[derive(Debug, Default)]
    pub(super) struct DayLocal {
        /// The live table and the ledger, whole (what is tested here is
        /// history's locality, not the rows').
        live: AsyncMutex<MemoryStore>,
        days: Mutex<BTreeMap<NaiveDate, Share>>,
    }

    #[async_trait]
    impl Store for DayLocal {
        async fn get(&self, key: &str) -> Result<Option<Record>> {
            self.live.lock().await.get(key).await
        }

        async fn rows(&self) -> Result<Vec<Record>> {
            self.live.lock().await.rows().await
        }

        async fn day_rows(&self, day: NaiveDate) -> Result<Vec<Record>> {
            self.live.lock().await.day_rows(day).await
        }

        async fn rows_with_tombstones(&self) -> Result<Vec<Record>> {
            self.live.lock().await.rows_with_tombstones().await
        }

        async fn apply(&self, mut day: DayWrite) -> Result<Counts> {
            let records = day.read_all()?;
            let mut live = self.live.lock().await;
            let mut days = self.days.lock().unwrap();
            let stored = std::mem::take(&mut *live).into_parts();
            // The days this write reads.
            let mut read: BTreeSet<NaiveDate> = day.days().iter().copied().collect();
            read.insert(day.day());
            read.extend(records.iter().map(Record::event_date));
            let keys: BTreeSet<&str> = records.iter().map(Record::key).collect();
            read.extend(
                stored
                    .0
                    .iter()
                    .filter(|r| keys.contains(r.key()))
                    .map(Record::event_date),
            );
            let mut parts = HistoryParts::default();
            for d in &read {
                if let Some((versions, listings)) = days.get(d) {
                    parts.versions.extend(versions.iter().cloned());
                    parts.listings.extend(listings.iter().map(|at| (*d, *at)));
                }
            }
            let (rows, ledger) = stored;
            let decided = MemoryStore::from_parts(rows.clone(), ledger.clone())
                .with_history_parts(parts)
                .apply_into_all(&day, &records);
            let applied = match decided {
                Ok(applied) => applied,
                Err(e) => {
                    *live = MemoryStore::from_parts(rows, ledger);
                    return Err(e);
                }
            };
            *live = MemoryStore::from_parts(applied.rows, applied.ledger);
            let history = applied.history.expect("kept");
            for d in &read {
                let versions = history
                    .versions
                    .iter()
                    .filter(|v| v.record.event_date() == *d)
                    .cloned()
                    .collect();
                let listings = history
                    .listings
                    .iter()
                    .filter(|(ld, _)| ld == d)
                    .map(|(_, at)| *at)
                    .collect();
                days.insert(*d, (versions, listings));
            }
            // A version the write kept under a day it did not read is a
            // bug of this store's bookkeeping.
            assert!(history
                .versions
                .iter()
                .all(|v| read.contains(&v.record.event_date())));
            Ok(applied.counts)
        }

        async fn purge_tombstones(&self, before: DateTime<Utc>) -> Result<u64> {
            self.live.lock().await.purge_tombstones(before).await
        }

        async fn ledger(&self, days: RangeInclusive<NaiveDate>) -> Result<Vec<LedgerEntry>> {
            self.live.lock().await.ledger(days).await
        }

        async fn record_failure(&self, day: NaiveDate, failure: &DayFailure) -> Result<()> {
            self.live.lock().await.record_failure(day, failure).await
        }

        async fn history(&self) -> Result<Vec<HistoryRow>> {
            let days = self.days.lock().unwrap();
            let versions = one_per_instant(days.values().flat_map(|(v, _)| v.iter().cloned()));
            Ok(history_of(&versions))
        }
    }

    crate::history_conformance_tests!(async { DayLocal::default() });
}
