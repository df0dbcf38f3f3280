"""Jars from Maven Central for the test kit (the Kafka broker, Avro's compatibility checker): a
small pom and `mvn dependency:copy-dependencies` into a directory under /var/cache, once."""

import shutil
import subprocess
import tempfile
from pathlib import Path


def copy_dependencies(pom: str, libs: Path, repo: Path, timeout=900):
    """The dependencies `pom` names, copied into `libs` (made whole or not at all)."""
    libs.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="pom-", dir=libs.parent))
    try:
        (tmp / "pom.xml").write_text(pom)
        subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", "dependency:copy-dependencies",
                        f"-DoutputDirectory={tmp / 'libs'}", f"-Dmaven.repo.local={repo}"],
                       cwd=tmp, check=True, timeout=timeout)
        (tmp / "libs").rename(libs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return libs
