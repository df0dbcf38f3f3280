"""Hudi tables written by Spark (Hudi 1.1's Spark bundle), for `sparkkit.written`: a seeded random
history of inserts, upserts and deletes, with CDC on in the scenario's supplemental logging mode,
and the oracle Spark itself gives — the table as of every completed instant (time travel) and
Spark's CDC query's events of it (`hoodie.datasource.query.incremental.format=cdc`).

A scenario: {"name", "format": "hudi", "type": "cow" | "mor", "table_version": 9 | 6,
"cdc_mode": "OP_KEY_ONLY" | "DATA_BEFORE" | "DATA_BEFORE_AFTER" | null (CDC off), "seed", "rows",
"commits", "partitions", optional "compact_every" (merge-on-read: inline compaction after that many
delta commits), "async_compaction_every" (merge-on-read: a compaction scheduled after every that many
writes and run after the next one, so a delta commit lands while it is pending), "cluster_every"
(inline clustering after that many commits), "index" ("GLOBAL_SIMPLE" |
"RECORD_INDEX": global, keys move partition), "move", "overwrite_at" (see `history`), "update",
"delete", "insert" (fractions of the live keys per commit), "clean_retained" (automatic cleaning
keeping that many commits: earlier instants cannot be time-travelled to afterwards, so the oracle
is instead the table after every write, with the directory as it was then — `states`), "restore"
([m, n]: a savepoint of the instant write m made, and after write n Hudi's `rollback_to_savepoint`
restores the table to it; the oracle is `states` too, the restored table the state of write n)}.

Merge semantics (issue 59): "merge_mode" (`hoodie.write.record.merge.mode`, table version 9),
"payload" (`hoodie.datasource.write.payload.class`), "soft_deletes" (a `_hoodie_is_deleted`
column; that share of the deletes are upserts with it set, the rest Spark's `delete`), "late" (that
share of the updates and deletes carry a `ts` below the key's stored one: under event-time
ordering they must lose), "ties" (that share carry the stored `ts` itself), "twice" (that share of
an upsert's keys are written twice in the batch, an update and a soft delete), "dms" (an `Op`
column, `D` marking the soft deletes, for `AWSDmsAvroPayload`), "ordering" (the ordering fields,
`ts` unless named), "partial" (that share of the rows written leave `v`, `name` or `price` null:
the partial-update payloads and modes fill them from the other record, a late one included), "debezium" (`postgres`: an
`_event_lsn` column carrying `ts`; `mysql`: `_event_bin_file` and `_event_pos` carrying it;
`mysql6`: `_event_seq` = `<(ts - 950) // 10>.<ts>`; all with `_change_operation_type`, `d`
marking the soft deletes), "toast" (that share of the updates
carry Debezium's `__debezium_unavailable_value` as `name`). Off, the writes are those of the
scenarios before them."""

import os
import random
import shutil

import json
from pathlib import Path

# written alongside the data; the oracle leaves the layout columns out, as the fixtures' do
LAYOUT = ("_hoodie_commit_seqno", "_hoodie_file_name")
DATA_ACTIONS = ("commit", "deltacommit", "replacecommit")


def options(s):
    o = {
        "hoodie.table.name": s["name"].replace("-", "_"),
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "part",
        "hoodie.datasource.write.precombine.field": s.get("ordering", "ts"),
        "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.datasource.write.table.type": {"cow": "COPY_ON_WRITE", "mor": "MERGE_ON_READ"}[s["type"]],
        "hoodie.write.table.version": str(s.get("table_version", 9)),
        # keep every slice (the connector's diff path reads the previous one), unless the
        # scenario cleans
        "hoodie.clean.automatic": "true" if s.get("clean_retained") else "false",
        "hoodie.upsert.shuffle.parallelism": "2",
        "hoodie.insert.shuffle.parallelism": "2",
        "hoodie.delete.shuffle.parallelism": "2",
    }
    if s.get("clean_retained"):
        o["hoodie.cleaner.policy"] = "KEEP_LATEST_COMMITS"
        o["hoodie.cleaner.commits.retained"] = str(s["clean_retained"])
    if s.get("ordering"):
        o["hoodie.table.ordering.fields"] = s["ordering"]
    if s.get("merge_mode"):
        o["hoodie.write.record.merge.mode"] = s["merge_mode"]
    if s.get("payload"):
        o["hoodie.datasource.write.payload.class"] = s["payload"]
    if s.get("cdc_mode"):
        o["hoodie.table.cdc.enabled"] = "true"
        o["hoodie.table.cdc.supplemental.logging.mode"] = s["cdc_mode"]
    if s.get("index") == "GLOBAL_SIMPLE":
        o["hoodie.index.type"] = "GLOBAL_SIMPLE"
        o["hoodie.simple.index.update.partition.path"] = "true"
    if s.get("index") == "RECORD_INDEX":
        o["hoodie.index.type"] = "RECORD_INDEX"
        o["hoodie.metadata.record.index.enable"] = "true"
        o["hoodie.record.index.update.partition.path"] = "true"
    if s.get("cluster_every"):
        o["hoodie.clustering.inline"] = "true"
        o["hoodie.clustering.inline.max.commits"] = str(s["cluster_every"])
    if s["type"] == "mor" and s.get("compact_every"):
        o["hoodie.compact.inline"] = "true"
        o["hoodie.compact.inline.max.delta.commits"] = str(s["compact_every"])
    return o


