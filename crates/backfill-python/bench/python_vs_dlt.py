"""The same 300 000 records (30 days x 10 000, a Python generator of dicts)
into the same Postgres through backfill and through dlt's `merge` (its
default strategy, keyed on `key`): each run's time, then an identical
re-run's time and the rows it wrote to the data table (inserted, updated
and deleted tuples, from `pg_stat_user_tables`).

    python bench/python_vs_dlt.py postgres://bench:bench@127.0.0.1/bench

It needs `dlt[postgres]` beside the package, in a virtual environment of
the bench's own (BENCHMARKS.md has the commands); the tests never import
dlt.
"""

import datetime as dt
import hashlib
import sys
import time
import uuid

import dlt
import psycopg2

import backfill

DAYS, PER_DAY = 30, 10_000
START = dt.date(2026, 1, 1)
END = START + dt.timedelta(days=DAYS - 1)


def day_records(day):
    midnight = dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)
    for i in range(PER_DAY):
        yield {
            "key": f"event:{day}:{i}",
            "event_date": day,
            "value": hashlib.sha256(f"{day}:{i}".encode()).hexdigest(),
            "updated_at": midnight + dt.timedelta(seconds=i),
        }


def all_records():
    for d in range(DAYS):
        yield from day_records(START + dt.timedelta(days=d))


def written(url, schema, table):
    """Tuples inserted, updated and deleted in `schema.table` so far."""
    # An idle session reports its statistics within 10 s (PGSTAT_IDLE_INTERVAL).
    time.sleep(11)
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND relname = %s",
            (schema, table),
        )
        return int(cur.fetchone()[0])


def ours(url):
    schema = f"pydlt_ours_{uuid.uuid4().hex[:8]}"
    store = backfill.PostgresStore(url, schema=schema)
    job = backfill.Job(concurrency=2)
    runs = []
    for _ in range(2):
        before = written(url, schema, "backfill_records")
        started = time.perf_counter()
        job.backfill(store, day_records, START, END)
        runs.append((time.perf_counter() - started, written(url, schema, "backfill_records") - before))
    return runs


def theirs(url):
    dataset = f"pydlt_dlt_{uuid.uuid4().hex[:8]}"
    pipeline = dlt.pipeline(
        pipeline_name=dataset,
        destination=dlt.destinations.postgres(credentials=url),
        dataset_name=dataset,
    )

    @dlt.resource(name="records", primary_key="key", write_disposition="merge")
    def records():
        yield from all_records()

    runs = []
    for _ in range(2):
        before = written(url, dataset, "records")
        started = time.perf_counter()
        pipeline.run(records())
        runs.append((time.perf_counter() - started, written(url, dataset, "records") - before))
    return runs


def main():
    url = sys.argv[1]
    (b1, bw1), (b2, bw2) = ours(url)
    (d1, dw1), (d2, dw2) = theirs(url)
    assert bw1 == DAYS * PER_DAY, bw1
    print(f"{DAYS * PER_DAY} records, Postgres at {url.split('@')[-1]}")
    print(f"backfill (Job(concurrency=2)): first run {b1:.2f} s ({bw1} rows written), "
          f"re-run {b2:.2f} s ({bw2} rows written)")
    print(f"dlt {dlt.__version__} merge:               first run {d1:.2f} s ({dw1} rows written), "
          f"re-run {d2:.2f} s ({dw2} rows written)")
    print(f"backfill is {d1 / b1:.1f}x faster on the first run, {d2 / b2:.1f}x on the re-run")


if __name__ == "__main__":
    main()
