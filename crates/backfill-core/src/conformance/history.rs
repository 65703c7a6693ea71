//! History ([`crate::history`]): every version of every key, valid from its
//! `updated_at`, the same whatever order the versions and listings arrive
//! in. Run by [`history_conformance_tests!`](crate::history_conformance_tests)
//! against a store that keeps history.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Duration, NaiveDate, Utc};
use futures_util::stream;

use super::helpers::*;
use super::property::{smallest_failure, upstream_batches, upstream_strategy, Delivery, Upstream};
use crate::history::{history_of, rows_as_of, HistoryRow, Version};
use crate::record::Record;
use crate::write::{upsert, upsert_stream, WriteOptions};
use crate::{MemoryStore, Store};

/// The history rows whose key starts with `prefix`.
async fn history_under(store: &dyn Store, prefix: &str) -> Vec<HistoryRow> {
    store
        .history()
        .await
        .expect("reading history")
        .into_iter()
        .filter(|row| row.record.key().starts_with(prefix))
        .collect()
}

/// `(value, deleted, valid_from, valid_to)` of each row, for assertions a
/// person can read.
fn spans(rows: &[HistoryRow]) -> Vec<(String, bool, i64, Option<i64>)> {
    let secs = |t: DateTime<Utc>| (t - at(0)).num_seconds();
    rows.iter()
        .map(|row| {
            (
                row.record.value().to_owned(),
                row.record.is_deleted(),
                secs(row.valid_from()),
                row.valid_to.map(secs),
            )
        })
        .collect()
}

fn span(value: &str, from: i64, to: Option<i64>) -> (String, bool, i64, Option<i64>) {
    (value.to_owned(), false, from, to)
}

fn gone(from: i64, to: Option<i64>) -> (String, bool, i64, Option<i64>) {
    (String::new(), true, from, to)
}

/// The history the reference store keeps given `deliveries` in this order.
async fn reference(deliveries: &[Delivery]) -> Vec<HistoryRow> {
    let memory = MemoryStore::with_history();
    for (d, records, options) in deliveries {
        apply_with(&memory, *d, records.clone(), *options).await;
    }
    memory.history().await.expect("the reference keeps history")
}

async fn deliver(store: &dyn Store, deliveries: &[Delivery]) {
    for (d, records, options) in deliveries {
        apply_with(store, *d, records.clone(), *options).await;
    }
}

/// History as [`crate::history`] defines it, computed from the set of
/// deliveries alone, without a store: every `(key, updated_at)`'s winning
/// version, closed at the earliest listing of its day at or after it that
/// did not hold it. Order cannot enter: nothing here is incremental.
pub(super) fn model_history(deliveries: &[Delivery]) -> Vec<HistoryRow> {
    let mut versions: BTreeMap<(String, DateTime<Utc>), Record> = BTreeMap::new();
    let mut listings: Vec<(NaiveDate, DateTime<Utc>, &[Record])> = Vec::new();
    for (d, records, options) in deliveries {
        // The batch as the write path collapses it: each key's winner.
        let mut winners: BTreeMap<&str, &Record> = BTreeMap::new();
        for record in records {
            let winner = winners.entry(record.key()).or_insert(record);
            if record.supersedes(winner) {
                *winner = record;
            }
        }
        for record in winners.into_values() {
            let slot = (record.key().to_owned(), record.updated_at());
            match versions.get(&slot) {
                Some(kept) if !record.supersedes(kept) => {}
                _ => {
                    versions.insert(slot, record.clone());
                }
            }
        }
        if let Some(as_of) = options
            .as_of
            .filter(|_| options.mode == crate::Mode::Replace)
        {
            listings.push((*d, as_of, records));
        }
    }
    let versions: Vec<Version> = versions
        .into_values()
        .map(|record| {
            let absent_from = listings
                .iter()
                .filter(|(d, as_of, held)| {
                    *d == record.event_date()
                        && *as_of >= record.updated_at()
                        && !held.iter().any(|h| {
                            h.key() == record.key() && h.updated_at() == record.updated_at()
                        })
                })
                .map(|(_, as_of, _)| *as_of)
                .min();
            Version {
                record,
                absent_from,
            }
        })
        .collect();
    history_of(&versions)
}

