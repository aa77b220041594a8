"""``llm.serve`` under a trickle of half-sent requests (issue 24, item 5): 400 connections that
each sent a 4 MiB body one byte per 40 s held 403 threads and 1.6 GB. Now the open connections
are capped (503 at accept), a request is admitted from its headers before its body is read
(429), the body is read as it arrives rather than allocated from its Content-Length, and a
request's line, headers and body must all arrive within one time limit (408), however steadily
they trickle. Bounded trickles on 127.0.0.1 only."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc

import httpx
import pytest

from llm.serve import fixed_answer, serve_in_thread

BODY = 4 * 1024 * 1024
HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n{" % BODY)


@pytest.fixture
def start():
    servers = []

    def run(**limits):
        srv = serve_in_thread(fixed_answer("ok"), "m", **limits)
        servers.append(srv)
        return srv

    yield run
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def trickle(srv, data: bytes = HEAD) -> socket.socket:
    s = socket.create_connection(srv.server_address[:2], timeout=5)
    s.sendall(data)
    return s


def reply(s: socket.socket, wait: float = 5.0) -> bytes:
    """What the server sent before closing (b"" when it sent nothing within ``wait``)."""
    s.settimeout(wait)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def ok(srv) -> int:
    return httpx.post(srv.base_url + "/chat/completions", timeout=10,
                      json={"messages": [{"role": "user", "content": "hi"}]}).status_code


def test_open_connections_are_capped_and_the_rest_get_503_at_accept(start):
    srv = start(max_connections=4)
    threads_before = threading.active_count()
    held = [trickle(srv) for _ in range(4)]
    assert until(lambda: srv.open_connections == 4)
    extra = [trickle(srv) for _ in range(12)]
    answers = [reply(s) for s in extra]
    assert all(a.startswith(b"HTTP/1.1 503") and b"Retry-After" in a for a in answers)
    assert srv.refused_connections == 12 and srv.open_connections == 4
    assert threading.active_count() - threads_before <= 4
    assert ok(srv) == 503                          # a well-behaved client is told to come back
    for s in held:
        s.close()
    assert until(lambda: srv.open_connections == 0) and ok(srv) == 200


def test_a_request_is_admitted_before_its_body_is_read(start):
    srv = start(max_inflight=2)
    held = [trickle(srv) for _ in range(2)]
    assert until(lambda: srv.inflight == 2)
    third = reply(trickle(srv))                   # its body is never sent: refused from its headers
    assert third.startswith(b"HTTP/1.1 429") and b"Retry-After" in third
    for s in held:
        s.close()
    assert until(lambda: srv.inflight == 0) and ok(srv) == 200


def test_a_declared_body_is_not_allocated_before_it_arrives(start):
    srv = start(max_connections=16)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        held = [trickle(srv) for _ in range(8)]    # 8 x 4 MiB declared, 1 byte each sent
        assert until(lambda: srv.open_connections == 8 and srv.inflight == 8)
        time.sleep(0.3)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < BODY, f"{peak} bytes allocated for 8 one-byte bodies"
    for s in held:
        s.close()


@pytest.mark.parametrize("part", ["body", "headers"])
def test_a_steady_trickle_is_cut_off_by_the_request_time_limit(start, part):
    srv = start(request_time_limit_s=1.0)
    s = trickle(srv, HEAD if part == "body" else b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    s.settimeout(0.2)
    got, sent, deadline = b"", 0, time.monotonic() + 15
    while not got and time.monotonic() < deadline:   # a byte every 0.2 s: no read is ever idle
        try:
            s.sendall(b" " if part == "body" else b"X")
            sent += 1
            got = s.recv(65536)
        except TimeoutError:
            pass
        except OSError:
            break
    got += reply(s, 2.0)
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    assert sent < 60 and srv.expired_reads == 1
    assert until(lambda: srv.open_connections == 0) and ok(srv) == 200


def test_request_headers_are_capped_in_total_not_only_per_line(start):
    srv = start()
    headers = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 60_000) for i in range(90))    # 5.4 MB, 90 lines
    s = trickle(srv, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    try:
        s.sendall(headers + b"Content-Length: 2\r\n\r\n{}")
    except OSError:
        pass                              # refused before the client finished sending
    assert reply(s).startswith(b"HTTP/1.1 431")
    assert ok(srv) == 200
