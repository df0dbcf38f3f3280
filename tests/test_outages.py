"""Outages ridden out: a broker killed and restarted under the project's Schema Registry. These
tests control a broker process of their own (noida-db, PyPI), whatever KAFKA_BOOTSTRAP names."""

import concurrent.futures
import signal
import subprocess
import tempfile
import time
import types
import uuid
from pathlib import Path

import pytest
import requests

import testkit
from conftest import free_port, wait_port


class Broker:
    """A private noida-db that can be killed and restarted on the same port and data."""

    def __init__(self, stop_signal=signal.SIGKILL):
        self.signal = stop_signal
        noida_db = pytest.importorskip("noida_db", reason="noida-db (PyPI) is needed to kill and restart a broker")
        self.binary = Path(noida_db.__file__).parent / "noida-db"
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="noida-outage-")
        self.proc = None
        self.start()

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        self.proc = subprocess.Popen([str(self.binary), "start", "--only", "kafka", "--host", "127.0.0.1",
                                      "--kafka-port", str(self.port), "--data-dir", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port("127.0.0.1", self.port)

    def kill(self):
        self.proc.send_signal(self.signal)
        self.proc.wait(10)
        deadline = time.time() + 30
        while time.time() < deadline:  # the port must be free before the restart binds it
            try:
                wait_port("127.0.0.1", self.port, timeout=0.5)
                time.sleep(0.2)
            except RuntimeError:
                return
        raise RuntimeError("the killed broker's port stayed open")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def start_registry(port, bootstrap, topic):
    """The project's registry on `port`, its schemas in `topic` of the broker at `bootstrap`."""
    p = subprocess.Popen([str(testkit.REGISTRY_BIN), "--listen", f"127.0.0.1:{port}", "--bootstrap-servers", bootstrap,
                          "--topic", topic], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port("127.0.0.1", port)
    return p


def generated(tmp_path, kind, rows):
    """A generated Hudi table (a bulk insert and two upsert commits) and hudi-rs's oracle of its
    latest state."""
    table = tmp_path / "gen"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", kind, "--path", str(table), "--rows", str(rows),
                        "--partitions", "3", "--commits", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return table, testkit.hudi_rs_oracle(table, only_latest=True)


def schema(name):
    return {"schema": '{"type":"record","name":"%s","fields":[{"name":"a","type":"long"}]}' % name}


def test_the_registry_recovers_from_a_broker_restart_with_stable_ids():
    broker = Broker(signal.SIGTERM)
    topic = "_schemas-" + uuid.uuid4().hex[:6]
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    reg = start_registry(port, broker.bootstrap, topic)
    try:
        a = requests.post(f"{url}/subjects/s1/versions", json=schema("A"), timeout=30)
        assert a.status_code == 200, a.text
        broker.kill()
        broker.start()
        b = requests.post(f"{url}/subjects/s2/versions", json=schema("B"), timeout=90)
        assert b.status_code == 200, f"registration after a broker restart: {b.status_code} {b.text}"
        ids = {"A": a.json()["id"], "B": b.json()["id"]}
        assert ids["A"] != ids["B"]
        again = requests.post(f"{url}/subjects/s1/versions", json=schema("A"), timeout=30)
        assert again.json()["id"] == ids["A"], "re-registering returns the same id"
        # a registration while the broker is down completes once it is back
        broker.kill()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(requests.post, f"{url}/subjects/s3/versions", json=schema("C"), timeout=90)
            time.sleep(3)
            broker.start()
            c = pending.result()
        assert c.status_code == 200, f"registration across a broker outage: {c.status_code} {c.text}"
        ids["C"] = c.json()["id"]
        assert len(set(ids.values())) == 3
        reg.terminate()
        reg.wait(10)
        reg = start_registry(port, broker.bootstrap, topic)
        for name, i in ids.items():
            r = requests.get(f"{url}/schemas/ids/{i}", timeout=10)
            assert r.status_code == 200 and f'"name":"{name}"' in r.json()["schema"].replace(" ", ""), (name, i, r.text)
    finally:
        reg.kill()
        broker.stop()


def test_a_broker_restart_mid_stream_is_ridden_out_exactly_once(tmp_path):
    """The broker restarts while a table streams (an open transaction, a producer whose sequence
    numbers the restarted broker forgot): the connector retries from the committed position with
    a new producer and finishes with every row once — nothing lost, nothing duplicated."""
    broker = Broker(signal.SIGTERM)
    port = free_port()
    reg = start_registry(port, broker.bootstrap, "_schemas")
    proc = None
    try:
        env = types.SimpleNamespace(bootstrap=broker.bootstrap, registry=f"http://127.0.0.1:{port}",
                                    offsets_topic="offsets-" + uuid.uuid4().hex[:6])
        table, oracle = generated(tmp_path, "mor", 400_000)
        topic = "outage-" + uuid.uuid4().hex[:6]
        props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{
            "transaction.max.records": "10000", "errors.retry.delay.max.ms": "2000"})
        proc = testkit.start(props, "--once")
        lines, seen = testkit.wait_for_log(proc, "emitting instant")
        assert seen, "".join(lines[-20:])
        time.sleep(0.3)
        broker.kill()
        time.sleep(4)
        broker.start()
        _, out = proc.communicate(timeout=240)
        log = "".join(lines) + out
        assert proc.returncode == 0, log[-3000:]
        assert "outage: retrying" in log, "the restart must have hit the running connector:\n" + log[-3000:]
        print("".join(l + "\n" for l in log.splitlines() if "outage: retrying" in l))
        replay = testkit.Replay(testkit.Registry(env.registry))
        replay.apply(testkit.consume_all(env, topic))
        testkit.compare(oracle, oracle["instants"][-1]["rows"], replay, "after a broker restart")
    finally:
        if proc and proc.poll() is None:
            proc.kill()
        reg.kill()
        broker.stop()


def test_a_registry_outage_at_start_is_ridden_out(env, tmp_path):
    """The Schema Registry is down when the first schema must be registered, longer than the
    client's own retries: the task retries from the committed position until it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    table, oracle = generated(tmp_path, "cow", 3000)
    topic = "regout-" + uuid.uuid4().hex[:6]
    here = types.SimpleNamespace(bootstrap=env.bootstrap, registry=url, offsets_topic=env.offsets_topic)
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, here, **{"errors.retry.delay.max.ms": "2000"})
    proc = testkit.start(props, "--once")
    reg = None
    try:
        time.sleep(15)  # past the registry client's own ~11 s of retries
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        reg = start_registry(port, env.bootstrap, "_schemas-" + uuid.uuid4().hex[:6])
        _, log = proc.communicate(timeout=120)
        assert proc.returncode == 0, log[-3000:]
        assert "outage: retrying" in log and "schema registry unavailable" in log, log[-3000:]
        replay = testkit.Replay(testkit.Registry(url))
        replay.apply(testkit.consume_all(here, topic))
        testkit.compare(oracle, oracle["instants"][-1]["rows"], replay, "after a registry outage")
    finally:
        if proc.poll() is None:
            proc.kill()
        if reg:
            reg.kill()
