"""Iceberg tables through the AWS Glue Data Catalog (`catalog.type=glue`), against moto's Glue on
loopback **with request authentication on**: moto checks every request's SigV4 signature against
an IAM user's secret and its policy, so lakestream's signed `GetTable` is verified by an
independent implementation (botocore's signer inside moto), not only its answer parsed. The
table files sit in a second moto without authentication (pyarrow's S3 client, which pyiceberg
writes with, does not pass moto's S3 signature check). Tables are
created and written by pyiceberg's own `GlueCatalog`; the connector follows the catalog's
`metadata_location` commit by commit and its replay is compared with pyiceberg's scan each time."""

import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import icebergkit as ik
import testkit
from conftest import free_port, wait_port

boto3 = pytest.importorskip("boto3")
pytest.importorskip("pyiceberg.catalog.glue")

REGION = "us-east-1"


def moto(**env_extra):
    port = free_port()
    server = Path(sys.executable).parent / "moto_server"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", **env_extra}
    proc = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    wait_port("127.0.0.1", port)
    return proc, f"http://127.0.0.1:{port}"


def moto_glue_and_s3():
    """(Glue endpoint, S3 endpoint, access key id, secret): Glue on a moto that authenticates from
    its fourth request on (an IAM user with an allow-all policy is made first, three requests)."""
    glue, glue_endpoint = moto(INITIAL_NO_AUTH_ACTION_COUNT="3")
    s3, s3_endpoint = moto()
    iam = boto3.client("iam", endpoint_url=glue_endpoint, aws_access_key_id="testing",
                       aws_secret_access_key="testing", region_name=REGION)
    iam.create_user(UserName="lakestream")
    key = iam.create_access_key(UserName="lakestream")["AccessKey"]
    iam.put_user_policy(UserName="lakestream", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    yield glue_endpoint, s3_endpoint, key["AccessKeyId"], key["SecretAccessKey"]
    for proc in (glue, s3):
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def aws():
    yield from moto_glue_and_s3()


def s3_props(endpoint, key_id, secret):
    return {"s3.endpoint": endpoint, "s3.region": REGION, "s3.access-key-id": key_id,
            "s3.secret-access-key": secret, "s3.path-style-access": "true", "s3.allow-http": "true"}


def glue_catalog(aws):
    """pyiceberg's GlueCatalog on the moto Glue, its warehouse in a new bucket of the moto S3:
    (catalog, bucket)."""
    from pyiceberg.catalog.glue import GlueCatalog
    glue_endpoint, endpoint, key_id, secret = aws
    bucket = "glue-" + uuid.uuid4().hex[:8]
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key_id, aws_secret_access_key=secret,
                 region_name=REGION).create_bucket(Bucket=bucket)
    return GlueCatalog("glue", **{
        "glue.endpoint": glue_endpoint, "glue.region": REGION, "glue.access-key-id": key_id,
        "glue.secret-access-key": secret, "warehouse": f"s3://{bucket}/warehouse",
        "s3.endpoint": endpoint, "s3.access-key-id": key_id, "s3.secret-access-key": secret, "s3.region": REGION}), bucket


