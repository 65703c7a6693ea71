"""The user's own `sqlite3` on the store's file, in the same process.

Python's `sqlite3` module is a second copy of SQLite beside the package's
own. Each scenario runs in a child process killed with SIGKILL (no close,
no checkpoint, as after the OOM killer), and a fresh process then counts
what the file holds: every day the store reported committed must be there.
"""

import datetime as dt
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

import backfill

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")

DAYS = 10
PER_DAY = 100

CHILD = """
import datetime as dt, os, signal, sqlite3, sys
import backfill

path, scenario = sys.argv[1], sys.argv[2]
at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
job = backfill.Job()

def sync(store, n):
    day = dt.date(2026, 1, 1) + dt.timedelta(days=n)
    job.sync_one_day(store, lambda d: [
        backfill.Record(f"k:{d}:{i}", d, "v", at) for i in range(100)
    ], day)

def peek():
    # A user checking progress with their own sqlite3, then closing it.
    conn = sqlite3.connect(path)
    conn.execute("SELECT count(*) FROM backfill_records").fetchone()
    conn.close()

store = backfill.SqliteStore(path)
if scenario == "peek":
    sync(store, 0)
    peek()
    for n in range(1, 10):
        sync(store, n)
elif scenario == "peek-every-day":
    for n in range(10):
        sync(store, n)
        peek()
elif scenario == "own-connection-open":
    # The user's connection stays open (and writes a table of its own)
    # while stores come and go.
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS notes (n INTEGER)")
    for n in range(10):
        store = backfill.SqliteStore(path)
        sync(store, n)
        del store
        conn.execute("INSERT INTO notes VALUES (?)", (n,))
elif scenario == "user-writes":
    # The user's sqlite3 writes its own table between the store's days.
    for n in range(10):
        sync(store, n)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("CREATE TABLE IF NOT EXISTS notes (n INTEGER)")
        conn.execute("INSERT INTO notes VALUES (?)", (n,))
        conn.close()
print("committed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _run_and_kill(tmp_path, scenario):
    path = str(tmp_path / "pipeline.db")
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    done = subprocess.run(
        [sys.executable, str(script), path, scenario],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.strip() == "committed", done.stderr
    return path


def _count(path, sql):
    # A fresh process, as the next run would be.
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import sqlite3, sys
            print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])
        """), path, sql],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(out.stdout)


def _integrity(path):
    return subprocess.run(
        [sys.executable, "-c",
         "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])",
         path],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()


@pytest.mark.parametrize("scenario", ["peek", "peek-every-day", "user-writes", "own-connection-open"])
def test_every_committed_day_survives_a_kill_after_the_users_sqlite3_touched_the_file(
    tmp_path, scenario
):
    path = _run_and_kill(tmp_path, scenario)
    assert _count(path, "SELECT count(*) FROM backfill_records") == DAYS * PER_DAY
    assert _count(path, "SELECT count(*) FROM backfill_days") == DAYS
    if scenario in ("user-writes", "own-connection-open"):
        # The user's own rows are kept too.
        assert _count(path, "SELECT count(*) FROM notes") == DAYS
    assert _integrity(path) == "ok"
    # And the package reads the same.
    assert len(backfill.SqliteStore(path).rows()) == DAYS * PER_DAY


def test_a_write_lock_held_by_the_users_sqlite3_holds_off_the_store(tmp_path):
    """Python's sqlite3 in the same process holds SQLite's write lock: the
    store's day waits for it and fails as locked, as it would against
    another process, instead of writing beside it."""
    path = str(tmp_path / "pipeline.db")
    store = backfill.SqliteStore(path)
    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    day = dt.date(2026, 1, 1)

    def fetch(d):
        return [backfill.Record(f"k:{i}", d, "v", at) for i in range(100)]

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE notes (n INTEGER)")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO notes VALUES (1)")
    with pytest.raises(backfill.StoreError, match="locked"):
        backfill.Job(retries=0).sync_one_day(store, fetch, day)
    conn.execute("COMMIT")
    # Released: the same day goes in, and the file is sound.
    report = backfill.Job(retries=0).sync_one_day(store, fetch, day)
    assert report.counts.inserted == 100
    conn.close()
    assert len(store.rows()) == 100
    assert _integrity(path) == "ok"
    assert _count(path, "SELECT count(*) FROM notes") == 1
