"""The OpenLineage events of the command line (`--openlineage-file`) and
of a Python job (`Job(lineage=OpenLineage(...))`) hold to the OpenLineage
spec, as the OpenLineage Python client reads it, and say what the run did.

No package on PyPI ships the spec's JSON schema (OpenLineage.json and the
facets' schemas); the client (`openlineage-python`, which
scripts/python-tests.sh installs at the version pinned there) carries
classes generated from it, with the spec's required fields, its UUID and
date-time checks, and each facet's schema URL. Each event is built from
those classes, every key of it known to them, and written back by the
client's own serializer: what comes back must be the event itself. The
`backfill` run facet is checked against its own schema,
crates/backfill-core/openlineage/BackfillRunFacet.json. With
OPENLINEAGE_SPEC naming a checkout of the spec's folder (`spec/` of the
OpenLineage repository), every event and facet is also validated against
the JSON schemas themselves.
"""

import datetime as dt
import http.server
import importlib
import json
import os
import pathlib
import socket
import subprocess
import threading
import warnings

import pytest

import backfill
from backfill import Job, OpenLineage, Record

REPO = pathlib.Path(__file__).resolve().parents[3]
FACET_SCHEMA = REPO / "crates/backfill-core/openlineage/BackfillRunFacet.json"


def _needs(module):
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {module} is not installed (scripts/python-tests.sh installs it)")
        pytest.skip(f"{module} is not installed (scripts/python-tests.sh installs it)")


def _run(cli, tmp_path, first, last, fetch, *extra):
    for day in range(1, 4):
        d = f"2026-01-{day:02}"
        lines = [
            json.dumps({"key": f"o:{d}:{i}", "event_date": d, "value": i, "updated_at": f"{d}T09:00:00Z"})
            for i in range(day + 1)
        ]
        (tmp_path / f"{d}.jsonl").write_text("\n".join(lines))
    command = [
        cli, "backfill", "--from", f"2026-01-{first:02}", "--to", f"2026-01-{last:02}",
        "--store", "sqlite://lineage.db", "--json", "--openlineage-file", "lineage.jsonl",
        "--fetch-cmd", fetch, *extra,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKFILL_")}
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    return done, json.loads(done.stdout)


def _structure(event):
    """The event as the client's classes, refusing any key they lack."""
    from openlineage.client import event_v2 as ev
    from openlineage.client.generated import base
    from openlineage.client.generated.error_message_run import ErrorMessageRunFacet
    from openlineage.client.generated.job_type_job import JobTypeJobFacet
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet,
    )
    from openlineage.client.generated.processing_engine_run import ProcessingEngineRunFacet

    def fields(obj, allowed):
        unknown = set(obj) - set(allowed)
        assert not unknown, f"keys the spec does not have: {unknown} in {obj}"
        return obj

    def facet(cls, obj, custom=False):
        body = {k: v for k, v in obj.items() if k not in ("_producer", "_schemaURL")}
        if custom:
            built = cls(producer=obj["_producer"]).with_additional_properties(**body)
            # A custom facet keeps its own schema URL.
            built._schemaURL = obj["_schemaURL"]
        else:
            built = cls(**body, producer=obj["_producer"])
            assert obj["_schemaURL"] == built._get_schema(), (obj["_schemaURL"], cls)
        assert set(obj) >= {"_producer", "_schemaURL"}
        return built

    known_run = {"errorMessage": ErrorMessageRunFacet, "processing_engine": ProcessingEngineRunFacet}
    fields(event, ["eventType", "eventTime", "producer", "schemaURL", "run", "job", "inputs", "outputs"])
    assert event["schemaURL"] == ev.RunEvent._get_schema()
    run = fields(event["run"], ["runId", "facets"])
    job = fields(event["job"], ["namespace", "name", "facets"])
    fields(job["facets"], ["jobType"])
    outputs = []
    for output in event["outputs"]:
        fields(output, ["namespace", "name", "facets", "outputFacets"])
        fields(output.get("outputFacets", {}), ["outputStatistics"])
        statistics = output.get("outputFacets", {}).get("outputStatistics")
        assert statistics is None or isinstance(statistics["rowCount"], int)
        outputs.append(ev.OutputDataset(
            namespace=output["namespace"],
            name=output["name"],
            facets={},
            outputFacets={"outputStatistics": facet(OutputStatisticsOutputDatasetFacet, statistics)}
            if statistics else {},
        ))
    run_facets = {
        name: facet(known_run.get(name, base.RunFacet), value, custom=name not in known_run)
        for name, value in run["facets"].items()
    }
    return ev.RunEvent(
        eventType=ev.RunState(event["eventType"]),
        eventTime=event["eventTime"],
        producer=event["producer"],
        run=ev.Run(runId=run["runId"], facets=run_facets),
        job=ev.Job(
            namespace=job["namespace"],
            name=job["name"],
            facets={"jobType": facet(JobTypeJobFacet, job["facets"]["jobType"])},
        ),
        inputs=[],
        outputs=outputs,
    )


