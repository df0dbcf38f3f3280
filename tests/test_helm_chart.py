"""The Helm chart: lint --strict, render with default and production-shaped values, validate the
manifests offline against the Kubernetes JSON schemas (kubernetes-validate), and check what the
chart promises: the connector files it renders pass `lakestream validate`, a connector change rolls
the pods (checksum), probes, non-root, a grace period long enough to commit on SIGTERM, and a
dashboard that only charts metrics the binary exports."""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

import testkit
from brokers import free_port

CHART = testkit.REPO / "helm" / "lakestream"
HELM = Path(os.environ.get("HELM_BIN", "/var/cache/lakestream-helm/layer/helm/helm"))

PROD = {
    "connectors": {
        "orders": {"name": "orders-changelog", "connector.class": "hudi", "table.path": "s3://lake/orders",
                   "topic": "lake.orders", "bootstrap.servers": "kafka:9093", "schema.registry.url": "https://registry:8081",
                   "tasks.max": "4", "s3.region": "eu-west-1",
                   "producer.override.security.protocol": "SASL_SSL", "producer.override.sasl.mechanism": "SCRAM-SHA-512",
                   "producer.override.sasl.username": "lakestream", "producer.override.sasl.password": "${env:KAFKA_PASSWORD}",
                   "schema.registry.basic.auth.user.info": "${file:/etc/lakestream/secrets/registry/user-info}"},
        "events": {"name": "events-changelog", "connector.class": "iceberg", "catalog.type": "rest",
                   "catalog.uri": "https://catalog:8181", "catalog.token": "${env:CATALOG_TOKEN}", "table.identifier": "db.events",
                   "topic": "lake.events", "bootstrap.servers": "kafka:9093", "schema.registry.url": "https://registry:8081"},
    },
    "secretEnv": {"KAFKA_PASSWORD": {"secret": "kafka", "key": "password"}, "CATALOG_TOKEN": {"secret": "catalog", "key": "token"}},
    "secretFiles": ["registry"],
    "metrics": {"serviceMonitor": {"enabled": True}},
    "grafanaDashboard": {"enabled": True},
    "verify": {"enabled": True, "schedule": "0 3 * * *"},
    "prometheusRule": {"enabled": True},
}


@pytest.fixture(scope="module")
def helm():
    if not HELM.exists():
        pytest.skip(f"helm not installed at {HELM} (scripts/lib.sh install_helm)")
    return HELM


MINIMAL = {"connectors": {"orders": {"name": "orders-changelog", "connector.class": "hudi", "table.path": "/lake/orders",
                                     "topic": "lake.orders", "bootstrap.servers": "kafka:9092",
                                     "schema.registry.url": "http://registry:8081"}}}
SHARED = {**json.loads(json.dumps(PROD)), "statefulSetPerConnector": False}


def helm_template(helm, tmp_path, values=None, *extra):
    args = [str(helm), "template", "rel", str(CHART), *extra]
    if values:
        vf = tmp_path / "values.yaml"
        vf.write_text(yaml.safe_dump(values) if isinstance(values, dict) else values)
        args += ["-f", str(vf)]
    return subprocess.run(args, capture_output=True, text=True)


def render(helm, tmp_path, values=None, *extra):
    out = helm_template(helm, tmp_path, values, *extra)
    assert out.returncode == 0, out.stderr
    return out.stdout, [d for d in yaml.safe_load_all(out.stdout) if d]


