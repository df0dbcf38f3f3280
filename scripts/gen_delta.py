"""Writes the Delta benchmark tables with delta-rs (PyPI `deltalake`, an independent writer): ROWS
rows in one write over 10 partitions, then a MERGE that updates 10 % of the rows and inserts 1 %,
then a DELETE of ~1 %; once with the change data feed on (`cdf/`) and once without (`plain/`).
Usage: gen_delta.py DIR [ROWS]; prints the two table directories."""

import random
import sys
from pathlib import Path

import pyarrow as pa
import deltalake

out = Path(sys.argv[1]).resolve()
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
rng = random.Random(7)


def data(ids):
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "cat": pa.array([f"c{i % 10}" for i in ids]),
        "amount": pa.array([rng.uniform(0, 100) for _ in ids]),
        "name": pa.array([f"name-{i:08d}" for i in ids]),
        "ts": pa.array([1_700_000_000_000_000 + i * 1000 for i in ids], pa.timestamp("us", tz="UTC")),
    })


base = data(list(range(rows)))
upsert = data(sorted(rng.sample(range(rows), rows // 10)) + list(range(rows, rows + rows // 100)))
for name, conf in [("cdf", {"delta.enableChangeDataFeed": "true"}), ("plain", {})]:
    p = str(out / name)
    deltalake.write_deltalake(p, base, partition_by=["cat"], configuration=conf)
    (deltalake.DeltaTable(p).merge(upsert, "s.id = t.id", source_alias="s", target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    deltalake.DeltaTable(p).delete("amount < 1.0")
    print(p)
