"""Row identity of Hudi tables whose keys change partition (issue 11 item 2).

Under a per-partition index (Hudi's default SIMPLE/BLOOM) a key written with a new partition
value becomes a second live row and its old row stays: (partition path, record key) is the
identity, so the Kafka key carries `_hoodie_partition_path` and replay by Kafka key must equal
the table, both rows included. Under a global index the old row is deleted: the key stays the
record key and the move is one `u`. Generated tables, checked at every instant against hudi-rs."""

import collections
import json
import subprocess
import uuid

import testkit


def generate(path, kind, index, *extra):
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", kind, "--path", str(path), "--rows", "600",
                        "--partitions", "3", "--commits", "4", "--update-fraction", "0.1", "--delete-fraction", "0.03",
                        "--move-fraction", "0.06", "--index", index, *extra], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return path


def twice(rows):
    """Record keys held by two live rows (in two partitions)."""
    return {k for k, n in collections.Counter(r["id"] for r in rows).items() if n > 1}


def stream(env, registry, tmp_path, table, label, **extra):
    oracle = testkit.hudi_rs_oracle(table)
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = label + "-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **extra)
    replay, _ = testkit.replay_steps(env, registry, revealed, oracle, oracle["instants"], props, topic, label)
    return oracle, replay, props, topic


def test_a_key_in_two_partitions_under_a_simple_index_is_two_kafka_keys(env, registry, tmp_path):
    for kind in ("cow", "mor"):
        table = generate(tmp_path / f"simple-{kind}", kind, "simple")
        oracle, replay, _, _ = stream(env, registry, tmp_path, table, f"simple-{kind}")
        last = oracle["instants"][-1]["rows"]
        assert len(twice(last)) >= 10, "the generator left keys live in two partitions"
        keys = [json.loads(k) for k in replay.state]
        assert all(set(k) == {"id", "_hoodie_partition_path"} for k in keys), keys[:3]
        # both rows of a key held twice are live in the topic, each under its own Kafka key
        live = collections.Counter(k["id"] for k in keys)
        assert {k for k, n in live.items() if n > 1} == twice(last)
        # a move adds a row (`c` in the new partition) and never removes the old one
        moved = [e for e in replay.events if e["op"] == "u" and e["before"]["part"] != e["after"]["part"]]
        assert not moved, moved[:1]


def test_a_partition_move_under_a_global_index_is_one_update(env, registry, tmp_path):
    for kind in ("cow", "mor"):
        table = generate(tmp_path / f"global-{kind}", kind, "global")
        oracle, replay, _, _ = stream(env, registry, tmp_path, table, f"global-{kind}")
        assert not any(twice(i["rows"]) for i in oracle["instants"])
        assert all(set(json.loads(k)) == {"id"} for k in replay.state)
        moved = [e for e in replay.events if e["op"] == "u" and e["before"]["part"] != e["after"]["part"]]
        assert len(moved) >= 10, f"moves as one update each: {len(moved)}"
        # the move's departure is no separate delete of that key in that instant (Replay also
        # refuses two events for one key in one instant)
        deleted = {(e["_key"], e["source"]["instant"]) for e in replay.events if e["op"] == "d"}
        assert not deleted & {(e["_key"], e["source"]["instant"]) for e in moved}


def test_a_connector_that_published_record_keys_keeps_them(env, registry, tmp_path):
    """Upgrading: a connector whose stored key is the record key alone keeps it under
    key.partition-path=auto (warned); asking for the partition path explicitly stops, naming both keys."""
    table = generate(tmp_path / "upgrade", "cow", "simple")
    oracle = testkit.hudi_rs_oracle(table)
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    revealed.reveal_through(testkit.instant_order(oracle["instants"][1]))
    topic = "upgrade-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{"key.partition-path": "false"})
    testkit.run_once(props)
    props.write_text(props.read_text().replace("key.partition-path=false\n", ""))
    revealed.reveal_through(testkit.instant_order(oracle["instants"][-1]))
    r = testkit.run_once(props)
    assert "keeping that key (key.partition-path=false)" in r.stderr, r.stderr[-2000:]
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    assert all(set(json.loads(k)) == {"id"} for k in replay.state)
    props.write_text(props.read_text() + "key.partition-path=true\n")
    r = testkit.run_once(props, check=False)
    assert r.returncode != 0 and "events already published were keyed by" in r.stderr, r.stderr[-2000:]
    assert "_hoodie_partition_path" in r.stderr
