"""The lake the discovery tests stream (issue 61): tables of the three formats, each revealed a
commit at a time with its replay; a connector file that discovers them under a prefix or in a
catalog."""

import random
import shutil
import signal
import socket
import subprocess
import time
import uuid

import pytest

import deltakit as dk
import testkit
from testkit import consume_all, new_records


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def seed():
    s = int(time.time() * 1000) % 100000
    print("discovery seed", s)
    return s


class Lake:
    """A prefix holding tables, each revealed a commit at a time, each with its replay."""

    def __init__(self, env, registry, tmp_path, s):
        self.env, self.registry, self.tmp, self.seed = env, registry, tmp_path, s
        self.root = tmp_path / "lake"
        self.root.mkdir()
        self.topic_prefix = "lake" + uuid.uuid4().hex[:6]
        self.tables = {}  # namespace.table -> dict(step=fn(i) -> rows or None, replay, seen)

    def add_delta(self, qualified, rel, versions=8, partitioned=True):
        src = self.tmp / ("src-" + qualified)
        dk.write_history(src, self.seed + len(self.tables), cdf=False, partitioned=partitioned, versions=versions)
        orc = dk.oracle(src)
        t = dk.RevealedDelta(src, self.root / rel)
        t.reveal(0)

        def step(i):
            v = min(i, max(orc))
            t.reveal(v)
            return orc[v]
        self._add(qualified, step, "delta", lambda want, replay, label: dk.compare(want, replay, label))
        return t

    def sql_catalog(self):
        """pyiceberg's SqlCatalog over `catalog.db`, its warehouse the lake's root."""
        pytest.importorskip("pyiceberg")
        from pyiceberg.catalog.sql import SqlCatalog
        return SqlCatalog("default", uri=f"sqlite:///{self.tmp / 'catalog.db'}", warehouse=f"file://{self.root}")

    def add_iceberg(self, qualified, cat=None, **create):
        """A pyiceberg table in `cat` (default: the lake's SqlCatalog), written a commit a step."""
        pytest.importorskip("pyiceberg")
        import test_iceberg_pyiceberg as pi
        cat = cat or self.sql_catalog()
        ns, name = qualified.rsplit(".", 1)
        if (ns,) not in cat.list_namespaces():
            cat.create_namespace(ns)
        tbl = cat.create_table(qualified, schema=pi.table_schema(), **create)
        commits = pi.history(tbl, random.Random(self.seed + len(self.tables)), 40)
        next(commits)
        columns = {"id", "cat", "amount", "ts", "day", "note"}

        def step(i):
            if i:
                next(commits)
            return tbl

        self._add(qualified, step, "iceberg", lambda tbl, replay, label: pi.compare_now(tbl, replay, columns, label))

    def add_hudi(self, qualified, rel, fixture="sample_table/cow/v9_txns_simple_meta"):
        oracle = testkit.load_oracle(fixture)
        table = testkit.extract(fixture, self.tmp / ("x-" + qualified))
        dest = self.root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(table), dest)
        revealed = testkit.RevealedTable(dest, oracle["timeline_layout_version"])
        instants = oracle["instants"]
        revealed.reveal_through(testkit.instant_order(instants[0]))

        def step(i):
            inst = instants[min(i, len(instants) - 1)]
            revealed.reveal_through(testkit.instant_order(inst))
            return inst["rows"]
        self._add(qualified, step, "hudi", lambda rows, replay, label: testkit.compare(oracle, rows, replay, label))

    def _add(self, qualified, step, kind, compare):
        self.tables[qualified] = {"step": step, "compare": compare, "replay": testkit.Replay(self.registry),
                                  "seen": set(), "kind": kind, "want": None}

    def topic(self, qualified):
        return f"{self.topic_prefix}.{qualified}"

    def props(self, **extra):
        """The connector's file: the prefix searched, unless `extra` names a catalog."""
        p = {
            "name": "lake-" + uuid.uuid4().hex[:6],
            **({} if "catalog.type" in extra else {"table.path.prefix": str(self.root)}),
            "topic.prefix": self.topic_prefix,
            "bootstrap.servers": self.env.bootstrap,
            "schema.registry.url": self.env.registry,
            "offsets.storage.topic": self.env.offsets_topic,
            "key.fields": dk.KEY,  # Delta's key; Iceberg's is its identifier field, Hudi's its record key
            "read.start-commit": "earliest",
            "starting-version": "0",
            "read.streaming.check-interval": "200ms",
        }
        p.update(extra)
        f = self.tmp / f"{p['name']}.properties"
        f.write_text("".join(f"{k}={v}\n" for k, v in p.items()))
        return f

    def advance(self, i):
        for t in self.tables.values():
            t["want"] = t["step"](i)

    def converge(self, label, timeout=90):
        """`check` until it holds (a running connector catches up on its own time)."""
        deadline = time.time() + timeout
        while True:
            try:
                return self.check(label)
            except AssertionError:
                if time.time() > deadline:
                    raise
                time.sleep(1)

    def check(self, label, only=None):
        for q, t in self.tables.items():
            if only is not None and q not in only:
                continue
            got = new_records(consume_all(self.env, self.topic(q)), t["seen"])
            t["replay"].apply(got)
            t["compare"](t["want"], t["replay"], f"seed {self.seed} {label}: {q}")




class Running:
    """`lakestream run` of a connector file, started again after each kill -9."""

    def __init__(self, props):
        self.props, self.kills, self.logs = props, 0, []
        self._start()

    def _start(self):
        self.proc = subprocess.Popen([str(testkit.BIN), "run", str(self.props)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.log = testkit.LogTail(self.proc)

    def steps(self, lake, rng, steps, at=None):
        """`lake.advance(i)` for i in 1..steps (`at[i]()` first where given), each followed after a
        random pause by a kill -9 and a new start, with probability 0.6."""
        for i in range(1, steps):
            (at or {}).get(i, lambda: None)()
            lake.advance(i)
            time.sleep(rng.uniform(0.1, 1.2))
            if rng.random() < 0.6:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(30)
                self.logs.append(self.log.text())
                self.kills += 1
                self._start()

    def alive(self):
        assert self.proc.poll() is None, self.log.text()[-3000:]

    def stop(self):
        """SIGTERM: the exit code; every run's log is in `everything()`."""
        self.proc.send_signal(signal.SIGTERM)
        return self.log.finish()

    def everything(self):
        return "".join(self.logs) + self.log.text()
