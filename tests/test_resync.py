"""Healing history gaps (issue 60): a connector stopped across a gap longer than the table's
retention (Delta log cleanup, Iceberg snapshot expiry and rollback, Hudi cleaner and restore, a
table dropped and re-created) restarts and converges from the topic's own state: the replay by key
equals the table at the current commit and at every commit after it, keyed and keyless, with
`history.gap=fail` still stopping, and an untrusted topic refused. Killed at random moments during
resyncs, it loses and duplicates nothing."""

import json
import os
import random
import shutil
import subprocess
import signal
import time
import uuid

import pytest

import deltakit as dk
import testkit
from testkit import consume_all, new_records, run_once


def seed():
    s = int(os.environ.get("RESYNC_SEED", int(time.time() * 1000) % 100000))
    print("resync seed", s)
    return s


def resync_events(records, registry):
    """The resync events among consumed records: (op, key)."""
    out = []
    for _, _, k, v in records:
        if v is None:
            continue
        ev = registry.decode(v)
        if ev["source"]["snapshot"] == "resync":
            out.append((ev["op"], json.dumps(registry.decode(k), sort_keys=True, default=str) if k else None))
    return out


def delta_gap(tmp_path, seed_, partitioned=True, versions=12):
    """A Delta history with a checkpoint every 4 versions, revealed to version 1."""
    src = tmp_path / "written"
    ops = dk.write_history(src, seed_, cdf=False, partitioned=partitioned, versions=versions, checkpoint_every=4)
    return src, ops, dk.oracle(src), dk.RevealedDelta(src, tmp_path / "table")


@pytest.mark.parametrize("keyed,tasks", [(True, 1), (False, 1), (True, 2)], ids=["keyed", "keyless", "keyed-2-tasks"])
def test_delta_log_cleanup_is_resynced_then_followed_commit_by_commit(env, registry, tmp_path, keyed, tasks):
    """Two tasks: each resyncs the keys it owns (the topic's and the table's alike)."""
    s = seed()
    src, ops, orc, t = delta_gap(tmp_path, s)
    t.reveal(1)
    extra = {"starting-version": "0", "tasks.max": str(tasks), "tasks.ownership": "key"}
    if not keyed:
        extra["key.mode"] = "none"
    props, topic = dk.delta_props(tmp_path, env, t.table, **extra)
    run_once(props)
    seen = set()
    replay = KeyedReplay(registry) if keyed else KeylessReplay(registry)
    first = new_records(consume_all(env, topic), seen)
    replay.apply(first)
    # stopped while the table moved on and its log was cleaned past the position (checkpoint 4)
    t.reveal(6)
    t.hide_commits_before(4)
    r = run_once(props)
    assert "history gap: resyncing" in r.stderr, r.stderr[-3000:]
    got = new_records(consume_all(env, topic), seen)
    events = resync_events(got, registry)
    assert events, "the gap's net change must be published"
    replay.apply(got)
    replay.equals(orc[6], f"seed {s} resync to version 6")
    testkit.assert_verified(props, f"seed {s} after the resync")
    # then commit by commit
    for v in range(7, t.latest + 1):
        t.reveal(v)
        run_once(props)
        got = new_records(consume_all(env, topic), seen)
        assert not resync_events(got, registry), f"version {v}: no gap, no resync"
        replay.apply(got)
        replay.equals(orc[v], f"seed {s} version {v} ({ops[v]})")
    testkit.assert_verified(props, f"seed {s} at the end")


def test_history_gap_fail_stops_as_before(env, tmp_path):
    src, ops, orc, t = delta_gap(tmp_path, seed())
    t.reveal(1)
    props, topic = dk.delta_props(tmp_path, env, t.table, **{"starting-version": "0", "history.gap": "fail"})
    run_once(props)
    t.reveal(6)
    t.hide_commits_before(4)
    r = run_once(props, check=False)
    assert r.returncode == 1 and "00000000000000000002.json is gone" in r.stderr, r.stderr[-2000:]
    assert "resync" not in r.stderr.lower().replace("history.gap", ""), r.stderr[-2000:]


