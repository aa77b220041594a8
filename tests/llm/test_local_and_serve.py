"""The embedded model answers with no configuration, honours temperature/seed/n/max_tokens, and
serves the OpenAI protocol through `python -m llm.serve` (real model, real HTTP)."""

from __future__ import annotations

import json
import os
import re
import selectors
import socket
import subprocess
import sys
import time

import httpx
import pytest

from conftest import EMBEDDED_MODEL, ROOT
from llm import LLMClient, LLMConfig, chat

MSG = [{"role": "user", "content": "Name one color."}]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedded():
    if not (EMBEDDED_MODEL / "config.json").exists():
        pytest.skip("embedded model missing: run `make setup`")
    return EMBEDDED_MODEL


def test_no_configuration_means_the_embedded_model_in_process(embedded, tmp_path):
    import torch
    from transformers import AutoTokenizer

    r = chat(MSG, cache_dir=str(tmp_path), max_tokens=12)
    assert r.ok and r.text.strip() and r.model == embedded.name and r.cost_usd == 0
    tok = AutoTokenizer.from_pretrained(embedded)
    ids = tok.apply_chat_template(MSG, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert r.prompt_tokens == len(ids)
    assert 1 <= r.completion_tokens <= 12

    client = LLMClient(LLMConfig(cache_dir=str(tmp_path), no_cache=True, max_tokens=12))
    rng_before = torch.random.get_rng_state()
    a = client.chat(MSG, temperature=0.9, seed=3, n=2)
    b = client.chat(MSG, temperature=0.9, seed=3, n=2)
    c = client.chat(MSG, temperature=0.9, seed=4, n=2)
    unseeded = [client.chat(MSG, temperature=1.0, seed=None).text for _ in range(3)]
    assert torch.equal(rng_before, torch.random.get_rng_state()), "a request must not reseed the process"
    assert a.texts == b.texts and len(a.texts) == 2, "same request, same seed: same answer"
    assert a.texts != c.texts, "another seed samples another answer"
    assert len(set(unseeded)) > 1, f"unseeded sampling repeats itself: {unseeded}"
    greedy = client.chat(MSG, temperature=0.0, n=2, max_tokens=4)
    assert greedy.texts[0] == greedy.texts[1] and greedy.finish_reasons == ["length", "length"]
    assert greedy.completion_tokens == 8 and client.requests_sent == 7


def _wait_for_line(proc: subprocess.Popen, needle: str, timeout_s: float) -> str:
    seen, sel = "", selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            seen += line
            if needle in line:
                return line
    raise AssertionError(f"server did not print {needle!r} within {timeout_s}s:\n{seen}")


@pytest.mark.timeout(240)
def test_serve_answers_a_real_chat_request_with_usage(embedded, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    # port 0: the server binds a free port and names it (no race with another test or xdist worker)
    proc = subprocess.Popen([sys.executable, "-m", "llm.serve", "--model", str(embedded), "--port", "0"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = int(re.search(r"at http://127\.0\.0\.1:(\d+)/v1", _wait_for_line(proc, "serving", 180)).group(1))
        base = f"http://127.0.0.1:{port}/v1"
        models = httpx.get(f"{base}/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == [embedded.name]

        client = LLMClient(LLMConfig(base_url=base, model=embedded.name, max_tokens=16,
                                     cache_dir=str(tmp_path / "cache"), timeout_s=120))
        r = client.chat(MSG, stage="demo")
        assert r.ok, r.infra_error
        assert r.text.strip() and r.prompt_tokens > 0 and 0 < r.completion_tokens <= 16
        assert client.usage["demo"].as_dict()["prompt_tokens"] == r.prompt_tokens
        # The server and the in-process backend are the same code: greedy answers agree.
        local = LLMClient(LLMConfig(model=str(embedded), max_tokens=16, no_cache=True)).chat(MSG)
        assert local.texts == r.texts

        bad = httpx.post(f"{base}/chat/completions", json={"messages": MSG, "stream": True}, timeout=10)
        assert bad.status_code == 400 and "stream" in bad.json()["error"]["message"]

        # Hostile requests (issue 18) against the real model: refused before generating.
        r = httpx.post(f"{base}/chat/completions", json={"messages": MSG, "max_tokens": 10**9}, timeout=30)
        assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
        past = [{"role": "user", "content": "color " * 9000}]
        r = httpx.post(f"{base}/chat/completions", json={"messages": past}, timeout=60)
        assert r.status_code == 400 and "maximum context length is 8192" in r.json()["error"]["message"]

        # A long generation whose client leaves: /health answers meanwhile, and it stops.
        body = json.dumps({"messages": [{"role": "user", "content": "Count from 1 to 1000, one number a line."}],
                           "max_tokens": 1024, "temperature": 0}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            time.sleep(2)
            health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).json()
            assert health["status"] == "ok" and health["inflight"] == 1
        _wait_for_line(proc, "generation stopped (disconnected)", 60)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
