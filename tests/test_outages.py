"""Outages ridden out: a broker killed and restarted under the project's Schema Registry. These
tests control a broker process of their own (Apache Kafka, or noida-db with
LAKESTREAM_TEST_BROKER=noida), whatever KAFKA_BOOTSTRAP names."""

import concurrent.futures
import contextlib
import os
import random
import signal
import socket
import subprocess
import time
import types
import uuid

import pytest
import requests

import brokers
import faultproxy
import testkit
from conftest import free_port, wait_port


# How the restart test stops the broker: kill -9 on Kafka (its log survives in the page cache and
# is recovered at start); noida keeps its data in RAM and writes it out only on SIGTERM.
RESTART_SIGNAL = signal.SIGKILL if brokers.kind() == "kafka" else signal.SIGTERM


def Broker(stop_signal=signal.SIGKILL):
    """A private broker of the selected kind (tests/brokers.py), started, that `kill()` stops with
    `stop_signal` and `start()` restarts on the same port and data."""
    broker = brokers.new_broker()
    broker.stop_signal = stop_signal
    broker.start()
    return broker


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
        broker.remove()


def chaos_count(request, modest):
    """How many outages a chaos test causes: `modest` in CI, 50 with `pytest --long`, or
    LAKESTREAM_CHAOS_COUNT."""
    if os.environ.get("LAKESTREAM_CHAOS_COUNT"):
        return int(os.environ["LAKESTREAM_CHAOS_COUNT"])
    return 50 if request.config.getoption("--long") else modest


def streaming(tmp_path, broker, rows, via=None, **extra):
    """A registry on `broker`, a generated MOR table of `rows` rows and a started `run --once`
    connector (small transactions, a 5 s transaction timeout, fast retries, a metrics port),
    reaching the broker through `via` (a fault proxy) when given."""
    port = free_port()
    reg = start_registry(port, broker.bootstrap, "_schemas")
    env = types.SimpleNamespace(bootstrap=(via or broker).bootstrap, registry=f"http://127.0.0.1:{port}",
                                offsets_topic="offsets-" + uuid.uuid4().hex[:6])
    table, oracle = generated(tmp_path, "mor", rows)
    topic = "outage-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{
        "transaction.max.records": "2000", "transaction.timeout.ms": "5000", "errors.retry.delay.max.ms": "2000", **extra})
    metrics = free_port()
    log = testkit.LogTail(testkit.start(props, "--once", "--metrics-port", str(metrics)))
    wait_port("127.0.0.1", metrics)
    return types.SimpleNamespace(env=env, topic=topic, oracle=oracle, registry=reg, log=log, metrics=metrics)


def wait_commits(run, n, timeout=60):
    """Wait until the connector committed `n` more transactions (its metrics endpoint)."""
    def committed():
        if run.log.proc.poll() is not None:
            run.log.finish(30)  # (its last lines read)
            noida_stopped(run)
            raise AssertionError(f"the connector exited ({run.log.proc.returncode}): " + run.log.text()[-3000:])
        text = requests.get(f"http://127.0.0.1:{run.metrics}/metrics", timeout=5).text
        return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("lakestream_sink_transactions_committed_total"))
    target, deadline = committed() + n, time.time() + timeout
    while committed() < target:
        assert time.time() < deadline and run.log.proc.poll() is None, run.log.text()[-3000:]
        time.sleep(0.1)


def finish_exactly_once(run, what, outages):
    """The connector ends with exit 0 having ridden out `outages` outages, and the topic replays to
    the table: nothing lost, nothing duplicated. On noida-db a stall can end otherwise: it commits
    a late batch of an aborted epoch with the next transaction (tests/late_produce.py), and the
    connector, finding those records beside their republished copies, stops naming them."""
    code = run.log.finish()
    if code != 0:
        noida_stopped(run)
    assert code == 0, run.log.text()[-3000:]
    print("".join(l for l in run.log.text().splitlines(True) if any(w in l for w in ("outage", "resuming", "initialised"))))
    assert run.log.count("outage: retrying") >= outages, run.log.text()[-3000:]
    replay = testkit.Replay(testkit.Registry(run.env.registry))
    records = testkit.consume_all(run.env, run.topic)
    try:
        replay.apply(records)
    except AssertionError:
        diagnose(run, records, replay)
        raise
    testkit.compare(run.oracle, run.oracle["instants"][-1]["rows"], replay, what)
    return replay


