"""Hudi tables with CDC enabled (issue 11 item 1): `-cdc`/`.cdc` log files written by the
generator from Hudi's published format (`HoodieCDCUtils` schemas, CDC data blocks, `cdcStats`),
in all three supplemental logging modes, copy-on-write and merge-on-read. Checked two ways:
hudi-rs (an independent reader) still reads the table's data (the CDC files are invisible to a
snapshot reader) and the connector, reading the changes from the CDC files, replays to hudi-rs's
table at every revealed instant; and the events from the CDC files equal the events the diff
gives (`read.cdc.from-log=false`) for every instant."""

import json
import subprocess
import uuid

import pytest

import testkit

MODES = ["op-key-only", "data-before", "data-before-after"]
# columns a CDC image cannot carry (Hudi's CDC logger strips the meta fields; the key and
# partition path are derived, the after image's commit time is the instant)
NOT_LOGGED = {"_hoodie_commit_seqno", "_hoodie_file_name"}


def generate(path, kind, mode, *extra):
    r = subprocess.run([str(testkit.BIN), "generate", "hudi", "--type", kind, "--path", str(path), "--rows", "600",
                        "--partitions", "3", "--commits", "4", "--update-fraction", "0.15", "--delete-fraction", "0.04",
                        "--insert-fraction", "0.05", "--move-fraction", "0.03", "--cdc", mode, *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return path


def image(img, before):
    if img is None:
        return None
    drop = NOT_LOGGED | ({"_hoodie_commit_time"} if before else set())
    return {k: v for k, v in img.items() if k not in drop}


def by_instant(events):
    out = {}
    for e in events:
        out.setdefault(e["source"]["instant"], {})[e["_key"]] = (e["op"], image(e["before"], True), image(e["after"], False))
    return out


@pytest.mark.parametrize("kind", ["cow", "mor"])
@pytest.mark.parametrize("mode", MODES)
def test_cdc_files_replay_to_the_table_and_equal_the_diff(env, registry, tmp_path, kind, mode):
    table = generate(tmp_path / f"cdc-{kind}", kind, mode, *(["--index", "global"] if mode == "data-before" else []))
    cdc_files = sorted(p.name for p in table.rglob("*.cdc"))
    assert len(cdc_files) >= 8, cdc_files  # 4 upserts x 3 file groups
    props_text = (table / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.cdc.enabled=true" in props_text
    oracle = testkit.hudi_rs_oracle(table)  # hudi-rs reads the data with the CDC files present
    assert len(oracle["instants"]) == 5 and len(oracle["instants"][0]["rows"]) == 600
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = f"cdc-{kind}-{mode}-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    # stepwise, from the CDC files: replay equals hudi-rs's table at every instant
    replay, _ = testkit.replay_steps(env, registry, revealed, oracle, oracle["instants"], props, topic, f"CDC {mode} {kind}")
    logs = "".join(list(testkit.RUN_LOGS)[-len(oracle["instants"]):])
    assert logs.count("change unit read from its CDC log files") == 4, logs[-3000:]
    assert {e["op"] for e in replay.events} >= {"c", "u", "d"}
    # the same table through the diff: the same events, instant by instant
    topic2 = topic + "-diff"
    props2 = testkit.connector_props(tmp_path, "c-" + topic2, table, topic2, env, **{
        "read.cdc.from-log": "false", "read.start-commit": oracle["instants"][1]["requested"]})
    testkit.run_once(props2)
    assert "read from its CDC log files" not in testkit.RUN_LOGS[-1]
    diffed = []  # (not replayed: it starts mid-history)
    for _, _, k, v in testkit.consume_all(env, topic2):
        if v is not None:
            diffed.append({**registry.decode(v), "_key": json.dumps(registry.decode(k), sort_keys=True, default=str)})
    got, want = by_instant(replay.events), by_instant(diffed)
    got.pop(oracle["instants"][0]["requested"])  # the full scan (`r`), before any CDC file
    assert got.keys() == want.keys() and len(want) == 4
    for inst in want:
        assert got[inst].keys() == want[inst].keys(), f"{inst}: keys differ"
        for k in want[inst]:
            assert got[inst][k] == want[inst][k], f"{inst} {k}: CDC {got[inst][k]} vs diff {want[inst][k]}"


@pytest.mark.parametrize("mode", ["data-before-after", "data-before"])
def test_a_cleaned_previous_slice_is_read_past_from_before_images(env, registry, tmp_path, mode):
    """The previous base file of every file group the last instant rewrote is removed (as a
    cleaner with short retention leaves it): CDC files with before images carry the instant on;
    without them (read.cdc.from-log=false) the connector stops naming the missing file."""
    table = generate(tmp_path / "cleaned", "cow", mode)
    oracle = testkit.hudi_rs_oracle(table)
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "cdc-cleaned-" + uuid.uuid4().hex[:6]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    replay, consumed = testkit.replay_steps(env, registry, revealed, oracle, oracle["instants"][:-1], props, topic, "cleaned")
    prev, last = oracle["instants"][-2]["requested"], oracle["instants"][-1]["requested"]
    removed = [f for f in table.rglob(f"*_{prev}.parquet")]
    assert removed
    for f in removed:
        f.unlink()
    topic2 = topic + "-diff"
    props2 = testkit.connector_props(tmp_path, "c-" + topic2, table, topic2, env,
                                     **{"read.cdc.from-log": "false", "read.start-commit": last})
    revealed.reveal_through(testkit.instant_order(oracle["instants"][-1]))
    r = testkit.run_once(props2, check=False)
    assert r.returncode != 0 and "previous slice of file group" in r.stderr and prev in r.stderr, r.stderr[-2000:]
    testkit.run_once(props)
    assert "read from its CDC log files" in testkit.RUN_LOGS[-1]
    replay.apply(testkit.consume_all(env, topic)[consumed:])  # one partition: an append
    testkit.compare(oracle, oracle["instants"][-1]["rows"], replay, f"cleaned {mode}")
