"""Tasks dividing a table by partition (`tasks.ownership`): each of 4 tasks reads only its
partitions' files — about a quarter of the bytes one task reads (the `task stopped` log line
carries the same counts as `lakestream_source_bytes_read_total{task}`) — and the replayed topic
still equals the table at every instant, across `tasks.max` and ownership changes with kill -9
mid-unit. Hudi: a generated merge-on-read table (partition `part` is not a key field: partition
ownership is the operator's choice). Iceberg: a pyiceberg table partitioned by `bucket(8, id)`
of its identifier, divided by partition on `auto`."""

import json
import random
import re
import subprocess
import time
import uuid

import pytest

import testkit
from test_tasks import offsets_keys, run_and_kill_mid_unit

TASK_STOPPED = re.compile(r"task stopped.*?task=(\d+) rows_read=(\d+) bytes_read=(\d+)")


def bytes_by_task(stderr):
    out = {}
    for m in TASK_STOPPED.finditer(re.sub(r"\x1b\[[0-9;]*m", "", stderr)):
        out[int(m[1])] = out.get(int(m[1]), 0) + int(m[3])
    return out


def set_props(props, **kv):
    keys = {k.replace("_", ".") for k in kv}
    text = "".join(l for l in props.read_text().splitlines(True) if l.split("=", 1)[0] not in keys)
    props.write_text(text + "".join(f"{k.replace('_', '.')}={v}\n" for k, v in kv.items()))


def assert_quarters(read, whole, label):
    shares = {t: round(b / whole, 3) for t, b in sorted(read.items())}
    assert sorted(shares) == [0, 1, 2, 3], f"{label}: {shares}"
    assert all(0.1 <= s <= 0.4 for s in shares.values()), f"{label}: each task's share of one task's bytes: {shares}"
    assert 0.9 <= sum(shares.values()) <= 1.1, f"{label}: the tasks together read the table once: {shares}"
    return shares


# ---------------------------------------------------------------- Hudi

def generated_mor(tmp_path, rows, commits):
    table = tmp_path / "gen"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", "mor", "--path", str(table), "--rows", str(rows),
                        "--partitions", "8", "--commits", str(commits), "--compact-every", "3", "--update-fraction", "0.2",
                        "--delete-fraction", "0.05", "--insert-fraction", "0.05"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return table, testkit.hudi_rs_oracle(table)


def test_four_tasks_by_partition_read_a_quarter_each_hudi(env, registry, tmp_path):
    table, oracle = generated_mor(tmp_path, 4000, 5)
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    conns = {}
    for name, extra in [("part", {"tasks.max": "4", "tasks.ownership": "partition", "topic.creation.default.partitions": "4"}),
                        ("auto", {"tasks.max": "4"}), ("keyhash", {"tasks.max": "4", "key.partition-path": "false"}),
                        ("one", {})]:
        topic = f"tbp-{name}-" + uuid.uuid4().hex[:8]
        conns[name] = (testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **extra), topic,
                       testkit.Replay(registry), set(), {})
    for step, inst in enumerate(oracle["instants"]):
        revealed.reveal_through(testkit.instant_order(inst))
        for name, (props, topic, replay, seen, read) in conns.items():
            r = testkit.run_once(props)
            for t, b in bytes_by_task(r.stderr).items():
                read[t] = read.get(t, 0) + b
            if step == 0 and name == "auto":
                assert "tasks divide this table by partition" in r.stderr, "the default Kafka key carries the partition path"
            if step == 0 and name == "keyhash":
                assert "tasks divide this table by key hash" in r.stderr, "record key only: `part` is not a key field"
            replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
            testkit.compare(oracle, inst["rows"], replay, f"{name} step {step} ({inst['action']} {inst['requested']})")
    whole = conns["one"][4][0]
    shares = assert_quarters(conns["part"][4], whole, "tasks.ownership=partition")
    auto = assert_quarters(conns["auto"][4], whole, "default settings (the key carries the partition path)")
    by_key = {t: round(b / whole, 3) for t, b in conns["keyhash"][4].items()}
    assert all(s > 0.9 for s in by_key.values()), f"divided by key every task reads every file: {by_key}"
    print("bytes read per task, share of one task's:", shares, "auto:", auto, "by key:", by_key)


