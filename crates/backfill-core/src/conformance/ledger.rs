//! The day ledger (SPEC §7): a day's row commits with its records, says
//! exactly what the apply did, records failures apart, and lets a job skip
//! a day whose batch is the one already applied.

use futures_util::future::join_all;

use super::helpers::*;
use crate::ledger::{DayFailure, DayState, Digest, LedgerEntry, RunId, SyncStamp};
use crate::record::Record;
use crate::stream::{DayWrite, Header};
use crate::write::{upsert_stamped, WriteOptions};
use crate::FixedClock;
use crate::{Mode, ReplaceGuard, Store};

/// The ledger entry of one day, if any.
async fn ledger_of(store: &dyn Store, d: chrono::NaiveDate) -> Option<LedgerEntry> {
    let mut rows = store.ledger(d..=d).await.expect("reading the ledger");
    assert!(rows.len() <= 1, "one ledger row per day: {rows:?}");
    rows.pop()
}

fn stamp(secs: i64, run: &str) -> SyncStamp {
    SyncStamp {
        at: at(secs),
        run_id: Some(RunId::from(run.to_owned())),
    }
}

/// A successful apply writes its day's row: when, by which run, how, the
/// batch's digest and exactly the counts the apply returned.
pub async fn ledger_row_says_what_the_apply_did(store: &dyn Store) {
    let d = day(500);
    let k = |s: &str| format!("ledger-row/{s}");
    let records = vec![
        rec(&k("a"), d, "1", at(1)),
        rec(&k("b"), d, "1", at(1)),
        rec(&k("b"), d, "0", at(0)),
    ];
    let counts = upsert_stamped(
        store,
        d,
        records.clone(),
        WriteOptions::default(),
        stamp(10, "run-1"),
    )
    .await
    .unwrap();
    let entry = ledger_of(store, d).await.expect("a row for the synced day");
    assert_eq!(entry.state(), DayState::Synced);
    let synced = entry.synced.expect("synced");
    assert_eq!(
        (synced.at, synced.run_id.as_ref().map(RunId::as_str)),
        (at(10), Some("run-1"))
    );
    assert_eq!((synced.mode, synced.as_of), (Mode::Merge, None));
    assert_eq!(synced.counts, counts, "the ledger's counts are the apply's");
    assert_eq!(counts.collapsed, 1);
    assert_eq!(synced.digest, Digest::of(&store.day_rows(d).await.unwrap()));
    assert!(entry.failure.is_none());

    let listing = WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(at(20))
        .replace_guard(ReplaceGuard::off());
    let counts = upsert_stamped(
        store,
        d,
        vec![records[0].clone()],
        listing,
        stamp(30, "run-2"),
    )
    .await
    .unwrap();
    let synced = ledger_of(store, d).await.unwrap().synced.unwrap();
    assert_eq!((synced.mode, synced.as_of), (Mode::Replace, Some(at(20))));
    assert_eq!((synced.counts, synced.at), (counts, at(30)));
    assert_eq!(
        ledger_of(store, d).await.unwrap().listing_watermark,
        Some(at(20))
    );
}

/// A batch that fails part-way leaves neither its rows nor its ledger row.
pub async fn ledger_row_commits_with_the_rows(store: &dyn Store) {
    let d = day(501);
    let refused = Record::new_unchecked(
        format!("ledger-atomic/z{}", "z".repeat(crate::MAX_KEY_BYTES)),
        d,
        "v".to_owned(),
        at(1),
    );
    let records = vec![rec("ledger-atomic/a", d, "v", at(1)), refused];
    let header = Header {
        day: d,
        mode: Mode::Merge,
        as_of: at(2),
        guard: ReplaceGuard::off(),
        stamp: stamp(2, "bad"),
    };
    assert!(
        store
            .apply(DayWrite::whole(header, records, 0))
            .await
            .is_err(),
        "the store must refuse the bad record"
    );
    assert!(rows_under(store, "ledger-atomic/").await.is_empty());
    assert_eq!(
        ledger_of(store, d).await,
        None,
        "no ledger row without the day's rows"
    );
}