def _validate_against_the_spec(spec, event):
    """Validates `event` and its standard facets with the spec's schemas."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    resources = []
    for path in [spec / "OpenLineage.json", *sorted((spec / "facets").glob("*.json"))]:
        contents = json.loads(path.read_text())
        resources.append((contents["$id"], Resource.from_contents(contents)))
    ours = json.loads(FACET_SCHEMA.read_text())
    registry = Registry().with_resources(resources)

    def check(schema, instance):
        errors = list(Draft202012Validator(schema, registry=registry).iter_errors(instance))
        assert not errors, [e.message for e in errors]

    check({"$ref": event["schemaURL"]}, event)
    facets = [*event["run"]["facets"].values(), *event["job"]["facets"].values()]
    for output in event["outputs"]:
        facets += [*output["facets"].values(), *output.get("outputFacets", {}).values()]
    for facet in facets:
        if facet["_schemaURL"].startswith("https://openlineage.io/"):
            check({"$ref": facet["_schemaURL"]}, facet)
    check({"$defs": ours["$defs"], **{k: v for k, v in ours.items() if k != "$defs"}},
          {"backfill": event["run"]["facets"]["backfill"]})


def test_the_events_hold_to_the_openlineage_spec(cli, tmp_path):
    _needs("openlineage.client")
    jsonschema = _needs("jsonschema")
    from openlineage.client.serde import Serde

    fail = "sh -c 'if [ {day} = 2026-01-02 ]; then echo upstream said 503 >&2; exit 1; fi; cat {day}.jsonl'"
    failed, failed_report = _run(cli, tmp_path, 1, 3, fetch=fail)
    assert failed.returncode == 2, failed.stderr
    done, report = _run(cli, tmp_path, 3, 3, "cat {day}.jsonl", "--mode", "replace")
    assert done.returncode == 0, done.stderr

    events = [json.loads(line) for line in (tmp_path / "lineage.jsonl").read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "FAIL", "START", "COMPLETE"]
    assert {e["run"]["runId"] for e in events[:2]} == {failed_report["run_id"]}
    assert {e["run"]["runId"] for e in events[2:]} == {report["run_id"]}

    # Our facet, against our schema (its own part: the base facet's is the
    # client's RunFacet, below).
    ours = json.loads(FACET_SCHEMA.read_text())["$defs"]["BackfillRunFacet"]["allOf"][1]
    for event in events:
        jsonschema.validate(event["run"]["facets"]["backfill"], ours)

    for event in events:
        built = _structure(event)
        assert Serde.to_dict(built) == event

    for event, run in [(events[1], failed_report), (events[3], report)]:
        counts = event["run"]["facets"]["backfill"]["counts"]
        for kind, value in counts.items():
            assert value == sum(day["counts"][kind] for day in run["days"]), kind
        written = sum(counts[k] for k in ("inserted", "updated", "deleted"))
        assert event["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == written
    assert "upstream said 503" in events[1]["run"]["facets"]["errorMessage"]["message"]

    spec = os.environ.get("OPENLINEAGE_SPEC")
    if spec:
        for event in events:
            _validate_against_the_spec(pathlib.Path(spec), event)
    else:
        print("the spec's own JSON schemas: not checked (set OPENLINEAGE_SPEC to its spec/ folder)")


# A Python job's events.


class _Receiver:
    """A lineage server on loopback: every POST's path, headers and JSON."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path, dict(self.headers), json.loads(body)))
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = _Receiver()
    yield r
    r.close()


def orders(day):
    at = dt.datetime(day.year, day.month, day.day, 9, tzinfo=dt.timezone.utc)
    return [Record(key=f"o:{day}:{i}", event_date=day, value={"n": i}, updated_at=at) for i in range(day.day)]


