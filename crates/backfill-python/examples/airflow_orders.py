"""An Airflow DAG whose daily task syncs its logical date through the one
write path: a re-run, a cleared task or `airflow dags backfill` converges to
the same rows.

    ORDERS_DB_URL=orders.db airflow dags test orders_daily 2026-01-15

(`ORDERS_DB_URL` a `postgres://` URL for Postgres; anything else is a
SQLite file path.)
"""

import datetime as dt
import os
from typing import Iterator, Optional, Union

from airflow.sdk import dag, task  # Airflow 3; on Airflow 2: from airflow.decorators import dag, task

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


@dag(schedule="@daily", start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), catchup=False)
def orders_daily() -> None:
    @task
    def sync_orders(ds: Optional[str] = None) -> str:
        report = sync_one_day(store(), fetch, ds)
        return f"{report.day}: {report.counts}"

    sync_orders()


orders_daily()
