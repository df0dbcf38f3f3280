#!/usr/bin/env bash
# The project's test command: Rust unit tests, then the end-to-end suite (tests/*.py) against the
# broker in KAFKA_BOOTSTRAP and registry in SCHEMA_REGISTRY_URL, or ones the suite starts itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/lakestream-target}"
PY="${LAKESTREAM_PYTHON:-/var/cache/lakestream-venv/bin/python}"
cargo build --release --locked --bins
cargo test --release --locked
"$PY" -m pytest -q -p no:cacheprovider tests "$@"