def test_an_untrusted_topic_is_refused_naming_it_and_the_way_out(env, tmp_path):
    """A change topic under cleanup.policy=delete may have lost events: exit 1, nothing resynced."""
    src, ops, orc, t = delta_gap(tmp_path, seed())
    t.reveal(1)
    props, topic = dk.delta_props(tmp_path, env, t.table, **{"starting-version": "0",
                                                             "topic.creation.default.cleanup.policy": "delete"})
    run_once(props)
    before = consume_all(env, topic)
    t.reveal(6)
    t.hide_commits_before(4)
    r = run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"`{topic}` cannot be resynced" in r.stderr and "cleanup.policy is delete" in r.stderr, r.stderr[-2000:]
    assert "cleanup.policy=compact" in r.stderr and "new connector name" in r.stderr, r.stderr[-2000:]
    assert len(consume_all(env, topic)) == len(before), "nothing may be published on an untrusted topic"


class KeyedReplay(testkit.Replay):
    def equals(self, want_rows, label):
        dk.compare(want_rows, self, label)


class KeylessReplay:
    """A keyless topic replayed as a multiset of row images (`after` adds one, `before` removes one)."""

    def __init__(self, registry):
        self.registry = registry
        self.rows = {}

    def apply(self, records):
        for _, _, _, v in records:
            if v is None:
                continue
            ev = self.registry.decode(v)
            for side, n in (("before", -1), ("after", 1)):
                img = ev.get(side)
                if img is not None:
                    k = canon(img)
                    self.rows[k] = self.rows.get(k, 0) + n
                    assert self.rows[k] >= 0, f"{ev['op']} removes an image the replay does not hold: {img}"

    def equals(self, want_rows, label):
        want = {}
        for r in want_rows:
            k = canon(r)
            want[k] = want.get(k, 0) + 1
        got = {k: n for k, n in self.rows.items() if n}
        assert got == want, f"{label}: {len(set(got) ^ set(want))} images differ"


def canon(row):
    return json.dumps({k: testkit.norm(v) for k, v in row.items() if v is not None and k not in dk.LINEAGE},
                      sort_keys=True, default=str)


def pyiceberg_connector(env, tmp_path):
    """A pyiceberg table in a SQL catalog and a connector on it (keyed by its identifier field):
    (pyiceberg test module, seed, rng, catalog, table, props, topic, columns)."""
    pytest.importorskip("pyiceberg")
    import test_iceberg_pyiceberg as pi
    import icebergkit as ik
    s = seed()
    db, cat, tbl = pi.make_table(tmp_path)
    props, topic = ik.iceberg_props(tmp_path, env, None, **{
        "catalog.type": "sql", "catalog.uri": f"sqlite:///{db}", "table.identifier": "shop.orders"})
    props.write_text(props.read_text().replace("key.fields=id\n", ""))
    return pi, s, random.Random(s), cat, tbl, props, topic, {"id", "cat", "amount", "ts", "day", "note"}


def test_iceberg_rollback_and_expiry_are_resynced(env, registry, tmp_path):
    """pyiceberg writes; the connector follows. `rollback_to_snapshot` rewinds past its position,
    later the snapshots after its position expire while it is stopped: each time it converges to
    the current snapshot, then follows commit by commit — equal to pyiceberg's scan at every step."""
    pi, s, rng, cat, tbl, props, topic, columns = pyiceberg_connector(env, tmp_path)
    replay, seen = testkit.Replay(registry), set()

    def step(label, expect_resync=False):
        r = run_once(props)
        got = new_records(consume_all(env, topic), seen)
        resynced = resync_events(got, registry)
        assert bool(resynced) == expect_resync or (expect_resync and "resync finished" in r.stderr), \
            f"seed {s} {label}: resync events {resynced[:5]}\n{r.stderr[-2000:]}"
        if expect_resync:
            assert "history gap: resyncing" in r.stderr, r.stderr[-3000:]
        assert "before image left null" not in r.stderr, r.stderr[-3000:]
        replay.apply(got)
        pi.compare_now(tbl, replay, columns, f"seed {s} {label}")

    commits = pi.history(tbl, rng, 30)
    for _ in range(3):
        next(commits)
        step("first commits")
    rewind_to = tbl.metadata.current_snapshot_id
    for _ in range(3):
        next(commits)
        step("before the rollback")
    tbl.manage_snapshots().rollback_to_snapshot(rewind_to).commit()
    tbl.refresh()
    step("rolled back", expect_resync=True)
    for _ in range(2):
        next(commits)
        step("after the rollback")
    # stopped while 4 commits land and every snapshot but the current one expires
    for _ in range(4):
        next(commits)
    tbl.refresh()
    keep = tbl.metadata.current_snapshot_id
    tbl.maintenance.expire_snapshots().by_ids([x.snapshot_id for x in tbl.snapshots() if x.snapshot_id != keep]).commit()
    tbl.refresh()
    step("expired", expect_resync=True)
    for _ in range(2):
        next(commits)
        step("after the expiry")
    testkit.assert_verified(props, f"seed {s}")