/// Versions delivered out of order are each slotted in their place: a
/// stale re-delivery, which the live table rightly skips, closes the
/// version before it and is closed by the one after. Re-delivering
/// everything changes nothing.
pub async fn history_keeps_every_version_in_its_place(store: &dyn Store) {
    let d = day(900);
    let k = "hist-place/k";
    apply(store, d, vec![rec(k, d, "b", at(10))]).await;
    apply(store, d, vec![rec(k, d, "d", at(20))]).await;
    let stale = apply(store, d, vec![rec(k, d, "a", at(5))]).await;
    assert_eq!(stale, counts(0, 0, 0, 1, 0), "the live table skips it");
    apply(store, d, vec![rec(k, d, "c", at(15))]).await;
    assert_eq!(get(store, k).await.unwrap().value(), "d");
    let expected = vec![
        span("a", 5, Some(10)),
        span("b", 10, Some(15)),
        span("c", 15, Some(20)),
        span("d", 20, None),
    ];
    assert_eq!(spans(&history_under(store, "hist-place/").await), expected);

    for (value, t) in [("a", 5), ("b", 10), ("c", 15), ("d", 20)] {
        let c = apply(store, d, vec![rec(k, d, value, at(t))]).await;
        assert_eq!(c.written(), 0);
    }
    assert_eq!(
        spans(&history_under(store, "hist-place/").await),
        expected,
        "re-delivered versions add nothing"
    );
}

/// The same versions and listings delivered forward, in reverse, shuffled
/// and twice over give byte-identical history, equal to the reference
/// store's and to the model computed from the set alone.
pub async fn history_is_the_same_in_any_order(store: &dyn Store) {
    // One group of days and keys per order; a listing touches its whole day.
    let deliveries = |group: i64| -> Vec<Delivery> {
        let p = format!("hist-order/{group}/");
        let (a, b) = (day(910 + 2 * group), day(911 + 2 * group));
        let k = |name: &str| format!("{p}{name}");
        vec![
            (
                a,
                vec![rec(&k("x"), a, "x1", at(10)), rec(&k("y"), a, "y1", at(10))],
                WriteOptions::default(),
            ),
            (
                a,
                vec![rec(&k("z"), a, "z1", at(12))],
                WriteOptions::default(),
            ),
            (
                a,
                vec![rec(&k("x"), a, "x2", at(20))],
                WriteOptions::default(),
            ),
            // y moves to b.
            (
                b,
                vec![rec(&k("y"), b, "y2", at(30))],
                WriteOptions::default(),
            ),
            // A listing of a at 25: x and y as they were then, z gone.
            (
                a,
                vec![rec(&k("x"), a, "x2", at(20)), rec(&k("y"), a, "y1", at(10))],
                listing(at(25)),
            ),
            // x deleted upstream (a CDC tombstone), then back.
            (a, vec![tomb(&k("x"), a, at(40))], WriteOptions::default()),
            (
                a,
                vec![rec(&k("x"), a, "x3", at(50))],
                WriteOptions::default(),
            ),
            // A listing of a at 45: nothing (x deleted, y moved, z gone).
            (a, vec![], listing(at(45))),
            (b, vec![rec(&k("y"), b, "y2", at(30))], listing(at(60))),
        ]
    };
    let orders: [fn(usize) -> Vec<usize>; 4] = [
        |n| (0..n).collect(),
        |n| (0..n).rev().collect(),
        |n| (0..n).map(|i| (i * 5 + 3) % n).collect(),
        |n| (0..n).chain((0..n).rev()).collect(),
    ];
    // Each group's history with its keys and days moved back to group 0's.
    let normalized = |rows: Vec<HistoryRow>, group: i64| -> Vec<HistoryRow> {
        rows.into_iter()
            .map(|row| {
                let key = row.record.key().replacen(&format!("/{group}/"), "/0/", 1);
                let d = row.record.event_date() - Duration::days(2 * group);
                let record = if row.record.is_deleted() {
                    tomb(&key, d, row.valid_from())
                } else {
                    rec(&key, d, row.record.value(), row.valid_from())
                };
                HistoryRow {
                    record,
                    valid_to: row.valid_to,
                }
            })
            .collect()
    };
    let model = model_history(&deliveries(0));
    assert_eq!(
        spans(&model)
            .into_iter()
            .map(|(v, d, from, to)| format!("{v}{}:{from}-{to:?}", if d { "†" } else { "" }))
            .collect::<Vec<_>>(),
        [
            // x: listed at 25, deleted at 40, back at 50, lacked at 45
            // (deleted then already).
            "x1:10-Some(20)",
            "x2:20-Some(40)",
            "†:40-Some(50)",
            "x3:50-None",
            // y: listed at 25 on a, moved to b at 30.
            "y1:10-Some(30)",
            "y2:30-None",
            // z: lacked by the listing at 25.
            "z1:12-Some(25)",
            "†:25-None",
        ],
        "the model"
    );
    for (group, order) in orders.iter().enumerate() {
        let group = group as i64;
        let all = deliveries(group);
        let ordered: Vec<Delivery> = order(all.len())
            .into_iter()
            .map(|i| all[i].clone())
            .collect();
        deliver(store, &ordered).await;
        let got = normalized(
            history_under(store, &format!("hist-order/{group}/")).await,
            group,
        );
        assert_eq!(got, model, "order {group} of the same deliveries");
        assert_eq!(
            normalized(reference(&ordered).await, group),
            model,
            "the reference store, order {group}"
        );
    }
}

