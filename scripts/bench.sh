#!/usr/bin/env bash
# The end-to-end benchmark against a local broker and registry (started here unless
# KAFKA_BOOTSTRAP / SCHEMA_REGISTRY_URL are set). BENCH_ROWS overrides the 1M rows.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
install_and_build
start_services
BENCH_PYTHON="$VENV/bin/python" cargo bench --locked --bench end_to_end
