//! Deletes: tombstones, listings true as of an instant, the listing
//! watermark, the replace guard and purging (SPEC §2–§4). Every case counts
//! by what happened to each key (SPEC §3.3) and compares tombstones too.

use chrono::Duration;

use super::helpers::*;
use crate::error::Error;
use crate::MemoryStore;
use crate::{Counts, EventDates, Mode, Refusal, ReplaceGuard, Store, WriteOptions};

/// A tombstone beats a live version with the same `updated_at`, whichever
/// arrives first; reads no longer see the key, the tombstone is kept.
pub async fn tombstone_beats_live_version_of_the_same_instant(store: &dyn Store) {
    let d = day(400);
    let live = rec("del-tie/a", d, "v", at(5));
    apply(store, d, vec![live.clone()]).await;
    let c = apply(store, d, vec![tomb("del-tie/a", d, at(5))]).await;
    assert_eq!(c, counts(0, 0, 0, 0, 1), "live before, deleted after");
    assert_eq!(get(store, "del-tie/a").await, None);

    // The other order: the tombstone of an absent key is stored, and the
    // live version of the same instant is stale against it.
    let c = apply(store, d, vec![tomb("del-tie/b", d, at(5))]).await;
    assert_eq!(c, counts(0, 0, 0, 0, 1), "absent before, deleted after");
    let c = apply(store, d, vec![rec("del-tie/b", d, "v", at(5))]).await;
    assert_eq!(c, counts(0, 0, 0, 1, 0));
    assert_eq!(
        versions_under(store, "del-tie/").await,
        vec![live.to_tombstone(), tomb("del-tie/b", d, at(5))]
    );
    assert!(store.day_rows(d).await.unwrap().is_empty());
    let c = apply(store, d, vec![tomb("del-tie/b", d, at(5))]).await;
    assert_eq!(
        c,
        counts(0, 0, 1, 0, 0),
        "a re-delivered tombstone is unchanged"
    );
}

/// A live version later than the tombstone brings the key back, counted
/// inserted; an older live version after a tombstone stays out, counted
/// stale; a newer tombstone over an older one is deleted again.
pub async fn tombstone_then_later_and_earlier_versions(store: &dyn Store) {
    let d = day(401);
    apply(store, d, vec![rec("del-back/k", d, "v1", at(5))]).await;
    apply(store, d, vec![tomb("del-back/k", d, at(7))]).await;
    let c = apply(store, d, vec![rec("del-back/k", d, "v0", at(6))]).await;
    assert_eq!(c, counts(0, 0, 0, 1, 0), "older than the tombstone: stale");
    assert_eq!(get(store, "del-back/k").await, None);
    let back = rec("del-back/k", d, "v2", at(8));
    let c = apply(store, d, vec![back.clone()]).await;
    assert_eq!(
        c,
        counts(1, 0, 0, 0, 0),
        "tombstone before, live after: inserted"
    );
    assert_eq!(get(store, "del-back/k").await, Some(back));
    let c = apply(store, d, vec![tomb("del-back/k", d, at(9))]).await;
    assert_eq!(c.deleted, 1);
    let c = apply(store, d, vec![tomb("del-back/k", d, at(10))]).await;
    assert_eq!(
        c,
        counts(0, 0, 0, 0, 1),
        "an older tombstone before, a newer one after: deleted"
    );
    assert_eq!(
        versions_under(store, "del-back/").await,
        vec![tomb("del-back/k", d, at(10))]
    );
}

/// Every kind of outcome in one batch, each key in exactly one count.
pub async fn counts_follow_what_happened_to_each_key(store: &dyn Store) {
    let d = day(402);
    let k = |s: &str| format!("del-counts/{s}");
    apply(
        store,
        d,
        vec![
            rec(&k("update"), d, "v1", at(1)),
            rec(&k("delete"), d, "v1", at(1)),
            rec(&k("same"), d, "v1", at(1)),
            rec(&k("stale"), d, "v1", at(5)),
        ],
    )
    .await;
    apply(
        store,
        d,
        vec![
            tomb(&k("revive"), d, at(1)),
            tomb(&k("older-tomb"), d, at(1)),
        ],
    )
    .await;
    let c = apply(
        store,
        d,
        vec![
            rec(&k("new"), d, "v", at(2)),     // absent → live
            rec(&k("update"), d, "v2", at(2)), // live → live
            tomb(&k("delete"), d, at(2)),      // live → tombstone
            rec(&k("revive"), d, "v", at(2)),  // tombstone → live
            tomb(&k("ghost"), d, at(2)),       // absent → tombstone
            tomb(&k("older-tomb"), d, at(2)),  // older tombstone → tombstone
            rec(&k("same"), d, "v1", at(1)),   // identical
            rec(&k("stale"), d, "v0", at(4)),  // older
        ],
    )
    .await;
    assert_eq!(c, counts(2, 1, 1, 1, 3));
    let live: Vec<_> = rows_under(store, "del-counts/")
        .await
        .into_iter()
        .map(|r| r.key().to_owned())
        .collect();
    assert_eq!(live, ["new", "revive", "same", "stale", "update"].map(k));
}

