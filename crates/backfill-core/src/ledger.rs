//! The day ledger: which days are synced, which failed and which never ran,
//! kept by every store beside its records and written in the same
//! transaction as a day's rows (SPEC §7), so it cannot drift from them.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, Utc};

use crate::counts::{Counts, Mode};

/// The longest error text a ledger keeps for a failed day, in bytes; a
/// longer one is cut at a character boundary and marked with `…`.
pub const MAX_ERROR_BYTES: usize = 4096;

/// The identity of one run of a job: in its reports, events, tracing spans
/// and the ledger rows it writes, so a person can find which run wrote a
/// day. A UUIDv7: unique, and sorting by time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
pub struct RunId(String);

impl RunId {
    /// A new, unique id.
    pub fn new() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The longest run id kept, in bytes.
pub const MAX_RUN_ID_BYTES: usize = 256;

impl From<String> for RunId {
    /// An id read back from a store, or chosen by the caller (an
    /// orchestrator's own run id). Every store must be able to keep it, so
    /// a NUL character becomes U+FFFD and the id is cut to
    /// [`MAX_RUN_ID_BYTES`] at a character boundary.
    fn from(id: String) -> Self {
        let mut id = if id.contains('\0') {
            id.replace('\0', "\u{FFFD}")
        } else {
            id
        };
        let kept = crate::text::prefix(&id, MAX_RUN_ID_BYTES).len();
        id.truncate(kept);
        Self(id)
    }
}

impl From<&str> for RunId {
    /// As `From<String>`.
    fn from(id: &str) -> Self {
        Self::from(id.to_owned())
    }
}

/// A digest of a collapsed batch — its keys, versions and tombstones — by
/// which a job can tell that a day's fetch is the one already applied
/// (128-bit XXH3; it detects change, it is not a signature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 16]);

impl Digest {
    /// What [`purge_tombstones`](crate::Store::purge_tombstones) writes
    /// over the digest of each day whose tombstones it removed (all zero
    /// bytes: in practice the digest of no day's records), so that the next
    /// [`skip_unchanged`](crate::WriteOptions::skip_unchanged) run of the
    /// day is applied and puts its tombstones back, as a plain re-run would.
    pub const PURGED: Digest = Digest([0; 16]);

    /// The digest's bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }

    /// A digest from its bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// A digest from its 32-character lowercase hex text (as `Display`
    /// writes it), or `None`.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self(bytes))
    }

    /// This digest marked as one of a day whose batch holds records of
    /// other days (`--lenient-event-dates`): its first bit set, which
    /// [`Digest::of`] never sets. Such a day's digest describes rows stored
    /// under other days, so [`purge_tombstones`](crate::Store::purge_tombstones)
    /// writes [`Digest::PURGED`] over every marked digest whenever it
    /// removes a tombstone, whichever day the tombstone was stored under.
    pub fn covering_other_days(self) -> Self {
        let mut bytes = self.0;
        bytes[0] |= 0x80;
        Self(bytes)
    }

    /// Whether the digest is [marked](Digest::covering_other_days) as one
    /// of a batch holding records of other days.
    pub fn covers_other_days(self) -> bool {
        self.0[0] & 0x80 != 0
    }

    /// The digest of a day's records, sorted by key with unique keys (as a
    /// [`DayWrite`](crate::DayWrite) hands them out, and as a day's rows
    /// read back from a store come).
    pub fn of(records: &[crate::Record]) -> Self {
        let mut digest = DigestBuilder::default();
        for record in records {
            digest.update(record);
        }
        digest.finish()
    }
}

/// [`Digest::of`] one record at a time, for a day that arrives in pages.
///
/// A record's pieces are gathered into a buffer, hashed a buffer at a
/// time: the hash is of the bytes in order, however they are cut, and one
/// call per buffer costs far less than one per piece.
#[derive(Default)]
pub(crate) struct DigestBuilder {
    hasher: xxhash_rust::xxh3::Xxh3,
    pending: Vec<u8>,
}

/// The bytes [`DigestBuilder`] gathers before hashing them.
const DIGEST_BUFFER: usize = 16 << 10;

