"""The fault battery (issue 18): hostile clients and exhausted resources against a real
`tandem serve` on the default model, loopback only, each case bounded in time.

Cases: descriptor exhaustion (ulimit -n 128, 300 connections), half-close, a slow client
dribbling its headers (slowloris), oversized request line / headers / body, a client that
disconnects mid-stream, KV pool exhaustion (a 128-token pool, concurrent long requests and
one that can never fit), SIGTERM mid-stream. After each case a normal request must succeed
and /metrics must show nothing leaked: no engine request running or waiting, no KV page in
use (cached pages are free to reuse), no HTTP request in flight, no connection but the
scrape's own.

Run: meson test -C build faults   (or .venv/bin/python -m pytest -q tests/faults)
"""
import http.client
import json
import os
import re
import resource
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("TANDEM_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tests" / "e2e_py"))
from conftest import Server  # noqa: E402  (tests/e2e_py: starts `tandem serve`, waits for /health)

HEADER_TIMEOUT_S = 2
HEADER_LIMIT = 16384
BODY_LIMIT = 262144
KV_TOKENS = 128
SHUTDOWN_S = 1


# --- plain HTTP over sockets (the cases need control a client library hides) ---------------

def request(server, method, path, body=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        data = json.dumps(body) if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def raw_exchange(server, data: bytes, half_close=False, timeout=30) -> bytes:
    """Sends bytes, optionally half-closes, reads until the server closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def final_responses(data: bytes) -> bytes:
    """The bytes without interim "100 Continue" responses (a half-closed client may get one
    while its request runs: the server's probe for a peer that is gone)."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\n"
    return data.replace(interim, b"")


def completion_body(server, prompt="The capital of France is", max_tokens=4, **extra):
    return {"model": server.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}


def http_request_bytes(path, body: dict, keep_alive=True) -> bytes:
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n" + ("" if keep_alive else "Connection: close\r\n") + "\r\n")
    return head.encode() + data


def metrics(server, allow_503=False) -> dict:
    """/metrics as {name{labels}: value, name: sum over labels}; None for a 503 (allow_503:
    a server out of descriptors sheds new connections until the closed ones are reaped)."""
    status, text = request(server, "GET", "/metrics")
    if status == 503 and allow_503:
        return None
    assert status == 200, text
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_:]+)(\{[^}]*\})? (\S+)$", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            out.setdefault(m.group(1), 0.0)
            if m.group(2):
                out[m.group(1)] += float(m.group(3))
    return out


def normal_request_succeeds(server):
    status, text = request(server, "POST", "/v1/completions", completion_body(server))
    assert status == 200, text
    assert json.loads(text)["choices"][0]["text"]


def assert_nothing_leaked(server, settle_s=15):
    """Waits (bounded) for the server to be idle, then checks the leak gauges and serves."""
    want = {"tandem:num_requests_running": 0, "tandem:num_requests_waiting": 0,
            "tandem:kv_cache_usage_perc": 0, "tandem:http_requests_in_flight": 0,
            "tandem:http_connections_open": 1}  # the scrape's own connection
    deadline = time.time() + settle_s
    while True:
        m = metrics(server, allow_503=True)
        got = {k: m.get(k) for k in want} if m is not None else "503"
        if got == want:
            break
        assert time.time() < deadline, f"still not idle after {settle_s} s: {got}"
        time.sleep(0.2)
    normal_request_succeeds(server)


