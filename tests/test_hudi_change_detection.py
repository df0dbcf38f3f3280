"""`read.change.detection=narrow` (the default: which keys an instant changed is decided from the
key and commit-time columns or the instant's log blocks, and only their rows are read whole)
publishes exactly the events of `full` (both sides of every touched file group read and diffed
whole), instant by instant: on every Hudi fixture, and on random generated histories (COW and
MOR: updates, deletes, inserts, partition moves under simple and global indexes, compaction,
`_hoodie_operation` columns), in memory (partition by partition where the Kafka key carries the
partition path: against `full`'s whole-unit diff) and in key buckets."""

import collections
import json
import random
import re
import subprocess
import uuid

import pytest

import testkit
from test_hudi_fixtures import _cases


def events_by_instant(env, registry, topic):
    """Each instant's events (key, op, before, after, file) sorted, and its tombstone count."""
    out, tombstones, last = collections.defaultdict(list), collections.Counter(), None
    for _, _, k, v in testkit.consume_all(env, topic):
        key = json.dumps(registry.decode(k), sort_keys=True, default=str)
        if v is None:
            tombstones[last] += 1
            continue
        ev = registry.decode(v)
        last = ev["source"]["instant"]
        out[last].append(json.dumps([key, ev["op"], ev["before"], ev["after"]], sort_keys=True, default=str))
    return {i: sorted(v) for i, v in out.items()}, dict(tombstones)


def both_ways(env, registry, tmp_path, table, start, **extra):
    """Run the connector over the table's history once with each detection mode; the events of
    every instant must be equal. Returns the narrow run's events and its log."""
    seen, logs = {}, {}
    for mode in ("full", "narrow"):
        topic = f"cd-{mode}-" + uuid.uuid4().hex[:8]
        props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{
            "read.start-commit": start, "read.change.detection": mode, **extra})
        logs[mode] = testkit.run_once(props, timeout=300).stderr
        seen[mode] = events_by_instant(env, registry, topic)
    (full, full_tomb), (narrow, narrow_tomb) = seen["full"], seen["narrow"]
    assert sorted(narrow) == sorted(full), "instants with events differ"
    for instant in full:
        assert narrow[instant] == full[instant], f"instant {instant}: narrow and full events differ\n" \
            f"only narrow: {sorted(set(narrow[instant]) - set(full[instant]))[:3]}\n" \
            f"only full: {sorted(set(full[instant]) - set(narrow[instant]))[:3]}"
    assert narrow_tomb == full_tomb
    return narrow, logs["narrow"]


@pytest.mark.parametrize("name", _cases())
def test_fixture_narrow_events_equal_full_diff(env, registry, tmp_path, name):
    testkit.require_fixtures()
    oracle = testkit.load_oracle(name)
    if not oracle["instants"]:
        pytest.skip("no instants")
    table = testkit.extract(name, tmp_path / "t")
    both_ways(env, registry, tmp_path, table, oracle["instants"][0]["requested"])


def completed_instants(table):
    """A generated table's completed commits and delta commits (table version 6 layout), in order."""
    return sorted(p.name.split(".")[0] for p in (table / ".hoodie").iterdir()
                  if p.name.endswith(".commit") or p.name.endswith(".deltacommit"))


def generated(tmp_path, seed):
    """A random history: COW or MOR, moves under a simple or global index, compaction, deletes."""
    rng = random.Random(seed)
    kind = rng.choice(["cow", "mor"])
    args = ["--type", kind, "--rows", str(rng.choice([800, 3000])), "--partitions", str(rng.randint(1, 4)),
            "--commits", str(rng.randint(3, 7)), "--update-fraction", str(rng.choice([0.01, 0.1, 0.4])),
            "--delete-fraction", str(rng.choice([0.0, 0.01, 0.05])), "--insert-fraction", str(rng.choice([0.0, 0.02, 0.1])),
            "--move-fraction", str(rng.choice([0.0, 0.0, 0.03])), "--index", rng.choice(["simple", "global"]),
            "--seed", str(seed)]
    if kind == "mor":
        args += ["--compact-every", str(rng.choice([0, 2, 3]))]
        if rng.random() < 0.3:
            args += ["--operation-field"] + (["--repeat-updates"] if rng.random() < 0.5 else [])
    table = tmp_path / f"gen{seed}"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--path", str(table), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return table, args