/// Missing, synced with no record, and failed are three different states.
pub async fn missing_empty_and_failed_days_differ(store: &dyn Store) {
    let (missing, empty, failed) = (day(510), day(511), day(512));
    upsert_stamped(
        store,
        empty,
        Vec::new(),
        WriteOptions::default(),
        stamp(5, "r"),
    )
    .await
    .unwrap();
    let failure = DayFailure::new(
        at(6),
        Some(RunId::from("r".to_owned())),
        3,
        "upstream returned 503",
    );
    store.record_failure(failed, &failure).await.unwrap();
    let ledger = store.ledger(missing..=failed).await.unwrap();
    let states: Vec<_> = ledger.iter().map(|e| (e.day, e.state())).collect();
    assert_eq!(
        states,
        [(empty, DayState::Synced), (failed, DayState::Failed)]
    );
    assert_eq!(
        ledger[0].synced.as_ref().unwrap().counts,
        counts(0, 0, 0, 0, 0)
    );
    assert_eq!(ledger[1].failure.as_ref(), Some(&failure));
    assert!(ledger[1].synced.is_none());
}

/// A failure after a success shows the day failed, with its attempts and
/// error, and keeps the success; a later success clears the failure.
pub async fn failure_then_success_clears_it(store: &dyn Store) {
    let d = day(520);
    let records = vec![rec("ledger-fail/a", d, "v", at(1))];
    upsert_stamped(
        store,
        d,
        records.clone(),
        WriteOptions::default(),
        stamp(5, "first"),
    )
    .await
    .unwrap();
    let long = "x".repeat(10_000);
    let failure = DayFailure::new(at(6), Some(RunId::from("second".to_owned())), 4, &long);
    store.record_failure(d, &failure).await.unwrap();
    let failed = ledger_of(store, d).await.unwrap();
    assert_eq!(failed.state(), DayState::Failed);
    assert_eq!(failed.failure.as_ref(), Some(&failure));
    assert_eq!(
        failed.synced.as_ref().unwrap().at,
        at(5),
        "the last success is kept"
    );
    upsert_stamped(
        store,
        d,
        records,
        WriteOptions::default(),
        stamp(7, "third"),
    )
    .await
    .unwrap();
    let healed = ledger_of(store, d).await.unwrap();
    assert_eq!(healed.state(), DayState::Synced);
    assert!(healed.failure.is_none());
    assert_eq!(healed.synced.unwrap().at, at(7));
}

/// Concurrent runs of one day leave one consistent row: the digest, run
/// and counts of one of the applies together.
pub async fn concurrent_runs_of_a_day_leave_one_consistent_row(store: &dyn Store) {
    let d = day(530);
    let batches: Vec<Vec<Record>> = (0..6)
        .map(|run| {
            (0..20)
                .map(|i| rec(&format!("ledger-conc/{i:02}"), d, &format!("r{run}"), at(i)))
                .collect()
        })
        .collect();
    let results = join_all(batches.iter().enumerate().map(|(run, records)| {
        upsert_stamped(
            store,
            d,
            records.clone(),
            WriteOptions::default(),
            stamp(100 + run as i64, &format!("run-{run}")),
        )
    }))
    .await;
    let counts: Vec<_> = results
        .into_iter()
        .map(|r| r.expect("a concurrent run failed"))
        .collect();
    let synced = ledger_of(store, d).await.unwrap().synced.unwrap();
    let run: usize = synced.run_id.as_ref().unwrap().as_str()[4..]
        .parse()
        .unwrap();
    assert_eq!(synced.at, at(100 + run as i64));
    assert_eq!(synced.digest, Digest::of(&batches[run]));
    assert_eq!(
        synced.counts, counts[run],
        "the row's counts belong to its own run"
    );
}