@pytest.mark.parametrize("name,cdc_log", [
    ("hudi-cow-cleaning", "auto"), ("hudi-cow-cleaning", "false"),
    ("hudi-mor-cleaning", "auto"), ("hudi-mor-cleaning", "false"), ("hudi-mor-cleaning-no-cdc", "auto"),
], ids=["cow-keep1-cdc-log", "cow-keep1-slices-diffed", "mor-keep3-cdc-log", "mor-keep3-slices-diffed",
        "mor-keep2-no-cdc"])
def test_hudi_connector_behind_the_cleaner_converges(env, registry, tmp_path, name, cdc_log):
    """Spark-written Hudi behind its cleaner (COW keeping 1 commit; MOR with compaction keeping 3,
    and a MOR table without CDC keeping 2): the connector reads the first writes, is stopped while
    the table moves on and the cleaner deletes the slices its next instants need, restarts and
    converges to Spark's read of the table, then follows write by write. With the CDC log files
    read, and with slices diffed (as a table without CDC is read)."""
    import sparkkit
    from test_spark_hudi import CLEANING, CLEANING_NO_CDC, mirror
    scenario = next(s for s in CLEANING + [CLEANING_NO_CDC] if s["name"] == name)
    cached, oracle = sparkkit.written_or_skip([scenario])[scenario["name"]]
    states, table = cached.parent / "states", tmp_path / "table"
    kind = scenario["type"]
    topic = f"gap-{kind}-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env,
                                    **{"read.cdc.from-log": cdc_log})
    replay, seen = testkit.Replay(registry), set()
    sts = oracle["states"]
    gap_at = len(sts) - 4
    resynced = 0
    for i, st in enumerate(sts):
        if 1 < i < gap_at:
            continue  # stopped: the cleaner removes what these writes' instants were read from
        mirror(states / st["dir"], table)
        r = run_once(props)
        got = new_records(consume_all(env, topic), seen)
        events = resync_events(got, registry)
        if i == gap_at:
            assert "history gap: resyncing" in r.stderr and events, r.stderr[-3000:]
            # the key carries the partition path and the gap's commit metadata is still on the
            # timeline: both sides restricted to the partitions it wrote
            assert "the gap wrote" in r.stderr, r.stderr[-3000:]
            resynced = len(events)
        else:
            assert not events, f"write {st['dir']}: no gap, yet a resync"
        replay.apply(got)
        testkit.compare(oracle, st["rows"], replay, f"{scenario['name']} after write {st['dir']} ({st['last']})")
    assert resynced, "the gap was never met"
    testkit.assert_verified(props, scenario["name"])


