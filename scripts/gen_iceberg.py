"""Writes the Iceberg benchmark table with pyiceberg (an independent writer): ROWS rows in one
append over 10 identity partitions, then a copy-on-write delete of ~1% of the rows across every
file. Usage: gen_iceberg.py DIR [ROWS]; prints the table directory."""

import sys
from pathlib import Path

import random
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import LessThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

out = Path(sys.argv[1]).resolve()
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
out.mkdir(parents=True, exist_ok=True)
cat = SqlCatalog("default", uri=f"sqlite:///{out}/catalog.db", warehouse=f"file://{out}/warehouse")
cat.create_namespace("bench")
schema = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "cat", StringType()),
    NestedField(3, "amount", DoubleType()),
    NestedField(4, "name", StringType()),
    NestedField(5, "ts", TimestamptzType()),
    identifier_field_ids=[1],
)
spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="cat"))
tbl = cat.create_table("bench.events", schema=schema, partition_spec=spec)
rng = random.Random(7)
data = pa.table({
    "id": pa.array(range(rows), pa.int64()),
    "cat": pa.array([f"c{i % 10}" for i in range(rows)]),
    "amount": pa.array([rng.uniform(0, 100) for _ in range(rows)]),
    "name": pa.array([f"name-{i:08d}" for i in range(rows)]),
    "ts": pa.array([1_700_000_000_000_000 + i * 1000 for i in range(rows)], pa.timestamp("us", tz="UTC")),
}, schema=schema.as_arrow())
tbl.append(data)
tbl.delete(LessThan("amount", 1.0))
print(Path(tbl.location().removeprefix("file://")))
