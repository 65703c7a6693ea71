"""History from Python: `history=True` on each store (the Delta table's
too), `as_of` reading the
table as it was, `history()` every version with when it was valid, the same
whatever order the days arrive in; a store without history says so."""

import datetime as dt
import os
import uuid

import pytest

import backfill


def at(hour, day=1):
    return dt.datetime(2026, 1, day, hour, tzinfo=dt.timezone.utc)


def _store(kind, tmp_path, name="pipeline.db"):
    if kind == "memory":
        return backfill.MemoryStore(history=True)
    if kind == "sqlite":
        return backfill.SqliteStore(str(tmp_path / name), history=True)
    if kind == "delta":
        return backfill.DeltaStore(str(tmp_path / name.replace(".db", "")), history=True)
    url = os.environ.get("BACKFILL_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI is set and there is no Postgres (BACKFILL_PG_URL)")
        pytest.skip("no Postgres: set BACKFILL_PG_URL")
    return backfill.PostgresStore(url, schema=f"py_{uuid.uuid4().hex[:12]}", history=True)


# Versions of one order, delivered a day at a time: each day's fetch
# returns the order as it was when that day was fetched.
DAYS = {
    dt.date(2026, 1, 1): [backfill.Record("order:1", dt.date(2026, 1, 1), {"status": "open"}, at(9))],
    dt.date(2026, 1, 2): [backfill.Record("order:1", dt.date(2026, 1, 1), {"status": "paid"}, at(12, 2))],
    dt.date(2026, 1, 3): [backfill.Record("order:1", dt.date(2026, 1, 1), {"status": "shipped"}, at(8, 3))],
}


def _sync(store, order):
    job = backfill.Job(lenient_event_dates=True)
    for day in order:
        job.sync_one_day(store, lambda d: DAYS[d], day)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres", "delta"])
def test_history_is_the_same_in_any_order_and_as_of_reads_it(kind, tmp_path):
    days = sorted(DAYS)
    forward = _store(kind, tmp_path, "forward.db")
    backward = _store(kind, tmp_path, "backward.db")
    _sync(forward, days)
    _sync(backward, reversed(days))
    assert forward.history() == backward.history()

    rows = forward.history()
    assert [(r.value, r.valid_from, r.valid_to) for r in rows] == [
        ('{"status":"open"}', at(9), at(12, 2)),
        ('{"status":"paid"}', at(12, 2), at(8, 3)),
        ('{"status":"shipped"}', at(8, 3), None),
    ]
    assert all(not r.deleted for r in rows)
    assert rows[0].record == backfill.Record("order:1", dt.date(2026, 1, 1), {"status": "open"}, at(9))

    assert forward.as_of(at(10)) == [rows[0].record]
    assert forward.as_of("2026-01-02T12:00:00Z") == [rows[1].record]
    assert forward.as_of(at(8)) == []
    assert backward.as_of(at(23, 3)) == backward.rows()


def test_a_store_without_history_says_so(tmp_path):
    store = backfill.SqliteStore(str(tmp_path / "plain.db"))
    with pytest.raises(backfill.StoreError, match="keeps no history"):
        store.as_of(at(9))
    with pytest.raises(backfill.StoreError, match="keeps no history"):
        backfill.MemoryStore().history()
    with pytest.raises(ValueError, match="aware datetime"):
        backfill.MemoryStore(history=True).as_of(dt.datetime(2026, 1, 1))


def test_history_stays_on_and_starts_from_the_rows(tmp_path):
    path = str(tmp_path / "pipeline.db")
    plain = backfill.SqliteStore(path)
    _sync(plain, sorted(DAYS)[:1])
    del plain
    store = backfill.SqliteStore(path, history=True)
    assert [r.value for r in store.history()] == ['{"status":"open"}']
    again = backfill.SqliteStore(path)
    _sync(again, sorted(DAYS)[1:])
    assert len(again.history()) == 3


def test_a_delta_table_keeps_history_once_on_and_readers_see_only_live_rows(tmp_path):
    path = str(tmp_path / "orders")
    plain = backfill.DeltaStore(path)
    _sync(plain, sorted(DAYS)[:1])
    with pytest.raises(backfill.StoreError, match="keeps no history"):
        plain.history()
    store = backfill.DeltaStore(path, history=True)
    assert [r.value for r in store.history()] == ['{"status":"open"}']
    # Opened without `history`, the table keeps it all the same.
    again = backfill.DeltaStore(path)
    _sync(again, sorted(DAYS)[1:])
    assert [r.value for r in again.history()] == [
        '{"status":"open"}',
        '{"status":"paid"}',
        '{"status":"shipped"}',
    ]
    assert again.as_of(at(10, 2)) == [again.history()[0].record]
    # Any reader's live-rows filter leaves the history rows out.
    try:
        import deltalake
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI is set and deltalake is not installed")
        pytest.skip("deltalake is not installed")
    table = deltalake.DeltaTable(path).to_pyarrow_table()
    rows = zip(table["key"].to_pylist(), table["value"].to_pylist(), table["deleted"].to_pylist())
    assert [(k, v) for k, v, deleted in rows if not deleted] == [("order:1", '{"status":"shipped"}')]
