"""`lakestream verify`: equal on a streamed table (changes, deletes and tombstones, two tasks),
and DIFFERENT, naming the key, for each way a topic or a table can stop matching: a dropped event,
a duplicated `c`, an altered value, an extra tombstone, a row of the table changed after the
position. `--at` verifies an earlier commit; `verify.interval` audits in the background of `run`
and exports the result. (Every fixture test also ends with a verify: testkit.replay_steps,
icebergkit.replay_revealed.)"""

import io
import json
import signal
import struct
import subprocess
import uuid

import fastavro
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import testkit
from conftest import free_port
from test_metrics import scrape, value


@pytest.fixture
def streamed(env, registry, tmp_path):
    """A generated copy-on-write table streamed as changes from its first commit by two tasks:
    (props, table, topic records)."""
    return stream_generated(env, tmp_path, "vfy-", **{"tasks.max": "2", "topic.creation.default.partitions": "3"})


def stream_generated(env, tmp_path, prefix, **extra):
    """A generated copy-on-write table (300 rows, 3 partitions, 3 commits) streamed as changes from
    its first commit: (props, table, topic records)."""
    table = tmp_path / "t"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", "cow", "--path", str(table), "--rows", "300",
                        "--partitions", "3", "--commits", "3", "--update-fraction", "0.2", "--delete-fraction", "0.05"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first = sorted(p.name.split(".")[0] for p in (table / ".hoodie").glob("*.commit"))[0]
    topic = prefix + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{"read.start-commit": first, **extra})
    testkit.run_once(props)
    return props, table, testkit.consume_all(env, topic)


def copy_topic(env, records, props, tmp_path):
    """The records (partition, offset, key, value) in a new topic with as many partitions, and
    the connector's file pointed at it (same name: the same stored position)."""
    topic = "vfy-copy-" + uuid.uuid4().hex[:8]
    parts = max(p for p, *_ in records) + 1
    admin = AdminClient({"bootstrap.servers": env.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=parts, replication_factor=1)]).values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": env.bootstrap})
    for part, _, k, v in records:
        p.produce(topic, key=k, value=v, partition=part)
    assert p.flush(30) == 0
    text = props.read_text().replace(f"topic={props.stem[2:]}\n", f"topic={topic}\n")
    assert f"topic={topic}\n" in text
    out = tmp_path / f"{topic}.properties"
    out.write_text(text)
    return out


def different(props, label):
    code, report, err = testkit.verify(props)
    assert code == 3 and report and not report["equal"], f"{label}: expected DIFFERENT, exit {code}: {report}\n{err[-2000:]}"
    return report


def keys_named(examples):
    return [json.loads(k) for k in examples]


def events(registry, records):
    """(index, decoded key, decoded value or None) of each record."""
    return [(i, registry.decode(k), registry.decode(v)) for i, (_, _, k, v) in enumerate(records)]


def last_event_of_each_key(evs):
    last = {}
    for i, k, v in evs:
        last[json.dumps(k, sort_keys=True)] = (i, k, v)
    return last.values()