impl DigestBuilder {
    pub(crate) fn update(&mut self, r: &crate::Record) {
        let bytes = &mut self.pending;
        // Lengths first, so that no two different batches run together
        // into the same bytes. Between key and value, the date as it is
        // written (`YYYY-MM-DD`), the instant and the tombstone flag.
        bytes.extend_from_slice(&(r.key().len() as u64).to_le_bytes());
        bytes.extend_from_slice(r.key().as_bytes());
        let mut between = [0u8; 10 + 8 + 1 + 8];
        let date = r.event_date();
        let from = match u32::try_from(date.year()) {
            Ok(year) if year <= 9999 => {
                for (at, n, width) in [(0, year, 4), (5, date.month(), 2), (8, date.day(), 2)] {
                    let mut n = n;
                    for b in between[at..at + width].iter_mut().rev() {
                        *b = b'0' + (n % 10) as u8;
                        n /= 10;
                    }
                }
                between[4] = b'-';
                between[7] = b'-';
                0
            }
            // Never for a checked record (years 1 to 9999): as chrono
            // writes it.
            _ => {
                bytes.extend_from_slice(date.to_string().as_bytes());
                10
            }
        };
        between[10..18].copy_from_slice(&r.updated_at().timestamp_micros().to_le_bytes());
        between[18] = u8::from(r.is_deleted());
        between[19..].copy_from_slice(&(r.value().len() as u64).to_le_bytes());
        bytes.extend_from_slice(&between[from..]);
        bytes.extend_from_slice(r.value().as_bytes());
        if bytes.len() >= DIGEST_BUFFER {
            self.hasher.update(bytes);
            bytes.clear();
        }
    }

    pub(crate) fn finish(&self) -> Digest {
        let mut hasher = self.hasher.clone();
        hasher.update(&self.pending);
        let mut bytes = hasher.digest128().to_be_bytes();
        // The first bit is the mark of `Digest::covering_other_days`.
        bytes[0] &= 0x7f;
        Digest(bytes)
    }
}

impl fmt::Debug for DigestBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DigestBuilder")
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The last successful apply of a day.
///
/// Two are equal when they record the same apply: its [`Timing`], a
/// measurement by one process's clock that differs between two runs doing
/// the same thing, is not compared.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SyncedDay {
    /// When it committed, by the job's clock.
    pub at: DateTime<Utc>,
    /// The run that applied it (`None` for a direct `upsert` without one).
    pub run_id: Option<RunId>,
    /// Merge or replace.
    pub mode: Mode,
    /// A replace's `as_of`.
    pub as_of: Option<DateTime<Utc>>,
    /// The digest of the batch applied.
    pub digest: Digest,
    /// What the apply did.
    pub counts: Counts,
    /// How long the attempt that applied it took, fetch and write; `None`
    /// where it was not recorded (a ledger row written by an earlier
    /// release, or a store that does not keep it).
    pub timing: Option<Timing>,
}

impl SyncedDay {
    /// A day's last successful apply, as a store reads it back from its
    /// ledger.
    pub fn new(
        at: DateTime<Utc>,
        run_id: Option<RunId>,
        mode: Mode,
        as_of: Option<DateTime<Utc>>,
        digest: Digest,
        counts: Counts,
    ) -> Self {
        Self {
            at,
            run_id,
            mode,
            as_of,
            digest,
            counts,
            timing: None,
        }
    }

    /// The same apply with its [`Timing`], as a store that keeps it reads
    /// it back.
    #[must_use]
    pub fn with_timing(mut self, timing: Option<Timing>) -> Self {
        self.timing = timing;
        self
    }
}

impl PartialEq for SyncedDay {
    fn eq(&self, other: &Self) -> bool {
        let Self {
            at,
            run_id,
            mode,
            as_of,
            digest,
            counts,
            timing: _,
        } = self;
        (at, run_id, mode, as_of, digest, counts)
            == (
                &other.at,
                &other.run_id,
                &other.mode,
                &other.as_of,
                &other.digest,
                &other.counts,
            )
    }
}

/// How long a day's successful attempt took, by the monotonic clock of
/// the process that ran it: its fetch (until the last record arrived) and
/// its write, from then until its ledger row was made (on SQLite and
/// Postgres just before the commit; on Delta once the day's new rows are
/// decided, before their files are written). Earlier attempts of the same
/// run are not included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timing {
    /// Fetching the day.
    pub fetch: Duration,
    /// Writing it.
    pub write: Duration,
}

impl Timing {
    /// Fetch and write together.
    pub fn total(&self) -> Duration {
        self.fetch + self.write
    }

    /// Whole milliseconds, as stores keep them: `(fetch, write)`.
    pub fn as_millis(&self) -> (i64, i64) {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        (ms(self.fetch), ms(self.write))
    }

