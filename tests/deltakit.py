"""Delta Lake histories written by an independent writer (delta-rs, PyPI `deltalake`) during the
test, their oracle (`DeltaTable(path, version=v)` read whole at every version), and the table
revealed one version at a time as a writer in flight leaves it: every data file present, the
log only up to the version (later commits and checkpoints not yet there)."""

import datetime as dt
import json
import random
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import deltalake

from testkit import Replay, assert_verified, connector_props, consume_all, new_records, norm, run_once, same

KEY = "id"
PARTS = ["p0", "p1", "p2"]


def _rows(rng, ids, extra=False):
    out = {
        "id": pa.array(ids, pa.int64()),
        "part": pa.array([PARTS[i % len(PARTS)] for i in ids]),
        "name": pa.array([f"n{rng.randrange(10**6)}" for _ in ids]),
        "amount": pa.array([None if rng.random() < 0.1 else round(rng.uniform(0, 1000), 2) for _ in ids], pa.float64()),
        "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(365)) for _ in ids], pa.date32()),
    }
    if extra:
        out["note"] = pa.array([f"x{rng.randrange(100)}" for _ in ids])
    return pa.table(out)


def write_history(path: Path, seed: int, cdf=True, partitioned=True, versions=14, rows=300, checkpoint_every=5):
    """A random history: appends, deletes, updates, merges (upserts), a partition overwrite,
    OPTIMIZE, an added column, checkpoints. Keys stay unique (as a key-addressed table's do).
    Returns the operations written, one per version."""
    rng = random.Random(seed)
    conf = {"delta.enableChangeDataFeed": "true"} if cdf else {}
    live, next_id, extra = set(range(rows)), rows, False
    deltalake.write_deltalake(str(path), _rows(rng, sorted(live)), partition_by=["part"] if partitioned else None,
                              configuration=conf)
    ops = ["create"]
    # every kind of change at least once, the rest at random
    required = ["delete", "update", "merge", "append", "optimize"][:max(0, versions - 1)]
    kinds = ["append", "delete", "update", "merge", "merge", "overwrite", "optimize", "evolve"]
    schedule = required + [rng.choice(kinds) for _ in range(versions - 1 - len(required))]
    rng.shuffle(schedule)
    while len(ops) < versions:
        t = deltalake.DeltaTable(str(path))
        kind = schedule.pop() if schedule else "append"
        if kind == "evolve" and extra:
            kind = "append"
        if kind == "overwrite" and not partitioned:
            kind = "delete"
        if kind == "append":
            ids = list(range(next_id, next_id + rng.randrange(1, 40)))
            next_id += len(ids)
            deltalake.write_deltalake(str(path), _rows(rng, ids, extra), mode="append")
            live.update(ids)
        elif kind == "evolve":
            ids = list(range(next_id, next_id + 5))
            next_id += 5
            extra = True
            deltalake.write_deltalake(str(path), _rows(rng, ids, extra), mode="append", schema_mode="merge")
            live.update(ids)
        elif kind == "delete":
            lo = rng.choice(sorted(live))
            t.delete(f"id >= {lo} AND id < {lo + 30}")
            live -= {i for i in live if lo <= i < lo + 30}
        elif kind == "update":
            lo = rng.randrange(next_id)
            t.update({"name": f"'u{len(ops)}'", "amount": "amount + 1"}, predicate=f"id >= {lo} AND id < {lo + 25}")
        elif kind == "merge":
            upd = rng.sample(sorted(live), min(len(live), rng.randrange(1, 30)))
            new = list(range(next_id, next_id + rng.randrange(0, 20)))
            next_id += len(new)
            src = _rows(rng, sorted(upd + new), extra)
            (t.merge(src, "s.id = t.id", source_alias="s", target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
            live.update(new)
        elif kind == "overwrite":
            p = rng.choice(PARTS)
            ids = [i for i in range(next_id, next_id + 30) if PARTS[i % len(PARTS)] == p]
            next_id += 30
            keep = {i for i in live if PARTS[i % len(PARTS)] != p}
            deltalake.write_deltalake(str(path), _rows(rng, ids, extra), mode="overwrite", predicate=f"part = '{p}'")
            live = keep | set(ids)
        elif kind == "optimize":
            t.optimize.compact()
        if deltalake.DeltaTable(str(path)).version() < len(ops):
            continue  # nothing to do (an OPTIMIZE with nothing to compact): no version written
        ops.append(kind)
        if checkpoint_every and len(ops) % checkpoint_every == 0:
            deltalake.DeltaTable(str(path)).create_checkpoint()
    return ops


def oracle(path: Path):
    """Every version's rows (as plain Python values), by version."""
    latest = deltalake.DeltaTable(str(path)).version()
    return {v: deltalake.DeltaTable(str(path), version=v).to_pyarrow_table().to_pylist() for v in range(latest + 1)}


class RevealedDelta:
    """A copy of a table whose `_delta_log/` is revealed one version at a time."""

    def __init__(self, src: Path, dest: Path):
        self.src = src
        self.table = dest
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("_delta_log"))
        (dest / "_delta_log").mkdir()
        self.revealed = set()
        # the newest commit file (any writer's table, whatever features delta-rs reads)
        self.latest = max(int(f.name[:20]) for f in (src / "_delta_log").glob("*.json") if len(f.name) == 25)

    def reveal(self, v: int):
        """The log through version `v`: its commits, and checkpoints written at or before it."""
        for f in sorted((self.src / "_delta_log").iterdir()):
            head = f.name[:20]
            if f.is_file() and head.isdigit() and int(head) <= v and f.name not in self.revealed:
                self.revealed.add(f.name)  # revealed once: a later cleanup or rewrite stays
                tmp = self.table / "_delta_log" / f".{f.name}.tmp"
                shutil.copyfile(f, tmp)
                tmp.rename(self.table / "_delta_log" / f.name)  # a commit appears whole
        # a v2 checkpoint's sidecars (named by uuid) are there before the checkpoint naming them
        sidecars = self.src / "_delta_log" / "_sidecars"
        if sidecars.is_dir() and not (self.table / "_delta_log" / "_sidecars").exists():
            shutil.copytree(sidecars, self.table / "_delta_log" / "_sidecars")

    def hide_commits_before(self, v: int):
        """Log cleanup: commits before `v` gone (a checkpoint at or after them keeps the table readable)."""
        for f in (self.table / "_delta_log").iterdir():
            if len(f.name) == 25 and f.name.endswith(".json") and f.name[:20].isdigit() and int(f.name[:20]) < v:
                f.unlink()


def delta_props(tmp, env, table, **extra):
    topic = "delta-" + uuid.uuid4().hex[:10]
    base = {"connector.class": "delta", "key.fields": KEY, "monitor-interval": "200ms"}
    base.update(extra)
    if base.get("key.mode") == "none":
        del base["key.fields"]
    return connector_props(tmp, "c-" + topic, table, topic, env, **base), topic


# row tracking's lineage of each row in Spark's rows (not a column of the table)
LINEAGE = ("_row_id", "_row_commit_version")


def compare(want_rows, replay, label, renamed=None):
    """The replayed topic, by key, equals the table's rows (a column added after a row was
    published reads as null, as the table reads it; a renamed column, `renamed` = {new name: old
    name}, is found under the name the row's last event had)."""
    renamed = renamed or {}
    want = {r[KEY]: r for r in want_rows}
    got = {}
    for kt, after in replay.state.items():
        got[json.loads(kt)[KEY]] = after
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    assert not missing and not extra, f"{label}: keys missing {missing[:5]} extra {extra[:5]} ({len(want)} rows)"
    for k, w in want.items():
        for col, wv in w.items():
            if col in LINEAGE:
                continue
            gv = got[k][col] if col in got[k] else got[k].get(renamed.get(col))
            assert same(norm(gv), norm(wv)), f"{label}: id {k} column {col}: got {gv!r}, want {wv!r}"


class StrictReplay(Replay):
    """`Replay`, and a `c` never names a live key nor a `r` anything but a snapshot's row."""

    def apply(self, records):
        for rec in records:
            if rec[3] is not None:
                ev = self.registry.decode(rec[3])
                kt = json.dumps(self.registry.decode(rec[2]), sort_keys=True, default=str)
                assert ev["op"] != "c" or kt not in self.state, f"create of a live key {kt} at version {ev['source']['instant']}"
                assert ev["op"] != "r" or ev["source"]["snapshot"] in ("true", "last"), f"r outside a snapshot: {ev['source']}"
            super().apply([rec])


def replay_revealed(env, registry, tmp, seed, start=None, first=0, cdf=True, partitioned=True, location=None,
                    after_reveal=None, versions=11, **extra):
    """Write a history, reveal it one version at a time from `first`, run the connector once
    after each, replay by key and compare with the oracle at every version. `location`: the
    table.path to give (else the revealed copy); `after_reveal(dir)` runs after each reveal.
    Returns (replay, operations, props, topic)."""
    src = tmp / "written"
    ops = write_history(src, seed, cdf=cdf, partitioned=partitioned, versions=versions)
    orc = oracle(src)
    t = RevealedDelta(src, tmp / "table")
    if start is not None:
        extra["starting-version"] = start
    props, topic = delta_props(tmp, env, location or t.table, **extra)
    replay, seen = StrictReplay(registry), set()
    begin = first if start in (None, "earliest") else int(start)
    for v in range(first, t.latest + 1):
        t.reveal(v)
        if after_reveal:
            after_reveal(t.table)
        if v < begin:
            continue
        run_once(props)
        replay.apply(new_records(consume_all(env, topic), seen))
        compare(orc[v], replay, f"seed {seed} version {v} ({ops[v]})")
    assert_verified(props, f"seed {seed}")
    return replay, ops, props, topic
