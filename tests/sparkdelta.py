"""Delta tables written by Spark (delta-spark 3.3.2), for `sparkkit.written`: a seeded history of
SQL — INSERT, UPDATE, DELETE, MERGE, OPTIMIZE, ADD/RENAME/DROP COLUMN — on a table with the scenario's
features, and the oracle Spark gives: the table as of every version (`versionAsOf`) and, where
the change data feed is on, `table_changes` of every version; with row tracking each row's
`_row_id` and `_row_commit_version`.

A scenario: {"name", "format": "delta", "seed", "rows", "versions", "partitioned", "cdf",
"dv" (deletion vectors), "column_mapping" ("name" | "id" | null), "row_tracking", "v2_checkpoint"}.
Scenarios that differ only in their features write the same rows (the history depends on the
seed alone), so a table without the change feed has its twin's `table_changes` as its oracle."""

import datetime as dt
import json
from pathlib import Path

from sparkkit import Dml

# `seen`: Spark writes a TIMESTAMP as INT96 (`spark.sql.parquet.outputTimestampType`), zone-less nanoseconds
COLUMNS = "id BIGINT NOT NULL, part STRING, name STRING, amount DOUBLE, day DATE, seen TIMESTAMP"


def properties(s):
    p = {"delta.checkpointInterval": "4"}
    if s.get("cdf"):
        p["delta.enableChangeDataFeed"] = "true"
    if s.get("dv"):
        p["delta.enableDeletionVectors"] = "true"
    if s.get("column_mapping"):
        p["delta.columnMapping.mode"] = s["column_mapping"]
    if s.get("row_tracking"):
        p["delta.enableRowTracking"] = "true"
    if s.get("v2_checkpoint"):
        p["delta.checkpointPolicy"] = "v2"
    return p


def statements(s, t, rng):
    """The history: SQL statements, one version each (CREATE is version 0)."""
    parts = " PARTITIONED BY (part)" if s.get("partitioned", True) else ""
    props = ", ".join(f"'{k}' = '{v}'" for k, v in properties(s).items())
    out = [f"CREATE TABLE {t} ({COLUMNS}) USING delta{parts} TBLPROPERTIES ({props})"]
    dml = Dml(rng, t, ["id", "part", "name", "amount", "day", "seen"], s["rows"])
    out.append(dml.first)
    kinds = ["update", "delete", "merge", "insert", "update", "optimize", "merge", "rename_column", "delete",
             "add_column", "merge", "update", "delete"]
    for n, kind in enumerate(kinds[: s["versions"] - 2]):
        sql = dml.statement(kind, n)
        if sql is None and kind == "optimize":
            sql = f"OPTIMIZE {t}"
        elif kind == "rename_column" and s.get("column_mapping"):  # a rename needs column mapping
            sql = f"ALTER TABLE {t} RENAME COLUMN day TO due"
            dml.cols[dml.cols.index("day")] = "due"
        elif kind == "rename_column":
            sql = f"ALTER TABLE {t} ADD COLUMNS (extra STRING)"
        elif sql is None and s.get("column_mapping"):  # a dropped column needs column mapping
            sql = f"ALTER TABLE {t} DROP COLUMN due"
            dml.cols.remove("due")
        elif sql is None:
            sql = f"ALTER TABLE {t} ADD COLUMNS (note STRING)"
            dml.cols.append("note")
        out.append(sql)
    return out


def instants(row):
    """A row with its timestamps as the changelog's text (`testkit.norm`): Spark hands them out
    as zone-less datetimes in the session's zone, UTC."""
    return {k: v.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if isinstance(v, dt.datetime) else v for k, v in row.items()}


def write(spark, s, path: Path, rng):
    t = f"delta.`{path}`"
    for sql in statements(s, t, rng):
        spark.sql(sql)
    history = {r["version"]: r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {t}").collect()}
    latest = max(history)
    versions = {}
    for v in range(latest + 1):
        df = spark.read.format("delta").option("versionAsOf", v).load(str(path))
        if s.get("row_tracking"):
            # row tracking's lineage of each row (the keyless test's oracle)
            df = df.select(df["_metadata.row_id"].alias("_row_id"),
                           df["_metadata.row_commit_version"].alias("_row_commit_version"), *df.columns)
        rows = df.collect()
        versions[v] = [instants(r.asDict()) for r in rows]
    changes = None
    if s.get("cdf"):
        # version by version: one read across a dropped column fails (its schema is the end's)
        changes = {}
        for v in range(1, latest + 1):
            feed = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", v)
                    .option("endingVersion", v).load(str(path)).collect())
            for r in feed:
                d = r.asDict()
                kind = d.pop("_change_type")
                assert d.pop("_commit_version") == v
                d.pop("_commit_timestamp", None)
                changes.setdefault(v, []).append({"type": kind, "row": instants(d)})
    return {"operations": history, "versions": versions, "changes": changes,
            "protocol": protocol(path)}


def protocol(path: Path):
    """The table's newest protocol action (what the test asserts the features by)."""
    found = None
    for f in sorted((path / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            a = json.loads(line)
            if "protocol" in a:
                found = a["protocol"]
    return found
