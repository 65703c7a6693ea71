"""One configuration file for the command line and the package: a profile
of ``backfill.toml`` drives ``backfill backfill`` and ``Job.from_config``
to the same run, row for row and count for count."""

import datetime as dt
import decimal
import json
import os
import sqlite3
import subprocess

import pytest

import backfill

DAYS = [dt.date(2026, 1, d) for d in (1, 2, 3)]

PROFILE = """
profile = "shop"

[profiles.shop]
store = "sqlite://shop.db"
table = "orders"
columns = ["total:numeric", "customer:text?=customer.id"]
fetch_files = "days/{day}.jsonl"
mode = "replace"
max_delete_fraction = "100%"
retries = 0
"""


def write_days(root, version):
    """Each day's JSON Lines; `version` 2 drops a key of each day and
    changes another (a listing that deletes and updates)."""
    (root / "days").mkdir(exist_ok=True)
    for day in DAYS:
        # Each listing is true as of just after its versions.
        lines = [f'{{"as_of":"{day}T0{version}:30:00Z"}}']
        for i in range(5):
            if version == 2 and i == 0:
                continue
            total = f"{i}.{day.day}0" if version == 1 or i != 1 else "99.99"
            value = f'{{"total":{total},"customer":{{"id":"c{i}"}}}}'
            at = f"{day}T0{version}:00:00Z"
            lines.append(
                f'{{"key":"o{day.day}-{i}","event_date":"{day}","value":{value},"updated_at":"{at}"}}'
            )
        (root / "days" / f"{day}.jsonl").write_text("\n".join(lines) + "\n")


def fetch_files(root):
    """The package's fetch of the same files the command line reads."""

    def fetch(day):
        header, *lines = (root / "days" / f"{day}.jsonl").read_text().splitlines()
        records = []
        for line in lines:
            # Decimals keep the numbers' text, as the command line does.
            r = json.loads(line, parse_float=decimal.Decimal)
            records.append(backfill.Record(
                key=r["key"], event_date=r["event_date"], value=r["value"],
                updated_at=r["updated_at"],
            ))
        return backfill.Listing(records, as_of=json.loads(header)["as_of"])

    return fetch


def stored(db):
    """Every row, typed columns included, and the ledger's counts."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT key, event_date, value, updated_at, deleted, total, customer "
            "FROM orders ORDER BY key"
        ).fetchall()
        ledger = con.execute(
            "SELECT day, mode, inserted, updated, unchanged, stale, deleted, unlisted, digest "
            "FROM backfill_days WHERE records_table = 'orders' ORDER BY day"
        ).fetchall()
    finally:
        con.close()
    return rows, ledger


def test_a_profile_drives_the_command_line_and_the_package_alike(tmp_path, cli, monkeypatch):
    by_cli, by_package = tmp_path / "cli", tmp_path / "package"
    for root in (by_cli, by_package):
        root.mkdir()
        (root / "backfill.toml").write_text(PROFILE)
    for version in (1, 2):
        write_days(by_cli, version)
        write_days(by_package, version)
        env = {k: v for k, v in os.environ.items() if not k.startswith("BACKFILL_")}
        done = subprocess.run(
            [cli, "backfill", "--from", str(DAYS[0]), "--to", str(DAYS[-1])],
            cwd=by_cli, env=env, capture_output=True, text=True,
        )
        assert done.returncode == 0, done.stderr
        monkeypatch.chdir(by_package)
        job = backfill.Job.from_config()
        store = backfill.store_from_config()
        job.backfill(store, fetch_files(by_package), DAYS[0], DAYS[-1])
        del store
    cli_rows, cli_ledger = stored(by_cli / "shop.db")
    package_rows, package_ledger = stored(by_package / "shop.db")
    assert cli_rows == package_rows
    # Replace mode came from the profile: each day's dropped key is a
    # tombstone, its typed columns empty.
    tombstones = [r for r in cli_rows if r[4]]
    assert [r[0] for r in tombstones] == ["o1-0", "o2-0", "o3-0"]
    assert all(r[5] is None and r[6] is None for r in tombstones)
    assert ("o1-1", "2026-01-01", '{"customer":{"id":"c1"},"total":99.99}') == cli_rows[1][:3]
    assert [d[1:8] for d in cli_ledger] == [d[1:8] for d in package_ledger]
    # The second run: 4 newer versions, 1 key the listing lacks.
    assert [d[1:8] for d in cli_ledger] == [("replace", 0, 4, 0, 0, 1, 1)] * 3
    assert [d[8] for d in cli_ledger] == [d[8] for d in package_ledger]


def test_keyword_arguments_win_over_the_profile(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "backfill.toml").write_text(PROFILE)
    store = backfill.store_from_config()
    calls = []

    def flaky(day):
        calls.append(day)
        raise backfill.Transient("busy")

    # The profile says no retry ...
    with pytest.raises(backfill.BackfillError):
        backfill.Job.from_config().backfill(store, flaky, DAYS[0], DAYS[0])
    assert len(calls) == 1
    # ... a keyword argument says two.
    calls.clear()
    job = backfill.Job.from_config(retries=2, retry_delay=0.01, max_retry_delay=0.01)
    with pytest.raises(backfill.BackfillError):
        job.backfill(store, flaky, DAYS[0], DAYS[0])
    assert len(calls) == 3


def test_a_bad_profile_names_the_file_the_line_and_the_key(tmp_path):
    path = tmp_path / "backfill.toml"
    path.write_text('[profiles.default]\nstore = "sqlite://x.db"\nretry_delay = "soon"\n')
    with pytest.raises(ValueError, match=r"backfill.toml:3: retry_delay: `soon` is not a duration"):
        backfill.Job.from_config(path)
    path.write_text('[profiles.default]\nstore = "postgres://etl@h/db"\npassword_env = "NO_SUCH_VAR_X"\n')
    with pytest.raises(ValueError, match=r"backfill.toml:3: password_env: the environment variable NO_SUCH_VAR_X is not set"):
        backfill.store_from_config(path)
    with pytest.raises(ValueError, match=r"no profile \"prod\" \(the file has default\)"):
        backfill.Job.from_config(path, profile="prod")
