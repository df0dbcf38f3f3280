"""The reference writers for tests (issue 30): Spark 3.5 (PyPI `pyspark`) with the Hudi, Delta and
Iceberg jars from Maven Central, writing tables from a small scenario description (a seeded random
history), each with its oracle taken from Spark itself: the table as of every instant and Spark's
own change query of it. Written tables are cached under /var/cache by the scenario's hash, so a
test run pays the JVM start-up only when a scenario (or this file's writer) changed.

    python tests/sparkkit.py install            # the jars (pyspark comes from requirements.txt)
    python tests/sparkkit.py prewrite           # every test module's scenarios not cached yet
    python tests/sparkkit.py write FORMAT SCENARIOS.json   # what `written()` runs

Tests call `skip_reason()` first: no Java, no pyspark or no jars is a skip with a clear message.
"""

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("LAKESTREAM_SPARK_CACHE", "/var/cache/lakestream-spark"))
M2 = Path(os.environ.get("LAKESTREAM_M2", "/var/cache/lakestream-m2"))
# (group, artifact, version): bundles, shaded; nothing else is needed beside pyspark's own jars
JARS = [
    ("org.apache.hudi", "hudi-spark3.5-bundle_2.12", "1.1.1"),
    ("io.delta", "delta-spark_2.12", "3.3.2"),
    ("io.delta", "delta-storage", "3.3.2"),
    ("org.apache.iceberg", "iceberg-spark-runtime-3.5_2.12", "1.10.2"),
]
# each writer's own version: a change to how its tables are written or oracles taken rewrites them
WRITER_VERSION = {"hudi": 2, "delta": 7, "iceberg": 4}


def _pom():
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>"
        "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
        "</dependency>" for g, a, v in JARS)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>lakestream</groupId><artifactId>spark-writers</artifactId><version>1</version>"
            f"<dependencies>{deps}</dependencies></project>")


def jars_dir():
    return CACHE / ("jars-" + hashlib.sha256(_pom().encode()).hexdigest()[:12])


def install():
    """The jars, once (about 130 MB; ~40 s from Maven Central)."""
    libs = jars_dir()
    if not libs.is_dir():
        sys.path.insert(0, str(HERE))
        from mavenlibs import copy_dependencies
        copy_dependencies(_pom(), libs, M2)
    return sorted(libs.glob("*.jar"))


def skip_reason():
    """Why the Spark writers cannot run here (None: they can)."""
    if shutil.which("java") is None:
        return "no java on PATH: the Spark reference writers need Java 17"
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (tests/requirements.txt)"
    if not jars_dir().is_dir():
        return f"the Spark writers' jars are not installed: run `python tests/sparkkit.py install` ({jars_dir()})"
    return None


# scenario entries for the test, not the writer (nor the cache key): the connector's settings
# for the table, the scenario whose change feed is this one's oracle
TEST_KEYS = ("connector", "twin")


