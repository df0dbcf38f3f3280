"""Every Iceberg fixture (position deletes, deletion vectors, copy-on-write, equality deletes, schema
evolution, compaction + tag + expiry, partitioned MERGE; Spark and pyiceberg writers), revealed one
metadata version at a time: after each one the replayed topic equals the oracle rows of the current
snapshot, updates are single `u` events, and no (key, snapshot, op) repeats."""

import collections
import json
import subprocess

import pytest

import icebergkit as ik
import testkit

NAMES = ik.table_names() or ["(fixtures absent)"]


@pytest.fixture(autouse=True)
def unpacked():
    ik.unpack()


@pytest.mark.parametrize("name", NAMES)
def test_replays_to_oracle_from_table_scan(env, registry, tmp_path, name):
    replay, oracle, _ = ik.replay_revealed(env, registry, name, tmp_path)
    ops = {e["op"] for e in replay.events}
    assert "r" in ops, ops
    if not oracle["copy_on_write_only"] or name in ("db.cow_v2",):
        # every merge-on-read fixture updates rows in place: those must arrive as `u` with both images
        assert "u" in ops, f"{name}: no update events ({ops})"


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("db.") or n == "(fixtures absent)"])
def test_keyless_replays_as_a_multiset_of_rows(env, registry, tmp_path, name):
    """key.mode=none on every Spark-written table: null keys, removed rows `d`, added rows `c`,
    carried-over rows nothing, and in a v3 table a row updated in place one `u` (paired by row
    lineage); the multiset of replayed rows equals the table at every snapshot."""
    replay = ik.replay_revealed_keyless(env, registry, name, tmp_path)
    oracle = ik.load_oracle(name)
    ops = {e["op"] for e in replay.events}
    if name.endswith("_v3") and any(s.get("operation") == "overwrite" for s in oracle["snapshots"]):
        assert "u" in ops, f"{name}: a v3 table's updates pair by row lineage ({ops})"
    if any(s.get("operation") in ("overwrite", "delete") for s in oracle["snapshots"]):
        assert "d" in {e["op"] for e in replay.events}, f"{name}: the history removes rows; some must arrive as `d`"
    if not oracle.get("changelog"):
        return
    # copy-on-write: from the earliest snapshot, exactly Spark's changelog view with updates
    # unpaired (carried-over rows, which a rewrite removes and re-adds unchanged, emit nothing)
    props, topic = ik.iceberg_props(tmp_path, env, ik.WAREHOUSE / name.replace(".", "/"), **{
        "key.mode": "none", "starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT"})
    testkit.run_once(props)
    cols = ik.stable_columns(ik.WAREHOUSE / name.replace(".", "/")) & {c["name"] for c in oracle["changelog"]["columns"]
                                                                      if not c["name"].startswith("_")}
    events = ik.MultisetReplay(registry, cols, replay.types)
    events.apply(testkit.consume_all(env, topic))
    unpaired = {"UPDATE_BEFORE": "DELETE", "UPDATE_AFTER": "INSERT"}
    want = sorted(json.dumps([snap, unpaired.get(kind, kind), events.canon(data)]) for snap, kind, data in spark_rows(oracle, cols))
    got = sorted(json.dumps([snap, unpaired.get(kind, kind), events.canon(data)])
                 for snap, kind, data in ik.spark_changelog_rows(events, cols))
    assert got == want, f"{name}: keyless changelog differs from Spark's view\n got - want: {sorted(set(got) - set(want))[:4]}"


# db.compact_v2's oldest snapshots were expired after the compaction: its early metadata versions
# name snapshots whose files are gone, so a reader starting from its earliest snapshot is only
# possible at the final version (the changelog-view test below covers that)
@pytest.mark.parametrize("name", [n for n in NAMES if n != "db.compact_v2"])
def test_replays_to_oracle_as_changes_from_earliest(env, registry, tmp_path, name):
    replay, oracle, _ = ik.replay_revealed(env, registry, name, tmp_path,
                                           **{"starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT"})
    assert "r" not in {e["op"] for e in replay.events}
    # every event names the snapshot it belongs to, and snapshots arrive in commit order
    order = [s["snapshot_id"] for s in oracle["snapshots"]]
    seen = [int(e["source"]["instant"]) for e in replay.events]
    assert all(s in order for s in seen), "event of an unknown snapshot"
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen), "snapshots out of order"
    assert all(e["source"]["connector"] == "iceberg" for e in replay.events)


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("pyice.")])
def test_sql_catalog_replays_to_oracle(env, registry, tmp_path, name):
    ik.replay_revealed(env, registry, name, tmp_path, catalog=True)


