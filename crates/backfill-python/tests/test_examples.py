"""The examples run as a user runs them, each in a directory of its own."""

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def run(name, cwd):
    done = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, name)],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_quickstart_syncs_31_days(tmp_path):
    out = run("quickstart.py", tmp_path).stdout
    assert "31 of 31 days synced, rows written: 62" in out
    assert (tmp_path / "pipeline.db").exists()


def test_the_original_librarys_usage_runs_unchanged(tmp_path):
    done = run("original_api.py", tmp_path)
    assert done.stdout.count("31 days synced, 93 rows inserted") == 2
    assert done.stdout.count("3 days: 3 synced, 0 failed, 0 missing") == 2
    # The transient failure was retried, and said so on the `backfill` logger.
    assert "2026-03-13 attempt 1 failed, retrying" in done.stderr


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import dagster"], capture_output=True).returncode != 0,
    reason="dagster is not installed here (the bench's environment has it)",
)
def test_the_dagster_asset_materializes_a_partition(tmp_path):
    env = dict(os.environ, ORDERS_DB_URL=str(tmp_path / "orders.db"), DAGSTER_HOME=str(tmp_path))
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize",
         "-f", os.path.join(EXAMPLES, "dagster_orders.py"), "--select", "orders",
         "--partition", "2026-01-15"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "2026-01-15: Counts(inserted=2" in done.stderr + done.stdout