def test_a_connector_running_by_key_hash_keeps_its_scheme_on_auto(env, registry, tmp_path):
    """A connector whose tasks already divide the table by key hash (stored generations) keeps
    that scheme under `tasks.ownership=auto` even though a fresh one would divide by partition:
    no new generation, and the replay still equals the table."""
    table, oracle = generated_mor(tmp_path, 2000, 3)
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "keep-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{"tasks.max": "2", "tasks.ownership": "key"})
    replay, seen = testkit.Replay(registry), set()
    for step, inst in enumerate(oracle["instants"]):
        revealed.reveal_through(testkit.instant_order(inst))
        if step == 1:
            set_props(props, tasks_ownership="auto")
        r = testkit.run_once(props)
        if step >= 1:
            assert "tasks keep dividing the table by key hash" in r.stderr, r.stderr[-3000:]
            assert "previous generation's producer fenced" not in r.stderr, "no new generation"
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        testkit.compare(oracle, inst["rows"], replay, f"step {step}")
    assert len(offsets_keys(env, "c-" + topic)) == 2, "one generation of two tasks"


def test_rescaling_and_changing_ownership_with_kill_hudi(env, registry, tmp_path):
    """After a full scan by 4 tasks: 4 tasks by partition, then 2, then 3 by key, 4 by partition,
    1: each killed mid-unit twice (10-record transactions), then the rest revealed and the whole
    topic replayed."""
    seed = int(time.time())
    print("rescale seed", seed)
    rng = random.Random(seed)
    table, oracle = generated_mor(tmp_path, 800, 11)
    instants = oracle["instants"]
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "tbpk-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{
        "tasks.max": "4", "tasks.ownership": "partition", "topic.creation.default.partitions": "2",
        "read.streaming.check-interval": "50ms"})
    step = 0
    revealed.reveal_through(testkit.instant_order(instants[0]))
    testkit.run_once(props)
    set_props(props, transaction_max_records=10)

    def reveal():
        nonlocal step
        if step + 1 < len(instants):
            step += 1
            revealed.reveal_through(testkit.instant_order(instants[step]))

    for n, by in [(4, "partition"), (2, "partition"), (3, "key"), (4, "partition"), (1, "partition")]:
        set_props(props, tasks_max=n, tasks_ownership=by)
        for _ in range(2):
            run_and_kill_mid_unit(props, n, reveal, rng)
    revealed.reveal_through(testkit.instant_order(instants[-1]))
    set_props(props, tasks_max=3, tasks_ownership="partition", transaction_max_records=100000)
    testkit.run_once(props)
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    testkit.compare(oracle, instants[-1]["rows"], replay, f"seed {seed} after 4p→2p→3k→4p→1→3p")
    shapes = {(json.loads(k).get("tasks", 1), json.loads(k).get("by", "key")) for k in offsets_keys(env, "c-" + topic)}
    assert shapes >= {(4, "partition"), (2, "partition"), (3, "key"), (3, "partition"), (1, "key")}, shapes


# ---------------------------------------------------------------- Iceberg

def bucketed_table(tmp_path):
    pytest.importorskip("pyiceberg_core", reason="pyiceberg writes bucket partitions through pyiceberg-core")
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType, NestedField, StringType

    db = tmp_path / "catalog.db"
    cat = SqlCatalog("default", uri=f"sqlite:///{db}", warehouse=f"file://{tmp_path}/warehouse")
    cat.create_namespace("shop")
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "cat", StringType(), required=False),
                    NestedField(3, "n", LongType(), required=False), identifier_field_ids=[1])
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(8), name="id_bucket"))
    return db, cat.create_table("shop.orders", schema=schema, partition_spec=spec)


class Writer:
    """Random appends, upserts and deletes of tens to hundreds of rows."""

    def __init__(self, tbl, rng):
        self.tbl, self.rng, self.next_id = tbl, rng, 1

    def rows(self, ids):
        import pyarrow as pa
        return pa.Table.from_pydict({"id": ids, "cat": [self.rng.choice("abc") for _ in ids],
                                     "n": [self.rng.randint(0, 10**6) for _ in ids]}, schema=self.tbl.schema().as_arrow())

    def commit(self):
        from pyiceberg.expressions import In
        live = [r["id"] for r in self.tbl.scan(selected_fields=("id",)).to_arrow().to_pylist()]
        op = self.rng.choice(["append", "upsert", "delete"]) if live else "append"
        if op == "append":
            ids = list(range(self.next_id, self.next_id + self.rng.randint(50, 300)))
            self.next_id = ids[-1] + 1
            self.tbl.append(self.rows(ids))
        elif op == "upsert":
            ids = self.rng.sample(live, min(len(live), self.rng.randint(20, 120))) + [self.next_id]
            self.next_id += 1
            self.tbl.upsert(self.rows(ids))
        else:
            self.tbl.delete(In("id", self.rng.sample(live, min(len(live), self.rng.randint(5, 40)))))
        self.tbl.refresh()
        return op


