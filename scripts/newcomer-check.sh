#!/usr/bin/env bash
# The newcomer check: a fresh crate outside the workspace, with exactly the
# README's install lines as its dependencies and the README's first Rust
# snippet as its main, must build and run. Nothing is published yet, so the
# crates.io names are redirected to this workspace with [patch.crates-io];
# everything else resolves as it would for a user.
#
#   scripts/newcomer-check.sh            # from anywhere in the repository
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
readme="$repo/README.md"

# The dependency lines: the first ```toml block of the "## Install" section.
deps=$(awk '
    /^## Install/ { in_section = 1; next }
    in_section && /^## / { exit }
    in_section && /^```toml/ { in_block = 1; next }
    in_block && /^```/ { exit }
    in_block && !/^\[dependencies\]/ { print }
' "$readme")
# The first Rust snippet of the README.
main=$(awk '
    /^```rust/ { in_block = 1; next }
    in_block && /^```/ { exit }
    in_block { print }
' "$readme")
[[ -n "$deps" ]] || { echo "no \`\`\`toml block under ## Install in README.md" >&2; exit 1; }
[[ -n "$main" ]] || { echo "no \`\`\`rust block in README.md" >&2; exit 1; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/src"
cat > "$dir/Cargo.toml" <<TOML
[package]
name = "newcomer"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$deps

[patch.crates-io]
backfill-core = { path = "$repo/crates/backfill-core" }
backfill-sqlite = { path = "$repo/crates/backfill-sqlite" }
backfill-postgres = { path = "$repo/crates/backfill-postgres" }

# Not a member of the workspace above it.
[workspace]
TOML
printf '%s\n' "$main" > "$dir/src/main.rs"
# The workspace's lock file: the same versions of the shared dependencies,
# so the check builds from what is already compiled and downloaded.
cp "$repo/Cargo.lock" "$dir/Cargo.lock"

# `cargo run --example quickstart` builds the facade with its default
# features and its dev-dependencies: SQLite and the engine, never the
# Postgres, TLS, container or Delta Lake (delta-rs, Parquet) stack (the README's first-build time rests on it).
heavy=$(cd "$repo" && cargo tree -p backfill -e normal,dev,build --prefix none --locked \
    | grep -E '^(tokio-postgres|deadpool-postgres|rustls|testcontainers|bollard|deltalake|deltalake-core|parquet) ' | sort -u || true)
if [[ -n "$heavy" ]]; then
    echo "the quickstart's build pulls in what it does not need:" >&2
    printf '    %s\n' "$heavy" >&2
    exit 1
fi
echo "quickstart: $(cd "$repo" && cargo tree -p backfill -e normal,dev,build --prefix none --locked | sort -u | wc -l) crates, no Postgres, TLS or Delta stack"

echo "README install lines:"
printf '%s\n' "$deps" | sed 's/^/    /'
cd "$dir"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}" cargo run --quiet
echo "newcomer check: the README's first snippet builds and runs with its install lines"

# The README's Python example, in a fresh virtual environment holding only
# the package as the guide installs it, `pip install ./crates/backfill-python`
# (maturin, the package's build backend, fetched by pip; the dev profile
# from the same target directory instead of the release build a user's pip
# makes, for time), run from an empty directory.
python_example=$(awk '
    /^## From Python/ { in_section = 1; next }
    in_section && /^## / { exit }
    in_section && /^```python/ { in_block = 1; next }
    in_block && /^```/ { exit }
    in_block { print }
' "$readme")
[[ -n "$python_example" ]] || { echo "no \`\`\`python block under ## From Python in README.md" >&2; exit 1; }
mkdir "$dir/py"
"${PYTHON:-python3}" -m venv "$dir/venv"
(
    cd "$repo"
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}" MATURIN_PEP517_ARGS="--profile dev" \
        "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check ./crates/backfill-python
)
printf '%s\n' "$python_example" > "$dir/py/example.py"
(cd "$dir/py" && "$dir/venv/bin/python" example.py > output.txt)
grep -q "31 of 31 days synced, rows written: 62" "$dir/py/output.txt" || {
    cat "$dir/py/output.txt" >&2
    echo "the README's Python example did not sync its 31 days" >&2
    exit 1
}
echo "newcomer check: the README's Python example runs after pip install ./crates/backfill-python in a fresh virtual environment"
