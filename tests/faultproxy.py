"""A fault proxy between the connector and one broker: a TCP relay that reads Kafka's framing
(4-byte size, then the request header: api key, version, correlation id) so it can fail one kind
of request on demand instead of by luck:

- `drop_responses(api_key, seconds)`: for a while, every response to that request is swallowed
  and its connection reset, so the client never learns the outcome (an EndTxn that committed or
  not, the commit call timing out: the "unknown outcome" case).
- `reset_after(api_key, n)`: the next `n` such requests are forwarded to the broker, then both
  sides of the connection are reset before the response (a produce that landed, unacknowledged).
- `pause()` / `resume()`: nothing is forwarded either way while paused (a hung connection).
- `hold(api_key, release_after)`: the next such request is kept, not forwarded, and its
  connection hangs (nothing more is forwarded on it) until the client gives up on it; the kept
  request is sent to the broker late, on a connection of its own, right after the broker has
  answered the next `release_after` request (before the client sees that answer), or just
  before the next `release_before` request is forwarded. A produce
  held past the client's abort and the epoch bump that follows is what a broker that stalls
  and then works off its backlog receives: Kafka must refuse it (`held_answers` keeps the
  broker's answers).

The broker advertises its own port; Metadata and FindCoordinator responses are rewritten to name
the proxy's (the host string and the 4-byte port that follows it: same length, nothing else
changes), so every connection of the client, bootstrap or not, goes through the proxy. One
broker on 127.0.0.1 only; works with Kafka and noida alike.
"""

import socket
import struct
import threading
import time
from collections import Counter

import brokers

PRODUCE, METADATA, FIND_COORDINATOR, INIT_PRODUCER_ID, END_TXN = 0, 3, 10, 22, 26
HOST = b"127.0.0.1"


def _read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _read_frame(sock):
    size = struct.unpack(">i", _read_exact(sock, 4))[0]
    return _read_exact(sock, size)


def _reset(sock):
    """Drop a connection now: linger 0 (a reset where the kernel can), shutdown (which also wakes
    the relay thread blocked reading it: a bare close would wait for it), close."""
    for step in (lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)),
                 lambda: sock.shutdown(socket.SHUT_RDWR), sock.close):
        try:
            step()
        except OSError:
            pass


def _varint(b, i):
    n = shift = 0
    while True:
        n |= (b[i] & 0x7F) << shift
        i += 1
        if not b[i - 1] & 0x80:
            return n, i
        shift += 7


def produce_errors(version, frame):
    """The error code of a Produce response's first partition (what a held produce of one
    partition was answered), versions 3 to 12, as a one-item list (empty: no partition)."""
    i = 4  # correlation id
    if version >= 9:  # flexible: tagged fields, then compact arrays and strings (length + 1)
        _, i = _varint(frame, i)
        topics, i = _varint(frame, i)
        name, i = _varint(frame, i)
        i += name - 1
        parts, i = _varint(frame, i)
        topics, parts = topics - 1, parts - 1
    else:
        topics = struct.unpack(">i", frame[i:i + 4])[0]
        name = struct.unpack(">h", frame[i + 4:i + 6])[0]
        i += 6 + name
        parts, i = struct.unpack(">i", frame[i:i + 4])[0], i + 4
    if topics < 1 or parts < 1:
        return []
    return [struct.unpack(">h", frame[i + 4:i + 6])[0]]  # after the partition index


