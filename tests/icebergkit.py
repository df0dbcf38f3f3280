"""Iceberg test kit: fixture tables revealed one metadata version at a time (a table's history as
a reader polling its catalog sees it), oracles per snapshot, and Spark's changelog view as events."""

import collections
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

import uuid

from testkit import Replay, assert_verified, fixture_path, fixtures_present, compare, connector_props, consume_all, new_records, norm, run_once

ICEBERG_ROOT = Path("/tmp/lakestream-fixtures/iceberg")
WAREHOUSE = ICEBERG_ROOT / "warehouse"


def unpack():
    script = fixture_path("iceberg", "unpack.sh")
    subprocess.run(["sh", str(script)], check=True, capture_output=True)


def table_names():
    if not fixtures_present("iceberg"):
        return []
    return sorted(json.loads(p.read_text())["table"] for p in fixture_path("iceberg", "expected").glob("*.json"))


def load_oracle(name):
    """The oracle of `namespace.table` (files are named by the table alone)."""
    return json.loads(fixture_path("iceberg", "expected", f"{name.split('.')[-1]}.json").read_text())


def version_of(path: Path):
    stem = path.name[: -len(".metadata.json")]
    return int(stem[1:]) if stem.startswith("v") else int(stem.split("-")[0])


def snapshot_oracle(oracle, snap):
    """The oracle of one snapshot in the shape testkit.compare expects."""
    return {"schema": snap["columns"], "record_key_fields": [oracle["key_column"]]}


def stable_columns(table_dir: Path):
    """Columns that keep their name and field id across every schema of the table (a column
    renamed or dropped and re-added cannot be back-filled into rows published before)."""
    md = json.loads(max((table_dir / "metadata").glob("*.metadata.json"), key=version_of).read_text())
    by_name = {}
    for s in md.get("schemas", []):
        for f in s["fields"]:
            by_name.setdefault(f["name"], set()).add(f["id"])
    by_id = {}
    for s in md.get("schemas", []):
        for f in s["fields"]:
            by_id.setdefault(f["id"], set()).add(f["name"])
    return {n for n, ids in by_name.items() if len(ids) == 1 and len(by_id[next(iter(ids))]) == 1}


class RevealedIceberg:
    """A copy of a fixture table's metadata directory holding only the metadata versions
    revealed so far (manifests and data files stay where the metadata points: in the fixture)."""

    def __init__(self, name, dest: Path):
        ns, table = name.split(".")
        self.src = WAREHOUSE / ns / table / "metadata"
        self.versions = sorted(self.src.glob("*.metadata.json"), key=version_of)
        self.hadoop = (self.src / "version-hint.text").exists()
        self.table = dest / table
        (self.table / "metadata").mkdir(parents=True)
        self.name = name

    def current(self, i):
        md = json.loads(self.versions[i].read_text())
        cur = md.get("current-snapshot-id")
        return None if cur in (None, -1) else cur

    def reveal(self, i):
        f = self.versions[i]
        shutil.copy(f, self.table / "metadata" / f.name)
        if self.hadoop:
            (self.table / "metadata" / "version-hint.text").write_text(str(version_of(f)))
        return self.table / "metadata" / f.name

    def sql_catalog(self, db: Path, metadata_file: Path):
        """A sqlite SqlCatalog (pyiceberg's schema) whose table points at `metadata_file`."""
        ns, table = self.name.split(".")
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE IF NOT EXISTS iceberg_tables (catalog_name TEXT, table_namespace TEXT, table_name TEXT,"
                    " metadata_location TEXT, previous_metadata_location TEXT, iceberg_type TEXT)")
        con.execute("DELETE FROM iceberg_tables")
        con.execute("INSERT INTO iceberg_tables VALUES ('default', ?, ?, ?, NULL, 'TABLE')", (ns, table, f"file://{metadata_file}"))
        con.commit()
        con.close()


def restrict(oracle_rows, columns):
    return [{k: v for k, v in r.items() if k in columns} for r in oracle_rows]


