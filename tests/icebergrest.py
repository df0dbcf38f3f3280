"""Apache Iceberg's own REST catalog server (`org.apache.iceberg.rest.RESTCatalogServer` from
`iceberg-open-api:1.10.0:test-fixtures`, the server behind the `apache/iceberg-rest-fixture`
image) over a sqlite JDBC catalog and local files, as a module-scoped fixture; its jars from Maven
Central into /var/cache once. Skips, saying why, without java or mvn."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import mavenlibs
from conftest import free_port, wait_port

VERSION = "1.10.0"
CACHE = Path(os.environ.get("LAKESTREAM_ICEBERG_REST_CACHE", "/var/cache/lakestream-iceberg-rest")) / VERSION
M2 = Path(os.environ.get("LAKESTREAM_M2", "/var/cache/lakestream-m2"))
NONE = "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
# the test fixtures' own dependencies (Iceberg's build.gradle, `iceberg-open-api` testFixtures)
POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>lakestream</groupId><artifactId>iceberg-rest-fixture</artifactId><version>1</version><dependencies>
<dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-open-api</artifactId><version>{VERSION}</version>
  <classifier>test-fixtures</classifier>{NONE}</dependency>
<dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-core</artifactId><version>{VERSION}</version></dependency>
<dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-core</artifactId><version>{VERSION}</version>
  <classifier>tests</classifier>{NONE}</dependency>
<dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-data</artifactId><version>{VERSION}</version></dependency>
<dependency><groupId>org.eclipse.jetty</groupId><artifactId>jetty-servlet</artifactId><version>11.0.26</version></dependency>
<dependency><groupId>org.eclipse.jetty</groupId><artifactId>jetty-server</artifactId><version>11.0.26</version></dependency>
<dependency><groupId>org.xerial</groupId><artifactId>sqlite-jdbc</artifactId><version>3.50.3.0</version></dependency>
<dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>2.0.17</version></dependency>
<dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-common</artifactId><version>3.4.1</version><exclusions>
  <exclusion><groupId>org.slf4j</groupId><artifactId>*</artifactId></exclusion>
  <exclusion><groupId>ch.qos.reload4j</groupId><artifactId>*</artifactId></exclusion>
  <exclusion><groupId>org.eclipse.jetty</groupId><artifactId>*</artifactId></exclusion>
  <exclusion><groupId>com.sun.jersey</groupId><artifactId>*</artifactId></exclusion>
  <exclusion><groupId>org.apache.zookeeper</groupId><artifactId>*</artifactId></exclusion>
  <exclusion><groupId>org.apache.curator</groupId><artifactId>*</artifactId></exclusion>
  <exclusion><groupId>org.apache.kerby</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
</dependencies></project>"""


@pytest.fixture(scope="module")
def rest_server(tmp_path_factory):
    """The server's base URL, its catalog and warehouse in a temporary directory."""
    if not shutil.which("java") or not shutil.which("mvn"):
        pytest.skip("Apache Iceberg's REST catalog server needs java and mvn (Maven) on PATH")
    libs = CACHE / "libs"
    if not libs.is_dir():
        mavenlibs.copy_dependencies(POM, libs, M2)
    d = tmp_path_factory.mktemp("iceberg-rest")
    port = free_port()
    env = {**os.environ, "CATALOG_WAREHOUSE": f"file://{d}/warehouse", "CATALOG_URI": f"jdbc:sqlite:file:{d}/catalog.db",
           "CATALOG_JDBC_USER": "user", "CATALOG_JDBC_PASSWORD": "password", "CATALOG_REST_PORT": str(port)}
    log = open(d / "server.log", "wb")
    proc = subprocess.Popen(["java", "-Xmx512m", "-cp", str(libs / "*"), "org.apache.iceberg.rest.RESTCatalogServer"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_port("127.0.0.1", port, 90)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


