"""Hudi tables written by Spark with Hudi 1.1 (issue 30), CDC on in each supplemental logging
mode, copy-on-write and merge-on-read, table versions 9 and 6 (`sparkkit`, `sparkhudi`): Spark is
the oracle twice over. Revealed one instant at a time, the replayed topic equals Spark's table as
of every instant (time travel), and the connector's events equal Spark's own CDC query key by key
and instant by instant — read from the CDC log files where the connector finds them, and again
through the diff (`read.cdc.from-log=false`). Where Hudi 1.1.1's own CDC query fails (merge-on-read
table version 6; a delta commit beside a pending compaction), the events of those instants equal
Spark's snapshots before and after, diffed by key. Skipped, with the reason, where Java, pyspark or the
jars are missing (`python tests/sparkkit.py install`)."""

import json
import shutil
import uuid

import pytest

import sparkkit
import testkit

MODES = ["OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER"]
DATA = ("id", "part", "ts", "v", "name", "price")


def scenario(kind, mode, version):
    s = {"name": f"hudi-{kind}-{mode.lower().replace('_', '-')}-v{version}", "format": "hudi", "type": kind,
         "table_version": version, "cdc_mode": mode, "seed": 30, "rows": 300, "commits": 7, "partitions": 3}
    if kind == "mor":
        s["compact_every"] = 3
    return s


SCENARIOS = [scenario(k, m, 9) for k in ("cow", "mor") for m in MODES] + \
    [scenario(k, "DATA_BEFORE_AFTER", 6) for k in ("cow", "mor")] + [
        # a global index moving keys between partitions, inline clustering, an insert overwrite
        {**scenario("cow", "DATA_BEFORE_AFTER", 9), "name": "hudi-cow-global-moves-clustering-overwrite",
         "index": "GLOBAL_SIMPLE", "cluster_every": 3, "overwrite_at": 5, "commits": 8,
         # an index type is the writer's setting, not the table's: its users say so (README Events)
         "connector": {"key.partition-path": "false"}},
        # the record index (metadata table), keys moving, compaction
        {**scenario("mor", "DATA_BEFORE", 9), "name": "hudi-mor-record-index-moves", "index": "RECORD_INDEX",
         "commits": 8},
        # compaction scheduled after one write and run after the next: a delta commit writes into
        # the pending compaction's file slices, and the compaction completes after it
        {**scenario("mor", "DATA_BEFORE_AFTER", 9), "name": "hudi-mor-async-compaction", "compact_every": None,
         "async_compaction_every": 3, "commits": 11},
    ]


@pytest.fixture(scope="module")
def spark_tables():
    return sparkkit.written_or_skip(SCENARIOS)


def data(img):
    return None if img is None else {c: img.get(c) for c in DATA}


def spark_events(oracle):
    """Spark's CDC rows by the instant they name: {instant: {id: (op, before, after)}} (Spark's
    `i` is Debezium's `c`), and {instant: error} where Hudi's own query failed."""
    raw, failed = {}, {}
    for inst in oracle["instants"]:
        if inst.get("cdc_error"):
            failed[inst["requested"]] = inst["cdc_error"]
        for e in inst["cdc"] or []:
            img = e["after"] or e["before"]
            raw.setdefault(e["ts_ms"], {}).setdefault(img["id"], []).append(e)
    return {t: {k: net(t, k, es) for k, es in keys.items()} for t, keys in raw.items()}, failed


def net(instant, key, events):
    """One key's change in one instant, as the changelog has it: Spark's CDC gives a key that
    left one file group for another (a move between partitions under a global index, a row kept
    by an insert overwrite) as a delete there and an insert here — one update."""
    ops = sorted(e["op"] for e in events)
    if ops == ["d", "i"]:
        d, i = sorted(events, key=lambda e: e["op"])
        return "u", data(d["before"]), data(i["after"])
    assert len(events) == 1, f"Spark's CDC has {key} {ops} in {instant}"
    e = events[0]
    return {"i": "c"}.get(e["op"], e["op"]), data(e["before"]), data(e["after"])


def our_events(events):
    """The connector's events: {instant: {id: (op, before, after)}}."""
    out = {}
    for e in events:
        img = e["after"] or e["before"]
        mine = out.setdefault(e["source"]["instant"], {})
        assert img["id"] not in mine, f"two events of {img['id']} in {e['source']['instant']}"
        mine[img["id"]] = (e["op"], data(e["before"]), data(e["after"]))
    return out


