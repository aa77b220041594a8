"""`llm.serve` answers a request it cannot serve with 400 and an OpenAI error body (so a
client does not retry a hopeless request), through real HTTP on 127.0.0.1, without a model."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from llm import LLMClient, LLMConfig
from llm.local import MAX_N, check_request
from llm.serve import MAX_BODY_BYTES, serve_in_thread

MSG = [{"role": "user", "content": "Name one color."}]


def echo_completion(request: dict) -> dict:
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": request.get("model", ""),
            "choices": [{"index": i, "message": {"role": "assistant", "content": request["messages"][-1]["content"]},
                         "finish_reason": "stop"} for i in range(request.get("n", 1))],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}

BAD_REQUESTS = {
    "n a list": {"messages": MSG, "n": [1]},
    "n zero": {"messages": MSG, "n": 0},
    "n absurd": {"messages": MSG, "n": MAX_N + 1},
    "n a bool": {"messages": MSG, "n": True},
    "temperature a string": {"messages": MSG, "temperature": "hot"},
    "temperature negative": {"messages": MSG, "temperature": -1},
    "top_p above 1": {"messages": MSG, "top_p": 1.5},
    "max_tokens a float": {"messages": MSG, "max_tokens": 1.5},
    "max_tokens zero": {"messages": MSG, "max_tokens": 0},
    "seed a string": {"messages": MSG, "seed": "x"},
    "seed beyond 64 bits": {"messages": MSG, "seed": 2**70},
    "messages a string": {"messages": "hi"},
    "messages missing": {"model": "m"},
    "content a number": {"messages": [{"role": "user", "content": 5}]},
    "role a list": {"messages": [{"role": ["user"], "content": "hi"}]},
    "stream a string": {"messages": MSG, "stream": "yes"},
    "stream requested": {"messages": MSG, "stream": True},
    "temperature NaN": {"messages": MSG, "temperature": float("nan")},
    "temperature infinite": {"messages": MSG, "temperature": float("inf")},
    "top_p NaN": {"messages": MSG, "top_p": float("nan")},
    "max_tokens infinite": {"messages": MSG, "max_tokens": float("inf")},
    "n NaN": {"messages": MSG, "n": float("nan")},
}


@pytest.fixture
def echo_server():
    calls = []

    def complete(request: dict) -> dict:
        calls.append(request)
        return echo_completion(request)

    server = serve_in_thread(complete, "echo-model")
    server.calls = calls
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("body", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
def test_check_request_refuses_wrong_types_and_ranges(body):
    with pytest.raises(ValueError):
        check_request(body)


@pytest.mark.parametrize("body", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
def test_a_refusal_is_one_line_naming_the_field(body):
    """The pydantic model's report (several lines, with URLs) becomes the 400's one line."""
    with pytest.raises(ValueError) as refused:
        check_request(body)
    message = str(refused.value)
    field = next((k for k in body if k not in ("messages", "model")), "messages")
    assert "\n" not in message and "https://" not in message
    assert field in message or "streaming" in message, message


def test_check_request_caps_max_tokens():
    assert check_request({"messages": MSG, "max_tokens": 100}, max_tokens_cap=100)["max_tokens"] == 100
    assert check_request({"messages": MSG}, max_tokens_cap=50)["max_tokens"] == 50, "the default obeys the cap"
    for key in ("max_tokens", "max_completion_tokens"):
        with pytest.raises(ValueError, match=key):
            check_request({"messages": MSG, key: 101}, max_tokens_cap=100)


def test_check_request_defaults_and_accepts_openai_forms():
    assert check_request({"messages": MSG}) == {"messages": MSG, "n": 1, "temperature": 1.0, "top_p": 1.0,
                                                "max_tokens": 256, "seed": None}
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"},
                                          {"type": "text", "text": "b"}]}]
    r = check_request({"messages": parts, "n": 3, "temperature": 0, "seed": -5, "max_completion_tokens": 9,
                       "stream": False, "top_p": None})
    assert r == {"messages": [{"role": "user", "content": "ab"}], "n": 3, "temperature": 0.0, "top_p": 1.0,
                 "max_tokens": 9, "seed": -5}


@pytest.mark.timeout(30)
def test_bad_requests_get_400_with_an_openai_error_body(echo_server):
    with httpx.Client(base_url=echo_server.base_url, timeout=5) as http:
        for name, body in BAD_REQUESTS.items():
            # json.dumps writes NaN/Infinity (not JSON, but Python's json and many clients send them).
            r = http.post("/chat/completions", content=json.dumps(body), headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (name, r.status_code, r.text)
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == 400 and error["message"], name
        for raw in (b"{not json", b"[1, 2]", b"\xff\xfe"):
            r = http.post("/chat/completions", content=raw, headers={"Content-Type": "application/json"})
            assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        assert http.post("/chat/completions", json={"messages": MSG, "n": 2}).json()["choices"][1]["index"] == 1
    assert len(echo_server.calls) == 1, "complete() saw a request that should have been refused"


@pytest.mark.timeout(30)
def test_client_does_not_retry_a_refused_request(echo_server, tmp_path):
    # (a seed past its range no longer reaches the server: the client refuses it, see tests/hostile)
    client = LLMClient(LLMConfig(base_url=echo_server.base_url, model="echo-model", cache_dir=str(tmp_path),
                                 max_retries=6, backoff_s=0.01))
    r = client.chat([{"role": "user", "content": {"not": "text"}}])
    assert not r.ok and r.infra_error.startswith("http_400") and "content" in r.infra_error and r.attempts == 1


def _raw_post(server, content_length: str, body: bytes = b"") -> bytes:
    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + content_length.encode() + b"\r\n\r\n" + body)
        reply = b""
        while chunk := s.recv(65536):      # the server answers, then closes the connection
            reply += chunk
    return reply


@pytest.mark.timeout(30)
@pytest.mark.parametrize("length", ["-1", "-99999", "1" + "0" * 30, "lots"])
def test_bad_content_length_is_refused_at_once(echo_server, length):
    reply = _raw_post(echo_server, length, b'{"messages": []}')
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"Content-Length" in body
    assert not echo_server.calls


@pytest.mark.timeout(30)
def test_content_length_over_the_limit_is_413(echo_server):
    reply = _raw_post(echo_server, str(MAX_BODY_BYTES + 1), b'{"messages": []}')
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"--max-body-bytes" in body
    assert not echo_server.calls
