//! History: every version a key ever had, valid from its `updated_at` until
//! the next one's.
//!
//! A store that keeps history (opt-in, per table) keeps, beside its live
//! rows, each distinct **version** it was given, whatever the live table
//! did with it (a stale re-delivery is kept too, in its place), and each
//! **listing** instant of each day. History is a pure function of those
//! two sets, so it is the same whatever order the days arrived in, however
//! often, and however many writers delivered them at once.
//!
//! # The rules
//!
//! For one key, the versions are ordered by `updated_at`; of two versions
//! with the same `updated_at` only the one that [supersedes](Record::supersedes)
//! the other is kept (only it was ever observable). A version is valid from
//! its `updated_at` (`valid_from`) until the next version's (`valid_to`,
//! open for the newest). A tombstone is a version too: the key is deleted
//! from its `updated_at` on, until a later version brings it back.
//!
//! A listing ([`Mode::Replace`](crate::Mode::Replace)) of day `D` true as
//! of `T` says which keys `D` held at `T`. A live version `v` of day `D`
//! that a listing of `D` at `T >= v.updated_at` did not hold was deleted
//! by `T`: `v` is closed at the earliest such `T`, and a tombstone row
//! (`D`, empty value) is valid from `T` until `v`'s next version, unless
//! that next version came at or before `T`. This is exactly when the live
//! table turns `v` into its tombstone (SPEC 3.4), but history dates the
//! delete at the listing's instant, when it was seen, rather than at
//! `v.updated_at`.
//!
//! A store keeps this with one field per version, [`Version::absent_from`]:
//! the earliest listing instant of the version's day at or after its
//! `updated_at` that did not hold it. A listing sets it on the versions of
//! its day it lacks; a version new to the store takes the earliest listing
//! of its day at or after it already applied (a listing that had held it
//! would have delivered it). Both are minimums over sets, so neither
//! depends on order.
//!
//! Listings are of one consistent upstream: a version a listing lacks is
//! never held again by a later listing. A record a listing holds whose
//! `updated_at` is after the listing's `as_of` does not vouch for the
//! version the key had at `as_of`: that version is closed at `as_of`, and
//! the newer one opens at its own `updated_at`.
//!
//! Within one day's batch, duplicate keys collapse to their winner before
//! anything is written, so a fetch that returns several versions of a key
//! adds its winner only. Deliver a changelog's versions in separate days
//! or fetches to keep each.
//!
//! [`purge_tombstones`](crate::Store::purge_tombstones) never removes
//! history.

use chrono::{DateTime, NaiveDate, Utc};

use crate::record::Record;

/// One row of history: a version of a key and the instants it was valid
/// between.
///
/// `record` is the version: its key, `event_date`, value and
/// `updated_at` (which is `valid_from`), and whether it is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    /// The version.
    pub record: Record,
    /// When the next version took over; `None` while it is the newest.
    pub valid_to: Option<DateTime<Utc>>,
}

impl HistoryRow {
    /// When this version became the key's: its `updated_at`.
    pub fn valid_from(&self) -> DateTime<Utc> {
        self.record.updated_at()
    }

    /// Whether this row was the key's version at `at`.
    pub fn valid_at(&self, at: DateTime<Utc>) -> bool {
        self.valid_from() <= at && self.valid_to.is_none_or(|to| at < to)
    }
}

/// A version as a store keeps it for history: the version delivered, and
/// the first listing of its day that lacked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The version, as delivered (never turned into a tombstone by the
    /// watermark rule: history dates that delete by its listing).
    pub record: Record,
    /// The earliest `as_of` of a listing of the version's `event_date`, at
    /// or after its `updated_at`, that did not hold it.
    pub absent_from: Option<DateTime<Utc>>,
}

