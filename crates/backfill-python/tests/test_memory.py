"""A generator of millions of records holds bounded memory: each size runs
in a child process of its own, whose peak RSS is measured
(its own `VmHWM`, read from /proc/self/status: `ru_maxrss` would carry
the pytest process's peak across the fork and exec that start the child):
the larger run's peak is within 128 MiB, and no
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

SMALL = 250_000
BIG = int(os.environ.get("BACKFILL_PY_BIG", "1000000"))

CHILD = textwrap.dedent(
    """
    import datetime as dt, sys
    import backfill

    n, path = int(sys.argv[1]), sys.argv[2]
    at = dt.datetime(2026, 1, 1, 9, tzinfo=dt.timezone.utc)

    def fetch(day):
        for i in range(n):
            yield backfill.Record(f"event:{i:09}", day, "v" * 40, at)

    report = backfill.Job(stream_memory=32 << 20).sync_one_day(
        backfill.SqliteStore(path), fetch, dt.date(2026, 1, 1))
    assert report.counts.inserted == n, report.counts
    with open("/proc/self/status") as status:  # this process's own peak, in KiB
        print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
    """
)


def peak_mib(n, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(n), str(tmp_path / f"{n}.db")],
        capture_output=True, text=True, timeout=1800,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip()) / 1024


def test_a_generator_of_millions_of_records_holds_bounded_memory(tmp_path):
    small, big = peak_mib(SMALL, tmp_path), peak_mib(BIG, tmp_path)
    print(f"peak RSS: {SMALL} records {small:.0f} MiB, {BIG} records {big:.0f} MiB")
    assert big <= 128, big
    assert big <= small + 32, (small, big)
