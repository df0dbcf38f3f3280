#!/usr/bin/env bash
# Run the end-to-end benchmark against a local broker and registry (started here unless
# KAFKA_BOOTSTRAP / SCHEMA_REGISTRY_URL are set). BENCH_ROWS overrides the 1M rows.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/lakestream-target}"
VENV="${LAKESTREAM_VENV:-/var/cache/lakestream-venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r tests/requirements.txt
cargo build --release --locked --bins
WORK="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
  NOIDA="$("$VENV/bin/python" -c 'import noida_db, os; print(os.path.join(os.path.dirname(noida_db.__file__), "noida-db"))')"
  "$NOIDA" start --only kafka --host 127.0.0.1 --kafka-port 19092 --data-dir "$WORK/noida" >"$WORK/noida.log" 2>&1 &
  export KAFKA_BOOTSTRAP=127.0.0.1:19092
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/19092) 2>/dev/null && break; sleep 0.2; done
fi
if [ -z "${SCHEMA_REGISTRY_URL:-}" ]; then
  "$CARGO_TARGET_DIR/release/lakestream-registry" --listen 127.0.0.1:18081 --bootstrap-servers "$KAFKA_BOOTSTRAP" >"$WORK/registry.log" 2>&1 &
  export SCHEMA_REGISTRY_URL=http://127.0.0.1:18081
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/18081) 2>/dev/null && break; sleep 0.2; done
fi
cargo bench --locked --bench end_to_end
