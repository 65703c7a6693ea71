"""A Delta table written by the package, read by engines it does not
control: Python's `deltalake` and Polars find exactly the live rows a
`MemoryStore` fed the same days holds (deletes, a listing and a key that
moved between days included), and the day ledger reads back through the
package; in a local directory and on S3 (BACKFILL_S3_URL and the AWS
variables of its server: scripts/s3-server.sh starts a local one; without
it the S3 cases skip on a laptop and fail with CI set)."""

import datetime as dt
import os
import uuid

import pytest

import backfill
from backfill import Job, Listing, Record

DAYS = [dt.date(2026, 3, 1) + dt.timedelta(days=n) for n in range(3)]


def _reader(name):
    try:
        return __import__(name)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {name} is not installed (scripts/python-tests.sh installs it)")
        pytest.skip(f"{name} is not installed")


def at(day, hour):
    return dt.datetime.combine(day, dt.time(hour), tzinfo=dt.timezone.utc)


def orders(day):
    records = [Record(f"order:{day}:{i}", day, {"total": i * 10}, at(day, 9)) for i in range(50)]
    if day == DAYS[2]:
        # order 0 of the first day moves here, and one of this day's goes.
        records.append(Record(f"order:{DAYS[0]}:0", day, {"moved": True}, at(day, 10)))
        records.append(Record(f"order:{day}:7", day, None, at(day, 11), deleted=True))
    return records


def write(store):
    backfill.backfill(store, orders, DAYS[0], DAYS[2])
    # A listing of the second day that lacks its last ten orders.
    listing = lambda d: Listing(orders(d)[:40], as_of=at(d, 20))  # noqa: E731
    Job(mode="replace").backfill(store, listing, DAYS[1], DAYS[1])


def live(rows):
    return sorted((r["key"], r["event_date"], r["value"], r["updated_at"]) for r in rows)


def _s3_options():
    """The storage options of the S3 server, as every reader takes them."""
    return {
        "aws_endpoint_url": os.environ["AWS_ENDPOINT_URL"],
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ.get("AWS_REGION", "us-east-1"),
        "aws_allow_http": os.environ.get("AWS_ALLOW_HTTP", "false"),
    }


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path):
    """A new table's URI and the storage options its readers need."""
    if request.param == "local":
        return str(tmp_path / "orders"), None
    bucket = os.environ.get("BACKFILL_S3_URL")
    if not bucket:
        if os.environ.get("CI"):
            pytest.fail("CI is set and there is no S3 server (BACKFILL_S3_URL)")
        pytest.skip("no S3: set BACKFILL_S3_URL (scripts/s3-server.sh starts a local server)")
    return f"{bucket.rstrip('/')}/py-{uuid.uuid4().hex[:12]}/orders", _s3_options()


def test_deltalake_and_polars_read_the_live_rows_of_the_reference_store(where):
    deltalake = _reader("deltalake")
    polars = _reader("polars")
    _reader("pyarrow")
    uri, options = where
    store, memory = backfill.DeltaStore(uri, storage_options=options), backfill.MemoryStore()
    write(store)
    write(memory)
    expected = live(
        {"key": r.key, "event_date": r.event_date, "value": r.value, "updated_at": r.updated_at}
        for r in memory.rows()
    )
    assert len(expected) == 50 + 40 + 50 - 1  # moved: one key less on day one, one more on day three

    table = deltalake.DeltaTable(uri, storage_options=options)
    assert sorted(table.metadata().partition_columns) == ["event_date"]
    frame = polars.read_delta(uri, storage_options=options)
    assert set(frame.columns) >= {"key", "event_date", "value", "updated_at", "deleted"}
    rows = frame.filter(~polars.col("deleted")).to_dicts()
    assert live(rows) == expected
    # Through deltalake's own reader as well (its Arrow data, by way of Polars).
    arrow = polars.from_arrow(table.to_pyarrow_table())
    assert live(arrow.filter(~polars.col("deleted")).to_dicts()) == expected
    # The package reads the same rows, and the day ledger says all three synced.
    assert [r.key for r in store.rows()] == [r.key for r in memory.rows()]
    status = Job().status(store, DAYS[0], DAYS[2])
    assert [state for _, state in status.days] == ["synced"] * 3


def test_a_rerun_commits_no_data_and_a_skipped_one_no_version(tmp_path):
    store = backfill.DeltaStore(str(tmp_path / "orders"))
    backfill.backfill(store, orders, DAYS[0], DAYS[2])
    version = store.version()
    Job(skip_unchanged=True).backfill(store, orders, DAYS[0], DAYS[2])
    assert store.version() == version
    assert store.location.endswith("orders/")



def test_typed_columns_are_real_delta_types_readers_see(tmp_path):
    polars = _reader("polars")
    _reader("deltalake")
    uri = str(tmp_path / "typed")
    columns = ["status:text", "total_cents:integer", "ratio:double", "paid:boolean",
               "customer:text?=customer.id"]
    store = backfill.DeltaStore(uri, columns=columns)

    def fetch(day):
        yield Record(f"o:{day}", day, {"status": "placed", "total_cents": day.day * 100,
                                        "ratio": 0.25, "paid": day.day % 2 == 1,
                                        "customer": {"id": f"c{day.day}"}}, at(day, 9))

    backfill.backfill(store, fetch, DAYS[0], DAYS[2])
    frame = polars.read_delta(uri).filter(~polars.col("deleted")).sort("key")
    assert frame.schema["total_cents"] == polars.Int64
    assert frame.schema["ratio"] == polars.Float64
    assert frame.schema["paid"] == polars.Boolean
    assert frame.schema["status"] == polars.String
    assert frame.select(["status", "total_cents", "paid", "customer"]).rows() == [
        ("placed", 100, True, "c1"), ("placed", 200, False, "c2"), ("placed", 300, True, "c3")]
    # Opened without the declaration, the table is refused, naming a column.
    with pytest.raises(backfill.StoreError, match="status"):
        backfill.DeltaStore(uri)
