//! What a day's write is and what it did: its [`Mode`] and its [`Counts`].
//! The vocabulary of the store, the ledger and the reports alike.

use std::ops::AddAssign;

/// How a batch treats the live rows of its day that it does not mention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Mode {
    /// Keep them: only the batch's own keys are touched (the default).
    #[default]
    Merge,
    /// The batch is a **listing** of its day, true as of an instant
    /// ([`DayWrite::as_of`](crate::DayWrite::as_of)): the day's live rows it lacks, and that are not
    /// newer than that instant, become tombstones (for upstreams that only
    /// list what exists). Guarded by [`ReplaceGuard`](crate::ReplaceGuard).
    Replace,
}

impl Mode {
    /// Every mode, in the order [`Mode::as_str`] names them.
    pub const ALL: [Mode; 2] = [Mode::Merge, Mode::Replace];

    /// The mode's one spelling: `merge` or `replace`, in flags, files,
    /// Python's arguments and the ledger alike.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Merge => "merge",
            Mode::Replace => "replace",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = UnknownMode;

    /// A mode from [`Mode::as_str`]'s spelling.
    fn from_str(text: &str) -> Result<Mode, UnknownMode> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == text)
            .ok_or_else(|| UnknownMode(text.to_owned()))
    }
}

/// A text that names no [`Mode`]: what [`Mode::from_str`](std::str::FromStr::from_str) refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl std::fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mode must be \"merge\" or \"replace\", not {:?}", self.0)
    }
}

impl std::error::Error for UnknownMode {}

/// What applying a batch did, key by key.
///
/// Each record of the batch (after collapsing) lands in exactly one of
/// `inserted`, `updated`, `deleted`, `unchanged`, `stale`; a listing's
/// tombstones of rows it lacked are counted in `deleted` too, and also in
/// `unlisted`. `collapsed` counts the duplicates dropped before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Counts {
    /// Written, and the key is now live where it had no live row before
    /// (absent, or a tombstone).
    pub inserted: u64,
    /// Written, and the key was live before and is live after.
    pub updated: u64,
    /// Identical to the stored version: nothing written.
    pub unchanged: u64,
    /// Older than the stored version: skipped, nothing written.
    pub stale: u64,
    /// Written, and the key is now a tombstone: a tombstone record, a live
    /// record turned into its tombstone by the watermark rule, or a row a
    /// listing lacked.
    pub deleted: u64,
    /// Of `deleted`, the live rows of the day a listing lacked.
    pub unlisted: u64,
    /// Records not applied because the day's batch had the digest of its
    /// last successful apply ([`WriteOptions::skip_unchanged`](crate::WriteOptions::skip_unchanged)):
    /// nothing read, nothing written.
    pub skipped: u64,
    /// Duplicate keys inside the batch, dropped in favour of their winner.
    pub collapsed: u64,
}

impl Counts {
    /// Rows written: `inserted + updated + deleted`. Zero on a re-run.
    pub fn written(&self) -> u64 {
        self.inserted + self.updated + self.deleted
    }

    /// Records of the batch the store looked at: every count but the rows a
    /// listing lacked and the duplicates collapsed away.
    pub fn applied(&self) -> u64 {
        (self.inserted + self.updated + self.unchanged + self.stale + self.deleted + self.skipped)
            .saturating_sub(self.unlisted)
    }

    /// Records the day's fetch returned, duplicates included: what the
    /// per-day [checks](crate::check) compare between days.
    pub fn fetched(&self) -> u64 {
        self.applied() + self.collapsed
    }
}

impl AddAssign for Counts {
    fn add_assign(&mut self, rhs: Self) {
        self.inserted += rhs.inserted;
        self.updated += rhs.updated;
        self.unchanged += rhs.unchanged;
        self.stale += rhs.stale;
        self.deleted += rhs.deleted;
        self.unlisted += rhs.unlisted;
        self.skipped += rhs.skipped;
        self.collapsed += rhs.collapsed;
    }
}
