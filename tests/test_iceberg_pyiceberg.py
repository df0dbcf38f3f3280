"""Tables written during the test by pyiceberg (an independent writer): a random history of appends,
upserts, deletes, filtered overwrites and schema changes on a partitioned table with an identifier
field. After every commit the connector runs, and the replayed topic equals pyiceberg's own scan of
the current snapshot. The same table is then read through a REST catalog."""

import json
import os
import random
import subprocess
import threading
import time
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import icebergkit as ik
import testkit

pyiceberg = pytest.importorskip("pyiceberg")


def make_table(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    db = tmp_path / "catalog.db"
    cat = SqlCatalog("default", uri=f"sqlite:///{db}", warehouse=f"file://{tmp_path}/warehouse")
    cat.create_namespace("shop")
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="cat"))
    return db, cat, cat.create_table("shop.orders", schema=table_schema(), partition_spec=spec)


def table_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, DecimalType, LongType, NestedField, StringType, TimestamptzType
    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "cat", StringType(), required=False),
        NestedField(3, "amount", DecimalType(10, 2), required=False),
        NestedField(4, "ts", TimestamptzType(), required=False),
        NestedField(5, "day", DateType(), required=False),
        identifier_field_ids=[1],
    )


def arrow_rows(tbl, rows):
    import pyarrow as pa
    schema = tbl.schema().as_arrow()
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    return pa.Table.from_pydict(cols, schema=schema)


def random_row(rng, i, with_note):
    r = {
        "id": i,
        "cat": rng.choice(["a", "b", "c"]),
        "amount": Decimal(rng.randint(1, 99999)).scaleb(-2),
        "ts": datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=rng.randint(0, 10**12)),
        "day": date(2024, 1, 1) + timedelta(days=rng.randint(0, 300)),
    }
    if with_note:
        r["note"] = rng.choice([None, "x", "y"])
    return r


def oracle_of(tbl):
    rows = tbl.scan().to_arrow().to_pylist()
    types = [{"name": f.name, "type": "timestamp" if f.name == "ts" else str(f.field_type)} for f in tbl.schema().fields]
    return {"schema": types, "record_key_fields": ["id"]}, rows


def compare_now(tbl, replay, columns, label):
    tbl.refresh()
    oracle, rows = oracle_of(tbl)

    class Filled:
        state = {k: {**{c: None for c in columns}, **v} for k, v in replay.state.items()}

    testkit.compare(oracle, rows, Filled, label)


def history(tbl, rng, commits):
    """Yield after each commit, describing it."""
    from pyiceberg.expressions import EqualTo, In, LessThan
    from pyiceberg.types import StringType

    next_id, with_note = 1, False
    tbl.append(arrow_rows(tbl, [random_row(rng, i, False) for i in range(1, 9)]))
    next_id = 9
    yield "append"
    for _ in range(commits):
        live = [r["id"] for r in tbl.scan(selected_fields=("id",)).to_arrow().to_pylist()]
        op = rng.choice(["append", "upsert", "delete", "overwrite", "delete_range"] + ([] if with_note else ["add_column"]))
        if op == "append" or not live:
            rows = [random_row(rng, next_id + k, with_note) for k in range(rng.randint(1, 4))]
            next_id += len(rows)
            tbl.append(arrow_rows(tbl, rows))
        elif op == "upsert":
            old = rng.sample(live, min(len(live), rng.randint(1, 3)))
            if not old:
                op = "upsert of a new key only"  # nothing live to update: no `u` to expect
            rows = [random_row(rng, i, with_note) for i in old] + [random_row(rng, next_id, with_note)]
            next_id += 1
            if with_note:
                # pyiceberg 0.12's upsert rejects a table whose schema gained a column; the same
                # change as one transaction (delete + append snapshots in one metadata commit)
                with tbl.transaction() as tx:
                    tx.delete(In("id", old))
                    tx.append(arrow_rows(tbl, rows))
            else:
                tbl.upsert(arrow_rows(tbl, rows))
        elif op == "delete":
            tbl.delete(In("id", rng.sample(live, min(len(live), rng.randint(1, 2)))))
        elif op == "delete_range":
            tbl.delete(LessThan("amount", Decimal(rng.randint(5000, 40000)).scaleb(-2)))
        elif op == "overwrite":
            c = rng.choice(["a", "b", "c"])
            rows = [dict(random_row(rng, next_id + k, with_note), cat=c) for k in range(2)]
            next_id += 2
            tbl.overwrite(arrow_rows(tbl, rows), overwrite_filter=EqualTo("cat", c))
        else:
            with tbl.update_schema() as u:
                u.add_column("note", StringType())
            with_note = True
        tbl.refresh()
        yield op


