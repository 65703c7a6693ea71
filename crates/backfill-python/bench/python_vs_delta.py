"""The same 300 000 records (30 days x 10 000, random UUID keys, a Python
generator of dicts) into a fresh local Delta table partitioned by
`event_date`, three ways:

- backfill: `backfill.Job().backfill(backfill.DeltaStore(path), ...)`;
- by hand: each day an Arrow table handed to delta-rs's Python binding,
  `DeltaTable.merge(predicate="t.key = s.key")` with
  `when_matched_update_all(predicate="s.updated_at > t.updated_at")` (newer
  wins) and `when_not_matched_insert_all()`, one merge per day (the first
  day `write_deltalake`);
- dlt: its filesystem destination with `table_format="delta"` and
  `write_disposition="merge"` keyed on `key`, partitioned by `event_date`,
  one `pipeline.run` of the whole generator.

Then each again on the table it filled, identical: the time, the table
versions it committed and the rows of the data files it added (read from
the table's `_delta_log`, the ledger's own files left out).

Each day's dicts are made once, before anything is timed (making them
takes Python about 1.2 s for the 300 000, the same for every writer):
the times are each writer's own, from the dicts it is handed to the
committed table. `--concurrency N` runs backfill's `Job` with N days at
once.

    python bench/python_vs_delta.py [--days 30] [--per-day 10000] [--concurrency 1]

It needs `dlt[deltalake]` and `deltalake` beside the package, in a virtual
environment of the bench's own (BENCHMARKS.md has the commands); the tests
never import dlt.
"""

import argparse
import datetime as dt
import glob
import hashlib
import json
import os
import tempfile
import time
import uuid

import dlt
import deltalake
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

import backfill

START = dt.date(2026, 1, 1)
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("event_date", pa.date32()),
        ("value", pa.string()),
        ("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)


def day_records(day, per_day):
    """Record `i` of `day`: a random-looking UUID key (the same in every
    run), the SHA-256 of `day:i` as its value, midnight + i seconds."""
    midnight = dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)
    for i in range(per_day):
        digest = hashlib.sha256(f"{day}:{i}".encode()).digest()
        yield {
            "key": str(uuid.UUID(bytes=digest[:16], version=4)),
            "event_date": day,
            "value": digest.hex(),
            "updated_at": midnight + dt.timedelta(seconds=i),
        }


def made_days(days, per_day):
    """Every day's dicts, made once: `{day: [dict, ...]}`."""
    return {
        START + dt.timedelta(days=n): list(day_records(START + dt.timedelta(days=n), per_day))
        for n in range(days)
    }


def versions(path):
    """The table's committed versions, from its log."""
    return sorted(int(os.path.basename(p)[:-5]) for p in glob.glob(f"{path}/_delta_log/*.json"))


def rows_added(path, since):
    """Rows of the data files that versions after `since` added, a file
    holding only backfill's ledger row left out."""
    rows = 0
    for version in versions(path):
        if version <= since:
            continue
        with open(f"{path}/_delta_log/{version:020}.json") as log:
            for line in log:
                add = json.loads(line).get("add")
                if not add or not add.get("stats"):
                    continue
                stats = json.loads(add["stats"])
                if str(stats.get("minValues", {}).get("key", "")).startswith("\0backfill.ledger:"):
                    continue
                rows += stats.get("numRecords", 0)
    return rows


def twice(path, once):
    """`once()` twice on the table at `path`: each run's seconds, new
    versions and rows added."""
    runs = []
    for _ in range(2):
        before = max(versions(path), default=-1)
        started = time.perf_counter()
        once()
        seconds = time.perf_counter() - started
        runs.append((seconds, len([v for v in versions(path) if v > before]), rows_added(path, before)))
    return runs


def ours(root, made, concurrency):
    path = f"{root}/backfill"
    store = backfill.DeltaStore(path)
    end = max(made)
    job = backfill.Job(concurrency=concurrency)
    return twice(path, lambda: job.backfill(store, lambda d: made[d], START, end))


def by_hand(root, made):
    path = f"{root}/by_hand"

    def once():
        for day, records in made.items():
            batch = pa.Table.from_pylist(records, schema=SCHEMA)
            if not os.path.isdir(f"{path}/_delta_log"):
                write_deltalake(path, batch, partition_by=["event_date"])
                continue
            (
                DeltaTable(path)
                .merge(batch, predicate="t.key = s.key", source_alias="s", target_alias="t")
                .when_matched_update_all(predicate="s.updated_at > t.updated_at")
                .when_not_matched_insert_all()
                .execute()
            )

    return twice(path, once)


def theirs(root, made):
    pipeline = dlt.pipeline(
        pipeline_name=f"delta_{uuid.uuid4().hex[:8]}",
        pipelines_dir=f"{root}/dlt_pipelines",
        destination=dlt.destinations.filesystem(bucket_url=f"file://{root}/dlt"),
        dataset_name="bench",
    )

    @dlt.resource(
        name="records",
        primary_key="key",
        write_disposition="merge",
        table_format="delta",
        columns={"event_date": {"partition": True}},
    )
    def records():
        for records in made.values():
            yield from records

    return twice(f"{root}/dlt/bench/records", lambda: pipeline.run(records()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    total = args.days * args.per_day
    made = made_days(args.days, args.per_day)
    with tempfile.TemporaryDirectory() as root:
        b = ours(root, made, args.concurrency)
        h = by_hand(root, made)
        d = theirs(root, made)
    assert b[0][2] == total, b
    print(f"{total} records ({args.days} days x {args.per_day}, random UUID keys) into a local Delta table")
    for name, runs in [
        (f"backfill (Job(concurrency={args.concurrency}))", b),
        (f"hand-rolled merge (deltalake {deltalake.__version__})", h),
        (f"dlt {dlt.__version__} merge, table_format=delta", d),
    ]:
        (s1, v1, r1), (s2, v2, r2) = runs
        print(f"{name}: first run {s1:.2f} s ({v1} versions, {r1} rows), "
              f"re-run {s2:.2f} s ({v2} versions, {r2} rows)")
    print(f"backfill is {h[0][0] / b[0][0]:.1f}x faster than the hand-rolled merge on the first run, "
          f"{h[1][0] / b[1][0]:.1f}x on the re-run")
    print(f"backfill is {d[0][0] / b[0][0]:.1f}x faster than dlt on the first run, "
          f"{d[1][0] / b[1][0]:.1f}x on the re-run")


if __name__ == "__main__":
    main()
