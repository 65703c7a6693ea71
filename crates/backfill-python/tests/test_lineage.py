"""The command line's OpenLineage events (`--openlineage-file`) hold to
the OpenLineage spec, as the OpenLineage Python client reads it.

No package on PyPI ships the spec's JSON schema (OpenLineage.json and the
facets' schemas); the client (`openlineage-python`, which
scripts/python-tests.sh installs at the version pinned there) carries
classes generated from it, with the spec's required fields, its UUID and
date-time checks, and each facet's schema URL. Each event is built from
those classes, every key of it known to them, and written back by the
client's own serializer: what comes back must be the event itself. The
`backfill` run facet is checked against its own schema,
crates/backfill-cli/openlineage/BackfillRunFacet.json. With
OPENLINEAGE_SPEC naming a checkout of the spec's folder (`spec/` of the
OpenLineage repository), every event and facet is also validated against
the JSON schemas themselves.
"""

import importlib
import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
FACET_SCHEMA = REPO / "crates/backfill-cli/openlineage/BackfillRunFacet.json"


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
