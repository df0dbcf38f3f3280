"""Damaged log files: a truncated block or garbage between blocks is skipped (logged with the
file name, counted), and the rest of the file still reads: the result is the table minus the
damaged block, never a failure or a silently different row."""

import random
import uuid

import pytest

import testkit
from conftest import require_fixtures

# fixtures whose newest file slices still have live log files (Avro and Parquet data blocks)
DAMAGED = ["sample_table/mor/avro/v9_timebasedkeygen_nonhivestyle", "sample_table/mor/parquet/v6_nonpartitioned"]


def state_of(env, registry, tmp_path, table, label):
    topic = f"dmg-{label}-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    r = testkit.run_once(props)
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    return replay.state, r.stderr


@pytest.mark.parametrize("fixture", DAMAGED)
def test_damaged_log_blocks_are_skipped_and_reported(env, registry, tmp_path, fixture):
    require_fixtures()
    copies = {}
    for label in ("pristine", "without", "truncated", "garbage"):
        copies[label] = testkit.extract(fixture, tmp_path / label)
    # the largest log file holds an Avro data block
    logs = sorted((p for p in copies["pristine"].rglob(".*.log.*") if ".hoodie" not in p.parts),
                  key=lambda p: p.stat().st_size)
    victim = logs[-1].relative_to(copies["pristine"])
    data = (copies["pristine"] / victim).read_bytes()
    rng = random.Random(7)
    junk = bytes(rng.randrange(256) for _ in range(97)) + b"#HUD"
    (copies["without"] / victim).unlink()
    (copies["truncated"] / victim).write_bytes(junk + data[: len(data) // 2])
    (copies["garbage"] / victim).write_bytes(junk + data + junk + data[: len(data) - 9])

    pristine, _ = state_of(env, registry, tmp_path, copies["pristine"], "p")
    without, _ = state_of(env, registry, tmp_path, copies["without"], "w")
    truncated, err_t = state_of(env, registry, tmp_path, copies["truncated"], "t")
    garbage, err_g = state_of(env, registry, tmp_path, copies["garbage"], "g")

    assert without != pristine, "the victim block must matter for this test to mean anything"
    assert truncated == without, "a truncated block is dropped, nothing else"
    assert garbage == pristine, "garbage around an intact block loses nothing"
    for err in (err_t, err_g):
        assert "corrupt or truncated log block skipped" in err and victim.name in err, err[-2000:]


CLEAN_PARTITION = {
    "type": "record", "name": "HoodieCleanPartitionMetadata", "namespace": "org.apache.hudi.avro.model",
    "fields": [{"name": "partitionPath", "type": "string"}, {"name": "policy", "type": "string"},
               {"name": "deletePathPatterns", "type": {"type": "array", "items": "string"}},
               {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
               {"name": "failedDeleteFiles", "type": {"type": "array", "items": "string"}},
               {"name": "isPartitionDeleted", "type": ["null", "boolean"], "default": None}],
}
CLEAN_SCHEMA = {  # Hudi's HoodieCleanMetadata.avsc
    "type": "record", "name": "HoodieCleanMetadata", "namespace": "org.apache.hudi.avro.model",
    "fields": [{"name": "policy", "type": "string", "default": ""}, {"name": "startCleanTime", "type": "string"},
               {"name": "timeTakenInMillis", "type": "long"}, {"name": "totalFilesDeleted", "type": "int"},
               {"name": "earliestCommitToRetain", "type": "string"},
               {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
               {"name": "partitionMetadata", "type": {"type": "map", "values": CLEAN_PARTITION}},
               {"name": "version", "type": ["int", "null"], "default": 1}],
}


@pytest.mark.parametrize("by_clean", [True, False], ids=["removed-by-a-clean", "deleted-outside-hudi"])
def test_a_missing_file_fails_loudly_saying_who_removed_it(env, tmp_path, by_clean):
    """A lagging reader whose file is gone stops, never skips: nothing silently lost. Removed by a
    completed clean (its Avro metadata lists the file): named with the clean and the ways out
    (skip or rescan). Gone with no clean that removed it: named as deleted outside Hudi, and the
    way out is to restore it — skipping is not suggested."""
    import fastavro
    require_fixtures()
    name = "sample_table/cow/v9_txns_simple_meta"
    oracle = testkit.load_oracle(name)
    table = testkit.extract(name, tmp_path / "t")
    first = oracle["instants"][0]["requested"]
    # the cleaner removes the first version of a file group that later commits rewrote
    victim = sorted(table.rglob(f"*_{first}.parquet"))[0]
    versions = [p for p in victim.parent.glob(victim.name.split("_")[0] + "_*.parquet")]
    assert len(versions) > 1, "pick a file group with several versions"
    victim.unlink()
    if by_clean:
        partition = str(victim.parent.relative_to(table))
        clean, done = "29990101000000000", "29990101000001000"
        meta = {"policy": "KEEP_LATEST_COMMITS", "startCleanTime": clean, "timeTakenInMillis": 5, "totalFilesDeleted": 1,
                "earliestCommitToRetain": oracle["instants"][1]["requested"], "lastCompletedCommitTimestamp": "",
                "partitionMetadata": {partition: {
                    "partitionPath": partition, "policy": "KEEP_LATEST_COMMITS", "deletePathPatterns": [victim.name],
                    "successDeleteFiles": [victim.name], "failedDeleteFiles": [], "isPartitionDeleted": None}},
                "version": 2}
        timeline = table / ".hoodie" / "timeline"
        (timeline / f"{clean}.clean.requested").write_bytes(b"")
        (timeline / f"{clean}.clean.inflight").write_bytes(b"")
        with open(timeline / f"{clean}_{done}.clean", "wb") as f:
            fastavro.writer(f, fastavro.parse_schema(CLEAN_SCHEMA), [meta])
    topic = "clean-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{"read.start-commit": first,
                                                                                  "history.gap": "fail"})
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr
    assert victim.name in r.stderr, r.stderr[-2000:]
    if by_clean:
        assert f"removed by clean {clean}" in r.stderr and "read.start-commit=latest" in r.stderr, r.stderr[-2000:]
    else:
        assert "deleted outside Hudi" in r.stderr and "Restore the file" in r.stderr, r.stderr[-2000:]
        assert "read.start-commit=latest" not in r.stderr, "skipping must not be suggested for a file no clean removed"
    assert testkit.consume_all(env, topic) == [], "nothing of the unreadable instant may be published"


ARCHIVE_SCHEMA = {
    "type": "record", "name": "HoodieArchivedMetaEntry", "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "hoodieCommitMetadata", "default": None, "type": ["null", {
            "type": "record", "name": "HoodieCommitMetadata", "fields": [
                {"name": "partitionToWriteStats", "default": None, "type": ["null", {"type": "map", "values": {
                    "type": "array", "items": {"type": "record", "name": "HoodieWriteStat", "fields": [
                        {"name": f, "type": ["null", "string"], "default": None}
                        for f in ("fileId", "path", "prevCommit", "partitionPath")]}}}]},
                {"name": "operationType", "type": ["null", "string"], "default": None}]}]},
        {"name": "commitTime", "type": ["null", "string"], "default": None},
        {"name": "actionType", "type": ["null", "string"], "default": None},
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}