def kill_table_round(path, rng, n, version_base, keyless):
    """Three versions that change most rows (updates, deletes, inserts), a checkpoint, and the log
    before it cleaned: the connector's next commit is gone."""
    import deltalake
    import pyarrow as pa
    for _ in range(3):
        t = deltalake.DeltaTable(str(path))
        rows = t.to_pyarrow_table().to_pylist()
        keep = [r for r in rows if rng.random() > 0.1]
        for r in keep:
            if rng.random() < 0.6:
                r["v"] = rng.randrange(10**9)
                r["s"] = rng.choice(["x", "y", "z"]) * rng.randrange(1, 20)
        top = max((r["id"] for r in rows), default=0)
        keep += [{"id": top + 1 + k, "part": f"p{k % 4}", "v": rng.randrange(10**9), "s": "new"} for k in range(n // 10)]
        arrow = t.to_pyarrow_table().schema
        deltalake.write_deltalake(str(path), pa.Table.from_pylist(keep, schema=arrow), mode="overwrite")
    t = deltalake.DeltaTable(str(path))
    t.create_checkpoint()
    for f in (path / "_delta_log").glob("*.json"):
        if int(f.name[:20]) < t.version():
            f.unlink()
    return t.version()


@pytest.mark.parametrize("keyless", [False, True], ids=["keyed", "keyless"])
def test_kill9_during_resyncs_loses_and_duplicates_nothing(env, registry, tmp_path, keyless):
    """Seven gaps (keyless: two), each resynced across three kill -9s at random moments of the resync (small
    transactions, so most land between commits of it: 27 in all): after each the connector finishes it, and
    the replay equals the table (no key lost, none duplicated: the strict replay refuses a second
    event of a key at one commit, a `c` of a live key, a `u`/`d` of a dead one) and `verify` is equal."""
    import deltalake
    import pyarrow as pa
    s = seed()
    rng = random.Random(s)
    n = 3000
    path = tmp_path / "table"
    first = [{"id": i, "part": f"p{i % 4}", "v": rng.randrange(10**9), "s": "a"} for i in range(n)]
    deltalake.write_deltalake(str(path), pa.Table.from_pylist(first), partition_by=["part"])
    extra = {"starting-version": "0", "transaction.max.records": "50"}
    if keyless:
        extra["key.mode"] = "none"
    props, topic = dk.delta_props(tmp_path, env, path, **extra)
    run_once(props)
    replay = KeylessReplay(registry) if keyless else dk.StrictReplay(registry)
    seen = set()
    replay.apply(new_records(consume_all(env, topic), seen))
    landed, between = 0, 0
    rounds = 2 if keyless else 7
    for round_ in range(rounds):
        version = kill_table_round(path, rng, n, round_, keyless)
        for k in range(3):
            proc = testkit.start(props)
            log = testkit.LogTail(proc)
            if not log.wait("resync: reading the topic and the table", timeout=60):
                proc.kill()
                raise AssertionError(f"round {round_}: no resync began\n{log.text()[-3000:]}")
            # a resync an earlier kill left with committed transactions resumes from them
            begun = next(l for l in log.lines if l and "resync: reading the topic" in l)
            between += k > 0 and "committed_events=0" not in begun
            # killed while it publishes (transactions of 50 events), or before
            log.wait("resync: both sides read", timeout=60)
            time.sleep(rng.uniform(0.0, 0.4))
            done = log.count("resync finished") > 0
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            landed += not done
        r = run_once(props)
        replay.apply(new_records(consume_all(env, topic), seen))
        want = deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist()
        if keyless:
            replay.equals(want, f"seed {s} round {round_} (version {version})")
        else:
            dk.compare(want, replay, f"seed {s} round {round_} (version {version})")
        testkit.assert_verified(props, f"seed {s} round {round_}")
    print("kills during a resync:", landed, "resumed with committed transactions:", between)
    assert landed >= rounds * 3 - 2, f"only {landed} of {rounds * 3} kills landed before their resync finished"
    assert between >= rounds, f"only {between} kills landed between the transactions of a resync"


def test_iceberg_fixture_with_expired_snapshots_converges(env, registry, tmp_path):
    """Spark-written compact_v2: the connector's position is its second snapshot, whose successors
    expire while it is stopped (its early manifests are gone: it starts at the second, exclusive): it
    converges to the current snapshot (Spark's oracle of it)."""
    import icebergkit as ik
    testkit.require_fixtures()
    t = ik.RevealedIceberg("db.compact_v2", tmp_path / "tables")
    oracle = ik.load_oracle("db.compact_v2")
    snaps = {x["snapshot_id"]: x for x in oracle["snapshots"]}
    versions = [i for i in range(len(t.versions)) if t.current(i) is not None]
    props, topic = ik.iceberg_props(tmp_path, env, t.table,
                                    **{"starting-strategy": "INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE"})
    t.reveal(versions[1])
    run_once(props)
    last = len(t.versions) - 1
    t.reveal(last)
    r = run_once(props)
    assert "history gap: resyncing" in r.stderr, r.stderr[-3000:]
    replay = testkit.Replay(registry)
    records = consume_all(env, topic)
    replay.apply(records)
    assert resync_events(records, registry), "the expiry's net change must be published"
    columns = ik.stable_columns(ik.WAREHOUSE / "db/compact_v2")
    ik.check_step(oracle, snaps, t.current(last), replay, columns, "compact_v2 after the expiry")
    testkit.assert_verified(props, "compact_v2")


def test_delta_table_dropped_and_recreated_converges(env, registry, tmp_path):
    """The table is dropped and re-created under the same path while the connector is stopped:
    with fewer versions than its position (the log is behind it), then with more (its id changed).
    Each time it converges to the new table (deleting keys it lacks), then follows it."""
    import deltalake
    import pyarrow as pa
    s = seed()
    rng = random.Random(s)
    path = tmp_path / "table"

    def write(ids, mode="append"):
        rows = [{"id": i, "part": f"p{i % 3}", "v": rng.randrange(10**6)} for i in ids]
        deltalake.write_deltalake(str(path), pa.Table.from_pylist(rows), mode=mode,
                                  partition_by=["part"] if mode == "create" or not path.exists() else None)

    write(range(0, 200))
    for k in range(6):
        write(range(200 + 10 * k, 210 + 10 * k))
    props, topic = dk.delta_props(tmp_path, env, path, **{"starting-version": "0"})
    run_once(props)
    replay, seen = dk.StrictReplay(registry), set()
    replay.apply(new_records(consume_all(env, topic), seen))
    for label, versions in (("fewer versions", 2), ("more versions", 12)):
        shutil.rmtree(path)
        write(range(100, 300))
        for k in range(versions - 1):
            write(range(300 + 5 * k, 305 + 5 * k))
        r = run_once(props)
        assert "history gap: resyncing" in r.stderr, r.stderr[-3000:]
        got = new_records(consume_all(env, topic), seen)
        ops = {op for op, _ in resync_events(got, registry)}
        assert ops == {"c", "u", "d"}, ops
        # a re-created table numbers its versions anew: (key, version) pairs start over
        replay.seen.clear()
        replay.keyed.clear()
        replay.apply(got)
        want = deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist()
        dk.compare(want, replay, f"seed {s} re-created with {label}")
        write(range(900, 905))
        run_once(props)
        replay.apply(new_records(consume_all(env, topic), seen))
        dk.compare(deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist(), replay, f"after re-creation ({label})")
    testkit.assert_verified(props, f"seed {s}")


def test_a_table_emptied_across_the_gap_deletes_every_key(env, registry, tmp_path):
    """Every row deleted while the connector is stopped, and the log cleaned past its position:
    the resync reads no row, takes the schema from the table's metadata, and deletes every key
    (it used to refuse, exit 1: stuck); then rows come back and it follows."""
    import deltalake
    import pyarrow as pa
    path = tmp_path / "table"

    def write(ids):
        rows = [{"id": i, "part": f"p{i % 3}", "v": i * 7} for i in ids]
        deltalake.write_deltalake(str(path), pa.Table.from_pylist(rows), mode="append",
                                  partition_by=None if path.exists() else ["part"])

    write(range(0, 50))
    write(range(50, 80))
    props, topic = dk.delta_props(tmp_path, env, path, **{"starting-version": "0"})
    run_once(props)
    replay, seen = dk.StrictReplay(registry), set()
    replay.apply(new_records(consume_all(env, topic), seen))
    t = deltalake.DeltaTable(str(path))
    t.delete("id < 40")
    deltalake.DeltaTable(str(path)).delete()
    t = deltalake.DeltaTable(str(path))
    t.create_checkpoint()
    for f in (path / "_delta_log").glob("*.json"):
        if int(f.name[:20]) < t.version():
            f.unlink()
    r = run_once(props)
    assert "history gap: resyncing" in r.stderr and "every key of its share of the topic is deleted" in r.stderr, \
        r.stderr[-3000:]
    got = new_records(consume_all(env, topic), seen)
    assert {op for op, _ in resync_events(got, registry)} == {"d"}
    replay.apply(got)
    dk.compare([], replay, "emptied")
    testkit.assert_verified(props, "emptied")
    write(range(30, 35))
    run_once(props)
    replay.apply(new_records(consume_all(env, topic), seen))
    dk.compare(deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist(), replay, "refilled")


def test_iceberg_table_dropped_and_recreated_converges(env, registry, tmp_path):
    """The catalog's table is dropped and created again under the same identifier while the
    connector is stopped (a new table uuid, new snapshots, the same keys with other rows): it
    converges to the new table (deleting keys it lacks), then follows it commit by commit."""
    pi, s, rng, cat, tbl, props, topic, columns = pyiceberg_connector(env, tmp_path)
    replay, seen = testkit.Replay(registry), set()
    commits = pi.history(tbl, rng, 30)
    for _ in range(5):
        next(commits)
    run_once(props)
    replay.apply(new_records(consume_all(env, topic), seen))
    pi.compare_now(tbl, replay, columns, f"seed {s} before the drop")
    spec = tbl.spec()
    cat.drop_table("shop.orders")
    tbl = cat.create_table("shop.orders", schema=pi.table_schema(), partition_spec=spec)
    commits = pi.history(tbl, rng, 30)
    for _ in range(3):
        next(commits)
    r = run_once(props)
    assert "history gap: resyncing" in r.stderr, r.stderr[-3000:]
    got = new_records(consume_all(env, topic), seen)
    assert resync_events(got, registry), "no resync events"
    replay.apply(got)
    pi.compare_now(tbl, replay, columns, f"seed {s} re-created")
    for _ in range(2):
        next(commits)
        run_once(props)
        replay.apply(new_records(consume_all(env, topic), seen))
        pi.compare_now(tbl, replay, columns, f"seed {s} after the re-creation")
    testkit.assert_verified(props, f"seed {s}")


def test_hudi_restore_is_resynced(env, registry, tmp_path):
    """Spark-written merge-on-read table: a savepoint of write 2, more writes, then Hudi's
    `rollback_to_savepoint` (a restore) rewinds the table to it. A connector past the savepoint
    (its position rolled back) and one before it (the restore among its next instants) each
    converge to the restored table, then follow write by write: Spark's read after every write."""
    import sparkkit
    from test_spark_hudi import RESTORE, mirror
    cached, oracle = sparkkit.written_or_skip([RESTORE])[RESTORE["name"]]
    states, sts = cached.parent / "states", oracle["states"]
    restored = RESTORE["restore"][1]
    for label, follows in (("past the savepoint", range(0, restored)), ("before the savepoint", range(0, 2))):
        table = tmp_path / label.replace(" ", "-")
        topic = "restore-" + uuid.uuid4().hex[:6]
        props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
        replay, seen = testkit.Replay(registry), set()
        for i, st in enumerate(sts):
            if i not in follows and i < restored:
                continue
            mirror(states / st["dir"], table)
            r = run_once(props)
            got = new_records(consume_all(env, topic), seen)
            events = resync_events(got, registry)
            assert bool(events) == (i == restored), f"{label}, write {i}: resync events {events[:3]}\n{r.stderr[-2000:]}"
            if i == restored:
                # a restore may have undone emitted writes: every partition is read
                assert "partitions=all" in r.stderr, r.stderr[-3000:]
            replay.apply(got)
            testkit.compare(oracle, st["rows"], replay, f"{label}: after write {i}")
        assert any(f.name.endswith(".restore") for f in (table / ".hoodie").rglob("*")), "no restore on the timeline"
        testkit.assert_verified(props, label)


def test_verify_repair_publishes_exactly_what_makes_the_topic_equal(env, registry, tmp_path):
    """A topic tampered five ways (an update dropped, a create dropped, a value altered, an extra
    tombstone, a create duplicated): `verify --repair` says DIFFERENT, publishes the changes that
    make it equal to the table at the position (marked resync), says EQUAL (exit 0); the
    connector then goes on from its unchanged position."""
    import io
    import struct
    import fastavro
    from test_verify import copy_topic, events, last_event_of_each_key, stream_generated
    props, _, records = stream_generated(env, tmp_path, "rep-")
    evs = events(registry, records)
    last = last_event_of_each_key(evs)
    updated = [e for e in last if e[2] and e[2]["op"] == "u"]
    created = [e for e in last if e[2] and e[2]["op"] == "c"]
    drop = {updated[0][0], created[0][0]}
    i, _, value = created[1]
    raw = records[i][3]
    value["after"]["v1"] = (value["after"]["v1"] or 0) + 1
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, registry.schema(struct.unpack(">I", raw[1:5])[0]), value)
    tampered = []
    for j, rec in enumerate(records):
        if j in drop:
            continue
        tampered.append((*rec[:3], raw[:5] + buf.getvalue()) if j == i else rec)
        if j == created[2][0]:
            tampered.append((rec[0], rec[1], rec[2], None))  # an extra tombstone
        if j == created[3][0]:
            tampered.append(rec)  # a duplicated create
    copy = copy_topic(env, tampered, props, tmp_path)
    r = subprocess.run([str(testkit.BIN), "verify", "--repair", "--json", str(copy)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    before, after = json.loads(r.stdout)
    # the duplicated create stays in the log (harmless to a replay by key): all else is equal now
    a = after["total"]
    assert (a["missing"], a["extra"], a["differing"], a["duplicated_events"]) == (0, 0, 0, 1), a
    assert "1 events published twice stay" in r.stderr, r.stderr[-2000:]
    t = before["total"]
    assert (t["missing"], t["differing"]) == (2, 2), t  # the dropped create and the tombstoned key; update, alter
    copied = copy.read_text().split("topic=")[1].split("\n")[0]
    repaired = consume_all(env, copied)[len(tampered):]
    assert {registry.decode(v)["source"]["snapshot"] for _, _, _, v in repaired if v} == {"resync"}
    assert len([v for *_, v in repaired if v]) == 4, "exactly one event a differing key"
    # the position is unchanged: the connector goes on, equal
    run_once(copy)
    code, report, err = testkit.verify(copy)
    assert sum(report["total"][k] for k in ("missing", "extra", "differing")) == 0, report["total"]
    # tasks.max > 1 is refused
    many = tmp_path / "many.properties"
    many.write_text(copy.read_text() + "tasks.max=2\n")
    r = subprocess.run([str(testkit.BIN), "verify", "--repair", str(many)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "tasks.max=2" in r.stderr, r.stderr[-2000:]


def test_a_keyless_topic_whose_head_was_deleted_is_refused(env, tmp_path):
    """A keyless table's topic (null keys: not compacted) is trusted only while nothing was
    deleted from its head: after DeleteRecords, a gap stops with exit 1 naming the partition."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    src, ops, orc, t = delta_gap(tmp_path, seed())
    t.reveal(1)
    props, topic = dk.delta_props(tmp_path, env, t.table, **{"starting-version": "0", "key.mode": "none"})
    run_once(props)
    admin = AdminClient({"bootstrap.servers": env.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 1)]).values():
        f.result(timeout=30)
    before = consume_all(env, topic)
    t.reveal(6)
    t.hide_commits_before(4)
    r = run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"`{topic}` cannot be resynced" in r.stderr and "partition 0 starts at offset 1" in r.stderr, r.stderr[-2000:]
    assert len(consume_all(env, topic)) == len(before), "nothing may be published on an untrusted topic"