def written(scenarios):
    """The tables of `scenarios` (a list of dicts, see `sparkhudi`, `sparkdelta`, `sparkiceberg`),
    written by Spark once and cached: {scenario name: (table path, oracle)}. One JVM per format
    writes every scenario not cached yet.
    A scenario's test-side entries (`TEST_KEYS`) are not the writer's."""
    out, todo = {}, []
    for s in ({k: v for k, v in s.items() if k not in TEST_KEYS} for s in scenarios):
        key = hashlib.sha256(json.dumps([WRITER_VERSION[s["format"]], s], sort_keys=True).encode()).hexdigest()[:16]
        d = CACHE / "tables" / f"{s['name']}-{key}"
        out[s["name"]] = d
        if not (d / "oracle.json").is_file():
            todo.append((s, d))
    if todo:
        # written in place (an Iceberg table's metadata names its files by absolute path); the
        # oracle, written last, is what says a table is whole
        for _, d in todo:
            shutil.rmtree(d, ignore_errors=True)
            d.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="spark-", dir=CACHE))
        try:
            # one JVM per format: Hudi's and Delta's session catalogs cannot share one
            for fmt in sorted({s["format"] for s, _ in todo}):
                spec = work / f"{fmt}.json"
                spec.write_text(json.dumps([{**s, "out": str(d)} for s, d in todo if s["format"] == fmt]))
                r = subprocess.run([sys.executable, __file__, "write", fmt, str(spec)], capture_output=True,
                                   text=True, timeout=3600)
                if r.returncode != 0:
                    raise RuntimeError(f"the Spark writer failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return {name: (d / "table", json.loads((d / "oracle.json").read_text())) for name, d in out.items()}


def written_or_skip(scenarios):
    """`written`, or the test skipped saying why the writers cannot run here."""
    reason = skip_reason()
    if reason:
        import pytest
        pytest.skip(reason)
    return written(scenarios)


class Dml:
    """The row-level statements of a seeded SQL history on a table keyed by `id` (Delta's and
    Iceberg's writers share them): UPDATE / DELETE of a residue class of ids, INSERT of new ids,
    MERGE of old and new ids. `cols` may change as the history alters the table."""

    VALUE = {
        "id": lambda rng, i, gen: str(i),
        "part": lambda rng, i, gen: f"'p{i % 3}'",
        "name": lambda rng, i, gen: f"'n{gen}_{rng.randrange(10**6)}'",
        "amount": lambda rng, i, gen: "NULL" if rng.random() < 0.1 else str(round(rng.uniform(0, 1000), 2)),
        "day": lambda rng, i, gen: f"DATE'2024-01-01' + {rng.randrange(365)}",
        "due": lambda rng, i, gen: f"DATE'2024-01-01' + {rng.randrange(365)}",
        "note": lambda rng, i, gen: f"'x{rng.randrange(100)}'",
        "seen": lambda rng, i, gen: "NULL" if rng.random() < 0.1 else f"timestamp_micros({1_700_000_000_000_000 + rng.randrange(10**13)})",
    }

    def __init__(self, rng, table, cols, rows):
        self.rng, self.t, self.cols, self.next_id = rng, table, list(cols), rows
        self.first = f"INSERT INTO {table} ({', '.join(self.cols)}) VALUES {self.values(range(rows), 0)}"

    def values(self, ids, gen):
        return ", ".join("(" + ", ".join(self.VALUE[c](self.rng, i, gen) for c in self.cols) + ")" for i in ids)

    def statement(self, kind, n):
        """The SQL of one `kind` of change ("update", "delete", "insert", "merge"), or None."""
        t, listed = self.t, ", ".join(self.cols)
        m, r = self.rng.randrange(7, 15), self.rng.randrange(7)
        if kind == "update":
            return f"UPDATE {t} SET name = concat(name, '+{n}'), amount = amount + 1 WHERE id % {m} = {r}"
        if kind == "delete":
            return f"DELETE FROM {t} WHERE id % {m} = {r}"
        if kind == "insert":
            self.next_id += 20
            return f"INSERT INTO {t} ({listed}) VALUES {self.values(range(self.next_id - 20, self.next_id), n)}"
        if kind == "merge":
            ids = self.rng.sample(range(self.next_id), 15) + list(range(self.next_id, self.next_id + 10))
            self.next_id += 10
            sets = ", ".join(f"t.{c} = s.{c}" for c in self.cols if c not in ("id", "part"))
            return (f"MERGE INTO {t} t USING (SELECT * FROM VALUES {self.values(ids, n)} AS s({listed})) s "
                    f"ON t.id = s.id WHEN MATCHED THEN UPDATE SET {sets} "
                    f"WHEN NOT MATCHED THEN INSERT ({listed}) VALUES ({', '.join('s.' + c for c in self.cols)})")
        return None


# ---------------------------------------------------------------- inside the writer's process

FORMAT_CONF = {
    "hudi": {
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
        "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
    },
    "delta": {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # small checkpoint parts: a v2 checkpoint then has its file actions in sidecars
        "spark.databricks.delta.checkpoint.partSize": "20",
        # a snapshot's state in 2 partitions, not 50 (each statement took seconds of tiny tasks)
        "spark.databricks.delta.snapshotPartitions": "2",
    },
    "iceberg": {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    },
}


def session(fmt):
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.master("local[2]").appName("lakestream-writers")
         .config("spark.jars", ",".join(str(j) for j in install()))
         .config("spark.driver.memory", "2g")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.default.parallelism", "2")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC"))
    for k, v in FORMAT_CONF[fmt].items():
        b = b.config(k, v)
    return b.getOrCreate()


def main(argv):
    if argv[:1] == ["install"]:
        print("\n".join(str(j) for j in install()))
        return 0
    if argv[:1] == ["prewrite"]:
        # every Spark-written scenario of the test modules, not cached yet (one JVM a format)
        import test_hudi_merge_semantics
        import test_spark_delta
        import test_spark_hudi
        import test_spark_iceberg
        scenarios = (test_spark_hudi.SCENARIOS + test_spark_hudi.CLEANING
                     + [test_spark_hudi.CLEANING_NO_CDC, test_spark_hudi.RESTORE]
                     + test_hudi_merge_semantics.SCENARIOS
                     + test_spark_delta.SCENARIOS + test_spark_iceberg.SCENARIOS)
        if skip_reason():
            print(f"not written: {skip_reason()}")
            return 0
        import time
        started = time.monotonic()
        written(scenarios)
        print(f"{len(scenarios)} scenarios written or cached in {time.monotonic() - started:.0f} s")
        return 0
    if argv[:1] == ["write"] and len(argv) == 3:
        import sparkdelta
        import sparkhudi
        import sparkiceberg
        spark = session(argv[1])
        spark.sparkContext.setLogLevel("WARN")
        for s in json.loads(Path(argv[2]).read_text()):
            out = Path(s["out"])
            out.mkdir(parents=True)
            writer = {"hudi": sparkhudi.write, "delta": sparkdelta.write, "iceberg": sparkiceberg.write}[s["format"]]
            oracle = writer(spark, s, out / "table", random.Random(s["seed"]))
            (out / "oracle.json.tmp").write_text(json.dumps(oracle, default=str))
            (out / "oracle.json.tmp").rename(out / "oracle.json")
        spark.stop()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main(sys.argv[1:]))
