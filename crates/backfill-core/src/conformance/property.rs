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
use crate::Transient;

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
