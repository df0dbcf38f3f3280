"""The demo generator (checked with hudi-rs, an independent reader), the connector over a
generated history, and the command line's contract (exit codes, messages, secrets)."""

import subprocess
import time
import uuid

import testkit


def run(*args, **kw):
    return subprocess.run([str(testkit.BIN), *map(str, args)], capture_output=True, text=True, timeout=120, **kw)


def generate(path, *extra):
    r = run("generate", "hudi", "--type", "cow", "--path", path, *extra)
    assert r.returncode == 0, r.stderr
    return path


def test_generated_table_reads_with_hudi_rs_and_streams_to_its_state(env, registry, tmp_path):
    table = generate(tmp_path / "gen", "--rows", "3000", "--partitions", "3", "--commits", "4",
                     "--update-fraction", "0.2", "--delete-fraction", "0.05", "--insert-fraction", "0.1")
    oracle = testkit.hudi_rs_oracle(table)
    assert len(oracle["instants"]) == 5
    assert len(oracle["instants"][0]["rows"]) == 3000
    sizes = [len(i["rows"]) for i in oracle["instants"]]
    assert len(set(sizes)) > 1, sizes  # inserts and deletes changed the row count
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "gen-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    replay, _ = testkit.replay_steps(env, registry, revealed, oracle, oracle["instants"], props, topic, "generated")
    ops = {e["op"] for e in replay.events}
    assert ops == {"r", "c", "u", "d"}, ops


def test_generated_mor_table_with_logs_and_compaction_streams_to_hudi_rs_state(env, registry, tmp_path):
    table = tmp_path / "genmor"
    r = run("generate", "hudi", "--type", "mor", "--path", table, "--rows", "2000", "--partitions", "2",
            "--commits", "5", "--compact-every", "3", "--update-fraction", "0.2", "--delete-fraction", "0.05",
            "--insert-fraction", "0.05")
    assert r.returncode == 0, r.stderr
    logs = [p for p in table.rglob(".*.log.*")]
    assert logs, "merge-on-read writes log files"
    oracle = testkit.hudi_rs_oracle(table)
    actions = [i["action"] for i in oracle["instants"]]
    assert actions.count("deltacommit") == 6 and actions.count("commit") == 1, actions
    assert [i["operation"] for i in oracle["instants"]].count("COMPACT") == 1
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "genmor-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env,
                                    **{"read.start-commit": oracle["instants"][0]["requested"]})
    replay, _ = testkit.replay_steps(env, registry, revealed, oracle, oracle["instants"], props, topic, "generated MOR")
    assert {e["op"] for e in replay.events} == {"c", "u", "d"}


def test_changelog_mode_emits_every_operation_in_order(env, registry, tmp_path):
    """A MOR table with `_hoodie_operation` whose updates pass through an intermediate version in
    the same instant: changelog mode emits both changes, in order, chained before → after."""
    table = tmp_path / "genlog"
    r = run("generate", "hudi", "--type", "mor", "--path", table, "--rows", "300", "--partitions", "2",
            "--commits", "4", "--compact-every", "2", "--operation-field", "--repeat-updates",
            "--update-fraction", "0.2", "--delete-fraction", "0.05", "--insert-fraction", "0.05")
    assert r.returncode == 0, r.stderr
    oracle = testkit.hudi_rs_oracle(table)
    revealed = testkit.RevealedTable(table, oracle["timeline_layout_version"])
    topic = "genlog-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env, **{
        "read.start-commit": oracle["instants"][0]["requested"], "changelog.enabled": "true"})
    replay, _ = testkit.replay_steps(env, registry, revealed, oracle, oracle["instants"], props, topic,
                                     "changelog", changelog=True)
    by_key_instant = {}
    for e in replay.events:
        by_key_instant.setdefault((e["_key"], e["source"]["instant"]), []).append(e)
    repeated = [evs for evs in by_key_instant.values() if len(evs) > 1]
    assert repeated, "intermediate versions must appear as their own events"
    for evs in repeated:
        assert [e["op"] for e in evs] == ["u", "u"], [e["op"] for e in evs]
        assert evs[0]["after"] == evs[1]["before"], "the second change starts where the first ended"
        assert evs[0]["before"] != evs[0]["after"]


