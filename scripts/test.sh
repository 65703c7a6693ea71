#!/usr/bin/env bash
# Every test: the Rust workspace's (cargo test, all features), then the
# Python package's (scripts/python-tests.sh: the extension built in the dev
# profile from the same target directory, pytest on every store), with a
# local S3 server for the Delta store's tests on object storage
# (scripts/s3-server.sh). The README's test command; `.ci/run` runs it too.
#
#   scripts/test.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
source scripts/s3-server.sh
cargo test --workspace --all-features
scripts/python-tests.sh