def history(s, rng):
    """The scenario's writes: [(operation, rows)], rows as (id, part, ts, v, name, price), with
    `_hoodie_is_deleted` last where the scenario has soft deletes. Every fourth commit deletes;
    with "overwrite_at" that commit overwrites partition p0 (some of its keys rewritten, the rest
    gone, new ones added); with a global index ("index") a share of the updates ("move") moves its
    key to another partition. "late", "ties" and "twice" (see the module doc) draw from their own
    generator, so a scenario without them writes what it always did."""
    live, next_id, ts = {}, 0, 1000
    writes = []
    soft = s.get("soft_deletes")
    odd = random.Random(rng.random()) if any(s.get(k) for k in ("late", "ties", "twice")) else None
    holes = random.Random(rng.random()) if any(s.get(k) for k in ("partial", "toast")) else None

    def stamp(i):
        """`ts` for a write of key i: the commit's, or (late, ties) below or at the stored one."""
        if odd is None or i not in live:
            return ts
        x = odd.random()
        if x < s.get("late", 0):
            return live[i][2] - odd.randrange(1, 10)
        if x < s.get("late", 0) + s.get("ties", 0):
            return live[i][2]
        return ts

    def row(i, gen, part=None, at=None, deleted=False):
        part = part or (live[i][1] if i in live else f"p{rng.randrange(s['partitions'])}")
        r = (f"k{i:06d}", part, ts if at is None else at, gen, f"n{rng.randrange(10**6)}",
             round(rng.uniform(0, 1000), 2))
        if not deleted and holes is not None:
            r = list(r)
            if holes.random() < s.get("partial", 0):
                for c in holes.sample((3, 4, 5), holes.randrange(1, 3)):
                    r[c] = None
            if holes.random() < s.get("toast", 0):
                r[4] = "__debezium_unavailable_value"
            r = tuple(r)
        if s.get("dms"):
            return r + ("D" if deleted else "U",)
        op = "d" if deleted else "u" if i in live else "c"
        if s.get("debezium") == "postgres":
            return r + (r[2], op)
        if s.get("debezium") == "mysql":
            return r + ("binlog.000001", r[2], op)
        if s.get("debezium") == "mysql6":
            # `<binlog file>.<position>`: the file number crosses 9 → 10, where text order is wrong
            return r + (f"{(r[2] - 950) // 10}.{r[2]}", op)
        return r + (deleted,) if soft else r

    def wins(i, r):
        """Does r replace key i's stored row (event-time ordering: a ts at least the stored one)?"""
        return i not in live or r[2] >= live[i][2]

    rows = []
    for _ in range(s["rows"]):
        rows.append(row(next_id, 0))
        live[next_id] = rows[-1]
        next_id += 1
    writes.append(("insert", rows))
    for c in range(1, s["commits"]):
        ts += 10
        keys = sorted(live)
        if c == s.get("overwrite_at"):
            kept = [i for i in keys if live[i][1] == "p0" and rng.random() < 0.5]
            for i in [i for i in keys if live[i][1] == "p0"]:
                live.pop(i)
            rows = [row(i, c, "p0") for i in kept] + [row(next_id + n, c, "p0") for n in range(10)]
            next_id += 10
            live.update((int(r[0][1:]), r) for r in rows)
            writes.append(("insert_overwrite", rows))
            continue
        if c % 4 == 3:  # a delete commit
            gone = rng.sample(keys, max(1, int(len(keys) * s.get("delete", 0.05))))
            if soft:
                # soft deletes are upserts: half of them, the other half Spark's delete
                flagged = [row(i, c, at=stamp(i), deleted=True) for i in gone[::2]]
                hard = [row(i, c, at=stamp(i)) for i in gone[1::2]]
                for i, r in zip(gone[::2], flagged):
                    if wins(i, r):
                        live.pop(i)
                writes.append(("upsert", flagged))
                for i in gone[1::2]:
                    live.pop(i, None)
                writes.append(("delete", hard))
            else:
                writes.append(("delete", [live.pop(i) for i in gone]))
            continue
        rows = []
        for i in rng.sample(keys, max(1, int(len(keys) * s.get("update", 0.1)))):
            moved = s.get("index") and rng.random() < s.get("move", 0.2)
            r = row(i, c, f"p{rng.randrange(s['partitions'])}" if moved else None, at=stamp(i))
            rows.append(r)
            if odd is not None and odd.random() < s.get("twice", 0):
                # the same key again in the batch: a soft delete, its ts one side of the update's
                rows.append(row(i, c, r[1], at=r[2] + odd.choice((-1, 1)), deleted=True))
            if wins(i, r):
                live[i] = r
        for _ in range(max(1, int(len(keys) * s.get("insert", 0.05)))):
            rows.append(row(next_id, c))
            live[next_id] = rows[-1]
            next_id += 1
        writes.append(("upsert", rows))
    return writes