def spark_rows(oracle, columns):
    return [(r["_commit_snapshot_id"], r["_change_type"], {k: v for k, v in r.items() if k in columns})
            for r in oracle["changelog"]["rows"]]


def per_commit(rows, oracle, name):
    """Spark's changelog view is per snapshot; lakestream's is per catalog commit (snapshots one
    metadata commit added together are one change: pyiceberg's upsert is an overwrite and an
    append). Net Spark's rows per commit and key: first before image, last after image."""
    meta = ik.WAREHOUSE / name.replace(".", "/") / "metadata"
    currents = {json.loads(f.read_text()).get("current-snapshot-id") for f in meta.glob("*.metadata.json")}
    order = [s["snapshot_id"] for s in oracle["snapshots"]]
    commit_of = {}
    for i, snap in enumerate(order):
        commit_of[snap] = next((s for s in order[i:] if s in currents), snap)
    key = oracle["key_column"]
    net = {}  # (commit, key) -> [before, after]
    for snap, kind, data in rows:
        ba = net.setdefault((commit_of[snap], data.get(key)), [None, None, False])
        if kind in ("DELETE", "UPDATE_BEFORE") and not ba[2]:
            ba[0], ba[2] = data, True
        if kind in ("INSERT", "UPDATE_AFTER"):
            ba[1] = data
        if kind == "DELETE":
            ba[1] = None
    out = []
    for (commit, _), (before, after, _) in net.items():
        if before is not None and after is not None:
            if before != after:
                out += [(commit, "UPDATE_BEFORE", before), (commit, "UPDATE_AFTER", after)]
        elif before is not None:
            out.append((commit, "DELETE", before))
        elif after is not None:
            out.append((commit, "INSERT", after))
    return out


@pytest.mark.parametrize("name", [n for n in NAMES if n != "(fixtures absent)" and ik.load_oracle(n).get("changelog")])
def test_changelog_matches_spark_changelog_view(env, registry, tmp_path, name):
    """Copy-on-write tables: our events, as Spark's create_changelog_view rows (netted per catalog
    commit), row for row."""
    oracle = ik.load_oracle(name)
    props, topic = ik.iceberg_props(tmp_path, env, ik.WAREHOUSE / name.replace(".", "/"),
                                    **{"starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT"})
    testkit.run_once(props)
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    # Spark's view has the current schema's columns (null where a row predates a column)
    cols = ik.stable_columns(ik.WAREHOUSE / name.replace(".", "/")) & {c["name"] for c in oracle["changelog"]["columns"]
                                                                      if not c["name"].startswith("_")}
    types = {}
    for s in oracle["snapshots"]:
        types.update({c["name"]: c["type"] for c in s["columns"]})

    def canon(rows):
        out = []
        for snap, kind, data in rows:
            data = {k: testkit.norm(data.get(k), types.get(k, "")) for k in cols}
            out.append(json.dumps([snap, kind, data], sort_keys=True, default=str))
        return sorted(out)

    got = canon(ik.spark_changelog_rows(replay, cols))
    want = canon(per_commit(spark_rows(oracle, cols), oracle, name))
    assert got == want, f"{name}: changelog differs\n got - want: {sorted(set(got) - set(want))[:6]}\n want - got: {sorted(set(want) - set(got))[:6]}"


