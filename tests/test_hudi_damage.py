"""Damaged log files: a truncated block or garbage between blocks is skipped (logged with the
file name, counted), and the rest of the file still reads: the result is the table minus the
damaged block, never a failure or a silently different row."""

import random
import uuid

import pytest

import testkit
from conftest import require_fixtures

# fixtures whose newest file slices still have live log files (Avro and Parquet data blocks)
FIXTURES = ["sample_table/mor/avro/v9_timebasedkeygen_nonhivestyle", "sample_table/mor/parquet/v6_nonpartitioned"]


def state_of(env, registry, tmp_path, table, label):
    topic = f"dmg-{label}-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    r = testkit.run_once(props)
    replay = testkit.Replay(registry)
    replay.apply(testkit.consume_all(env, topic))
    return replay.state, r.stderr


@pytest.mark.parametrize("fixture", FIXTURES)
def test_damaged_log_blocks_are_skipped_and_reported(env, registry, tmp_path, fixture):
    require_fixtures()
    copies = {}
    for label in ("pristine", "without", "truncated", "garbage"):
        copies[label] = testkit.extract(fixture, tmp_path / label)
    # the largest log file holds an Avro data block
    logs = sorted((p for p in copies["pristine"].rglob(".*.log.*") if ".hoodie" not in p.parts),
                  key=lambda p: p.stat().st_size)
    victim = logs[-1].relative_to(copies["pristine"])
    data = (copies["pristine"] / victim).read_bytes()
    rng = random.Random(7)
    junk = bytes(rng.randrange(256) for _ in range(97)) + b"#HUD"
    (copies["without"] / victim).unlink()
    (copies["truncated"] / victim).write_bytes(junk + data[: len(data) // 2])
    (copies["garbage"] / victim).write_bytes(junk + data + junk + data[: len(data) - 9])

    pristine, _ = state_of(env, registry, tmp_path, copies["pristine"], "p")
    without, _ = state_of(env, registry, tmp_path, copies["without"], "w")
    truncated, err_t = state_of(env, registry, tmp_path, copies["truncated"], "t")
    garbage, err_g = state_of(env, registry, tmp_path, copies["garbage"], "g")

    assert without != pristine, "the victim block must matter for this test to mean anything"
    assert truncated == without, "a truncated block is dropped, nothing else"
    assert garbage == pristine, "garbage around an intact block loses nothing"
    for err in (err_t, err_g):
        assert "corrupt or truncated log block skipped" in err and victim.name in err, err[-2000:]


def test_a_cleaned_file_fails_loudly_naming_instant_file_and_way_out(env, tmp_path):
    """A lagging reader whose files were cleaned must stop, not skip: nothing silently lost."""
    require_fixtures()
    name = "sample_table/cow/v9_txns_simple_meta"
    oracle = testkit.load_oracle(name)
    table = testkit.extract(name, tmp_path / "t")
    first = oracle["instants"][0]["requested"]
    # the cleaner removes the first version of a file group that later commits rewrote
    victim = sorted(table.rglob(f"*_{first}.parquet"))[0]
    versions = [p for p in victim.parent.glob(victim.name.split("_")[0] + "_*.parquet")]
    assert len(versions) > 1, "pick a file group with several versions"
    victim.unlink()
    topic = "clean-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{"read.start-commit": first})
    r = testkit.run_once(props, check=False)
    assert r.returncode == 1, r.stderr
    assert victim.name in r.stderr and "read.start-commit" in r.stderr, r.stderr[-2000:]
    assert testkit.consume_all(env, topic) == [], "nothing of the unreadable instant may be published"