def kinds(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("values", [None, PROD], ids=["defaults", "production"])
def test_lint_strict(helm, tmp_path, values):
    args = [str(helm), "lint", "--strict", str(CHART)]
    if values:
        (tmp_path / "v.yaml").write_text(yaml.safe_dump(values))
        args += ["-f", str(tmp_path / "v.yaml")]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("values", [MINIMAL, PROD, SHARED], ids=["minimal", "production", "one-statefulset"])
def test_rendered_manifests_validate_against_kubernetes_schemas(helm, tmp_path, values):
    text, docs = render(helm, tmp_path, values)
    f = tmp_path / "rendered.yaml"
    f.write_text(text)
    kv = Path(sys.executable).parent / "kubernetes-validate"
    for version in ["1.30.0", "1.37.0"]:
        r = subprocess.run([str(kv), "--strict", "-k", version, str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        checked = len(re.findall(r"passed for resource", r.stdout + r.stderr))
        # every document but the ServiceMonitor and PrometheusRule (CRDs kubernetes-validate has no schema for)
        assert checked == sum(d["kind"] not in ("ServiceMonitor", "PrometheusRule") for d in docs), r.stdout + r.stderr


def test_statefulset_runs_tasks_by_pod_index_safely(helm, tmp_path):
    _, docs = render(helm, tmp_path, PROD)
    sets = kinds(docs, "StatefulSet")
    assert set(sets) == {"rel-lakestream-orders", "rel-lakestream-events"}, set(sets)
    sts = sets["rel-lakestream-orders"]
    assert sts["spec"]["replicas"] == 4  # tasks.max: one task per pod
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["TASK_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["LAKESTREAM_REPLICAS"]["value"] == "4"
    assert env["KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kafka", "key": "password"}
    # the probes ask the status API about this StatefulSet's connector only
    name = PROD["connectors"]["orders"]["name"]
    assert c["livenessProbe"]["httpGet"]["path"] == f"/connectors/{name}/status?probe=live", c["livenessProbe"]
    assert c["readinessProbe"]["httpGet"]["path"] == f"/connectors/{name}/status?probe=ready", c["readinessProbe"]
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["terminationGracePeriodSeconds"] >= 60
    # each connector's pods run only that connector, from its own ConfigMap
    assert [a for a in c["args"] if a.endswith(".properties")] == ["/etc/lakestream/connectors/orders.properties"]
    assert pod["volumes"][0]["configMap"]["name"] == "rel-lakestream-orders-connectors"
    assert any(v["mountPath"] == "/etc/lakestream/secrets/registry" for v in c["volumeMounts"])
    assert c["resources"]["requests"]["ephemeral-storage"] and c["resources"]["requests"]["memory"] == "512Mi"
    selector = sts["spec"]["selector"]["matchLabels"]
    assert selector["lakestream.io/workload"] == "orders"
    assert sets["rel-lakestream-events"]["spec"]["selector"]["matchLabels"] != selector
    pdbs = kinds(docs, "PodDisruptionBudget")
    assert pdbs["rel-lakestream-orders"]["spec"]["selector"]["matchLabels"] == selector
    assert {"StatefulSet", "ConfigMap", "Service", "ServiceMonitor", "PodDisruptionBudget", "ServiceAccount"} <= {d["kind"] for d in docs}


def test_one_statefulset_for_all_connectors_when_asked(helm, tmp_path):
    _, docs = render(helm, tmp_path, SHARED)
    (sts,) = kinds(docs, "StatefulSet").values()
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert sts["spec"]["replicas"] == 1
    assert {"/etc/lakestream/connectors/orders.properties", "/etc/lakestream/connectors/events.properties"} <= set(c["args"])
    # one pod of every connector: the probes cover every task of the process
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/ready"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LAKESTREAM_POOL"] == "true" and env["LAKESTREAM_REPLICAS"] == "1", env


def pool(n, replicas=5):
    """A pool of n connectors (Hudi, Delta and Iceberg by turns; every seventh with 2 tasks)."""
    connectors = {}
    for i in range(n):
        props = {"name": f"table-{i:04d}", "topic": f"lake.t{i:04d}", "bootstrap.servers": "kafka:9092",
                 "schema.registry.url": "http://registry:8081"}
        kind = ("hudi", "delta", "iceberg")[i % 3]
        if kind == "iceberg":
            props.update({"connector.class": "iceberg", "catalog.type": "rest", "catalog.uri": "http://catalog:8181",
                          "table.identifier": f"db.t{i:04d}"})
        else:
            props.update({"connector.class": kind, "table.path": f"s3://lake/t{i:04d}"})
            if kind == "delta":
                props["key.fields"] = "id"
        if i % 7 == 0:
            props["tasks.max"] = "2"
        connectors[f"t{i:04d}"] = props
    return {"connectors": connectors, "statefulSetPerConnector": False, "replicas": replicas}


def placement(tmp_path, docs, replicas, label):
    """`lakestream assign --pool` over the rendered files: {(connector, task): pod}."""
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-connectors")]
    d = tmp_path / label
    d.mkdir()
    files = []
    for name, body in cm["data"].items():
        (d / name).write_text(body)
        files.append(str(d / name))
    r = subprocess.run([str(testkit.BIN), "assign", "--pool", "--replicas", str(replicas), *files],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        pod, name, task = line.split()
        assert (name, task) not in out, f"{name} task {task} placed twice"
        out[(name, task)] = int(pod)
    return out


def test_a_pool_of_1000_connectors_over_5_replicas(helm, tmp_path):
    values = pool(1000)
    text, docs = render(helm, tmp_path, values)
    (sts,) = kinds(docs, "StatefulSet").values()
    assert sts["spec"]["replicas"] == 5 and sts["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert len([a for a in c["args"] if a.endswith(".properties")]) == 1000
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LAKESTREAM_POOL"] == "true" and env["LAKESTREAM_REPLICAS"] == "5", env
    assert env["LAKESTREAM_MEMORY_BUDGET"] == "384MiB", env
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-connectors")]
    assert len(cm["data"]) == 1000 and len(json.dumps(cm)) < 1 << 20  # a ConfigMap holds at most 1 MiB
    # idle connectors of a pool release their producers unless they say otherwise
    assert all("idle.release=60s" in body.splitlines() for body in cm["data"].values())
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(values))
    r = subprocess.run([str(helm), "lint", "--strict", str(CHART), "-f", str(tmp_path / "pool.yaml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "rendered.yaml").write_text(text)
    kv = Path(sys.executable).parent / "kubernetes-validate"
    r = subprocess.run([str(kv), "--strict", "-k", "1.30.0", str(tmp_path / "rendered.yaml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # every task on exactly one pod, the pods evenly loaded
    placed = placement(tmp_path, docs, 5, "five")
    tasks = sum(int(p.get("tasks.max", "1")) for p in values["connectors"].values())
    assert len(placed) == tasks == 1143, len(placed)
    per_pod = [list(placed.values()).count(k) for k in range(5)]
    assert all(abs(n - tasks / 5) <= 0.15 * tasks / 5 for n in per_pod), per_pod
    # the files pass `validate`
    d = tmp_path / "five"
    r = subprocess.run([str(testkit.BIN), "validate", "--offline", *map(str, sorted(d.iterdir())[:30])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_pool_connector_keeps_its_own_idle_release_and_the_default_can_be_off(helm, tmp_path):
    values = pool(3, replicas=2)
    values["connectors"]["t0001"]["idle.release"] = "5m"
    _, docs = render(helm, tmp_path, values)
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-connectors")]
    assert "idle.release=5m" in cm["data"]["t0001.properties"].splitlines()
    assert "idle.release=60s" in cm["data"]["t0002.properties"].splitlines()
    _, docs = render(helm, tmp_path, {**values, "poolIdleRelease": ""})
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-connectors")]
    assert "idle.release" not in cm["data"]["t0002.properties"]
    # per-connector StatefulSets: the connector's own settings only
    _, docs = render(helm, tmp_path, MINIMAL)
    assert all("idle.release" not in b for d in docs if d["kind"] == "ConfigMap" for b in d.get("data", {}).values())


def test_a_pool_moves_no_task_on_a_rolling_update_and_only_the_added_pods_tasks_on_a_scale(helm, tmp_path):
    values = pool(300)
    _, docs = render(helm, tmp_path, values)
    before = placement(tmp_path, docs, 5, "before")
    # a rolling update (new image, an edited connector, one more connector): every task stays on its pod
    changed = json.loads(json.dumps(values))
    changed["image"] = {"tag": "next"}
    changed["connectors"]["t0001"]["transaction.max.records"] = "5000"
    changed["connectors"]["t9999"] = dict(changed["connectors"]["t0001"], name="table-new", topic="lake.new")
    _, docs2 = render(helm, tmp_path, changed)
    (old_sts,), (new_sts,) = kinds(docs, "StatefulSet").values(), kinds(docs2, "StatefulSet").values()
    assert old_sts["spec"]["template"]["metadata"]["annotations"]["checksum/connectors"] != \
        new_sts["spec"]["template"]["metadata"]["annotations"]["checksum/connectors"]
    after = placement(tmp_path, docs2, 5, "after")
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == {("table-new", "0")}
    # one pod more: only tasks moving onto it move; one fewer: only its tasks move
    six = placement(tmp_path, docs, 6, "six")
    moved = {k for k in before if six[k] != before[k]}
    assert moved and all(six[k] == 5 for k in moved), sorted(moved)[:5]
    assert 0.10 < len(moved) / len(before) < 0.25, len(moved)
    four = placement(tmp_path, docs, 4, "four")
    assert {k for k in before if four[k] != before[k]} == {k for k in before if before[k] == 4}


def test_a_pool_pod_without_a_task_serves_health_and_stops_on_sigterm(tmp_path):
    f = tmp_path / "one.properties"
    f.write_text("name=lonely\nconnector.class=hudi\ntable.path=s3://lake/nowhere\ntopic=t\nbootstrap.servers=127.0.0.1:9\n"
                 "schema.registry.url=http://127.0.0.1:9\n")
    owner = subprocess.run([str(testkit.BIN), "assign", "--pool", "--replicas", "3", str(f)], capture_output=True, text=True)
    assert owner.returncode == 0, owner.stderr
    idle = next(k for k in range(3) if k != int(owner.stdout.split()[0]))
    port = free_port()
    p = subprocess.Popen([str(testkit.BIN), "run", "--pool", "--replicas", "3", "--task-id", str(idle),
                          f"--metrics-port={port}", str(f)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert p.poll() is None, p.stderr.read()
                assert time.time() < deadline, "no /healthz"
                time.sleep(0.2)
        p.send_signal(15)
        assert p.wait(timeout=20) == 0
        assert "runs none of the pool's tasks" in p.stderr.read()
    finally:
        p.kill()
    # a run --once that would do nothing is refused, as without a pool
    r = subprocess.run([str(testkit.BIN), "run", "--once", "--pool", "--replicas", "3", "--task-id", str(idle), str(f)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no task to run" in r.stderr, r.stderr


def test_editing_one_connector_rolls_only_its_pods(helm, tmp_path):
    def checksums(values):
        _, docs = render(helm, tmp_path, values)
        return {n: s["spec"]["template"]["metadata"]["annotations"]["checksum/connectors"] for n, s in kinds(docs, "StatefulSet").items()}
    changed = json.loads(json.dumps(PROD))
    changed["connectors"]["orders"]["read.commits.limit"] = "3"
    before, after = checksums(PROD), checksums(changed)
    assert before["rel-lakestream-orders"] != after["rel-lakestream-orders"]
    assert before["rel-lakestream-events"] == after["rel-lakestream-events"]
    assert before == checksums(json.loads(json.dumps(PROD)))


def test_values_are_rendered_verbatim(helm, tmp_path):
    values = json.loads(json.dumps(MINIMAL))
    values["connectors"]["orders"].update({"read.start-commit": "20261130084527933", "transaction.max.records": 1000000,
                                           "tombstones.on.delete": False, "tasks.max": 2,
                                           "read.memory.budget": 9007199254740991, "poll.max.records": 4294967297})
    _, docs = render(helm, tmp_path, values)
    body = kinds(docs, "ConfigMap")["rel-lakestream-orders-connectors"]["data"]["orders.properties"]
    for line in ["read.start-commit=20261130084527933", "transaction.max.records=1000000", "tombstones.on.delete=false",
                 "tasks.max=2", "read.memory.budget=9007199254740991", "poll.max.records=4294967297"]:
        assert line in body.splitlines(), body


@pytest.mark.parametrize("case,props,top,message", [
    ("no connector", None, {}, "no connector"),
    ("unquoted 17-digit number", {"read.start-commit": 20261130084527933}, {}, "`read.start-commit` is a number of 2^53"),
    ("unquoted 2^53 + 1 (a float: 2^53)", {"read.start-commit": 9007199254740993}, {}, "quote it (read.start-commit"),
    ("a fraction", {"transaction.max.records": 0.5}, {}, "transaction.max.records"),
    ("literal secret", {"producer.override.sasl.password": "hunter2"}, {}, "holds a literal secret"),
    ("literal registry credentials", {"schema.registry.basic.auth.user.info": "svc:pw"}, {}, "secretEnv"),
    ("more pods than tasks", {"tasks.max": "2"}, {"replicas": 3}, "replicas (3) > tasks.max (2)"),
    ("more pool pods than tasks", {"tasks.max": "2"}, {"replicas": 3, "statefulSetPerConnector": False},
     "replicas (3) > the pool's tasks (2"),
    ("unknown top-level value", {}, {"replica": 2}, "replica"),
])
def test_a_setup_that_would_fail_after_install_fails_at_render(helm, tmp_path, case, props, top, message):
    values = json.loads(json.dumps(MINIMAL))
    if props is None:
        values["connectors"] = {}
    else:
        values["connectors"]["orders"].update(props)
    values.update(top)
    r = helm_template(helm, tmp_path, values)
    assert r.returncode != 0, f"{case}: rendered"
    assert message in r.stderr, r.stderr


def test_kubernetes_older_than_1_28_is_refused(helm, tmp_path):
    r = helm_template(helm, tmp_path, MINIMAL, "--kube-version", "1.27.0")
    assert r.returncode != 0 and ">=1.28.0-0" in r.stderr, r.stderr
    render(helm, tmp_path, MINIMAL, "--kube-version", "1.28.0")


def test_rendered_connector_files_pass_validate(helm, tmp_path):
    _, docs = render(helm, tmp_path, PROD)
    maps = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-connectors")]
    assert len(maps) == 2
    secrets = tmp_path / "user-info"
    secrets.write_text("svc:pw\n")
    files = []
    for cm in maps:
        for name, body in cm["data"].items():
            f = tmp_path / name
            f.write_text(body.replace("/etc/lakestream/secrets/registry/user-info", str(secrets)))
            files.append(str(f))
    env = {**os.environ, "KAFKA_PASSWORD": "kafka-secret-value", "CATALOG_TOKEN": "catalog-secret-value"}
    r = subprocess.run([str(testkit.BIN), "validate", "--offline", *files], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    for secret in ["kafka-secret-value", "catalog-secret-value", "svc:pw"]:
        assert secret not in r.stdout + r.stderr, "a secret was printed"


def test_dashboard_charts_only_exported_metrics():
    dash = (CHART / "dashboards" / "lakestream.json").read_text()
    json.loads(dash)
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"lakestream_[a-z_]+", dash)}
    exported = set(re.findall(r'"(lakestream_[a-z_]+)"', (testkit.REPO / "src" / "metrics.rs").read_text()))
    assert used <= exported, used - exported
    # every panel follows the $connector selector
    for panel in json.loads(dash)["panels"]:
        for target in panel.get("targets", []):
            assert 'connector=~"$connector"' in target["expr"], (panel["title"], target["expr"])


def test_verify_runs_as_a_job_or_on_a_schedule_for_each_connector(helm, tmp_path):
    _, docs = render(helm, tmp_path, PROD)
    crons = kinds(docs, "CronJob")
    assert set(crons) == {"rel-lakestream-verify-orders", "rel-lakestream-verify-events"}, set(crons)
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    for name, cron in crons.items():
        assert cron["spec"]["schedule"] == "0 3 * * *" and cron["spec"]["concurrencyPolicy"] == "Forbid"
        pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"]
        (c,) = pod["containers"]
        assert c["args"][0] == "verify" and "--json" in c["args"], c["args"]
        # the file it audits is the one its connector's pods run
        cm = next(v for v in pod["volumes"] if v["name"] == "connectors")["configMap"]["name"]
        assert c["args"][-1].rsplit("/", 1)[1] in maps[cm]["data"], (c["args"], cm)
        assert {"KAFKA_PASSWORD", "CATALOG_TOKEN"} <= {e["name"] for e in c["env"]}
    # without a schedule: one Job per connector; off by default
    _, docs = render(helm, tmp_path, {**MINIMAL, "verify": {"enabled": True}})
    assert set(kinds(docs, "Job")) == {"rel-lakestream-verify-orders"} and not kinds(docs, "CronJob")
    _, docs = render(helm, tmp_path, MINIMAL)
    assert not kinds(docs, "Job") and not kinds(docs, "CronJob") and not kinds(docs, "PrometheusRule")


def test_alert_rules_use_exported_metrics(helm, tmp_path):
    _, docs = render(helm, tmp_path, PROD)
    (rule,) = kinds(docs, "PrometheusRule").values()
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    used = set(re.findall(r"lakestream_[a-z_]+", " ".join(exprs)))
    exported = set(re.findall(r'"(lakestream_[a-z_]+)"', (testkit.REPO / "src" / "metrics.rs").read_text()))
    assert used == {"lakestream_verify_mismatched_keys", "lakestream_verify_last_success_timestamp_seconds"}, used
    assert used <= exported


def test_a_connector_that_discovers_its_tables_renders_and_validates(helm, tmp_path):
    """A `table.path.prefix` connector, or one of a catalog's tables, needs no connector.class or
    topic, and its pods are not counted against tasks.max (each table found has its own tasks);
    its file validates."""
    lake = {"name": "lake", "table.path.prefix": "s3://lake/warehouse", "topic.prefix": "lake",
            "table.include.list": "sales\\..*", "bootstrap.servers": "kafka:9092",
            "schema.registry.url": "http://registry:8081"}
    for values in [{"connectors": {"lake": lake}},
                   {"connectors": {"lake": lake, **MINIMAL["connectors"]}, "statefulSetPerConnector": False, "replicas": 3}]:
        _, docs = render(helm, tmp_path, values)
        maps = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-connectors")]
        bodies = [body for cm in maps for body in cm["data"].values() if "table.path.prefix" in body]
        assert len(bodies) == 1, maps
        f = tmp_path / "lake.properties"
        f.write_text(bodies[0])
        r = subprocess.run([str(testkit.BIN), "validate", "--offline", str(f)], capture_output=True, text=True)
        assert r.returncode == 0 and "discovering in s3://lake/warehouse (not searched)" in r.stdout, r.stdout + r.stderr
    bad = {"connectors": {"lake": {k: v for k, v in lake.items() if k != "topic.prefix"}}}
    assert helm_template(helm, tmp_path, bad).returncode != 0
    # the tables of a catalog: catalog.type with topic.prefix, no table.identifier
    glue = {**{k: v for k, v in lake.items() if k != "table.path.prefix"}, "catalog.type": "glue",
            "catalog.region": "eu-west-1"}
    _, docs = render(helm, tmp_path, {"connectors": {"glue": glue}, "replicas": 2})
    (body,) = [b for d in docs if d["kind"] == "ConfigMap" for b in d["data"].values() if "catalog.type" in b]
    f.write_text(body)
    r = subprocess.run([str(testkit.BIN), "validate", "--offline", str(f)], capture_output=True, text=True)
    assert r.returncode == 0 and "discovering in Glue eu-west-1" in r.stdout, r.stdout + r.stderr