def check_step(oracle, snaps, current, replay, columns, label):
    snap = snaps.get(current)
    rows = [] if snap is None else restrict(snap["rows"], columns)
    sor = snapshot_oracle(oracle, snap) if snap else {"schema": [], "record_key_fields": [oracle["key_column"]]}

    class Filled:  # a column added after a row was published reads as null, as in Iceberg
        state = {k: {**{c: None for c in columns}, **v} for k, v in replay.state.items()}

    compare(sor, rows, Filled, label)


class MultisetReplay:
    """Applies the events of a keyless table (`key.mode=none`) to a multiset of rows: null keys, no
    tombstones, `c`/`r` add the after image, `d` removes one copy of the before image (which must
    be live), `u` both (a v3 table's update, paired by row lineage). Rows are compared on `columns`, a column that is null in a row counting as
    absent (a column added later reads as null in older rows, as in Iceberg)."""

    def __init__(self, registry, columns, types):
        self.registry, self.columns, self.types = registry, columns, types
        self.rows = collections.Counter()
        self.events = []

    def canon(self, row):
        return json.dumps({k: norm(v, self.types.get(k, "")) for k, v in row.items() if k in self.columns and v is not None},
                          sort_keys=True, default=str)

    def apply(self, records):
        for _, _, k, v in records:
            assert k is None, "key.mode=none: every record has a null key"
            assert v is not None, "key.mode=none: no tombstones (there is no key to delete)"
            ev = self.registry.decode(v)
            self.events.append(ev)
            assert ev["op"] in ("r", "c", "u", "d"), f"keyless: op {ev['op']}"
            if ev["op"] in ("u", "d"):
                row = self.canon(ev["before"])
                assert self.rows[row] > 0, f"delete of a row not live: {row}"
                self.rows[row] -= 1
                if not self.rows[row]:
                    del self.rows[row]
            if ev["op"] != "d":
                self.rows[self.canon(ev["after"])] += 1

    def check(self, oracle_rows, snapshot_columns, label):
        """Compare on the columns the snapshot's schema has (a dropped column is not compared)."""
        def project(row):
            r = json.loads(row)
            return json.dumps({k: v for k, v in r.items() if k in snapshot_columns}, sort_keys=True)
        want = collections.Counter(project(self.canon(r)) for r in oracle_rows)
        got = collections.Counter()
        for row, n in self.rows.items():
            got[project(row)] += n
        missing, extra = want - got, got - want
        assert not missing and not extra, \
            f"{label}: multiset differs: missing {list(missing.items())[:3]} extra {list(extra.items())[:3]}"


def replay_revealed_keyless(env, registry, name, tmp, **extra):
    """`replay_revealed` for `key.mode=none`: the replayed multiset of rows equals the oracle's
    rows at every revealed snapshot. Returns the replay."""
    oracle = load_oracle(name)
    snaps = {s["snapshot_id"]: s for s in oracle["snapshots"]}
    types = {c["name"]: c["type"] for s in oracle["snapshots"] for c in s["columns"]}
    t = RevealedIceberg(name, tmp / "tables")
    replay = MultisetReplay(registry, stable_columns(WAREHOUSE / name.replace(".", "/")), types)
    props, topic = iceberg_props(tmp, env, t.table, **{"key.mode": "none"}, **extra)
    steps, seen = 0, set()
    for i in range(len(t.versions)):
        t.reveal(i)
        cur = t.current(i)
        if cur is not None and cur not in snaps:
            continue
        run_once(props)
        replay.apply(new_records(consume_all(env, topic), seen))
        snap = snaps.get(cur, {"rows": [], "columns": []})
        replay.check(snap["rows"], {c["name"] for c in snap["columns"]}, f"{name} version {i} snapshot {cur}")
        steps += 1
    assert steps >= 2, f"{name}: only {steps} states compared"
    assert_verified(props, name)
    return replay


def no_split_updates(replay):
    """A key deleted and re-created in one snapshot must be one update, never `d` + `c`."""
    ops = {}
    for ev in replay.events:
        ops.setdefault((ev["_key"], ev["source"]["instant"]), set()).add(ev["op"])
    both = [k for k, o in ops.items() if {"c", "d"} <= o]
    assert not both, f"delete + create of one key in one snapshot instead of an update: {both[:5]}"


