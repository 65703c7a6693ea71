"""The README's Python example: a month of a deterministic fetch into SQLite."""

import datetime as dt
from typing import Iterator

from backfill import Record, SqliteStore, backfill, sync_one_day


def fetch(day: dt.date) -> Iterator[Record]:
    # Replace with a real upstream call. Must be deterministic for a given day.
    at = dt.datetime(day.year, day.month, day.day, 9, 30, tzinfo=dt.timezone.utc)
    for i, total in enumerate([1250, 990]):
        yield Record(key=f"order:{day}:{i}", event_date=day,
                     value={"total_cents": total}, updated_at=at)


store = SqliteStore("pipeline.db")      # or MemoryStore(), PostgresStore(url, schema=…)
sync_one_day(store, fetch)              # daily cron: today
report = backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 31))
print(report)                           # the same table as the command line's