def glue_table(aws, name):
    """A pyiceberg GlueCatalog table `db_x.name` whose files are in a new moto bucket."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, DecimalType, LongType, NestedField, StringType, TimestamptzType
    cat, bucket = glue_catalog(aws)
    db = "db_" + uuid.uuid4().hex[:6]
    cat.create_namespace(db)
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "cat", StringType()),
                    NestedField(3, "amount", DecimalType(10, 2)), NestedField(4, "ts", TimestamptzType()),
                    NestedField(5, "day", DateType()), identifier_field_ids=[1])
    tbl = cat.create_table(f"{db}.{name}", schema=schema, location=f"s3://{bucket}/warehouse/{db}/{name}")
    assert tbl.metadata_location.startswith("s3://")
    return tbl, f"{db}.{name}"


def glue_props(tmp_path, env, aws, identifier, **extra):
    glue_endpoint, endpoint, key_id, secret = aws
    props, topic = ik.iceberg_props(tmp_path, env, None, **{
        "catalog.type": "glue", "catalog.uri": glue_endpoint, "catalog.region": REGION, "table.identifier": identifier,
        **s3_props(endpoint, key_id, secret), **extra})
    props.write_text(props.read_text().replace("key.fields=id\n", ""))
    return props, topic


def test_glue_table_written_by_pyiceberg_replays_after_every_commit(env, registry, tmp_path, aws):
    from test_iceberg_pyiceberg import compare_now, history
    tbl, identifier = glue_table(aws, "orders")
    props, topic = glue_props(tmp_path, env, aws, identifier)
    seed = int(time.time())
    replay, seen, ops = testkit.Replay(registry), set(), []
    for op in history(tbl, random.Random(seed), 6):
        ops.append(op)
        r = testkit.run_once(props)
        replay.apply(testkit.new_records(testkit.consume_all(env, topic), seen))
        compare_now(tbl, replay, {"id", "cat", "amount", "ts", "day", "note"}, f"seed {seed} glue after {ops}")
        assert aws[3] not in r.stderr, "the secret key appears in the log"
    assert replay.events, "no events"
    assert all(e["source"]["file"].startswith("s3://") for e in replay.events if e["op"] != "r")
    assert {e["source"]["db"] for e in replay.events} == {identifier.split(".")[0]}


def test_glue_credentials_from_the_environment_chain(env, registry, tmp_path, aws):
    """No keys in the properties: the connector's AWS chain (here AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY) signs Glue and S3 alike."""
    from test_iceberg_pyiceberg import compare_now, history
    tbl, identifier = glue_table(aws, "chain")
    props, topic = glue_props(tmp_path, env, aws, identifier)
    props.write_text("".join(line + "\n" for line in props.read_text().splitlines()
                             if not line.startswith(("s3.access-key-id", "s3.secret-access-key"))))
    next(history(tbl, random.Random(3), 1))
    run_env = {**os.environ, "AWS_ACCESS_KEY_ID": aws[2], "AWS_SECRET_ACCESS_KEY": aws[3]}
    r = subprocess.run([str(testkit.BIN), "run", "--once", str(props)], capture_output=True, text=True, timeout=120,
                       env=run_env)
    assert r.returncode == 0, r.stderr[-3000:]
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    compare_now(tbl, replay, {"id", "cat", "amount", "ts", "day", "note"}, "glue, credentials from the environment")


def run_failing(props):
    r = subprocess.run([str(testkit.BIN), "run", "--once", str(props)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr


def test_glue_failures_name_the_catalog_and_exit_by_kind(env, tmp_path, aws):
    secret = aws[3]
    tbl, identifier = glue_table(aws, "fails")
    # a wrong secret: moto's signature check refuses it; exit 1 naming Glue and the refusal,
    # the secret in no line
    props, _ = glue_props(tmp_path, env, aws, identifier, **{"s3.secret-access-key": "not-the-secret"})
    t0 = time.time()
    code, err = run_failing(props)
    assert code == 1, err[-3000:]
    assert "Glue catalog us-east-1" in err and "not authorized" in err, err[-3000:]
    assert "not-the-secret" not in err and secret not in err
    assert time.time() - t0 < 60
    # an unknown key id likewise
    props, _ = glue_props(tmp_path, env, aws, identifier, **{"s3.access-key-id": "AKIANOSUCHKEY0000000"})
    code, err = run_failing(props)
    assert code == 1 and "not authorized" in err, err[-3000:]
    # a table the catalog does not have: a settings problem (exit 2) naming it
    props, _ = glue_props(tmp_path, env, aws, identifier.split(".")[0] + ".nope")
    code, err = run_failing(props)
    assert code == 2, err[-3000:]
    assert "not found" in err and ".nope" in err, err[-3000:]
    # a nested namespace cannot be a Glue database: refused at load (exit 2)
    props, _ = glue_props(tmp_path, env, aws, "a.b.c")
    code, err = run_failing(props)
    assert code == 2 and "table.identifier" in err, err[-3000:]
    # nothing listening: unavailable, ridden out (retried with backoff, the outage logged) rather
    # than a failure
    props, _ = glue_props(tmp_path, env, aws, identifier, **{"catalog.uri": f"http://127.0.0.1:{free_port()}"})
    proc = subprocess.Popen([str(testkit.BIN), "run", "--once", str(props)], stderr=subprocess.PIPE, text=True)
    try:
        proc.wait(8)
        pytest.fail(f"an unreachable catalog stopped the connector (exit {proc.returncode}): {proc.stderr.read()[-2000:]}")
    except subprocess.TimeoutExpired:
        pass
    proc.kill()
    err = proc.communicate()[1]
    assert "Glue catalog us-east-1" in err and "unavailable" in err and "retry_in_ms" in err, err[-3000:]
