"""An endpoint that answers another number of choices than the request's ``n`` is refused (retried,
never cached, and a cached entry of the wrong count is a miss); ``$SURFPRM_EMBEDDED_MODEL`` naming
no embedded model is one line from the commands that load the default model."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llm.cache import ResponseCache, request_key
from llm.client import LLMClient, LLMConfig, MalformedResponse, build_request, parse_response

MSG = [{"role": "user", "content": "click('12')?"}]


def body_with(choices: int) -> dict:
    return {"model": "m", "choices": [{"index": i, "message": {"role": "assistant", "content": f"answer {i}"},
                                       "finish_reason": "stop"} for i in range(choices)],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


class Fixed(BaseHTTPRequestHandler):
    """Every POST gets ``server.choices`` choices, whatever ``n`` asked for."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.posts += 1
        data = json.dumps(body_with(self.server.choices)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def endpoint():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Fixed)
    srv.daemon_threads, srv.posts = True, 0
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def client(srv, tmp_path, n: int) -> LLMClient:
    return LLMClient(LLMConfig(base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", model="m", n=n,
                               cache_dir=str(tmp_path / "cache"), timeout_s=5, connect_timeout_s=2, max_retries=1,
                               backoff_s=0.01, api_key_env="SURFPRM_TEST_KEY_UNSET"))


def test_parse_response_checks_the_number_of_choices():
    assert parse_response(body_with(3), n=3).texts == ["answer 0", "answer 1", "answer 2"]
    for got, n in ((3, 1), (3, 5), (1, 2)):
        with pytest.raises(MalformedResponse, match=f"{got} choices for n={n}"):
            parse_response(body_with(got), n=n)


@pytest.mark.parametrize("n", [1, 5])
def test_three_choices_for_another_n_are_refused_and_not_cached(endpoint, tmp_path, n):
    endpoint.choices = 3
    result = client(endpoint, tmp_path, n).chat(MSG)
    assert not result.ok and f"3 choices for n={n}" in result.infra_error and endpoint.posts == 2   # retried once
    assert not list((tmp_path / "cache").rglob("*.json"))
    endpoint.choices = n                                 # the same request answered right is taken and cached
    result = client(endpoint, tmp_path, n).chat(MSG)
    assert result.ok and len(result.texts) == n and list((tmp_path / "cache").rglob("*.json"))


def test_a_cached_entry_of_the_wrong_count_is_a_miss(endpoint, tmp_path):
    cfg = client(endpoint, tmp_path, 1).config
    payload = build_request(MSG, cfg)
    ResponseCache(cfg.cache_dir).put(request_key(payload, cfg.endpoint), payload, body_with(3))
    endpoint.choices = 1
    result = client(endpoint, tmp_path, 1).chat(MSG)
    assert result.ok and not result.cached and result.texts == ["answer 0"] and endpoint.posts == 1


def test_a_bad_embedded_model_name_is_one_line(monkeypatch, capsys):
    from llm.serve import main

    monkeypatch.setenv("SURFPRM_EMBEDDED_MODEL", "../../etc/passwd")
    assert main(["--port", "0"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "SURFPRM_EMBEDDED_MODEL" in lines[0] and "not an embedded model" in lines[0]


def test_a_bad_embedded_model_name_is_one_line_from_the_client_and_its_config(monkeypatch, capsys):
    from llm.client import main

    monkeypatch.setenv("SURFPRM_EMBEDDED_MODEL", "../../etc/passwd")
    with pytest.raises(ValueError, match="SURFPRM_EMBEDDED_MODEL"):
        LLMConfig(backend="local").validate()
    LLMConfig(backend="local", model="some/folder").validate()          # a model of its own needs no default
    assert main(["--backend", "local", "--prompt", "hi"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: $SURFPRM_EMBEDDED_MODEL='../../etc/passwd'")
