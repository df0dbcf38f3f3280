"""Delta tables written by Spark with delta-spark 3.3.2 (issue 30; `sparkkit`, `sparkdelta`): deletion
vectors left by DELETE, UPDATE and MERGE, column mapping by name and by id with a renamed column
that is later dropped,
row tracking, v2 checkpoints with sidecars, OPTIMIZE, the change data feed on and off — every
file Spark's own. Revealed one version at a time, the replayed topic equals Spark's table as of
every version (`versionAsOf`), and the connector's events equal Spark's `table_changes` netted per
(version, key) — for a table without the change feed, those of its twin with it (the same seeded
history); and a fresh connector after log cleanup starts from Spark's newest checkpoint. Skipped,
with the reason, where Java, pyspark or the jars are missing."""

import json
import re
from collections import Counter

import pytest

import deltakit
import sparkkit
import testkit

ALL = {"format": "delta", "seed": 31, "rows": 200, "versions": 15, "partitioned": True, "dv": True,
       "row_tracking": True}
SCENARIOS = [
    {**ALL, "name": "delta-dv-mapping-name-rowtracking-cdf-v2checkpoint", "column_mapping": "name", "cdf": True,
     "v2_checkpoint": True},
    # the twin of the first without the change feed: its events come from the log's remove/add
    {**ALL, "name": "delta-dv-mapping-id-rowtracking-no-cdf", "column_mapping": "id", "cdf": False,
     "twin": "delta-dv-mapping-name-rowtracking-cdf-v2checkpoint"},
    # the same history without deletion vectors: UPDATE, DELETE and MERGE rewrite whole files,
    # copying the rows they leave alone (row tracking tells them apart, see the keyless test)
    {**ALL, "name": "delta-mapping-id-rowtracking-no-dv-no-cdf", "column_mapping": "id", "cdf": False, "dv": False,
     "twin": "delta-dv-mapping-name-rowtracking-cdf-v2checkpoint"},
    {**ALL, "name": "delta-unpartitioned-added-column-cdf", "partitioned": False, "dv": False,
     "row_tracking": False, "cdf": True},
]


@pytest.fixture(scope="module")
def spark_tables():
    return sparkkit.written_or_skip(SCENARIOS)


def spark_changes(changes, version):
    """Spark's `table_changes` of one version by key: (op, before, after), an update's pre- and
    post-image one `u` (as is a delete and an insert of one key in one version)."""
    by_key = {}
    for c in changes.get(str(version), []):
        by_key.setdefault(c["row"]["id"], {})[c["type"]] = c["row"]
    out = {}
    for k, kinds in by_key.items():
        before = kinds.get("update_preimage") or kinds.get("delete")
        after = kinds.get("update_postimage") or kinds.get("insert")
        assert len(kinds) <= 2, f"version {version} key {k}: {sorted(kinds)}"
        out[k] = ("u" if before and after else "d" if before else "c", before, after)
    return out


# under column mapping the history renames `day` (see `sparkdelta`): rows published before the rename
# carry the old name, Spark shows the new one
RENAMED = {"due": "day"}


def assert_same_events(events, changes, versions, label, renamed_at=None):
    """Ours equal Spark's `table_changes` per (version, key); a renamed column is under its old
    name in events before the rename (`renamed_at`: its version), under the new one after."""
    ours = {}
    for e in events:
        img = e["after"] or e["before"]
        mine = ours.setdefault(int(e["source"]["instant"]), {})
        assert img["id"] not in mine, f"{label}: two events of {img['id']} in version {e['source']['instant']}"
        mine[img["id"]] = e
    compared = 0
    for v in versions:
        want, have = spark_changes(changes, v), ours.get(v, {})
        assert have.keys() == want.keys(), (f"{label} version {v}: keys only in ours {sorted(have.keys() - want.keys())[:5]}, "
                                            f"only in Spark's {sorted(want.keys() - have.keys())[:5]}")
        for k, (op, before, after) in want.items():
            e = have[k]
            assert e["op"] == op, f"{label} version {v} key {k}: ours {e['op']}, Spark's {op}"
            for mine, theirs in ((e["before"], before), (e["after"], after)):
                assert (mine is None) == (theirs is None), f"{label} version {v} key {k}: images differ"
                for col, w in (theirs or {}).items():
                    old = RENAMED.get(col) if renamed_at is None or v < renamed_at else None
                    g = testkit.norm(mine[col] if col in mine else mine.get(old))
                    assert testkit.same(g, testkit.norm(w)), f"{label} version {v} key {k} {col}: ours {g!r}, Spark's {w!r}"
        compared += len(want)
    return compared


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_spark_written_delta_replays_and_matches_table_changes(env, registry, tmp_path, spark_tables, scenario):
    cached, oracle = spark_tables[scenario["name"]]
    proto = oracle["protocol"]
    for feature, on in (("deletionVectors", scenario["dv"]), ("columnMapping", scenario.get("column_mapping")),
                        ("v2Checkpoint", scenario.get("v2_checkpoint"))):
        # (reader version 2 is column mapping without table features: a table with no reader feature)
        legacy = feature == "columnMapping" and proto["minReaderVersion"] == 2
        assert (feature in proto.get("readerFeatures", []) or legacy) == bool(on), proto
    assert ("rowTracking" in proto.get("writerFeatures", [])) == scenario["row_tracking"], proto
    if scenario["dv"]:
        assert any("deletionVector" in f.read_text() for f in (cached / "_delta_log").glob("*.json")), "no deletion vector written"
    t = deltakit.RevealedDelta(cached, tmp_path / "table")
    props, topic = deltakit.delta_props(tmp_path, env, t.table)
    replay, seen = deltakit.StrictReplay(registry), set()
    for v in range(t.latest + 1):
        t.reveal(v)
        testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        deltakit.compare(oracle["versions"][str(v)], replay, f"{scenario['name']} version {v} ({oracle['operations'][str(v)]})",
                         RENAMED)
    testkit.assert_verified(props, scenario["name"])
    # a fresh connector after log cleanup: the newest checkpoint (v2 with sidecars, or classic)
    # is all there is before its version
    cps = sorted({int(f.name[:20]) for f in (cached / "_delta_log").glob("[0-9]*.checkpoint.*")})
    assert cps, "Spark wrote no checkpoint"
    t.hide_commits_before(cps[-1])
    props2, topic2 = deltakit.delta_props(tmp_path, env, t.table)
    testkit.run_once(props2)
    fresh = deltakit.StrictReplay(registry)
    fresh.apply(testkit.consume_all(env, topic2))
    deltakit.compare(oracle["versions"][str(t.latest)], fresh, f"{scenario['name']} from checkpoint {cps[-1]}", RENAMED)
    changes = oracle["changes"] if scenario["cdf"] else spark_tables[scenario["twin"]][1]["changes"]
    renamed_at = next((int(v) for v, op in oracle["operations"].items() if op == "RENAME COLUMN"), None)
    assert (renamed_at is not None) == bool(scenario.get("column_mapping")), oracle["operations"]
    n = assert_same_events(replay.events, changes, range(2, t.latest + 1), scenario["name"], renamed_at)
    assert n > 100, n


