"""A Dagster daily-partitioned asset: each partition is one day synced
through the one write path, so materializing a partition again, or a
backfill of a range, converges to the same rows.

    ORDERS_DB_URL=sqlite:orders.db dagster asset materialize \
        -f examples/dagster_orders.py --select orders --partition 2026-01-15

(`ORDERS_DB_URL` a `postgres://` URL for Postgres; anything else is a
SQLite file path.)
"""

import datetime as dt
import os
from typing import Iterator, Union

import dagster as dg

from backfill import PostgresStore, Record, SqliteStore, sync_one_day


def fetch(day: dt.date) -> Iterator[Record]:
    # Replace with a real upstream call. Must be deterministic for a given day.
    at = dt.datetime(day.year, day.month, day.day, 9, 30, tzinfo=dt.timezone.utc)
    for i, total in enumerate([1250, 990]):
        yield Record(key=f"order:{day}:{i}", event_date=day,
                     value={"total_cents": total}, updated_at=at)


def store() -> Union[PostgresStore, SqliteStore]:
    url = os.environ.get("ORDERS_DB_URL", "orders.db")
    if url.startswith("postgres"):
        return PostgresStore(url, schema="sales")
    return SqliteStore(url.removeprefix("sqlite:"))


@dg.asset(partitions_def=dg.DailyPartitionsDefinition(start_date="2026-01-01"))
def orders(context: dg.AssetExecutionContext) -> None:
    report = sync_one_day(store(), fetch, context.partition_key)
    context.log.info(f"{report.day}: {report.counts}")


defs = dg.Definitions(assets=[orders])
