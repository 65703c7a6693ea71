"""Two Airflow DAGs through the one write path. `orders_daily`'s task syncs
its logical date: a re-run, a cleared task or `airflow backfill create`
(a DAG run per day) converges to the same rows. `orders_range` syncs a
range given when it is triggered in one task, one `backfill()` at the
job's concurrency, failing with the days that failed.

    ORDERS_DB_URL=orders.db airflow dags test orders_daily 2026-01-15
    ORDERS_DB_URL=orders.db airflow dags test orders_range \
        -c '{"start": "2026-01-14", "end": "2026-01-23"}'

(`ORDERS_DB_URL` a `postgres://` URL for Postgres; anything else is a
SQLite file path.)
"""

import datetime as dt
import os
from typing import Iterator, Optional, Union

from airflow.exceptions import AirflowFailException
from airflow.sdk import Param, dag, task  # Airflow 3; on Airflow 2: from airflow.decorators import dag, task

from backfill import BackfillError, Job, PostgresStore, Record, SqliteStore, sync_one_day


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


@dag(schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), catchup=False,
     params={"start": Param(type="string", format="date"), "end": Param(type="string", format="date")})
def orders_range() -> None:
    @task
    def sync_range(params: Optional[dict[str, str]] = None) -> str:
        assert params is not None
        start, end = dt.date.fromisoformat(params["start"]), dt.date.fromisoformat(params["end"])
        try:
            report = Job(concurrency=4).backfill(store(), fetch, start, end)
        except BackfillError as failed:
            days = "; ".join(f"{day}: {error}" for day, error in failed.report.failed)
            raise AirflowFailException(f"{len(failed.report.failed)} days failed: {days}") from None
        return f"days synced: {len(report.days)}, rows written: {report.totals.written}"

    sync_range()


orders_range()
