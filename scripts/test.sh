#!/usr/bin/env bash
# The project's test command: Rust unit tests, then the end-to-end suite (tests/*.py) against the
# broker in KAFKA_BOOTSTRAP and registry in SCHEMA_REGISTRY_URL, or ones the suite starts itself.
# On a fresh machine it first installs what the tests need (Python venv, helm, podman), as
# .ci/run does; LAKESTREAM_PYTHON names an interpreter that already has them.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
if [ -z "${LAKESTREAM_PYTHON:-}" ]; then
  install_and_build
fi
PY="${LAKESTREAM_PYTHON:-$VENV/bin/python}"
cargo build --release --locked --bins
cargo test --release --locked
"$PY" -m pytest -q -p no:cacheprovider --durations=30 tests "$@"
