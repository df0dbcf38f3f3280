"""Iceberg tables written by Spark with Iceberg 1.10.2 (issue 30; `sparkkit`, `sparkiceberg`): format
version 3 (deletion vectors) and 2 (position deletes), copy-on-write and merge-on-read UPDATE,
DELETE and MERGE, compaction. Revealed one metadata version at a time, the replayed topic equals
Spark's read of the current snapshot at every step. Skipped, with the reason, where Java, pyspark
or the jars are missing. (Row lineage — `_row_id` — is not used yet: README Limits.)"""

import json
import shutil

import pytest

import icebergkit
import sparkkit
import testkit

SCENARIOS = [
    {"name": f"iceberg-v{v}-{mode}", "format": "iceberg", "seed": 32, "rows": 200, "format_version": v, "mode": mode}
    for v in (3, 2) for mode in ("merge-on-read", "copy-on-write")
]


@pytest.fixture(scope="module")
def spark_tables():
    return sparkkit.written_or_skip(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_spark_written_iceberg_replays_at_every_snapshot(env, registry, tmp_path, spark_tables, scenario):
    _, oracle = spark_tables[scenario["name"]]
    src = icebergkit.Path(oracle["table"]) / "metadata"
    versions = sorted(src.glob("v*.metadata.json"), key=icebergkit.version_of)
    last = json.loads(versions[-1].read_text())
    assert last["format-version"] == scenario["format_version"]
    if scenario["mode"] == "merge-on-read":
        deletes = "puffin" if scenario["format_version"] == 3 else "-deletes.parquet"
        assert any(deletes in f.name for f in (src.parent / "data").rglob("*")), f"Spark wrote no {deletes} file"
    table = tmp_path / "t"
    (table / "metadata").mkdir(parents=True)
    props, topic = icebergkit.iceberg_props(tmp_path, env, table)
    replay, seen, steps = testkit.Replay(registry), set(), 0
    for f in versions:
        shutil.copy(f, table / "metadata" / f.name)
        (table / "metadata" / "version-hint.text").write_text(str(icebergkit.version_of(f)))
        cur = json.loads(f.read_text()).get("current-snapshot-id")
        if cur in (None, -1):
            continue
        testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        snap = oracle["snapshots"][str(cur)]
        schema = {"schema": [{"name": c, "type": ""} for c in ("id", "part", "name", "amount")],
                  "record_key_fields": ["id"]}
        testkit.compare(schema, snap["rows"], replay, f"{scenario['name']} {f.name} ({snap['operation']})")
        steps += 1
    assert steps >= 9, steps
    icebergkit.no_split_updates(replay)
    testkit.assert_verified(props, scenario["name"])