def test_a_streamed_table_verifies_equal(env, registry, streamed):
    props, _, records = streamed
    report = testkit.assert_verified(props)
    ops = {v["op"] for _, _, v in events(registry, records) if v}
    assert ops == {"c", "u", "d"}, ops
    assert any(v is None for *_, v in records), "deletes come with tombstones"
    assert report["tasks"] == 2 and report["total"]["table_rows"] > 250
    assert report["total"]["table_rows"] == report["total"]["replayed_rows"]
    assert len(report["partitions"]) == 3, report["partitions"]
    assert sum(p["table_rows"] for p in report["partitions"]) == report["total"]["table_rows"]
    # the text report says the same
    r = subprocess.run([str(testkit.BIN), "verify", str(props)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "EQUAL" in r.stdout, r.stdout + r.stderr[-2000:]


def test_a_dropped_event_is_found_by_key(env, registry, tmp_path, streamed):
    props, _, records = streamed
    evs = events(registry, records)
    i, key, _ = next(e for e in last_event_of_each_key(evs) if e[2] and e[2]["op"] == "u")
    tampered = records[:i] + records[i + 1:]
    report = different(copy_topic(env, tampered, props, tmp_path), "dropped update")
    assert report["total"]["differing"] == 1 and keys_named(report["examples"]["differing"]) == [key]
    # a dropped create of a key never changed after: missing
    i, key, _ = next(e for e in last_event_of_each_key(evs) if e[2] and e[2]["op"] == "c")
    report = different(copy_topic(env, records[:i] + records[i + 1:], props, tmp_path), "dropped create")
    assert report["total"]["missing"] == 1 and keys_named(report["examples"]["missing"]) == [key]


def test_a_duplicated_create_is_found_by_key(env, registry, tmp_path, streamed):
    props, _, records = streamed
    evs = events(registry, records)
    i, key, _ = next(e for e in evs if e[2] and e[2]["op"] == "c")
    report = different(copy_topic(env, records[:i + 1] + [records[i]] + records[i + 1:], props, tmp_path), "duplicated c")
    assert report["total"]["duplicated_events"] == 1, report["total"]
    assert keys_named(report["examples"]["duplicated_events"]) == [key]


def test_an_altered_value_is_found_by_key(env, registry, tmp_path, streamed):
    props, _, records = streamed
    evs = events(registry, records)
    i, key, value = next(e for e in last_event_of_each_key(evs) if e[2] and e[2]["op"] in ("c", "u"))
    raw = records[i][3]
    sid = struct.unpack(">I", raw[1:5])[0]
    value["after"]["v1"] = (value["after"]["v1"] or 0) + 1
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, registry.schema(sid), value)
    altered = list(records)
    altered[i] = (*records[i][:3], raw[:5] + buf.getvalue())
    report = different(copy_topic(env, altered, props, tmp_path), "altered value")
    assert report["total"]["differing"] == 1 and keys_named(report["examples"]["differing"]) == [key]


def test_an_extra_tombstone_is_found_by_key(env, registry, tmp_path, streamed):
    props, _, records = streamed
    evs = events(registry, records)
    i, key, _ = next(e for e in last_event_of_each_key(evs) if e[2] and e[2]["op"] != "d")
    part, _, k, _ = records[i]
    report = different(copy_topic(env, records + [(part, 0, k, None)], props, tmp_path), "extra tombstone")
    assert report["total"]["missing"] == 1 and keys_named(report["examples"]["missing"]) == [key]


def test_a_topic_whose_head_was_deleted_is_not_replayed(env, registry, tmp_path, streamed):
    """Records deleted from a partition's head (retention, DeleteRecords) leave keys whose last
    event is gone: verify exits 1 naming the topic, the partition and the way out, rather than
    report a difference the topic cannot show (issue 60: only a topic that holds the state is
    replayed)."""
    from confluent_kafka import TopicPartition
    props, _, records = streamed
    copy = copy_topic(env, records, props, tmp_path)
    topic = next(l.split("=", 1)[1] for l in copy.read_text().splitlines() if l.startswith("topic="))
    admin = AdminClient({"bootstrap.servers": env.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 1)]).values():
        f.result(timeout=30)
    code, report, err = testkit.verify(copy)
    assert code == 1 and report is None, (code, report, err[-2000:])
    assert f"{topic}: partition 0 starts at offset 1" in err and "cleanup.policy=compact" in err, err[-2000:]


def test_a_row_changed_in_the_table_after_the_position_is_found_by_key(env, registry, streamed):
    props, table, _ = streamed
    # the newest base file of a file group holds its live rows: change one row's value in place
    files = sorted(table.rglob("*.parquet"), key=lambda p: p.name.rsplit("_", 1)[-1])
    victim = files[-1]
    t = pq.read_table(victim)
    rows = t.to_pylist()
    rows[0]["v1"] = (rows[0]["v1"] or 0) + 1
    pq.write_table(type(t).from_pylist(rows, schema=t.schema), victim)
    report = different(props, "table changed")
    assert report["total"]["differing"] == 1, report["total"]
    (named,) = keys_named(report["examples"]["differing"])
    assert str(named["id"]) == str(rows[0]["id"]), (named, rows[0]["id"])


def test_at_an_earlier_commit_and_bad_positions(env, registry, streamed):
    props, table, _ = streamed
    commits = sorted(p.name.split(".")[0] for p in (table / ".hoodie").glob("*.commit"))
    report = testkit.assert_verified(props, "at", "--at", commits[-2])
    assert report["position"] == commits[-2] and report["events_after_position"] > 0
    code, _, err = testkit.verify(props, "--at", "20990101000000000")
    assert code == 2 and "20990101000000000" in err, err[-2000:]
    fresh = props.parent / "fresh.properties"
    fresh.write_text(props.read_text().replace("name=c-", "name=never-ran-"))
    code, _, err = testkit.verify(fresh)
    assert code == 2 and "no stored position" in err, err[-2000:]


def test_verify_interval_audits_in_the_background_and_exports_the_result(env, registry, streamed):
    props, _, _ = streamed
    port = free_port()
    with_interval = props.parent / "interval.properties"
    with_interval.write_text(props.read_text() + "verify.interval=1s\n")
    name = next(l.split("=", 1)[1] for l in props.read_text().splitlines() if l.startswith("name="))
    proc = testkit.start(with_interval, "--metrics-port", str(port))
    try:
        series = f'lakestream_verify_runs_total{{connector="{name}",result="equal"}}'
        text = scrape(port, series, timeout=90)
        assert value(text, f'lakestream_verify_mismatched_keys{{connector="{name}"}}') == 0
        assert value(text, f'lakestream_verify_last_success_timestamp_seconds{{connector="{name}"}}') > 1.7e9
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