/// The history rows of `versions`, which are ordered by key, then
/// `updated_at`, one per `(key, updated_at)`: ordered the same way, one
/// row per instant a key changed.
///
/// ```
/// use backfill_core::history::{history_of, Version};
/// use backfill_core::Record;
/// use chrono::{NaiveDate, TimeZone, Utc};
///
/// # fn main() -> backfill_core::Result<()> {
/// let day = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
/// let at = |h| Utc.with_ymd_and_hms(2026, 3, 1, h, 0, 0).unwrap();
/// let versions = [
///     // Open at 9:00; a listing of its day at 12:00 lacked it.
///     Version { record: Record::new("a", day, "1", at(9))?, absent_from: Some(at(12)) },
///     Version { record: Record::new("a", day, "2", at(15))?, absent_from: None },
/// ];
/// let rows = history_of(&versions);
/// let spans: Vec<_> = rows
///     .iter()
///     .map(|r| (r.record.value(), r.record.is_deleted(), r.valid_from(), r.valid_to))
///     .collect();
/// assert_eq!(spans, [
///     ("1", false, at(9), Some(at(12))),
///     ("", true, at(12), Some(at(15))),
///     ("2", false, at(15), None),
/// ]);
/// # Ok(()) }
/// ```
pub fn history_of(versions: &[Version]) -> Vec<HistoryRow> {
    let mut rows = Vec::with_capacity(versions.len());
    for (i, version) in versions.iter().enumerate() {
        let record = &version.record;
        let next = versions
            .get(i + 1)
            .filter(|next| next.record.key() == record.key())
            .map(|next| next.record.updated_at());
        let closed = version
            .absent_from
            .filter(|_| !record.is_deleted())
            .filter(|at| next.is_none_or(|next| *at < next));
        match closed {
            Some(at) => {
                // Listed at its own instant and lacked there: the
                // tombstone of that instant supersedes it; nothing to show.
                if at > record.updated_at() {
                    rows.push(HistoryRow {
                        record: record.clone(),
                        valid_to: Some(at),
                    });
                }
                rows.push(HistoryRow {
                    record: record.deleted_at(at),
                    valid_to: next,
                });
            }
            None => rows.push(HistoryRow {
                record: record.clone(),
                valid_to: next,
            }),
        }
    }
    rows
}

/// History's share of a store that decides a day in memory
/// ([`MemoryStore::with_history_parts`](crate::MemoryStore::with_history_parts)):
/// the versions and listing instants of the days the day's write reads.
///
/// History is local to days: a version takes its
/// [`absent_from`](Version::absent_from) from the listings of its own
/// `event_date`, and a listing marks the versions of its own day. So a
/// store that keeps each day's share beside the day's rows, and loads the
/// shares of the days a write reads, keeps the same history as a store
/// that holds it all; of two versions of one instant a key has under
/// different days, [`one_per_instant`] keeps the one that wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryParts {
    /// Versions, each under its own `event_date`.
    pub versions: Vec<Version>,
    /// Listing instants, by day.
    pub listings: Vec<(NaiveDate, DateTime<Utc>)>,
}

/// One version per key and instant, ordered by key, then `updated_at`, as
/// [`history_of`] takes them: of several versions of one instant (kept
/// under different days), the one that [supersedes](Record::supersedes)
/// the others.
pub fn one_per_instant(versions: impl IntoIterator<Item = Version>) -> Vec<Version> {
    let mut kept: std::collections::BTreeMap<(String, DateTime<Utc>), Version> =
        std::collections::BTreeMap::new();
    for version in versions {
        let slot = (version.record.key().to_owned(), version.record.updated_at());
        match kept.get(&slot) {
            Some(stored) if !version.record.supersedes(&stored.record) => {}
            _ => {
                kept.insert(slot, version);
            }
        }
    }
    kept.into_values().collect()
}

/// The live rows of `history` at `at`, in its order (by key): each key's
/// version valid at `at`, unless it is a tombstone.
pub fn rows_as_of(history: &[HistoryRow], at: DateTime<Utc>) -> Vec<Record> {
    history
        .iter()
        .filter(|row| row.valid_at(at) && !row.record.is_deleted())
        .map(|row| row.record.clone())
        .collect()
}

/// The first listing instant of `day` at or after `from` in `listings`
/// (ordered by day, then instant): what a version new to a store takes as
/// [`Version::absent_from`] before its own day's listing, if it came in
/// one, is applied.
pub fn first_listing_from<'a>(
    listings: impl IntoIterator<Item = &'a (NaiveDate, DateTime<Utc>)>,
    day: NaiveDate,
    from: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    listings
        .into_iter()
        .filter(|(d, at)| *d == day && *at >= from)
        .map(|(_, at)| *at)
        .min()
}
