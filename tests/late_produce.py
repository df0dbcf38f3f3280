"""A produce that reaches the broker after its transaction was aborted: what a broker that stalled
(SIGSTOP, a long GC pause) receives when it works off its backlog. The fault proxy holds one
Produce request of a transactional producer until the client gives up on it (message timeout →
"requires epoch bump" → abort, which bumps the producer epoch), then sends it to the broker right
after the broker answered that epoch bump. A broker that keeps the protocol refuses the late batch
(its epoch is fenced, its transaction is over); one that appends it makes aborted records visible
to read_committed readers, and a client that republishes the aborted transaction — as it must —
publishes those records twice.

    python tests/late_produce.py             # the broker LAKESTREAM_TEST_BROKER selects
    LAKESTREAM_TEST_BROKER=noida python tests/late_produce.py

Prints what happened and exits 0 when the broker refused the late batch, 3 when it made the
aborted records visible. `test_outages.py` runs the connector through the same fault.

Then a second fault of noida-db's that the connector's own look-ups met: a read_committed fetch
that starts right after a producer's abort marker does not see that producer's next committed
transaction (from the marker, or before it, it does; Kafka shows it from anywhere). Exit 4 when
the broker hides it.
"""

import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import faultproxy

ERRORS = {0: "NONE", 47: "INVALID_PRODUCER_EPOCH", 48: "INVALID_TXN_STATE", 90: "PRODUCER_FENCED",
          45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 46: "DUPLICATE_SEQUENCE_NUMBER", 59: "UNKNOWN_PRODUCER_ID"}


def producer(bootstrap, txn_id):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "message.timeout.ms": 3000,
                  "transaction.timeout.ms": 20000, "linger.ms": 0})
    p.init_transactions(30)
    return p


def committed_values(bootstrap, topic, start=0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"late-{uuid.uuid4().hex}", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, start)])
    out, deadline = [], time.time() + 30
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # end of partition
                break
            raise KafkaException(m.error())
        out.append((m.offset(), m.value().decode()))
    c.close()
    return out


def hidden_after_abort_marker(bootstrap):
    """Commit, abort, commit again with a new producer of the same transactional id; read
    read_committed from the first offset after the abort marker. How many of the last
    transaction's records that read misses."""
    topic, txn_id = f"marker-{uuid.uuid4().hex[:8]}", f"marker-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = producer(bootstrap, txn_id)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"committed-{i}".encode())
    p.commit_transaction(30)  # offsets 0..9, its marker 10
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"aborted-{i}".encode())
    p.flush(10)
    p.abort_transaction(30)  # 11..20, its marker 21
    p = producer(bootstrap, txn_id)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"last-{i}".encode())
    p.commit_transaction(30)  # 22..31
    seen = {start: [v for _, v in committed_values(bootstrap, topic, start)] for start in (21, 22)}
    print(f"read_committed from the abort marker (21): {len(seen[21])} records; from the offset after it (22): {len(seen[22])}")
    return len(seen[21]) - len(seen[22])


def run(bootstrap_upstream_port, when="after"):
    proxy = faultproxy.FaultProxy(bootstrap_upstream_port)
    topic, txn_id = f"late-{uuid.uuid4().hex[:8]}", f"late-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    try:
        p = producer(proxy.bootstrap, txn_id)
        p.begin_transaction()
        if when == "after":
            proxy.hold(faultproxy.PRODUCE, release_after=faultproxy.INIT_PRODUCER_ID)
        else:
            proxy.hold(faultproxy.PRODUCE, release_before=faultproxy.INIT_PRODUCER_ID)
        for i in range(100):
            p.produce(topic, f"aborted-{i}".encode())
        p.flush(10)  # the held request's messages time out
        try:
            p.commit_transaction(10)
            raise SystemExit("the commit of a transaction whose records timed out succeeded")
        except KafkaException as e:
            err = e.args[0]
            print(f"commit failed as it must: {err.str()} (abortable: {err.txn_requires_abort()})")
        p.abort_transaction(30)  # the epoch bump; the held batch reaches the broker after it
        deadline = time.time() + 30
        while not proxy.held_answers and time.time() < deadline:
            time.sleep(0.1)
        for api, version, frame in proxy.held_answers:
            codes = faultproxy.produce_errors(version, frame)
            print(f"the late produce (v{version}) was answered: {[ERRORS.get(c, c) for c in codes]}")
        # what the aborted transaction is replaced with, as a connector republishes it
        p.begin_transaction()
        for i in range(100):
            p.produce(topic, f"republished-{i}".encode())
        p.commit_transaction(30)
        seen = committed_values(proxy.bootstrap, topic)
        aborted = [o for o, v in seen if v.startswith("aborted-")]
        print(f"read_committed: {len(seen)} records, {len(aborted)} of the aborted transaction"
              + (f" (offsets {aborted[0]}..{aborted[-1]})" if aborted else ""))
        return 3 if aborted else 0
    finally:
        proxy.close()


def main():
    import brokers

    broker = brokers.new_broker()
    broker.start()
    try:
        print(f"broker: {broker.version()}")
        worst = 0
        for when in ("before", "after"):
            print(f"-- the held produce released {when} the epoch bump")
            worst = max(worst, run(broker.port, when))
        print("-- a committed transaction after an aborted one, read from just after the abort marker")
        if hidden_after_abort_marker(broker.bootstrap):
            worst = max(worst, 4)
        return worst
    finally:
        broker.stop()
        broker.remove()


if __name__ == "__main__":
    sys.exit(main())