def noida_stopped(run):
    """An xfail when the connector stopped on noida-db because it found records of an aborted
    transaction committed after all (tests/late_produce.py): the broker's fault, named."""
    text = run.log.text()
    if brokers.kind() == "noida" and "holds them twice" in text:
        line = next(l for l in text.splitlines() if "holds them twice" in l)
        pytest.xfail(f"noida-db published an aborted transaction's batch; the connector stopped: {line[:600]}")


def diagnose(run, records, replay):
    """With LAKESTREAM_CHAOS_DIAG=<dir>: the connector's whole log, and every record of the keys
    the replay failed on (partition, offset, op, source), written there."""
    out = os.environ.get("LAKESTREAM_CHAOS_DIAG")
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "connector.log"), "w") as f:
        f.write(run.log.text())
    # the record the replay stopped at: the first whose (key, instant, op) it had seen
    seen, bad = set(), None
    for p, o, k, v in records:
        if v is None:
            continue
        ev = replay.registry.decode(v)
        ident = (k, ev["source"]["instant"], ev["op"])
        if ident in seen:
            bad = k
            break
        seen.add(ident)
    with open(os.path.join(out, "records.txt"), "w") as f:
        for p, o, k, v in records:
            if k == bad:
                ev = replay.registry.decode(v) if v is not None else None
                f.write(f"partition {p} offset {o} op {ev and ev['op']} source {ev and ev['source']}\n")


def strike(run, proxy, n, fault):
    """`fault(proxy, run, k)` `n` times, each after two more commits at a random moment."""
    rng = random.Random(n)
    for k in range(n):
        wait_commits(run, 2, timeout=120)
        time.sleep(rng.uniform(0.0, 0.3))
        assert run.log.proc.poll() is None, f"the stream ended before fault {k + 1}: make the table larger"
        fault(proxy, run, k)


@contextlib.contextmanager
def proxied_stream(tmp_path, n):
    """A private broker, a fault proxy in front of it and a table large enough for `n` faults
    streamed through it: (run, proxy); all stopped and removed after."""
    broker, proxy = faultproxy.proxied_broker()
    run = None
    try:
        run = streaming(tmp_path, broker, 200_000 + 100_000 * n, via=proxy)
        yield run, proxy
    finally:
        if run:
            run.log.proc.kill()
            run.registry.kill()
        proxy.close()
        broker.remove()


def proxied_chaos(tmp_path, n, fault, what):
    """A table streamed through a fault proxy while `fault(proxy, run, k)` strikes `n` times, each
    after two more commits at a random moment; the run must end exactly once. Returns the proxy's
    counts (what struck) and the run's log."""
    with proxied_stream(tmp_path, n) as (run, proxy):
        strike(run, proxy, n, fault)
        finish_exactly_once(run, f"after {n} {what}", 0)
        return dict(proxy.stats), run.log


def test_broker_restarts_mid_stream_are_ridden_out_exactly_once(tmp_path, request):
    """The broker is killed (-9 on Kafka) and restarted again and again while a table streams
    (open transactions, producers whose sequence numbers the restarted broker forgot, commits
    pending past the transaction timeout). Each time the broker stays down until the connector
    has seen the outage, so every restart hits it; it retries from the committed position with a
    new producer and finishes with every row once."""
    restarts = chaos_count(request, 3)
    broker = Broker(RESTART_SIGNAL)
    run = None
    try:
        run = streaming(tmp_path, broker, 200_000 + 100_000 * restarts)
        rng = random.Random(restarts)
        # resumes logged before the broker last came back: the connector must resume once more
        # (counted, not assumed one per restart: a start that fails while the broker is still
        # down logs a second outage, and a 50-restart run lost count at the 9th)
        resumed = 0
        for k in range(restarts):
            # wait for the connector to (re)connect and commit (its schemas registered: the
            # registry shares the broker), then restart at a random moment
            assert run.log.wait("resuming from stored offsets", resumed + 1), run.log.text()[-3000:]
            # (each outage lets the stream advance little: 25 of them fit in the table)
            wait_commits(run, 2)
            time.sleep(rng.uniform(0.0, 0.3))
            assert run.log.proc.poll() is None, f"the stream ended before restart {k + 1}: make the table larger"
            outages = run.log.count("outage: retrying")
            broker.kill()
            assert run.log.wait("outage: retrying", outages + 1, timeout=60), run.log.text()[-3000:]
            resumed = run.log.count("resuming from stored offsets")
            broker.start()
        finish_exactly_once(run, f"after {restarts} broker restarts", restarts)
    finally:
        if run:
            run.log.proc.kill()
            run.registry.kill()
        broker.remove()


