"""Session services: a Kafka broker (KAFKA_BOOTSTRAP, or one started here: Apache Kafka, or noida-db
with LAKESTREAM_TEST_BROKER=noida; tests/brokers.py) and the project's Schema Registry
(SCHEMA_REGISTRY_URL, or lakestream-registry started here)."""

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import brokers  # noqa: E402
import testkit  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", help="chaos tests: 25 outages of each kind instead of a few")


free_port = brokers.free_port


def wait_port(host, port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{host}:{port} did not open")


class Env:
    bootstrap: str
    registry: str
    offsets_topic: str


@pytest.fixture(scope="session")
def env():
    procs, broker = [], None
    e = Env()
    e.bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if not e.bootstrap:
        broker = brokers.new_broker()
        broker.start()
        e.bootstrap = broker.bootstrap
    e.registry = os.environ.get("SCHEMA_REGISTRY_URL")
    if not e.registry:
        if not testkit.REGISTRY_BIN.exists():
            pytest.exit(f"{testkit.REGISTRY_BIN} not built: run cargo build --release first", 2)
        port = free_port()
        procs.append(subprocess.Popen([str(testkit.REGISTRY_BIN), "--listen", f"127.0.0.1:{port}",
                                       "--bootstrap-servers", e.bootstrap, "--topic", "_schemas-" + uuid.uuid4().hex[:8]],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port("127.0.0.1", port)
        e.registry = f"http://127.0.0.1:{port}"
    e.offsets_topic = "lakestream-offsets-" + uuid.uuid4().hex[:8]
    if not testkit.BIN.exists():
        pytest.exit(f"{testkit.BIN} not built: run cargo build --release first", 2)
    yield e
    for p in procs:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
    if broker:
        broker.remove()


@pytest.fixture
def registry(env):
    return testkit.Registry(env.registry)


require_fixtures = testkit.require_fixtures
