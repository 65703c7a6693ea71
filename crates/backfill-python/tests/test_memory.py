"""A generator of millions of records holds bounded memory, into SQLite and
into a Delta table: each size runs in a child process of its own, whose
peak RSS is measured (its own `VmHWM`, read from /proc/self/status:
`ru_maxrss` would carry the pytest process's peak across the fork and exec
that start the child): the larger run's peak is within the store's limit
(128 MiB for SQLite; 192 MiB for Delta, which also holds a page of the
day, the stored rows of its range and a row group being written), and no
higher than the smaller one's plus the stream's memory budget (32 MiB,
which the smaller day never fills: past it, records go to sorted runs in
temporary files).

BACKFILL_PY_BIG sets the larger size (10 000 000 in the bench's run,
BENCHMARKS.md); the tests' default keeps CI's debug build quick.
"""

import os
import subprocess
import sys
import textwrap

import pytest

SMALL = 250_000
BIG = int(os.environ.get("BACKFILL_PY_BIG", "1000000"))

CHILD = textwrap.dedent(
    """
    import datetime as dt, sys
    import backfill

    n, kind, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    at = dt.datetime(2026, 1, 1, 9, tzinfo=dt.timezone.utc)
    store = backfill.SqliteStore(path) if kind == "sqlite" else backfill.DeltaStore(path)

    def fetch(day):
        for i in range(n):
            yield backfill.Record(f"event:{i:09}", day, "v" * 40, at)

    report = backfill.Job(stream_memory=32 << 20).sync_one_day(
        store, fetch, dt.date(2026, 1, 1))
    assert report.counts.inserted == n, report.counts
    with open("/proc/self/status") as status:  # this process's own peak, in KiB
        print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
    """
)


LIMIT_MIB = {"sqlite": 128, "delta": 192}


def peak_mib(n, kind, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(n), kind, str(tmp_path / f"{kind}-{n}")],
        capture_output=True, text=True, timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip()) / 1024


@pytest.mark.parametrize("kind", ["sqlite", "delta"])
def test_a_generator_of_millions_of_records_holds_bounded_memory(kind, tmp_path):
    small, big = peak_mib(SMALL, kind, tmp_path), peak_mib(BIG, kind, tmp_path)
    print(f"{kind}: peak RSS: {SMALL} records {small:.0f} MiB, {BIG} records {big:.0f} MiB")
    assert big <= LIMIT_MIB[kind], big
    assert big <= small + 32, (small, big)