def start(extra_args, nofile=None):
    """`tandem serve` with extra flags, under a lower descriptor limit when nofile is set."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, old[1]))
    try:
        s = Server(extra_args)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)
    _, models = request(s, "GET", "/v1/models")
    s.model = json.loads(models)["data"][0]["id"]
    return s


def stop(s):
    rc = s.stop()
    assert rc == 0, "tandem serve did not exit 0 on SIGTERM:\n" + "".join(s.log[-30:])


@pytest.fixture(scope="module")
def server():
    s = start(["--header-timeout", str(HEADER_TIMEOUT_S), "--header-limit", str(HEADER_LIMIT),
               "--body-limit", str(BODY_LIMIT)])
    yield s
    stop(s)


# --- the cases --------------------------------------------------------------------------------

def test_descriptor_exhaustion():
    """ulimit -n 128 and 300 connections at once (more than the descriptors, fewer than the
    connection limit, so accept really fails with EMFILE): every connection is answered or
    closed, none hangs, and once they are gone the server accepts and serves again."""
    s = start(["--max-connections", "1000"], nofile=128)
    try:
        socks = []
        for _ in range(300):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=20)
            c.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            socks.append(c)
        statuses = {}
        for c in socks:
            try:
                head = c.recv(64)
            except ConnectionResetError:
                head = b""
            key = head.split(b" ")[1].decode() if head.startswith(b"HTTP/1.1 ") else "closed"
            statuses[key] = statuses.get(key, 0) + 1
        print(f"\ndescriptor exhaustion, 300 connections: {statuses}")
        assert set(statuses) <= {"200", "503", "closed"}, statuses
        assert statuses.get("503", 0) > 0, f"no connection was shed with 503: {statuses}"
        for c in socks:
            c.close()
        assert_nothing_leaked(s)
        assert "accept: " in "".join(s.log), "the descriptor exhaustion was not logged"
    finally:
        stop(s)


def test_half_close(server):
    """A request (and two pipelined ones) followed by shutdown(SHUT_WR) get their answers."""
    one = final_responses(raw_exchange(server, http_request_bytes("/v1/completions", completion_body(server),
                                                                  keep_alive=False), half_close=True))
    assert one.startswith(b"HTTP/1.1 200"), one[:200]
    assert b'"choices"' in one
    two = final_responses(raw_exchange(server, http_request_bytes("/v1/completions", completion_body(server))
                                       + http_request_bytes("/v1/completions", completion_body(server, prompt="Hello")),
                                       half_close=True))
    assert two.count(b"HTTP/1.1 200") == 2, two[:400]
    assert_nothing_leaked(server)


def test_slow_client_headers(server):
    """A client dribbling header bytes (slowloris) is disconnected by the header timeout,
    while other clients are served meanwhile."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    started = time.time()
    closed_after = None
    served_meanwhile = []
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
    try:
        while time.time() - started < HEADER_TIMEOUT_S + 8:
            s.sendall(b"X")  # one header byte every 0.25 s, never the end of the headers
            if not served_meanwhile:
                served_meanwhile.append(request(server, "GET", "/health")[0])
            time.sleep(0.25)
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed_after = time.time() - started
                    break
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
    except (BrokenPipeError, ConnectionResetError):
        closed_after = time.time() - started
    s.close()
    print(f"\nslow client disconnected after {closed_after:.2f} s")
    assert served_meanwhile == [200]
    assert closed_after is not None, "the slow client was never disconnected"
    assert HEADER_TIMEOUT_S * 0.9 <= closed_after <= HEADER_TIMEOUT_S + 3, closed_after
    assert_nothing_leaked(server)