def hudi_log_block(block_type, header, content):
    """One log block as Hudi lays it out (written here independently of the Rust encoder)."""
    import struct as st
    inner = st.pack(">ii", 1, block_type) + st.pack(">i", len(header))
    for k, v in header.items():
        inner += st.pack(">ii", k, len(v.encode())) + v.encode()
    inner += st.pack(">q", len(content)) + content + st.pack(">i", 0)
    size = len(inner) + 8
    return b"#HUDI#" + st.pack(">q", size) + inner + st.pack(">q", size + 6)


def test_version_6_archived_instants_are_read_as_changes(env, registry, tmp_path):
    """An instant that archival moved into `.hoodie/archived` is still emitted, from its archived
    commit metadata and the files still on storage."""
    import io
    import json
    import struct as st

    import fastavro

    require_fixtures()
    name = "sample_table/cow/v6_complexkeygen_hivestyle"
    oracle = testkit.load_oracle(name)
    table = testkit.extract(name, tmp_path / "t")
    first = oracle["instants"][0]["requested"]
    hoodie = table / ".hoodie"
    md = json.loads((hoodie / f"{first}.commit").read_text())
    entry = {
        "hoodieCommitMetadata": {
            "partitionToWriteStats": {p: [{f: s.get(f) for f in ("fileId", "path", "prevCommit", "partitionPath")}
                                          for s in stats] for p, stats in md["partitionToWriteStats"].items()},
            "operationType": md.get("operationType"),
        },
        "commitTime": first, "actionType": "commit", "version": 1,
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(ARCHIVE_SCHEMA), entry)
    datum = buf.getvalue()
    content = st.pack(">ii", 3, 1) + st.pack(">i", len(datum)) + datum
    block = hudi_log_block(3, {0: first, 2: json.dumps(ARCHIVE_SCHEMA)}, content)
    (hoodie / "archived").mkdir(exist_ok=True)
    (hoodie / "archived" / ".commits_.archive.1_1-0-1").write_bytes(block)
    for suffix in (".commit", ".inflight", ".commit.requested"):
        (hoodie / f"{first}{suffix}").unlink(missing_ok=True)

    topic = "arch6-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{"read.start-commit": first})
    testkit.run_once(props)
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    assert {e["source"]["instant"] for e in replay.events} >= {first}, "the archived instant must be emitted"
    testkit.compare(oracle, oracle["instants"][-1]["rows"], replay, "after the archived and active instants")


