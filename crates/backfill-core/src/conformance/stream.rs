//! Streamed days: a day that arrives as chunks is exactly the same day
//! applied as one batch, and a failure anywhere in the stream leaves
//! nothing of it.

use chrono::NaiveDate;
use futures_util::stream;

use super::helpers::*;
use crate::error::BoxError;
use crate::ledger::{LedgerEntry, RunId, SyncStamp};
use crate::record::Record;
use crate::write::{upsert_stamped, upsert_stream_stamped, WriteOptions};
use crate::{Counts, Mode, Store};
use crate::{Error, MemoryStore};

/// A streamed day's chunks, as a fetch's stream yields them.
type Chunks = Vec<Result<Vec<Record>, BoxError>>;

fn stamp(secs: i64) -> SyncStamp {
    SyncStamp {
        at: at(secs),
        run_id: Some(RunId::from("stream-run")),
    }
}

async fn streamed(
    store: &dyn Store,
    d: NaiveDate,
    chunks: Chunks,
    options: WriteOptions,
    when: i64,
) -> crate::Result<Counts> {
    upsert_stream_stamped(store, d, Box::pin(stream::iter(chunks)), options, || {
        stamp(when)
    })
    .await
}

fn ok_chunks(records: &[Record], size: usize) -> Chunks {
    records
        .chunks(size.max(1))
        .map(|c| Ok(c.to_vec()))
        .collect()
}

async fn entry(store: &dyn Store, d: NaiveDate) -> Option<LedgerEntry> {
    store.ledger(d..=d).await.expect("reading the ledger").pop()
}

/// The day before: live rows to update, keep, out-date and leave unlisted,
/// and a tombstone.
fn seed(p: &str, d: NaiveDate) -> Vec<Record> {
    let mut seed: Vec<Record> = (0..12)
        .map(|i| rec(&format!("{p}{i:02}"), d, "old", at(100)))
        .collect();
    seed.push(tomb(&format!("{p}gone"), d, at(100)));
    seed
}

/// The day's fetch: updates, identical rows, stale versions, new keys, a
/// tombstone, the deleted key back, and duplicates of the same keys spread
/// through the list (so they land in different chunks).
fn fetch(p: &str, d: NaiveDate) -> Vec<Record> {
    let k = |i: u32| format!("{p}{i:02}");
    let mut records = Vec::new();
    for i in 0..4 {
        records.push(rec(&k(i), d, "new", at(200)));
    }
    for i in 4..6 {
        records.push(rec(&k(i), d, "old", at(100)));
    }
    for i in 6..8 {
        records.push(rec(&k(i), d, "older", at(50)));
    }
    for i in 20..26 {
        records.push(rec(&k(i), d, "fresh", at(150)));
    }
    records.push(tomb(&k(8), d, at(300)));
    records.push(rec(&format!("{p}gone"), d, "back", at(400)));
    // Duplicates: a losing and a winning version of keys above, far apart.
    records.insert(1, rec(&k(0), d, "new-but-older", at(199)));
    records.push(rec(&k(1), d, "newest", at(250)));
    records.insert(3, rec(&k(21), d, "fresh", at(150)));
    records.push(rec(&k(5), d, "old", at(100)));
    records
}

/// A day streamed in chunks of 1, 2, 7 and all, with every chunk spilled
/// to a temporary file or all held in memory, in merge and replace mode,
/// leaves the rows, tombstones, ledger row and counts of the same records
/// applied as one batch; re-applying the stream writes nothing.
pub async fn streamed_day_equals_one_batch(store: &dyn Store) {
    let mut n = 0;
    for mode in [Mode::Merge, Mode::Replace] {
        for memory in [0, usize::MAX] {
            for size in [1, 2, 7, usize::MAX] {
                n += 1;
                let d = day(700 + n);
                let p = format!("stream/{n}/");
                let mut options = WriteOptions::default().stream_memory(memory);
                if mode == Mode::Replace {
                    options = listing(at(500)).stream_memory(memory);
                }
                let reference = MemoryStore::new();
                for s in [store, &reference as &dyn Store] {
                    upsert_stamped(s, d, seed(&p, d), WriteOptions::default(), stamp(1))
                        .await
                        .unwrap();
                }
                let expected = upsert_stamped(&reference, d, fetch(&p, d), options, stamp(2))
                    .await
                    .unwrap();
                let what = format!("{mode:?}, memory {memory}, chunks of {size}");
                let got = streamed(store, d, ok_chunks(&fetch(&p, d), size), options, 2)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(got, expected, "{what}: counts");
                assert_eq!(got.collapsed, 4, "{what}");
                if mode == Mode::Replace {
                    assert_eq!(got.unlisted, 3, "{what}: keys 09, 10 and 11");
                }
                assert_eq!(
                    versions_under(store, &p).await,
                    versions_under(&reference, &p).await,
                    "{what}: rows and tombstones"
                );
                assert_eq!(
                    entry(store, d).await,
                    entry(&reference, d).await,
                    "{what}: ledger"
                );

                let again = streamed(store, d, ok_chunks(&fetch(&p, d), size), options, 3)
                    .await
                    .unwrap();
                assert_eq!(again.written(), 0, "{what}: a re-run wrote");
            }
        }
    }
}

