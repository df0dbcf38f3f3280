"""Iceberg tables written by Spark (Iceberg 1.10.2's runtime), for `sparkkit.written`: a Hadoop
catalog table in the scenario's format version, a seeded SQL history — INSERT, UPDATE, DELETE,
MERGE, compaction (`rewrite_data_files`) — written copy-on-write or merge-on-read (position
deletes in v2, deletion vectors in v3), and the oracle Spark gives: the table as of every snapshot.

A scenario: {"name", "format": "iceberg", "seed", "rows", "format_version", "mode":
"copy-on-write" | "merge-on-read"}."""

from pathlib import Path

from sparkkit import Dml


def statements(s, t, rng):
    mode = s["mode"]
    out = [f"CREATE TABLE {t} (id BIGINT NOT NULL, part STRING, name STRING, amount DOUBLE) USING iceberg "
           f"PARTITIONED BY (part) TBLPROPERTIES ('format-version' = '{s['format_version']}', "
           f"'write.delete.mode' = '{mode}', 'write.update.mode' = '{mode}', 'write.merge.mode' = '{mode}')"]
    dml = Dml(rng, t, ["id", "part", "name", "amount"], s["rows"])
    out.append(dml.first)
    catalog, table = t.split(".", 1)
    compact = f"CALL {catalog}.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))"
    for n, kind in enumerate(["update", "delete", "merge", "insert", "compact", "update", "merge", "delete"]):
        out.append(dml.statement(kind, n) or compact)
    return out


def write(spark, s, path: Path, rng):
    catalog = "lakestream_" + s["name"].replace("-", "_")
    spark.conf.set(f"spark.sql.catalog.{catalog}", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(f"spark.sql.catalog.{catalog}.type", "hadoop")
    spark.conf.set(f"spark.sql.catalog.{catalog}.warehouse", str(path))
    t = f"{catalog}.db.t"
    for sql in statements(s, t, rng):
        spark.sql(sql)
    snapshots = {}
    for r in spark.sql(f"SELECT snapshot_id, operation FROM {t}.snapshots").collect():
        df = spark.read.option("snapshot-id", r["snapshot_id"]).table(t)
        if s["format_version"] >= 3:
            df = df.select("_row_id", "_last_updated_sequence_number", *df.columns)
        rows = df.collect()
        snapshots[str(r["snapshot_id"])] = {"operation": r["operation"], "rows": [x.asDict() for x in rows]}
    return {"table": str(path / "db" / "t"), "snapshots": snapshots}