def test_expired_snapshot_fails_loudly_with_the_way_out(env, registry, tmp_path):
    """compact_v2: the connector's position is its second snapshot; the table moves on and that
    snapshot's successors expire before they are read: the connector stops (exit 1) naming the
    snapshot and the ways out, and publishes nothing. A position whose successor survives
    (the tagged third snapshot's parent) continues."""
    t = ik.RevealedIceberg("db.compact_v2", tmp_path / "tables")
    versions = [i for i in range(len(t.versions)) if t.current(i) is not None]
    props, topic = ik.iceberg_props(tmp_path, env, t.table, **{"starting-strategy": "INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE",
                                                               "history.gap": "fail"})
    t.reveal(versions[1])
    testkit.run_once(props)
    assert testkit.consume_all(env, topic) == []
    t.reveal(len(t.versions) - 1)
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    gone = str(t.current(versions[1]))
    assert gone in r.stderr and "expired" in r.stderr and "starting-strategy" in r.stderr, r.stderr[-2000:]
    assert testkit.consume_all(env, topic) == []
    # issue 60's early warning: the position is no longer an ancestor, so no headroom is left
    assert "history headroom low" in r.stderr, r.stderr[-2000:]
    online = subprocess.run([str(testkit.BIN), "validate", "--online", str(props)], capture_output=True, text=True,
                            timeout=120)
    assert "history headroom: 0 commits" in online.stdout + online.stderr, online.stdout[-2000:]