def table_rows(tbl):
    tbl.refresh()
    return {r["id"]: r for r in tbl.scan().to_arrow().to_pylist()}


def compare_rows(tbl, replay, label):
    want = table_rows(tbl)
    got = {json.loads(k)["id"]: v for k, v in replay.state.items()}
    assert set(got) == set(want), f"{label}: missing {sorted(set(want) - set(got))[:10]}, extra {sorted(set(got) - set(want))[:10]}"
    bad = [k for k in want if {c: got[k].get(c) for c in ("cat", "n")} != {c: want[k][c] for c in ("cat", "n")}]
    assert not bad, f"{label}: values differ for {bad[:10]}"


def iceberg_conn(tmp_path, env, db, name, **extra):
    topic = f"tbpi-{name}-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, None, topic, env, **{
        "connector.class": "iceberg", "catalog.type": "sql", "catalog.uri": f"sqlite:///{db}",
        "table.identifier": "shop.orders", "monitor-interval": "50ms", **extra})
    return props, topic


def test_four_tasks_by_bucket_partition_iceberg(env, registry, tmp_path):
    seed = int(time.time())
    print("iceberg seed", seed)
    rng = random.Random(seed)
    db, tbl = bucketed_table(tmp_path)
    w = Writer(tbl, rng)
    w.commit()
    conns = {name: (*iceberg_conn(tmp_path, env, db, name, **extra), testkit.Replay(registry), set(), {})
             for name, extra in [("auto", {"tasks.max": "4", "topic.creation.default.partitions": "4"}), ("one", {})]}
    ops = []
    for step in range(10):
        for name, (props, topic, replay, seen, read) in conns.items():
            r = testkit.run_once(props)
            if step == 0 and name == "auto":
                assert "tasks divide this table by partition" in r.stderr, "bucket(8, id) is a function of the key"
            for t, b in bytes_by_task(r.stderr).items():
                read[t] = read.get(t, 0) + b
            replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
            compare_rows(tbl, replay, f"seed {seed} {name} after {ops}")
        ops.append(w.commit())
    shares = assert_quarters(conns["auto"][4], conns["one"][4][0], "bucket(8, id) on auto")
    print("bytes read per task, share of one task's:", shares)

    # rescale the divided connector with kill -9 while bigger commits are being emitted
    props, topic = conns["auto"][0], conns["auto"][1]
    set_props(props, transaction_max_records=5)
    for n in [2, 3, 1, 4]:
        set_props(props, tasks_max=n)
        for _ in range(2):
            run_and_kill_mid_unit(props, n, lambda: ops.append(w.commit()), rng)
    set_props(props, transaction_max_records=100000)
    testkit.run_once(props)
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    compare_rows(tbl, replay, f"seed {seed} after 4→2→3→1→4 tasks with kills, {ops}")
    shapes = {(json.loads(k).get("tasks", 1), json.loads(k).get("by", "key")) for k in offsets_keys(env, "c-" + topic)}
    assert shapes >= {(4, "partition"), (2, "partition"), (3, "partition")}, shapes


class Late:
    """An rng whose kill comes 1.5 s after the reveal: well inside a 1-record-transaction unit."""

    @staticmethod
    def uniform(a, b):
        return 1.5


def test_switching_an_iceberg_scheme_mid_unit_stops_with_the_way_out(env, registry, tmp_path):
    """Splits of an Iceberg unit depend on the scheme, so a unit an old task half emitted cannot
    be handed to tasks of the other scheme: the start stops naming the unit and the setting that
    finishes it; with that setting it finishes, and the switch then goes through."""
    db, tbl = bucketed_table(tmp_path)
    w = Writer(tbl, random.Random(7))
    w.commit()
    props, topic = iceberg_conn(tmp_path, env, db, "switch", **{"tasks.max": "2", "tasks.ownership": "key"})
    testkit.run_once(props)
    set_props(props, transaction_max_records=1)
    run_and_kill_mid_unit(props, 2, lambda: tbl.append(w.rows(list(range(100000, 100600)))), Late)
    set_props(props, tasks_ownership="auto")
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "half emitted" in r.stderr and "tasks.ownership=key" in r.stderr, r.stderr[-3000:]
    set_props(props, tasks_ownership="key", transaction_max_records=100000)
    testkit.run_once(props)
    set_props(props, tasks_ownership="auto")
    w.commit()
    r = testkit.run_once(props)
    assert "tasks divide this table by partition" in r.stderr
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    compare_rows(tbl, replay, "after key → (refused) → key → partition")
