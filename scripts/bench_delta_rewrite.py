"""Delta rewrite cost (issue 30), at each size, in one run: a keyless table with row tracking
written by Spark 3.5 / delta-spark 3.3 (`tests/sparkkit.py`; deletion vectors off, so an UPDATE
rewrites whole files), 4 partitions of one file each; version 2 updates 1 % of the rows (in one
partition), version 3 updates 10 % (in two). Each version is read by:
* lakestream `run --once` (`key.mode=none`, `starting-version=v`, `ending-version=v`) with the
  default `read.change.detection=narrow` (row tracking tells carried-over rows; median of RUNS)
  and with `full` (both sides of the rewrite read whole and compared);
* the reference: what a Spark Delta stream with `ignoreChanges` emits for a rewrite, every row of
  the version's added files (no deletes, no before images), read whole with pyarrow.

Times are wall seconds of the whole process (lakestream's include start-up and the Kafka
transaction). Needs KAFKA_BOOTSTRAP, SCHEMA_REGISTRY_URL, a built release binary
(CARGO_TARGET_DIR or target/), Java and the Spark jars (`python tests/sparkkit.py install`).
Usage: bench_delta_rewrite.py [SIZES] (default 1000000,4000000) [RUNS] (default 3)."""

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import sparkkit  # noqa: E402

BIN = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "lakestream"


def write(spark, path, rows):
    t = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {t} (id BIGINT, part INT, name STRING, amount DOUBLE, ts TIMESTAMP) USING delta "
              "PARTITIONED BY (part) TBLPROPERTIES ('delta.enableRowTracking' = 'true', "
              "'delta.enableDeletionVectors' = 'false')")
    (spark.range(rows).selectExpr("id", "cast(id % 4 as int) part", "concat('name-', id) name",
                                  "rand(7) * 100 amount", "timestamp_seconds(1700000000 + id) ts")
     .repartition("part").write.format("delta").mode("append").save(str(path)))
    spark.sql(f"UPDATE {t} SET amount = amount + 1 WHERE part = 0 AND id % 25 = 0")  # 1 %
    spark.sql(f"UPDATE {t} SET amount = amount + 1 WHERE part IN (1, 2) AND id % 5 = 0")  # 10 %


def lakestream(table, version, extra=""):
    """(seconds, peak RSS MiB, the run's `unit emitted` line)."""
    topic = "bench-delta-" + uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.properties"
        p.write_text(f"name={topic}\nconnector.class=delta\ntable.path={table}\ntopic={topic}\n"
                     f"bootstrap.servers={os.environ['KAFKA_BOOTSTRAP']}\n"
                     f"schema.registry.url={os.environ['SCHEMA_REGISTRY_URL']}\n"
                     f"offsets.storage.topic={topic}-offsets\nkey.mode=none\n"
                     f"starting-version={version}\nending-version={version}\n{extra}")
        t = time.time()
        r = subprocess.run(["/usr/bin/time", "-f", "%M", str(BIN), "run", "--once", str(p)],
                           capture_output=True, text=True)
        secs = time.time() - t
    if r.returncode != 0:
        sys.exit(f"lakestream failed: {r.stderr[-2000:]}")
    unit = next((ln for ln in r.stderr.splitlines() if "unit emitted" in ln), "")
    rss = int(r.stderr.strip().splitlines()[-1]) / 1024
    return secs, rss, unit[unit.find("c="):]


def reference(table, version):
    """Every row of the version's added files, read whole: (rows, seconds)."""
    t = time.time()
    log = table / "_delta_log" / f"{version:020d}.json"
    adds = [a["add"]["path"] for a in map(json.loads, log.read_text().splitlines()) if "add" in a]
    rows = sum(pq.read_table(table / p).num_rows for p in adds)
    return rows, time.time() - t


def main():
    sizes = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "1000000,4000000").split(",")]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if not BIN.exists():
        sys.exit(f"no release binary at {BIN}: cargo build --release")
    if reason := sparkkit.skip_reason():
        sys.exit(reason)
    spark = sparkkit.session("delta")
    spark.sparkContext.setLogLevel("WARN")
    with tempfile.TemporaryDirectory() as d:
        tables = {}
        for n in sizes:
            t0 = time.time()
            tables[n] = Path(d) / f"delta-{n}"
            write(spark, tables[n], n)
            print(f"wrote {n:,} rows with Spark (row tracking on, DVs off) in {time.time() - t0:.0f} s", flush=True)
        spark.stop()
        print("| rows | change | lakestream narrow | full diff | reference (added files whole) | reference ÷ narrow |")
        print("|---|---|---|---|---|---|")
        for n, table in tables.items():
            for version, pct in [(2, "1 %"), (3, "10 %")]:
                narrow = sorted(lakestream(table, version) for _ in range(runs))[runs // 2]
                full = lakestream(table, version, "read.change.detection=full\n")
                rows, ref = reference(table, version)
                print(f"| {n:,} | {pct} | {narrow[0]:.2f} s / {narrow[1]:.0f} MiB | {full[0]:.2f} s / {full[1]:.0f} MiB "
                      f"| {ref:.2f} s ({rows:,} rows) | {ref / narrow[0]:.2f} |", flush=True)
                print(f"    narrow: {narrow[2]}\n    full:   {full[2]}", flush=True)


if __name__ == "__main__":
    main()