def test_end_snapshot_and_max_planning_count(env, registry, tmp_path):
    name = "db.part_mor_v2"
    oracle = ik.load_oracle(name)
    snaps = oracle["snapshots"]
    table = ik.WAREHOUSE / "db" / "part_mor_v2"
    props, topic = ik.iceberg_props(tmp_path, env, table, **{
        "starting-strategy": "INCREMENTAL_FROM_SNAPSHOT_ID", "start-snapshot-id": str(snaps[0]["snapshot_id"]),
        "end-snapshot-id": str(snaps[5]["snapshot_id"]), "max-planning-snapshot-count": "2"})
    r = subprocess.run([str(testkit.BIN), "run", str(props)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    assert {int(e["source"]["instant"]) for e in replay.events} <= {s["snapshot_id"] for s in snaps[:6]}
    ik.check_step(oracle, {s["snapshot_id"]: s for s in snaps}, snaps[5]["snapshot_id"], replay,
                  ik.stable_columns(table), "end-snapshot-id")


def test_bad_iceberg_options_exit_2(env, tmp_path):
    table = ik.WAREHOUSE / "db" / "mor_v2"
    for extra, needle in [
        ({"starting-strategy": "FROM_NOWHERE"}, "starting-strategy"),
        ({"read.start-commit": "earliest"}, "Hudi option"),
        ({"starting-strategy": "INCREMENTAL_FROM_SNAPSHOT_ID"}, "start-snapshot-id"),
        ({"catalog.type": "sql", "catalog.uri": "sqlite:////nonexistent.db", "table.identifier": "a.b"}, "catalog.uri"),
        ({"split-size": "huge"}, "split-size"),
        ({"key.mode": "none"}, "contradicts key.fields"),
        ({"key.mode": "rows"}, "`rows` is not one of: fields, none"),
    ]:
        props, _ = ik.iceberg_props(tmp_path, env, table)
        props.write_text(props.read_text() + "".join(f"{k}={v}\n" for k, v in extra.items()))
        r = subprocess.run([str(testkit.BIN), "validate", str(props)], capture_output=True, text=True)
        assert r.returncode == 2 and needle in r.stderr, (extra, r.returncode, r.stderr)


def test_a_key_that_does_not_fit_the_table_exits_2_from_validate_and_run(env, tmp_path):
    """Settings that do not fit the table are configuration errors: `validate` opens the table
    and says so, as `run` does, with exit 2 — a table without identifier fields and no
    key.fields, or key.fields naming a column the table does not have."""
    props, _ = ik.iceberg_props(tmp_path, env, ik.WAREHOUSE / "db" / "mor_v2")
    text = props.read_text()
    assert "key.fields=id\n" in text
    r = subprocess.run([str(testkit.BIN), "validate", str(props)], capture_output=True, text=True)
    assert r.returncode == 0 and "key [\"id\"]" in r.stdout, r.stdout + r.stderr
    for body, needle in [(text.replace("key.fields=id\n", ""), "declares no identifier fields"),
                         (text.replace("key.fields=id\n", "key.fields=idd\n"), "`idd` is not a column")]:
        props.write_text(body)
        for cmd in (["validate"], ["run", "--once"]):
            r = subprocess.run([str(testkit.BIN), *cmd, str(props)], capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and needle in r.stderr and "key.fields" in r.stderr, (cmd, r.returncode, r.stderr[-2000:])
        r = subprocess.run([str(testkit.BIN), "validate", "--offline", str(props)], capture_output=True, text=True)
        assert r.returncode == 0, "--offline checks the file only"


def test_start_from_snapshot_timestamp(env, registry, tmp_path):
    """INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP starts at the first snapshot committed at or after the
    time, inclusive, as changes."""
    snaps = ik.load_oracle("db.part_mor_v2")["snapshots"]
    props, topic = ik.iceberg_props(tmp_path, env, ik.WAREHOUSE / "db" / "part_mor_v2", **{
        "starting-strategy": "INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP", "start-snapshot-timestamp": str(snaps[5]["timestamp_ms"])})
    testkit.run_once(props)
    # (a mid-history start deletes keys this consumer never saw created: no replay invariants)
    events = [registry.decode(v) for _, _, _, v in testkit.consume_all(env, topic) if v is not None]
    seen = [int(e["source"]["instant"]) for e in events]
    assert seen and seen[0] == snaps[5]["snapshot_id"], seen[:3]
    assert set(seen) <= {s["snapshot_id"] for s in snaps[5:]}


def _by_instant(replay):
    """Each instant's events, (key, op, before, after) sorted."""
    out = collections.defaultdict(list)
    for e in replay.events:
        out[str(e["source"]["instant"])].append((e["_key"], e["op"], repr(e.get("before")), repr(e.get("after"))))
    return {i: sorted(v) for i, v in out.items()}


@pytest.mark.parametrize("name", [n for n in NAMES if n in ("db.cow_v2", "db.mor_v3", "db.eq_v2", "db.part_mor_v2", "pyice.events")])
def test_a_diff_beyond_the_budget_reads_only_the_changed_keys_rows(env, registry, tmp_path, name):
    """A snapshot whose diff is beyond read.memory.budget (12 kB: these tables' files are ~1 kB)
    first keeps key and row hashes, then the changed keys' rows only, and publishes the very
    events of the in-memory diff (or, where the changed rows do not fit either, of the bucketed
    one); the replay matches the oracle throughout."""
    for d in ("narrow", "whole"):
        (tmp_path / d).mkdir()
    testkit.RUN_LOGS.clear()
    narrow, _, _ = ik.replay_revealed(env, registry, name, tmp_path / "narrow", **{
        "starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT", "read.memory.budget": "12000",
        "read.spill.dir": str(tmp_path / "spill")})
    logs = "\n".join(testkit.RUN_LOGS)
    whole, _, _ = ik.replay_revealed(env, registry, name, tmp_path / "whole", **{
        "starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT"})
    # the order across keys is the topic partitions' (the row order is checked in sides/narrow.rs)
    assert _by_instant(narrow) == _by_instant(whole), f"{name}: the narrow diff published other events than the in-memory one"
    if name == "db.cow_v2":
        assert "reading the changed keys' rows only" in logs, f"{name}: no snapshot took the narrow diff:\n{logs[-3000:]}"


@pytest.mark.parametrize("name", [n for n in NAMES if n in ("db.cow_v2", "db.mor_v3", "db.eq_v2", "db.part_mor_v2", "pyice.events")])
def test_tiny_memory_budget_diffs_in_buckets(env, registry, tmp_path, name):
    """read.memory.budget of one byte: every snapshot that removes rows is diffed in key buckets on
    disk (copy-on-write rewrites, deletion vectors, equality deletes); the replay is the same and
    updates are still single `u` events."""
    testkit.RUN_LOGS.clear()
    replay, _, _ = ik.replay_revealed(env, registry, name, tmp_path, **{
        "starting-strategy": "INCREMENTAL_FROM_EARLIEST_SNAPSHOT", "read.memory.budget": "1",
        "read.spill.dir": str(tmp_path / "spill")})
    assert "diffing in key buckets" in "\n".join(testkit.RUN_LOGS), "the bucketed diff did not run"
    assert not any(p.is_file() for p in (tmp_path / "spill").rglob("*")), "spill files left behind"
