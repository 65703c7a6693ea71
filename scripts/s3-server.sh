# Sourced by the test scripts: a local S3 endpoint for the Delta store's
# tests on object storage (scripts/s3_server.py: moto's server mode, from
# PyPI, in a virtual environment of its own), unless BACKFILL_S3_URL names
# one already. Exports BACKFILL_S3_URL (s3://BUCKET), BACKFILL_S3_SPREAD
# (how many more buckets, BUCKET-0 …, tests may spread tables over) and the variables an
# S3 client reads (AWS_ENDPOINT_URL, credentials, region, AWS_ALLOW_HTTP);
# the server stops when the shell that sourced this exits.
#
#   source scripts/s3-server.sh
if [[ -z "${BACKFILL_S3_URL:-}" ]]; then
    s3_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    s3_venv="${BACKFILL_S3_VENV:-${CARGO_TARGET_DIR:-$s3_repo/target}/s3-venv}"
    if [[ ! -x "$s3_venv/bin/python" ]]; then
        "${PYTHON:-python3}" -m venv "$s3_venv"
    fi
    "$s3_venv/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]>=5.1,<6"
    s3_dir=$(mktemp -d)
    "$s3_venv/bin/python" "$s3_repo/scripts/s3_server.py" backfill-tests "$s3_dir/port" 64 \
        > "$s3_dir/log" 2>&1 &
    s3_pid=$!
    # After whatever the shell already does on exit.
    s3_then=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
    trap "kill $s3_pid 2> /dev/null || true; rm -rf '$s3_dir'; ${s3_then:-:}" EXIT
    for _ in $(seq 1 150); do
        [[ -s "$s3_dir/port" ]] && break
        kill -0 "$s3_pid" 2> /dev/null || break
        sleep 0.2
    done
    if [[ ! -s "$s3_dir/port" ]]; then
        cat "$s3_dir/log" >&2
        echo "the local S3 server did not start" >&2
        exit 1
    fi
    export BACKFILL_S3_URL="s3://backfill-tests" BACKFILL_S3_SPREAD=64
    export AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$s3_dir/port")"
    export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
    echo "local S3 server: $AWS_ENDPOINT_URL ($BACKFILL_S3_URL)"
fi
