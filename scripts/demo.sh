#!/usr/bin/env bash
# Demo: broker + schema registry + a Hudi table being written (generator) + lakestream streaming
# its changes, with the consumed changelog printed as it arrives. Runs ~40 s, cleans up after.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/lakestream-target}"
VENV="${LAKESTREAM_VENV:-/var/cache/lakestream-venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r tests/requirements.txt
cargo build --release --locked --bins
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
NOIDA="$("$VENV/bin/python" -c 'import noida_db, os; print(os.path.join(os.path.dirname(noida_db.__file__), "noida-db"))')"
"$NOIDA" start --only kafka --host 127.0.0.1 --kafka-port 29092 --data-dir "$WORK/noida" >"$WORK/noida.log" 2>&1 &
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/29092) 2>/dev/null && break; sleep 0.2; done
"$BIN/lakestream-registry" --listen 127.0.0.1:28081 --bootstrap-servers 127.0.0.1:29092 >"$WORK/registry.log" 2>&1 &
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/28081) 2>/dev/null && break; sleep 0.2; done
echo "== writing a Hudi table: 20 rows, then 6 upsert/delete commits 4 s apart"
"$BIN/lakestream" generate hudi --type cow --path "$WORK/demo_table" --rows 20 --partitions 2 \
  --commits 6 --interval 4s --update-fraction 0.15 --delete-fraction 0.1 --insert-fraction 0.1 2>/dev/null &
sed -e "s#@TABLE@#$WORK/demo_table#" connectors/demo-hudi.properties > "$WORK/demo.properties"
sleep 1
echo "== lakestream run (metrics on :29400/metrics)"
"$BIN/lakestream" run --metrics-port 29400 "$WORK/demo.properties" 2>"$WORK/lakestream.log" &
echo "== consumed changelog (op, instant, key, row):"
"$VENV/bin/python" scripts/consume.py 127.0.0.1:29092 http://127.0.0.1:28081 demo.trips 32
echo "== metrics excerpt"
curl -s localhost:29400/metrics | grep -E '^lakestream_(source_records_written|sink_transactions_committed)' || true
