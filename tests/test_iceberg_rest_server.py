"""A real Iceberg REST catalog (issue 31): Apache Iceberg's own REST catalog server
(`org.apache.iceberg.rest.RESTCatalogServer` from `iceberg-open-api:1.10.0:test-fixtures`, the
server behind the `apache/iceberg-rest-fixture` image, over a sqlite JDBC catalog and local
files; jars from Maven Central into /var/cache once). pyiceberg's `RestCatalog` creates and writes
the table through it with OAuth 2 client credentials; the connector (`catalog.type=rest`,
`catalog.credential`) follows it commit by commit and its replay equals pyiceberg's scan each
time. The server's token route accepts any client (it is a test fixture), so wrong credentials
are tested against the REST server of `test_iceberg_pyiceberg.py`. Skipped, with the reason,
without java or mvn."""

import random
import subprocess
import time

import icebergkit as ik
import testkit
from icebergrest import rest_server  # noqa: F401 (the fixture)

def test_a_table_written_through_icebergs_rest_server_replays_after_every_commit(env, registry, tmp_path, rest_server):
    from pyiceberg.catalog.rest import RestCatalog
    from test_iceberg_pyiceberg import compare_now, history, table_schema
    cat = RestCatalog("rest", uri=rest_server, credential="lakestream:secret")
    cat.create_namespace("shop")
    tbl = cat.create_table("shop.orders", schema=table_schema())
    props, topic = ik.iceberg_props(tmp_path, env, None, **{
        "catalog.type": "rest", "catalog.uri": rest_server, "catalog.credential": "lakestream:secret",
        "table.identifier": "shop.orders"})
    props.write_text(props.read_text().replace("key.fields=id\n", ""))
    seed = int(time.time())
    replay, seen, ops = testkit.Replay(registry), set(), []
    for op in history(tbl, random.Random(seed), 6):
        ops.append(op)
        r = testkit.run_once(props)
        assert "REST catalog OAuth2 token obtained" in r.stderr, r.stderr[-2000:]
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        compare_now(tbl, replay, {"id", "cat", "amount", "ts", "day", "note"}, f"seed {seed} REST server after {ops}")
    assert {e["op"] for e in replay.events} >= {"r", "c"}
    shown = subprocess.run([str(testkit.BIN), "validate", "--online", str(props)], capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0 and f"catalog: REST {rest_server}, an OAuth 2 token" in shown.stdout, shown.stdout
