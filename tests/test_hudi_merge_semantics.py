"""Hudi's merge semantics, as Spark (Hudi 1.1.1's bundle) writes and reads them (issue 59): tables
written with late upserts, late soft deletes, late hard deletes, equal-ordering ties and a key
updated and soft-deleted in one batch, under each merge mode the table declares, with compaction
and clustering between them. Revealed one instant at a time, the replay equals Spark's snapshot
read as of every instant (time travel), and the connector's events equal Spark's snapshots of
consecutive instants diffed by key, before images included, through the CDC log files where the
connector reads them and again through the diff. Where Hudi's own CDC query disagrees with its
snapshots (a late delete under event-time ordering, Hudi 1.1.1), the test says so: the snapshots
are the truth. Skipped, with the reason, where Java, pyspark or the jars are missing."""

import uuid
import shutil

import pytest

import sparkkit
import testkit
from test_spark_hudi import assert_instant_events, our_events, snapshot_events, spark_events

DATA = ("id", "part", "ts", "v", "name", "price")
PAYLOAD = "org.apache.hudi.common.model."


def scenario(name, kind, version, **extra):
    s = {"name": f"hudi-merge-{name}", "format": "hudi", "type": kind, "table_version": version,
         "cdc_mode": "DATA_BEFORE_AFTER", "seed": 59, "rows": 120, "commits": 9, "partitions": 2,
         "soft_deletes": True, "late": 0.35, "ties": 0.15, "twice": 0.1, "update": 0.3, "delete": 0.15}
    if kind == "mor":
        s["compact_every"] = 4
    return {**s, **extra}


SCENARIOS = [
    # the table of the issue: merge-on-read, event-time ordering, CDC, late soft and hard deletes
    scenario("mor-event-time", "mor", 9, merge_mode="EVENT_TIME_ORDERING", cluster_every=5),
    scenario("cow-event-time", "cow", 9, merge_mode="EVENT_TIME_ORDERING", cluster_every=4),
    # commit-time ordering: the late records win
    scenario("mor-commit-time", "mor", 9, merge_mode="COMMIT_TIME_ORDERING", cdc_mode=None),
    # table version 6: the payload class is the rule
    scenario("mor-v6-default-payload", "mor", 6, payload="org.apache.hudi.common.model.DefaultHoodieRecordPayload"),
    scenario("mor-v6-overwrite-latest", "mor", 6, cdc_mode=None,
             payload="org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"),
    scenario("mor-v6-event-time-payload", "mor", 6, cdc_mode=None, cluster_every=5,
             payload="org.apache.hudi.common.model.EventTimeAvroPayload"),
    # two ordering fields, compared as a tuple (ties on ts broken by v)
    scenario("mor-two-ordering-fields", "mor", 9, merge_mode="EVENT_TIME_ORDERING", ordering="ts,v", cdc_mode=None),
    # AWS DMS: an `Op` column, `D` a delete (table version 6: the payload; 9: a delete marker)
    scenario("mor-v6-aws-dms", "mor", 6, dms=True, cdc_mode=None,
             payload="org.apache.hudi.common.model.AWSDmsAvroPayload"),
    scenario("mor-v9-aws-dms", "mor", 9, dms=True, cdc_mode=None,
             payload="org.apache.hudi.common.model.AWSDmsAvroPayload"),
    # column-wise merges: updates leave columns null (or TOAST-marked) for the stored row to
    # fill; table version 9 names a partial-update mode, version 6 the payload Hudi 1.1 calls
    scenario("mor-v9-partial-update", "mor", 9, payload=PAYLOAD + "PartialUpdateAvroPayload", partial=0.5),
    scenario("cow-v9-partial-update", "cow", 9, payload=PAYLOAD + "PartialUpdateAvroPayload", partial=0.5,
             cdc_mode=None),
    scenario("mor-v6-partial-update", "mor", 6, payload=PAYLOAD + "PartialUpdateAvroPayload", partial=0.5,
             cdc_mode=None),
    scenario("mor-v9-overwrite-non-defaults", "mor", 9, payload=PAYLOAD + "OverwriteNonDefaultsWithLatestAvroPayload",
             partial=0.5, cdc_mode=None),
    scenario("mor-v6-overwrite-non-defaults", "mor", 6, payload=PAYLOAD + "OverwriteNonDefaultsWithLatestAvroPayload",
             partial=0.5, cdc_mode=None),
    scenario("mor-v9-postgres-debezium", "mor", 9, payload=PAYLOAD + "debezium.PostgresDebeziumAvroPayload",
             debezium="postgres", ordering="_event_lsn", toast=0.4, cdc_mode=None),
    scenario("mor-v9-mysql-debezium", "mor", 9, payload=PAYLOAD + "debezium.MySqlDebeziumAvroPayload",
             debezium="mysql", ordering="_event_bin_file,_event_pos", cdc_mode=None),
    # version 6: the payload orders by `_event_seq` as two numbers (binlog file, position)
    scenario("mor-v6-mysql-debezium", "mor", 6, payload=PAYLOAD + "debezium.MySqlDebeziumAvroPayload",
             debezium="mysql6", ordering="_event_seq", cdc_mode=None),
]


