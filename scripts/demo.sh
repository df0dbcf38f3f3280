#!/usr/bin/env bash
# Demo: broker + schema registry + a Hudi table being written (generator) + lakestream streaming
# its changes, with the consumed changelog printed as it arrives. Runs ~40 s, cleans up after.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
install_and_build
unset KAFKA_BOOTSTRAP SCHEMA_REGISTRY_URL
start_services 29092 28081
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
