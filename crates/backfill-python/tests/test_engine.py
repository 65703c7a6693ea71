"""The engine behind the package: fetches overlap at concurrency N, and
the rows the package stores are the rows the command line stores from the
same records, byte for byte."""

import datetime as dt
import json
import subprocess
import time

import pytest

import backfill
from backfill import Job, Record

UTC = dt.timezone.utc
DAYS = [dt.date(2026, 2, 1) + dt.timedelta(days=i) for i in range(40)]


def test_sleeping_fetches_overlap_at_concurrency_8():
    def slow(day):
        time.sleep(0.1)
        return [Record(f"c:{day}", day, "v", dt.datetime(2026, 1, 1, tzinfo=UTC))]

    timings = {}
    for n in (1, 8):
        store = backfill.MemoryStore()
        started = time.monotonic()
        report = Job(concurrency=n).backfill(store, slow, DAYS[0], DAYS[-1])
        timings[n] = time.monotonic() - started
        assert report.totals.inserted == len(DAYS)
    speedup = timings[1] / timings[8]
    assert speedup >= 0.7 * 8, timings


def records():
    """Values a JSON Lines export and a Python fetch would both carry."""
    values = [
        {"total": 282.51, "status": "placed", "items": [{"sku": "a", "n": 2}]},
        {"z": None, "a": [1, 2.5, 1e16, -0.0], "m": {"b": True, "a": "é"}},
        "a plain string",
        [3, "x", {"k": "v"}],
    ]
    out = []
    for i, value in enumerate(values):
        out.append(
            {
                "key": f"parity:{i}",
                "event_date": "2026-01-05",
                "value": value,
                "updated_at": f"2026-01-05T0{i}:30:00+02:00",
            }
        )
    out.append(
        {"key": "parity:gone", "event_date": "2026-01-05", "deleted": True,
         "updated_at": "2026-01-05T08:00:00Z"}
    )
    return out


def test_the_package_stores_what_the_command_line_stores(tmp_path, cli):
    day = dt.date(2026, 1, 5)
    export = tmp_path / "2026-01-05.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in records()))
    by_cli = tmp_path / "cli.db"
    subprocess.run(
        [cli, "backfill", "--from", str(day), "--to", str(day),
         "--store", f"sqlite://{by_cli}", "--fetch-files", str(tmp_path / "{day}.jsonl")],
        check=True, capture_output=True,
    )
    by_python = backfill.SqliteStore(str(tmp_path / "python.db"))
    backfill.backfill(by_python, lambda d: records(), day, day)

    def rows(store):
        return [(r.key, r.event_date, r.value, r.updated_at, r.deleted) for r in store.rows()]

    assert rows(backfill.SqliteStore(str(by_cli))) == rows(by_python)
    assert len(rows(by_python)) == 4
