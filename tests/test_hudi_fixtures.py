"""Every Hudi fixture (copy-on-write and merge-on-read, table versions 6/8/9), revealed one
committed instant at a time: after each instant the replayed topic equals the oracle."""

import uuid

import pytest

import testkit
from conftest import require_fixtures


def _cases():
    if not testkit.fixtures_present():
        return ["(fixtures absent)"]
    out = []
    for name in testkit.hudi_fixture_names():
        instants = testkit.load_oracle(name)["instants"]
        if not instants or "rows" in instants[0]:
            out.append(name)  # (perf_mor_v8 has digests instead of rows: see the benchmark test)
    return out


def replay_stepwise(env, registry, tmp_path, name, start, changelog=False, **props_extra):
    require_fixtures()
    oracle = testkit.load_oracle(name)
    table = testkit.extract(name, tmp_path / "t")
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "fx-" + uuid.uuid4().hex[:10]
    # instants already archived cannot be hidden (the reveal starts at the first instant still on
    # the active timeline); a full scan covers the archived past at once, and change mode reads
    # the archived instants from the timeline history in its first run
    instants = [i for i in oracle["instants"] if not i.get("archived")]
    others = oracle.get("other_completed_instants", [])
    extra = dict(props_extra)
    if start == "first" and instants:
        extra["read.start-commit"] = oracle["instants"][0]["requested"]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **extra)
    if not instants:
        testkit.run_once(props)
        assert testkit.consume_all(env, topic) == []
        return testkit.Replay(registry)
    replay, consumed = testkit.replay_steps(env, registry, revealed, oracle, instants, props, topic, name, changelog)
    # the rest of the timeline (non-data instants) emits nothing
    if others:
        revealed.reveal_through("99999999999999999999")
        testkit.run_once(props)
        assert len(testkit.consume_all(env, topic)) == consumed, "non-data instants emitted records"
    return replay


@pytest.mark.parametrize("name", _cases())
def test_fixture_replays_to_oracle_from_full_scan(env, registry, tmp_path, name):
    replay = replay_stepwise(env, registry, tmp_path, name, "earliest")
    ops = {e["op"] for e in replay.events}
    assert not replay.events or "r" in ops


@pytest.mark.parametrize("name", _cases())
def test_fixture_replays_to_oracle_as_changes(env, registry, tmp_path, name):
    replay = replay_stepwise(env, registry, tmp_path, name, "first")
    assert "r" not in {e["op"] for e in replay.events}


def _table_service_cases():
    if not testkit.fixtures_present():
        return ["(fixtures absent)"]
    return [n for n in _cases() if any(i.get("operation") in ("COMPACT", "CLUSTER")
                                       for i in testkit.load_oracle(n)["instants"])]


@pytest.mark.parametrize("name", _table_service_cases())
def test_compaction_and_clustering_read_but_emit_nothing(env, registry, tmp_path, name):
    """With skip_compaction/skip_clustering off, their output is read and diffed: no row twice."""
    replay_stepwise(env, registry, tmp_path, name, "first", **{
        "read.streaming.skip_compaction": "false", "read.streaming.skip_clustering": "false"})


def _mor_cases():
    if not testkit.fixtures_present():
        return ["(fixtures absent)"]
    return [n for n in _cases() if testkit.load_oracle(n)["table_type"] == "MERGE_ON_READ"]


@pytest.mark.parametrize("name", _mor_cases())
def test_changelog_mode_replays_to_oracle(env, registry, tmp_path, name):
    """Every log record as its own event (late records that lose ordering emit nothing)."""
    replay_stepwise(env, registry, tmp_path, name, "first", changelog=True, **{"changelog.enabled": "true"})


def test_skip_merge_emits_late_records_unmerged(env, registry, tmp_path):
    """skip_merge does not apply event-time ordering: the fixture's out-of-order updates (lower
    `ts`, which a merge rejects) are published as they were written."""
    require_fixtures()
    name = "generated/long_history_mor_v8"
    oracle = testkit.load_oracle(name)
    table = testkit.extract(name, tmp_path / "t")
    topic = "skip-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{
        "read.start-commit": oracle["instants"][0]["requested"], "hoodie.datasource.merge.type": "skip_merge"})
    testkit.run_once(props)
    replay = testkit.Replay(registry, changelog=True)
    replay.apply(testkit.consume_all(env, topic))
    late = [e for e in replay.events if e["op"] == "u" and e["after"]["ts"] < e["before"]["ts"]]
    assert late, "skip_merge must publish the out-of-order updates"


@pytest.mark.parametrize("name", ["sample_table/cow/v9_txns_simple_meta", "sample_table/mor/avro/v9_txns_simple_meta"])
def test_interval_transaction_boundary_replays_to_oracle(env, registry, tmp_path, name):
    """transaction.boundary=interval groups instants into transactions by time, and small
    transaction.max.records splits them: the replay is the same."""
    if not testkit.fixtures_present():
        pytest.skip("fixtures absent")
    replay_stepwise(env, registry, tmp_path, name, "first", **{
        "transaction.boundary": "interval", "transaction.interval.ms": "60000", "transaction.max.records": "3"})


SPILL_CASES = [
    # moves between partitions, insert overwrite, hard and soft deletes, archived history
    "generated/long_history_cow_v8",
    "generated/long_history_mor_v8",
    "sample_table/cow/v9_txns_simple_meta",
    "sample_table/mor/avro/v9_txns_complex_meta",
]
TINY = {"read.memory.budget": "1"}


@pytest.mark.parametrize("name", SPILL_CASES)
def test_tiny_memory_budget_diffs_in_buckets_and_replays_to_oracle(env, registry, tmp_path, name):
    """read.memory.budget of one byte: every change unit is diffed in key buckets on disk (log
    records of a merge are never held whole, whatever the budget); the replay still equals the
    oracle at every instant."""
    if not testkit.fixtures_present():
        pytest.skip("fixtures absent")
    testkit.RUN_LOGS.clear()
    spill = tmp_path / "spill"
    replay_stepwise(env, registry, tmp_path, name, "first", **TINY, **{"read.spill.dir": str(spill)})
    logs = "\n".join(testkit.RUN_LOGS)
    assert "diffing in key buckets" in logs, "the bucketed diff did not run"
    assert not any(p.is_file() for p in spill.rglob("*")), "spill files left behind"


@pytest.mark.parametrize("name", [
    # one key held twice (written with `insert`), and a key live in two partitions
    "sample_table/cow/v9_timebasedkeygen_nonhivestyle",
    "sample_table/mor/avro/v9_timebasedkeygen_nonhivestyle",
    "sample_table/cow/v9_timebasedkeygen_epochmillis",
    "generated/long_history_mor_v8",
])
def test_tiny_memory_budget_full_scan_of_final_state(env, registry, tmp_path, name):
    """A full scan of the final state with a one-byte budget: the duplicate-key pass spills its
    key hashes to runs on disk, and each key is still emitted once (its newest commit)."""
    require_fixtures()
    oracle = testkit.load_oracle(name)
    table = testkit.extract(name, tmp_path / "t")
    topic = "fxs-" + uuid.uuid4().hex[:10]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **TINY, **{"read.start-commit": "earliest"})
    testkit.RUN_LOGS.clear()
    testkit.run_once(props)
    assert "key hashes spilled to runs on disk" in "\n".join(testkit.RUN_LOGS), "the key pass did not spill"
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    assert {e["op"] for e in replay.events} == {"r"}
    testkit.compare(oracle, oracle["instants"][-1]["rows"], replay, f"{name} full scan of the final state")