def test_generate_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("keep me")
    r = run("generate", "hudi", "--path", tmp_path / "x")
    assert r.returncode == 2 and "not empty" in r.stderr
    assert (tmp_path / "x" / "f").read_text() == "keep me"


def base_props(tmp_path, table, **extra):
    props = {"name": "cli", "connector.class": "hudi", "table.path": table, "topic": "t",
             "bootstrap.servers": "127.0.0.1:1", "schema.registry.url": "http://127.0.0.1:1"}
    props.update(extra)
    p = tmp_path / "c.properties"
    p.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return p


def test_validate_ok_masks_secrets(tmp_path):
    p = base_props(tmp_path, tmp_path, **{"producer.override.sasl.password": "${env:CLI_SECRET}"})
    r = run("validate", "--offline", p, env={"CLI_SECRET": "s3cr3t-value", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "sasl.password = ********" in r.stdout
    assert "s3cr3t-value" not in r.stdout + r.stderr


def test_bad_input_exits_2_naming_what_is_wrong(tmp_path):
    cases = [
        ({"read.start-commt": "earliest"}, "c.properties:7: unknown key `read.start-commt`"),
        ({"tombstones.on.delete": "maybe"}, "`tombstones.on.delete`: `maybe` is not one of: true, false"),
        ({"table.path": tmp_path / "missing"}, "is not a directory"),
        ({"connector.class": "delta-lake"}, "`delta-lake` is not one of: hudi, iceberg, delta"),
        ({"connector.class": "delta"}, "missing required key `key.fields`"),
        ({"connector.class": "delta", "key.fields": "id", "read.start-commit": "earliest"}, "is a Hudi option; for Delta use starting-version"),
        ({"starting-version": "3"}, "is a Delta option; this connector is `connector.class=hudi`"),
        # settings that used to be accepted and then misbehave (issue: never silently wrong)
        ({"metrics.port": "70000"}, "`metrics.port`: 70000 is not between 1 and 65535"),
        ({"transaction.max.records": "0"}, "`transaction.max.records`: 0 is not between 1 and"),
        ({"topic.creation.default.partitions": "0"}, "`topic.creation.default.partitions`: 0 is not between 1 and 10000"),
        ({"transaction.timeout.ms": "0"}, "`transaction.timeout.ms`: 0 is not between 1000 and 900000"),
        ({"topic": "bad topic"}, "`bad topic` is not a legal topic name"),
        ({"offsets.storage.topic": ".."}, "`..` is not a legal topic name"),
        ({"producer.override.compresion.type": "lz4"}, "`producer.override.compresion.type=lz4`: No such configuration property"),
        ({"producer.override.enable.idempotence": "false"}, "must stay true"),
        ({"producer.override.acks": "1"}, "must be `all`"),
        ({"producer.override.transactional.id": "x"}, "is derived from `name`"),
        ({"value.converter": "org.apache.kafka.connect.json.JsonConverter"}, "lakestream writes Confluent-framed Avro only"),
    ]
    for extra, message in cases:
        p = base_props(tmp_path, tmp_path, **extra)
        for cmd in (["validate", p], ["run", "--once", p]):
            r = run(*cmd)
            assert r.returncode == 2, (cmd, r.stderr)
            assert message in r.stderr, (message, r.stderr)


def test_a_key_set_twice_names_both_lines(tmp_path):
    p = base_props(tmp_path, tmp_path)
    p.write_text(p.read_text() + "topic=other\n")
    for cmd in (["validate", p], ["run", "--once", p]):
        r = run(*cmd)
        assert r.returncode == 2, (cmd, r.stderr)
        assert "`topic`: set twice (first on line" in r.stderr, r.stderr


def test_not_a_hudi_table_fails_with_exit_1_and_the_reason(env, tmp_path):
    p = base_props(tmp_path, tmp_path, **{"bootstrap.servers": env.bootstrap, "schema.registry.url": env.registry,
                                          "offsets.storage.topic": env.offsets_topic})
    r = run("run", "--once", p)
    assert r.returncode == 1
    assert "not a Hudi table" in r.stderr


def test_offsets_show_prints_the_issued_instant(env, registry, tmp_path):
    table = generate(tmp_path / "gen", "--rows", "50", "--partitions", "2", "--commits", "1")
    topic = "off-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    testkit.run_once(props)
    r = run("offsets", "show", props)
    assert r.returncode == 0, r.stderr
    last = sorted(p.name.split(".")[0] for p in (table / ".hoodie").glob("*.commit"))[-1]
    assert f'"instant": "{last}"' in r.stdout, r.stdout


def test_logs_to_a_pipe_or_file_carry_no_colour_codes(tmp_path):
    r = run("generate", "hudi", "--path", tmp_path / "plain", "--rows", "10", "--partitions", "1")
    assert r.returncode == 0 and "bulk insert committed" in r.stderr, r.stderr
    assert "\x1b[" not in r.stderr, r.stderr[:300]


def test_long_work_shows_progress_and_each_unit_ends_with_a_summary(env, registry, tmp_path):
    """A full scan logs from its start (the key pre-pass, the split count), its progress (splits
    done of total, events, rate, ETA) and a summary per unit (events by op, transactions,
    seconds); log fields are plain values (no Rust Debug), without colour codes in a pipe."""
    import re
    table = generate(tmp_path / "gen", "--rows", "20000", "--partitions", "4", "--commits", "1")
    topic = "prog-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    err = testkit.run_once(props).stderr
    assert "full scan: key pre-pass (a key held by two rows is emitted once)" in err
    assert re.search(r"full scan: key pre-pass done .*keys=20\d\d\d candidates=0", err), err[-2000:]
    assert re.search(r"full scan started .*splits=4", err), err[-2000:]
    assert re.search(r"full scan progress .*splits_done=4 splits=4 events=2\d\d\d\d .*events_per_s=\d+ eta_s=0", err), err[-2000:]
    assert re.search(r"unit emitted .*snapshot=true r=2\d\d\d\d c=0 u=0 d=0 .*transactions=1 seconds=", err), err[-2000:]
    # as changes: the summary counts the ops of the upsert
    first = sorted(p.name.split(".")[0] for p in (table / ".hoodie").glob("*.commit"))[0]
    topic2 = topic + "-changes"
    props2 = testkit.connector_props(tmp_path, "c-" + topic2, table, topic2, env, **{"read.start-commit": first})
    err2 = testkit.run_once(props2).stderr
    summaries = re.findall(r"unit emitted .*snapshot=false r=0 c=(\d+) u=(\d+) d=(\d+)", err2)
    assert len(summaries) == 2 and int(summaries[0][0]) == 20000 and int(summaries[1][1]) > 0, summaries
    for text in (err, err2):
        assert "Some(" not in text and "Position {" not in text and "\x1b[" not in text, text[-2000:]


def test_validate_online_reaches_kafka_and_the_registry_and_says_what_is_there(env, registry, tmp_path):
    table = generate(tmp_path / "gen", "--rows", "50", "--partitions", "2", "--commits", "1")
    topic = "online-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    before = run("validate", "--online", props)
    assert before.returncode == 0, before.stderr
    out = before.stdout
    assert "table: Hudi COPY_ON_WRITE table version 6 (timeline layout 1), partitioned by [part], 2 completed write instants" in out, out
    assert "key: id, _hoodie_partition_path" in out
    assert f"kafka: {env.bootstrap} accepted the connector's PLAINTEXT handshake" in out, out
    assert f"topic {topic}: absent (created at the first run)" in out
    assert "position: none stored" in out and f"registry: subject {topic}-value absent" in out, out
    testkit.run_once(props)
    after = run("validate", "--online", props)
    assert after.returncode == 0, after.stderr
    out = after.stdout
    last = sorted(p.name.split(".")[0] for p in (table / ".hoodie").glob("*.commit"))[-1]
    assert f"topic {topic}: 1 partitions" in out and "cleanup.policy=compact" in out, out
    assert f"position: issued {last} (task 0 of 1, stored key id,_hoodie_partition_path)" in out, out
    assert f"registry: subject {topic}-value versions [1]" in out, out
    # an unreachable registry fails naming it and the cause
    dead = props.read_text().replace(env.registry, "http://127.0.0.1:1")
    props.write_text(dead)
    r = run("validate", "--online", props)
    assert r.returncode != 0 and "127.0.0.1:1" in r.stderr and "refused" in r.stderr.lower(), r.stderr


def test_offsets_reset_and_set_move_the_position_and_replay_stays_exact(env, registry, tmp_path):
    import json
    table = generate(tmp_path / "gen", "--rows", "300", "--partitions", "2", "--commits", "3",
                     "--update-fraction", "0.2", "--delete-fraction", "0.05")
    oracle = testkit.hudi_rs_oracle(table)
    instants = [i["requested"] for i in oracle["instants"]]
    topic = "offs-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    testkit.run_once(props)
    show = lambda: json.loads(run("offsets", "show", props).stdout)  # noqa: E731
    assert show()["issued"]["instant"] == instants[-1]
    r = run("offsets", "reset", props)
    assert r.returncode == 2 and "--force" in r.stderr, r.stderr
    r = run("offsets", "set", props, "--instant", "20200101000000000", "--force")
    assert r.returncode == 2 and "not a completed write instant" in r.stderr, r.stderr
    # back to instant 1: the next run emits instants 2 and 3 again, as changes
    r = run("offsets", "set", props, "--instant", instants[1], "--force")
    assert r.returncode == 0, r.stderr
    assert show()["issued"]["instant"] == instants[1]
    before = len(testkit.consume_all(env, topic))
    testkit.run_once(props)
    new = testkit.consume_all(env, topic)[before:]
    assert sorted({registry.decode(v)["source"]["instant"] for _, _, _, v in new if v is not None}) == instants[2:]
    replay = testkit.Replay(registry)
    for row in oracle["instants"][1]["rows"]:  # the table at instant 1, keyed as the topic keys it
        replay.state[json.dumps({"_hoodie_partition_path": row["_hoodie_partition_path"], "id": row["id"]}, sort_keys=True)] = row
    replay.apply(new)
    testkit.compare(oracle, oracle["instants"][-1]["rows"], replay, "after offsets set")
    # reset: the start strategy (earliest: a full scan) applies again
    r = run("offsets", "reset", props, "--force")
    assert r.returncode == 0 and "offsets records removed" in r.stdout, r.stderr
    assert run("offsets", "show", props).stdout.strip() == "null"
    before = len(testkit.consume_all(env, topic))
    testkit.run_once(props)
    again = testkit.Replay(registry)
    again.apply(testkit.consume_all(env, topic)[before:])
    assert {e["op"] for e in again.events} == {"r"}
    testkit.compare(oracle, oracle["instants"][-1]["rows"], again, "after offsets reset")


def test_offsets_show_waits_for_a_transaction_in_flight_on_the_offsets_topic(env, tmp_path):
    """`offsets show` reads to the end once it is settled: a position committed by a transaction
    that is still open when the read begins is shown, not the one before it. Before the fix the
    read ended at the last stable offset (what a read_committed client's ListOffsets answers),
    which stood before that transaction, and `show` printed the older record, here `null`."""
    import json
    import threading
    from confluent_kafka import Producer
    table = generate(tmp_path / "gen", "--rows", "50", "--partitions", "1", "--commits", "1")
    topic = "offw-" + uuid.uuid4().hex[:8]
    props = testkit.connector_props(tmp_path, "c-" + topic, table, topic, env)
    testkit.run_once(props)
    key, value = testkit.offsets_records(env, "c-" + topic)[-1]
    issued = json.loads(run("offsets", "show", props).stdout)["issued"]["instant"]
    r = run("offsets", "reset", props, "--force")
    assert r.returncode == 0, r.stderr
    assert run("offsets", "show", props).stdout.strip() == "null"
    # the position written again by a transaction of another producer, committed a second later
    p = Producer({"bootstrap.servers": env.bootstrap, "transactional.id": "test-" + topic,
                  "partitioner": "murmur2_random"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(env.offsets_topic, value, key)
    p.flush(30)
    shown = {}
    reader = threading.Thread(target=lambda: shown.update(r=run("offsets", "show", props)))
    reader.start()
    time.sleep(1.0)
    assert reader.is_alive(), "offsets show returned while a transaction below the end was open"
    p.commit_transaction(30)
    reader.join(60)
    out = shown["r"]
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["issued"]["instant"] == issued, out.stdout
