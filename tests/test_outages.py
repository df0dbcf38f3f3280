"""Outages ridden out: a broker killed and restarted under the project's Schema Registry. These
tests control a broker process of their own (noida-db, PyPI), whatever KAFKA_BOOTSTRAP names."""

import concurrent.futures
import signal
import subprocess
import tempfile
import time
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


def schema(name):
    return {"schema": '{"type":"record","name":"%s","fields":[{"name":"a","type":"long"}]}' % name}


def test_the_registry_recovers_from_a_broker_restart_with_stable_ids():
    broker = Broker(signal.SIGTERM)
    topic = "_schemas-" + uuid.uuid4().hex[:6]
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def start_registry():
        p = subprocess.Popen([str(testkit.REGISTRY_BIN), "--listen", f"127.0.0.1:{port}", "--bootstrap-servers",
                              broker.bootstrap, "--topic", topic], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port("127.0.0.1", port)
        return p

    reg = start_registry()
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
        reg = start_registry()
        for name, i in ids.items():
            r = requests.get(f"{url}/schemas/ids/{i}", timeout=10)
            assert r.status_code == 200 and f'"name":"{name}"' in r.json()["schema"].replace(" ", ""), (name, i, r.text)
    finally:
        reg.kill()
        broker.stop()
