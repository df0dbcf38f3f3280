"""The container image the chart runs (issue 12 item 1): built FROM scratch by podman out of the
release build (the Dockerfile's `prebuilt` target; nothing is pulled), non-root, ENTRYPOINT
lakestream, OCI labels; its root file system runs `lakestream --version` and streams a table with
`run --once` against the test broker, chrooted (containers cannot run on this machine)."""

import os
import shutil
import subprocess
import uuid

import pytest

import testkit


def test_the_image_runs_the_connector_from_its_own_root_file_system(env, registry, tmp_path):
    if shutil.which("podman") is None or os.geteuid() != 0:
        pytest.skip("needs podman (apt-get install podman; scripts/lib.sh install_podman) and root for chroot")
    table = tmp_path / "table"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--path", str(table), "--rows", "120", "--partitions", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    topic = "img-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    tag = f"localhost/lakestream-test:{uuid.uuid4().hex[:8]}"
    try:
        r = subprocess.run(["bash", str(testkit.REPO / "scripts" / "image.sh"), tag, str(props)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        assert "65532:65532 [/usr/local/bin/lakestream] Apache-2.0" in r.stdout, r.stdout
        assert "lakestream 0.1.0" in r.stdout, r.stdout
        assert "unit emitted" in r.stderr and "r=120" in r.stderr, r.stderr[-3000:]
        records = testkit.consume_all(env, topic)
        assert len(records) == 120
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True)