SMALL_COW = "sample_table/cow/v9_txns_simple_meta"


def small_cow_connector(env, tmp_path, prefix, **extra):
    """The small COW fixture extracted, and a connector on it: (table, topic, props)."""
    require_fixtures()
    table = testkit.extract(SMALL_COW, tmp_path / "t")
    topic = f"{prefix}-" + uuid.uuid4().hex[:6]
    return table, topic, testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **extra)


def drop_table_properties(table, *prefixes):
    """Remove the hoodie.properties lines starting with `prefixes` (as a truncated file lacks them)."""
    f = table / ".hoodie" / "hoodie.properties"
    f.write_text("\n".join(l for l in f.read_text().splitlines() if not l.startswith(prefixes)) + "\n")


def raw_offsets_key(env, name):
    """The raw key of a connector's offsets record (task 0, the only one)."""
    keys = {k for k, _ in testkit.offsets_records(env, name)}
    assert len(keys) == 1, keys
    return keys.pop()


@pytest.mark.parametrize("value,message", [
    (b'{"foo": 1}', "is not a lakestream position"),
    (b'[]', "is not a lakestream position"),
    (b'{"issued": {"instant": "not-an-instant"}, "records": 1, "updated_ms": 0}', "is not on the table's timeline"),
    (b'{"issued": {"instant": "99991231235959999"}, "records": 1, "updated_ms": 0}', "is not on the table's timeline"),
])
def test_an_offsets_record_that_is_not_a_position_stops_the_connector(env, tmp_path, value, message):
    """A foreign or damaged position must stop the connector, never rescan (duplicates) or skip
    every instant before a made-up time (losses)."""
    from confluent_kafka import Producer
    _, topic, props = small_cow_connector(env, tmp_path, "offs")
    testkit.run_once(props)
    published = len(testkit.consume_all(env, topic))
    assert published > 0
    p = Producer({"bootstrap.servers": env.bootstrap})
    p.produce(env.offsets_topic, key=raw_offsets_key(env, "c-" + topic), value=value)
    assert p.flush(10) == 0
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert message in r.stderr, r.stderr[-2000:]
    assert "lakestream offsets show" in r.stderr, r.stderr[-2000:]
    assert len(testkit.consume_all(env, topic)) == published, "nothing may be published from a bad position"