def snapshot_events(oracle):
    """Spark's snapshots as of consecutive instants, diffed by key: {instant: {id: (op, before,
    after)}}. The second oracle, for the instants where Hudi's own CDC query fails (Hudi 1.1.1 on
    merge-on-read tables of version 6, and where a compaction is pending): every key whose row
    Spark sees appear, vanish or change."""
    out, prev = {}, None
    for inst in oracle["instants"]:
        cur = {r["id"]: data(r) for r in inst["rows"]}
        if prev is not None:
            ev = {k: ("d", prev[k], None) for k in prev.keys() - cur.keys()}
            ev.update({k: ("c", None, cur[k]) for k in cur.keys() - prev.keys()})
            ev.update({k: ("u", prev[k], cur[k]) for k in cur.keys() & prev.keys()
                       if not testkit.same(prev[k], cur[k])})
            out[inst["requested"]] = ev
        prev = cur
    return out


def assert_same_events(oracle, got, label):
    """Ours equal Spark's CDC, instant by instant from the second on (the first is our full
    scan). Where Hudi's own CDC query failed on an instant, ours equal Spark's snapshots diffed by
    key instead (`snapshot_events`); returns those instants."""
    spark, failed = spark_events(oracle)
    diffed = snapshot_events(oracle) if failed else {}
    compared = 0
    for inst in oracle["instants"][1:]:
        compared += 1
        have = got.get(inst["requested"], {})
        if inst["requested"] in failed:
            want, which = diffed[inst["requested"]], "Spark's snapshots diffed"
            # an update to the same values is an event Spark's snapshots cannot show
            have = {k: h for k, h in have.items() if not (h[0] == "u" and testkit.same(h[1], h[2]))}
        else:
            want, which = spark.get(inst["requested"], {}), "Spark's CDC"
        assert_instant_events(label, inst, have, want, which)
    assert compared, "nothing compared"
    return failed


def assert_instant_events(label, inst, have, want, which):
    """One instant's events, {id: (op, before, after)}: ours (`have`) equal `which`'s (`want`)."""
    assert have.keys() == want.keys(), (
        f"{label} {inst['action']} {inst['requested']}: keys only in ours {sorted(have.keys() - want.keys())[:5]}, "
        f"only in {which} {sorted(want.keys() - have.keys())[:5]}")
    for k, w in want.items():
        h = have[k]
        assert h[0] == w[0] and testkit.same(h[1], w[1]) and testkit.same(h[2], w[2]), \
            f"{label} {inst['requested']} {k}: ours {h}, {which} {w}"


@pytest.mark.parametrize("name", [s["name"] for s in SCENARIOS])
def test_spark_written_hudi_replays_and_matches_sparks_cdc(env, registry, tmp_path, spark_tables, name):
    cached, oracle = spark_tables[name]
    table = tmp_path / "table"
    shutil.copytree(cached, table)
    kind = "mor" if "-mor-" in name else "cow"
    assert any(i["operation"] == "COMPACT" for i in oracle["instants"]) == (kind == "mor"), oracle["instants"]
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = f"spark-{name}-" + uuid.uuid4().hex[:6]
    settings = next(s for s in SCENARIOS if s["name"] == name).get("connector", {})
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **settings)
    replay, _ = testkit.replay_steps(env, registry, revealed, oracle, oracle["instants"], props, topic, name)
    assert {e["op"] for e in replay.events} >= {"r", "c", "u", "d"}
    failed = assert_same_events(oracle, our_events(replay.events), f"{name} (CDC files)")
    # the same history through the diff, from the second instant on
    topic2 = topic + "-diff"
    props2 = testkit.connector_props(tmp_path, "c-" + topic2, table, topic2, env, **settings, **{
        "read.cdc.from-log": "false", "read.start-commit": oracle["instants"][1]["requested"]})
    testkit.run_once(props2)
    assert "read from its CDC log files" not in testkit.RUN_LOGS[-1]
    diffed = [registry.decode(v) for _, _, _, v in testkit.consume_all(env, topic2) if v is not None]
    assert_same_events(oracle, our_events(diffed), f"{name} (diff)")
    if failed:
        # Hudi's own CDC query failing is Hudi's bug, not ours: said, and checked the other way above
        print(f"{name}: Hudi 1.1.1's own CDC query failed on {len(failed)} of {len(oracle['instants'])} instants "
              f"({next(iter(failed.values()))[:200]}); those compared with Spark's snapshots diffed by key")


# automatic cleaning on copy-on-write (keeping 1 commit) and on merge-on-read with compaction
# (keeping 3): the slices earlier instants were read from are deleted as the table goes on
CLEANING = [{**scenario(kind, "DATA_BEFORE_AFTER", 9), "name": f"hudi-{kind}-cleaning", "clean_retained": kept,
             "commits": 10, "cdc_per_write": True} for kind, kept in (("cow", 1), ("mor", 3))]
# and a merge-on-read table without CDC keeping 2 (issue 60: tests/test_resync.py)
CLEANING_NO_CDC = {**scenario("mor", "DATA_BEFORE_AFTER", 9), "name": "hudi-mor-cleaning-no-cdc", "cdc_mode": None,
                   "clean_retained": 2, "commits": 10}
