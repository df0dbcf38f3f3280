"""Resync cost (issue 60), at each size, in one run, next to the two reads it is weighed against:

* **rescan**: `run --once` streaming the table whole into a new topic (`starting-version=earliest`)
  — what a connector stopped for good used to need (a new name, a new topic, every consumer
  starting over);
* **verify**: `lakestream verify` of that topic against the table;
* **resync**: the table then changes 1 % of its rows (updates, deletes, inserts), checkpoints, and
  its log before the checkpoint is cleaned: the stopped connector's next commit is gone, and its
  next `run --once` resyncs the N-key topic to the N-row table.

A Delta table written with deltalake (id, part of 16, an int and a 24-byte string), its rows in
files of up to 1M rows. Each figure is one run's wall seconds (whole process: start-up and the
Kafka transactions included), peak RSS (`/usr/bin/time`), and the bytes read (table: what the
source read from storage; topic: keys and values read back). Default `read.memory.budget`
(256 MiB) unless BENCH_BUDGET is set. Needs KAFKA_BOOTSTRAP, SCHEMA_REGISTRY_URL and a release
binary (CARGO_TARGET_DIR or target/). Usage: bench_resync.py [SIZES] (default 1000000,4000000)."""

import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "lakestream"
CHUNK = 1_000_000


def rows(rng, ids, tag):
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "part": pa.array([f"p{i % 16:02d}" for i in ids]),
        "v": pa.array([rng.randrange(10**12) for _ in range(n)], pa.int64()),
        "s": pa.array([f"{tag}-{i:018d}" for i in ids]),
    })


def write(path, n, rng):
    for start in range(0, n, CHUNK):
        ids = list(range(start, min(n, start + CHUNK)))
        deltalake.write_deltalake(str(path), rows(rng, ids, "a"), mode="append", partition_by=["part"])


def change(path, n, rng):
    """1 % of the rows: a third updated, a third deleted, a third inserted; then a checkpoint
    and the commits before it removed (log cleanup)."""
    t = deltalake.DeltaTable(str(path))
    k = n // 300
    upd = list(range(11, n, 300))
    t.delete("id % 300 = 7")
    t = deltalake.DeltaTable(str(path))
    t.merge(rows(rng, upd + list(range(n, n + k)), "b"), "s.id = t.id", source_alias="s", target_alias="t") \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    t = deltalake.DeltaTable(str(path))
    t.create_checkpoint()
    for f in (path / "_delta_log").glob("*.json"):
        if int(f.name[:20]) < t.version():
            f.unlink()
    return len(upd) + k + len(range(7, n, 300))


def timed(args):
    t = time.time()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", str(BIN), *args], capture_output=True, text=True)
    secs = time.time() - t
    if r.returncode not in (0, 3):
        sys.exit(f"lakestream {args[0]} failed: {r.stderr[-3000:]}")
    rss = int(r.stderr.strip().splitlines()[-1]) / 1024
    return secs, rss, r.stderr, r.returncode


def field(log, line, name):
    for ln in log.splitlines():
        if line in ln:
            m = re.search(rf"\b{name}=(\d+)", ln)
            if m:
                return int(m.group(1))
    return 0


def main():
    sizes = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "1000000,4000000").split(",")]
    if not BIN.exists():
        sys.exit(f"no release binary at {BIN}: cargo build --release")
    budget = os.environ.get("BENCH_BUDGET")
    out = []
    for n in sizes:
        rng = random.Random(n)
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
            path = Path(d) / "table"
            t = time.time()
            write(path, n, rng)
            print(f"{n}: table written in {time.time() - t:.0f} s", file=sys.stderr)
            topic = "bench-resync-" + uuid.uuid4().hex[:8]
            p = Path(d) / "c.properties"
            p.write_text(f"name={topic}\nconnector.class=delta\ntable.path={path}\ntopic={topic}\n"
                         f"bootstrap.servers={os.environ['KAFKA_BOOTSTRAP']}\n"
                         f"schema.registry.url={os.environ['SCHEMA_REGISTRY_URL']}\n"
                         f"offsets.storage.topic={topic}-offsets\nkey.fields=id\nstarting-version=earliest\n"
                         f"topic.creation.default.partitions=8\nread.spill.dir={d}/spill\n"
                         + (f"read.memory.budget={budget}\n" if budget else ""))
            rescan = timed(["run", "--once", str(p)])
            rescan_bytes = field(rescan[2], "task stopped", "bytes_read")
            verify = timed(["verify", str(p)])
            verify_bytes = (field(verify[2], "verify: topic read", "bytes"), field(verify[2], "verify: table read", "bytes"))
            changed = change(path, n, rng)
            resync = timed(["run", "--once", str(p)])
            assert "resync finished" in resync[2], resync[2][-3000:]
            resync_bytes = (field(resync[2], "both sides read", "topic_bytes"),
                            field(resync[2], "both sides read", "table_bytes"))
            events = sum(field(resync[2], "resync finished", k) for k in ("created", "updated", "deleted"))
            check = timed(["verify", str(p)])
            assert check[3] == 0, f"not equal after the resync: {check[2][-2000:]}"
            mib = lambda b: f"{b / 2**20:.0f} MiB"
            out.append(
                f"| {n:,} | rescan {rescan[0]:.1f} s, {rescan[1]:.0f} MiB, table {mib(rescan_bytes)} "
                f"| verify {verify[0]:.1f} s, {verify[1]:.0f} MiB, topic {mib(verify_bytes[0])} + table {mib(verify_bytes[1])} "
                f"| resync {resync[0]:.1f} s, {resync[1]:.0f} MiB, topic {mib(resync_bytes[0])} + table {mib(resync_bytes[1])}, "
                f"{events:,} events for {changed:,} changed rows |")
            print(out[-1], flush=True)
    print("| rows | full rescan into a new topic | verify | resync (1 % changed across the gap) |")
    print("|---|---|---|---|")
    print("\n".join(out))


if __name__ == "__main__":
    main()