@pytest.fixture(scope="module")
def spark_tables():
    return sparkkit.written_or_skip(SCENARIOS)


def cdc_disagreements(oracle):
    """Instants where Hudi's own CDC query says otherwise than its snapshots diffed: {instant:
    [keys]} (the CDC query is not the oracle; the snapshots are)."""
    spark, failed = spark_events(oracle)
    diffed = snapshot_events(oracle)
    out = {}
    for inst, want in diffed.items():
        if inst in failed:
            continue
        have = {k: e for k, e in spark.get(inst, {}).items() if not (e[0] == "u" and testkit.same(e[1], e[2]))}
        bad = sorted(k for k in want.keys() | have.keys()
                     if k not in want or k not in have or have[k][0] != want[k][0]
                     or not testkit.same(have[k][2], want[k][2]))
        if bad:
            out[inst] = bad
    return out


def assert_events_are_snapshot_diffs(oracle, events, label):
    """Ours, instant by instant from the second on, equal Spark's snapshots diffed by key."""
    want_all, got = snapshot_events(oracle), our_events(events)
    for inst in oracle["instants"][1:]:
        want = want_all[inst["requested"]]
        have = {k: h for k, h in got.get(inst["requested"], {}).items() if not (h[0] == "u" and testkit.same(h[1], h[2]))}
        assert_instant_events(label, inst, have, want, "Spark's snapshots")


def late_losers(oracle):
    """(instant, key) pairs where a write reached the table and Spark's snapshot kept the old row:
    the scenario did exercise a losing late record (the test would prove nothing otherwise)."""
    n, prev = 0, None
    for inst in oracle["instants"]:
        cur = {r["id"]: r for r in inst["rows"]}
        if prev is not None:
            n += sum(1 for k in cur.keys() & prev.keys() if cur[k]["ts"] < prev[k]["ts"])
        prev = cur
    return n


@pytest.mark.parametrize("name", [s["name"] for s in SCENARIOS])
def test_spark_written_merge_modes_replay_to_sparks_snapshots(env, registry, tmp_path, spark_tables, name):
    cached, oracle = spark_tables[name]
    s = next(x for x in SCENARIOS if x["name"] == name)
    table = tmp_path / "table"
    shutil.copytree(cached, table)
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = f"merge-{name}-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    replay, _ = testkit.replay_steps(env, registry, revealed, oracle, oracle["instants"], props, topic, name)
    assert {e["op"] for e in replay.events} >= {"r", "c", "u", "d"}
    assert_events_are_snapshot_diffs(oracle, replay.events, name)
    event_time = ("DefaultHoodieRecordPayload", "EventTimeAvroPayload", "PartialUpdateAvroPayload",
                  "DebeziumAvroPayload")
    if s.get("merge_mode") == "EVENT_TIME_ORDERING" or s.get("payload", "").endswith(event_time):
        # event-time ordering: a late write never wins, so no ts goes back in Spark's snapshots
        assert late_losers(oracle) == 0, f"{name}: a snapshot took a lower ts under event-time ordering"
    if s.get("cdc_mode"):
        topic2 = topic + "-diff"
        props2 = testkit.connector_props(tmp_path, "c-" + topic2, table, topic2, env, **{
            "read.cdc.from-log": "false", "read.start-commit": oracle["instants"][1]["requested"]})
        testkit.run_once(props2)
        diffed = [registry.decode(v) for _, _, _, v in testkit.consume_all(env, topic2) if v is not None]
        assert_events_are_snapshot_diffs(oracle, diffed, f"{name} (diff)")
        bad = cdc_disagreements(oracle)
        if bad:
            print(f"{name}: Hudi 1.1.1's own CDC query contradicts its snapshots at {len(bad)} instants "
                  f"(e.g. {next(iter(bad.items()))}); compared with the snapshots")


