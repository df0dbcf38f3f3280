"""The schemas a connector registers, checked by Avro's own rules (not ours): every value and key
schema version of a subject must be BACKWARD compatible with the version before it (the newer
schema reads data written with the older), the check Confluent's registry and Apicurio apply
under `BACKWARD`. The project's registry checks nothing, so without this no test would meet the
409 a production registry returns. Table evolutions (columns added, renamed, dropped, widened) by
each format's writers must pass; changing a schema-shaping setting of a running connector is
checked too, and the README (Schema Registry) names the changes a BACKWARD subject refuses."""

import uuid

import pytest

import avrocheck
import deltakit
import icebergkit as ik
import testkit

# (table, why it evolves): Spark-written and pyiceberg-written Iceberg tables
ICEBERG = ["db.evo_v2", "pyice.events", "pyice.accounts"]


@pytest.fixture(autouse=True)
def checker():
    why = avrocheck.missing()
    if why:
        pytest.skip(why)
    avrocheck.install()


def verdicts(registry, topic):
    """{subject: (versions, verdicts of consecutive pairs)} for the topic's key and value."""
    out = {}
    for part in ("key", "value"):
        texts = avrocheck.subject_schemas(registry.url, f"{topic}-{part}")
        out[part] = (len(texts), avrocheck.backward(texts))
    return out


def assert_backward(found, label, min_value_versions=2):
    versions, _ = found["value"]
    assert versions >= min_value_versions, f"{label}: {versions} value schema versions; the table's evolution registered none"
    for part, (_, pairs) in found.items():
        bad = [(i + 2, v) for i, v in enumerate(pairs) if v != "ok"]
        assert not bad, f"{label}: {part} schema version(s) not BACKWARD compatible with the one before: {bad}"


@pytest.mark.parametrize("name", ICEBERG)
def test_iceberg_evolutions_register_backward_compatible_schemas(env, registry, tmp_path, name):
    ik.unpack()
    if name not in ik.table_names():
        pytest.skip(f"fixture {name} absent (../shared/fixtures/iceberg)")
    _, _, topic = ik.replay_revealed(env, registry, name, tmp_path,
                                     **{"starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT"})
    assert_backward(verdicts(registry, topic), name)


def test_delta_added_column_registers_a_backward_compatible_schema(env, registry, tmp_path):
    # seed 2's history: create, append, delete, update, merge, update, append, optimize,
    # evolve (a column added by schema merge), merge, update
    _, ops, _, topic = deltakit.replay_revealed(env, registry, tmp_path, 2)
    assert "evolve" in ops, ops
    assert_backward(verdicts(registry, topic), "delta seed 2")


# A setting that shapes the value schema, changed on a connector that already published (here:
# a second connector writing to the first one's topic): the verdict a BACKWARD subject gives
# (README, Schema Registry). `ok` is accepted; `refused` gets a 409 from a registry enforcing
# BACKWARD. (table kind, setting, before, after, verdict)
SETTING_CHANGES = [
    ("hudi-required", "schema.nullability", "optional", "table", "refused"),
    ("hudi-required", "schema.nullability", "table", "optional", "ok"),
    # accepted, though timestamps go from microseconds to Connect's milliseconds in the same
    # `long`: Avro's check ignores logical types (the README warns)
    ("iceberg-types", "time.precision.mode", "avro", "connect", "ok"),
    ("iceberg-types", "time.precision.mode", "avro", "adaptive", "refused"),
]


