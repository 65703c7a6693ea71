"""The pattern's first library's usage, unchanged: its store names, a job
with settings, a fetch that yields dicts and fails once with a transient
error, and the ledger's status."""

import datetime as dt
import os
import tempfile
from typing import Any, Iterator

from backfill import InMemoryStore, Job, SQLiteStore, Transient

failed_once: set[dt.date] = set()


def fetch(day: dt.date) -> Iterator[dict[str, Any]]:
    if day.day == 13 and day not in failed_once:
        failed_once.add(day)
        raise Transient("upstream rate limit")  # retried by the job
    for i in range(3):
        yield {
            "key": f"event:{day}:{i}",
            "event_date": day.isoformat(),
            "value": {"n": i, "tags": ["a", "b"]},
            "updated_at": f"{day.isoformat()}T12:00:00Z",
        }


job = Job(concurrency=4, retries=3, retry_delay=0.01, only="missing")
path = os.path.join(tempfile.mkdtemp(), "events.db")
for store in (InMemoryStore(), SQLiteStore(path)):
    failed_once.clear()
    report = job.backfill(store, fetch, dt.date(2026, 3, 1), dt.date(2026, 3, 31))
    print(f"{len(report.days)} days synced, {report.totals.inserted} rows inserted")
    print(job.status(store, dt.date(2026, 3, 12), dt.date(2026, 3, 14)))
