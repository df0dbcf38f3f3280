"""A whole lakehouse in one connector (issue 61): one connector file with `table.path.prefix`
streams every table found under it — Delta (delta-rs), Iceberg (pyiceberg) and, with the fixtures,
a Spark-written Hudi table — each to `<topic.prefix>.<namespace>.<table>`, skipping the tables the
include list leaves out, picking up a table created mid-run and stopping a dropped one cleanly. Each
table is revealed commit by commit and its topic replayed by key against the table at every step;
kill -9s at random moments of a running connector lose and duplicate nothing."""

import json
import random
import shutil
import subprocess
import urllib.request


import deltakit as dk
import testkit
from lakekit import Lake, Running, free_port, seed
from testkit import BIN, run_once


def test_a_prefix_streams_every_matched_table_commit_by_commit(env, registry, tmp_path):
    """Delta, Iceberg and (with the fixtures) Hudi tables under one prefix, an excluded one beside
    them, and a table created at the fourth step: after each step's `run --once`, every matched
    table's topic replays to the table; the excluded table has no stream."""
    s = seed()
    lake = Lake(env, registry, tmp_path, s)
    lake.add_delta("sales.items", "sales.db/items")
    lake.add_iceberg("shop.orders")
    if testkit.fixtures_present():
        lake.add_hudi("sales.trips", "sales.db/trips")
    else:
        print("fixtures not found: the lake holds no Hudi table")
    audit = dk.RevealedDelta(tmp_path / "src-sales.items", lake.root / "ops" / "audit")
    audit.reveal(3)
    props = lake.props(**{"table.include.list": r"sales\\..*,shop\\..*"})
    for i in range(7):
        if i == 3:
            lake.add_delta("sales.late", "sales.db/late", versions=4, partitioned=False)
        lake.advance(i)
        r = run_once(props)
        assert "ops.audit" not in r.stderr, r.stderr[-3000:]
        lake.check(f"step {i}")
    v = subprocess.run([str(BIN), "validate", str(props)], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr
    assert f"{len(lake.tables)} tables streamed, 0 skipped, 1 left out by the lists" in v.stdout, v.stdout
    for q in lake.tables:
        assert f"-> topic {lake.topic(q)} as " in v.stdout, v.stdout
    # a discovered table's stream is a connector of its own in all but the file: the file its
    # table would have verifies it (its offsets under `<name>/<namespace>.<table>`)
    member = v.stdout.split("## ")[1:]
    items = next(m for m in member if m.startswith(props.read_text().split("\n")[0][5:] + "/sales.items"))
    one = tmp_path / "items.properties"
    one.write_text("".join(line.replace(" = ", "=", 1) + "\n" for line in items.splitlines()[1:] if " = " in line))
    testkit.assert_verified(one, f"seed {s} sales.items")


def test_colliding_topics_and_bad_settings_exit_2_naming_them(env, tmp_path):
    lake = Lake(env, None, tmp_path, seed())
    for rel in ("sales.db/a_b/_delta_log", "sales.db/a/b/_delta_log"):
        (lake.root / rel).mkdir(parents=True)
        (lake.root / rel / "00000000000000000000.json").write_text("{}\n")
    r = subprocess.run([str(BIN), "run", "--once", str(lake.props())], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "sales.a.b" in r.stderr and "sales.a_b" in r.stderr and "collide" in r.stderr, r.stderr
    for extra, key in [({"table.include.list": "sales.(a"}, "table.include.list"),
                       ({"topic": "t"}, "topic"),
                       ({"table.include.list": "a", "table.exclude.list": "b"}, "table.exclude.list")]:
        r = subprocess.run([str(BIN), "validate", str(lake.props(**extra))], capture_output=True, text=True)
        assert r.returncode == 2 and f"`{key}`" in r.stderr, (extra, r.stderr)


def test_assign_spreads_the_tables_over_a_pool(env, tmp_path):
    lake = Lake(env, None, tmp_path, seed())
    for k in range(12):
        (lake.root / f"t{k}" / "_delta_log").mkdir(parents=True)
        (lake.root / f"t{k}" / "_delta_log" / "00000000000000000000.json").write_text("{}\n")
    props = lake.props(**{"tasks.max": "2"})
    r = subprocess.run([str(BIN), "assign", "--pool", "--replicas", "3", str(props)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert len(rows) == 24, r.stdout
    assert {row[1].split("/")[1] for row in rows} == {f"default.t{k}" for k in range(12)}
    pods = [int(row[0]) for row in rows]
    assert set(pods) == {0, 1, 2}, r.stdout
    # the same placement as connectors of their own files: stable from one run to the next
    again = subprocess.run([str(BIN), "assign", "--pool", "--replicas", "3", str(props)], capture_output=True, text=True)
    assert again.stdout == r.stdout


def test_a_running_connector_picks_up_new_tables_stops_dropped_ones_and_survives_kill9(env, registry, tmp_path):
    """`run` (not --once) with a 300 ms discovery interval while tables are written, one created
    and one dropped, killed with -9 at random moments and started again: each table created
    mid-run streams, the dropped table's stream stops with a log line (the process goes on), and
    every topic replays to its table (no event lost, none twice: the strict replay refuses it)."""
    s = seed()
    rng = random.Random(s)
    lake = Lake(env, registry, tmp_path, s)
    lake.add_delta("sales.items", "sales.db/items", versions=10)
    lake.add_iceberg("shop.orders")
    gone = lake.add_delta("ops.gone", "ops/gone", versions=3, partitioned=False)
    port = free_port()
    props = lake.props(**{"table.discovery.interval": "300ms", "monitor-interval": "200ms", "metrics.port": str(port)})
    name = props.read_text().split("\n")[0][len("name="):]

    run = Running(props)
    try:
        run.steps(lake, rng, 15, at={3: lambda: lake.add_delta("sales.late", "sales.db/late", versions=5,
                                                               partitioned=False)})
        # caught up: every table's topic replays to it, the process still running
        assert run.log.wait("table streaming", count=1, timeout=60), run.log.text()[-3000:]
        lake.converge("caught up")
        run.alive()
        # a table created while the process runs (no restart): found by a later search
        lake.add_delta("sales.later", "sales.db/later", versions=3, partitioned=False)
        lake.advance(20)
        assert run.log.wait(f"{name}/sales.later", timeout=30), run.log.text()[-3000:]
        lake.converge("a table created mid-run")
        # each table's stream has its status and its series; the connector counts its tables
        status = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/connectors/{name}%2Fsales.items/status").read())
        assert status["name"] == f"{name}/sales.items" and status["tasks"][0]["state"] == "RUNNING", status
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        assert f'lakestream_tables{{connector="{name}",state="streaming"}} 5' in metrics, \
            [line for line in metrics.splitlines() if "lakestream_tables" in line]
        # a table dropped: its stream stops, the others go on
        shutil.rmtree(gone.table)
        assert run.log.wait("table dropped", timeout=60), run.log.text()[-3000:]
        lake.tables.pop("ops.gone")
        lake.advance(30)
        lake.converge("after the drop")
        run.alive()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        for state, n in [("streaming", 4), ("dropped", 1), ("failed", 0), ("skipped", 0)]:
            assert f'lakestream_tables{{connector="{name}",state="{state}"}} {n}' in metrics, \
                [line for line in metrics.splitlines() if "lakestream_tables" in line]
    finally:
        code = run.stop()
    assert code == 0, run.log.text()[-3000:]
    print(f"seed {s}: {run.kills} kill -9s")
    assert "table failed" not in run.everything()