@pytest.mark.parametrize("kind,key,before,after,verdict", SETTING_CHANGES)
def test_setting_changes_meet_backward_as_documented(env, registry, tmp_path, kind, key, before, after, verdict):
    if kind == "hudi-required":
        table, base = testkit.hudi_table_with_required(tmp_path / "t"), {}
    else:
        ik.unpack()
        name = ik.MERGE_HISTORY  # bigint, string, decimal, int, timestamptz, date, boolean, nullable string
        if name not in ik.table_names():
            pytest.skip(f"fixture {name} absent (../shared/fixtures/iceberg)")
        table, base = ik.WAREHOUSE / name.replace(".", "/"), {"connector.class": "iceberg", "key.fields": "id"}
    topic = "compat-" + uuid.uuid4().hex[:8]
    for i, value in enumerate((before, after)):
        props = testkit.connector_props(tmp_path, f"c{i}-{topic}", table, topic, env, **base, **{key: value})
        testkit.run_once(props)
    found = verdicts(registry, topic)
    versions, pairs = found["value"]
    assert versions == 2, f"{key} {before} -> {after}: {versions} value schema versions"
    got = "ok" if pairs == ["ok"] else "refused"
    assert got == verdict, f"{key} {before} -> {after}: {pairs}"


class RefusingRegistry:
    """A Confluent-API front of the real registry that answers 409 to a new schema version for
    any subject while `refusing` (as a registry whose compatibility level forbids the change);
    everything else is passed through."""

    def __init__(self, upstream):
        import http.server
        import threading

        import requests

        front = self
        self.upstream, self.refusing, self.refused = upstream, False, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def relay(self, method):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                parts = self.path.strip("/").split("/")
                if method == "POST" and front.refusing and len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                    known = requests.post(f"{front.upstream}/subjects/{parts[1]}", data=body, headers=headers, timeout=10)
                    if known.status_code == 404:
                        front.refused += 1
                        return self.answer(409, b'{"error_code":409,"message":"Schema being registered is incompatible with an earlier schema for subject"}')
                r = requests.request(method, front.upstream + self.path, data=body or None, headers=headers, timeout=10)
                self.answer(r.status_code, r.content)

            def answer(self, code, body):
                self.send_response(code)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.relay("GET")

            def do_POST(self):
                self.relay("POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_a_refused_schema_stops_the_task_publishes_nothing_and_resumes_once_accepted(env, registry, tmp_path):
    """Iceberg `evo_v2` revealed one version at a time through a registry that refuses every new
    schema version: the snapshot whose schema changed stops the task (exit 1, naming the
    registry's answer) with nothing of it visible to read_committed consumers; once the
    subject accepts, the same run resumes there and the replay equals the oracle."""
    ik.unpack()
    name = "db.evo_v2"
    if name not in ik.table_names():
        pytest.skip(f"fixture {name} absent (../shared/fixtures/iceberg)")
    front = RefusingRegistry(env.registry)
    oracle = ik.load_oracle(name)
    snaps = {s["snapshot_id"]: s for s in oracle["snapshots"]}
    t = ik.RevealedIceberg(name, tmp_path / "tables")
    columns = ik.stable_columns(ik.WAREHOUSE / name.replace(".", "/"))
    props, topic = ik.iceberg_props(tmp_path, env, t.table, **{"schema.registry.url": front.url})
    replay, seen, refusals = testkit.Replay(registry), set(), 0
    for i in range(len(t.versions)):
        t.reveal(i)
        cur = t.current(i)
        front.refusing = True
        r = testkit.run_once(props, check=False)
        if r.returncode != 0:
            assert r.returncode == 1, r.stderr[-3000:]
            assert "schema rejected (409" in r.stderr and "incompatible" in r.stderr, r.stderr[-3000:]
            refusals += 1
            # nothing of the refused snapshot is visible: the topic still replays to the state before
            published = testkit.new_records(testkit.consume_all(env, topic), seen)
            assert not published, f"version {i}: {len(published)} records published by a refused run"
            front.refusing = False
            testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        ik.check_step(oracle, snaps, cur, replay, columns, f"{name} version {i} snapshot {cur}")
    # the first registration (no subject yet), then each snapshot with a schema of its own
    # (evo_v2's three snapshots each have one: score added; renamed, widened and dropped)
    assert refusals == 3, f"{refusals} refused runs; want the first registration and two schema changes"
    assert front.refused >= refusals