/// With `skip_unchanged`, a merge batch with the digest of its day's last
/// apply is skipped: nothing written, not even the ledger row; a batch
/// that differs by one byte, or a replace, is applied.
pub async fn unchanged_batches_are_skipped_by_digest(store: &dyn Store) {
    let d = day(540);
    let k = |s: &str| format!("ledger-skip/{s}");
    let records = vec![
        rec(&k("a"), d, "value", at(1)),
        rec(&k("b"), d, "value", at(1)),
    ];
    let skip = WriteOptions::default().skip_unchanged(true);
    let first = upsert_stamped(store, d, records.clone(), skip, stamp(5, "one"))
        .await
        .unwrap();
    assert_eq!(first.inserted, 2);
    let before = (
        ledger_of(store, d).await,
        versions_under(store, &k("")).await,
    );
    let again = upsert_stamped(store, d, records.clone(), skip, stamp(6, "two"))
        .await
        .unwrap();
    assert_eq!((again.skipped, again.written(), again.unchanged), (2, 0, 0));
    assert_eq!(
        (
            ledger_of(store, d).await,
            versions_under(store, &k("")).await
        ),
        before,
        "a skipped day writes nothing, its ledger row included"
    );
    // One byte differs: applied (and only that record is written).
    let mut changed = records.clone();
    changed[1] = rec(&k("b"), d, "valuf", at(1));
    let applied = upsert_stamped(store, d, changed.clone(), skip, stamp(7, "three"))
        .await
        .unwrap();
    assert_eq!(
        (applied.skipped, applied.unchanged, applied.updated),
        (0, 1, 1)
    );
    // A replace is never skipped, even with the digest of the last apply.
    let listing = skip
        .mode(Mode::Replace)
        .as_of(at(8))
        .replace_guard(ReplaceGuard::off());
    let replaced = upsert_stamped(store, d, changed, listing, stamp(8, "four"))
        .await
        .unwrap();
    assert_eq!((replaced.skipped, replaced.unchanged), (0, 2));
}

/// A job records a day that fails for good in the ledger, with its run,
/// attempts and error; a dry run writes no ledger row at all.
pub async fn job_records_failures_and_dry_runs_write_nothing(store: &dyn Store) {
    let (good, bad) = (day(550), day(551));
    let fetch = |d| {
        let result = if d == bad {
            Err(std::io::Error::other("schema changed upstream"))
        } else {
            Ok(vec![rec(&format!("ledger-job/{d}"), d, "v", at(1))])
        };
        std::future::ready(result)
    };
    let clock = FixedClock(at(60));
    let dry = quick_job().clock(clock).dry_run(true);
    dry.backfill(store, &fetch, good..=bad).await.unwrap();
    assert!(
        store.ledger(good..=bad).await.unwrap().is_empty(),
        "a dry run wrote to the ledger"
    );
    let job = quick_job()
        .clock(clock)
        .run_id("orchestrator-run-7".to_owned());
    let Err(crate::Error::Backfill(e)) = job.backfill(store, &fetch, good..=bad).await else {
        panic!("the bad day must fail the run");
    };
    assert_eq!(
        e.report.run_id.as_ref().map(RunId::as_str),
        Some("orchestrator-run-7")
    );
    let ledger = store.ledger(good..=bad).await.unwrap();
    assert_eq!(ledger.len(), 2);
    let synced = ledger[0].synced.as_ref().unwrap();
    assert_eq!(
        (synced.at, synced.run_id.as_ref().unwrap().as_str()),
        (at(60), "orchestrator-run-7")
    );
    let failure = ledger[1].failure.as_ref().expect("the failure is recorded");
    assert_eq!((failure.at, failure.attempts), (at(60), 1));
    assert!(
        failure.error.contains("schema changed upstream"),
        "{}",
        failure.error
    );
}

/// A purge invalidates the digest of every day whose tombstones it
/// removed, in the same transaction: the next `skip_unchanged` run of such
/// a day is applied and puts its tombstone back, as a plain re-run does,
/// so a stale re-delivery of the key stays stale. A day the purge did not
/// touch is still skipped.
pub async fn purge_invalidates_the_digests_of_the_days_it_touched(store: &dyn Store) {
    let (touched, untouched) = (day(560), day(561));
    let k = |s: &str| format!("ledger-purge/{s}");
    let day_of = |d| {
        vec![
            rec(&k(&format!("{d}/live")), d, "v", at(1)),
            tomb(&k(&format!("{d}/gone")), d, at(2)),
        ]
    };
    let skip = WriteOptions::default().skip_unchanged(true);
    // The untouched day's tombstone is newer than the purge's cut-off.
    let mut later = day_of(untouched);
    later[1] = tomb(&k(&format!("{untouched}/gone")), untouched, at(20));
    for (d, records) in [(touched, day_of(touched)), (untouched, later.clone())] {
        let first = upsert_stamped(store, d, records, skip, stamp(5, "first"))
            .await
            .unwrap();
        assert_eq!((first.inserted, first.deleted), (1, 1));
    }
    assert_eq!(store.purge_tombstones(at(10)).await.unwrap(), 1);
    let purged = ledger_of(store, touched).await.unwrap().synced.unwrap();
    assert_eq!(purged.digest, Digest::PURGED);

    let again = upsert_stamped(store, touched, day_of(touched), skip, stamp(6, "again"))
        .await
        .unwrap();
    assert_eq!(
        (again.skipped, again.deleted, again.unchanged),
        (0, 1, 1),
        "the purged day is applied again, its tombstone restored"
    );
    let stale = rec(&k(&format!("{touched}/gone")), touched, "stale", at(1));
    let late = upsert_stamped(
        store,
        touched,
        vec![stale],
        WriteOptions::default(),
        stamp(7, "late"),
    )
    .await
    .unwrap();
    assert_eq!(late.stale, 1, "a stale re-delivery stays stale");
    assert!(store
        .get(&k(&format!("{touched}/gone")))
        .await
        .unwrap()
        .is_none());

    let other = upsert_stamped(store, untouched, later, skip, stamp(8, "other"))
        .await
        .unwrap();
    assert_eq!(
        other.skipped, 2,
        "a day the purge did not touch is still skipped"
    );
}

