"""A whole lakehouse in one connector, through its catalogs (issue 61): one connector file with
`catalog.type` and no `table.identifier` streams every table the catalog holds that the include
list matches, each to `<topic.prefix>.<namespace>.<table>` — Apache Iceberg's own REST catalog
server (tables written by pyiceberg's RestCatalog), pyiceberg's SQL catalog, and AWS Glue on moto
holding Iceberg (pyiceberg's GlueCatalog, files on moto's S3), Delta and Hudi tables (registered as
Spark's catalog and Hudi's Glue sync register them). Each table is revealed commit by commit and
its topic replayed by key against the table at every step; tables created and dropped in the
catalog mid-run start and stop their streams; kill -9s at random moments lose and duplicate
nothing."""

import json
import random
import signal
import subprocess
import time
import urllib.request
import uuid

import pytest

import testkit
from icebergrest import rest_server  # noqa: F401 (the fixture)
from lakekit import Lake, Running, free_port, seed
from testkit import BIN, run_once


def scrape(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return [line for line in text.splitlines() if line.startswith(name)]


def value(lines, series):
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.rsplit(" ", 1)[0] == series)


def test_a_rest_catalogs_tables_stream_commit_by_commit_as_they_come_and_go(env, registry, tmp_path, rest_server):
    """Iceberg's REST server holds two matched tables and one the include list leaves out; a
    third matched table is created at step 2 and one dropped at step 4: after each step's
    `run --once` (half of them after one killed with -9 at a random moment) every matched
    table's topic replays to it. `verify --table` and `offsets show
    --table` name a discovered table; a search costs 1 + (namespaces) catalog requests."""
    from pyiceberg.catalog.rest import RestCatalog
    s = seed()
    lake = Lake(env, registry, tmp_path, s)
    cat = RestCatalog("rest", uri=rest_server, credential="lakestream:secret")
    ns = "d" + uuid.uuid4().hex[:6]
    lake.add_iceberg(f"{ns}.orders", cat)
    lake.add_iceberg(f"{ns}.items", cat)
    lake.add_iceberg(f"{ns}_ops.audit", cat)
    lake.tables.pop(f"{ns}_ops.audit")  # left out by the include list: never streamed
    catalog = {"catalog.type": "rest", "catalog.uri": rest_server, "catalog.credential": "lakestream:secret"}
    props = lake.props(**catalog, **{"table.include.list": f"{ns}\\\\..*"})
    name = props.read_text().split("\n")[0][len("name="):]
    rng, kills = random.Random(s), 0
    for i in range(6):
        if i == 2:
            lake.add_iceberg(f"{ns}.late", cat)
        if i == 4:
            cat.drop_table(f"{ns}.items")
            lake.tables.pop(f"{ns}.items")
        lake.advance(i)
        if rng.random() < 0.5:
            # a run killed with -9 at a random moment first: the next one resumes its streams
            proc = subprocess.Popen([str(BIN), "run", "--once", str(props)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.2, 2.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            kills += 1
        r = run_once(props)
        assert "audit" not in r.stderr, r.stderr[-3000:]
        lake.check(f"step {i}")
    print(f"seed {s}: {kills} kill -9s")
    v = subprocess.run([str(BIN), "validate", str(props)], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr
    assert f"discovering in REST {rest_server}" in v.stdout, v.stdout
    assert "2 tables streamed, 0 skipped, 1 left out by the lists" in v.stdout, v.stdout
    # a discovered table by name: verify proves its topic, offsets show its position
    code, report, err = testkit.verify(props, "--table", f"{ns}.orders")
    assert code == 0 and report["equal"], err[-3000:]
    shown = subprocess.run([str(BIN), "offsets", "show", "--table", f"{ns}.late", str(props)], capture_output=True,
                           text=True)
    assert shown.returncode == 0 and json.loads(shown.stdout), shown.stderr
    for args, needle in [([], "--table"), (["--table", f"{ns}.items"], f"no table `{ns}.items`"),
                         (["--table", f"{ns}_ops.audit"], f"no table `{ns}_ops.audit`")]:
        r = subprocess.run([str(BIN), "offsets", "show", *args, str(props)], capture_output=True, text=True)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
    # what a search costs: `GET /v1/config` once a process, then listNamespaces and a
    # listTables a namespace (two here), counted under the connector's own name
    port = free_port()
    running = lake.props(**catalog, **{"table.include.list": f"{ns}\\\\..*", "table.discovery.interval": "300ms",
                                       "metrics.port": str(port), "name": name})
    run = Running(running)
    try:
        assert run.log.wait("table streaming", count=2, timeout=60), run.log.text()[-3000:]
        series = f'lakestream_storage_requests_total{{connector="{name}",op="catalog"}}'
        runs = f'lakestream_discovery_runs_total{{connector="{name}",outcome="ok"}}'
        before = scrape(port, "lakestream_")
        time.sleep(3)
        after = scrape(port, "lakestream_")
        searches = value(after, runs) - value(before, runs)
        requests = value(after, series) - value(before, series)
        print(f"REST catalog: {requests:.0f} requests over {searches:.0f} searches")
        assert searches >= 3, (before, after)
        # a search under way at either scrape counts in part
        assert 3 * (searches - 1) <= requests <= 3 * (searches + 1), f"{requests} catalog requests, {searches} searches"
    finally:
        code = run.stop()
    assert code == 0, run.log.text()[-3000:]


def test_a_sql_catalogs_tables_stream(env, registry, tmp_path):
    """pyiceberg's SQL catalog: each table `iceberg_tables` names, found by one query a search."""
    s = seed()
    lake = Lake(env, registry, tmp_path, s)
    lake.add_iceberg("shop.orders")
    lake.add_iceberg("ops.audit")
    props = lake.props(**{"catalog.type": "sql", "catalog.uri": f"sqlite:///{tmp_path / 'catalog.db'}"})
    for i in range(3):
        if i == 1:
            lake.add_iceberg("shop.late")
        lake.advance(i)
        run_once(props)
        lake.check(f"step {i}")


# --- AWS Glue on moto: Iceberg, Delta and Hudi tables side by side ---------------------------

@pytest.fixture(scope="module")
def aws():
    pytest.importorskip("boto3")
    pytest.importorskip("pyiceberg.catalog.glue")
    import test_glue_catalog as tg
    yield from tg.moto_glue_and_s3()


def glue_client(aws):
    import boto3
    from test_glue_catalog import REGION
    return boto3.client("glue", endpoint_url=aws[0], aws_access_key_id=aws[2], aws_secret_access_key=aws[3],
                        region_name=REGION)


def register(glue, db, name, kind, path):
    """A Delta table as Spark's catalog registers it (its path in the serde parameters, a
    placeholder location), a Hudi table as Hudi's Glue sync does (a COW table: one entry)."""
    if kind == "delta":
        params = {"spark.sql.sources.provider": "delta", "EXTERNAL": "TRUE"}
        sd = {"Location": f"file:{path}-__PLACEHOLDER__", "SerdeInfo": {"Parameters": {"path": f"file:{path}"}}}
    else:
        params = {"spark.sql.sources.provider": "hudi", "EXTERNAL": "TRUE", "hudi.metadata-listing-enabled": "FALSE"}
        sd = {"Location": f"file:{path}", "InputFormat": "org.apache.hudi.hadoop.HoodieParquetInputFormat",
              "SerdeInfo": {"Parameters": {"path": f"file:{path}", "hoodie.query.as.ro.table": "false"}}}
    glue.create_table(DatabaseName=db, TableInput={"Name": name, "TableType": "EXTERNAL_TABLE", "Parameters": params,
                                                   "StorageDescriptor": sd})


def test_a_glue_catalogs_iceberg_delta_and_hudi_tables_stream_through_kill9s(env, registry, tmp_path, aws):
    """`run` with a 300 ms discovery interval over a Glue database holding an Iceberg, a Delta and
    (with the fixtures) a Hudi table, a CSV table that is none of them and, in another database,
    one the include list leaves out; tables registered and one deleted mid-run; killed with -9 at
    random moments and started again. Every matched table's topic replays to it."""
    from test_glue_catalog import REGION, glue_catalog, s3_props
    glue_endpoint, s3_endpoint, key_id, secret = aws
    s = seed()
    rng = random.Random(s)
    lake = Lake(env, registry, tmp_path, s)
    glue = glue_client(aws)
    cat, bucket = glue_catalog(aws)
    db = "db_" + uuid.uuid4().hex[:6]
    lake.add_iceberg(f"{db}.orders", cat, location=f"s3://{bucket}/warehouse/{db}/orders")
    lake.add_delta(f"{db}.items", "glue/items", versions=10)
    register(glue, db, "items", "delta", lake.root / "glue/items")
    if testkit.fixtures_present():
        lake.add_hudi(f"{db}.trips", "glue/trips")
        register(glue, db, "trips", "hudi", lake.root / "glue/trips")
    else:
        print("fixtures not found: the Glue database holds no Hudi table")
    gone = lake.add_delta(f"{db}.gone", "glue/gone", versions=3, partitioned=False)
    register(glue, db, "gone", "delta", lake.root / "glue/gone")
    glue.create_table(DatabaseName=db, TableInput={"Name": "csv", "StorageDescriptor": {
        "Location": f"file:{tmp_path}", "InputFormat": "org.apache.hadoop.mapred.TextInputFormat"}})
    glue.create_database(DatabaseInput={"Name": db + "_ops"})
    register(glue, db + "_ops", "audit", "delta", gone.table)
    port = free_port()
    props = lake.props(**{
        "catalog.type": "glue", "catalog.uri": glue_endpoint, "catalog.region": REGION,
        **s3_props(s3_endpoint, key_id, secret), "table.include.list": f"{db}\\\\..*",
        "table.discovery.interval": "300ms", "monitor-interval": "200ms", "metrics.port": str(port)})
    name = props.read_text().split("\n")[0][len("name="):]

    def late():
        lake.add_delta(f"{db}.late", "glue/late", versions=5, partitioned=False)
        register(glue, db, "late", "delta", lake.root / "glue/late")

    run = Running(props)
    try:
        run.steps(lake, rng, 12, at={3: late})
        assert run.log.wait("table streaming", count=1, timeout=60), run.log.text()[-3000:]
        lake.converge("caught up")
        run.alive()
        # a table registered while the process runs: found by a later search
        lake.add_delta(f"{db}.later", "glue/later", versions=3, partitioned=False)
        register(glue, db, "later", "delta", lake.root / "glue/later")
        lake.advance(20)
        assert run.log.wait(f"{name}/{db}.later", timeout=30), run.log.text()[-3000:]
        lake.converge("a table registered mid-run")
        # a table deleted from the catalog: its stream stops, the others go on
        glue.delete_table(DatabaseName=db, Name="gone")
        assert run.log.wait("table dropped", timeout=60), run.log.text()[-3000:]
        lake.tables.pop(f"{db}.gone")
        lake.advance(30)
        lake.converge("after the drop")
        run.alive()
        lines = scrape(port, "lakestream_tables")
        streaming = len(lake.tables)
        for state, n in [("streaming", streaming), ("dropped", 1), ("failed", 0), ("skipped", 0)]:
            assert f'lakestream_tables{{connector="{name}",state="{state}"}} {n}' in lines, lines
        # a search: GetDatabases and a GetTables a database (two here)
        runs = f'lakestream_discovery_runs_total{{connector="{name}",outcome="ok"}}'
        series = f'lakestream_storage_requests_total{{connector="{name}",op="catalog"}}'
        before = scrape(port, "lakestream_")
        time.sleep(2)
        after = scrape(port, "lakestream_")
        searches, requests = value(after, runs) - value(before, runs), value(after, series) - value(before, series)
        print(f"Glue catalog: {requests:.0f} requests over {searches:.0f} searches")
        assert searches >= 2 and requests <= 3 * searches + 3, (requests, searches)
    finally:
        code = run.stop()
    assert code == 0, run.log.text()[-3000:]
    print(f"seed {s}: {run.kills} kill -9s")
    everything = run.everything()
    assert "table failed" not in everything and "audit" not in everything and secret not in everything


@pytest.mark.parametrize("example", ["lakehouse-prefix", "lakehouse-glue", "lakehouse-rest"])
def test_each_discovery_modes_example_file_validates(example):
    env = {"KAFKA_BOOTSTRAP": "kafka:9092", "SCHEMA_REGISTRY_URL": "http://registry:8081",
           "CATALOG_CLIENT_ID": "id", "CATALOG_CLIENT_SECRET": "secret", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([str(BIN), "validate", "--offline", str(testkit.REPO / "connectors" / f"{example}.properties")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "discovering in " in r.stdout, r.stdout + r.stderr
