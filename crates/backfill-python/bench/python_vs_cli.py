"""The same 300 000 records (the bench's dataset: 30 days x 10 000) through
a Python generator of dicts and through the command line's JSON Lines path,
into the same Postgres or SQLite, at concurrency 2; prints both times and
their ratio (the command line's time over Python's: 1.00 = as fast).

    python bench/python_vs_cli.py --store postgres://bench:bench@127.0.0.1/bench --cli target/release/backfill
    python bench/python_vs_cli.py --store sqlite --cli target/release/backfill

Run it with a release build of the package (`maturin develop --release`)
and of the command (`cargo build --release -p backfill-cli`).
"""

import argparse
import datetime as dt
import hashlib
import json
import os
import subprocess
import tempfile
import time
import uuid

import backfill

DAYS, PER_DAY = 30, 10_000
START = dt.date(2026, 1, 1)


def day_records(day):
    midnight = dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)
    for i in range(PER_DAY):
        yield {
            "key": f"event:{day}:{i}",
            "event_date": day,
            "value": hashlib.sha256(f"{day}:{i}".encode()).hexdigest(),
            "updated_at": midnight + dt.timedelta(seconds=i),
        }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True, help="a postgres:// URL, or sqlite")
    parser.add_argument("--cli", required=True, help="the backfill binary")
    args = parser.parse_args()
    end = START + dt.timedelta(days=DAYS - 1)
    work = tempfile.mkdtemp()

    for d in range(DAYS):
        day = START + dt.timedelta(days=d)
        with open(os.path.join(work, f"{day}.jsonl"), "w") as out:
            for r in day_records(day):
                line = dict(r, event_date=str(day), updated_at=r["updated_at"].isoformat())
                out.write(json.dumps(line) + "\n")

    def python_store():
        if args.store == "sqlite":
            return backfill.SqliteStore(os.path.join(work, f"py-{uuid.uuid4().hex}.db"))
        return backfill.PostgresStore(args.store, schema=f"pybench_{uuid.uuid4().hex[:8]}")

    def cli_store():
        if args.store == "sqlite":
            return ["--store", f"sqlite://{os.path.join(work, f'cli-{uuid.uuid4().hex}.db')}"]
        return ["--store", args.store, "--schema", f"clibench_{uuid.uuid4().hex[:8]}"]

    # The same dicts made beforehand, as the command line's files were:
    # what is left is the package's own cost, converting them.
    prepared = {START + dt.timedelta(days=d): list(day_records(START + dt.timedelta(days=d)))
                for d in range(DAYS)}

    def prepared_records(day):
        return iter(prepared[day])

    best_py, best_prepared, best_cli = float("inf"), float("inf"), float("inf")
    for _ in range(3):
        for fetch in (day_records, prepared_records):
            store = python_store()
            started = time.perf_counter()
            report = backfill.Job(concurrency=2).backfill(store, fetch, START, end)
            took = time.perf_counter() - started
            assert report.totals.inserted == DAYS * PER_DAY
            if fetch is day_records:
                best_py = min(best_py, took)
            else:
                best_prepared = min(best_prepared, took)

        started = time.perf_counter()
        subprocess.run(
            [args.cli, "backfill", "--from", str(START), "--to", str(end), "--concurrency", "2",
             "--fetch-files", os.path.join(work, "{day}.jsonl"), *cli_store()],
            check=True, capture_output=True,
        )
        best_cli = min(best_cli, time.perf_counter() - started)
    print(f"command line, JSON Lines files: {best_cli:.3f} s (best of 3, {DAYS * PER_DAY} records, "
          f"concurrency 2)")
    print(f"python, a generator making the dicts (sha256 each): {best_py:.3f} s, ratio {best_cli / best_py:.2f}")
    print(f"python, the dicts made beforehand: {best_prepared:.3f} s, ratio {best_cli / best_prepared:.2f}")


if __name__ == "__main__":
    main()