    /// From whole milliseconds as stores keep them; `None` for a negative
    /// one (a row no release writes).
    pub fn from_millis(fetch: i64, write: i64) -> Option<Self> {
        let d = |ms: i64| u64::try_from(ms).ok().map(Duration::from_millis);
        Some(Self {
            fetch: d(fetch)?,
            write: d(write)?,
        })
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Timing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (fetch, write) = self.as_millis();
        let mut t = s.serialize_struct("Timing", 2)?;
        t.serialize_field("fetch_ms", &fetch)?;
        t.serialize_field("write_ms", &write)?;
        t.end()
    }
}

/// A day's last failure after its last success.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct DayFailure {
    /// When the last attempt failed, by the job's clock.
    pub at: DateTime<Utc>,
    /// The run it failed in.
    pub run_id: Option<RunId>,
    /// Attempts made in that run.
    pub attempts: u32,
    /// The last error, as text, at most [`MAX_ERROR_BYTES`].
    pub error: String,
}

impl DayFailure {
    /// A failure at `at` after `attempts` (at least 1: a lower count is
    /// taken as 1), its error text bounded to [`MAX_ERROR_BYTES`], any NUL
    /// character replaced by U+FFFD.
    pub fn new(at: DateTime<Utc>, run_id: Option<RunId>, attempts: u32, error: &str) -> Self {
        let attempts = attempts.max(1);
        // A NUL cannot be stored in every store's text; U+FFFD can.
        let error = error.replace('\0', "\u{FFFD}");
        let error = error.as_str();
        let error = match error.len() <= MAX_ERROR_BYTES {
            true => error.to_owned(),
            // The mark included in the bound.
            false => crate::text::cut(error, MAX_ERROR_BYTES - '…'.len_utf8()).into_owned(),
        };
        Self {
            at,
            run_id,
            attempts,
            error,
        }
    }
}

/// A day in a store's ledger. A day with no entry has never been synced.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LedgerEntry {
    /// The day.
    pub day: NaiveDate,
    /// Its last successful apply, if any.
    pub synced: Option<SyncedDay>,
    /// Its last failure after its last success, if any.
    pub failure: Option<DayFailure>,
    /// The latest `as_of` of any listing applied for the day.
    pub listing_watermark: Option<DateTime<Utc>>,
    /// When a person [accepted](crate::Store::accept) the day as it is:
    /// the per-day [checks](crate::check) never flag it again, through
    /// re-runs and failures, until the acceptance is taken back.
    pub accepted: Option<DateTime<Utc>>,
}

impl LedgerEntry {
    /// An entry for `day` with nothing recorded yet.
    pub fn new(day: NaiveDate) -> Self {
        Self {
            day,
            synced: None,
            failure: None,
            listing_watermark: None,
            accepted: None,
        }
    }

    /// Whether the day is synced or failed (an entry with neither reads as
    /// missing).
    pub fn state(&self) -> DayState {
        match (&self.synced, &self.failure) {
            (_, Some(_)) => DayState::Failed,
            (Some(_), None) => DayState::Synced,
            (None, None) => DayState::Missing,
        }
    }
}

/// Sets `day`'s acceptance to `at` in `entries` (in day order), adding an
/// entry for the day if it has none: for a store that keeps acceptances
/// apart from its ledger rows and reads them into [`Store::ledger`](crate::Store::ledger)'s
/// entries.
pub fn merge_acceptance(entries: &mut Vec<LedgerEntry>, day: NaiveDate, at: DateTime<Utc>) {
    match entries.binary_search_by_key(&day, |e| e.day) {
        Ok(i) => entries[i].accepted = Some(at),
        Err(i) => {
            let mut entry = LedgerEntry::new(day);
            entry.accepted = Some(at);
            entries.insert(i, entry);
        }
    }
}

/// Where a day stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
pub enum DayState {
    /// Never synced: no success and no failure recorded.
    Missing,
    /// Its last attempt succeeded (possibly with 0 records).
    Synced,
    /// It failed after its last success, or never succeeded.
    Failed,
}

impl fmt::Display for DayState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            DayState::Missing => "missing",
            DayState::Synced => "synced",
            DayState::Failed => "failed",
        })
    }
}