/// A tombstone closes a key's interval and a later version reopens it; a
/// version delivered late between them is slotted in.
pub async fn history_tombstones_close_and_revivals_reopen(store: &dyn Store) {
    let d = day(920);
    let k = "hist-tomb/k";
    apply(store, d, vec![rec(k, d, "v1", at(10))]).await;
    apply(store, d, vec![tomb(k, d, at(20))]).await;
    apply(store, d, vec![rec(k, d, "v2", at(30))]).await;
    assert_eq!(
        spans(&history_under(store, "hist-tomb/").await),
        [
            span("v1", 10, Some(20)),
            gone(20, Some(30)),
            span("v2", 30, None)
        ]
    );
    apply(store, d, vec![rec(k, d, "v0", at(25))]).await;
    apply(store, d, vec![tomb(k, d, at(40))]).await;
    assert_eq!(
        spans(&history_under(store, "hist-tomb/").await),
        [
            span("v1", 10, Some(20)),
            gone(20, Some(25)),
            span("v0", 25, Some(30)),
            span("v2", 30, Some(40)),
            gone(40, None),
        ]
    );
    assert_eq!(get(store, k).await, None);
}

/// A listing's delete is dated at the listing's instant: the version it
/// lacked is closed there and a tombstone opens. A version delivered after
/// the listing, which the live table stores as a tombstone, is closed at
/// the same instant; an older listing delivered later closes both
/// earlier; a later version reopens the key.
pub async fn history_dates_a_listings_delete_at_its_instant(store: &dyn Store) {
    let d = day(930);
    let k = |name: &str| format!("hist-list/{name}");
    apply(
        store,
        d,
        vec![rec(&k("1"), d, "a", at(10)), rec(&k("2"), d, "b", at(10))],
    )
    .await;
    let c = apply_with(
        store,
        d,
        vec![rec(&k("1"), d, "a", at(10))],
        listing(at(100)),
    )
    .await;
    assert_eq!(c.deleted, 1);
    assert_eq!(
        spans(&history_under(store, &k("2")).await),
        [span("b", 10, Some(100)), gone(100, None)]
    );
    // The live table keeps the tombstone at the row's own instant.
    assert_eq!(
        versions_under(store, &k("2")).await,
        [tomb(&k("2"), d, at(10))]
    );

    // A late version the listing at 100 did not hold.
    let c = apply(store, d, vec![rec(&k("3"), d, "c", at(50))]).await;
    assert_eq!(c.deleted, 1, "the watermark stores it as a tombstone");
    assert_eq!(
        spans(&history_under(store, &k("3")).await),
        [span("c", 50, Some(100)), gone(100, None)]
    );

    // An older listing, delivered last, saw both gone at 60.
    apply_with(
        store,
        d,
        vec![rec(&k("1"), d, "a", at(10))],
        listing(at(60)),
    )
    .await;
    assert_eq!(
        spans(&history_under(store, &k("2")).await),
        [span("b", 10, Some(60)), gone(60, None)]
    );
    assert_eq!(
        spans(&history_under(store, &k("3")).await),
        [span("c", 50, Some(60)), gone(60, None)]
    );

    // Back after the listings; a listing never touches a version newer
    // than it, nor one it holds.
    apply(store, d, vec![rec(&k("2"), d, "b2", at(120))]).await;
    assert_eq!(
        spans(&history_under(store, &k("2")).await),
        [
            span("b", 10, Some(60)),
            gone(60, Some(120)),
            span("b2", 120, None)
        ]
    );
    assert_eq!(
        spans(&history_under(store, &k("1")).await),
        [span("a", 10, None)]
    );

    // Lacked by a listing of its own instant: valid for no time at all,
    // only the tombstone of that instant is history.
    apply(store, d, vec![rec(&k("4"), d, "d", at(200))]).await;
    apply_with(
        store,
        d,
        vec![rec(&k("1"), d, "a", at(10))],
        listing(at(200)),
    )
    .await;
    assert_eq!(
        spans(&history_under(store, &k("4")).await),
        [gone(200, None)]
    );
}

