"""AWS MSK IAM login (`sasl.oauthbearer.method=aws_msk_iam`, issue 31).

* The token equals AWS's reference signer's (PyPI `aws-msk-iam-sasl-signer-python`) byte for byte
  for fixed credentials, signing time and user agent, with and without a session token: the
  reference computes them here and they must be the vectors the Rust unit tests hold
  (`src/sink/msk_iam.rs`, `src/storage/aws.rs`), which lakestream's signer must produce.
* End to end against Apache Kafka: a broker of its own whose OAUTHBEARER listener verifies each
  token's SigV4 signature with a Java callback handler (`tests/java/MskIamValidator.java`, the
  key id and secret in the broker's settings) — MSK's part, done independently of lakestream's signer.
  A Hudi fixture streams through it instant by instant and replays to its oracle; a wrong secret
  exits 1 at once naming the login and the server. Credentials come from the environment's AWS
  chain (`AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` here). Skipped, with the reason, without
  java/javac/mvn or the reference package."""

import base64
import datetime
import shutil
import subprocess
import types
import uuid
from pathlib import Path

import pytest

import brokers
import testkit
from conftest import free_port, require_fixtures

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = "sample_table/mor/avro/v9_txns_simple_meta"
KEY, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


def reference_token(session_token=None):
    """The reference signer's token, signed at 2026-12-04T00:00:00Z in us-east-1."""
    signer = pytest.importorskip("aws_msk_iam_sasl_signer.MSKAuthTokenProvider")
    import botocore.auth
    import botocore.credentials
    frozen = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda *a, **k: datetime.datetime(2026, 12, 4, 0, 0, 0)

    class Fixed(botocore.credentials.CredentialProvider):
        def load(self):
            return botocore.credentials.Credentials(KEY, SECRET, session_token)
    try:
        token, expiry = signer.generate_auth_token_from_credentials_provider("us-east-1", Fixed())
    finally:
        botocore.auth.get_current_datetime = frozen
    return token, expiry


def test_the_token_equals_the_reference_signers():
    rust_token = (ROOT / "src/sink/msk_iam.rs").read_text()
    rust_url = (ROOT / "src/storage/aws.rs").read_text()
    for session in (None, "FQoGZXIvYXdzEXAMPLETOKEN"):
        token, expiry = reference_token(session)
        url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        assert "User-Agent=aws-msk-iam-sasl-signer-python" in url
        signed = url[:url.index("&User-Agent=")]
        assert f'"{signed}"' in rust_url, f"the Rust presign test does not hold the reference URL {signed}"
        if session is None:
            assert f'"{token}"' in rust_token and str(expiry) in rust_token, "the Rust token test differs from the reference"


@pytest.fixture(scope="module")
def iam_kafka(tmp_path_factory):
    """(PLAINTEXT bootstrap, SASL_PLAINTEXT bootstrap) of a broker verifying MSK IAM tokens."""
    for tool in ("javac",):
        if shutil.which(tool) is None:
            pytest.skip(f"the MSK IAM test compiles a broker-side validator: no {tool} on PATH")
    try:
        libs = brokers.install_kafka()
    except RuntimeError as e:
        pytest.skip(f"the MSK IAM test starts an Apache Kafka of its own: {e}")
    classes = tmp_path_factory.mktemp("validator")
    subprocess.run(["javac", "-cp", str(libs / "*"), "-d", str(classes), str(ROOT / "tests/java/MskIamValidator.java")],
                   check=True, capture_output=True, text=True, timeout=300)
    plain, sasl, controller = free_port(), free_port(), free_port()
    extra = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "MskIamValidator",
        "msk.iam.test.key.id": KEY,
        "msk.iam.test.secret": SECRET,
    }
    broker = brokers.Kafka(port=plain, extra=extra, classpath=[classes])
    broker.controller_port = controller
    broker.start()
    try:
        yield broker.bootstrap, f"127.0.0.1:{sasl}"
    finally:
        broker.remove()


def iam_props(tmp_path, env, table, topic, sasl):
    secure_env = types.SimpleNamespace(bootstrap=sasl, registry=env.registry, offsets_topic="offsets-" + topic)
    return testkit.connector_props(tmp_path, "c-" + topic, table, topic, secure_env, **{
        "producer.override.security.protocol": "SASL_PLAINTEXT",
        "producer.override.sasl.mechanism": "OAUTHBEARER",
        "producer.override.sasl.oauthbearer.method": "aws_msk_iam",
        "producer.override.sasl.oauthbearer.aws.region": "us-east-1",
        "bootstrap.timeout.ms": "15000"})


def aws_env(monkeypatch, secret):
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
              "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)


def test_a_table_streams_with_an_msk_iam_login_and_replays_at_every_instant(env, registry, tmp_path, iam_kafka,
                                                                           monkeypatch):
    require_fixtures()
    aws_env(monkeypatch, SECRET)
    plaintext, sasl = iam_kafka
    oracle = testkit.load_oracle(FIXTURE)
    table = testkit.extract(FIXTURE, tmp_path / "t")
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "iam-" + uuid.uuid4().hex[:8]
    props = iam_props(tmp_path, env, table, topic, sasl)
    reader = types.SimpleNamespace(bootstrap=plaintext)
    replay, seen = testkit.Replay(registry), set()
    for step, inst in enumerate(oracle["instants"]):
        revealed.reveal_through(testkit.instant_order(inst))
        r = testkit.run_once(props)
        assert SECRET not in r.stderr
        replay.apply(testkit.new_records(testkit.consume_all(reader, topic), seen))
        testkit.compare(oracle, inst["rows"], replay, f"MSK IAM step {step}")
    assert {e["op"] for e in replay.events} >= {"r", "u"}


def test_a_wrong_secret_exits_1_naming_the_login_and_server(env, tmp_path, iam_kafka, monkeypatch):
    require_fixtures()
    wrong = "wrong" + uuid.uuid4().hex
    aws_env(monkeypatch, wrong)
    table = testkit.extract(FIXTURE, tmp_path / "t")
    topic = "iam-bad-" + uuid.uuid4().hex[:8]
    props = iam_props(tmp_path, env, table, topic, iam_kafka[1])
    r = testkit.run_once(props, timeout=120, check=False)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "refused the connector's" in r.stderr and iam_kafka[1] in r.stderr and "OAUTHBEARER" in r.stderr, r.stderr[-3000:]
    assert wrong not in r.stderr