/// Who applies a batch and when, for its ledger row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncStamp {
    /// When the apply happens, by the job's clock.
    pub at: DateTime<Utc>,
    /// The run applying it.
    pub run_id: Option<RunId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Record;

    /// A digest is kept in every day's ledger row: the bytes it is taken of
    /// never change, or every stored day would read as changed once.
    /// A batch of many records, values longer than the builder's buffer
    /// among them, digests as its bytes hashed piece by piece: the
    /// buffering cuts the bytes, and only that.
    #[test]
    fn a_large_batch_digests_as_its_pieces_hashed_one_by_one() {
        let day = NaiveDate::from_ymd_opt(2026, 3, 9).unwrap();
        let mut rng = fastrand::Rng::with_seed(5);
        let records: Vec<Record> = (0..3_000)
            .map(|i| {
                let len = match rng.u8(..20) {
                    0 => DIGEST_BUFFER + rng.usize(..100),
                    _ => rng.usize(..200),
                };
                let at = DateTime::from_timestamp_micros(1_773_047_096_123_456 + i).unwrap();
                let r = Record::new(format!("k{i}"), day, "x".repeat(len), at).unwrap();
                match rng.u8(..10) {
                    0 => r.to_tombstone(),
                    _ => r,
                }
            })
            .collect();
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for r in &records {
            hasher.update(&(r.key().len() as u64).to_le_bytes());
            hasher.update(r.key().as_bytes());
            hasher.update(r.event_date().to_string().as_bytes());
            hasher.update(&r.updated_at().timestamp_micros().to_le_bytes());
            hasher.update(&[u8::from(r.is_deleted())]);
            hasher.update(&(r.value().len() as u64).to_le_bytes());
            hasher.update(r.value().as_bytes());
        }
        let mut expected = hasher.digest128().to_be_bytes();
        expected[0] &= 0x7f;
        assert_eq!(Digest::of(&records), Digest(expected));
    }

    #[test]
    fn digests_are_those_stored_before() {
        let date = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap();
        let at = |s| DateTime::from_timestamp_micros(s).unwrap();
        let records = [
            Record::new("a", date(1, 1, 1), "{}", at(-62_135_596_800_000_000)).unwrap(),
            Record::new(
                "clé:7",
                date(2026, 3, 9),
                r#"{"n": 1.5}"#,
                at(1_773_047_096_123_456),
            )
            .unwrap(),
            Record::tombstone("z", date(9999, 12, 31), at(253_402_300_799_999_999)).unwrap(),
        ];
        let digests: Vec<String> = (0..=records.len())
            .map(|n| Digest::of(&records[..n]).to_string())
            .collect();
        assert_eq!(
            digests,
            [
                "19aa06d3014798d86001c324468d497f",
                "7e439742d1fe94e18ecfb7b3d7b88ece",
                "476ab2cb7c6b417ba4727e406376be3c",
                "27a1a197a086227de4094bbb12b170d4",
            ]
        );
    }

    #[test]
    fn digests_change_with_any_byte_and_round_trip_as_hex() {
        let day = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        let at = day.and_hms_opt(1, 0, 0).unwrap().and_utc();
        let a = [Record::new("k", day, "v", at).unwrap()];
        let b = [Record::new("k", day, "w", at).unwrap()];
        let gone = [Record::tombstone("k", day, at).unwrap()];
        let split = [Record::new("kv", day, "", at).unwrap()];
        let all = [
            Digest::of(&a),
            Digest::of(&b),
            Digest::of(&gone),
            Digest::of(&split),
        ];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
        assert_eq!(Digest::of(&a), Digest::of(&a.clone()));
        let hex = Digest::of(&a).to_string();
        assert_eq!(hex.len(), 32);
        assert_eq!(Digest::from_hex(&hex), Some(Digest::of(&a)));
        assert_eq!(Digest::from_hex("zz"), None);
    }

    #[test]
    fn failures_keep_a_bounded_error() {
        let at = Utc::now();
        let long = "é".repeat(MAX_ERROR_BYTES);
        let f = DayFailure::new(at, None, 3, &long);
        assert!(f.error.len() <= MAX_ERROR_BYTES && f.error.ends_with('…'));
        assert_eq!(DayFailure::new(at, None, 1, "503").error, "503");
    }

    #[test]
    fn chosen_run_ids_are_kept_storable() {
        assert_eq!(RunId::from("airflow-run-42").as_str(), "airflow-run-42");
        assert_eq!(RunId::from("a\0b").as_str(), "a\u{FFFD}b");
        let long = RunId::from("é".repeat(MAX_RUN_ID_BYTES));
        assert!(long.as_str().len() <= MAX_RUN_ID_BYTES);
        assert!(long.as_str().chars().all(|c| c == 'é'));
    }

    #[test]
    fn run_ids_are_unique_and_sort_by_time() {
        let a = RunId::new();
        let b = RunId::new();
        assert_ne!(a, b);
        assert!(a < b);
    }
}
