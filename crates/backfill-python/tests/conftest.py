"""Fixtures: every test that takes `store` runs on the memory store, SQLite
and Postgres (BACKFILL_PG_URL; without it the Postgres cases skip on a
laptop and fail with CI set)."""

import os
import uuid

import pytest

import backfill


def _postgres():
    url = os.environ.get("BACKFILL_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI is set and there is no Postgres (BACKFILL_PG_URL)")
        pytest.skip("no Postgres: set BACKFILL_PG_URL (scripts/python-tests.sh starts one with Docker)")
    return backfill.PostgresStore(url, schema=f"py_{uuid.uuid4().hex[:12]}")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "memory":
        return backfill.MemoryStore()
    if request.param == "sqlite":
        return backfill.SqliteStore(str(tmp_path / "pipeline.db"))
    return _postgres()


@pytest.fixture
def cli():
    """The command line's binary (BACKFILL_CLI), for tests that compare what
    it stores with what the package stores."""
    path = os.environ.get("BACKFILL_CLI")
    if not path or not os.path.exists(path):
        if os.environ.get("CI"):
            pytest.fail("CI is set and BACKFILL_CLI does not name the backfill binary")
        pytest.skip("set BACKFILL_CLI to the backfill binary (scripts/python-tests.sh does)")
    return path