def test_late_records_were_written(spark_tables):
    """The event-time scenarios hold late records that Spark's snapshots rejected: a late write
    under commit-time ordering does take a lower ts (so the merge mode made the difference)."""
    _, commit_time = spark_tables["hudi-merge-mor-commit-time"]
    went_back = 0
    prev = None
    for inst in commit_time["instants"]:
        cur = {r["id"]: r["ts"] for r in inst["rows"]}
        if prev is not None:
            went_back += sum(1 for k in cur.keys() & prev.keys() if cur[k] < prev[k])
        prev = cur
    assert went_back > 0, "no late write took effect under commit-time ordering: the scenarios test nothing"


@pytest.mark.parametrize("props,named", [
    ({"hoodie.compaction.payload.class": "com.acme.orders.OrdersPayload"}, "com.acme.orders.OrdersPayload"),
    ({"hoodie.compaction.payload.class": "org.apache.hudi.common.model.debezium.PostgresDebeziumAvroPayload"},
     "PostgresDebeziumAvroPayload"),
    ({"hoodie.table.version": "9", "hoodie.timeline.layout.version": "2",
      "hoodie.record.merge.mode": "EVENT_TIME_ORDERING", "hoodie.table.partial.update.mode": "KEEP_VALUES"},
     "hoodie.table.partial.update.mode=KEEP_VALUES"),
    ({"hoodie.table.version": "9", "hoodie.timeline.layout.version": "2", "hoodie.record.merge.mode": "CUSTOM",
      "hoodie.record.merge.custom.implementation.classes": "com.acme.LatestNonNullMerger"},
     "com.acme.LatestNonNullMerger"),
], ids=["custom-payload", "postgres-debezium-v6", "keep-values-partial-mode",
                           "custom-merger"])
