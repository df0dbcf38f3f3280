#!/usr/bin/env bash
# The project's test command: Rust unit tests, then the end-to-end suite (tests/*.py) against the
# broker in KAFKA_BOOTSTRAP and registry in SCHEMA_REGISTRY_URL, or ones the suite starts itself.
# On a fresh machine it first installs what the tests need (Python venv, helm, podman), as
# .ci/run does; LAKESTREAM_PYTHON names an interpreter that already has them.
# With no arguments, tests/test_outages.py (brokers of its own, killed, stalled and restarted:
# ~8 minutes spent mostly waiting out timeouts) runs beside the rest of the suite, in a second
# pytest; with arguments, one pytest runs what they name.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
if [ -z "${LAKESTREAM_PYTHON:-}" ]; then
  install_and_build
fi
PY="${LAKESTREAM_PYTHON:-$VENV/bin/python}"
cargo build --release --locked --bins
cargo test --release --locked
PYTEST=("$PY" -m pytest -q -p no:cacheprovider --durations=30)
if [ "$#" -gt 0 ]; then
  "${PYTEST[@]}" "$@"
  exit 0
fi
OUTAGES="$WORK/outages.log"
"${PYTEST[@]}" tests/test_outages.py >"$OUTAGES" 2>&1 &
outages=$!
rest=0
"${PYTEST[@]}" --ignore=tests/test_outages.py tests || rest=$?
code=0
wait "$outages" || code=$?
echo "--- tests/test_outages.py (run beside the rest)"
cat "$OUTAGES"
[ "$rest" -eq 0 ] && [ "$code" -eq 0 ]