/// A listing lacking live rows of its day turns exactly those that are not
/// newer than its `as_of` into their own tombstones: not the rows it lists,
/// not other days, not rows written after it was taken.
pub async fn listing_deletes_only_what_it_lacks_as_of_its_instant(store: &dyn Store) {
    let (d, other) = (day(410), day(411));
    let k = |s: &str| format!("del-list/{s}");
    apply(
        store,
        d,
        vec![
            rec(&k("kept"), d, "v", at(1)),
            rec(&k("gone"), d, "v", at(2)),
            rec(&k("newer"), d, "v", at(30)),
        ],
    )
    .await;
    apply(store, other, vec![rec(&k("other-day"), other, "v", at(1))]).await;
    let c = apply_with(
        store,
        d,
        vec![rec(&k("kept"), d, "v", at(1))],
        listing(at(10)),
    )
    .await;
    assert_eq!(
        c,
        Counts {
            unlisted: 1,
            ..counts(0, 0, 1, 0, 1)
        }
    );
    assert_eq!(
        versions_under(store, "del-list/").await,
        vec![
            rec(&k("gone"), d, "v", at(2)).to_tombstone(),
            rec(&k("kept"), d, "v", at(1)),
            rec(&k("newer"), d, "v", at(30)),
            rec(&k("other-day"), other, "v", at(1)),
        ],
        "the listing as of 10 predates `newer` (30) and says nothing of other days"
    );
    // The identical listing again writes nothing.
    let c = apply_with(
        store,
        d,
        vec![rec(&k("kept"), d, "v", at(1))],
        listing(at(10)),
    )
    .await;
    assert_eq!(c, counts(0, 0, 1, 0, 0));
}

/// Two listings of one upstream commute: an older listing applied after a
/// newer one deletes nothing the newer one kept, and either order ends in
/// the same state, tombstones included.
pub async fn listings_commute(store: &dyn Store) {
    // Upstream: a and b exist from 1; c is created at 15; b is deleted at 12.
    // The listing as of 10 says {a, b}; the one as of 20 says {a, c}.
    for (n, newer_first) in [(0, true), (1, false)] {
        let d = day(420 + n);
        let k = |s: &str| format!("del-commute/{n}/{s}");
        let old = (
            vec![rec(&k("a"), d, "v", at(1)), rec(&k("b"), d, "v", at(1))],
            at(10),
        );
        let new = (
            vec![rec(&k("a"), d, "v", at(1)), rec(&k("c"), d, "v", at(15))],
            at(20),
        );
        let order = if newer_first {
            [&new, &old]
        } else {
            [&old, &new]
        };
        for (records, as_of) in order {
            apply_with(store, d, records.clone(), listing(*as_of)).await;
        }
        assert_eq!(
            versions_under(store, &k("")).await,
            vec![
                rec(&k("a"), d, "v", at(1)),
                rec(&k("b"), d, "v", at(1)).to_tombstone(),
                rec(&k("c"), d, "v", at(15)),
            ],
            "newer listing first: {newer_first}"
        );
    }
}

/// The watermark rule: a version delivered after a listing that omitted it,
/// and not newer than that listing, arrives deleted; a newer one is live.
pub async fn version_delivered_after_a_listing_that_omitted_it_arrives_deleted(store: &dyn Store) {
    let d = day(430);
    let k = |s: &str| format!("del-late/{s}");
    apply_with(store, d, vec![rec(&k("a"), d, "v", at(1))], listing(at(20))).await;
    // b existed at 15 but not in the listing as of 20: deleted by then.
    let c = apply(store, d, vec![rec(&k("b"), d, "v", at(15))]).await;
    assert_eq!(c, counts(0, 0, 0, 0, 1), "written as its own tombstone");
    assert_eq!(get(store, &k("b")).await, None);
    assert_eq!(
        versions_under(store, &k("b")).await,
        vec![rec(&k("b"), d, "v", at(15)).to_tombstone()]
    );
    // Exactly at the watermark: also deleted. After it: live.
    let c = apply(store, d, vec![rec(&k("c"), d, "v", at(20))]).await;
    assert_eq!(c.deleted, 1);
    let c = apply(store, d, vec![rec(&k("d"), d, "v", at(21))]).await;
    assert_eq!(c.inserted, 1);
    // Re-delivering the omitted version changes nothing.
    let c = apply(store, d, vec![rec(&k("b"), d, "v", at(15))]).await;
    assert_eq!(c, counts(0, 0, 0, 1, 0));
}