def image(row):
    """A row's table columns, as of the version it was read at (Spark's rows and the events both
    name a renamed column as that version's schema does)."""
    if row is None:
        return None
    return json.dumps({k: testkit.norm(x) for k, x in row.items() if k not in deltakit.LINEAGE}, sort_keys=True, default=str)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s["row_tracking"] and not s["cdf"]],
                         ids=[s["name"] for s in SCENARIOS if s["row_tracking"] and not s["cdf"]])
def test_spark_written_delta_keyless_events_follow_row_tracking(env, registry, tmp_path, spark_tables, scenario,
                                                               monkeypatch):
    """Read as a keyless table (`key.mode=none`), each version's events are exactly Spark's rows
    diffed by row tracking's `_row_id`: a row whose `_row_commit_version` moved one `u`, a row
    only before a `d`, only after a `c`; each event's `source.row_id` is the row's `_row_id`.
    Without deletion vectors a rewrite's carried-over rows are told by row tracking and not read
    whole (the connector's debug log counts them)."""
    monkeypatch.setenv("RUST_LOG", "info,rdkafka=warn,lakestream::source::lineage=debug")
    cached, oracle = spark_tables[scenario["name"]]
    t = deltakit.RevealedDelta(cached, tmp_path / "table")
    props, topic = deltakit.delta_props(tmp_path, env, t.table, **{"key.mode": "none"})
    seen, prev, updates, carried = set(), [], 0, 0
    for v in range(t.latest + 1):
        t.reveal(v)
        run = testkit.run_once(props)
        carried += sum(int(n) for n in re.findall(r"rewrite narrowed by row lineage.* carried=(\d+)", run.stderr))
        got = Counter()
        for _, _, key, value in testkit.new_records(testkit.consume_all(env, topic), seen):
            assert not key and value is not None, "a keyless table's events have null keys, no tombstones"
            ev = registry.decode(value)
            got[("c" if ev["op"] == "r" else ev["op"], image(ev["before"]), image(ev["after"]), ev["source"]["row_id"])] += 1
        rows = oracle["versions"][str(v)]
        was, now = {r["_row_id"]: r for r in prev}, {r["_row_id"]: r for r in rows}
        assert len(now) == len(rows), f"version {v}: Spark gave one _row_id to two rows"
        want = Counter()
        for rid in was.keys() | now.keys():
            b, a = was.get(rid), now.get(rid)
            if b is None:
                want[("c", None, image(a), rid)] += 1
            elif a is None:
                want[("d", image(b), None, rid)] += 1
            elif b["_row_commit_version"] != a["_row_commit_version"]:
                want[("u", image(b), image(a), rid)] += 1
        label = f"{scenario['name']} version {v} ({oracle['operations'][str(v)]})"
        assert got == want, f"{label}: events differ from Spark's rows by _row_id: extra {got - want}, missing {want - got}"
        updates += sum(n for (op, *_), n in want.items() if op == "u")
        prev = rows
    assert updates > 20, updates
    if not scenario["dv"]:
        assert carried > 100, f"rewrites carried {carried} rows told by row tracking"