/// A key that moves to another day keeps one history: its old day's
/// later listing does not delete it, and its new day's listing that holds
/// it changes nothing.
pub async fn history_follows_a_key_between_days(store: &dyn Store) {
    let (a, b) = (day(940), day(941));
    let k = "hist-move/k";
    apply(store, a, vec![rec(k, a, "on a", at(10))]).await;
    apply(store, b, vec![rec(k, b, "on b", at(20))]).await;
    apply_with(store, a, vec![], listing(at(30))).await;
    apply_with(store, b, vec![rec(k, b, "on b", at(20))], listing(at(30))).await;
    let rows = history_under(store, "hist-move/").await;
    assert_eq!(
        spans(&rows),
        [span("on a", 10, Some(20)), span("on b", 20, None)]
    );
    assert_eq!(
        rows.iter()
            .map(|r| r.record.event_date())
            .collect::<Vec<_>>(),
        [a, b]
    );
}

/// Versions with the same `updated_at` are one instant of the key: only
/// the one the version order picks is history, whichever came first.
pub async fn history_resolves_ties_by_the_version_order(store: &dyn Store) {
    let (a, b) = (day(950), day(951));
    let k = |name: &str| format!("hist-tie/{name}");
    // Values: the greater wins, in either order.
    apply(store, a, vec![rec(&k("v"), a, "b", at(10))]).await;
    apply(store, a, vec![rec(&k("v"), a, "a", at(10))]).await;
    apply(store, a, vec![rec(&k("w"), a, "a", at(10))]).await;
    apply(store, a, vec![rec(&k("w"), a, "b", at(10))]).await;
    // A tombstone beats a live version of the same instant.
    apply(store, a, vec![rec(&k("x"), a, "a", at(10))]).await;
    apply(store, a, vec![tomb(&k("x"), a, at(10))]).await;
    // The same value: the later event date.
    apply(store, b, vec![rec(&k("y"), b, "a", at(10))]).await;
    apply(store, a, vec![rec(&k("y"), a, "a", at(10))]).await;
    let rows = history_under(store, "hist-tie/").await;
    assert_eq!(
        spans(&rows),
        [
            span("b", 10, None),
            span("b", 10, None),
            gone(10, None),
            span("a", 10, None)
        ]
    );
    assert_eq!(rows[3].record.event_date(), b);
}

