"""Metrics a production team alerts on (issue 12 item 5): every per-connector series carries
`connector` (and `task`), counters exist at 0 from the start (an `increase()` alert sees the
first error), label values are snake_case codes, lag is 0 on a caught-up table however old its
last commit, and the process and build series exist."""

import re
import subprocess
import time
import uuid

import requests

import testkit
from conftest import free_port


def scrape(port, want, timeout=60):
    deadline = time.time() + timeout
    while True:
        try:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            if want in text:
                return text
        except requests.RequestException:
            pass
        assert time.time() < deadline, f"no {want!r} on /metrics"
        time.sleep(0.3)


def value(text, series):
    m = re.search(r"^" + re.escape(series) + r" (\S+)$", text, re.M)
    assert m, f"{series} not exported"
    return float(m.group(1))


def test_series_exist_at_zero_and_a_caught_up_table_has_no_lag(env, registry, tmp_path):
    table = tmp_path / "quiet"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--path", str(table), "--rows", "50", "--partitions", "2",
                        "--commits", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    time.sleep(2)  # the last commit is seconds old: a lag computed from it would not be 0
    name = "m-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, name, table, name, env, **{"read.start-commit": "latest"})
    port = free_port()
    proc = testkit.start(props, "--metrics-port", str(port))
    try:
        c = f'connector="{name}"'
        text = scrape(port, f'lakestream_source_lag_seconds{{{c},task="0"}}')
        text = scrape(port, f'lakestream_source_units_total{{{c},outcome="skipped"}} 1')  # the start marker
        # nothing emitted yet: every counter is there, at 0
        for op in ["r", "c", "u", "d", "tombstone"]:
            assert value(text, f'lakestream_source_records_written_total{{{c},op="{op}"}}') == 0
        for kind in ["config", "unavailable", "unreachable", "data", "unsupported", "rejected", "fenced", "position",
                     "stopped", "internal"]:
            assert value(text, f'lakestream_errors_total{{{c},kind="{kind}"}}') == 0
        for series in [f'lakestream_outage_retries_total{{{c}}}', f'lakestream_source_corrupt_log_blocks_total{{{c}}}',
                       f'lakestream_schema_registry_requests_total{{{c},result="error"}}',
                       f'lakestream_sink_transactions_aborted_total{{{c},task="0"}}']:
            assert value(text, series) == 0, series
        assert value(text, f'lakestream_source_skipped_units_total{{{c},reason="start_at_latest"}}') == 1
        assert value(text, f'lakestream_source_skipped_units_total{{{c},reason="compaction"}}') == 0
        for kind in ["change", "snapshot"]:  # nothing emitted: no unit timed yet
            assert value(text, f'lakestream_source_unit_duration_seconds_count{{{c},kind="{kind}",task="0"}}') == 0
        # caught up on a table whose last commit is seconds old: no lag
        time.sleep(1.5)
        text = scrape(port, "lakestream_build_info")
        assert value(text, f'lakestream_source_lag_seconds{{{c},task="0"}}') == 0
        assert value(text, f'lakestream_source_pending_units{{{c}}}') == 0
        assert re.search(r'^lakestream_build_info\{version="[0-9.]+"\} 1$', text, re.M)
        assert value(text, "process_resident_memory_bytes") > 0
        # label values are codes, never prose
        for labels in re.findall(r"\{([^}]*)\}", text):
            for v in re.findall(r'(?:reason|kind|outcome|result|op)="([^"]*)"', labels):
                assert re.fullmatch(r"[a-z_]+", v), labels
        # every lakestream series but the build's names its connector
        for line in text.splitlines():
            if line.startswith("lakestream_") and not line.startswith("lakestream_build_info"):
                assert 'connector="' in line, line
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_status_api_reports_each_connector_like_kafka_connect(env, registry, tmp_path):
    """`/connectors` as Kafka Connect's REST API: names, and per connector its state (the worst
    task's), each task's state, last error, position and lag. One process runs a good connector
    and one whose table is not a table: the second is FAILED with the reason, the first RUNNING."""
    table = tmp_path / "t"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--path", str(table), "--rows", "50", "--partitions", "2",
                        "--commits", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    good, bad = "s-" + uuid.uuid4().hex[:8], "s-bad-" + uuid.uuid4().hex[:8]
    p_good = testkit.connector_props(tmp_path, good, table, good, env)
    (tmp_path / "nothing").mkdir()
    p_bad = testkit.connector_props(tmp_path, bad, tmp_path / "nothing", bad, env)
    port = free_port()
    proc = subprocess.Popen([str(testkit.BIN), "run", "--metrics-port", str(port), str(p_good), str(p_bad)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                s = requests.get(f"{url}/connectors?expand=status", timeout=5).json()
                if s.get(good, {}).get("status", {}).get("tasks", [{}])[0].get("position") and bad in s \
                        and s[bad]["status"]["connector"]["state"] == "FAILED":
                    break
            except requests.RequestException:
                pass
            assert time.time() < deadline, "status never showed the committed position and the failure"
            time.sleep(0.3)
        assert sorted(requests.get(f"{url}/connectors", timeout=5).json()) == sorted([good, bad])
        st = requests.get(f"{url}/connectors/{good}/status", timeout=5).json()
        assert st["name"] == good and st["type"] == "source" and st["connector"]["state"] == "RUNNING"
        (task,) = st["tasks"]
        assert task["id"] == 0 and task["state"] == "RUNNING" and task["trace"] is None and task["ready"] is True
        assert re.fullmatch(r"\d{17}", task["position"]) and task["lag_seconds"] == 0
        st = requests.get(f"{url}/connectors/{bad}/status", timeout=5).json()
        assert st["tasks"][0]["state"] == "FAILED" and "not a Hudi table" in st["tasks"][0]["trace"], st
        assert requests.get(f"{url}/connectors/nope/status", timeout=5).status_code == 404
        assert requests.get(f"{url}/ready", timeout=5).status_code == 200, "a failed connector leaves the running one ready"
        # the chart's probes: one connector's readiness and liveness, whatever the others do
        assert requests.get(f"{url}/connectors/{good}/status?probe=ready", timeout=5).status_code == 200
        assert requests.get(f"{url}/connectors/{good}/status?probe=live", timeout=5).status_code == 200
        r = requests.get(f"{url}/connectors/{bad}/status?probe=ready", timeout=5)
        assert r.status_code == 503 and r.json()["tasks"][0]["state"] == "FAILED", r.text
        text = requests.get(f"{url}/metrics", timeout=5).text
        assert f'lakestream_task_state{{connector="{bad}",state="failed",task="0"}} 1' in text
        assert f'lakestream_task_state{{connector="{good}",state="running",task="0"}} 1' in text
        # the good connector's units (its full scan, then commits) are timed once each
        timed = sum(value(text, f'lakestream_source_unit_duration_seconds_count{{connector="{good}",kind="{k}",task="0"}}')
                    for k in ["change", "snapshot"])
        assert timed >= 1, [l for l in text.splitlines() if "unit_duration" in l and good in l]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