class _Conn:
    def __init__(self, proxy, client):
        self.proxy = proxy
        self.client = client
        self.upstream = socket.create_connection(("127.0.0.1", proxy.upstream_port))
        for s in (client, self.upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pending = {}  # correlation id -> api key
        self.closed = False
        self.hung = False  # a request of it is held: nothing more is forwarded
        threading.Thread(target=self._requests, daemon=True).start()
        threading.Thread(target=self._responses, daemon=True).start()

    def close(self):
        if not self.closed:
            self.closed = True
            _reset(self.client)
            _reset(self.upstream)
            self.proxy._forget(self)

    def _requests(self):
        try:
            while True:
                frame = _read_frame(self.client)
                api, _version, corr = struct.unpack(">hhi", frame[:8])
                self.pending[corr] = api
                if self.hung or self.proxy._take_hold(api, frame):
                    self.hung = True
                    continue
                self.proxy._release_held(("before", api))
                self.proxy._wait_unpaused()
                self.upstream.sendall(struct.pack(">i", len(frame)) + frame)
                self.proxy.stats[f"request {api}"] += 1
                if self.proxy._take_reset(api):
                    time.sleep(0.05)  # (the broker has it)
                    self.proxy.stats[f"reset after {api}"] += 1
                    self.close()
                    return
        except (OSError, ConnectionError, struct.error):
            self.close()

    def _responses(self):
        try:
            while True:
                frame = _read_frame(self.upstream)
                corr = struct.unpack(">i", frame[:4])[0]
                api = self.pending.pop(corr, None)
                if api in (METADATA, FIND_COORDINATOR):
                    frame = frame.replace(HOST + struct.pack(">i", self.proxy.upstream_port), HOST + struct.pack(">i", self.proxy.port))
                if api is not None and self.proxy._dropping(api):
                    self.proxy.stats[f"dropped {api}"] += 1
                    self.close()
                    return
                if api is not None:
                    self.proxy._release_held(("after", api))
                self.proxy._wait_unpaused()
                self.client.sendall(struct.pack(">i", len(frame)) + frame)
        except (OSError, ConnectionError, struct.error):
            self.close()


class FaultProxy:
    """A relay on a free loopback port to the broker on `upstream_port`."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.stats = Counter()
        self._lock = threading.Lock()
        self._conns = set()
        self._drop_until = {}
        self._resets = Counter()
        self._hold = None  # (api key held, api key whose answer releases it)
        self._held = []  # (api key whose answer releases it, request frame)
        self.held_answers = []  # the broker's answers to held requests, as (api key, frame)
        self._running = threading.Event()
        self._running.set()  # set: forwarding; clear: paused
        self._open = True
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def _accept(self):
        while self._open:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                conn = _Conn(self, client)
            except OSError:
                _reset(client)  # the broker is down: the client sees it as such
                continue
            with self._lock:
                self._conns.add(conn)

    def _forget(self, conn):
        with self._lock:
            self._conns.discard(conn)

    def _wait_unpaused(self):
        self._running.wait()

    def _dropping(self, api):
        return time.time() < self._drop_until.get(api, 0)

    def _take_reset(self, api):
        with self._lock:
            if self._resets[api] > 0:
                self._resets[api] -= 1
                return True
        return False

    def _take_hold(self, api, frame):
        with self._lock:
            if self._hold is None or self._hold[0] != api:
                return False
            self._held.append((self._hold[1], frame))
            self._hold = None
        self.stats[f"held {api}"] += 1
        return True

    def _release_held(self, answered):
        with self._lock:
            due = [f for a, f in self._held if a == answered]
            self._held = [(a, f) for a, f in self._held if a != answered]
        for frame in due:
            api, version = struct.unpack(">hh", frame[:4])
            with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30) as s:
                s.sendall(struct.pack(">i", len(frame)) + frame)
                self.held_answers.append((api, version, _read_frame(s)))
            self.stats[f"released {api}"] += 1

    def hold(self, api_key, release_after=None, release_before=None):
        """Keep the next `api_key` request (its connection hangs) and send it to the broker right
        after the broker answers the next `release_after` request, or right before the next
        `release_before` request reaches it."""
        when = ("after", release_after) if release_before is None else ("before", release_before)
        with self._lock:
            self._hold = (api_key, when)

    def held(self):
        """Requests held and not yet released."""
        with self._lock:
            return len(self._held) + (self._hold is not None)

    def drop_responses(self, api_key, seconds):
        """Swallow every response to `api_key` requests for `seconds` (resetting its connection)."""
        self._drop_until[api_key] = time.time() + seconds

    def reset_after(self, api_key, n=1):
        """Reset the connection right after forwarding each of the next `n` `api_key` requests."""
        with self._lock:
            self._resets[api_key] += n

    def pending_resets(self, api_key):
        with self._lock:
            return self._resets[api_key]

    def pause(self):
        self._running.clear()

    def resume(self):
        self._running.set()

    def reset_all(self):
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()

    def close(self):
        self._open = False
        self.resume()
        self.listener.close()
        self.reset_all()


def proxied_broker():
    """A started private broker of the selected kind and a fault proxy in front of it."""
    broker = brokers.new_broker()
    broker.start()
    return broker, FaultProxy(broker.port)
