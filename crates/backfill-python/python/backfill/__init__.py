"""backfill: one idempotent write path for a data pipeline's daily sync and
its backfill, on a Rust engine.

Re-run any day, any number of times, in any order, one at a time or
concurrently: the store converges to the same rows. A fetch is any callable
that takes a ``datetime.date`` and returns an iterable of ``Record`` objects
(or dicts with the same fields); a generator is consumed in bounded chunks.

    import datetime as dt
    from backfill import SqliteStore, Record, backfill, sync_one_day

    def fetch(day: dt.date):
        at = dt.datetime(day.year, day.month, day.day, 9, 30, tzinfo=dt.timezone.utc)
        yield Record(key=f"order:{day}:1", event_date=day, value={"total": 12.5}, updated_at=at)

    store = SqliteStore("pipeline.db")
    sync_one_day(store, fetch)
    backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 31))
"""

from backfill._native import (
    BackfillError,
    Counts,
    DeltaStore,
    DayReport,
    Event,
    HistoryRow,
    InvalidRecord,
    Job,
    Listing,
    MemoryStore,
    PostgresStore,
    Record,
    ReplaceRefused,
    RunReport,
    SqliteStore,
    Status,
    StoreError,
    Transient,
    backfill,
    store_from_config,
    sync_one_day,
    sync_with_lookback,
)
from backfill._lineage import OpenLineage

# The names the pattern's first library used, so its users' code runs
# unchanged.
InMemoryStore = MemoryStore
SQLiteStore = SqliteStore

__all__ = [
    "BackfillError",
    "Counts",
    "DayReport",
    "DeltaStore",
    "Event",
    "HistoryRow",
    "InMemoryStore",
    "InvalidRecord",
    "Job",
    "Listing",
    "MemoryStore",
    "OpenLineage",
    "PostgresStore",
    "Record",
    "ReplaceRefused",
    "RunReport",
    "SQLiteStore",
    "SqliteStore",
    "Status",
    "StoreError",
    "Transient",
    "backfill",
    "store_from_config",
    "sync_one_day",
    "sync_with_lookback",
]