/// `as_of` reads each key's version valid at an instant: nothing before
/// its first version, each version from its `valid_from` on, up to the
/// microsecond before its `valid_to`, and nothing while deleted.
pub async fn as_of_reads_each_instant(store: &dyn Store) {
    let d = day(960);
    let k = |name: &str| format!("hist-asof/{name}");
    apply(
        store,
        d,
        vec![rec(&k("1"), d, "a", at(10)), rec(&k("2"), d, "x", at(15))],
    )
    .await;
    apply(store, d, vec![rec(&k("1"), d, "b", at(20))]).await;
    apply(store, d, vec![tomb(&k("1"), d, at(30))]).await;
    let micro = Duration::microseconds(1);
    let read = async |t: DateTime<Utc>| -> Vec<String> {
        store
            .as_of(t)
            .await
            .expect("reading as of an instant")
            .into_iter()
            .filter(|r| r.key().starts_with("hist-asof/"))
            .map(|r| format!("{}={}", &r.key()[10..], r.value()))
            .collect()
    };
    assert_eq!(read(at(10) - micro).await, Vec::<String>::new());
    assert_eq!(read(at(10)).await, ["1=a"]);
    assert_eq!(read(at(15) - micro).await, ["1=a"]);
    assert_eq!(read(at(15)).await, ["1=a", "2=x"]);
    assert_eq!(read(at(20) - micro).await, ["1=a", "2=x"]);
    assert_eq!(read(at(20)).await, ["1=b", "2=x"]);
    assert_eq!(read(at(30) - micro).await, ["1=b", "2=x"]);
    assert_eq!(read(at(30)).await, ["2=x"]);
    assert_eq!(read(at(1_000_000)).await, ["2=x"]);
    let live: Vec<_> = rows_under(store, "hist-asof/").await;
    let later: Vec<_> = store
        .as_of(at(1_000_000))
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.key().starts_with("hist-asof/"))
        .collect();
    assert_eq!(later, live, "as of now is the live table");
}

/// A streamed day keeps the same history as the same day in one batch; a
/// day skipped by its digest writes none.
pub async fn history_of_streamed_and_skipped_days(store: &dyn Store) {
    let (a, b) = (day(970), day(971));
    let records = |p: &str, d: NaiveDate, v: &str, t: i64| -> Vec<Record> {
        (0..300)
            .map(|i| rec(&format!("{p}{i:03}"), d, &format!("{v}{i}"), at(t + i % 7)))
            .collect()
    };
    let one = "hist-stream/one/";
    let many = "hist-stream/many/";
    apply(store, a, records(one, a, "old", 10)).await;
    apply(store, b, records(many, b, "old", 10)).await;
    apply(store, a, records(one, a, "new", 20)).await;
    let chunks: Vec<Result<Vec<Record>, std::io::Error>> = records(many, b, "new", 20)
        .chunks(7)
        .rev()
        .map(|chunk| Ok(chunk.to_vec()))
        .collect();
    upsert_stream(store, b, stream::iter(chunks), WriteOptions::default())
        .await
        .expect("a streamed day");
    let strip = |rows: Vec<HistoryRow>, p: &str| -> Vec<_> {
        rows.iter()
            .map(|row| {
                (
                    row.record.key()[p.len()..].to_owned(),
                    row.record.value().to_owned(),
                    row.valid_from(),
                    row.valid_to,
                )
            })
            .collect()
    };
    let whole = strip(history_under(store, one).await, one);
    assert_eq!(whole.len(), 600);
    assert_eq!(strip(history_under(store, many).await, many), whole);

    let before = store.history().await.unwrap();
    let skip = WriteOptions::default().skip_unchanged(true);
    let c = upsert(store, a, records(one, a, "new", 20), skip)
        .await
        .unwrap();
    assert_eq!(c.skipped, 300);
    assert_eq!(
        store.history().await.unwrap(),
        before,
        "a skipped day writes no history"
    );
}

/// Purging tombstones never removes history; a version delivered again
/// after its key's tombstone was purged (which the table takes back, the
/// door purging opens) is one history holds already, and adds nothing
/// beside a key new to both.
pub async fn purge_never_removes_history(store: &dyn Store) {
    let d = day(980);
    let k = |name: &str| format!("hist-purge/{name}");
    apply(store, d, vec![rec(&k("k"), d, "a", at(5))]).await;
    apply(store, d, vec![tomb(&k("k"), d, at(10))]).await;
    let before = history_under(store, "hist-purge/").await;
    assert_eq!(spans(&before), [span("a", 5, Some(10)), gone(10, None)]);
    let purged = store.purge_tombstones(at(20)).await.expect("purging");
    assert!(purged >= 1);
    assert_eq!(
        history_under(store, "hist-purge/").await,
        before,
        "purge keeps history"
    );
    // The table takes the old version back; history holds it already.
    let c = apply(
        store,
        d,
        vec![rec(&k("k"), d, "a", at(5)), rec(&k("n"), d, "b", at(7))],
    )
    .await;
    assert_eq!(c.inserted, 2);
    assert_eq!(
        spans(&history_under(store, "hist-purge/").await),
        [span("a", 5, Some(10)), gone(10, None), span("b", 7, None)]
    );
}