/// The watermark that applies is that of each record's own `event_date`,
/// also in a lenient batch for another day.
pub async fn watermark_of_each_records_own_day_applies(store: &dyn Store) {
    let (listed, other) = (day(440), day(441));
    let k = |s: &str| format!("del-own-day/{s}");
    apply_with(store, listed, Vec::new(), listing(at(20))).await;
    let lenient = WriteOptions::default().event_dates(EventDates::Lenient);
    let c = apply_with(
        store,
        other,
        vec![
            rec(&k("x"), listed, "v", at(10)),
            rec(&k("y"), other, "v", at(10)),
        ],
        lenient,
    )
    .await;
    assert_eq!(
        c,
        counts(1, 0, 0, 0, 1),
        "x (day 440, listed at 20) deleted; y live"
    );
    assert_eq!(
        rows_under(store, &k("")).await,
        vec![rec(&k("y"), other, "v", at(10))]
    );
}

/// A key that moved to another day is never deleted by its old day's
/// listing, older or newer than the move.
pub async fn moved_key_is_not_deleted_by_its_old_days_listing(store: &dyn Store) {
    let (old_day, new_day) = (day(450), day(451));
    let key = "del-moved/k";
    let lenient = WriteOptions::default().event_dates(EventDates::Lenient);
    apply(store, old_day, vec![rec(key, old_day, "v1", at(1))]).await;
    let moved = rec(key, new_day, "v2", at(5));
    apply_with(store, old_day, vec![moved.clone()], lenient).await;
    for as_of in [at(3), at(10)] {
        let c = apply_with(store, old_day, Vec::new(), listing(as_of)).await;
        assert_eq!(c.deleted, 0, "as of {as_of}");
    }
    assert_eq!(get(store, key).await, Some(moved.clone()));
    // The old version re-delivered is stale, the old day's watermark
    // notwithstanding.
    let c = apply(store, old_day, vec![rec(key, old_day, "v1", at(1))]).await;
    assert_eq!(c, counts(0, 0, 0, 1, 0));
    assert_eq!(versions_under(store, key).await, vec![moved]);
}

/// The guard: an empty listing for a day with live rows is refused, typed
/// and not retryable, and writes nothing — not a tombstone, not the
/// watermark; explicitly allowed, it applies.
pub async fn empty_listing_is_refused_unless_allowed(store: &dyn Store) {
    let d = day(460);
    let k = |s: &str| format!("del-guard-empty/{s}");
    let seed = vec![rec(&k("a"), d, "v", at(1)), rec(&k("b"), d, "v", at(1))];
    apply(store, d, seed.clone()).await;
    let guarded = WriteOptions::default().mode(Mode::Replace).as_of(at(10));
    match upsert_result(store, d, Vec::new(), guarded).await {
        Err(e @ Error::ReplaceRefused { .. }) => {
            assert!(!e.is_retryable());
            let Error::ReplaceRefused {
                day: refused_day,
                would_delete,
                live,
                reason,
            } = e
            else {
                unreachable!()
            };
            assert_eq!((refused_day, would_delete, live), (d, 2, 2));
            assert_eq!(reason, Refusal::EmptyListing);
        }
        other => panic!("expected ReplaceRefused, got {other:?}"),
    }
    assert_eq!(versions_under(store, &k("")).await, seed);
    // The refused listing left no watermark: a version at 5 is still live.
    let c = apply(store, d, vec![rec(&k("c"), d, "v", at(5))]).await;
    assert_eq!(c.inserted, 1);
    let allowed = guarded.replace_guard(ReplaceGuard::default().allow_empty(true));
    let c = apply_with(store, d, Vec::new(), allowed).await;
    assert_eq!((c.deleted, c.unlisted), (3, 3));
    assert!(store.day_rows(d).await.unwrap().is_empty());
}

/// The guard's fraction: a replace that would delete more than the allowed
/// share of the day's live rows is refused and writes nothing; one within
/// it applies.
pub async fn too_large_a_replace_is_refused(store: &dyn Store) {
    let d = day(461);
    let keys: Vec<String> = (0..10).map(|i| format!("del-guard-frac/{i}")).collect();
    let all: Vec<_> = keys.iter().map(|key| rec(key, d, "v", at(1))).collect();
    apply(store, d, all.clone()).await;
    let careful = WriteOptions::default()
        .mode(Mode::Replace)
        .as_of(at(10))
        .replace_guard(ReplaceGuard::default().max_delete_fraction(0.2));
    match upsert_result(store, d, all[..7].to_vec(), careful).await {
        Err(Error::ReplaceRefused {
            would_delete: 3,
            live: 10,
            reason: Refusal::TooLarge { .. },
            ..
        }) => {}
        other => panic!("expected ReplaceRefused for 3 of 10 rows, got {other:?}"),
    }
    assert_eq!(versions_under(store, "del-guard-frac/").await, all);
    let c = apply_with(store, d, all[..8].to_vec(), careful).await;
    assert_eq!((c.deleted, c.unchanged), (2, 8));
}

