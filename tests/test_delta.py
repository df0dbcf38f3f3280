"""Delta Lake tables written by delta-rs during the test (CDF on and off, partitioned and not,
with checkpoints), revealed one version at a time: the topic replayed by key equals the table at
every version, from a snapshot and from the earliest changes, with no (key, version, op) twice."""

import time

import pytest

import deltakit as dk


def seed():
    s = int(time.time() * 1000) % 100000
    print("delta seed", s)
    return s


@pytest.mark.parametrize("cdf", [True, False], ids=["cdf", "no-cdf"])
@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_history_replays_to_every_version_from_a_snapshot(env, registry, tmp_path, cdf, partitioned):
    replay, ops, _, _ = dk.replay_revealed(env, registry, tmp_path, seed(), cdf=cdf, partitioned=partitioned)
    assert {e["op"] for e in replay.events} >= {"r", "c"}, ops


@pytest.mark.parametrize("cdf", [True, False], ids=["cdf", "no-cdf"])
@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "unpartitioned"])
def test_history_replays_to_every_version_as_changes_from_version_0(env, registry, tmp_path, cdf, partitioned):
    replay, ops, _, _ = dk.replay_revealed(env, registry, tmp_path, seed(), start="0", cdf=cdf, partitioned=partitioned)
    got = {e["op"] for e in replay.events}
    assert "r" not in got and {"c", "u", "d"} <= got, (got, ops)