/// A stream whose fetch fails after some chunks, or that holds a bad
/// record or a record of another day in a later chunk, fails the day and
/// leaves the store exactly as it was: rows, tombstones and ledger.
pub async fn failure_mid_stream_leaves_nothing(store: &dyn Store) {
    let d = day(740);
    let p = "stream-fail/";
    upsert_stamped(store, d, seed(p, d), WriteOptions::default(), stamp(1))
        .await
        .unwrap();
    let before = (versions_under(store, p).await, entry(store, d).await);
    let good = fetch(p, d);
    let bad_record = Record::new_unchecked(format!("{p}nul\0key"), d, "v".into(), at(9));
    let other_day = rec(&format!("{p}elsewhere"), day(741), "v", at(9));
    let cases: Vec<(&str, Chunks)> = vec![
        (
            "fetch error",
            vec![
                Ok(good[..5].to_vec()),
                Ok(good[5..10].to_vec()),
                Err("upstream closed the connection".into()),
                Ok(good[10..].to_vec()),
            ],
        ),
        (
            "bad record",
            vec![
                Ok(good[..10].to_vec()),
                Ok(vec![good[10].clone(), bad_record]),
            ],
        ),
        ("other day", vec![Ok(good.clone()), Ok(vec![other_day])]),
    ];
    for (what, chunks) in cases {
        for (mode, memory) in [
            (Mode::Merge, 0),
            (Mode::Replace, usize::MAX),
            (Mode::Merge, usize::MAX),
        ] {
            let options = if mode == Mode::Replace {
                listing(at(500)).stream_memory(memory)
            } else {
                WriteOptions::default().stream_memory(memory)
            };
            let chunks = chunks
                .iter()
                .map(|c| match c {
                    Ok(records) => Ok(records.clone()),
                    Err(e) => Err(e.to_string().into()),
                })
                .collect();
            let error = streamed(store, d, chunks, options, 5)
                .await
                .expect_err(what);
            match (what, &error) {
                ("fetch error", Error::Fetch { .. }) => {}
                ("bad record", Error::InvalidRecord { key, .. }) => assert!(key.ends_with("key")),
                ("other day", Error::WrongDay { key, .. }) => assert!(key.ends_with("elsewhere")),
                _ => panic!("{what}: unexpected {error}"),
            }
            assert_eq!(
                (versions_under(store, p).await, entry(store, d).await),
                before,
                "{what} ({mode:?}, memory {memory}) changed the store"
            );
        }
    }
}

/// An empty stream is an empty listing: refused by the guard in replace
/// mode (nothing written), an empty synced day in merge mode.
pub async fn empty_stream_is_an_empty_day(store: &dyn Store) {
    let d = day(745);
    let p = "stream-empty/";
    upsert_stamped(store, d, seed(p, d), WriteOptions::default(), stamp(1))
        .await
        .unwrap();
    let guarded = WriteOptions::default().mode(Mode::Replace).as_of(at(500));
    let error = streamed(store, d, vec![Ok(Vec::new())], guarded, 2)
        .await
        .expect_err("an empty listing empties nothing by default");
    assert!(matches!(error, Error::ReplaceRefused { .. }), "{error}");
    assert_eq!(rows_under(store, p).await.len(), 12);
    let counts = streamed(store, d, Vec::new(), WriteOptions::default(), 3)
        .await
        .unwrap();
    assert_eq!(counts, Counts::default());
    let synced = entry(store, d).await.and_then(|e| e.synced).unwrap();
    assert_eq!((synced.at, synced.counts), (at(3), Counts::default()));
}

/// With `skip_unchanged`, a streamed day with the digest of its day's last
/// apply is skipped exactly as the same batch is: nothing read from the
/// table or written, its ledger row included, the records counted
/// `skipped` and the duplicates `collapsed`; whether its chunks were
/// spilled to temporary files or held in memory. One byte changed, and it
/// is applied.
pub async fn unchanged_streams_are_skipped_by_digest(store: &dyn Store) {
    for (n, (budget, chunk)) in [(0, 1), (0, 5), (usize::MAX, 3), (usize::MAX, 1000)]
        .into_iter()
        .enumerate()
    {
        let p = format!("stream-skip/{n}/");
        let d = day(460 + n as i64);
        let records = fetch(&p, d);
        let skip = WriteOptions::default()
            .skip_unchanged(true)
            .stream_memory(budget);
        let first = streamed(store, d, ok_chunks(&records, chunk), skip, 500)
            .await
            .unwrap();
        assert!(first.written() > 0, "budget {budget} chunk {chunk}");
        let before = (entry(store, d).await, versions_under(store, &p).await);
        let again = streamed(store, d, ok_chunks(&records, chunk), skip, 600)
            .await
            .unwrap();
        let batch = upsert_stamped(&MemoryStore::new(), d, records.clone(), skip, stamp(1))
            .await
            .unwrap();
        assert_eq!(
            (
                again.skipped,
                again.collapsed,
                again.written(),
                again.unchanged
            ),
            (batch.applied(), batch.collapsed, 0, 0),
            "budget {budget} chunk {chunk}: skipped like the batch"
        );
        assert_eq!(
            (entry(store, d).await, versions_under(store, &p).await),
            before,
            "budget {budget} chunk {chunk}: a skipped day writes nothing, its ledger row included"
        );
        let mut changed = records.clone();
        changed.push(rec(&format!("{p}99"), d, "one more", at(150)));
        let applied = streamed(store, d, ok_chunks(&changed, chunk), skip, 700)
            .await
            .unwrap();
        assert_eq!(
            (applied.skipped, applied.inserted),
            (0, 1),
            "budget {budget} chunk {chunk}: a changed day is applied"
        );
    }
}