def test_a_merge_it_cannot_evaluate_stops_at_validate_naming_it(env, tmp_path, props, named):
    """Never a silent fallback to commit-time ordering: `validate` and `run` exit 2 naming the
    class (the generated table's hoodie.properties rewritten to declare it)."""
    import subprocess
    table = tmp_path / "t"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", "mor", "--path", str(table), "--rows", "50"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    hp = table / ".hoodie" / "hoodie.properties"
    lines = [l for l in hp.read_text().splitlines() if l.split("=", 1)[0] not in props]
    hp.write_text("\n".join(lines + [f"{k}={v}" for k, v in props.items()]) + "\n")
    conn = testkit.connector_props(tmp_path, "merge-refused", table, "merge-refused", env)
    for cmd in (["validate"], ["run", "--once"]):
        r = subprocess.run([str(testkit.BIN), *cmd, str(conn)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, (cmd, r.returncode, r.stderr[-2000:])
        assert named in r.stderr, r.stderr[-2000:]


def test_changelog_mode_is_refused_where_records_merge_column_by_column(env, tmp_path):
    """Changelog mode emits log records one by one; a partial update is not a row of its own, so a
    table that merges column by column refuses it (exit 2, naming the setting)."""
    import subprocess
    table = tmp_path / "t"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", "mor", "--path", str(table), "--rows", "50"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    hp = table / ".hoodie" / "hoodie.properties"
    lines = [l for l in hp.read_text().splitlines() if not l.startswith("hoodie.compaction.payload.class=")]
    hp.write_text("\n".join(lines + ["hoodie.compaction.payload.class=" + PAYLOAD + "PartialUpdateAvroPayload"]) + "\n")
    conn = testkit.connector_props(tmp_path, "partial-changelog", table, "partial-changelog", env,
                                   **{"changelog.enabled": "true"})
    r = subprocess.run([str(testkit.BIN), "validate", str(conn)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "changelog.enabled" in r.stderr, (r.returncode, r.stderr[-2000:])


def generator_digest():
    """What the generator's code is: a change to it writes the Spark-read tables again."""
    import hashlib
    src = testkit.REPO / "src" / "generate"
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(src.glob("*.rs")))).hexdigest()[:16]


GENERATED = [
    ("cow", ["--type", "cow", "--rows", "300", "--partitions", "2", "--commits", "5", "--update-fraction", "0.2",
             "--delete-fraction", "0.05", "--cdc", "data-before-after"]),
    # a second between commits, as a stream writes them (the generator completes an instant at
    # least 8 ms after its time: Hudi 1.x reads a version-6 completion time from the file's mtime,
    # and a compaction completed "at or before" its own time made Spark's time travel to the
    # delta commits after it read the compacted state alone, in 4 of 8 tables)
    ("mor", ["--type", "mor", "--rows", "300", "--partitions", "2", "--commits", "6", "--update-fraction", "0.2",
             "--delete-fraction", "0.05", "--compact-every", "2", "--cdc", "data-before-after", "--interval", "1100ms"]),
    ("mor-operation-field", ["--type", "mor", "--rows", "300", "--partitions", "2", "--commits", "5",
                             "--delete-fraction", "0.05", "--compact-every", "3", "--operation-field",
                             "--interval", "1100ms"]),
]


@pytest.fixture(scope="module")
def generated_tables():
    import os
    os.environ["LAKESTREAM_BIN"] = str(testkit.BIN)
    return sparkkit.written_or_skip([
        {"name": f"hudi-generated-{kind}", "format": "hudi", "seed": 0, "generate": args,
         "generator": generator_digest()} for kind, args in GENERATED])


@pytest.mark.parametrize("kind", [g[0] for g in GENERATED])
def test_generated_tables_read_by_sparks_hudi_equal_hudi_rs_and_the_replay(env, registry, tmp_path, generated_tables,
                                                                           kind):
    """The generator writes what Hudi reads: Spark's Hudi (1.1.1) reads every instant of a
    generated table (time travel; delete blocks carrying Hudi's ordering value, the compaction
    plan as Avro, the table checksum, CDC files in the slice they belong to) and its incremental
    query, and they equal hudi-rs's reads (the generator tests' oracle) and the connector's replay."""
    cached, oracle = generated_tables[f"hudi-generated-{kind}"]
    rs = testkit.hudi_rs_oracle(cached)
    assert [i["requested"] for i in oracle["instants"]] == [i["requested"] for i in rs["instants"]]
    if kind != "cow":
        assert any(i["operation"] == "COMPACT" for i in oracle["instants"]), "no compaction to read"
    prev = "000"
    for spark_i, rs_i in zip(oracle["instants"], rs["instants"]):
        label = f"{kind} {spark_i['requested']}"
        ours, theirs = ({r["id"]: r for r in i["rows"]} for i in (spark_i, rs_i))
        assert ours.keys() == theirs.keys(), f"{label}: Spark and hudi-rs read different keys"
        for k, r in ours.items():
            # hudi-rs leaves `_hoodie_operation` out; every column both read must agree
            for c in r.keys() & theirs[k].keys():
                assert testkit.same(testkit.norm(r[c]), testkit.norm(theirs[k][c])), f"{label} {k} {c}"
        # incremental: the live rows the instant (or one since the previous instant) wrote
        wrote = {(r["id"], r["_hoodie_commit_time"]) for r in rs_i["rows"]
                 if prev < r["_hoodie_commit_time"] <= spark_i["requested"]}
        got = {(r["id"], r["_hoodie_commit_time"]) for r in spark_i["incremental"]}
        assert got == wrote, f"{label}: incremental query {sorted(got ^ wrote)[:5]}"
        prev = spark_i["requested"]
    table = tmp_path / "table"
    shutil.copytree(cached, table)
    revealed = testkit.RevealedTable(table, 1)
    topic = f"gen-spark-{kind}-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    testkit.replay_steps(env, registry, revealed, rs, rs["instants"], props, topic, f"generated {kind}")