# a savepoint of write 2's instant, and after write 5 Hudi restores the table to it (issue 60:
# tests/test_resync.py)
RESTORE = {**scenario("mor", "DATA_BEFORE_AFTER", 9), "name": "hudi-mor-restore", "restore": [2, 5], "commits": 8}


def mirror(src, dst):
    """Make `dst` hold what `src` holds: new and changed files copied, files gone from `src`
    deleted (as a writer and its cleaner leave a table)."""
    have = {p.relative_to(dst) for p in dst.rglob("*") if p.is_file()} if dst.exists() else set()
    want = {p.relative_to(src) for p in src.rglob("*") if p.is_file()}
    for rel in have - want:
        (dst / rel).unlink()
    for rel in want:
        s, d = src / rel, dst / rel
        if rel not in have or s.stat().st_size != d.stat().st_size or s.read_bytes() != d.read_bytes():
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)


@pytest.mark.parametrize("scenario", CLEANING, ids=[s["name"] for s in CLEANING])
def test_spark_written_hudi_with_cleaning_replays_write_by_write(env, registry, tmp_path, scenario):
    """The connector runs after every write, as it keeps up with a table in production; the
    cleaner deletes slices it has read already. The replay equals Spark's read of the table after
    every write, the events equal Spark's CDC query of each instant (asked right after its write,
    before cleaning removed what it reads), and the cleaner did delete files the first writes left."""
    cached, oracle = sparkkit.written_or_skip([scenario])[scenario["name"]]
    states = cached.parent / "states"
    table = tmp_path / "table"
    topic = f"spark-{scenario['name']}-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    # and a second connector that diffs the slices instead of reading the CDC log files
    diffed = testkit.connector_props(tmp_path, "c-" + topic + "-d", table, topic + "-d", env,
                                     **{"read.cdc.from-log": "false"})
    replay, seen = testkit.Replay(registry), set()
    replay_d, seen_d = testkit.Replay(registry), set()
    for st in oracle["states"]:
        mirror(states / st["dir"], table)
        testkit.run_once(props)
        testkit.run_once(diffed)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        replay_d.apply(testkit.new_records(testkit.consume_all(env, topic + "-d"), seen_d))
        label = f"{scenario['name']} after write {st['dir']} ({st['last']})"
        testkit.compare(oracle, st["rows"], replay, label)
        testkit.compare(oracle, st["rows"], replay_d, label + " diffed")
    assert not assert_same_events(oracle, our_events(replay_d.events), scenario["name"] + " diffed")
    failed = assert_same_events(oracle, our_events(replay.events), scenario["name"])
    assert not failed, f"Spark's CDC query failed on {failed}"
    first = {p.name for p in (states / oracle["states"][0]["dir"]).rglob("*.parquet") if ".hoodie" not in p.parts}
    last = {p.name for p in table.rglob("*.parquet") if ".hoodie" not in p.parts}
    assert first - last, "the cleaner deleted none of the first write's files"
    timeline = table / ".hoodie" / "timeline"
    assert any(f.name.endswith(".clean") for f in timeline.iterdir()), "no completed clean"
    assert {e["op"] for e in replay.events} >= {"r", "c", "u", "d"}
    testkit.assert_verified(props, scenario["name"])


def online_headroom(props):
    """The `history headroom` line `validate --online` prints for a connector."""
    import subprocess
    r = subprocess.run([str(testkit.BIN), "validate", "--online", str(props)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [l for l in (r.stdout + r.stderr).splitlines() if "history headroom" in l]
    assert lines, r.stdout[-2000:]
    return lines[0]


def test_history_headroom_says_how_far_the_cleaner_is(env, tmp_path):
    """Issue 60's early warning: a connector at the head of a table cleaned to 2 commits has
    commits of headroom; one left at the first writes while the cleaner moved on has none, and
    `validate --online` says it is low (the next unit's slices may be gone)."""
    scenario = next(s for s in CLEANING if s["name"] == "hudi-mor-cleaning")
    cached, oracle = sparkkit.written_or_skip([scenario])[scenario["name"]]
    states, table = cached.parent / "states", tmp_path / "table"
    topic = "headroom-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{"history.gap": "fail"})
    mirror(states / oracle["states"][1]["dir"], table)
    testkit.run_once(props)
    mirror(states / oracle["states"][-1]["dir"], table)
    behind = online_headroom(props)
    assert "headroom: 0 commits" in behind and "(low" in behind, behind
    # the task warns of it before its next unit's read finds the slices gone
    import subprocess
    r = subprocess.run([str(testkit.BIN), "run", "--once", str(props)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "history headroom low" in r.stderr, (r.returncode, r.stderr[-3000:])
    fresh = testkit.connector_props(tmp_path, "c-" + topic + "-latest", table, topic + "-latest", env,
                                    **{"read.start-commit": "latest"})
    testkit.run_once(fresh)
    ahead = online_headroom(fresh)
    commits = int(ahead.split("headroom: ")[1].split(" commits")[0])
    assert commits >= 1, ahead
