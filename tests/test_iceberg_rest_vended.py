"""Vended credentials from the Iceberg REST catalog (issue 31): `loadTable` asked with
`X-Iceberg-Access-Delegation: vended-credentials` answers S3 keys in its `config`, and the
connector — no `s3.*` keys and no AWS environment of its own — reads the table with them. The
table's files sit on a moto S3 that checks every request's SigV4 signature against its IAM users
(turned on once pyiceberg has written: pyarrow's S3 client does not pass moto's check, so writes
happen with the check off and the catalog keeps the new snapshot hidden until it is back on).
The catalog vends a second key and the first is deleted while the connector runs: it reads the
next snapshot with the new key, no restart; vended keys that expire within the minute are renewed
by asking the catalog again during reads. A vended wrong secret fails naming the refusal."""

import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

import icebergkit as ik
import testkit
from conftest import free_port, wait_port
from test_iceberg_pyiceberg import RestCatalog, history, oracle_of

boto3 = pytest.importorskip("boto3")
COLUMNS = {"id", "cat", "amount", "ts", "day", "note"}


def moto_with_auth_later():
    """A moto whose signature check is off until `auth(True)` (IAM users made meanwhile)."""
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "INITIAL_NO_AUTH_ACTION_COUNT": "1000000000"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_port("127.0.0.1", port)
    endpoint = f"http://127.0.0.1:{port}"

    def auth(on):
        req = urllib.request.Request(endpoint + "/moto-api/reset-auth", data=b"0" if on else b"1000000000",
                                     method="POST", headers={"Content-Type": "text/plain"})
        assert urllib.request.urlopen(req).status == 200
    return proc, endpoint, auth