def test_broker_stalls_longer_than_the_transaction_timeout_are_ridden_out(tmp_path, request):
    """The broker stops answering (SIGSTOP) for longer than transaction.timeout.ms while a table
    streams: `/healthz` turns 503 naming the stalled task, `/ready` too; when the broker resumes
    the connector recovers (the broker's own transaction timeouts, abortable errors, epoch bumps)
    and finishes with every row once."""
    stalls = chaos_count(request, 2)
    broker = Broker(signal.SIGTERM)
    run = None
    try:
        run = streaming(tmp_path, broker, 200_000 + 100_000 * stalls)
        url = f"http://127.0.0.1:{run.metrics}"
        rng = random.Random(stalls)
        for k in range(stalls):
            # (each outage lets the stream advance little: 25 of them fit in the table)
            wait_commits(run, 2)
            time.sleep(rng.uniform(0.0, 0.3))
            assert run.log.proc.poll() is None, f"the stream ended before stall {k + 1}: make the table larger"
            assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
            broker.proc.send_signal(signal.SIGSTOP)
            try:
                # unhealthy once no progress for the stall limit (transaction.timeout.ms 5 s + poll
                # interval); not ready once the connector sees the outage (a transaction call times out)
                seen = {"/healthz": None, "/ready": None}
                deadline = time.time() + 45
                while time.time() < deadline and None in seen.values():
                    for path in seen:
                        r = requests.get(url + path, timeout=5)
                        if r.status_code == 503 and seen[path] is None:
                            seen[path] = r.text
                    time.sleep(0.5)
                assert seen["/healthz"] and "no progress" in seen["/healthz"], f"/healthz stayed healthy during a stall: {seen}"
                assert seen["/ready"], f"/ready stayed ready during a stall: {seen}" + run.log.text()[-4000:]
                time.sleep(rng.uniform(0, 3))
            finally:
                broker.proc.send_signal(signal.SIGCONT)
            # progress again: healthy
            deadline = time.time() + 90
            while time.time() < deadline and run.log.proc.poll() is None:
                if requests.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
                time.sleep(0.5)
        finish_exactly_once(run, f"after {stalls} broker stalls", 0)
    finally:
        if run:
            run.log.proc.kill()
            run.registry.kill()
        broker.proc.send_signal(signal.SIGCONT)
        broker.remove()


def test_commits_whose_outcome_is_lost_are_resolved_exactly_once(tmp_path, request):
    """The broker receives the commit (EndTxn) but its answer never reaches the connector: the
    proxy swallows every EndTxn response, each retry's too, for longer than the commit call waits
    (transaction.timeout.ms 5 s: the call gives up after 10 s). Whether that transaction committed
    is unknown to the connector; it learns it from the cluster (a new producer settles it, the
    position is read back settled, and the transaction's own position and change records must be
    both committed or both not) and publishes nothing twice."""
    n = chaos_count(request, 2)

    def lose_commit_answers(proxy, run, k):
        # until the connector gives the commit up: its call waits 10 s, librdkafka retrying
        # EndTxn on new connections meanwhile (each answer lost too)
        proxy.drop_responses(faultproxy.END_TXN, 60)
        try:
            assert run.log.wait("outage: retrying", k + 1, timeout=60), run.log.text()[-3000:]
        finally:
            proxy.drop_responses(faultproxy.END_TXN, 0)

    stats, log = proxied_chaos(tmp_path, n, lose_commit_answers, "lost commit answers")
    assert stats.get(f"dropped {faultproxy.END_TXN}", 0) >= n, stats
    assert log.count("outage: retrying") >= n, log.text()[-3000:]
    # each unknown outcome was looked up in the cluster before anything more was published
    assert log.count("commit outcome resolved from the cluster") >= n, log.text()[-3000:]
    print(f"{n} faults, EndTxn answers lost: {stats.get(f'dropped {faultproxy.END_TXN}')}, outages: {log.count('outage: retrying')}")


def test_connections_reset_mid_produce_are_ridden_out_exactly_once(tmp_path, request):
    """A connection is reset right after a produce request reached the broker, before its answer:
    the records may be written, unacknowledged. The idempotent producer's retry must not write
    them twice, nor may the connector when it recovers."""
    n = chaos_count(request, 3)

    def reset_mid_produce(proxy, run, k):
        proxy.reset_after(faultproxy.PRODUCE, 1)
        deadline = time.time() + 60
        while proxy.pending_resets(faultproxy.PRODUCE) and time.time() < deadline:
            time.sleep(0.05)
        assert not proxy.pending_resets(faultproxy.PRODUCE), "no produce request within a minute"

    stats, log = proxied_chaos(tmp_path, n, reset_mid_produce, "connection resets mid-produce")
    assert stats.get(f"reset after {faultproxy.PRODUCE}", 0) == n, stats
    print(f"{n} resets mid-produce, outages: {log.count('outage: retrying')}")