/// A day fetched with lenient event dates whose batch holds a tombstone of
/// another day: a purge that removes that tombstone (stored under the
/// other day) invalidates this day's digest too, so its next
/// `skip_unchanged` run is applied and puts the tombstone back, as a plain
/// re-run does; a stale re-delivery of the key stays stale.
pub async fn purge_invalidates_a_day_that_held_another_days_tombstone(store: &dyn Store) {
    let (fetched, stored_under) = (day(570), day(569));
    let k = |s: &str| format!("ledger-purge-lenient/{s}");
    let batch = || {
        vec![
            rec(&k("live"), fetched, "v", at(1)),
            tomb(&k("gone"), stored_under, at(2)),
        ]
    };
    let lenient = WriteOptions::default()
        .skip_unchanged(true)
        .event_dates(crate::EventDates::Lenient);
    let first = upsert_stamped(store, fetched, batch(), lenient, stamp(5, "first"))
        .await
        .unwrap();
    assert_eq!((first.inserted, first.deleted), (1, 1));
    let unchanged = upsert_stamped(store, fetched, batch(), lenient, stamp(6, "unchanged"))
        .await
        .unwrap();
    assert_eq!(unchanged.skipped, 2, "an unchanged lenient day is skipped");

    assert_eq!(store.purge_tombstones(at(10)).await.unwrap(), 1);
    let synced = ledger_of(store, fetched).await.unwrap().synced.unwrap();
    assert_eq!(
        synced.digest,
        Digest::PURGED,
        "the day that covered the tombstone"
    );

    let again = upsert_stamped(store, fetched, batch(), lenient, stamp(7, "again"))
        .await
        .unwrap();
    assert_eq!(
        (again.skipped, again.deleted, again.unchanged),
        (0, 1, 1),
        "applied again, its tombstone restored"
    );
    let stale = rec(&k("gone"), stored_under, "stale", at(1));
    let late = upsert_stamped(
        store,
        stored_under,
        vec![stale],
        WriteOptions::default(),
        stamp(8, "late"),
    )
    .await
    .unwrap();
    assert_eq!(late.stale, 1, "a stale re-delivery stays stale");
    assert!(store.get(&k("gone")).await.unwrap().is_none());
}