@pytest.mark.parametrize("fixture", ["sample_table/cow/v6_simplekeygen_nonhivestyle", "sample_table/cow/v9_txns_simple_meta"])
@pytest.mark.parametrize("blank", [b"", b"{}"])
def test_a_blank_commit_file_stops_without_advancing(env, registry, tmp_path, fixture, blank):
    """A completed commit whose metadata is empty (v6 JSON and v8+ Avro alike) must stop the
    connector naming the file — publishing nothing of it and keeping the position before it —
    and once the file is restored, the same position goes on to the oracle."""
    oracle, instants, revealed, topic, props = testkit.revealed_fixture(env, tmp_path, "blank", fixture)
    writes = [k for k, i in enumerate(instants) if k > 0 and i["action"] in ("commit", "deltacommit")]
    assert writes, "the fixture needs a write after the first instant"
    k = writes[0]
    replay, seen = testkit.Replay(registry), set()
    revealed.reveal_through(testkit.instant_order(instants[k - 1]))
    testkit.run_once(props)
    replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
    testkit.compare(oracle, instants[k - 1]["rows"], replay, "before the damage")
    names = revealed.hidden[testkit.instant_order(instants[k])]
    revealed.reveal_through(testkit.instant_order(instants[k]))
    victim = next(revealed.timeline / n for n in names if not n.endswith((".requested", ".inflight")))
    original = victim.read_bytes()
    victim.write_bytes(blank)
    for attempt in range(2):
        r = testkit.run_once(props, check=False)
        assert r.returncode == 1, r.stderr[-2000:]
        assert victim.name in r.stderr and "no write statistics" in r.stderr, r.stderr[-2000:]
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        testkit.compare(oracle, instants[k - 1]["rows"], replay, f"damaged, attempt {attempt}")
    victim.write_bytes(original)
    testkit.run_once(props)
    replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
    testkit.compare(oracle, instants[k]["rows"], replay, "restored")


def test_a_truncated_hoodie_properties_stops_naming_the_missing_keys(env, tmp_path):
    table, topic, props = small_cow_connector(env, tmp_path, "trunc")
    drop_table_properties(table, "hoodie.table.type", "hoodie.table.version")
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "hoodie.properties" in r.stderr and "missing hoodie.table.type, hoodie.table.version" in r.stderr, r.stderr[-2000:]
    assert testkit.consume_all(env, topic) == []


def test_a_changed_key_stops_instead_of_mixing_keys_in_one_topic(env, tmp_path):
    """The key the published events carry is stored with the position: hoodie.properties
    losing its record-key fields (the key would fall back to `_hoodie_record_key`) stops the run."""
    table, topic, props = small_cow_connector(env, tmp_path, "rekey")
    testkit.run_once(props)
    published = len(testkit.consume_all(env, topic))
    drop_table_properties(table, "hoodie.table.recordkey.fields")
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "the table's key is now" in r.stderr and "start under a new connector name" in r.stderr, r.stderr[-2000:]
    assert len(testkit.consume_all(env, topic)) == published


def test_an_offsets_topic_that_deletes_by_retention_is_refused(env, tmp_path):
    """Positions in a `cleanup.policy=delete` topic would expire: a restart would rescan or skip."""
    require_fixtures()
    from confluent_kafka.admin import AdminClient, NewTopic
    offsets = "offs-delete-" + uuid.uuid4().hex[:6]
    admin = AdminClient({"bootstrap.servers": env.bootstrap})
    for f in admin.create_topics([NewTopic(offsets, 1, 1, config={"cleanup.policy": "delete"})]).values():
        f.result(30)
    _, topic, props = small_cow_connector(env, tmp_path, "offdel", **{"offsets.storage.topic": offsets})
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"offsets topic `{offsets}` has cleanup.policy=delete" in r.stderr, r.stderr[-2000:]
    assert testkit.consume_all(env, topic) == []