# seeds 8, 13 and 21: several partitions under a simple index (the per-partition diff)
@pytest.mark.parametrize("seed", [*range(8), 8, 13, 21])
def test_generated_history_narrow_events_equal_full_diff(env, registry, tmp_path, seed, monkeypatch):
    table, args = generated(tmp_path, seed)
    first = completed_instants(table)[0]
    # a small budget: the changed keys fit its quarter, their rows are diffed in key buckets
    extra = {"read.memory.budget": "64KiB"} if seed % 4 == 3 else {}
    monkeypatch.setenv("RUST_LOG", "info,rdkafka=warn,lakestream::source::hudi::diffed=debug")
    events, log = both_ways(env, registry, tmp_path, table, first, **extra)
    assert events, f"no events for {args}"
    # the Kafka key carries the partition path (simple index, several partitions): narrow diffs
    # partition by partition, full (the reference) the whole unit at once
    by_partition = "simple" in args and args[args.index("--partitions") + 1] != "1"
    if by_partition and not extra:
        assert "diffed partition by partition" in log, "the per-partition diff did not run"
    # (with the small budget the first instant, every row a create, has more keys than fit)
    assert extra or "diffing whole file groups" not in log
    if extra:
        bucketed = set(re.findall(r"diffing in key buckets.*?instant=(\d+)", log))
        whole = set(re.findall(r"diffing whole file groups.*?instant=\"?(\d+)", log))
        assert bucketed - whole, "the bucketed diff of the selected rows did not run"


def test_changed_keys_beyond_the_budget_fall_back_to_the_bounded_full_diff(env, registry, tmp_path):
    """Candidate keys may take a quarter of read.memory.budget; a unit with more takes the full
    diff (which spills to key buckets), logged and counted, with the same events."""
    table, _ = generated(tmp_path, 3)
    first = completed_instants(table)[0]
    _, log = both_ways(env, registry, tmp_path, table, first, **{"read.memory.budget": "1"})
    assert "too_many_keys" in log and "diffing whole file groups" in log, log[-3000:]


def test_narrow_reads_whole_rows_only_for_changed_keys(env, registry, tmp_path):
    """A 1 % update of a MOR table: the change unit decodes whole rows only for the changed keys
    (rows read ≤ 3 × events), where the full diff reads both sides of every file group."""
    table = tmp_path / "t"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", "mor", "--path", str(table), "--rows", "20000",
                        "--partitions", "2", "--commits", "1", "--update-fraction", "0.01", "--delete-fraction", "0.001",
                        "--insert-fraction", "0.001"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    instants = completed_instants(table)
    reads = {}
    for mode in ("full", "narrow"):
        topic = f"cdr-{mode}-" + uuid.uuid4().hex[:8]
        props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{
            "read.start-commit": instants[-1], "read.change.detection": mode})
        log = testkit.run_once(props).stderr
        done = [l for l in log.splitlines() if "unit emitted" in l and "snapshot=false" in l]
        assert done, log[-3000:]
        f = dict(re.findall(r"\b(c|u|d|rows_read)=(\d+)", done[-1]))
        reads[mode] = (int(f["rows_read"]), int(f["c"]) + int(f["u"]) + int(f["d"]))
    (full_rows, full_events), (narrow_rows, narrow_events) = reads["full"], reads["narrow"]
    assert narrow_events == full_events > 0
    assert narrow_rows <= 3 * narrow_events, reads
    assert full_rows > 10 * narrow_rows, reads


def test_a_unit_beyond_the_budget_is_diffed_partition_by_partition_in_memory(env, registry, tmp_path, monkeypatch):
    """A change unit whose two sides exceed what read.memory.budget gives one in-memory diff, on
    a table whose Kafka key carries the partition path: while a few partitions fit at once it is
    diffed partition by partition in memory instead of in key buckets on disk, with the events
    of the whole-unit diff. Budgets from too small for that to roomy: each way must agree."""
    table = tmp_path / "t"
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", "cow", "--path", str(table), "--rows", "30000",
                        "--partitions", "8", "--commits", "2", "--update-fraction", "0.1", "--delete-fraction", "0.01",
                        "--insert-fraction", "0.01", "--move-fraction", "0.01"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first = completed_instants(table)[1]
    monkeypatch.setenv("LAKESTREAM_READ_THREADS", "2")
    ways = set()
    for budget in ("256KiB", "1MiB", "2MiB", "4MiB", "16MiB"):
        _, log = both_ways(env, registry, tmp_path, table, first, **{"read.memory.budget": budget})
        for way, pattern in (("partitions", "diffed partition by partition in memory"),
                             ("buckets", "diffing in key buckets")):
            if pattern in log:
                ways.add(way)
    assert ways == {"partitions", "buckets"}, f"ways taken: {ways}"
