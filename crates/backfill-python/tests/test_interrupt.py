"""Ctrl-C in a long backfill: no new day starts, the days in flight commit
or roll back whole, and KeyboardInterrupt carries the partial report; the
rest is resumable with only="missing"."""

import datetime as dt
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import backfill

SCRIPT = """
import datetime as dt, sys, time
import pytest

import backfill

store = backfill.SqliteStore(sys.argv[1])
at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

def fetch(day):
    time.sleep(0.2)
    return [backfill.Record(f"k:{day}:{i}", day, "v", at) for i in range(100)]

print("started", flush=True)
try:
    backfill.Job(concurrency=2).backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 31))
except KeyboardInterrupt as interrupt:
    report = interrupt.report
    print("interrupted", len(report.days), len(report.skipped), flush=True)
    sys.exit(130)
print("finished", flush=True)
"""


def test_ctrl_c_stops_the_run_whole_and_the_rest_resumes(tmp_path):
    db = str(tmp_path / "pipeline.db")
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    child = subprocess.Popen(
        [sys.executable, str(script), db], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "started"
    time.sleep(1.0)
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 130, out
    word, done, skipped = out.split()
    done, skipped = int(done), int(skipped)
    assert word == "interrupted"
    assert 0 < done < 31 and skipped > 0, out

    store = backfill.SqliteStore(db)
    per_day = {}
    for row in store.rows():
        per_day[row.event_date] = per_day.get(row.event_date, 0) + 1
    assert set(per_day.values()) == {100}, "every day is whole or absent"
    assert len(per_day) == done

    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    fetched = []

    def fetch(day):
        fetched.append(day)
        return [backfill.Record(f"k:{day}:{i}", day, "v", at) for i in range(100)]

    rest = backfill.Job(only="missing").backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 31))
    assert len(fetched) == 31 - done
    assert rest.totals.inserted == 100 * (31 - done)
    assert len(store.rows()) == 3100


CALLBACK_SCRIPT = """
import datetime as dt, logging, sys, time
import pytest

import backfill

store = backfill.MemoryStore()
at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
where = sys.argv[1]

def fetch(day):
    return [backfill.Record(f"k:{day}", day, "v", at)]

def on_event(event):
    # Python code on the calling thread, where a Ctrl-C lands.
    time.sleep(0.05)

class Slow(logging.Handler):
    def emit(self, record):
        time.sleep(0.05)

kwargs = {}
if where == "callback":
    kwargs["on_event"] = on_event
else:
    logging.getLogger("backfill").addHandler(Slow())
    logging.getLogger("backfill").setLevel(logging.INFO)
print("started", flush=True)
try:
    backfill.Job(**kwargs).backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2027, 12, 31))
except KeyboardInterrupt as interrupt:
    print("interrupted", len(interrupt.report.days), flush=True)
    sys.exit(130)
print("finished", flush=True)
"""


@pytest.mark.parametrize("where", ["callback", "log-handler"])
def test_ctrl_c_inside_a_callback_or_log_handler_stops_the_run(tmp_path, where):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(CALLBACK_SCRIPT))
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, str(script), where], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        assert child.stdout.readline().strip() == "started"
        time.sleep(1.0)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 130, (out, err)
        word, done = out.split()
        assert word == "interrupted" and 0 < int(done) < 730, out
        assert "KeyboardInterrupt" not in err, err


def test_a_keyboard_interrupt_raised_by_a_callback_stops_the_run():
    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    started = []

    def on_event(event):
        if event.kind == "day_started":
            started.append(event.day)
        if event.kind == "day_finished" and len(started) == 3:
            raise KeyboardInterrupt

    def fetch(day):
        return [backfill.Record(f"k:{day}", day, "v", at)]

    store = backfill.MemoryStore()
    with pytest.raises(KeyboardInterrupt) as raised:
        backfill.Job(on_event=on_event).backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 3, 31))
    report = raised.value.report
    # No day starts after the stop; the days in flight finish whole.
    assert len(started) == 3
    assert len(report.days) == 3
    assert len(store.rows()) == 3
