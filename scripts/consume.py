#!/usr/bin/env python3
"""Print a lakestream topic's change events, decoded (read_committed; Confluent Avro via the
registry). Usage: consume.py BOOTSTRAP REGISTRY_URL TOPIC [SECONDS]"""

import io
import json
import struct
import sys
import time

import fastavro
import requests
from confluent_kafka import Consumer

bootstrap, registry, topic = sys.argv[1:4]
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 30
schemas = {}


def decode(b):
    if b is None:
        return None
    sid = struct.unpack(">I", b[1:5])[0]
    if sid not in schemas:
        schemas[sid] = fastavro.parse_schema(json.loads(requests.get(f"{registry}/schemas/ids/{sid}").json()["schema"]))
    return fastavro.schemaless_reader(io.BytesIO(b[5:]), schemas[sid])


c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-{time.time()}", "auto.offset.reset": "earliest",
              "isolation.level": "read_committed"})
c.subscribe([topic])
end = time.time() + seconds
while time.time() < end:
    m = c.poll(0.5)
    if m is None or m.error():
        continue
    key, ev = decode(m.key()), decode(m.value())
    if ev is None:
        print(f"tombstone key={key}")
        continue
    row = ev["after"] or ev["before"]
    short = {k: row[k] for k in ("id", "part", "round", "v1") if k in row}
    print(f"{ev['op']} instant={ev['source']['instant']} key={key} {short}")
c.close()
