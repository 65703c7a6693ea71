"""A Dagster daily-partitioned asset whose backfills are one run: a range
of partitions — a month launched from the UI, or
`--partition-range` on the command line — is handed to one `backfill()`
at the job's concurrency, and each day comes back as its own partition:
materialized with its counts as metadata, or failed with its error.
Materializing a partition or a range again converges to the same rows.

    ORDERS_DB_URL=sqlite:orders.db dagster asset materialize \
        -f examples/dagster_orders.py --select orders \
        --partition-range 2026-01-14...2026-01-23

(`ORDERS_DB_URL` a `postgres://` URL for Postgres; anything else is a
SQLite file path.)
"""

import datetime as dt
import os
from typing import Iterator, Union

import dagster as dg

from backfill import BackfillError, Job, PostgresStore, Record, SqliteStore


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


@dg.asset(
    partitions_def=dg.DailyPartitionsDefinition(start_date="2026-01-01"),
    # A backfill of any range is one run, not one per day.
    backfill_policy=dg.BackfillPolicy.single_run(),
    # Each day is reported on its own below.
    output_required=False,
)
def orders(context: dg.AssetExecutionContext) -> Iterator[dg.AssetMaterialization]:
    days = context.partition_key_range
    start, end = dt.date.fromisoformat(days.start), dt.date.fromisoformat(days.end)
    try:
        report = Job(concurrency=4).backfill(store(), fetch, start, end)
    except BackfillError as failed:
        report = failed.report
    for day in report.days:
        c = day.counts
        metadata: dict[str, Union[int, str]] = {
            "inserted": c.inserted, "updated": c.updated, "deleted": c.deleted,
            "unchanged": c.unchanged, "stale": c.stale, "run_id": report.run_id or ""}
        if day.flag:
            metadata["flag"] = day.flag
        yield dg.AssetMaterialization(asset_key=context.asset_key, partition=str(day.day),
                                      metadata=metadata)
    context.log.info(f"days synced: {len(report.days)}, failed: {len(report.failed)}, "
                     f"rows written: {report.totals.written}")
    if report.failed:
        # The days not materialized above are this run's failed partitions.
        raise dg.Failure(description="\n".join(f"{day}: {error}" for day, error in report.failed))


defs = dg.Definitions(assets=[orders])