/// Purging removes tombstones older than the horizon, and no other row;
/// it reopens the documented door: a stale re-delivery older than a purged
/// tombstone brings its key back.
pub async fn purge_removes_old_tombstones_and_reopens_the_door(store: &dyn Store) {
    let d = day(470);
    let k = |s: &str| format!("del-purge/{s}");
    // Far in the past, so that no other case's tombstone is purged.
    let long_ago = |secs| at(secs) - Duration::days(365 * 200);
    apply(
        store,
        d,
        vec![
            rec(&k("a"), d, "v", long_ago(5)),
            rec(&k("live"), d, "v", long_ago(1)),
        ],
    )
    .await;
    apply(
        store,
        d,
        vec![tomb(&k("a"), d, long_ago(7)), tomb(&k("b"), d, long_ago(9))],
    )
    .await;
    let purged = store.purge_tombstones(long_ago(9)).await.unwrap();
    assert_eq!(purged, 1, "only the tombstone before the horizon (a at 7)");
    assert_eq!(
        versions_under(store, &k("")).await,
        vec![
            tomb(&k("b"), d, long_ago(9)),
            rec(&k("live"), d, "v", long_ago(1))
        ]
    );
    let c = apply(store, d, vec![rec(&k("a"), d, "v", long_ago(5))]).await;
    assert_eq!(
        c,
        counts(1, 0, 0, 0, 0),
        "the door: the stale version is back"
    );
}

/// Reads see live rows only; `rows_with_tombstones` sees every version, in
/// key order.
pub async fn reads_see_live_rows_only(store: &dyn Store) {
    let d = day(480);
    let k = |s: &str| format!("del-reads/{s}");
    apply(
        store,
        d,
        vec![rec(&k("a"), d, "v", at(1)), rec(&k("b"), d, "v", at(1))],
    )
    .await;
    apply(
        store,
        d,
        vec![tomb(&k("a"), d, at(2)), tomb(&k("c"), d, at(2))],
    )
    .await;
    assert_eq!(get(store, &k("a")).await, None);
    assert_eq!(get(store, &k("c")).await, None);
    assert_eq!(
        rows_under(store, &k("")).await,
        vec![rec(&k("b"), d, "v", at(1))]
    );
    assert_eq!(
        store.day_rows(d).await.unwrap(),
        vec![rec(&k("b"), d, "v", at(1))]
    );
    assert_eq!(
        versions_under(store, &k("")).await,
        vec![
            tomb(&k("a"), d, at(2)),
            rec(&k("b"), d, "v", at(1)),
            tomb(&k("c"), d, at(2))
        ]
    );
}

/// The store ends where `MemoryStore` ends for a history of merges,
/// tombstones and listings of several days.
pub async fn deletes_match_the_reference_store(store: &dyn Store) {
    let (d1, d2) = (day(490), day(491));
    let k = |s: &str| format!("del-ref/{s}");
    let lenient = WriteOptions::default().event_dates(EventDates::Lenient);
    let history = vec![
        (
            d1,
            vec![rec(&k("a"), d1, "1", at(1)), rec(&k("b"), d1, "1", at(1))],
            lenient,
        ),
        (
            d2,
            vec![rec(&k("c"), d2, "1", at(2)), rec(&k("b"), d2, "2", at(3))],
            lenient,
        ),
        (d1, vec![rec(&k("a"), d1, "1", at(1))], listing(at(4))),
        (
            d1,
            vec![tomb(&k("a"), d1, at(5)), rec(&k("d"), d1, "1", at(3))],
            lenient,
        ),
        (d2, vec![rec(&k("b"), d2, "2", at(3))], listing(at(6))),
        (d2, vec![rec(&k("c"), d2, "3", at(7))], lenient),
    ];
    for (d, records, options) in &history {
        apply_with(store, *d, records.clone(), *options).await;
    }
    let reference = MemoryStore::new();
    for (d, records, options) in &history {
        apply_with(&reference, *d, records.clone(), *options).await;
    }
    assert_eq!(
        versions_under(store, &k("")).await,
        reference.rows_with_tombstones().await.unwrap()
    );
}