def completed(table, layout):
    """The completed data instants of the timeline (cleans and rollbacks left out), in completion
    order: (requested, completed, action)."""
    out = []
    tl = table / ".hoodie" / ("timeline" if layout >= 2 else "")
    for f in tl.iterdir():
        head, _, action = f.name.partition(".")
        if action not in DATA_ACTIONS or not head[:1].isdigit():
            continue
        req, _, done = head.partition("_")
        out.append((req, done or None, action))
    return sorted(out, key=lambda x: x[1] or x[0])


def read_generated(spark, s, path: Path):
    """A table `lakestream generate hudi` writes (`s["generate"]`: its arguments; the binary named
    by LAKESTREAM_BIN), read back by Spark's Hudi: the table as of every completed instant (time
    travel), and the incremental query of each instant (the rows it wrote that are live then)."""
    import subprocess
    r = subprocess.run([os.environ["LAKESTREAM_BIN"], "generate", "hudi", "--path", str(path), *s["generate"]],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"lakestream generate failed: {r.stderr[-3000:]}")
    instants, prev = [], "000"
    for req, done, action in completed(path, 1):
        rows = [{k: v for k, v in row.asDict().items() if k not in LAYOUT}
                for row in spark.read.format("hudi").option("as.of.instant", req).load(str(path)).collect()]
        inc = [{k: v for k, v in row.asDict().items() if k not in LAYOUT}
               for row in spark.read.format("hudi").option("hoodie.datasource.query.type", "incremental")
               .option("hoodie.datasource.read.begin.instanttime", prev)
               .option("hoodie.datasource.read.end.instanttime", req).load(str(path)).collect()]
        op = json.loads((path / ".hoodie" / f"{req}.{action}").read_text() or "{}").get("operationType")
        instants.append({"requested": req, "completed": done, "action": action, "operation": op, "rows": rows,
                         "incremental": inc})
        prev = req
    schema_of = [{"name": f.name, "type": f.dataType.simpleString()} for f in spark.read.format("hudi")
                 .load(str(path)).schema.fields if f.name not in LAYOUT]
    return {"schema": schema_of, "record_key_fields": ["id"], "timeline_layout_version": 1, "instants": instants}