/// A day's acceptance ([`Store::accept`]) is kept through its re-runs and
/// failures, can be given ahead to a day that never ran, and taken back,
/// touching nothing else of the ledger.
pub async fn acceptance_outlives_reruns_and_failures(store: &dyn Store) {
    let (d, other) = (day(580), day(581));
    let k = |s: &str| format!("accept/{s}");
    let accepted = Some(at(50));
    // Ahead of any run.
    store.accept(d, accepted).await.unwrap();
    let entry = ledger_of(store, d)
        .await
        .expect("an accepted day has a row");
    assert_eq!(
        (entry.state(), entry.accepted),
        (DayState::Missing, accepted)
    );
    assert!(ledger_of(store, other).await.is_none(), "only its day");

    let records = vec![rec(&k("a"), d, "1", at(1))];
    upsert_stamped(
        store,
        d,
        records,
        WriteOptions::default(),
        stamp(60, "run-1"),
    )
    .await
    .unwrap();
    let entry = ledger_of(store, d).await.unwrap();
    assert_eq!(
        (entry.state(), entry.accepted),
        (DayState::Synced, accepted)
    );

    let failure = DayFailure::new(at(70), Some(RunId::from("run-2")), 1, "503");
    store.record_failure(d, &failure).await.unwrap();
    let entry = ledger_of(store, d).await.unwrap();
    assert_eq!(
        (entry.state(), entry.accepted),
        (DayState::Failed, accepted)
    );

    let records = vec![rec(&k("a"), d, "2", at(2))];
    upsert_stamped(
        store,
        d,
        records,
        WriteOptions::default(),
        stamp(80, "run-3"),
    )
    .await
    .unwrap();
    let entry = ledger_of(store, d).await.unwrap();
    assert_eq!(
        (entry.state(), entry.accepted),
        (DayState::Synced, accepted)
    );
    let synced = entry.synced.clone().unwrap();

    // Accepted again later: the later instant.
    store.accept(d, Some(at(90))).await.unwrap();
    assert_eq!(ledger_of(store, d).await.unwrap().accepted, Some(at(90)));
    // Taken back: the rest of the row as it was.
    store.accept(d, None).await.unwrap();
    let entry = ledger_of(store, d).await.unwrap();
    assert_eq!(entry.accepted, None);
    assert_eq!(entry.synced, Some(synced));
    assert_eq!(store.day_rows(d).await.unwrap().len(), 1);

    // A day accepted ahead and taken back reads as missing.
    store.accept(other, accepted).await.unwrap();
    store.accept(other, None).await.unwrap();
    let back = ledger_of(store, other).await;
    assert!(
        back.as_ref()
            .is_none_or(|e| e.state() == DayState::Missing && e.accepted.is_none()),
        "{back:?}"
    );
}

/// How long a day's apply took ([`SyncedDay::timing`](crate::SyncedDay)),
/// where the store keeps it: the last apply's, never more than the apply
/// took, its fetch as the job timed it, kept through a failure, replaced by
/// the next apply. A store that keeps no timing reads `None` throughout.
pub async fn timing_is_the_last_applys(store: &dyn Store) {
    use std::time::{Duration, Instant};
    let d = day(590);
    let k = |s: &str| format!("timing/{s}");
    let options = WriteOptions::default();
    // A first apply whose fetch began five seconds ago.
    let before = Instant::now();
    let records = vec![rec(&k("a"), d, "1", at(1))];
    let write = crate::write::whole_day(d, records, options, stamp(60, "run-1"))
        .unwrap()
        .began(before - Duration::from_secs(5));
    crate::write::write_day(store, write, options)
        .await
        .unwrap();
    let took = before.elapsed() + Duration::from_secs(5);
    let first = ledger_of(store, d).await.unwrap().synced.unwrap().timing;
    let Some(first) = first else {
        // Not kept: never, whatever happens next.
        let records = vec![rec(&k("a"), d, "2", at(2))];
        upsert_stamped(store, d, records, options, stamp(61, "run-2"))
            .await
            .unwrap();
        assert_eq!(
            ledger_of(store, d).await.unwrap().synced.unwrap().timing,
            None
        );
        return;
    };
    assert!(first.fetch >= Duration::from_secs(5), "{first:?}");
    // Kept in whole milliseconds: at most one more than what passed.
    assert!(
        first.total() <= took + Duration::from_millis(2),
        "{first:?} of {took:?}"
    );

    let failure = DayFailure::new(at(70), Some(RunId::from("run-2")), 1, "503");
    store.record_failure(d, &failure).await.unwrap();
    let failed = ledger_of(store, d).await.unwrap();
    assert_eq!(
        failed.synced.unwrap().timing,
        Some(first),
        "kept through a failure"
    );

    let before = Instant::now();
    let records = vec![rec(&k("a"), d, "3", at(3))];
    upsert_stamped(store, d, records, options, stamp(80, "run-3"))
        .await
        .unwrap();
    let took = before.elapsed();
    let last = ledger_of(store, d).await.unwrap().synced.unwrap().timing;
    let last = last.expect("a store that kept one timing keeps the next");
    assert!(
        last.total() <= took + Duration::from_millis(2),
        "the last apply's: {last:?} of {took:?}"
    );
}