def _events(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_python_jobs_runs_send_their_lineage_events(store, tmp_path, receiver):
    _needs("openlineage.client")
    jsonschema = _needs("jsonschema")
    from openlineage.client.serde import Serde

    lineage = OpenLineage(url=receiver.url, file=tmp_path / "lineage.jsonl", api_key="k-7f3a9c2e51")
    job = Job(lineage=lineage, mode="replace")
    report = job.backfill(store, orders, dt.date(2026, 1, 1), dt.date(2026, 1, 3))

    events = _events(tmp_path / "lineage.jsonl")
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    # The server got the same events, in order, at Marquez's endpoint, with
    # the key as a bearer token.
    assert [body for _, _, body in receiver.received] == events
    assert {path for path, _, _ in receiver.received} == {"/api/v1/lineage"}
    assert all(h["Authorization"] == "Bearer k-7f3a9c2e51" for _, h, _ in receiver.received)

    ours = json.loads(FACET_SCHEMA.read_text())["$defs"]["BackfillRunFacet"]["allOf"][1]
    for event in events:
        jsonschema.validate(event["run"]["facets"]["backfill"], ours)
        assert Serde.to_dict(_structure(event)) == event
        assert event["producer"].endswith("/crates/backfill-python")
        assert event["job"] == {**event["job"], "namespace": "backfill", "name": "test_lineage.orders"}
        assert "k-7f3a9c2e51" not in json.dumps(event)

    complete = events[1]
    facet = complete["run"]["facets"]["backfill"]
    assert facet["runId"] == report.run_id
    assert (facet["firstDay"], facet["lastDay"], facet["mode"]) == ("2026-01-01", "2026-01-03", "replace")
    assert facet["days"]["planned"] == 3 and facet["days"]["synced"] == 3
    totals = report.totals
    assert facet["counts"]["inserted"] == totals.inserted == 1 + 2 + 3
    assert complete["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == totals.written
    output = complete["outputs"][0]
    if isinstance(store, backfill.SqliteStore):
        assert (output["namespace"], output["name"]) == (f"sqlite://{tmp_path / 'pipeline.db'}", "backfill_records")
    elif isinstance(store, backfill.PostgresStore):
        assert output["namespace"].startswith("postgres://")
        assert output["name"].endswith(".backfill_records") and output["name"].count(".") == 2
    else:
        assert (output["namespace"], output["name"]) == ("memory", "backfill_records")


def test_a_failed_day_is_a_fail_event_that_quotes_no_secret(tmp_path):
    _needs("openlineage.client")

    def fetch(day):
        if day == dt.date(2026, 1, 2):
            raise RuntimeError("upstream said 401 to token k-7f3a9c2e51")
        return orders(day)

    job = Job(lineage=OpenLineage(file=tmp_path / "l.jsonl", api_key="k-7f3a9c2e51", job="orders api"),
              retries=0)
    store = backfill.SqliteStore(str(tmp_path / "p.db"))
    with pytest.raises(backfill.BackfillError):
        job.backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 3))
    events = _events(tmp_path / "l.jsonl")
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    fail = events[1]
    assert fail["job"]["name"] == "orders api"
    message = fail["run"]["facets"]["errorMessage"]["message"]
    assert message.startswith("2026-01-02: ") and "upstream said 401 to token ***" in message
    assert "k-7f3a9c2e51" not in json.dumps(events)
    assert fail["run"]["facets"]["backfill"]["failedDays"] == ["2026-01-02"]
    for event in events:
        _structure(event)


def test_a_secret_of_the_environment_never_leaves_in_an_event(tmp_path, monkeypatch):
    monkeypatch.setenv("ORDERS_API_TOKEN", "tok-5b1e9d0c77")

    def fetch(day):
        raise RuntimeError("GET https://api.example/orders?token=tok-5b1e9d0c77 returned 403")

    job = Job(lineage=OpenLineage(file=tmp_path / "l.jsonl"), retries=0)
    with pytest.raises(backfill.BackfillError):
        job.backfill(backfill.MemoryStore(), fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 1))
    text = (tmp_path / "l.jsonl").read_text()
    assert "tok-5b1e9d0c77" not in text
    assert "token=*** returned 403" in text


def test_a_password_in_the_store_url_never_leaves_in_an_event(tmp_path):
    url = os.environ.get("BACKFILL_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI is set and there is no Postgres (BACKFILL_PG_URL)")
        pytest.skip("no Postgres: set BACKFILL_PG_URL")
    from urllib.parse import urlsplit

    password = urlsplit(url).password
    assert password, "BACKFILL_PG_URL has a password to keep out"

    def fetch(day):
        raise RuntimeError(f"cannot log in with {password}")

    store = backfill.PostgresStore(url, schema="py_lineage_secret")
    job = Job(lineage=OpenLineage(file=tmp_path / "l.jsonl"), retries=0)
    with pytest.raises(backfill.BackfillError):
        job.backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 1))
    start, fail = _events(tmp_path / "l.jsonl")
    message = fail["run"]["facets"]["errorMessage"]["message"]
    assert "cannot log in with ***" in message and password not in message.replace("***", "")
    parts = urlsplit(url)
    database = parts.path.lstrip("/") or parts.username
    for event in (start, fail):
        # The table is named by host, port, database, schema and table:
        # no user, no password (which may be any of those words too).
        output = event["outputs"][0]
        assert output["namespace"] == f"postgres://{parts.hostname}:{parts.port or 5432}"
        assert output["name"] == f"{database}.py_lineage_secret.backfill_records"
        rest = json.dumps({**event, "outputs": []}).replace(output["namespace"], "")
        assert f":{password}@" not in rest and "cannot log in with " + password not in rest


