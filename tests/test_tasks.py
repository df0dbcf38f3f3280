"""Parallel tasks: tasks.max=3 in one process shares a table's keys among three transactional
producers, and changing tasks.max mid-stream (Kafka Connect's exactly-once scenario 3 → 5 → 1 →
5 → 3, with kill -9 leaving units half emitted) hands the keys over without losing or
duplicating an event."""

import json
import random
import signal
import time
import uuid

import icebergkit as ik
import testkit

HUDI = "sample_table/mor/avro/v9_txns_simple_meta"


def offsets_keys(env, name):
    """The offsets-record keys of a connector (one per task and generation)."""
    return {json.dumps(json.loads(k)[1], sort_keys=True) for k, _ in testkit.offsets_records(env, name)}


def test_three_tasks_in_one_process_replay_to_the_oracle(env, registry, tmp_path):
    oracle, instants, revealed, topic, props = testkit.revealed_fixture(
        env, tmp_path, "tasks", HUDI, **{"tasks.max": "3", "topic.creation.default.partitions": "3"})
    replay, consumed = testkit.replay_steps(env, registry, revealed, oracle, instants, props, topic, "3 tasks")
    assert {e["op"] for e in replay.events} >= {"r", "u", "d"}
    keys = offsets_keys(env, "c-" + topic)
    assert {json.loads(k)["task"] for k in keys} == {0, 1, 2} and all(json.loads(k)["tasks"] == 3 for k in keys), keys


def run_and_kill_mid_unit(props, tasks, reveal, rng):
    """Start every task, wait until all resumed, reveal the next version, kill -9 while it is
    being emitted (2-record transactions take ~100 ms each)."""
    p = testkit.start(props)
    lines, ready = testkit.wait_for_log(p, "resuming from stored offsets", tasks)
    if ready < tasks:
        p.wait()
        raise AssertionError(f"only {ready} of {tasks} tasks started (exit {p.returncode}): {''.join(lines)[-3000:]}")
    reveal()
    time.sleep(rng.uniform(0.05, 0.6))
    p.send_signal(signal.SIGKILL)
    p.wait()


def set_tasks(props, n):
    text = "".join(l for l in props.read_text().splitlines(True) if not l.startswith("tasks.max="))
    props.write_text(text + f"tasks.max={n}\n")


def test_changing_tasks_max_mid_stream_loses_and_duplicates_nothing(env, registry, tmp_path):
    """An Iceberg MERGE/delete history: 3 tasks, killed mid-unit twice; then 5, 1, 5, 3 (Kafka
    Connect's exactly-once rescaling scenario); tiny transactions and one file per split so each
    generation leaves half-emitted units that the next one (fencing the last's ids) hands over."""
    ik.unpack()
    seed = int(time.time())
    print("rescale seed", seed)
    rng = random.Random(seed)
    oracle, t, props, topic, step = ik.merge_history(tmp_path, env, **{
        "monitor-interval": "50ms", "topic.creation.default.partitions": "2"})
    for n in [3, 5, 1, 5, 3]:
        set_tasks(props, n)
        for _ in range(2):
            def reveal():
                nonlocal step
                if step + 1 < len(t.versions):
                    step += 1
                    t.reveal(step)
            run_and_kill_mid_unit(props, n, reveal, rng)
    ik.final_replay(env, registry, oracle, t, props, topic, f"seed {seed} after 3→5→1→5→3 tasks")
    gens = {json.loads(k).get("tasks", 1) for k in offsets_keys(env, "c-" + topic)}
    assert gens == {1, 3, 5}, gens
