"""Tables on object storage: a real S3 API server on loopback (moto, path-style, dummy
credentials). A Hudi fixture is mirrored into a bucket one completed instant at a time and
streamed from `s3://`; a pyiceberg table is written straight into the bucket and streamed after
every commit through its sql catalog. Both replay to their oracles at every step."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import icebergkit as ik
import testkit
from conftest import free_port, require_fixtures, wait_port

boto3 = pytest.importorskip("boto3")

FIXTURE = "sample_table/mor/avro/v9_txns_simple_meta"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3():
    port = free_port()
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **CREDS})
    wait_port("127.0.0.1", port)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                          region_name="us-east-1")
    yield endpoint, client
    proc.terminate()
    proc.wait(10)


def s3_props(endpoint):
    return {"s3.endpoint": endpoint, "s3.region": "us-east-1", "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing", "s3.path-style-access": "true", "s3.allow-http": "true"}


def mirror(client, bucket, local: Path, prefix):
    """Make s3://bucket/prefix/ hold exactly the files under `local`."""
    want = {str(p.relative_to(local)): p for p in local.rglob("*") if p.is_file()}
    have = {o["Key"][len(prefix) + 1:] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
            for o in page.get("Contents", [])}
    for rel in sorted(set(want) - have):
        client.upload_file(str(want[rel]), bucket, f"{prefix}/{rel}")
    for rel in sorted(have - set(want)):
        client.delete_object(Bucket=bucket, Key=f"{prefix}/{rel}")


def test_hudi_table_on_s3_replays_at_every_instant(env, registry, tmp_path, s3):
    require_fixtures()
    endpoint, client = s3
    bucket = "lake-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=bucket)
    oracle = testkit.load_oracle(FIXTURE)
    table = testkit.extract(FIXTURE, tmp_path / "t")
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "s3-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, f"s3://{bucket}/tables/{table.name}", topic, env, **s3_props(endpoint))
    replay, seen = testkit.Replay(registry), set()
    for step, inst in enumerate(oracle["instants"]):
        revealed.reveal_through(testkit.instant_order(inst))
        mirror(client, bucket, table, f"tables/{table.name}")
        testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        testkit.compare(oracle, inst["rows"], replay, f"s3 step {step}")
    assert {e["op"] for e in replay.events} >= {"r", "u", "d"}
    assert all(e["source"]["file"] for e in replay.events)


def test_iceberg_table_written_to_s3_by_pyiceberg(env, registry, tmp_path, s3):
    from test_iceberg_pyiceberg import compare_now, history
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, DecimalType, LongType, NestedField, StringType, TimestamptzType
    import random

    endpoint, client = s3
    bucket = "ice-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=bucket)
    db = tmp_path / "catalog.db"
    cat = SqlCatalog("default", uri=f"sqlite:///{db}", warehouse=f"s3://{bucket}/warehouse", **{
        "s3.endpoint": endpoint, "s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"})
    cat.create_namespace("shop")
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "cat", StringType()),
                    NestedField(3, "amount", DecimalType(10, 2)), NestedField(4, "ts", TimestamptzType()),
                    NestedField(5, "day", DateType()), identifier_field_ids=[1])
    tbl = cat.create_table("shop.orders", schema=schema)
    assert tbl.metadata_location.startswith("s3://")
    props, topic = ik.iceberg_props(tmp_path, env, None, **{
        "catalog.type": "sql", "catalog.uri": f"sqlite:///{db}", "table.identifier": "shop.orders", **s3_props(endpoint)})
    props.write_text(props.read_text().replace("key.fields=id\n", ""))
    seed = int(time.time())
    replay, seen, ops = testkit.Replay(registry), set(), []
    for op in history(tbl, random.Random(seed), 6):
        ops.append(op)
        testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        compare_now(tbl, replay, {"id", "cat", "amount", "ts", "day", "note"}, f"seed {seed} s3 after {ops}")
    assert all(e["source"]["file"].startswith("s3://") for e in replay.events if e["op"] != "r")


def test_delta_table_on_s3_replays_at_every_version(env, registry, tmp_path, s3):
    """A delta-rs history (CDF, checkpoints) mirrored into a bucket one version at a time and
    streamed from `s3://`."""
    import deltakit as dk
    endpoint, client = s3
    bucket = "lake-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=bucket)
    replay, ops, _, _ = dk.replay_revealed(
        env, registry, tmp_path, int(time.time()) % 10000, location=f"s3://{bucket}/tables/d",
        after_reveal=lambda local: mirror(client, bucket, local, "tables/d"), **s3_props(endpoint))
    assert {e["op"] for e in replay.events} >= {"r", "c"}, ops
    assert all(e["source"]["file"] for e in replay.events if e["op"] == "r")