def test_one_days_sync_is_a_run_of_one_day(tmp_path):
    store = backfill.MemoryStore()
    job = Job(lineage=OpenLineage(file=tmp_path / "l.jsonl"), run_id="airflow-2026-01-05")
    job.sync_one_day(store, orders, dt.date(2026, 1, 5))
    start, complete = _events(tmp_path / "l.jsonl")
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    facet = complete["run"]["facets"]["backfill"]
    assert (facet["runId"], facet["firstDay"], facet["lastDay"]) == ("airflow-2026-01-05", "2026-01-05", "2026-01-05")
    assert facet["counts"]["inserted"] == 5


def test_a_server_that_is_down_never_fails_the_run(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port now.
    job = Job(lineage=OpenLineage(url=f"http://u:hunter22@127.0.0.1:{port}", timeout=2))
    store = backfill.MemoryStore()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = job.backfill(store, orders, dt.date(2026, 1, 1), dt.date(2026, 1, 2))
    assert report.totals.inserted == 3
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any(f"cannot send the lineage event to http://u:***@127.0.0.1:{port}/api/v1/lineage" in m for m in said), said
    assert not any("hunter22" in m for m in said)


def test_lineage_is_checked_when_the_job_is_made():
    with pytest.raises(TypeError, match="lineage must be a backfill.OpenLineage"):
        Job(lineage="http://marquez:5000")
    with pytest.raises(ValueError, match="a url, a file or both"):
        OpenLineage()
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenLineage(url="marquez:5000")
    # A dry run writes nothing and sends nothing.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = Job(lineage=OpenLineage(url="http://127.0.0.1:9", file="never.jsonl"), dry_run=True)
        job.backfill(backfill.MemoryStore(), orders, dt.date(2026, 1, 1), dt.date(2026, 1, 1))
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not os.path.exists("never.jsonl")


def test_a_delta_table_is_named_by_its_location_without_credentials(tmp_path):
    options = {"aws_secret_access_key": "wJalrXUtnFEMI-k3y", "aws_access_key_id": "AKIAEXAMPLE"}
    store = backfill.DeltaStore(str(tmp_path / "lake" / "orders"), storage_options=options)

    def fetch(day):
        raise RuntimeError("signature for wJalrXUtnFEMI-k3y does not match")

    job = Job(lineage=OpenLineage(file=tmp_path / "l.jsonl"), retries=0)
    with pytest.raises(backfill.BackfillError):
        job.backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 1))
    events = _events(tmp_path / "l.jsonl")
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    assert {(e["outputs"][0]["namespace"], e["outputs"][0]["name"]) for e in events} == {
        ("file", str(tmp_path / "lake" / "orders"))
    }
    assert "signature for *** does not match" in events[1]["run"]["facets"]["errorMessage"]["message"]
    assert "wJalrXUtnFEMI-k3y" not in json.dumps(events)


INTERRUPTED = """
import datetime as dt, sys, time

import backfill

store = backfill.SqliteStore(sys.argv[1])
at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

def fetch(day):
    time.sleep(0.3)
    return [backfill.Record(f"k:{day}:{i}", day, "v", at) for i in range(10)]

job = backfill.Job(concurrency=2, lineage=backfill.OpenLineage(file=sys.argv[2]))
print("started", flush=True)
try:
    if sys.argv[3] == "one":
        job.sync_one_day(store, fetch, dt.date(2026, 1, 1))
    else:
        job.backfill(store, fetch, dt.date(2026, 1, 1), dt.date(2026, 1, 31))
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("how", ["backfill", "one"])
def test_ctrl_c_ends_the_run_with_an_abort_event(tmp_path, how):
    import signal
    import sys
    import time

    script = tmp_path / "run.py"
    script.write_text(INTERRUPTED)
    events = tmp_path / "l.jsonl"
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "p.db"), str(events), how],
        stdout=subprocess.PIPE, text=True,
    )
    assert child.stdout.readline().strip() == "started"
    time.sleep(0.15 if how == "one" else 1.0)
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 130, out
    start, abort = _events(events)
    assert (start["eventType"], abort["eventType"]) == ("START", "ABORT")
    facet = abort["run"]["facets"]["backfill"]
    assert facet["stopped"] is True
    if how == "backfill":
        assert 0 < facet["days"]["synced"] < 31 and facet["days"]["notStarted"] > 0, facet
