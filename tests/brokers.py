"""Test brokers: Apache Kafka itself (the default) or noida-db (a fast in-RAM stand-in), each a
process on a loopback port that a test can start, kill -9, SIGSTOP and restart on the same data.

Kafka comes from Maven Central only: a small pom names `org.apache.kafka:kafka_2.13` and a log4j2
binding, and `mvn dependency:copy-dependencies` puts the jars under /var/cache (a second start
needs no network). One KRaft node is broker and controller at once, with settings for tests:
replication factor 1 for the internal topics, no initial rebalance delay, and the transaction
coordinator's abort/cleanup timers at one second, so a stalled producer's transaction is aborted
by the broker within about transaction.timeout.ms + 1 s, and a short broker session so a node
killed -9 is back in about 5 s.

Also a command line, for scripts/lib.sh:
    python tests/brokers.py install             # the jars (prints where)
    python tests/brokers.py serve PORT DIR      # a broker in the foreground (exec: its pid is ours)
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import mavenlibs

KAFKA_VERSION = os.environ.get("LAKESTREAM_KAFKA_VERSION", "4.1.2")
LOG4J_VERSION = "2.24.3"
CACHE = Path(os.environ.get("LAKESTREAM_KAFKA_CACHE", "/var/cache/lakestream-kafka"))
HOME = CACHE / KAFKA_VERSION
LIBS = HOME / "libs"

POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lakestream.test</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{LOG4J_VERSION}</version></dependency>
  </dependencies>
</project>
"""

# warnings only, but the lines that say the broker is up and which version it is
LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
      - name: org.apache.kafka.common.utils.AppInfoParser
        level: INFO
"""

# Settings for tests. Everything else is Kafka's default, as a user's broker has it.
TEST_SETTINGS = {
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
    "log.segment.bytes": str(64 << 20),
    # a restarted node waits out its own previous registration: 9 s by default (restart 13.8 s),
    # 2 s here (restart 4.8 s)
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port, timeout=0.5):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(port, timeout=60, proc=None, log=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if port_open(port):
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = Path(log).read_text(errors="replace")[-3000:] if log and Path(log).exists() else ""
    raise RuntimeError(f"broker port {port} did not open\n{tail}")


def kafka_installed():
    return (LIBS / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()


def install_kafka():
    """The broker's jars from Maven Central into the cache (once). Returns the libs directory."""
    if kafka_installed():
        return LIBS
    if not shutil.which("mvn") or not shutil.which("java"):
        raise RuntimeError("Apache Kafka needs java and mvn (Maven) on PATH; or set LAKESTREAM_TEST_BROKER=noida")
    started = time.time()
    mavenlibs.copy_dependencies(POM, LIBS, CACHE / "m2")
    print(f"Apache Kafka {KAFKA_VERSION} installed in {LIBS} ({time.time() - started:.1f} s)", file=sys.stderr)
    (HOME / "log4j2.yaml").write_text(LOG4J2)
    return LIBS


def java_command(main, *args, heap="768m", classpath=()):
    cp = os.pathsep.join([str(LIBS / "*"), *map(str, classpath)])
    return ["java", f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={HOME / 'log4j2.yaml'}", "-cp", cp, main, *args]


def kafka_config(port, controller_port, data, extra=None):
    """server.properties of a one-node KRaft cluster on loopback, its data in `data`."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(Path(data) / "log"),
        **TEST_SETTINGS,
        **(extra or {}),
    }
    path = Path(data) / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


class Kafka:
    """One Apache Kafka node (KRaft, broker + controller) on a loopback port, restartable on its data."""

    kind = "kafka"

    def __init__(self, port=None, data=None, extra=None, classpath=()):
        """`classpath`: more directories or jars for the broker (a test's own callback handler)."""
        install_kafka()
        self.classpath = list(classpath)
        self.port = port or free_port()
        self.controller_port = free_port()
        self.dir = Path(data or tempfile.mkdtemp(prefix="kafka-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = kafka_config(self.port, self.controller_port, self.dir, extra)
        self.log = self.dir / "broker.log"
        self.proc = None
        if not (self.dir / "log" / "meta.properties").exists():
            subprocess.run(java_command("kafka.tools.StorageTool", "format", "-t", uuid.uuid4().hex[:22],
                                        "-c", str(self.config), heap="256m"),
                           check=True, capture_output=True, text=True)

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def command(self):
        """The broker process's command line."""
        return java_command("kafka.Kafka", str(self.config), classpath=self.classpath)

    start_timeout = 90

    def start(self):
        out = open(self.log, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        wait_port(self.port, self.start_timeout, self.proc, self.log)

    def version(self):
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return next((l.split("Kafka version: ")[1].split()[0] for l in text.splitlines() if "Kafka version: " in l),
                    KAFKA_VERSION)

    def rss_mib(self):
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
        except (OSError, AttributeError):
            pass
        return None

    stop_signal = signal.SIGKILL

    def kill(self, sig=None, timeout=120):
        """Stop the process (with `stop_signal`, kill -9 unless set) and wait until the port is free
        for a restart."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(sig or self.stop_signal)
        self.proc.wait(timeout)
        deadline = time.time() + 30
        while port_open(self.port):
            if time.time() > deadline:
                raise RuntimeError(f"the stopped broker's port {self.port} stayed open")
            time.sleep(0.1)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Noida(Kafka):
    """noida-db (PyPI): speaks Kafka's protocol, keeps every byte in RAM, forgets idempotent
    sequence numbers on restart. Fast to start; not a proof of anything a real broker does."""

    kind = "noida"

    def __init__(self, port=None, data=None, extra=None):  # noqa: ARG002 (noida takes no settings)
        import noida_db
        self.binary = Path(noida_db.__file__).parent / "noida-db"
        self.port = port or free_port()
        self.dir = Path(data or tempfile.mkdtemp(prefix="noida-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "broker.log"
        self.proc = None

    start_timeout = 60

    def command(self):
        return [str(self.binary), "start", "--only", "kafka", "--host", "127.0.0.1", "--kafka-port", str(self.port),
                "--data-dir", str(self.dir / "data")]

    def version(self):
        import importlib.metadata
        return "noida-db " + importlib.metadata.version("noida-db")


def kind():
    """The broker tests start: LAKESTREAM_TEST_BROKER=kafka (default) or noida."""
    k = os.environ.get("LAKESTREAM_TEST_BROKER", "kafka").lower()
    if k not in ("kafka", "noida"):
        raise SystemExit(f"LAKESTREAM_TEST_BROKER={k!r}: use kafka or noida")
    return k


def new_broker(port=None, data=None, extra=None):
    """A broker of the selected kind, not yet started."""
    return (Kafka if kind() == "kafka" else Noida)(port, data, extra)


def main(argv):
    if argv[:1] == ["install"]:
        if kind() == "kafka":
            print(install_kafka())
        return 0
    if len(argv) == 3 and argv[0] == "serve":
        cmd = new_broker(int(argv[1]), argv[2]).command()
        os.execvp(cmd[0], cmd)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
