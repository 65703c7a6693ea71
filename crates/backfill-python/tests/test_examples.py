"""The examples run as a user runs them, each in a directory of its own."""

import os
import shutil
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


def _has_dagster():
    if subprocess.run([sys.executable, "-c", "import dagster"], capture_output=True).returncode == 0:
        return True
    if os.environ.get("CI"):
        pytest.fail("CI is set and dagster is not installed (scripts/python-tests.sh installs it)")
    pytest.skip("dagster is not installed here (scripts/python-tests.sh installs it)")


def _materialize(tmp_path, code, *selection):
    env = dict(os.environ, ORDERS_DB_URL=str(tmp_path / "orders.db"), DAGSTER_HOME=str(tmp_path))
    (tmp_path / "dagster.yaml").write_text("")
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize",
         "-f", code, "--select", "orders", *selection],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )


def test_the_dagster_asset_materializes_a_partition(tmp_path):
    _has_dagster()
    done = _materialize(tmp_path, os.path.join(EXAMPLES, "dagster_orders.py"),
                        "--partition", "2026-01-15")
    assert done.returncode == 0, done.stderr
    assert "days synced: 1, failed: 0, rows written: 2" in done.stderr + done.stdout


# The example's asset, with one day whose upstream fails.
FAILING_DAY = """
import datetime as dt
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("dagster_orders", {example!r})
example = importlib.util.module_from_spec(spec)
sys.modules["dagster_orders"] = example
spec.loader.exec_module(example)
upstream = example.fetch


def fetch(day):
    if day == dt.date(2026, 1, 18):
        raise RuntimeError("upstream returned 503")
    return upstream(day)


example.fetch = fetch
defs = example.defs
"""


def test_a_dagster_range_backfill_is_one_run_with_a_result_per_day(tmp_path):
    """Ten days through `--partition-range`: one Dagster run, one
    `backfill()`, each day its own partition — nine materialized with their
    counts, the day whose upstream failed a failed partition with its
    error; the range again writes nothing and fixes the failed day only
    when its upstream does."""
    _has_dagster()
    import dagster as dg

    code = tmp_path / "failing_orders.py"
    code.write_text(FAILING_DAY.format(example=os.path.join(EXAMPLES, "dagster_orders.py")))
    done = _materialize(tmp_path, str(code), "--partition-range", "2026-01-14...2026-01-23")
    assert done.returncode != 0
    assert "2026-01-18: fetching 2026-01-18 failed: RuntimeError: upstream returned 503" in done.stderr

    os.environ["DAGSTER_HOME"] = str(tmp_path)
    try:
        instance = dg.DagsterInstance.get()
        runs = instance.get_runs()
        assert [run.status for run in runs] == [dg.DagsterRunStatus.FAILURE]
        key = dg.AssetKey("orders")
        days = [f"2026-01-{d}" for d in range(14, 24)]
        status = instance.get_status_by_partition(
            key, days, dg.DailyPartitionsDefinition(start_date="2026-01-01"))
        assert status["2026-01-18"] == dg.AssetPartitionStatus.FAILED, status
        assert all(status[d] == dg.AssetPartitionStatus.MATERIALIZED for d in days if d != "2026-01-18"), status
        records = instance.fetch_materializations(key, limit=100).records
        by_day = {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}
        assert sorted(by_day) == [d for d in days if d != "2026-01-18"]
        assert all(m["inserted"].value == 2 and m["updated"].value == 0 for m in by_day.values())
        run_ids = {m["run_id"].value for m in by_day.values()}
        assert len(run_ids) == 1, "one backfill() for the whole range"
    finally:
        del os.environ["DAGSTER_HOME"]

    # Again, with the upstream back: the failed day is written, the rest unchanged.
    done = _materialize(tmp_path, os.path.join(EXAMPLES, "dagster_orders.py"),
                        "--partition-range", "2026-01-14...2026-01-23")
    assert done.returncode == 0, done.stderr
    assert "days synced: 10, failed: 0, rows written: 2" in done.stderr + done.stdout


def _airflow():
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    if not os.path.exists(airflow):
        pytest.skip("Airflow is not installed here (it is not in the test command's environment)")
    return airflow


def test_the_airflow_dags_sync_days_one_run_each_and_a_range_in_one_task(tmp_path):
    """`airflow dags test` as Airflow 3 runs them: the daily DAG for three
    days (what `airflow backfill create` makes: a run per day), then the
    range DAG over ten days in one task, which writes only the seven days
    the daily runs did not."""
    airflow = _airflow()
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(os.path.join(EXAMPLES, "airflow_orders.py"), dags)
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__DAGS_FOLDER=str(dags),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", ORDERS_DB_URL=str(tmp_path / "orders.db"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))

    def airflow_run(*args):
        done = subprocess.run([airflow, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    airflow_run("db", "migrate")
    for day in ("2026-01-14", "2026-01-15", "2026-01-16"):
        out = airflow_run("dags", "test", "orders_daily", day)
        assert f"Returned value was: {day}: Counts(inserted=2" in out, out
    out = airflow_run("dags", "test", "orders_range", "-c",
                      '{"start": "2026-01-14", "end": "2026-01-23"}')
    assert "Returned value was: days synced: 10, rows written: 14" in out, out
