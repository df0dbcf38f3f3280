"""Many tables under one discovering connector (issue 61): N small tables (a third Delta by
deltalake, a third Iceberg by pyiceberg in a sql catalog's warehouse, a third Hudi by
`lakestream generate`) under one prefix, one `lakestream run` with `idle.release`; measured once
every table's stream caught up and parked: the process's threads, resident memory and CPU over a
minute, and the storage requests one search of the prefix costs. Then one table gets a commit:
seconds until its event is in its topic.

Needs KAFKA_BOOTSTRAP, SCHEMA_REGISTRY_URL and a release binary (CARGO_TARGET_DIR or target/).
Usage: bench_discovery.py [N] (default 500)."""

import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "lakestream"


def delta(path, k):
    deltalake.write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array([k] * 3, pa.int64())}))


def hudi(path):
    subprocess.run([str(BIN), "generate", "hudi", "--type", "cow", "--path", str(path), "--rows", "20"],
                   check=True, capture_output=True)


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
        elif want == "" and line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def proc_stats(pid):
    threads = len(os.listdir(f"/proc/{pid}/task"))
    rss = int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) // 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return threads, rss, cpu


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    tmp = Path(tempfile.mkdtemp(prefix="bench-discovery-"))
    root = tmp / "lake"
    t0 = time.time()
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField
    cat = SqlCatalog("default", uri=f"sqlite:///{tmp / 'catalog.db'}", warehouse=f"file://{root}")
    cat.create_namespace("ice")
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "v", LongType()), identifier_field_ids=[1])
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    first_delta = None
    for k in range(n):
        if k % 3 == 0:
            p = root / "dl.db" / f"t{k:04d}"
            delta(p, k)
            first_delta = first_delta or p
        elif k % 3 == 1:
            t = cat.create_table(f"ice.t{k:04d}", schema=schema)
            t.append(pa.Table.from_pylist([{"id": i, "v": k} for i in (1, 2, 3)], schema=arrow))
        else:
            hudi(root / "hu.db" / f"t{k:04d}")
    print(f"{n} tables written in {time.time() - t0:.0f} s", flush=True)
    port = 19000 + os.getpid() % 1000
    name = "bench-" + uuid.uuid4().hex[:6]
    props = tmp / "lake.properties"
    props.write_text("\n".join([
        f"name={name}", f"table.path.prefix={root}", f"topic.prefix={name}",
        f"bootstrap.servers={os.environ['KAFKA_BOOTSTRAP']}", f"schema.registry.url={os.environ['SCHEMA_REGISTRY_URL']}",
        "offsets.storage.topic=bench-offsets-" + uuid.uuid4().hex[:6], "key.fields=id",
        "read.start-commit=earliest", "starting-version=earliest", "idle.release=5s",
        "read.streaming.check-interval=10s", "table.discovery.interval=30s", f"metrics.port={port}", ""]))
    t0 = time.time()
    proc = subprocess.Popen([str(BIN), "run", str(props)], stdout=subprocess.DEVNULL, stderr=open(tmp / "run.log", "w"))
    peak_threads, peak_rss = 0, 0
    try:
        while True:
            time.sleep(2)
            if proc.poll() is not None:
                raise SystemExit(f"exited {proc.returncode}: {(tmp / 'run.log').read_text()[-3000:]}")
            th, rss, _ = proc_stats(proc.pid)
            peak_threads, peak_rss = max(peak_threads, th), max(peak_rss, rss)
            try:
                m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            except OSError:
                continue
            parked = metric(m, "lakestream_task_parked")
            streaming = metric(m, "lakestream_tables", connector=name, state="streaming")
            if parked >= n:
                break
            if time.time() - t0 > 1800:
                raise SystemExit(f"not all parked after 30 min: {parked}/{n}, streaming {streaming}")
        up = time.time() - t0
        print(f"all {n} streams caught up and parked in {up:.0f} s (peak {peak_threads} threads, {peak_rss} MiB)", flush=True)
        th0, rss0, cpu0 = proc_stats(proc.pid)
        req0 = metric(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode(),
                      "lakestream_storage_requests_total", connector=name)
        runs0 = metric(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode(),
                       "lakestream_discovery_runs_total", connector=name)
        time.sleep(60)
        th1, rss1, cpu1 = proc_stats(proc.pid)
        m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        req1 = metric(m, "lakestream_storage_requests_total", connector=name)
        runs1 = metric(m, "lakestream_discovery_runs_total", connector=name)
        searches = max(1, runs1 - runs0)
        print(f"idle: {th1} threads, {rss1} MiB, {(cpu1 - cpu0) / 60:.3f} core over 60 s; "
              f"{runs1 - runs0:.0f} searches, {(req1 - req0) / searches:.0f} storage requests a search", flush=True)
        t1 = time.time()
        deltalake.write_deltalake(str(first_delta), pa.table({"id": pa.array([9], pa.int64()), "v": pa.array([9], pa.int64())}), mode="append")
        topic = f"{name}.dl.{first_delta.name}"
        while metric(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode(),
                     "lakestream_source_records_written_total", connector=f"{name}/dl.{first_delta.name}", op="c") < 1:
            time.sleep(0.2)
            if time.time() - t1 > 120:
                raise SystemExit(f"no event in {topic} after 120 s")
        print(f"a commit to a parked table: its event committed after {time.time() - t1:.1f} s", flush=True)
    finally:
        proc.terminate()
        proc.wait(120)


if __name__ == "__main__":
    main()
