#!/usr/bin/env bash
# The Python package's tests: builds the extension in the dev profile from
# the workspace's target directory into a virtual environment of its own
# (maturin and pytest from PyPI), then runs pytest against the memory
# store, SQLite and Postgres. Postgres is BACKFILL_PG_URL, or else a
# throwaway container of the test image (scripts/postgres-image.sh), removed
# on exit; with CI set, no Postgres is a failure, not a skip. The Delta
# tests on S3 use BACKFILL_S3_URL, or else a local S3 server
# (scripts/s3-server.sh).
#
#   scripts/python-tests.sh [pytest arguments]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="${BACKFILL_VENV:-$repo/target/python-venv}"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
# deltalake, polars and pyarrow: engines the package does not control,
# reading its Delta tables (tests/test_delta.py). openlineage-python (pinned:
# its classes carry the spec's facet versions) and jsonschema: the command
# line's lineage events, read as OpenLineage's own client reads them
# (tests/test_lineage.py).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "maturin>=1.7,<2" pytest mypy \
    "deltalake>=1.1,<2" "polars>=1.20" "pyarrow>=15" "openlineage-python==1.54.0" "jsonschema>=4.18" \
    "dagster>=1.13,<1.14"
(
    cd "$repo/crates/backfill-python"
    VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
        CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}" \
        maturin develop --quiet
)

if [[ -z "${BACKFILL_PG_URL:-}" ]] && docker info > /dev/null 2>&1; then
    image="${BACKFILL_PG_IMAGE:-backfill/postgres}:${BACKFILL_PG_TAG:-15}"
    if docker image inspect "$image" > /dev/null 2>&1; then
        id=$(docker run -d --rm -p 127.0.0.1::5432 -e POSTGRES_PASSWORD=postgres \
            --tmpfs /pgtmpfs:mode=1777 -e PGDATA=/pgtmpfs/data "$image")
        trap 'docker rm -f "$id" > /dev/null 2>&1 || true' EXIT
        port=$(docker port "$id" 5432/tcp | head -n 1 | sed 's/.*://')
        for _ in $(seq 1 100); do
            if docker exec "$id" pg_isready -h 127.0.0.1 -U postgres > /dev/null 2>&1; then
                break
            fi
            sleep 0.2
        done
        export BACKFILL_PG_URL="postgres://postgres:postgres@127.0.0.1:$port/postgres"
    fi
fi

source "$repo/scripts/s3-server.sh"

# The command line, for the test that compares what both store.
target="${CARGO_TARGET_DIR:-$repo/target}"
if [[ -z "${BACKFILL_CLI:-}" ]]; then
    cargo build --quiet -p backfill-cli --manifest-path "$repo/Cargo.toml"
    export BACKFILL_CLI="$target/debug/backfill"
fi

cd "$repo/crates/backfill-python"
# The stubs hold: the examples type-check strictly against them.
"$venv/bin/python" -m mypy --strict examples/quickstart.py examples/original_api.py
"$venv/bin/python" -m pytest -q tests "$@"
