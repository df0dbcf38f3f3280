"""docs/consumers.md's recipe, run: a lakestream topic read `read_committed` with Confluent's own
Avro deserializer (not lakestream's encoder, not fastavro alone), applied as Debezium's
ExtractNewRecordState + an upserting sink would, equals the table at the end (hudi-rs);
`column.exclude.list=_hoodie_.*` leaves the meta columns out of the rows, not out of the key."""

import subprocess
import uuid

import pytest
import requests

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


def _read_topic(env, topic, deserialize_key, deserialize_value):
    """Every (key, value) of `topic`, read_committed, decoded by Confluent's deserializer."""
    from confluent_kafka import Consumer
    from confluent_kafka.serialization import MessageField, SerializationContext
    c = Consumer({"bootstrap.servers": env.bootstrap, "group.id": "shape-" + topic, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.partition.eof": True})
    c.subscribe([topic])
    out = []
    while True:
        m = c.poll(10)
        assert m is not None, "topic not read to its end"
        if m.error():
            if m.error().code() == -191:
                break
            continue
        key = deserialize_key(m.key(), SerializationContext(topic, MessageField.KEY))
        value = None if m.value() is None else deserialize_value(m.value(), SerializationContext(topic, MessageField.VALUE))
        out.append((key, value))
    c.close()
    return out


@pytest.mark.parametrize("mode", ["adaptive", "connect"])
def test_sink_options_time_precision_required_columns_and_namespace(env, registry, tmp_path, mode):
    """`time.precision.mode`, `schema.nullability=table` and `source.db` on a pyiceberg table in a
    catalog namespace, read back with Confluent's deserializer: the registered schema carries
    Debezium's / Kafka Connect's type names, the required column is a plain `long` (key and value),
    optional ones stay unions, and every value equals what pyiceberg wrote, in the unit the mode
    promises."""
    sr = pytest.importorskip("confluent_kafka.schema_registry", reason="confluent-kafka[schemaregistry] (tests/requirements.txt)")
    pytest.importorskip("pyiceberg")
    from datetime import date, datetime, timezone
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from test_iceberg_pyiceberg import arrow_rows, make_table

    db, _, tbl = make_table(tmp_path)
    rows = [{"id": i, "cat": "ab"[i % 2], "amount": None, "day": date(2024, 1, 1 + i),
             "ts": datetime(2024, 3, 1, 12, 0, i, 123456, tzinfo=timezone.utc)} for i in range(20)]
    tbl.append(arrow_rows(tbl, rows))
    topic = "shape-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, None, topic, env, **{
        "connector.class": "iceberg", "catalog.type": "sql", "catalog.uri": f"sqlite:///{db}",
        "table.identifier": "shop.orders", "time.precision.mode": mode, "schema.nullability": "table"})
    testkit.run_once(props)

    client = sr.SchemaRegistryClient({"url": env.registry})
    import json
    key_schema = json.loads(client.get_latest_version(f"{topic}-key").schema.schema_str)
    envelope = json.loads(client.get_latest_version(f"{topic}-value").schema.schema_str)
    value_rec = next(f for f in envelope["fields"] if f["name"] == "before")["type"][1]
    col = {f["name"]: f["type"] for f in value_rec["fields"]}
    assert key_schema["fields"][0]["type"] == "long", key_schema
    assert col["id"] == "long", "a required column is a plain type, not a union with null"
    assert col["cat"] == ["null", "string"], "an optional column stays optional"
    ts, day = col["ts"][1], col["day"][1]
    if mode == "adaptive":
        assert ts == {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.ZonedTimestamp"}, ts
        assert day["connect.name"] == "io.debezium.time.Date", day
    else:
        assert ts["connect.name"] == "org.apache.kafka.connect.data.Timestamp" and ts["logicalType"] == "timestamp-millis", ts
        assert day["connect.name"] == "org.apache.kafka.connect.data.Date", day
    assert col["amount"][1]["connect.name"] == "org.apache.kafka.connect.data.Decimal", col["amount"]

    records = _read_topic(env, topic, AvroDeserializer(client), AvroDeserializer(client))
    assert len(records) == 20, len(records)
    want = {r["id"]: r for r in rows}
    for key, ev in records:
        assert ev["op"] == "r" and ev["source"]["db"] == "shop" and ev["source"]["table"] == "orders", ev["source"]
        after, w = ev["after"], want[key["id"]]
        assert after["id"] == key["id"] == w["id"]
        if mode == "adaptive":
            assert after["ts"] == w["ts"].strftime("%Y-%m-%dT%H:%M:%S.%fZ"), (after["ts"], w["ts"])
            assert after["day"] == (w["day"] - date(1970, 1, 1)).days
        else:
            # Confluent's deserializer turns timestamp-millis into a datetime: the micros are cut
            assert after["ts"] == w["ts"].replace(microsecond=123000), (after["ts"], w["ts"])
            assert after["day"] == w["day"]


def test_hudi_required_columns_follow_the_writer_schema(env, registry, tmp_path):
    """`schema.nullability=table` on Hudi: the newest write's Avro schema (`extraMetadata.schema`)
    says which columns are required; those are plain types in key and value, the rest unions;
    `source.db` is `hoodie.database.name`. (The generator's schema has no required column, so the
    test declares two, as a writer with NOT NULL columns would.)"""
    import json
    table = testkit.hudi_table_with_required(tmp_path / "t", database="lake")
    topic = "req-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{"schema.nullability": "table"})
    testkit.run_once(props)
    events = testkit.consume_all(env, topic)
    assert events, "no events"
    latest = lambda subject: requests.get(f"{env.registry}/subjects/{subject}/versions/latest", timeout=10).json()
    key_schema = json.loads(latest(f"{topic}-key")["schema"])
    envelope = json.loads(latest(f"{topic}-value")["schema"])
    value_rec = next(f for f in envelope["fields"] if f["name"] == "before")["type"][1]
    col = {f["name"]: f["type"] for f in value_rec["fields"]}
    assert col["id"] == "string" and col["ts"] == "long", col
    assert col["v1"] == ["null", "long"] and col["_hoodie_record_key"] == ["null", "string"], col
    assert {f["name"]: f["type"] for f in key_schema["fields"]}["id"] == "string", key_schema
    decoded = [registry.decode(m[3]) for m in events if m[3] is not None]
    assert decoded and all(e["source"]["db"] == "lake" for e in decoded), decoded[0]["source"]
