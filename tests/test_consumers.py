"""docs/consumers.md's recipe, run: a lakestream topic read `read_committed` with Confluent's own
Avro deserializer (not lakestream's encoder, not fastavro alone), applied as Debezium's
ExtractNewRecordState + an upserting sink would, equals the table at the end (hudi-rs);
`column.exclude.list=_hoodie_.*` leaves the meta columns out of the rows, not out of the key."""

import subprocess
import uuid

import pytest

import testkit


def test_extract_new_record_state_with_confluents_deserializer_rebuilds_the_table(env, registry, tmp_path):
    sr = pytest.importorskip("confluent_kafka.schema_registry", reason="confluent-kafka[schemaregistry] (tests/requirements.txt)")
    from confluent_kafka import Consumer
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    table = tmp_path / "t"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", "mor", "--path", str(table), "--rows", "400",
                        "--partitions", "2", "--commits", "3", "--update-fraction", "0.2", "--delete-fraction", "0.05"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    oracle = testkit.hudi_rs_oracle(table, only_latest=True)
    first = sorted(p.name.split(".")[0] for p in (table / ".hoodie").glob("*.deltacommit"))[0]
    topic = "cons-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env,
                                    **{"read.start-commit": first, "column.exclude.list": "_hoodie_.*"})
    testkit.run_once(props)

    client = sr.SchemaRegistryClient({"url": env.registry})
    deserialize = AvroDeserializer(client)
    c = Consumer({"bootstrap.servers": env.bootstrap, "group.id": "recipe-" + topic, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.subscribe([topic])
    rows, ops, done = {}, set(), False
    while not done:
        m = c.poll(10)
        assert m is not None, "topic not read to its end"
        if m.error():
            done = m.error().code() == -191  # _PARTITION_EOF
            continue
        key = deserialize(m.key(), SerializationContext(topic, MessageField.KEY))
        k = (key["id"], key["_hoodie_partition_path"])
        if m.value() is None:  # the tombstone: the sink deletes
            rows.pop(k, None)
            continue
        ev = deserialize(m.value(), SerializationContext(topic, MessageField.VALUE))
        ops.add(ev["op"])
        after = ev["after"]  # ExtractNewRecordState: the new row, or nothing for a delete
        if after is not None:
            assert not any(col.startswith("_hoodie_") for col in after), sorted(after)
            rows[k] = after
    c.close()
    assert ops == {"c", "u", "d"}, ops
    want = {(r["id"], r["_hoodie_partition_path"]): r for r in oracle["instants"][-1]["rows"]}
    assert rows.keys() == want.keys()
    for k, got in rows.items():
        for col in ("id", "part", "ts", "round", "v1", "tag"):
            assert got[col] == want[k][col], (k, col, got[col], want[k][col])
