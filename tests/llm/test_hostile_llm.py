"""Hostile endpoints against the LLM client and its cache (issue 24, items 2, 9 and 12): numbers
out of range, bodies that are too large, compressed, nested too deeply or not UTF-8, redirects to
another origin, and cache entries planted by hand. Each is refused or a miss, never a crash, and
nothing out of range is cached. Servers run on 127.0.0.1 only."""

from __future__ import annotations

import gzip
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from fake_openai import echo_completion
from llm.cache import ResponseCache, request_key
from llm.client import (
    MAX_RESPONSE_BYTES,
    LLMClient,
    LLMConfig,
    MalformedResponse,
    build_request,
    parse_response,
    retry_after_s,
)

MSG = [{"role": "user", "content": "click('12')?"}]


class Scripted(BaseHTTPRequestHandler):
    """Answers every POST with ``server.answer(handler)``: (status, headers, body bytes)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.posts += 1
        status, headers, body = self.server.answer(self)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if "Transfer-Encoding" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            if headers.get("Transfer-Encoding") == "chunked":
                for i in range(0, len(body), 1 << 20):
                    part = body[i:i + (1 << 20)]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.wfile.write(body)
        except OSError:
            pass        # the client stopped reading: what it should do


@pytest.fixture
def scripted():
    servers = []

    def start(answer):
        srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
        srv.daemon_threads = True
        srv.answer, srv.posts, srv.lock = answer, 0, threading.Lock()
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        srv.base_url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def json_answer(body) -> tuple[int, dict, bytes]:
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


def ok_body(**usage) -> dict:
    body = echo_completion({"messages": MSG, "model": "m"})
    body["usage"].update(usage)
    return body


def client_for(url, tmp_path, **kw) -> LLMClient:
    base = dict(base_url=url, model="m", cache_dir=str(tmp_path / "cache"), timeout_s=5, connect_timeout_s=2,
                max_retries=1, backoff_s=0.01, api_key_env="SURFPRM_TEST_KEY_UNSET")
    return LLMClient(LLMConfig(**{**base, **kw}))


def cache_files(tmp_path) -> list:
    return [p for p in (tmp_path / "cache").rglob("*.json")] if (tmp_path / "cache").exists() else []


# -- item 2: numbers from outside -----------------------------------------------------------------
@pytest.mark.parametrize("count", [10**30, 2**63, -1, 1.5, True])
def test_a_token_count_out_of_range_is_malformed(count):
    with pytest.raises(MalformedResponse, match="usage.prompt_tokens"):
        parse_response(ok_body(prompt_tokens=count))


def test_a_huge_token_count_is_retried_then_a_failure_and_never_cached(scripted, tmp_path):
    srv = scripted(lambda h: json_answer(ok_body(prompt_tokens=10**30)))
    result = client_for(srv.base_url, tmp_path).chat(MSG)
    assert not result.ok and "usage.prompt_tokens" in result.infra_error
    assert srv.posts == 2 and cache_files(tmp_path) == []


def test_a_cached_entry_with_a_huge_count_is_a_miss_and_answered_afresh(scripted, tmp_path):
    srv = scripted(lambda h: json_answer(ok_body()))
    client = client_for(srv.base_url, tmp_path)
    key = request_key(build_request(MSG, client.config), client.config.endpoint)
    ResponseCache(tmp_path / "cache").put(key, {}, ok_body(prompt_tokens=10**30, completion_tokens=10**40))
    result = client.chat(MSG)
    assert result.ok and not result.cached and result.prompt_tokens == 1000 and srv.posts == 1
    again = client_for(srv.base_url, tmp_path).chat(MSG)       # the fresh answer replaced the entry
    assert again.cached and again.prompt_tokens == 1000 and srv.posts == 1


def test_text_that_is_not_utf8_is_malformed_not_a_crash_at_the_cache(scripted, tmp_path):
    body = json.dumps(ok_body()).replace("echo[0]", "\\ud800 lone surrogate").encode()
    srv = scripted(lambda h: (200, {"Content-Type": "application/json"}, body))
    result = client_for(srv.base_url, tmp_path).chat(MSG)
    assert not result.ok and "UTF-8" in result.infra_error and cache_files(tmp_path) == []


def test_json_nested_too_deeply_is_malformed_not_a_crash(scripted, tmp_path):
    srv = scripted(lambda h: (200, {"Content-Type": "application/json"}, b"[" * 200_000 + b"]" * 200_000))
    result = client_for(srv.base_url, tmp_path).chat(MSG)
    assert not result.ok and result.infra_error.startswith("malformed_response")


def test_planted_cache_entries_are_misses(scripted, tmp_path):
    srv = scripted(lambda h: json_answer(ok_body()))
    client = client_for(srv.base_url, tmp_path)
    key = request_key(build_request(MSG, client.config), client.config.endpoint)
    path = ResponseCache(tmp_path / "cache").path(key)
    path.parent.mkdir(parents=True)
    cache = ResponseCache(tmp_path / "cache")
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)             # RecursionError in json
    assert cache.get(key) is None
    path.unlink()
    os.mkfifo(path)                                                # would block a plain open()
    assert cache.get(key) is None
    path.unlink()
    with open(path, "wb") as f:                                    # over the entry cap (sparse)
        f.truncate(64 * 1024 * 1024)
    assert cache.get(key) is None
    assert client.chat(MSG).ok and srv.posts == 1


def test_a_seed_past_its_range_is_refused_before_a_request(scripted, tmp_path):
    srv = scripted(lambda h: json_answer(ok_body()))
    client = client_for(srv.base_url, tmp_path)
    with pytest.raises(ValueError, match="seed"):
        client.chat(MSG, seed=10**23)
    with pytest.raises(ValueError, match="seed"):
        client_for(srv.base_url, tmp_path, seed=2**32)
    assert srv.posts == 0


# -- item 9: response bodies are capped -----------------------------------------------------------
def big_body() -> bytes:
    body = ok_body()
    body["choices"][0]["message"]["content"] = "x" * (MAX_RESPONSE_BYTES + 1024)
    return json.dumps(body).encode()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_over_the_cap_is_refused_without_a_retry(scripted, tmp_path, framing):
    data = big_body()
    headers = {"Content-Type": "application/json"}
    if framing == "chunked":
        headers["Transfer-Encoding"] = "chunked"
    srv = scripted(lambda h: (200, headers, data))
    result = client_for(srv.base_url, tmp_path, max_retries=3).chat(MSG)
    assert not result.ok and result.infra_error.startswith("response_too_large")
    assert srv.posts == 1 and result.attempts == 1 and cache_files(tmp_path) == []


def test_a_compressed_body_is_refused_so_no_bomb_is_inflated(scripted, tmp_path):
    seen = []

    def answer(h):
        seen.append(h.headers.get("Accept-Encoding"))
        return 200, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, gzip.compress(big_body())
    srv = scripted(answer)
    result = client_for(srv.base_url, tmp_path).chat(MSG)
    assert seen == ["identity"]
    assert not result.ok and "gzip" in result.infra_error and srv.posts == 1


# -- item 12: a redirect to another origin is not followed ----------------------------------------
def test_a_307_to_another_origin_is_not_followed(scripted, tmp_path):
    elsewhere = scripted(lambda h: json_answer(ok_body()))
    target = elsewhere.base_url + "/chat/completions"
    srv = scripted(lambda h: (307, {"Location": target}, b""))
    result = client_for(srv.base_url, tmp_path, max_retries=3).chat(MSG)
    assert not result.ok and result.infra_error.startswith("redirect_refused")
    assert elsewhere.posts == 0 and srv.posts == 1


def test_a_307_on_the_same_origin_is_followed(scripted, tmp_path):
    def answer(h):
        if h.path.startswith("/v1/"):
            return 307, {"Location": "/v2/chat/completions"}, b""
        return json_answer(ok_body())
    srv = scripted(answer)
    assert client_for(srv.base_url, tmp_path).chat(MSG).ok and srv.posts == 2



@pytest.mark.parametrize("headers", [{"Retry-After": "nan"}, {"retry-after-ms": "NaN"}])
def test_a_retry_after_of_nan_is_no_wait(headers):
    # asyncio.sleep(nan) puts a NaN deadline in the loop's timer heap, whose order it corrupts
    assert retry_after_s(httpx.Headers(headers)) is None
    assert retry_after_s(httpx.Headers({"Retry-After": "inf"})) == float("inf")    # capped by the caller
