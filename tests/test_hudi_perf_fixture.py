"""The 1M-row merge-on-read fixture (10 file groups, 5 rounds of 100k upserts in log files),
streamed as changes one revealed instant at a time; the replayed table's digest, row count and
sums must equal the oracle's at every instant."""

import hashlib
import uuid

import testkit
from conftest import require_fixtures

NAME = "generated/perf_mor_v8"


def digest(state):
    lines = []
    for row in state.values():
        v2 = repr(float(row["v2"]))
        lines.append("|".join(str(row[c]) for c in ("_hoodie_record_key", "_hoodie_partition_path", "_hoodie_commit_time",
                                                    "id", "part", "ts", "round", "v1")) + f"|{v2}|{row['tag']}\n")
    lines.sort()
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def test_perf_fixture_streams_to_the_oracle_digest(env, registry, tmp_path):
    require_fixtures()
    oracle = testkit.load_oracle(NAME)
    table = testkit.extract(NAME, tmp_path / "t")
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "perf-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env,
                                    **{"read.start-commit": oracle["instants"][0]["requested"]})
    replay, consumed = testkit.Replay(registry), 0
    for step, inst in enumerate(oracle["instants"]):
        revealed.reveal_through(testkit.instant_order(inst))
        testkit.run_once(props, timeout=600)
        records = testkit.consume_all(env, topic)
        replay.apply(records[consumed:])
        consumed = len(records)
        assert len(replay.state) == inst["row_count"], f"step {step}"
        for col, total in inst["sums"].items():
            assert sum(r[col] for r in replay.state.values()) == total, f"step {step} sum of {col}"
        assert digest(replay.state) == inst["digest"], f"step {step} digest"
