"""Kafka security against a real broker: an Apache Kafka node of its own (whatever broker the other
tests use) with a SASL_PLAINTEXT listener taking PLAIN and SCRAM-SHA-512, beside a PLAINTEXT one
the test reads from. For each mechanism a Hudi fixture is revealed one completed instant at a
time, streamed through the SASL listener (`producer.override.security.protocol`,
`sasl.mechanism`, `sasl.username`, `sasl.password`: every client of the connector — producer,
admin, offsets reader, fencing — uses them) and replayed to the oracle at each step. A wrong
password exits 1 within the bootstrap timeout naming the mechanism and the server, and no secret
appears in any log line."""

import subprocess
import time
import types
import uuid

import pytest

import brokers
import testkit
from conftest import free_port, require_fixtures

FIXTURE = "sample_table/mor/avro/v9_txns_simple_meta"
PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-" + uuid.uuid4().hex
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def secure_kafka():
    """(broker, PLAINTEXT bootstrap, SASL_PLAINTEXT bootstrap); the SCRAM user made through the
    admin API."""
    try:
        brokers.install_kafka()
    except RuntimeError as e:
        pytest.skip(f"the security tests start an Apache Kafka of their own: {e}")
    plain, sasl, controller = free_port(), free_port(), free_port()
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";')
    extra = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    }
    broker = brokers.Kafka(port=plain, extra=extra)
    broker.controller_port = controller
    broker.start()
    try:
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        upsert = UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              SCRAM_PASSWORD.encode())
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(30)
        yield broker, broker.bootstrap, f"127.0.0.1:{sasl}"
    finally:
        broker.remove()


def sasl_settings(mechanism, user, password):
    return {"producer.override.security.protocol": "SASL_PLAINTEXT", "producer.override.sasl.mechanism": mechanism,
            "producer.override.sasl.username": user, "producer.override.sasl.password": password}


@pytest.mark.parametrize("mechanism,user,password", [("PLAIN", PLAIN_USER, PLAIN_PASSWORD),
                                                     ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD)])
def test_a_table_streams_through_sasl_and_replays_at_every_instant(env, registry, tmp_path, secure_kafka,
                                                                    mechanism, user, password):
    require_fixtures()
    _, plaintext, sasl = secure_kafka
    oracle = testkit.load_oracle(FIXTURE)
    table = testkit.extract(FIXTURE, tmp_path / "t")
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "sasl-" + uuid.uuid4().hex[:8]
    secure_env = types.SimpleNamespace(bootstrap=sasl, registry=env.registry, offsets_topic="offsets-" + topic)
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, secure_env,
                                    **sasl_settings(mechanism, user, password))
    reader = types.SimpleNamespace(bootstrap=plaintext)
    replay, seen = testkit.Replay(registry), set()
    for step, inst in enumerate(oracle["instants"]):
        revealed.reveal_through(testkit.instant_order(inst))
        r = testkit.run_once(props)
        assert password not in r.stderr, "the SASL password appears in the log"
        replay.apply(testkit.new_records(testkit.consume_all(reader, topic), seen))
        testkit.compare(oracle, inst["rows"], replay, f"{mechanism} step {step}")
    assert {e["op"] for e in replay.events} >= {"r", "u"}
    # `validate` shows the settings with the secret masked
    shown = subprocess.run([str(testkit.BIN), "validate", str(props)], capture_output=True, text=True, timeout=60)
    assert password not in shown.stdout + shown.stderr


@pytest.mark.parametrize("mechanism,user", [("PLAIN", PLAIN_USER), ("SCRAM-SHA-512", SCRAM_USER)])
def test_wrong_sasl_credentials_exit_1_naming_the_mechanism_and_server(env, tmp_path, secure_kafka, mechanism, user):
    require_fixtures()
    _, _, sasl = secure_kafka
    table = testkit.extract(FIXTURE, tmp_path / "t")
    topic = "sasl-bad-" + uuid.uuid4().hex[:8]
    wrong = "wrong-" + uuid.uuid4().hex
    secure_env = types.SimpleNamespace(bootstrap=sasl, registry=env.registry, offsets_topic="offsets-" + topic)
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, secure_env,
                                    **sasl_settings(mechanism, user, wrong), **{"bootstrap.timeout.ms": "15000"})
    t0 = time.time()
    r = testkit.run_once(props, timeout=120, check=False)
    took = time.time() - t0
    assert r.returncode == 1, r.stderr[-3000:]
    assert took < 45, f"took {took:.0f} s"
    assert mechanism in r.stderr and sasl in r.stderr, r.stderr[-3000:]
    assert "authentication" in r.stderr.lower(), r.stderr[-3000:]
    assert wrong not in r.stderr