def test_oversized_request(server):
    """A request line or headers over --header-limit get 414 / 431, a body over --body-limit
    413, each read to the end so the client sees the status, not a reset."""
    long_url = b"GET /health?" + b"a" * (HEADER_LIMIT * 4) + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"
    assert raw_exchange(server, long_url).startswith(b"HTTP/1.1 414")
    big_header = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"b" * (HEADER_LIMIT * 4) + b"\r\n\r\n"
    assert raw_exchange(server, big_header).startswith(b"HTTP/1.1 431")  # one long field: was 414
    many = b"".join(b"X-F%d: %s\r\n" % (i, b"c" * 200) for i in range(HEADER_LIMIT // 100))
    assert raw_exchange(server, b"GET /health HTTP/1.1\r\nHost: localhost\r\n" + many + b"\r\n").startswith(
        b"HTTP/1.1 431")
    body = completion_body(server, prompt="x" * (BODY_LIMIT * 2))
    reply = raw_exchange(server, http_request_bytes("/v1/completions", body))
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"exceeds the limit of %d bytes" % BODY_LIMIT in reply
    assert_nothing_leaked(server)


def read_until(sock, marker: bytes, limit_s=60) -> bytes:
    out, deadline = b"", time.time() + limit_s
    while marker not in out:
        assert time.time() < deadline, f"no {marker!r} within {limit_s} s: {out[:300]!r}"
        chunk = sock.recv(4096)
        assert chunk, f"the server closed before {marker!r}: {out[:300]!r}"
        out += chunk
    return out


def test_disconnect_mid_stream(server):
    """A client that drops its connection after the first streamed tokens has its request
    cancelled (finished_reason abort) and its KV pages freed."""
    before = metrics(server).get('tandem:request_success_total{model_name="%s",finished_reason="abort"}'
                                 % server.model, 0)
    body = completion_body(server, max_tokens=2000, stream=True, ignore_eos=True)
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    s.sendall(http_request_bytes("/v1/completions", body))
    read_until(s, b"data: {")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset on close
    s.close()
    assert_nothing_leaked(server, settle_s=10)  # 2000 tokens would take far longer than this
    after = metrics(server).get('tandem:request_success_total{model_name="%s",finished_reason="abort"}'
                                % server.model, 0)
    assert after == before + 1


@pytest.fixture(scope="module")
def small_pool():
    s = start(["--set", f"engine.kv_tokens={KV_TOKENS}", "--shutdown-timeout", str(SHUTDOWN_S)])
    yield s
    if s.proc.poll() is None:
        stop(s)


def test_kv_pool_exhaustion(small_pool):
    """A 128-token KV pool, 8 concurrent requests of ~90 tokens each (one fits at a time) and
    one that can never fit: the one gets 400 at once, the others all end (200, or 429 / 503
    with a message), none hangs."""
    s = small_pool
    t0 = time.time()
    status, text = request(s, "POST", "/v1/completions", completion_body(s, prompt="word " * 40, max_tokens=120))
    assert status == 400 and time.time() - t0 < 5, (status, text)
    assert str(KV_TOKENS) in text
    results = []

    def one(i):
        results.append(request(s, "POST", "/v1/completions",
                               completion_body(s, prompt=f"Story {i}: " + "once upon a time " * 8, max_tokens=48,
                                               ignore_eos=True), timeout=120))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    assert not any(t.is_alive() for t in threads), "a request hung"
    print(f"\nKV pool exhaustion: statuses {sorted(st for st, _ in results)} in {time.time() - t0:.1f} s")
    assert len(results) == 8
    for status, text in results:
        assert status in (200, 429, 503), (status, text)
        if status == 200:
            assert json.loads(text)["usage"]["completion_tokens"] == 48
    assert sum(st == 200 for st, _ in results) >= 1
    assert_nothing_leaked(s)


def test_sigterm_mid_stream(small_pool):
    """SIGTERM while a stream runs: the stream ends (finished, or cancelled past
    --shutdown-timeout) with its terminating chunk, and the process exits 0 in bounded time.
    The last case: it stops the server."""
    s = small_pool
    body = completion_body(s, max_tokens=KV_TOKENS - 16, stream=True, ignore_eos=True)  # longer than the deadline
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    conn.sendall(http_request_bytes("/v1/completions", body))
    read_until(conn, b"data: {")
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    rest = b""
    while chunk := conn.recv(65536):
        rest += chunk
    conn.close()
    rc = s.proc.wait(timeout=30)
    took = time.time() - t0
    print(f"\nSIGTERM mid-stream: exit {rc} after {took:.2f} s, stream ended with {rest[-60:]!r}")
    assert rc == 0, "".join(s.log[-30:])
    assert took < SHUTDOWN_S + 10, took  # the deadline, then the cancel (2 s at most) and exit
    assert rest.endswith(b"0\r\n\r\n"), rest[-200:]  # the chunked stream was ended, not cut
