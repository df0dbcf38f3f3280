"""`idle.release` (issue 32): a caught-up connector drops its Kafka producer after that long with
nothing to publish — no librdkafka thread is left in the process — and takes it back when the
table changes, exactly once; a newer instance of the task that started meanwhile keeps the task,
and the older one stops, fenced. Against the test broker (Apache Kafka by default)."""

import os
import time

import pyarrow as pa
import pytest

import testkit
from brokers import free_port
from test_metrics import scrape, value

deltalake = pytest.importorskip("deltalake")


def rdkafka_threads(pid):
    names = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            names.append(open(f"/proc/{pid}/task/{t}/comm").read().strip())
        except OSError:
            pass
    return [n for n in names if n.startswith("rdk:") or n == "kafka-events"]


def write(table, ids, mode="append", v="a"):
    deltalake.write_deltalake(str(table), pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{v}{i}" for i in ids]}),
                              mode=mode)


def started(env, tmp_path, *args):
    """A three-row Delta table and a connector on it (fast polls, `idle.release=1s`), running:
    (table, topic, properties, process, its log)."""
    table, name = tmp_path / "t", f"release-{os.urandom(3).hex()}"
    write(table, [1, 2, 3])
    props = testkit.connector_props(tmp_path, name, table, name, env, **{
        "connector.class": "delta", "key.fields": "id", "starting-version": "earliest",
        "read.streaming.check-interval": "300ms", "idle.release": "1s"})
    proc = testkit.start(props, *args)
    return table, name, props, proc, testkit.LogTail(proc)


def replay(env, registry, topic):
    r = testkit.Replay(registry)
    r.apply(testkit.consume_all(env, topic))
    return r


def table_state(table):
    rows = pa.table(deltalake.DeltaTable(str(table)).to_pyarrow_table()).to_pylist()
    return {r["id"]: r["v"] for r in rows}


def topic_state(r):
    import json
    return {json.loads(k)["id"]: after["v"] for k, after in r.state.items()}


def wait_until(cond, timeout=30, what=""):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out: {what}"
        time.sleep(0.1)


def test_an_idle_connector_holds_no_producer_and_takes_it_back_exactly_once(env, registry, tmp_path):
    port = free_port()
    table, name, props, proc, log = started(env, tmp_path, "--metrics-port", str(port))
    try:
        for round_ in range(1, 4):
            assert log.wait("producer released", count=round_, timeout=60), log.text()[-3000:]
            wait_until(lambda: not rdkafka_threads(proc.pid), what="librdkafka threads to end")
            # parked: polls go on, no producer comes back while nothing changes
            time.sleep(1.0)
            assert not rdkafka_threads(proc.pid), rdkafka_threads(proc.pid)
            assert log.count("taking the producer back") == round_ - 1
            if round_ == 1:
                assert value(scrape(port, "lakestream_task_parked"),
                             f'lakestream_task_parked{{connector="{name}",task="0"}}') == 1
            if round_ == 1:
                write(table, [4, 5])
            elif round_ == 2:
                deltalake.DeltaTable(str(table)).delete("id = 2")
            else:
                write(table, [1, 3, 4, 5], mode="overwrite", v="b")
            assert log.wait("taking the producer back", count=round_, timeout=30), log.text()[-3000:]
            assert log.wait("unit emitted", count=round_ + 1, timeout=60), log.text()[-3000:]
        r = replay(env, registry, name)
        assert topic_state(r) == table_state(table)
        ops = sorted((e["op"], e["after"]["id"] if e["after"] else e["before"]["id"]) for e in r.events)
        assert ops == sorted([("r", 1), ("r", 2), ("r", 3), ("c", 4), ("c", 5), ("d", 2),
                              ("u", 1), ("u", 3), ("u", 4), ("u", 5)]), ops
        assert proc.poll() is None, log.text()[-3000:]
    finally:
        proc.terminate()
    assert log.finish() == 0, log.text()[-3000:]
    testkit.assert_verified(props)


def test_a_newer_instance_keeps_the_task_and_the_parked_older_one_stops_fenced(env, registry, tmp_path):
    table, name, props, older, old_log = started(env, tmp_path)
    newer = None
    try:
        assert old_log.wait("producer released", timeout=60), old_log.text()[-3000:]
        newer = testkit.start(props)
        new_log = testkit.LogTail(newer)
        assert new_log.wait("producer released", timeout=60), new_log.text()[-3000:]
        write(table, [4])
        # the older instance finds the newer one on record before it takes the producer back
        assert old_log.finish(timeout=60) == 1, old_log.text()[-3000:]
        assert "is held by instance" in old_log.text(), old_log.text()[-3000:]
        assert new_log.wait("unit emitted", count=1, timeout=60), new_log.text()[-3000:]
        r = replay(env, registry, name)
        assert topic_state(r) == table_state(table)
        assert sorted(e["op"] for e in r.events) == ["c", "r", "r", "r"], [e["op"] for e in r.events]
        assert newer.poll() is None, new_log.text()[-3000:]
    finally:
        for p in (older, newer):
            if p is not None and p.poll() is None:
                p.terminate()
    assert new_log.finish() == 0
    testkit.assert_verified(props)
