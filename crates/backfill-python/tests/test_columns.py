"""Typed columns from Python: declared on the store as the command line's
--column, kept in the table's own types, and a record that does not fit
fails its day with the column named."""

import datetime as dt
import os
import sqlite3
import uuid

import pytest

import backfill
from backfill import BackfillError, Record

UTC = dt.timezone.utc
DAYS = [dt.date(2026, 4, d) for d in (1, 2, 3)]
COLUMNS = ["status:text", "total_cents:integer", "customer:text?=customer.id"]


def fetch(day):
    total = "12 EUR" if day == DAYS[1] else day.day * 100
    yield Record(f"o:{day}", day, {"status": "placed", "total_cents": total,
                                    "customer": {"id": f"c{day.day}"}},
                 dt.datetime(day.year, day.month, day.day, 9, tzinfo=UTC))


def run(store):
    with pytest.raises(BackfillError) as raised:
        backfill.backfill(store, fetch, DAYS[0], DAYS[-1])
    report = raised.value.report
    assert [d.day for d in report.days] == [DAYS[0], DAYS[2]]
    (day, error), = report.failed
    assert day == DAYS[1]
    assert "column total_cents (path total_cents): the field is not an integer" in error


def test_sqlite_keeps_typed_columns(tmp_path):
    path = tmp_path / "orders.db"
    run(backfill.SqliteStore(str(path), columns=COLUMNS))
    rows = sqlite3.connect(path).execute(
        "SELECT status, total_cents, customer FROM backfill_records ORDER BY key").fetchall()
    assert rows == [("placed", 100, "c1"), ("placed", 300, "c3")]
    # Opened without the declaration, the table is refused, naming a column.
    with pytest.raises(backfill.StoreError, match="status"):
        backfill.SqliteStore(str(path))
    # Unless changes are allowed: the undeclared columns are dropped.
    backfill.SqliteStore(str(path), columns=["status:text"], allow_column_changes=True)
    names = [r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(backfill_records)")]
    assert "status" in names and "total_cents" not in names and "customer" not in names


def test_postgres_keeps_typed_columns():
    url = os.environ.get("BACKFILL_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI is set and there is no Postgres (BACKFILL_PG_URL)")
        pytest.skip("no Postgres: set BACKFILL_PG_URL")
    schema = f"py_{uuid.uuid4().hex[:12]}"
    store = backfill.PostgresStore(url, schema=schema, columns=COLUMNS)
    run(store)
    assert [r.key for r in store.rows()] == [f"o:{DAYS[0]}", f"o:{DAYS[2]}"]
    with pytest.raises(backfill.StoreError, match="total_cents"):
        backfill.PostgresStore(url, schema=schema, columns=["status:text", "total_cents:double",
                                                            "customer:text?=customer.id"])
    # Allowed, the column is remade as a double and filled from the rows.
    backfill.PostgresStore(url, schema=schema, allow_column_changes=True,
                           columns=["status:text", "total_cents:double",
                                    "customer:text?=customer.id"])


def test_a_bad_declaration_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="key"):
        backfill.SqliteStore(str(tmp_path / "x.db"), columns=["key:text"])