def iceberg_props(tmp, env, table=None, **extra):
    """Connector properties for an Iceberg table (key `id`, as every fixture table)."""
    topic = "ice-" + uuid.uuid4().hex[:10]
    base = {"connector.class": "iceberg", "key.fields": "id", "monitor-interval": "200ms"}
    base.update(extra)
    if base.get("key.mode") == "none":
        del base["key.fields"]
    return connector_props(tmp, "c-" + topic, table, topic, env, **base), topic


MERGE_HISTORY = "db.part_mor_v2"


def merge_history(tmp, env, reveal_all=False, **extra):
    """part_mor_v2 (position deletes, MERGE, partition delete, insert overwrite) with tiny
    transactions and one file per split, its first version with a snapshot revealed (or all).
    Returns (oracle, revealed table, props, topic, index of the last revealed version)."""
    oracle = load_oracle(MERGE_HISTORY)
    t = RevealedIceberg(MERGE_HISTORY, tmp / "tables")
    props, topic = iceberg_props(tmp, env, t.table, **{
        "transaction.max.records": "2", "split-size": "1", "split-file-open-cost": "1", **extra})
    step = len(t.versions) - 1 if reveal_all else next(i for i in range(len(t.versions)) if t.current(i) is not None)
    for i in range(step + 1):
        t.reveal(i)
    return oracle, t, props, topic, step


def final_replay(env, registry, oracle, t, props, topic, label):
    """Reveal what is left, run once, replay the whole topic (no (key, snapshot, op) twice, no
    update or delete of a dead key) and compare with the oracle of the last snapshot."""
    for i in range(len(t.versions)):
        t.reveal(i)
    run_once(props)
    replay = Replay(registry)
    replay.apply(consume_all(env, topic))
    snaps = {s["snapshot_id"]: s for s in oracle["snapshots"]}
    check_step(oracle, snaps, t.current(len(t.versions) - 1), replay, stable_columns(WAREHOUSE / MERGE_HISTORY.replace(".", "/")), label)
    no_split_updates(replay)
    return replay


def replay_revealed(env, registry, name, tmp, first_version=0, catalog=False, **extra):
    """Reveal every metadata version in turn, run the connector once after each, compare the
    replayed topic with the oracle at the current snapshot. Returns the replay."""
    oracle = load_oracle(name)
    snaps = {s["snapshot_id"]: s for s in oracle["snapshots"]}
    t = RevealedIceberg(name, tmp / "tables")
    columns = stable_columns(WAREHOUSE / name.replace(".", "/"))
    db = tmp / "catalog.db"
    if catalog:
        ns, table = name.split(".")
        props, topic = iceberg_props(tmp, env, None, **{"catalog.type": "sql", "catalog.uri": f"sqlite:///{db}",
                                                        "table.identifier": f"{ns}.{table}"}, **extra)
    else:
        props, topic = iceberg_props(tmp, env, t.table, **extra)
    replay, steps, seen = Replay(registry), 0, set()
    for i in range(first_version, len(t.versions)):
        f = t.reveal(i)
        if catalog:
            t.sql_catalog(db, f)
        cur = t.current(i)
        if cur is not None and cur not in snaps:
            continue  # a snapshot expired since: never a state to compare with
        run_once(props)
        replay.apply(new_records(consume_all(env, topic), seen))
        check_step(oracle, snaps, cur, replay, columns, f"{name} {f.name} snapshot {cur}")
        steps += 1
    assert steps >= 2, f"{name}: only {steps} states compared"
    no_split_updates(replay)
    assert_verified(props, name)
    return replay, oracle, topic


def spark_changelog_rows(replay, columns):
    """Our events as Spark's create_changelog_view rows: (snapshot, id, change type, data)."""
    out = []
    for ev in replay.events:
        snap = int(ev["source"]["instant"])
        pick = lambda img: {k: v for k, v in img.items() if k in columns}
        if ev["op"] in ("c", "r"):
            out.append((snap, "INSERT", pick(ev["after"])))
        elif ev["op"] == "d":
            out.append((snap, "DELETE", pick(ev["before"])))
        else:
            out.append((snap, "UPDATE_BEFORE", pick(ev["before"])))
            out.append((snap, "UPDATE_AFTER", pick(ev["after"])))
    return out