def test_vended_credentials_read_the_table_and_are_replaced_while_running(env, registry, tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog
    from test_iceberg_pyiceberg import make_table  # noqa: F401 (schema helpers)
    proc, endpoint, auth = moto_with_auth_later()
    server = None
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                          region_name="us-east-1")
        s3.create_bucket(Bucket="vended-table")
        iam = boto3.client("iam", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                           region_name="us-east-1")
        keys = []
        for user in ("admin", "reader"):
            iam.create_user(UserName=user)
            iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        admin = iam.create_access_key(UserName="admin")["AccessKey"]
        first = iam.create_access_key(UserName="reader")["AccessKey"]
        second = iam.create_access_key(UserName="reader")["AccessKey"]
        s3_conf = {"s3.endpoint": endpoint, "s3.access-key-id": "testing", "s3.secret-access-key": "testing",
                   "s3.region": "us-east-1"}
        db = tmp_path / "catalog.db"
        cat = SqlCatalog("default", uri=f"sqlite:///{db}", warehouse="s3://vended-table/warehouse", **s3_conf)
        cat.create_namespace("shop")
        from pyiceberg.schema import Schema
        from pyiceberg.types import DateType, DecimalType, LongType, NestedField, StringType, TimestamptzType
        schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "cat", StringType()),
                        NestedField(3, "amount", DecimalType(10, 2)), NestedField(4, "ts", TimestamptzType()),
                        NestedField(5, "day", DateType()), identifier_field_ids=[1])
        tbl = cat.create_table("shop.orders", schema=schema)
        steps = history(tbl, random.Random(11), 3)
        next(steps)
        expected = table_now(tbl)
        auth(True)
        RestCatalog.db, RestCatalog.pinned, RestCatalog.issued = str(db), None, []
        # each vended key says it expires 5 s after it was handed out: within the minute ahead in
        # which the connector renews, so its reads also ask the catalog again (the renewal path)
        vend = lambda k: {"s3.access-key-id": k["AccessKeyId"], "s3.secret-access-key": k["SecretAccessKey"],
                          "s3.session-token-expires-at-ms": str(int(time.time() * 1000) + 5_000)}
        RestCatalog.vend = vend(first)
        server = ThreadingHTTPServer(("127.0.0.1", 0), RestCatalog)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        props, topic = ik.iceberg_props(tmp_path, env, None, **{
            "catalog.type": "rest", "catalog.uri": f"http://127.0.0.1:{server.server_port}",
            "catalog.token": RestCatalog.token, "table.identifier": "shop.orders", "monitor-interval": "200ms",
            "s3.endpoint": endpoint, "s3.region": "us-east-1", "s3.path-style-access": "true", "s3.allow-http": "true"})
        props.write_text(props.read_text().replace("key.fields=id\n", ""))
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        run_env["AWS_EC2_METADATA_DISABLED"] = "true"
        # a vended wrong secret: moto refuses the signature, the run fails naming it
        RestCatalog.vend = {**vend(first), "s3.secret-access-key": "not-the-secret"}
        r = subprocess.run([str(testkit.BIN), "run", "--once", str(props)], capture_output=True, text=True,
                           timeout=120, env=run_env)
        assert r.returncode != 0 and "not-the-secret" not in r.stderr, r.stderr[-3000:]
        assert "SignatureDoesNotMatch" in r.stderr or "privileges" in r.stderr, r.stderr[-3000:]
        RestCatalog.vend = vend(first)
        shown = subprocess.run([str(testkit.BIN), "validate", "--online", str(props)], capture_output=True, text=True,
                               timeout=60, env=run_env)
        assert shown.returncode == 0 and "read with storage credentials the catalog vended" in shown.stdout, \
            shown.stdout + shown.stderr[-2000:]
        proc_c = subprocess.Popen([str(testkit.BIN), "run", str(props)], stderr=subprocess.PIPE, text=True, env=run_env)
        try:
            def caught_up(label):
                deadline = time.time() + 60
                while True:
                    replay = testkit.Replay(registry)
                    replay.apply(testkit.consume_all(env, topic))
                    try:
                        return compare_with(expected, replay, label)
                    except AssertionError:
                        if time.time() > deadline or proc_c.poll() is not None:
                            raise
                        time.sleep(0.5)
            caught_up("the first snapshot, read with the first vended key")
            for step in range(2):
                # the catalog vends the other key; the one before is deleted
                old, new = (first, second) if step == 0 else (second, first)
                if step == 1:
                    first = new = iam_new_key(endpoint, admin)
                RestCatalog.vend = vend(new)
                time.sleep(1.5)  # a few polls: the connector takes the new key
                iam_admin(endpoint, admin).delete_access_key(UserName="reader", AccessKeyId=old["AccessKeyId"])
                # a commit written with the check off, shown once it is on again
                RestCatalog.pinned = tbl.metadata_location
                auth(False)
                next(steps)
                expected = table_now(tbl)
                auth(True)
                RestCatalog.pinned = None
                caught_up(f"snapshot after key change {step + 1}")
            assert proc_c.poll() is None, "the connector stopped"
        finally:
            proc_c.terminate()
            err = proc_c.communicate(timeout=60)[1]
        assert "storage credentials the catalog vended" in err, err[-3000:]
        assert "renewed before they expired" in err, err[-3000:]
        assert second["SecretAccessKey"] not in err, err[-3000:]
    finally:
        RestCatalog.vend = RestCatalog.pinned = None
        if server:
            server.shutdown()
        proc.terminate()
        proc.wait(10)


def table_now(tbl):
    """The table as pyiceberg reads it now (its S3 reads need moto's check off)."""
    tbl.refresh()
    return oracle_of(tbl)


def compare_with(expected, replay, label):
    oracle, rows = expected

    class Filled:
        state = {k: {**{c: None for c in COLUMNS}, **v} for k, v in replay.state.items()}

    testkit.compare(oracle, rows, Filled, label)


def iam_admin(endpoint, admin):
    return boto3.client("iam", endpoint_url=endpoint, aws_access_key_id=admin["AccessKeyId"],
                        aws_secret_access_key=admin["SecretAccessKey"], region_name="us-east-1")


def iam_new_key(endpoint, admin):
    return iam_admin(endpoint, admin).create_access_key(UserName="reader")["AccessKey"]