def test_pyiceberg_history_replays_at_every_commit(env, registry, tmp_path):
    seed = int(os.environ.get("PYICEBERG_SEED", time.time()))
    print("pyiceberg history seed", seed)
    rng = random.Random(seed)
    db, cat, tbl = make_table(tmp_path)
    props, topic = ik.iceberg_props(tmp_path, env, None, **{
        "catalog.type": "sql", "catalog.uri": f"sqlite:///{db}", "table.identifier": "shop.orders"})
    props.write_text(props.read_text().replace("key.fields=id\n", ""))  # the identifier field is the key
    replay, consumed = testkit.Replay(registry), 0
    ops, currents = [], set()
    for op in history(tbl, rng, 14):
        ops.append(op)
        currents.add(tbl.metadata.current_snapshot_id)
        testkit.run_once(props)
        records = testkit.consume_all(env, topic)
        replay.apply(records[consumed:])
        consumed = len(records)
        compare_now(tbl, replay, {"id", "cat", "amount", "ts", "day", "note"}, f"seed {seed} after {ops}")
    ik.no_split_updates(replay)
    assert {e["op"] for e in replay.events} >= {"r", "c", "d"}
    # one catalog commit, one unit: an upsert's delete and append snapshots (one metadata commit)
    # are emitted together, as the snapshot the commit made current, so updated keys are `u`
    emitted = {int(e["source"]["instant"]) for e in replay.events}
    assert emitted <= currents, f"events of snapshots no reader saw as current: {emitted - currents}"
    if "upsert" in ops:
        assert "u" in {e["op"] for e in replay.events}, "an upsert's updated keys must arrive as `u`"
    rest_catalog_reads_the_same_table(env, registry, tmp_path, db, tbl)


SIGNING = threading.Lock()


