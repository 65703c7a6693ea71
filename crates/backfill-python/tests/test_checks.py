"""Per-day checks from Python: a day that came back at a tenth of the days
around it is flagged (or refused), weekends at 60 % are not, and a day a
person accepted stays accepted through re-runs, on every store."""

import datetime as dt
import os
import uuid

import pytest

import backfill

FIRST = dt.date(2026, 1, 1)
SMALL = dt.date(2026, 2, 10)
LAST = FIRST + dt.timedelta(days=59)


def fetch(day):
    if day == SMALL:
        n = 20
    elif day.weekday() >= 5:
        n = 120
    else:
        n = 200
    at = dt.datetime.combine(day, dt.time(12), tzinfo=dt.timezone.utc)
    return [backfill.Record(f"order:{day}:{i}", day, {"n": i}, at) for i in range(n)]


def _store(kind, tmp_path, name):
    if kind == "memory":
        return backfill.MemoryStore()
    if kind == "sqlite":
        return backfill.SqliteStore(str(tmp_path / f"{name}.db"))
    if kind == "delta":
        return backfill.DeltaStore(str(tmp_path / name))
    url = os.environ.get("BACKFILL_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI is set and there is no Postgres (BACKFILL_PG_URL)")
        pytest.skip("no Postgres: set BACKFILL_PG_URL")
    return backfill.PostgresStore(url, schema=f"py_{uuid.uuid4().hex[:12]}")


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres", "delta"])
def test_a_tenth_of_a_day_is_flagged_or_refused_and_acceptance_outlives_reruns(kind, tmp_path):
    # The default: warn. Written, flagged in the report and the status.
    store = _store(kind, tmp_path, "warned")
    job = backfill.Job(concurrency=2)
    report = job.backfill(store, fetch, FIRST, LAST)
    flagged = [d for d in report.days if d.flag is not None]
    assert [d.day for d in flagged] == [SMALL]
    assert flagged[0].flag.startswith("volume check: 20 records fetched, fewer than 50")
    assert flagged[0].counts.inserted == 20
    status = job.status(store, FIRST, LAST)
    assert [day for day, _ in status.flagged] == [SMALL]
    assert "1 synced flagged by a check" in str(status)

    # fail: refused, nothing of it written, until it is accepted.
    store = _store(kind, tmp_path, "strict")
    strict = backfill.Job(check_volume="fail")
    with pytest.raises(backfill.BackfillError) as raised:
        strict.backfill(store, fetch, FIRST, LAST)
    report = raised.value.report
    assert len(report.days) == 59
    assert [day for day, _ in report.failed] == [SMALL]
    assert "volume check: 20 records fetched" in report.failed[0][1]
    assert strict.status(store, FIRST, LAST).days[40] == (SMALL, "failed")

    store.accept(SMALL)
    for _ in range(2):
        report = strict.backfill(store, fetch, FIRST, LAST)
        assert report.failed == [] and all(d.flag is None for d in report.days)
    status = strict.status(store, FIRST, LAST)
    assert status.accepted == [SMALL] and status.flagged == []
    assert status.days[40] == (SMALL, "synced")

    store.accept(SMALL.isoformat(), undo=True)
    status = strict.status(store, FIRST, LAST)
    assert status.accepted == [] and [day for day, _ in status.flagged] == [SMALL]


def test_check_settings_are_checked_when_the_job_is_made():
    with pytest.raises(ValueError, match="check_volume"):
        backfill.Job(check_volume="error")
    with pytest.raises(ValueError, match="check_fraction"):
        backfill.Job(check_fraction=1.5)
    assert backfill.Job(check_volume="off", check_empty="off", check_window=7) is not None


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres", "delta"])
def test_status_says_how_long_each_day_took(kind, tmp_path):
    store = _store(kind, tmp_path, "timed")
    slow = dt.date(2026, 1, 2)

    def timed(day):
        if day == slow:
            import time

            time.sleep(0.3)
        return fetch(day)

    job = backfill.Job()
    job.backfill(store, timed, FIRST, FIRST + dt.timedelta(days=2))
    timings = job.status(store, FIRST, LAST).timings
    assert [day for day, _, _ in timings] == [FIRST + dt.timedelta(days=i) for i in range(3)]
    for day, fetched, written in timings:
        assert isinstance(fetched, dt.timedelta) and isinstance(written, dt.timedelta)
        assert written >= dt.timedelta(0)
        if day == slow:
            assert dt.timedelta(seconds=0.3) <= fetched < dt.timedelta(seconds=30)
        else:
            assert fetched < dt.timedelta(seconds=0.3)
