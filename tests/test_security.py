"""Secure settings: a Schema Registry that requires basic auth is used with the configured
credentials (and refuses wrong ones with a clear error); secrets never reach logs, `validate`
output or metrics."""

import subprocess
import urllib.request
import uuid

import testkit
from conftest import free_port, require_fixtures, wait_port

FIXTURE = "sample_table/cow/v9_txns_simple_meta"


def test_registry_basic_auth_and_secrets_never_printed(env, registry, tmp_path):
    require_fixtures()
    port = free_port()
    creds = "svc-lakestream:" + uuid.uuid4().hex
    reg = subprocess.Popen([str(testkit.REGISTRY_BIN), "--listen", f"127.0.0.1:{port}", "--bootstrap-servers", env.bootstrap,
                            "--topic", "_schemas-auth-" + uuid.uuid4().hex[:6], "--basic-auth", creds],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", port)
        url = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(urllib.request.Request(url + "/subjects", method="GET")) as r:  # noqa: S310
            raise AssertionError(f"unauthenticated request accepted: {r.status}")
    except urllib.error.HTTPError as e:
        assert e.code == 401
    try:
        oracle = testkit.load_oracle(FIXTURE)
        table = testkit.extract(FIXTURE, tmp_path / "t")
        topic = "sec-" + uuid.uuid4().hex[:8]
        metrics_port = free_port()
        (tmp_path / "user-info").write_text(creds + "\n")
        props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{
            "schema.registry.url": url, "schema.registry.basic.auth.user.info": f"${{file:{tmp_path / 'user-info'}}}",
            "producer.override.sasl.password": "${env:LS_TEST_SECRET}", "metrics.port": str(metrics_port)})
        secret_env = {"LS_TEST_SECRET": "kafka-" + uuid.uuid4().hex}
        import os
        run_env = {**os.environ, **secret_env}
        r = subprocess.run([str(testkit.BIN), "validate", str(props)], capture_output=True, text=True, env=run_env)
        assert r.returncode == 0, r.stderr
        for s in [creds, secret_env["LS_TEST_SECRET"]]:
            assert s not in r.stdout + r.stderr
        # sasl.password without SASL is ignored by librdkafka; the run itself must succeed with the credentials
        props.write_text(props.read_text().replace("producer.override.sasl.password=${env:LS_TEST_SECRET}\n", ""))
        r = subprocess.run([str(testkit.BIN), "run", "--once", str(props)], capture_output=True, text=True, timeout=120, env=run_env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert creds not in r.stdout + r.stderr and creds.split(":")[1] not in r.stderr
        replay = testkit.Replay(testkit.Registry(env.registry))
        # decode with the authenticated registry
        replay.registry = AuthRegistry(url, creds)
        replay.apply(testkit.consume_all(env, topic))
        testkit.compare(oracle, oracle["instants"][-1]["rows"], replay, "basic-auth registry")
        # wrong credentials: exit 1 naming the HTTP status, without echoing the password
        props2 = tmp_path / "wrong.properties"
        props2.write_text(props.read_text().replace(f"${{file:{tmp_path / 'user-info'}}}", "svc-lakestream:wrong-pass-123")
                          .replace(f"name=c-{topic}", f"name=c2-{topic}").replace(f"topic={topic}", f"topic={topic}-2"))
        r = subprocess.run([str(testkit.BIN), "run", "--once", str(props2)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "401" in r.stderr and "wrong-pass-123" not in r.stderr, r.stderr[-2000:]
    finally:
        reg.terminate()
        reg.wait(10)


class AuthRegistry(testkit.Registry):
    def __init__(self, url, creds):
        super().__init__(url)
        self.creds = tuple(creds.split(":", 1))

    def schema(self, sid):
        import json

        import fastavro
        import requests
        if sid not in self.cache:
            r = requests.get(f"{self.url}/schemas/ids/{sid}", auth=self.creds, timeout=10)
            r.raise_for_status()
            self.cache[sid] = fastavro.parse_schema(json.loads(r.json()["schema"]))
        return self.cache[sid]
