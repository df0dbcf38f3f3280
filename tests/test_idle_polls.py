"""Idle polls fetch nothing unchanged (issue 32), measured against the S3 server's own request
log (moto, path-style, on loopback): four caught-up connectors in one process — Hudi table
versions 6 and 9 (the latter with an archived LSM history), a Delta table whose log grew past
1,000 versions, an Iceberg table in a Hadoop directory — poll every second; over several seconds
each asks S3 at most two requests a poll, and never GETs an object. The connector's own counter
(`lakestream_storage_requests_total`) agrees with the log."""

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import icebergkit
import testkit
from conftest import free_port, require_fixtures, wait_port
from test_metrics import scrape, value
from test_object_storage import CREDS, mirror, s3_props

boto3 = pytest.importorskip("boto3")
deltalake = pytest.importorskip("deltalake")

LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)?(GET|HEAD|PUT|POST|DELETE) (/[^ ?]*)(\?\S*)? HTTP')


@pytest.fixture
def s3_logged(tmp_path):
    """A moto S3 server whose request log is kept: (endpoint, boto3 client, log path)."""
    port, log = free_port(), tmp_path / "moto.log"
    server = Path(sys.executable).parent / "moto_server"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out,
                                env={**os.environ, **CREDS})
    wait_port("127.0.0.1", port)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                          region_name="us-east-1")
    yield endpoint, client, log
    proc.terminate()
    proc.wait(10)


def requests_by_bucket(log: Path, skip: int):
    """The logged requests after the first `skip` lines: {bucket: [(method, key, query)]}, and the
    number of lines."""
    lines = log.read_text(errors="replace").splitlines()
    out = {}
    for line in lines[skip:]:
        m = LINE.search(line)
        if m:
            bucket, _, key = m.group(2).lstrip("/").partition("/")
            out.setdefault(bucket, []).append((m.group(1), key, m.group(3) or ""))
    return out, len(lines)


def long_delta_log(path: Path, versions: int):
    """A small Delta table whose log holds `versions` commits (one-row appends, no checkpoint)."""
    import pyarrow as pa
    deltalake.write_deltalake(str(path), pa.table({"id": pa.array([0], pa.int64()), "v": ["0"]}))
    for i in range(1, versions):
        deltalake.write_deltalake(str(path), pa.table({"id": pa.array([i], pa.int64()), "v": [str(i)]}), mode="append")


def test_idle_polls_ask_at_most_two_requests_and_fetch_nothing(env, tmp_path, s3_logged):
    require_fixtures()
    endpoint, client, log = s3_logged
    tables = {}
    # Hudi table version 6 (the generator's), and version 9 with an archived history
    v6 = tmp_path / "hudi6"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--path", str(v6), "--rows", "200", "--partitions", "2",
                        "--commits", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    tables["hudi6"] = (v6, {"read.start-commit": "latest"})
    v9 = testkit.extract("generated/long_history_mor_v9", tmp_path / "hudi9")
    assert (v9 / ".hoodie" / "timeline" / "history").is_dir(), "the fixture has no archived history"
    tables["hudi9"] = (v9, {"read.start-commit": "latest"})
    # a Delta log past one listing page (1,000 keys): the poll lists from its newest version on
    delta = tmp_path / "delta"
    long_delta_log(delta, 1_005)
    tables["delta"] = (delta, {"connector.class": "delta", "key.fields": "id", "starting-version": "latest"})
    # an Iceberg table in a Hadoop directory (v<N>.metadata.json, version-hint.text)
    icebergkit.unpack()
    ice = tmp_path / "iceberg"
    shutil.copytree(icebergkit.WAREHOUSE / "db" / "cow_v2", ice)
    tables["iceberg"] = (ice, {"connector.class": "iceberg", "starting-strategy": "INCREMENTAL_FROM_LATEST_SNAPSHOT",
                                    "key.mode": "none"})

    files, names = [], {}
    for kind, (local, settings) in tables.items():
        bucket = f"{kind}-{uuid.uuid4().hex[:6]}"
        client.create_bucket(Bucket=bucket)
        mirror(client, bucket, local, "t")
        name = f"idle-{bucket}"
        names[kind] = (bucket, name)
        files.append(testkit.connector_props(tmp_path, name, f"s3://{bucket}/t", name, env, **s3_props(endpoint), **{
            "read.streaming.check-interval": "1s", **settings}))
    port = free_port()
    with open(tmp_path / "connector.log", "w") as err:
        proc = subprocess.Popen([str(testkit.BIN), "run", "--metrics-port", str(port), *map(str, files)],
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        def polls(text, name):
            return value(text, f'lakestream_source_poll_duration_seconds_count{{connector="{name}",task="0"}}')

        # caught up: every connector has polled a few times since its start marker
        deadline = time.time() + 90
        while True:
            text = scrape(port, "lakestream_source_poll_duration_seconds_count")
            if all(f'poll_duration_seconds_count{{connector="{n}",task="0"}}' in text and polls(text, n) >= 3
                   for _, n in names.values()):
                break
            assert proc.poll() is None, (tmp_path / "connector.log").read_text()[-3000:]
            assert time.time() < deadline, ("the connectors did not start polling: "
                                            f"{[l for l in text.splitlines() if 'poll_duration_seconds_count' in l]}\n"
                                            f"{(tmp_path / 'connector.log').read_text()[-4000:]}")
            time.sleep(0.5)
        _, skip = requests_by_bucket(log, 0)
        before = scrape(port, "lakestream_storage_requests_total")
        time.sleep(8)
        after = scrape(port, "lakestream_storage_requests_total")
        got, _ = requests_by_bucket(log, skip)
        for kind, (bucket, name) in names.items():
            n = polls(after, name) - polls(before, name)
            reqs = got.get(bucket, [])
            assert n >= 5, f"{kind}: {n} polls in 8 s"
            # the window's edges cut at most one poll's requests on each side
            assert len(reqs) <= 2 * (n + 1), f"{kind}: {len(reqs)} requests in {n} polls: {reqs[:12]}"
            objects = [r for r in reqs if r[0] == "GET" and r[1] and "list-type" not in r[2]]
            assert not objects, f"{kind}: an idle poll fetched objects: {objects[:5]}"
            counted = sum(value(after, f'lakestream_storage_requests_total{{connector="{name}",op="{op}"}}')
                          - value(before, f'lakestream_storage_requests_total{{connector="{name}",op="{op}"}}')
                          for op in ("list", "get", "ranged_get", "head"))
            assert abs(counted - len(reqs)) <= 2, f"{kind}: counted {counted}, S3 logged {len(reqs)}"
            print(f"{kind}: {len(reqs)} requests in {n} polls ({len(reqs) / n:.2f} a poll): "
                  f"{sorted({(m, q.split('&')[0]) for m, _, q in reqs})}")
        # the long Delta log is listed from its newest version, never from the start
        assert all("start-after" in q for m, _, q in got[names["delta"][0]] if m == "GET"), got[names["delta"][0]][:3]
    finally:
        proc.terminate()
        proc.wait(60)
