"""Iceberg tables written by Spark with Iceberg 1.10.2 (issue 30; `sparkkit`, `sparkiceberg`): format
version 3 (deletion vectors) and 2 (position deletes), copy-on-write and merge-on-read UPDATE,
DELETE and MERGE, compaction. Revealed one metadata version at a time, the replayed topic equals
Spark's read of the current snapshot at every step. Read as keyless tables (`key.mode=none`), the
v3 tables' events follow row lineage: each snapshot's events are exactly Spark's rows diffed by
`_row_id` (an updated row one `u`, a row a rewrite carried over nothing). Skipped, with the reason,
where Java, pyspark or the jars are missing."""

import json
import shutil

import pytest
from collections import Counter

import icebergkit
import sparkkit
import testkit

SCENARIOS = [
    {"name": f"iceberg-v{v}-{mode}", "format": "iceberg", "seed": 32, "rows": 200, "format_version": v, "mode": mode}
    for v in (3, 2) for mode in ("merge-on-read", "copy-on-write")
]

COLUMNS = ("id", "part", "name", "amount")


def revealed(oracle, tmp_path, env, **extra):
    """A connector on a copy of the table whose metadata versions are revealed one at a time:
    (props, topic, steps), `steps` yielding (version file, Spark's snapshot) after the connector
    ran on each version that has a current snapshot."""
    src = icebergkit.Path(oracle["table"]) / "metadata"
    table = tmp_path / "t"
    (table / "metadata").mkdir(parents=True)
    props, topic = icebergkit.iceberg_props(tmp_path, env, table, **extra)

    def steps():
        for f in sorted(src.glob("v*.metadata.json"), key=icebergkit.version_of):
            shutil.copy(f, table / "metadata" / f.name)
            (table / "metadata" / "version-hint.text").write_text(str(icebergkit.version_of(f)))
            cur = json.loads(f.read_text()).get("current-snapshot-id")
            if cur not in (None, -1):
                testkit.run_once(props)
                yield f, oracle["snapshots"][str(cur)]
    return props, topic, steps()


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
    props, topic, steps_of = revealed(oracle, tmp_path, env)
    replay, seen, steps = testkit.Replay(registry), set(), 0
    for f, snap in steps_of:
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        rows = [{c: r[c] for c in COLUMNS} for r in snap["rows"]]
        schema = {"schema": [{"name": c, "type": ""} for c in COLUMNS],
                  "record_key_fields": ["id"]}
        testkit.compare(schema, rows, replay, f"{scenario['name']} {f.name} ({snap['operation']})")
        steps += 1
    assert steps >= 9, steps
    icebergkit.no_split_updates(replay)
    testkit.assert_verified(props, scenario["name"])


def image(row):
    return None if row is None else tuple(round(row[c], 6) if c == "amount" and row[c] is not None else row[c]
                                          for c in COLUMNS)


def lineage_events(before, after):
    """The events Spark's rows imply from one snapshot to the next, matched by `_row_id`: a row
    whose last-updated sequence number moved is a `u`, one only before a `d`, one only after a `c`, each carrying the
    row id (`source.row_id`)."""
    was = {r["_row_id"]: r for r in before}
    now = {r["_row_id"]: r for r in after}
    assert len(was) == len(before) and len(now) == len(after), "Spark gave one _row_id to two rows"
    out = Counter()
    for rid in was.keys() | now.keys():
        b, a = was.get(rid), now.get(rid)
        if b is None:
            out[("c", None, image(a), rid)] += 1
        elif a is None:
            out[("d", image(b), None, rid)] += 1
        elif b["_last_updated_sequence_number"] != a["_last_updated_sequence_number"]:
            out[("u", image(b), image(a), rid)] += 1
        else:
            assert image(b) == image(a), f"row {rid} changed without a new sequence number"
    return out


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s["format_version"] == 3],
                         ids=[s["name"] for s in SCENARIOS if s["format_version"] == 3])
def test_spark_written_iceberg_v3_keyless_events_follow_row_lineage(env, registry, tmp_path, spark_tables, scenario):
    _, oracle = spark_tables[scenario["name"]]
    _, topic, steps_of = revealed(oracle, tmp_path, env, **{"key.mode": "none"})
    seen, prev, updates, steps = set(), None, 0, 0
    for f, snap in steps_of:
        got = Counter()
        for _, _, key, value in testkit.new_records(testkit.consume_all(env, topic), seen):
            assert not key and value is not None, "a keyless table's events have null keys, no tombstones"
            ev = registry.decode(value)
            got[("c" if ev["op"] == "r" else ev["op"], image(ev["before"]), image(ev["after"]), ev["source"]["row_id"])] += 1
        want = lineage_events(prev or [], snap["rows"])
        label = f"{scenario['name']} {f.name} ({snap['operation']})"
        assert got == want, f"{label}: events differ from Spark's rows by _row_id: extra {got - want}, missing {want - got}"
        updates += sum(n for (op, *_), n in want.items() if op == "u")
        prev, steps = snap["rows"], steps + 1
    assert steps >= 9 and updates > 20, (steps, updates)
