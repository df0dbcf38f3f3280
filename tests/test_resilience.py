"""Crashes and competing instances: kill -9 at random moments while streaming a revealed history,
and a second instance of the same connector fencing the first."""

import random
import signal
import subprocess
import time
import uuid

import pytest

import testkit
from conftest import require_fixtures

KILL_FIXTURE = "sample_table/cow/v9_txns_simple_meta"
# copy-on-write and merge-on-read histories with deletes, insert overwrite, compaction, clustering
KILL_FIXTURES = [KILL_FIXTURE, "sample_table/mor/avro/v9_txns_simple_meta"]


start = testkit.start


def setup(env, tmp_path, prefix, fixture=KILL_FIXTURE, **extra):
    return testkit.revealed_fixture(env, tmp_path, prefix, fixture, **extra)


def finish(env, registry, props, topic, oracle, rows):
    testkit.run_once(props)
    replay = testkit.Replay(registry)  # asserts no (key, instant, op) twice
    replay.apply(testkit.consume_all(env, topic))
    testkit.compare(oracle, rows, replay, "final replay")
    return replay


@pytest.mark.parametrize("fixture", KILL_FIXTURES)
def test_kill_9_at_random_moments_loses_and_duplicates_nothing(env, registry, tmp_path, fixture):
    seed = int(time.time())
    print("kill test seed", seed)
    rng = random.Random(seed)
    require_fixtures()
    first = testkit.load_oracle(fixture)["instants"][0]["requested"]
    # tiny transactions so that kills land inside units, between splits and mid-split
    oracle, instants, revealed, topic, props = setup(
        env, tmp_path, "kill", fixture,
        **{"transaction.max.records": "2", "read.start-commit": first, "read.streaming.check-interval": "50ms"})
    revealed.reveal_through(testkit.instant_order(instants[0]))
    step, kills = 0, 0
    proc = start(props)
    while kills < 20:
        time.sleep(rng.uniform(0.02, 0.4))
        if step + 1 < len(instants) and rng.random() < 0.6:
            step += 1
            revealed.reveal_through(testkit.instant_order(instants[step]))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        proc = start(props)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    revealed.reveal_through(testkit.instant_order(instants[-1]))
    replay = finish(env, registry, props, topic, oracle, instants[-1]["rows"])
    assert {e["op"] for e in replay.events} >= {"c", "u", "d"}
    # and the connector's own audit agrees after 20 kills: nothing missing, extra or twice
    report = testkit.assert_verified(props, f"seed {seed}")
    assert report["total"]["duplicated_events"] == 0


