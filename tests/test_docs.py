"""The documentation holds: every relative link (and its #anchor) in the repository's Markdown
resolves, every `properties` example passes `lakestream validate --offline`, and the README stays
a page a newcomer reads (at most 300 lines). The configuration reference's key table is checked
against src/config/keys.rs by `cargo test --test config_reference`."""

import re
import subprocess

import pytest

import testkit

REPO = testkit.REPO
PAGES = sorted([REPO / "README.md", REPO / "CHANGELOG.md", REPO / "CONTRIBUTING.md", REPO / "helm" / "README.md",
                *(REPO / "docs").rglob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def slug(heading):
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page):
    seen, out = {}, set()
    text = FENCE.sub("", page.read_text())
    for line in text.splitlines():
        m = re.match(r"^#{1,6} (.*)", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text())
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no heading #{anchor})")
    assert not broken, "\n".join(broken)


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n## A section\n")
    assert anchors(page) == {"title", "a-section"}


REQUIRED = {"name": "example", "topic": "example", "bootstrap.servers": "kafka:9092",
            "schema.registry.url": "http://registry:8081"}


def test_every_properties_example_validates(tmp_path):
    # lakestream's own files (the docs also show Kafka Connect sinks' properties)
    blocks = [(page, body) for page in PAGES for lang, body in FENCE.findall(page.read_text())
              if lang == "properties" and re.search(r"^connector\.class\s*=\s*(hudi|iceberg|delta)\s*$", body, re.M)]
    assert len(blocks) >= 1, "no lakestream properties example in the docs"
    for i, (page, body) in enumerate(blocks):
        # a fragment (a page showing only the keys it is about) gets the required keys it lacks
        given = set(re.findall(r"^([\w.-]+)\s*[=:]", body, re.M))
        needed = {**REQUIRED, **({"table.path": "s3://lake/t"} if "catalog.type" not in given else {})}
        filler = "".join(f"{k}={v}\n" for k, v in needed.items() if k not in given)
        f = tmp_path / f"example-{i}.properties"
        f.write_text(filler + body)
        r = subprocess.run([str(testkit.BIN), "validate", "--offline", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, f"{page.relative_to(REPO)}, example {i}:\n{body}\n{r.stderr}"


def test_the_readme_is_a_page_a_newcomer_reads():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 300, len(lines)
    first_screen = "\n".join(lines[:60])
    # what it is, why, and how to start, on the first screen
    for needle in ["exactly-once", "fidelity", "Formats"]:
        assert needle in first_screen, needle


@pytest.mark.parametrize("page", ["hudi.md", "iceberg.md", "delta.md", "events.md", "configuration.md",
                                  "operations.md", "benchmarks.md", "testing.md"])
def test_each_reference_page_exists_and_is_linked_from_the_readme(page):
    assert (REPO / "docs" / page).exists()
    assert f"(docs/{page}" in (REPO / "README.md").read_text()
