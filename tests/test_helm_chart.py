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
from pathlib import Path

import pytest
import yaml

import testkit

CHART = testkit.REPO / "helm" / "lakestream"
HELM = Path(os.environ.get("HELM_BIN", "/var/cache/lakestream-helm/layer/helm/helm"))

PROD = {
    "replicas": 2,
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
}


@pytest.fixture(scope="module")
def helm():
    if not HELM.exists():
        pytest.skip(f"helm not installed at {HELM} (scripts/lib.sh install_helm)")
    return HELM


def render(helm, tmp_path, values=None):
    args = [str(helm), "template", "rel", str(CHART)]
    if values:
        vf = tmp_path / "values.yaml"
        vf.write_text(yaml.safe_dump(values))
        args += ["-f", str(vf)]
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout, [d for d in yaml.safe_load_all(out.stdout) if d]


def test_lint_strict(helm):
    r = subprocess.run([str(helm), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("values", [None, PROD], ids=["defaults", "production"])
def test_rendered_manifests_validate_against_kubernetes_schemas(helm, tmp_path, values):
    text, docs = render(helm, tmp_path, values)
    f = tmp_path / "rendered.yaml"
    f.write_text(text)
    kv = Path(sys.executable).parent / "kubernetes-validate"
    for version in ["1.30.0", "1.37.0"]:
        r = subprocess.run([str(kv), "--strict", "-k", version, str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        checked = len(re.findall(r"passed for resource", r.stdout + r.stderr))
        # every document but the ServiceMonitor (a CRD kubernetes-validate has no schema for)
        assert checked == sum(d["kind"] != "ServiceMonitor" for d in docs), r.stdout + r.stderr


def test_statefulset_runs_tasks_by_pod_index_safely(helm, tmp_path):
    _, docs = render(helm, tmp_path, PROD)
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["TASK_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["LAKESTREAM_REPLICAS"]["value"] == "2"
    assert env["KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "kafka", "key": "password"}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["terminationGracePeriodSeconds"] >= 60
    assert {"/etc/lakestream/connectors/orders.properties", "/etc/lakestream/connectors/events.properties"} <= set(c["args"])
    assert any(v["mountPath"] == "/etc/lakestream/secrets/registry" for v in c["volumeMounts"])
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "ConfigMap", "Service", "ServiceMonitor", "PodDisruptionBudget", "ServiceAccount"} <= kinds


def test_connector_change_rolls_the_pods(helm, tmp_path):
    def checksum(values):
        _, docs = render(helm, tmp_path, values)
        sts = next(d for d in docs if d["kind"] == "StatefulSet")
        return sts["spec"]["template"]["metadata"]["annotations"]["checksum/connectors"]
    changed = json.loads(json.dumps(PROD))
    changed["connectors"]["orders"]["tasks.max"] = "3"
    assert checksum(PROD) != checksum(changed)
    assert checksum(PROD) == checksum(json.loads(json.dumps(PROD)))


def test_rendered_connector_files_pass_validate(helm, tmp_path):
    _, docs = render(helm, tmp_path, PROD)
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-connectors"))
    secrets = tmp_path / "user-info"
    secrets.write_text("svc:pw\n")
    files = []
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
