"""Freshness under load (issue 32): commit → event visible to a read_committed consumer, for one
Delta table committing every EVERY seconds, while IDLE caught-up connectors (Hudi, Delta and,
where the fixtures are beside the repo, Iceberg by turns) poll in the same `lakestream run`
process. Every connector polls every INTERVAL.

A commit's time is taken when delta-rs returns from writing it (the commit is then visible to any
reader); an event's when the consumer receives it. Each commit appends one row whose id names it.

Usage: KAFKA_BOOTSTRAP=... SCHEMA_REGISTRY_URL=... bench_freshness.py [--idle 199] [--seconds 120]
       [--every 2] [--interval 1s] [--release 5s] [--dir /tmp/lakestream-freshness]
Prints p50 / p99 / max latency, the process's CPU, threads and RSS."""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa
from confluent_kafka import Consumer

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
BIN = Path(os.environ.get("LAKESTREAM_BIN", "/var/cache/lakestream-target/release/lakestream"))


def idle_tables(work: Path):
    """Small caught-up tables for the idle connectors: {kind: properties lines}."""
    hudi, delta = work / "hudi", work / "delta"
    if not hudi.exists():
        subprocess.run([str(BIN), "generate", "hudi", "--path", str(hudi), "--rows", "100", "--partitions", "2",
                        "--commits", "1"], check=True, capture_output=True)
    if not delta.exists():
        deltalake.write_deltalake(str(delta), pa.table({"id": pa.array([1, 2], pa.int64())}))
    tables = {"hudi": f"connector.class=hudi\ntable.path={hudi}\nread.start-commit=latest\n",
              "delta": f"connector.class=delta\ntable.path={delta}\nkey.fields=id\nstarting-version=latest\n"}
    try:
        import icebergkit
        icebergkit.unpack()
        ice = work / "iceberg"
        if not ice.exists():
            shutil.copytree(icebergkit.WAREHOUSE / "db" / "cow_v2", ice)
        tables["iceberg"] = (f"connector.class=iceberg\ntable.path={ice}\nkey.mode=none\n"
                             "starting-strategy=INCREMENTAL_FROM_LATEST_SNAPSHOT\n")
    except Exception as e:  # the fixtures are not beside the repo
        print(f"# no Iceberg idle connectors: {e}", file=sys.stderr)
    return tables


def process_stats(pid):
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS"))
    return cpu, len(os.listdir(f"/proc/{pid}/task")), rss // 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=199)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--every", type=float, default=2)
    ap.add_argument("--interval", default="1s")
    ap.add_argument("--dir", default="/tmp/lakestream-freshness")
    ap.add_argument("--release", default="", help="idle.release for every connector (e.g. 5s); none by default")
    a = ap.parse_args()
    boot, reg = os.environ["KAFKA_BOOTSTRAP"], os.environ["SCHEMA_REGISTRY_URL"]
    work = Path(a.dir)
    work.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    props = work / f"props-{tag}"
    props.mkdir()
    common = f"bootstrap.servers={boot}\nschema.registry.url={reg}\nread.streaming.check-interval={a.interval}\n"
    if a.release:
        common += f"idle.release={a.release}\n"
    tables = idle_tables(work)
    kinds = sorted(tables)
    for i in range(a.idle):
        name = f"idle-{tag}-{i}"
        (props / f"{name}.properties").write_text(f"name={name}\ntopic={name}\n{common}{tables[kinds[i % len(kinds)]]}")
    live = work / f"live-{tag}"
    deltalake.write_deltalake(str(live), pa.table({"id": pa.array([0], pa.int64()), "at": pa.array([0.0])}))
    topic = f"fresh-{tag}"
    (props / "live.properties").write_text(f"name=fresh-{tag}\ntopic={topic}\n{common}connector.class=delta\n"
                                           f"table.path={live}\nkey.fields=id\nstarting-version=latest\n")
    log = open(work / f"run-{tag}.log", "w")
    proc = subprocess.Popen([str(BIN), "run", *map(str, sorted(props.iterdir()))], stderr=log)
    received, committed = {}, {}
    stop = threading.Event()

    def consume():
        c = Consumer({"bootstrap.servers": boot, "group.id": f"fresh-{tag}", "isolation.level": "read_committed",
                      "auto.offset.reset": "earliest", "fetch.wait.max.ms": 20, "enable.auto.commit": False})
        c.subscribe([topic])
        while not stop.is_set():
            m = c.poll(0.05)
            if m is None or m.error() or m.key() is None:
                continue
            now = time.time()
            # the key: Confluent framing (5 bytes), then the Avro record {id: ["null", "long"]}:
            # the union's branch, then the id (zig-zag varints)
            varints, v, shift = [], 0, 0
            for b in m.key()[5:]:
                v |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    varints.append((v >> 1) ^ -(v & 1))
                    v, shift = 0, 0
            received.setdefault(varints[-1], now)
        c.close()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    try:
        time.sleep(20 + a.idle * 0.05)  # every connector connected and caught up
        assert proc.poll() is None, "lakestream exited; see " + log.name
        cpu0, _, _ = process_stats(proc.pid)
        t0, i = time.time(), 0
        while time.time() - t0 < a.seconds:
            i += 1
            deltalake.write_deltalake(str(live), pa.table({"id": pa.array([i], pa.int64()), "at": [time.time()]}),
                                      mode="append")
            committed[i] = time.time()
            time.sleep(max(0.0, t0 + i * a.every - time.time()))
        time.sleep(5)
        cpu1, threads, rss = process_stats(proc.pid)
        elapsed = time.time() - t0
    finally:
        stop.set()
        proc.terminate()
        proc.wait(60)
        t.join(5)
    lat = sorted(received[k] - committed[k] for k in committed if k in received)
    missing = [k for k in committed if k not in received]
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else lat * 99
    print(f"idle={a.idle} interval={a.interval} release={a.release or 'off'} every={a.every}s commits={len(committed)} seen={len(lat)} missing={len(missing)} "
          f"p50={q[49]:.3f}s p99={q[98]:.3f}s max={lat[-1]:.3f}s cpu={(cpu1 - cpu0) / elapsed:.3f} cores "
          f"threads={threads} rss={rss} MiB")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
