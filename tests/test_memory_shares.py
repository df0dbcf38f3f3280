"""`run --memory-budget` (issue 32): one memory budget for the connectors of a process. Each unit
read takes a share — at most half of the budget while other tasks run, at most its connector's
`read.memory.budget` — and gives it back when done; the events are the same as with each
connector's own budget."""

import re
import subprocess
import uuid

import pyarrow as pa
import pytest

import testkit

deltalake = pytest.importorskip("deltalake")

MIB = 1 << 20


def shares(log):
    return [(m.group(1), int(m.group(2))) for m in
            re.finditer(r"unit memory share.*?connector=(\S+).*?share_bytes=(\d+)", log)]


def test_connectors_of_a_process_share_one_budget(env, tmp_path):
    hudi = tmp_path / "hudi"
    subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", "mor", "--path", str(hudi), "--rows", "200000",
                    "--partitions", "4", "--commits", "2", "--seed", "3"], check=True, capture_output=True)
    delta = tmp_path / "delta"
    deltalake.write_deltalake(str(delta), pa.table({"id": pa.array(range(100), pa.int64())}))
    deltalake.write_deltalake(str(delta), pa.table({"id": pa.array(range(100, 150), pa.int64())}), mode="append")
    tag = uuid.uuid4().hex[:8]
    a = testkit.connector_props(tmp_path, f"shares-hudi-{tag}", hudi, f"shares-hudi-{tag}", env)
    b = testkit.connector_props(tmp_path, f"shares-delta-{tag}", delta, f"shares-delta-{tag}", env, **{
        "connector.class": "delta", "key.fields": "id", "starting-version": "0"})
    r = subprocess.run([str(testkit.BIN), "run", "--once", "--memory-budget", "64MiB", str(a), str(b)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = shares(r.stderr)
    # the Hudi table's full scan (its latest slices), the Delta table's two versions
    assert {c for c, _ in got} == {f"shares-hudi-{tag}", f"shares-delta-{tag}"}, got
    assert len(got) == 3, got
    # two tasks: no unit takes more than half, none gets less than the 16 MiB floor
    assert all(16 * MIB <= b <= 32 * MIB for _, b in got), got
    for props in (a, b):
        testkit.assert_verified(props)
    # without a process budget each connector keeps its own: no shares
    r = subprocess.run([str(testkit.BIN), "run", "--once", str(a), str(b)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and not shares(r.stderr), r.stderr[-3000:]


def test_a_process_budget_that_is_not_a_size_is_refused(tmp_path):
    f = tmp_path / "x.properties"
    f.write_text("name=x\nconnector.class=hudi\ntable.path=s3://lake/x\ntopic=x\nbootstrap.servers=k:9092\n"
                 "schema.registry.url=http://r:8081\n")
    r = subprocess.run([str(testkit.BIN), "run", "--memory-budget", "lots", str(f)], capture_output=True, text=True)
    assert r.returncode == 2 and "not a size" in r.stderr, r.stderr