def test_transaction_metadata_has_one_begin_and_end_per_commit_across_kills(env, registry, tmp_path):
    """provide.transaction.metadata with 3-record Kafka transactions, so every lake commit spans
    several of them, and kill -9 at 10 random moments: each commit that published events has
    exactly one BEGIN and one END in `<topic>.transaction`, END's event_count is the number of
    that commit's events, and the events' total_order is exactly 1..n."""
    seed = int(time.time())
    print("transaction metadata kill seed", seed)
    rng = random.Random(seed)
    require_fixtures()
    fixture = KILL_FIXTURES[1]
    first = testkit.load_oracle(fixture)["instants"][0]["requested"]
    oracle, instants, revealed, topic, props = setup(
        env, tmp_path, "txmeta", fixture, **{"transaction.max.records": "3", "read.start-commit": first,
                                             "read.streaming.check-interval": "50ms", "provide.transaction.metadata": "true"})
    revealed.reveal_through(testkit.instant_order(instants[-1]))
    for _ in range(10):
        proc = start(props)
        time.sleep(rng.uniform(0.2, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    replay = finish(env, registry, props, topic, oracle, instants[-1]["rows"])
    events = {}
    for e in replay.events:
        assert e["transaction"]["id"] == e["source"]["instant"], e["transaction"]
        events.setdefault(e["transaction"]["id"], []).append(e["transaction"]["total_order"])
    markers = {}
    for _, _, k, v in testkit.consume_all(env, topic + ".transaction"):
        m = registry.decode(v)
        assert registry.decode(k) == {"id": m["id"]}
        markers.setdefault(m["id"], []).append(m)
    assert set(markers) == set(events), f"commits with events {sorted(events)} vs with markers {sorted(markers)}"
    for tid, orders in events.items():
        assert sorted(orders) == list(range(1, len(orders) + 1)), f"{tid}: total_order {sorted(orders)[:10]}..."
        ms = markers[tid]
        assert [m["status"] for m in ms] == ["BEGIN", "END"], f"{tid}: {[m['status'] for m in ms]}"
        assert ms[0]["event_count"] is None and ms[1]["event_count"] == len(orders), (tid, ms[1], len(orders))
        assert ms[1]["data_collections"][0]["event_count"] == len(orders)
    assert max(len(o) for o in events.values()) > 3, "some commit must span several Kafka transactions"


def test_second_instance_fences_the_first(env, registry, tmp_path):
    oracle, instants, revealed, topic, props = setup(env, tmp_path, "fence", **{"read.streaming.check-interval": "100ms"})
    revealed.reveal_through(testkit.instant_order(instants[0]))
    # both logs drained on threads: a piped stderr nobody reads would block a chatty process
    first = testkit.LogTail(start(props))
    # the newer instance is the one whose producer starts later: wait for the first's, and for
    # its first commit, so that a slow machine does not swap their roles
    assert first.wait("unit emitted", timeout=60), first.text()
    second = testkit.LogTail(start(props))
    assert second.wait("producer initialised", timeout=60), second.text()
    revealed.reveal_through(testkit.instant_order(instants[3]))
    try:
        code = first.finish(timeout=60)
        assert code == 1, f"first instance exited {code}:\n{first.text()[-4000:]}"
        assert "fenced" in first.text().lower(), first.text()[-4000:]
        assert second.proc.poll() is None, f"the newer instance must keep running:\n{second.text()[-4000:]}"
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the fenced instance did not stop within 60 s.\nfirst:\n{first.text()[-6000:]}\n"
                             f"second:\n{second.text()[-3000:]}")
    finally:
        first.proc.kill()
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(timeout=60) == 0, second.text()[-4000:]
    revealed.reveal_through(testkit.instant_order(instants[-1]))
    finish(env, registry, props, topic, oracle, instants[-1]["rows"])


def test_a_newer_instance_stops_a_busy_one_mid_stream(env, registry, tmp_path):
    """The first instance commits a transaction per record when the second starts: whichever
    call meets the fence (add partitions, produce, or a commit the newer instance broke and the
    abort after it), the first stops as fenced instead of riding it out with a new producer
    (which would fence the newer one), and the replay stays exact."""
    testkit.require_fixtures()
    fixture = KILL_FIXTURES[1]
    first_instant = testkit.load_oracle(fixture)["instants"][0]["requested"]
    oracle, instants, revealed, topic, props = setup(
        env, tmp_path, "busy", fixture,
        **{"read.streaming.check-interval": "50ms", "transaction.max.records": "1", "read.start-commit": first_instant})
    # half the history first: the rest is revealed once the second has started, so the first has
    # work left whenever it meets the fence (had it caught up before, it would idle, unfenced)
    revealed.reveal_through(testkit.instant_order(instants[len(instants) // 2]))
    first = testkit.LogTail(start(props))
    assert first.wait("unit emitted", timeout=60), first.text()
    second = testkit.LogTail(start(props))
    assert second.wait("producer initialised", timeout=60), second.text()
    revealed.reveal_through(testkit.instant_order(instants[-1]))
    try:
        code = first.finish(timeout=60)
        assert code == 1 and "fenced" in first.text().lower(), first.text()[-4000:]
        assert "outage: retrying" not in first.text(), first.text()[-4000:]
        time.sleep(1)
        assert second.proc.poll() is None, f"the newer instance must keep running:\n{second.text()[-4000:]}"
    finally:
        first.proc.kill()
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(timeout=60) == 0, second.text()[-4000:]
    finish(env, registry, props, topic, oracle, instants[-1]["rows"])


def test_sigterm_commits_and_exits_zero(env, registry, tmp_path):
    require_fixtures()
    first = testkit.load_oracle(KILL_FIXTURE)["instants"][0]["requested"]
    oracle, instants, revealed, topic, props = setup(env, tmp_path, "term", **{"read.start-commit": first})
    revealed.reveal_through("9" * 20)
    proc = start(props)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finish(env, registry, props, topic, oracle, oracle["instants"][-1]["rows"])


def test_kill_9_while_streaming_an_iceberg_history(env, registry, tmp_path):
    """part_mor_v2 (position deletes, MERGE, partition delete, insert overwrite), revealed one
    metadata version at a time while the connector runs; kill -9 at 20 random moments, with tiny
    transactions and one file per split so kills land between and inside splits."""
    import icebergkit as ik
    ik.unpack()
    seed = int(time.time())
    print("iceberg kill test seed", seed)
    rng = random.Random(seed)
    oracle, t, props, topic, step = ik.merge_history(tmp_path, env, **{"monitor-interval": "50ms"})
    for _ in range(20):
        proc = start(props)
        # kill while it streams, not while it starts (a loaded machine starts slowly)
        testkit.wait_for_log(proc, "resuming from stored offsets")
        time.sleep(rng.uniform(0.02, 0.4))
        if step + 1 < len(t.versions) and rng.random() < 0.6:
            step += 1
            t.reveal(step)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    replay = ik.final_replay(env, registry, oracle, t, props, topic, f"seed {seed} final replay")
    assert {e["op"] for e in replay.events} >= {"r", "u", "d"}
    testkit.assert_verified(props, f"seed {seed}")


def read_committed_end(env, topic):
    """(EOF offset a read_committed consumer reaches, high watermark) per partition: they differ
    while a transaction is left open (the last stable offset stays behind)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": env.bootstrap, "group.id": "lso-" + uuid.uuid4().hex, "isolation.level": "read_committed",
                  "enable.partition.eof": True, "receive.message.max.bytes": 1_500_000_000})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, -2) for p in parts])
        out, deadline = {}, time.time() + 30
        while len(out) < len(parts) and time.time() < deadline:
            m = c.poll(1)
            if m is not None and m.error() and m.error().code() == KafkaError._PARTITION_EOF:
                out[m.partition()] = (m.offset(), c.get_watermark_offsets(TopicPartition(topic, m.partition()), cached=False)[1])
        return out
    finally:
        c.close()


def test_sigterm_mid_stream_leaves_no_open_transaction_and_resumes_exactly(env, registry, tmp_path):
    """SIGTERM while a MERGE/delete history streams in 2-record transactions: exit 0 within the
    grace period, no transaction left open (read_committed reaches the high watermark), the
    stored position is mid-history, and the restart publishes exactly the rest."""
    import icebergkit as ik
    ik.unpack()
    oracle, t, props, topic, _ = ik.merge_history(tmp_path, env, reveal_all=True,
                                                  **{"starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT"})
    proc = start(props)
    testkit.wait_for_log(proc, "emitting instant")
    time.sleep(0.8)
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert time.time() - sent < 30
    for p, (eof, hwm) in read_committed_end(env, topic).items():
        assert eof == hwm, f"partition {p}: read_committed stops at {eof}, high watermark {hwm}: a transaction was left open"
    first = testkit.consume_all(env, topic)
    snaps = [s["snapshot_id"] for s in oracle["snapshots"]]
    seen = {int(testkit.Registry(env.registry).decode(v)["source"]["instant"]) for _, _, _, v in first if v}
    assert first and seen != set(snaps), "SIGTERM should land mid-history (it streamed everything in 0.8 s)"
    # no (key, snapshot, op) twice across the stop; the oracle of the last snapshot
    ik.final_replay(env, registry, oracle, t, props, topic, "after SIGTERM and restart")
