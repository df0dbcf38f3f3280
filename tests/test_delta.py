"""Delta Lake tables written by delta-rs during the test (CDF on and off, partitioned and not,
with checkpoints), revealed one version at a time: the topic replayed by key equals the table at
every version, from a snapshot and from the earliest changes, with no (key, version, op) twice."""

import collections
import json
import random
import signal
import subprocess
import time
import uuid

import deltalake
import pyarrow as pa
import pytest

import deltakit as dk
import testkit


def seed():
    s = int(time.time() * 1000) % 100000
    print("delta seed", s)
    return s


@pytest.mark.parametrize("cdf", [True, False], ids=["cdf", "no-cdf"])
@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_history_replays_to_every_version_from_a_snapshot(env, registry, tmp_path, cdf, partitioned):
    replay, ops, _, _ = dk.replay_revealed(env, registry, tmp_path, seed(), cdf=cdf, partitioned=partitioned)
    assert {e["op"] for e in replay.events} >= {"r", "c"}, ops


@pytest.mark.parametrize("cdf", [True, False], ids=["cdf", "no-cdf"])
@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_history_replays_to_every_version_as_changes_from_version_0(env, registry, tmp_path, cdf, partitioned):
    replay, ops, _, _ = dk.replay_revealed(env, registry, tmp_path, seed(), start="0", cdf=cdf, partitioned=partitioned)
    got = {e["op"] for e in replay.events}
    assert "r" not in got and {"c", "u", "d"} <= got, (got, ops)


def test_two_tasks_divide_the_table_and_replay_to_every_version(env, registry, tmp_path):
    replay, ops, props, topic = dk.replay_revealed(
        env, registry, tmp_path, seed(), **{"tasks.max": "2", "topic.creation.default.partitions": "2"})
    keys = testkit.offsets_records(env, props.stem)
    assert {json.loads(k)[1]["task"] for k, _ in keys} == {0, 1}, keys


def test_kill_9_at_20_random_moments_loses_and_duplicates_nothing(env, registry, tmp_path):
    """The history revealed while the connector runs with tiny transactions (kills land inside
    versions and mid-split); 20 kill -9s, then the topic equals the last version and verify
    agrees."""
    s = seed()
    rng = random.Random(s)
    src = tmp_path / "written"
    ops = dk.write_history(src, s, versions=16, rows=600)
    orc = dk.oracle(src)
    t = dk.RevealedDelta(src, tmp_path / "table")
    props, topic = dk.delta_props(tmp_path, env, t.table, **{"transaction.max.records": "3", "monitor-interval": "50ms"})
    step = 0
    t.reveal(step)
    for _ in range(20):
        proc = testkit.start(props)
        testkit.wait_for_log(proc, "resuming from stored offsets")
        time.sleep(rng.uniform(0.02, 0.4))
        if step < t.latest and rng.random() < 0.6:
            step += 1
            t.reveal(step)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    t.reveal(t.latest)
    testkit.run_once(props)
    replay = dk.StrictReplay(registry)  # asserts no (key, version, op) twice
    replay.apply(testkit.consume_all(env, topic))
    dk.compare(orc[t.latest], replay, f"seed {s} after 20 kills ({ops})")
    testkit.assert_verified(props, f"seed {s}")