def test_a_produce_that_lands_after_its_transaction_failed_is_never_published_twice(tmp_path, request):
    """One produce request is held by the proxy until its records time out in the connector
    ("requires epoch bump"); the connector aborts (librdkafka bumps the producer epoch) and
    republishes from the committed position — and the held request reaches the broker just before
    that epoch bump, as a stalled broker works off its backlog. Kafka refuses the late batch or
    aborts it with its transaction; the connector looks for the failed transaction's records
    (fingerprints, none acknowledged) before and after republishing, finds none and ends exact.
    noida-db appends the batch and commits it with the connector's next transaction
    (`tests/late_produce.py` shows it alone): the connector must stop loudly, naming where the
    records appeared twice, instead of going on with exit 0."""
    n = chaos_count(request, 2) if brokers.kind() == "kafka" else 1

    def hold_produce(proxy, run, k):
        proxy.hold(faultproxy.PRODUCE, release_before=faultproxy.INIT_PRODUCER_ID)
        deadline = time.time() + 90
        while not proxy.stats.get(f"released {faultproxy.PRODUCE}", 0) > k and time.time() < deadline:
            assert run.log.proc.poll() is None or brokers.kind() != "kafka", run.log.text()[-3000:]
            time.sleep(0.1)
        assert proxy.stats.get(f"released {faultproxy.PRODUCE}", 0) > k, (dict(proxy.stats), run.log.text()[-3000:])

    with proxied_stream(tmp_path, n) as (run, proxy):
        strike(run, proxy, n, hold_produce)
        answers = [faultproxy.produce_errors(v, f) for _, v, f in proxy.held_answers]
        print(f"{n} late produces, the broker answered: {answers}")
        if brokers.kind() == "kafka":
            finish_exactly_once(run, f"after {n} late produces", n)
            assert run.log.count("none of its records became visible") >= n, run.log.text()[-3000:]
            assert all(a and a[0] != 0 for a in answers), f"Kafka accepted a produce of an aborted epoch: {answers}"
            return
        # noida: accepted, kept, committed with the next transaction; the connector stops
        assert run.log.finish(timeout=180) != 0, run.log.text()[-3000:]
        assert "holds them twice" in run.log.text(), run.log.text()[-3000:]
        print(next(l for l in run.log.text().splitlines() if "holds them twice" in l)[:600])


def test_an_unreachable_bootstrap_fails_within_its_timeout_naming_each_address(tmp_path):
    """At start, bootstrap.servers that cannot be reached fail the task within
    bootstrap.timeout.ms, naming each address and what is wrong with it: a refused port, an
    unknown host, a listener that is not Kafka (it accepts and never answers)."""
    table, _ = generated(tmp_path, "cow", 100)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    refused = free_port()
    cases = {
        f"127.0.0.1:{refused},no-such-host.invalid:9092": ["no bootstrap server could be reached",
                                                           f"127.0.0.1:{refused}: connection refused",
                                                           "no-such-host.invalid:9092: unknown host"],
        f"127.0.0.1:{refused},127.0.0.1:{silent.getsockname()[1]}": ["no Kafka metadata answer",
                                                                     f"127.0.0.1:{silent.getsockname()[1]}: accepts TCP connections",
                                                                     "security.protocol"],
    }
    try:
        for bootstrap, expected in cases.items():
            env = types.SimpleNamespace(bootstrap=bootstrap, registry="http://127.0.0.1:1", offsets_topic="o")
            props = testkit.connector_props(tmp_path, "unreachable", table, "t", env, **{"bootstrap.timeout.ms": "3000"})
            started = time.time()
            r = subprocess.run([str(testkit.BIN), "run", "--once", str(props)], capture_output=True, text=True, timeout=60)
            took = time.time() - started
            assert r.returncode == 1, r.stderr[-2000:]
            assert took < 15, f"took {took:.1f} s for bootstrap.timeout.ms=3000"
            for e in expected:
                assert e in r.stderr, f"{e!r} not in:\n{r.stderr[-2000:]}"
    finally:
        silent.close()


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
