"""Avro's own compatibility rules as an independent check of the schemas a connector registers:
`org.apache.avro:avro` from Maven Central (with its Jackson), the jars cached under /var/cache,
and `tests/java/AvroBackward.java` run by the JDK's single-file launcher. Confluent's registry and
Apicurio apply this schema-resolution check for BACKWARD compatibility (the newer schema reads
data written with the older one)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import requests

import mavenlibs

AVRO_VERSION = "1.12.1"
CACHE = Path(os.environ.get("LAKESTREAM_AVRO_CACHE", "/var/cache/lakestream-avro")) / AVRO_VERSION
LIBS = CACHE / "libs"
CHECKER = Path(__file__).parent / "java" / "AvroBackward.java"

POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lakestream.test</groupId><artifactId>avro-check</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.avro</groupId><artifactId>avro</artifactId><version>{AVRO_VERSION}</version></dependency>
  </dependencies>
</project>
"""


def missing():
    """Why the checker cannot run here (None: it can)."""
    if not shutil.which("java") or not shutil.which("mvn"):
        return "the Avro compatibility check needs java and mvn (Maven) on PATH"
    return None


def install():
    if (LIBS / f"avro-{AVRO_VERSION}.jar").exists():
        return LIBS
    mavenlibs.copy_dependencies(POM, LIBS, CACHE / "m2", timeout=600)
    return LIBS


def backward(schemas):
    """One verdict per consecutive pair of `schemas` (JSON texts, oldest first): "ok" or
    "incompatible: ..."."""
    if len(schemas) < 2:
        return []
    out = subprocess.run(["java", "-cp", str(install()) + "/*", str(CHECKER)], input=json.dumps(schemas),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def subject_schemas(registry_url, subject):
    """Every version of `subject` in a Confluent-API registry, oldest first."""
    r = requests.get(f"{registry_url}/subjects/{subject}/versions", timeout=10)
    if r.status_code == 404:
        return []
    r.raise_for_status()
    texts = []
    for v in sorted(r.json()):
        s = requests.get(f"{registry_url}/subjects/{subject}/versions/{v}", timeout=10)
        s.raise_for_status()
        texts.append(s.json()["schema"])
    return texts