static UPSTREAMS: AtomicUsize = AtomicUsize::new(0);

/// Applies one simulated upstream to `store`: half its deliveries one by
/// one, the rest concurrently, then all again concurrently; history must
/// equal the model's and the reference store's at every step it is read.
async fn check_history(store: &dyn Store, upstream: &Upstream) -> Result<(), String> {
    use futures_util::future::join_all;
    let n = UPSTREAMS.fetch_add(1, Ordering::Relaxed);
    let prefix = format!("hist-model/{n}/");
    let first_day = 5000 + 3 * n as i64;
    let (batches, _) = upstream_batches(upstream, &prefix, first_day);
    let mut order: Vec<usize> = (0..batches.len()).collect();
    order.sort_by_key(|&i| (upstream.priorities.get(i % upstream.priorities.len()), i));
    let ordered: Vec<Delivery> = order.iter().map(|&i| batches[i].clone()).collect();
    let model = model_history(&batches);
    let memory = reference(&ordered).await;
    if memory != model {
        return Err(format!(
            "the reference store keeps {memory:#?}\nbut the model is {model:#?}"
        ));
    }

    let apply = |delivery: &Delivery| {
        let (d, records, options) = delivery;
        upsert(store, *d, records.clone(), *options)
    };
    let (serial, rest) = ordered.split_at(ordered.len() / 2);
    for delivery in serial {
        apply(delivery)
            .await
            .map_err(|e| format!("upsert failed: {e}"))?;
    }
    for result in join_all(rest.iter().map(apply)).await {
        result.map_err(|e| format!("concurrent upsert failed: {e}"))?;
    }
    let got = history_under(store, &prefix).await;
    if got != model {
        return Err(format!(
            "the store keeps {got:#?}\nbut the model is {model:#?}"
        ));
    }
    for result in join_all(ordered.iter().map(apply)).await {
        let counts = result.map_err(|e| format!("re-applying failed: {e}"))?;
        if counts.written() != 0 {
            return Err(format!("re-applying a batch wrote rows: {counts:?}"));
        }
    }
    let again = history_under(store, &prefix).await;
    if again != model {
        return Err(format!(
            "re-applying everything changed history: the store keeps {again:#?}\nbut the model \
             is {model:#?}"
        ));
    }
    // As of each instant a version opened or closed, and just before.
    let mut instants: Vec<DateTime<Utc>> = model
        .iter()
        .flat_map(|row| [Some(row.valid_from()), row.valid_to])
        .flatten()
        .collect();
    instants.sort();
    instants.dedup();
    for t in instants
        .iter()
        .flat_map(|t| [*t - Duration::microseconds(1), *t])
    {
        let got: Vec<Record> = store
            .as_of(t)
            .await
            .map_err(|e| format!("as_of failed: {e}"))?
            .into_iter()
            .filter(|r| r.key().starts_with(&prefix))
            .collect();
        let expected = rows_as_of(&model, t);
        if got != expected {
            return Err(format!(
                "as of {t} the store reads {got:#?}\nbut the model {expected:#?}"
            ));
        }
    }
    let live = rows_under(store, &prefix).await;
    let last = rows_as_of(&model, at(1_000_000));
    if live != last {
        return Err(format!(
            "the live rows {live:#?}\nare not history's last {last:#?}"
        ));
    }
    Ok(())
}

/// Property: a simulated upstream (creates, updates, moves, CDC deletes,
/// listings at random instants), delivered in a random order, partly
/// concurrently, then all over again: the store's history equals the
/// model's, computed from the set of deliveries alone, and the reference
/// store's; every `as_of` read agrees; history's last rows are the live
/// table; re-applying writes nothing. A failure shrinks to a short
/// upstream and is printed with its seed.
pub async fn history_matches_the_model(store: &dyn Store) {
    let check = async |upstream: &Upstream| check_history(store, upstream).await;
    if let Some((seed, upstream, why)) =
        smallest_failure(32, 0x5eed_0031, upstream_strategy(), check).await
    {
        panic!(
            "history diverges (BACKFILL_PROPTEST_SEED={seed}); smallest failing upstream:\n{upstream:#?}\n{why}"
        );
    }
}