def write(spark, s, path: Path, rng):
    if s.get("generate"):
        return read_generated(spark, s, path)
    from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

    extra = {
        "postgres": [StructField("_event_lsn", LongType(), False), StructField("_change_operation_type", StringType())],
        "mysql": [StructField("_event_bin_file", StringType(), False), StructField("_event_pos", LongType(), False),
                  StructField("_change_operation_type", StringType())],
        "mysql6": [StructField("_event_seq", StringType(), False), StructField("_change_operation_type", StringType())],
    }.get(s.get("debezium"))
    if extra is None:
        extra = ([StructField("Op", StringType(), True)] if s.get("dms") else
                 [StructField("_hoodie_is_deleted", BooleanType(), True)] if s.get("soft_deletes") else [])
    schema = StructType([StructField("id", StringType(), False), StructField("part", StringType(), False),
                         StructField("ts", LongType(), False), StructField("v", LongType(), True),
                         StructField("name", StringType(), True), StructField("price", DoubleType(), True)]
                        + extra)
    o = options(s)
    # what made each instant: the write's own operation, or the table service it ran inline
    # (its instants follow the write's: compaction a `commit` of a merge-on-read table,
    # clustering a `replacecommit`)
    made, layout = {}, 2 if s.get("table_version", 9) >= 8 else 1

    def record(op):
        new = [i for i in completed(path, layout) if i[0] not in made]
        for k, (req, _, action) in enumerate(new):
            made[req] = op if k == 0 else {"commit": "COMPACT", "replacecommit": "CLUSTER"}.get(action, action)

    every, states, queried, cdc_from = s.get("async_compaction_every"), [], [], "0"

    def keep_state(n):
        # the directory as the write left it (hard links: data files are never changed in
        # place), and Spark's read of the table then
        shutil.copytree(path, path.parent / "states" / str(n), copy_function=os.link)
        # Spark's CDC of the instants this write completed, asked now: later cleaning deletes
        # the slices the query reads (a clean keeps the previous commit's)
        nonlocal cdc_from
        if s.get("cdc_per_write"):
            asked = {q["requested"] for q in queried}
            for req, done, action in completed(path, layout):
                if req in asked:
                    continue
                end = done or req
                cdc, err = cdc_query(spark, path, cdc_from, end)
                queried.append({"requested": req, "completed": done, "action": action, "cdc": cdc, "cdc_error": err})
                cdc_from = end
        rows = spark.read.format("hudi").load(str(path)).collect()
        states.append({"dir": str(n), "last": max(made), "rows": [
            {k: v for k, v in r.asDict().items() if k not in LAYOUT} for r in rows]})

    for n, (op, rows) in enumerate(history(s, rng)):
        df = spark.createDataFrame(rows, schema)
        (df.write.format("hudi").options(**o).option("hoodie.datasource.write.operation", op)
         .mode("overwrite" if n == 0 else "append").save(str(path)))
        record(op.upper())
        if every and n and n % every == 0:
            # a plan whatever the delta commits since the last compaction (Hudi's default waits for 5)
            spark.conf.set("hoodie.compact.inline.max.delta.commits", "1")
            spark.sql(f"CALL run_compaction(op => 'schedule', path => '{path}')")
            assert any(f.name.endswith(".compaction.requested") for f in (path / ".hoodie").rglob("*")), \
                "no compaction scheduled"
        elif every and n > every and n % every == 1:
            spark.sql(f"CALL run_compaction(op => 'run', path => '{path}')")
            record("COMPACT")
        restore = s.get("restore")
        if restore and n == restore[0]:
            savepoint = max(made)
            spark.sql(f"CALL create_savepoint(path => '{path}', commit_time => '{savepoint}')")
        if restore and n == restore[1]:
            spark.sql(f"CALL rollback_to_savepoint(path => '{path}', instant_time => '{savepoint}')")
            assert any(f.name.endswith(".restore") for f in (path / ".hoodie").rglob("*")), "no restore completed"
        if s.get("clean_retained") or restore:
            keep_state(n)
    schema_of = [{"name": f.name, "type": f.dataType.simpleString()} for f in spark.read.format("hudi")
                 .load(str(path)).schema.fields if f.name not in LAYOUT]
    if s.get("clean_retained") or s.get("restore"):
        return {"schema": schema_of, "record_key_fields": ["id"], "timeline_layout_version": layout,
                "states": states, "operations": made, "instants": queried}
    props = dict(l.split("=", 1) for l in (path / ".hoodie" / "hoodie.properties").read_text().splitlines()
                 if "=" in l and not l.startswith("#"))
    assert int(props.get("hoodie.timeline.layout.version", "1")) == layout, props
    instants, done_order = [], completed(path, layout)
    for req, done, action in done_order:
        # the table once the instant completed: as of its requested time, or of its completion
        # time where an instant requested after it completed first (a pending compaction)
        overtaken = any(r > req and (d or r) < (done or req) for r, d, _ in done_order)
        snap = spark.read.format("hudi").option("as.of.instant", done if overtaken else req).load(str(path))
        rows = [{k: v for k, v in r.asDict().items() if k not in LAYOUT} for r in snap.collect()]
        instants.append({"requested": req, "completed": done, "action": action, "operation": made[req], "rows": rows})
    if s.get("cdc_mode"):
        prev = "0"
        for i in instants:
            end = i["completed"] or i["requested"]
            i["cdc"], i["cdc_error"] = cdc_query(spark, path, prev, end)
            prev = end
    return {
        "schema": schema_of,
        "record_key_fields": ["id"],
        "timeline_layout_version": layout,
        "instants": instants,
    }


def cdc_query(spark, path, begin, end):
    """Spark's CDC query of one instant (begin exclusive, end inclusive: completion times from
    table version 8 on, requested times before): ([{op, ts_ms, before, after}], None), or (None, the
    error's first line) where Hudi's own query fails (so the test can say which instants it
    could not compare)."""
    from py4j.protocol import Py4JJavaError

    try:
        rows = (spark.read.format("hudi").option("hoodie.datasource.query.type", "incremental")
                .option("hoodie.datasource.query.incremental.format", "cdc")
                .option("hoodie.datasource.read.begin.instanttime", begin)
                .option("hoodie.datasource.read.end.instanttime", end)
                .load(str(path)).collect())
    except Py4JJavaError as e:
        return None, str(e.java_exception).splitlines()[0][:500]
    out = []
    for r in rows:
        d = r.asDict()
        out.append({"op": d["op"], "ts_ms": d["ts_ms"], "before": json.loads(d["before"]) if d.get("before") else None,
                    "after": json.loads(d["after"]) if d.get("after") else None})
    return out, None
