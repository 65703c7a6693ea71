//! Property tests: generated scenarios, shrunk to something a person can
//! read when one fails.

use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::NaiveDate;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use super::helpers::*;
use crate::error::{BoxError, Error};
use crate::record::Record;
use crate::store::Store;
use crate::write::{upsert, WriteOptions};
use crate::{MemoryStore, Transient};

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
    // Each try, shrunk ones included, runs under a fresh prefix, so earlier
    // tries cannot influence it.
    let check = async |scenario: &Scenario| {
        let prefix = format!("converge/{}/", CASE.fetch_add(1, Ordering::Relaxed));
        check_scenario(store, &prefix, &rebase(scenario, &prefix)).await
    };
    let strategy = scenario_strategy("converge/generated/".to_owned());
    if let Some((seed, scenario, why)) = smallest_failure(48, 0x00c0_ffee, strategy, check).await {
        panic!(
            "convergence broken (BACKFILL_PROPTEST_SEED={seed}); smallest failing scenario:\n{scenario:#?}\n{why}"
        );
    }
}

/// Runs `check` on `cases` values of `strategy` (`BACKFILL_PROPTEST_CASES`
/// overrides it) from `seed` (`BACKFILL_PROPTEST_SEED` overrides it). On the
/// first failure, shrinks it (at most 256 steps) and returns the seed, the
/// smallest failing value and why it fails.
pub(super) async fn smallest_failure<S>(
    cases: u32,
    seed: u64,
    strategy: S,
    check: impl AsyncFn(&S::Value) -> Result<(), String>,
) -> Option<(u64, S::Value, String)>
where
    S: Strategy,
{
    let cases: u32 = std::env::var("BACKFILL_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let seed: u64 = std::env::var("BACKFILL_PROPTEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(seed);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    for _ in 0..cases {
        let mut tree = strategy
            .new_tree(&mut runner)
            .expect("generating a test case");
        let Err(first) = check(&tree.current()).await else {
            continue;
        };
        let mut smallest = (tree.current(), first);
        if tree.simplify() {
            for _ in 0..256 {
                match check(&tree.current()).await {
                    Err(why) => {
                        smallest = (tree.current(), why);
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
        return Some((seed, smallest.0, smallest.1));
    }
    None
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
                DayFate::FailsAlways => Err(BoxError::from("upstream bug")),
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
        Err(Error::Backfill(e)) => e.failed.iter().map(|(d, _)| *d).collect(),
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

/// One simulated upstream for [`listings_and_deletes_converge`]: what
/// happens to its keys over time, which listings are taken when, and in
/// which order the store receives it all. Plain numbers, so that a failing
/// case shrinks to a short, readable history.
#[derive(Debug, Clone)]
pub(super) struct Upstream {
    /// One change per step, each `gap` seconds after the last: key `key`
    /// is deleted (`delete`, if live) or gets a new version on day `day`
    /// (a new key, or a move) or on its current day.
    changes: Vec<Change>,
    /// Whether each version is delivered twice, and whether each deletion
    /// is delivered as a tombstone (CDC), by step.
    redeliver: Vec<bool>,
    /// Listings taken before the end: `(instant offset, day)`.
    listings: Vec<(u32, u8)>,
    /// The order deliveries reach the store (a priority per delivery).
    pub(super) priorities: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
struct Change {
    key: u8,
    day: u8,
    delete: bool,
    moves: bool,
    gap: u8,
}

const UPSTREAM_DAYS: u8 = 3;

pub(super) fn upstream_strategy() -> impl Strategy<Value = Upstream> {
    use proptest::collection::vec;
    use proptest::prelude::*;
    let change = (
        0..6u8,
        0..UPSTREAM_DAYS,
        prop::bool::weighted(0.25),
        prop::bool::weighted(0.2),
        1..4u8,
    )
        .prop_map(|(key, day, delete, moves, gap)| Change {
            key,
            day,
            delete,
            moves,
            gap,
        });
    (
        vec(change, 1..30),
        vec(any::<bool>(), 30),
        vec((0..100u32, 0..UPSTREAM_DAYS), 0..6),
        vec(any::<u32>(), 120),
    )
        .prop_map(|(changes, redeliver, listings, priorities)| Upstream {
            changes,
            redeliver,
            listings,
            priorities,
        })
}

/// One batch as a job would hand it to `upsert`.
pub(super) type Delivery = (NaiveDate, Vec<Record>, WriteOptions);

/// The upstream's deliveries and listings as batches for the store, under
/// a fresh key prefix and fresh days, with its final live rows.
pub(super) fn upstream_batches(
    upstream: &Upstream,
    prefix: &str,
    first_day: i64,
) -> (Vec<Delivery>, Vec<Record>) {
    use std::collections::BTreeMap;
    let key = |k: u8| format!("{prefix}k{k}");
    let the_day = |d: u8| day(first_day + i64::from(d));
    // The upstream's history: its live rows after each change.
    let mut live: BTreeMap<String, Record> = BTreeMap::new();
    let mut snapshots: Vec<(i64, BTreeMap<String, Record>)> = vec![(0, live.clone())];
    let mut batches = Vec::new();
    let mut t = 0i64;
    for (step, change) in upstream.changes.iter().enumerate() {
        t += i64::from(change.gap);
        let k = key(change.key);
        let twice = upstream.redeliver.get(step).copied().unwrap_or(false);
        match live.get(&k).cloned() {
            Some(current) if change.delete => {
                live.remove(&k);
                if twice {
                    // A CDC feed delivers the deletion, on the day of the
                    // key's last live version.
                    let d = current.event_date();
                    batches.push((d, vec![tomb(&k, d, at(t))], WriteOptions::default()));
                }
            }
            current => {
                let d = match current {
                    Some(current) if !change.moves => current.event_date(),
                    _ => the_day(change.day),
                };
                let version = rec(&k, d, &format!("v{t}"), at(t));
                for _ in 0..if twice { 2 } else { 1 } {
                    batches.push((d, vec![version.clone()], WriteOptions::default()));
                }
                live.insert(k, version);
            }
        }
        snapshots.push((t, live.clone()));
    }
    let end = t;
    // Listings: each a true snapshot of one day as of its instant, plus a
    // final listing of every day at the end.
    let snapshot_at = |instant: i64| {
        snapshots
            .iter()
            .take_while(|(time, _)| *time <= instant)
            .last()
            .map(|(_, rows)| rows.clone())
            .unwrap_or_default()
    };
    let mut listings: Vec<(i64, u8)> = upstream
        .listings
        .iter()
        .map(|&(offset, d)| (i64::from(offset) % (end + 1), d))
        .collect();
    listings.extend((0..UPSTREAM_DAYS).map(|d| (end, d)));
    for (instant, d) in listings {
        let rows = snapshot_at(instant);
        let records: Vec<Record> = rows
            .values()
            .filter(|r| r.event_date() == the_day(d))
            .cloned()
            .collect();
        batches.push((the_day(d), records, listing(at(instant))));
    }
    (batches, live.into_values().collect())
}

static UPSTREAMS: AtomicUsize = AtomicUsize::new(0);

/// Applies one simulated upstream to `store` in the generated order, then
/// concurrently, then re-applies everything; checks it against the
/// reference store and the upstream's final state.
async fn check_upstream(store: &dyn Store, upstream: &Upstream) -> Result<(), String> {
    use futures_util::future::join_all;
    let n = UPSTREAMS.fetch_add(1, Ordering::Relaxed);
    let prefix = format!("upstream/{n}/");
    // Fresh days too: a listing touches every live row of its day.
    let first_day = 2000 + i64::from(UPSTREAM_DAYS) * n as i64;
    let (batches, truth) = upstream_batches(upstream, &prefix, first_day);
    let mut order: Vec<usize> = (0..batches.len()).collect();
    order.sort_by_key(|&i| (upstream.priorities.get(i % upstream.priorities.len()), i));

    let reference = MemoryStore::new();
    for &i in &order {
        let (d, records, options) = &batches[i];
        upsert(&reference, *d, records.clone(), *options)
            .await
            .map_err(|e| format!("the reference store failed: {e}"))?;
    }
    let expected = reference
        .rows_with_tombstones()
        .await
        .expect("reading the reference");
    let live: Vec<Record> = expected
        .iter()
        .filter(|r| !r.is_deleted())
        .cloned()
        .collect();
    if live != truth {
        return Err(format!(
            "the reference store's live rows {live:#?}\ndiffer from the upstream's {truth:#?}"
        ));
    }

    let apply = |i: usize| {
        let (d, records, options) = &batches[i];
        upsert(store, *d, records.clone(), *options)
    };
    // Half the batches one by one in the generated order, then the rest
    // all at once (concurrently), then everything again at once.
    let (serial, rest) = order.split_at(order.len() / 2);
    for &i in serial {
        apply(i).await.map_err(|e| format!("upsert failed: {e}"))?;
    }
    for result in join_all(rest.iter().map(|&i| apply(i))).await {
        result.map_err(|e| format!("concurrent upsert failed: {e}"))?;
    }
    let got = versions_under(store, &prefix).await;
    if got != expected {
        return Err(format!(
            "the store holds {got:#?}\nbut the reference store, given the same batches, holds {expected:#?}"
        ));
    }
    for result in join_all(order.iter().map(|&i| apply(i))).await {
        let counts = result.map_err(|e| format!("re-applying failed: {e}"))?;
        if counts.written() != 0 {
            return Err(format!("re-applying a batch wrote rows: {counts:?}"));
        }
    }
    if versions_under(store, &prefix).await != expected {
        return Err("re-applying everything changed the state".into());
    }
    Ok(())
}

/// Property: a simulated upstream — creates, updates, moves and deletes of
/// a few keys over time — delivered as merges (each version once or twice,
/// deletions sometimes as CDC tombstones) and as listings of its days taken
/// at random instants, in a random order, partly concurrently, and then all
/// over again: the store ends byte for byte where the reference store ends,
/// tombstones included; its live rows are the upstream's final rows; and
/// re-applying writes nothing. A failure is shrunk to a short history and
/// printed with its seed.
pub async fn listings_and_deletes_converge(store: &dyn Store) {
    let check = async |upstream: &Upstream| check_upstream(store, upstream).await;
    if let Some((seed, upstream, why)) =
        smallest_failure(32, 0x5eed_0002, upstream_strategy(), check).await
    {
        panic!(
            "listings and deletes diverge (BACKFILL_PROPTEST_SEED={seed}); smallest failing upstream:\n{upstream:#?}\n{why}"
        );
    }
}
