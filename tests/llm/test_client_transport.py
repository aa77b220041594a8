"""What a request that got no response is called, on the SDK's aiohttp transport: the transport
reports a dropped connection as a connect timeout, and the client names what really failed."""

from __future__ import annotations

import socket
import threading

import pytest

from llm.client import LLMClient, LLMConfig

MSG = [{"role": "user", "content": "Which element?"}]


def _raw_server(on_request):
    """A listening socket whose every connection is handed to ``on_request(conn)`` once the
    request has arrived; returns (base_url, stop)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.recv(65536)
            on_request(conn)

    threading.Thread(target=loop, daemon=True).start()

    def close():
        stop.set()
        srv.close()

    return f"http://127.0.0.1:{srv.getsockname()[1]}/v1", close


def _config(url, tmp_path, **kw) -> LLMConfig:
    return LLMConfig(base_url=url, model="m", cache_dir=str(tmp_path / "cache"), max_retries=1, backoff_s=0.01,
                     api_key_env="SURFPRM_TEST_KEY_UNSET", **kw)


@pytest.mark.timeout(30)
def test_a_connection_closed_without_an_answer_is_a_connection_error_not_a_timeout(tmp_path):
    url, close = _raw_server(lambda conn: conn.close())
    try:
        r = LLMClient(_config(url, tmp_path)).chat(MSG)
    finally:
        close()
    assert not r.ok and r.attempts == 2
    assert r.infra_error.startswith("connection_error: ServerDisconnectedError"), r.infra_error


@pytest.mark.timeout(30)
def test_a_server_that_never_answers_is_a_timeout(tmp_path):
    held = []
    url, close = _raw_server(held.append)          # read the request, answer nothing
    try:
        r = LLMClient(_config(url, tmp_path, timeout_s=0.5)).chat(MSG)
    finally:
        close()
        for conn in held:
            conn.close()
    assert not r.ok and r.attempts == 2
    assert r.infra_error.startswith("timeout: ReadTimeout"), r.infra_error