def test_unsupported_reader_feature_fails_naming_it(env, tmp_path):
    src = tmp_path / "written"
    dk.write_history(src, 1, versions=2)
    log = src / "_delta_log"
    nxt = max(int(f.name[:20]) for f in log.glob("*.json")) + 1
    (log / f"{nxt:020}.json").write_text(json.dumps({"protocol": {
        "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["variantType"], "writerFeatures": ["variantType"]}}) + "\n")
    props, _ = dk.delta_props(tmp_path, env, src)
    r = testkit.run_once(props, check=False)
    assert r.returncode != 0 and "`variantType`" in r.stderr, r.stderr[-2000:]


def test_missing_key_fields_and_unknown_key_columns_are_config_errors(env, tmp_path):
    src = tmp_path / "written"
    dk.write_history(src, 2, versions=1)
    props, _ = dk.delta_props(tmp_path, env, src)
    props.write_text("".join(l for l in props.read_text().splitlines(True) if not l.startswith("key.fields=")))
    r = testkit.run_once(props, check=False)
    assert r.returncode == 2 and "key.fields" in r.stderr, r.stderr[-2000:]
    props.write_text(props.read_text() + "key.fields=nope\n")
    r = testkit.run_once(props, check=False)
    assert r.returncode == 2 and "`nope` is not a column" in r.stderr, r.stderr[-2000:]


def test_vacuumed_files_and_cleaned_log_stop_loudly_with_the_way_out(env, tmp_path):
    src = tmp_path / "written"
    dk.write_history(src, 3, versions=8, checkpoint_every=4)
    t = dk.RevealedDelta(src, tmp_path / "table")
    t.reveal(1)
    props, _ = dk.delta_props(tmp_path, env, t.table, **{"starting-version": "0", "history.gap": "fail"})
    testkit.run_once(props)
    # log cleanup: the commits after the stored position are gone, only a checkpoint is left
    t.reveal(t.latest)
    t.hide_commits_before(4)
    r = testkit.run_once(props, check=False)
    assert r.returncode != 0 and "00000000000000000002.json is gone" in r.stderr and "starting-version=earliest" in r.stderr, \
        r.stderr[-2000:]
    # issue 60's early warning: the position's successor is gone, so no headroom is left
    assert "history headroom low" in r.stderr, r.stderr[-2000:]
    online = subprocess.run([str(testkit.BIN), "validate", "--online", str(props)], capture_output=True, text=True,
                            timeout=120)
    assert "history headroom: 0 commits" in online.stdout + online.stderr, online.stdout[-2000:]
    # VACUUM: a file the next version removes is gone
    t2 = dk.RevealedDelta(src, tmp_path / "table2")
    t2.reveal(0)
    props2, _ = dk.delta_props(tmp_path, env, t2.table, **{"history.gap": "fail"})
    testkit.run_once(props2)
    for f in t2.table.rglob("*.parquet"):
        if "_delta_log" not in str(f):
            f.unlink()
    t2.reveal(t2.latest)
    r = testkit.run_once(props2, check=False)
    assert r.returncode != 0 and "is gone (VACUUM" in r.stderr, r.stderr[-2000:]


# ---------------------------------------------------------------- deletion vectors
# delta-rs does not write deletion vectors; these commits are written here to the protocol's
# letter (a UUID-named vector file, the portable 64-bit Roaring format, CRC-32) and checked
# against rows computed independently from the data file.

Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(b: bytes) -> str:
    out = []
    for i in range(0, len(b), 4):
        n = int.from_bytes(b[i:i + 4], "big")
        out.append("".join(Z85[(n // 85 ** k) % 85] for k in range(4, -1, -1)))
    return "".join(out)


def roaring64(rows):
    """The portable 64-bit Roaring serialization of small row numbers (one array container)."""
    rows = sorted(rows)
    assert rows and rows[-1] < 65536
    body = (12346).to_bytes(4, "little") + (1).to_bytes(4, "little")
    body += (0).to_bytes(2, "little") + (len(rows) - 1).to_bytes(2, "little") + (16).to_bytes(4, "little")
    body += b"".join(r.to_bytes(2, "little") for r in rows)
    return (1).to_bytes(8, "little") + (0).to_bytes(4, "little") + body


def write_dv(table, rows):
    """A deletion vector file for `rows`; returns its descriptor."""
    import uuid as uuidlib
    import zlib
    u = uuidlib.uuid4()
    blob = (1681511377).to_bytes(4, "little") + roaring64(rows)
    data = b"\x01" + len(blob).to_bytes(4, "big") + blob + (zlib.crc32(blob) & 0xFFFFFFFF).to_bytes(4, "big")
    (table / f"deletion_vector_{u}.bin").write_bytes(data)
    return {"storageType": "u", "pathOrInlineDv": z85(u.bytes), "offset": 1, "sizeInBytes": len(blob), "cardinality": len(rows)}


def test_deletion_vectors_delete_rows_in_place(env, registry, tmp_path):
    import pyarrow.parquet as pq
    src = tmp_path / "written"
    dk.write_history(src, 7, cdf=False, partitioned=False, versions=3, checkpoint_every=0)
    orc = dk.oracle(src)
    base = max(orc)
    t = dk.RevealedDelta(src, tmp_path / "table")
    t.reveal(base)
    props, topic = dk.delta_props(tmp_path, env, t.table)
    testkit.run_once(props)
    adds = pa.table(deltalake.DeltaTable(str(t.table)).get_add_actions(flatten=True)).to_pylist()
    f = max(adds, key=lambda a: a["num_records"])
    ids = pq.read_table(t.table / f["path"]).column("id").to_pylist()
    common = {"path": f["path"], "partitionValues": {}, "size": f["size_bytes"], "dataChange": True}
    log = t.table / "_delta_log"
    replay, seen, dv = dk.StrictReplay(registry), set(), None
    want = {r["id"]: r for r in orc[base]}
    for v, gone in [(base + 1, [0, 3, 5]), (base + 2, [0, 3, 5, 7, 8]), (base + 3, None)]:
        lines = [{"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "DELETE"}}]
        if v == base + 1:
            lines.append({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                       "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}})
        lines.append({"remove": {**common, "deletionTimestamp": 1, "extendedFileMetadata": True,
                                 **({"deletionVector": dv} if dv else {})}})
        if gone is not None:
            dv = write_dv(t.table, gone)
            lines.append({"add": {**common, "modificationTime": 1, "deletionVector": dv}})
            for pos in gone:
                want.pop(ids[pos], None)
        else:
            for i in ids:
                want.pop(i, None)
        (log / f"{v:020}.json").write_text("".join(json.dumps(l) + "\n" for l in lines))
        testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        dk.compare(list(want.values()), replay, f"deletion vector version {v}")
    deletes = [e for e in replay.events if e["op"] == "d"]
    assert len(deletes) == len(ids) and {e["source"]["instant"] for e in deletes} == {str(base + i) for i in (1, 2, 3)}
    testkit.assert_verified(props, "deletion vectors")
    # a snapshot of a version with a deletion vector leaves its rows out
    props2, topic2 = dk.delta_props(tmp_path, env, t.table, **{"ending-version": str(base + 2)})
    (log / f"{base + 3:020}.json").rename(tmp_path / "hidden.json")
    testkit.run_once(props2)
    snap = dk.StrictReplay(registry)
    snap.apply(testkit.consume_all(env, topic2))
    expect = {r["id"]: r for r in orc[base] if r["id"] not in {ids[p] for p in [0, 3, 5, 7, 8]}}
    dk.compare(list(expect.values()), snap, "snapshot with a deletion vector")


def rewrite_checkpoint(log, v, kind):
    """Turn the classic checkpoint of version `v` into a multi-part one (two parts) or a v2 one
    (a JSON top-level file with its file actions in a sidecar), as Spark writes them."""
    import pyarrow.parquet as pq
    classic = log / f"{v:020}.checkpoint.parquet"
    t = pq.read_table(classic)
    classic.unlink()
    if kind == "multi-part":
        half = t.num_rows // 2
        pq.write_table(t.slice(0, half), log / f"{v:020}.checkpoint.0000000001.0000000002.parquet")
        pq.write_table(t.slice(half), log / f"{v:020}.checkpoint.0000000002.0000000002.parquet")
        return
    (log / "_sidecars").mkdir(exist_ok=True)
    adds = t.filter(pa.compute.is_valid(t.column("add"))).select(["add", "remove"])
    side = log / "_sidecars" / "00000000000000000000.sidecar-1.parquet"
    pq.write_table(adds, side)
    rest = [r for r in t.to_pylist() if r.get("protocol") or r.get("metaData")]
    lines = [{"checkpointMetadata": {"version": v}}]
    for r in rest:
        for k in ("protocol", "metaData"):
            if r.get(k):
                val = dict(r[k])
                if k == "metaData":
                    val["format"] = {"provider": "parquet", "options": {}}
                    val["configuration"] = dict(val.get("configuration") or [])
                lines.append({k: {x: y for x, y in val.items() if y is not None}})
    lines.append({"sidecar": {"path": side.name, "sizeInBytes": side.stat().st_size, "modificationTime": 1}})
    (log / f"{v:020}.checkpoint.{uuid.uuid4()}.json").write_text("".join(json.dumps(l) + "\n" for l in lines))


@pytest.mark.parametrize("kind", ["multi-part", "v2"])
def test_snapshot_from_a_multi_part_or_v2_checkpoint_then_changes(env, registry, tmp_path, kind):
    """Commits before the checkpoint removed by log cleanup: the snapshot can only come from the
    checkpoint (its parts, or its sidecar); later versions follow as changes."""
    s = seed()
    src = tmp_path / "written"
    ops = dk.write_history(src, s, versions=9, checkpoint_every=5)
    orc = dk.oracle(src)
    t = dk.RevealedDelta(src, tmp_path / "table")
    t.reveal(4)
    rewrite_checkpoint(t.table / "_delta_log", 4, kind)
    t.hide_commits_before(5)
    props, topic = dk.delta_props(tmp_path, env, t.table)
    replay, seen = dk.StrictReplay(registry), set()
    for v in range(4, t.latest + 1):
        t.reveal(v)
        testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        dk.compare(orc[v], replay, f"seed {s} {kind} version {v} ({ops[v]})")
    assert sum(e["op"] == "r" for e in replay.events) == len(orc[4])


# ---------------------------------------------------------------- column mapping
def mapped_schema(names):
    """A Delta schemaString under column mapping: (logical name, physical name, id, type)."""
    return json.dumps({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True,
         "metadata": {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": p}}
        for n, p, i, t in names]})


def mapped_file(table, name, ids, titles):
    """A data file with physical column names and field ids, as a column-mapping writer leaves it."""
    import pyarrow.parquet as pq
    schema = pa.schema([pa.field("col-a", pa.int64(), metadata={b"PARQUET:field_id": b"1"}),
                        pa.field("col-b", pa.string(), metadata={b"PARQUET:field_id": b"2"})])
    (table / "part=x").mkdir(parents=True, exist_ok=True)
    path = table / "part=x" / name
    pq.write_table(pa.table([pa.array(ids, pa.int64()), pa.array(titles)], schema=schema), path)
    return {"path": f"part=x/{name}", "partitionValues": {"col-c": "x"}, "size": path.stat().st_size,
            "modificationTime": 1, "dataChange": True}


def test_column_mapping_reads_physical_columns_and_a_rename_is_left_out_of_verify(env, registry, tmp_path):
    table = tmp_path / "mapped"
    log = table / "_delta_log"
    log.mkdir(parents=True)
    cols = [("id", "col-a", 1, "long"), ("name", "col-b", 2, "string"), ("part", "col-c", 3, "string")]
    meta = {"id": "m", "format": {"provider": "parquet", "options": {}}, "partitionColumns": ["part"],
            "configuration": {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"}}

    def commit(v, *actions):
        lines = [{"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "WRITE"}}, *actions]
        (log / f"{v:020}.json").write_text("".join(json.dumps(a) + "\n" for a in lines))

    f0 = mapped_file(table, "f0.parquet", [1, 2, 3], ["a", "b", "c"])
    commit(0, {"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}},
           {"metaData": {**meta, "schemaString": mapped_schema(cols)}}, {"add": f0})
    props, topic = dk.delta_props(tmp_path, env, table)
    testkit.run_once(props)
    replay, seen = dk.StrictReplay(registry), set()
    replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
    dk.compare([{"id": i, "name": n, "part": "x"} for i, n in [(1, "a"), (2, "b"), (3, "c")]], replay, "mapped v0")
    # rename `name` to `title` (same physical column), then rewrite f0 with id 2 changed
    renamed = [("id", "col-a", 1, "long"), ("title", "col-b", 2, "string"), ("part", "col-c", 3, "string")]
    f1 = mapped_file(table, "f1.parquet", [1, 2, 3], ["a", "B", "c"])
    commit(1, {"metaData": {**meta, "schemaString": mapped_schema(renamed)}})
    commit(2, {"remove": {"path": f0["path"], "dataChange": True, "partitionValues": {"col-c": "x"}}}, {"add": f1})
    testkit.run_once(props)
    replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
    ups = [e for e in replay.events if e["op"] == "u"]
    assert [(e["before"]["id"], e["after"]["title"]) for e in ups] == [(2, "B")], ups
    code, report, err = testkit.verify(props)
    assert code == 0 and report["equal"], (code, report, err[-2000:])
    assert {"name", "title"} <= set(report["columns_not_compared"]), report


# ---------------------------------------------------------------- start and end, keyless
def commit_ts(table, v):
    for line in (table / "_delta_log" / f"{v:020}.json").read_text().splitlines():
        a = json.loads(line)
        if "commitInfo" in a:
            return a["commitInfo"].get("inCommitTimestamp") or a["commitInfo"]["timestamp"]


def test_starting_latest_timestamp_and_ending_version(env, registry, tmp_path):
    src = tmp_path / "written"
    ops = dk.write_history(src, seed(), versions=7)
    orc = dk.oracle(src)
    t = dk.RevealedDelta(src, tmp_path / "table")
    t.reveal(3)
    # latest: nothing of version 3 or before, then every later version
    props, topic = dk.delta_props(tmp_path, env, t.table, **{"starting-version": "latest"})
    testkit.run_once(props)
    assert testkit.consume_all(env, topic) == []
    t.reveal(t.latest)
    testkit.run_once(props)
    events = [registry.decode(v) for *_, v in testkit.consume_all(env, topic) if v is not None]
    assert events and {int(e["source"]["instant"]) for e in events} <= set(range(4, t.latest + 1)), ops
    # a timestamp: from the first version committed at or after it
    ts = commit_ts(t.table, 2)
    props, topic = dk.delta_props(tmp_path, env, t.table, **{"starting-timestamp": str(ts)})
    testkit.run_once(props)
    events = [registry.decode(v) for *_, v in testkit.consume_all(env, topic) if v is not None]
    # (the first of them with a data change: an OPTIMIZE emits nothing)
    first = next(v for v in range(2, len(ops)) if ops[v] != "optimize")
    assert min(int(e["source"]["instant"]) for e in events) == first, ops
    # an end: the changes from version 0 through 2, then exit 0 with the table at version 2
    props, topic = dk.delta_props(tmp_path, env, t.table, **{"starting-version": "0", "ending-version": "2"})
    r = testkit.run_once(props)
    replay = dk.StrictReplay(registry)
    replay.apply(testkit.consume_all(env, topic))
    assert max(int(e["source"]["instant"]) for e in replay.events) <= 2
    dk.compare(orc[2], replay, "ending-version 2")


def test_keyless_table_replays_as_a_multiset(env, registry, tmp_path):
    import icebergkit as ik
    src = tmp_path / "written"
    ops = dk.write_history(src, seed(), cdf=False, partitioned=False, versions=8)
    orc = dk.oracle(src)
    t = dk.RevealedDelta(src, tmp_path / "table")
    props, topic = dk.delta_props(tmp_path, env, t.table, **{"key.mode": "none", "starting-version": "0"})
    columns = {"id", "part", "name", "amount", "day", "note"}
    replay, seen = ik.MultisetReplay(registry, columns, {}), set()
    for v in range(t.latest + 1):
        t.reveal(v)
        testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        replay.check(orc[v], columns, f"keyless version {v} ({ops[v]})")
    assert {e["op"] for e in replay.events} >= {"c", "d"}
    testkit.assert_verified(props, "keyless delta")


def test_changes_equal_delta_rs_load_cdf(env, registry, tmp_path):
    """With the change data feed on, every (version, key)'s event equals delta-rs's own
    `load_cdf` rows for it, netted (a pre/post image pair is one `u`)."""
    replay, ops, _, _ = dk.replay_revealed(env, registry, tmp_path, seed(), start="0")
    cdf = pa.table(deltalake.DeltaTable(str(tmp_path / "written")).load_cdf(starting_version=0)).to_pylist()
    types = {}
    for r in cdf:
        types.setdefault((r["_commit_version"], r["id"]), set()).add(r["_change_type"])
    net = {frozenset({"insert"}): "c", frozenset({"delete"}): "d",
           frozenset({"update_preimage", "update_postimage"}): "u", frozenset({"delete", "insert"}): "u"}
    want = {k: net[frozenset(v)] for k, v in types.items()}
    got = {(int(e["source"]["instant"]), e["after"]["id"] if e["after"] else e["before"]["id"]): e["op"] for e in replay.events}
    assert got == want, (ops, sorted(set(got.items()) ^ set(want.items()))[:10])


def test_a_diff_beyond_the_budget_reads_only_the_changed_keys_rows(env, registry, tmp_path):
    """Without a change feed, a version's remove/add diff beyond read.memory.budget keeps key and
    row hashes first, then the changed keys' rows only: the same events as the in-memory diff, and
    the replay matches every version."""
    s = seed()
    runs = []
    for label, extra in (("narrow", {"read.memory.budget": "60000"}), ("whole", {})):
        (tmp_path / label).mkdir()
        testkit.RUN_LOGS.clear()
        replay, _, _, _ = dk.replay_revealed(env, registry, tmp_path / label, s, start="0", cdf=False,
                                             **extra, **{"read.spill.dir": str(tmp_path / "spill")})
        runs.append((replay, "\n".join(testkit.RUN_LOGS)))
    (narrow, logs), (whole, _) = runs
    assert "reading the changed keys' rows only" in logs, f"seed {s}: no version took the narrow diff:\n{logs[-3000:]}"
    def by_version(replay):
        out = collections.defaultdict(list)
        for e in replay.events:
            out[str(e["source"]["instant"])].append((e["_key"], e["op"], repr(e.get("before")), repr(e.get("after"))))
        return {v: sorted(x) for v, x in out.items()}
    # the order across keys is the topic partitions' (the row order is checked in sides/narrow.rs)
    assert by_version(narrow) == by_version(whole), f"seed {s}: the narrow diff published other events"
