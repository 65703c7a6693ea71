#!/usr/bin/env python3
"""A sample fetch for the `backfill` command: prints one day's orders as
JSON Lines on stdout, with no network and the same output every time.

    python3 examples/fetch.py 2026-01-05                 # 100 orders of that day
    python3 examples/fetch.py 2026-01-05 --records 10000
    python3 examples/fetch.py 2026-01-05 --revision 1    # the same orders, changed an hour later
    python3 examples/fetch.py 2026-01-05 --fail-on 2026-01-05   # upstream error: exit 1

With the command:

    backfill backfill --from 2026-01-01 --to 2026-01-31 \\
        --fetch-cmd 'python3 examples/fetch.py {day}'

Exit status: 0 the day's records were printed; 1 the day failed (with
`--fail-on`); 75 (EX_TEMPFAIL) with `--tempfail-on`, which the command
retries.
"""

import argparse
import datetime
import json
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("day", help="the day, YYYY-MM-DD")
    parser.add_argument("--records", type=int, default=100, help="orders per day (default 100)")
    parser.add_argument("--revision", type=int, default=0,
                        help="a later version of every order: other totals, updated N hours later")
    parser.add_argument("--fail-on", action="append", default=[], metavar="DAY",
                        help="fail this day like a broken upstream (exit 1); repeatable")
    parser.add_argument("--tempfail-on", action="append", default=[], metavar="DAY",
                        help="fail this day like a busy upstream (exit 75, retried); repeatable")
    args = parser.parse_args()

    day = datetime.date.fromisoformat(args.day)
    if args.day in args.fail_on:
        print(f"upstream returned HTTP 500 for {args.day}", file=sys.stderr)
        return 1
    if args.day in args.tempfail_on:
        print(f"upstream returned HTTP 429 for {args.day}; try later", file=sys.stderr)
        return 75

    midnight = datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc)
    seed = day.toordinal()
    out = sys.stdout
    for i in range(args.records):
        updated_at = midnight + datetime.timedelta(seconds=i, hours=args.revision)
        total = ((seed * 31 + i * 7919 + args.revision * 104729) % 100000) / 100
        record = {
            "key": f"order:{args.day}:{i:06d}",
            "event_date": args.day,
            "value": {
                "customer": f"c{(seed + i) % 997:03d}",
                "total": total,
                "status": "shipped" if args.revision else "placed",
            },
            "updated_at": updated_at.isoformat().replace("+00:00", "Z"),
        }
        out.write(json.dumps(record, separators=(",", ":")))
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