class RestCatalog(BaseHTTPRequestHandler):
    """The two REST catalog calls the connector makes, answered from a sqlite SqlCatalog; a static
    bearer token, or OAuth 2 client credentials at `/v1/oauth/tokens` (form fields, as Iceberg's
    clients send them) for tokens that say they live `life` seconds but are refused after
    `revoke_after` (a token revoked early: the client must fetch another on the 401)."""

    db = None
    token = "s3cr3t"
    client, secret = "lake", "oauth-" + uuid.uuid4().hex
    life, revoke_after = 2, 60
    issued = []  # (token, time)
    refused = 0  # GETs answered 401
    vend = None  # the `config` a loadTable asking for vended credentials gets
    sigv4 = None  # (key id, secret, region, service): requests must carry a valid AWS SigV4 signature
    signed = 0  # requests whose signature botocore recomputed equal
    pinned = None  # a metadata location to answer instead of the catalog's

    def do_POST(self):
        from urllib.parse import parse_qs
        body = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
        one = {k: v[0] for k, v in body.items()}
        if self.path != "/v1/oauth/tokens" or one.get("grant_type") != "client_credentials":
            return self.reply(400, {"error": "invalid_request"})
        if (one.get("client_id"), one.get("client_secret"), one.get("scope")) != (self.client, self.secret, "catalog"):
            return self.reply(401, {"error": "invalid_client", "error_description": "unknown client or secret"})
        t = "tok-" + uuid.uuid4().hex
        RestCatalog.issued.append((t, time.time()))
        self.reply(200, {"access_token": t, "token_type": "bearer", "expires_in": self.life,
                         "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})

    def sigv4_valid(self):
        """The request's SigV4 signature recomputed by botocore (at the request's own x-amz-date)."""
        import datetime
        import botocore.auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        key, secret, region, service = self.sigv4
        auth = self.headers.get("Authorization", "")
        if f"Credential={key}/" not in auth or "SignedHeaders=" not in auth:
            return False
        names = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
        req = AWSRequest(method="GET", url=f"http://{self.headers['host']}{self.path}",
                         headers={h: self.headers[h] for h in names if h != "host"})
        at = datetime.datetime.strptime(self.headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
        with SIGNING:
            frozen = botocore.auth.get_current_datetime
            botocore.auth.get_current_datetime = lambda *a, **k: at
            try:
                botocore.auth.SigV4Auth(Credentials(key, secret), service, region).add_auth(req)
            finally:
                botocore.auth.get_current_datetime = frozen
        ok = req.headers["Authorization"] == auth
        RestCatalog.signed += ok
        return ok

    def authorized(self):
        if self.sigv4:
            return self.sigv4_valid()
        auth = self.headers.get("Authorization", "")
        if auth == f"Bearer {self.token}":
            return True
        now = time.time()
        return any(auth == f"Bearer {t}" and now - at < min(self.life, self.revoke_after) for t, at in RestCatalog.issued)

    def do_GET(self):
        import sqlite3
        if not self.authorized():
            RestCatalog.refused += 1
            return self.reply(401, {"error": {"message": "unauthorized"}})
        if self.path.startswith("/v1/config"):
            return self.reply(200, {"defaults": {}, "overrides": {"prefix": "wh1"}})
        parts = self.path.split("/")  # /v1/wh1/namespaces/<ns>/tables/<t>
        if len(parts) == 7 and parts[2] == "wh1" and parts[3] == "namespaces" and parts[5] == "tables":
            con = sqlite3.connect(self.db)
            row = con.execute("SELECT metadata_location FROM iceberg_tables WHERE table_namespace=? AND table_name=?",
                              (parts[4], parts[6])).fetchone()
            con.close()
            if row:
                body = {"metadata-location": self.pinned or row[0], "metadata": {}}
                if self.vend and self.headers.get("X-Iceberg-Access-Delegation") == "vended-credentials":
                    body["config"] = dict(self.vend)
                return self.reply(200, body)
        return self.reply(404, {"error": {"message": "no such table"}})

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def rest_catalog_reads_the_same_table(env, registry, tmp_path, db, tbl):
    RestCatalog.db = str(db)
    server = ThreadingHTTPServer(("127.0.0.1", 0), RestCatalog)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        props, topic = ik.iceberg_props(tmp_path, env, None, **{
            "catalog.type": "rest", "catalog.uri": f"http://127.0.0.1:{server.server_port}",
            "catalog.token": RestCatalog.token, "table.identifier": "shop.orders"})
        props.write_text(props.read_text().replace("key.fields=id\n", ""))
        testkit.run_once(props)
        replay = testkit.Replay(registry)
        replay.apply(testkit.consume_all(env, topic))
        compare_now(tbl, replay, {"id", "cat", "amount", "ts", "day", "note"}, "REST catalog full scan")
        # a wrong token is a clear error, not a silent empty table
        props.write_text(props.read_text().replace(RestCatalog.token, "wrong"))
        r = testkit.run_once(props, check=False)
        assert r.returncode == 1 and "401" in r.stderr and "wrong" not in r.stderr, r.stderr[-2000:]
        rest_catalog_oauth2(env, registry, tmp_path, tbl, server.server_port)
    finally:
        server.shutdown()


def rest_catalog_oauth2(env, registry, tmp_path, tbl, port):
    """OAuth 2 client credentials (`catalog.credential`): tokens that live 2 s are renewed while the
    connector polls every 200 ms for 8 s, and a token the catalog refuses before its time is
    replaced on the 401; a wrong secret exits 1 naming the token endpoint, the secret never shown."""
    def props_with(secret):
        props, topic = ik.iceberg_props(tmp_path, env, None, **{
            "catalog.type": "rest", "catalog.uri": f"http://127.0.0.1:{port}",
            "catalog.credential": f"{RestCatalog.client}:{secret}", "table.identifier": "shop.orders",
            "monitor-interval": "200ms"})
        props.write_text(props.read_text().replace("key.fields=id\n", ""))
        return props, topic
    for life, revoke_after in ((2, 60), (30, 1)):
        RestCatalog.life, RestCatalog.revoke_after, RestCatalog.issued, RestCatalog.refused = life, revoke_after, [], 0
        props, topic = props_with(RestCatalog.secret)
        proc = subprocess.Popen([str(testkit.BIN), "run", str(props)], stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(8)
            assert proc.poll() is None, "the connector stopped"
        finally:
            proc.terminate()
            err = proc.communicate(timeout=60)[1]
        assert proc.returncode == 0, err[-3000:]
        assert len(RestCatalog.issued) >= 3, f"life {life} s, refused after {revoke_after} s: {len(RestCatalog.issued)} tokens in 8 s\n{err[-2000:]}"
        assert "HTTP 401" not in err and RestCatalog.secret not in err, err[-3000:]
        # renewed before expiry: never refused; revoked early: refused, then replaced
        assert (RestCatalog.refused == 0) == (revoke_after > life), f"{RestCatalog.refused} requests refused"

        replay = testkit.Replay(registry)
        replay.apply(testkit.consume_all(env, topic))
        compare_now(tbl, replay, {"id", "cat", "amount", "ts", "day", "note"}, f"REST catalog with OAuth 2 (life {life} s)")
    shown = subprocess.run([str(testkit.BIN), "validate", "--online", str(props)], capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0 and "an OAuth 2 token (client credentials): table found" in shown.stdout, shown.stdout
    assert RestCatalog.secret not in shown.stdout + shown.stderr
    props, _ = props_with("wrong-secret")
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"127.0.0.1:{port}/v1/oauth/tokens" in r.stderr and "invalid_client" in r.stderr, r.stderr[-2000:]
    assert "wrong-secret" not in r.stderr
    rest_catalog_sigv4(env, registry, tmp_path, tbl, port)


def rest_catalog_sigv4(env, registry, tmp_path, tbl, port):
    """`catalog.rest.sigv4-enabled`: every request AWS SigV4-signed with the connector's AWS
    credentials (here `s3.access-key-id` / `s3.secret-access-key`), as Glue's and S3 Tables' Iceberg
    endpoints require; the catalog recomputes each signature with botocore. A wrong secret is a 401,
    exit 1."""
    key, secret = "AKIDSIGV4TEST", "sigv4-" + uuid.uuid4().hex
    RestCatalog.sigv4, RestCatalog.signed = (key, secret, "eu-west-1", "glue"), 0
    try:
        def props_with(sec):
            props, topic = ik.iceberg_props(tmp_path, env, None, **{
                "catalog.type": "rest", "catalog.uri": f"http://127.0.0.1:{port}", "table.identifier": "shop.orders",
                "catalog.rest.sigv4-enabled": "true", "catalog.rest.signing-region": "eu-west-1",
                "catalog.rest.signing-name": "glue", "s3.access-key-id": key, "s3.secret-access-key": sec})
            props.write_text(props.read_text().replace("key.fields=id\n", ""))
            return props, topic
        props, topic = props_with(secret)
        testkit.run_once(props)
        assert RestCatalog.signed >= 2, RestCatalog.signed
        replay = testkit.Replay(registry)
        replay.apply(testkit.consume_all(env, topic))
        compare_now(tbl, replay, {"id", "cat", "amount", "ts", "day", "note"}, "REST catalog with SigV4")
        props, _ = props_with("not-the-secret")
        r = testkit.run_once(props, check=False)
        assert r.returncode == 1 and "HTTP 401" in r.stderr and "not-the-secret" not in r.stderr, r.stderr[-2000:]
    finally:
        RestCatalog.sigv4 = None
