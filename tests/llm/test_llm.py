"""The LLM access layer through real HTTP on 127.0.0.1: retries, timeouts, infrastructure
failures, the cache (counted at the server), accounting, and the API key never leaking."""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import gc
import json
import logging
import multiprocessing
import os
import socket
import stat
import threading
import time
import uuid
import warnings

import pytest

from fake_openai import echo_completion
from llm.cache import ResponseCache, request_key
from llm.client import (
    NO_KEY,
    ChatResult,
    InfraError,
    LLMClient,
    LLMConfig,
    MalformedResponse,
    build_request,
    parse_response,
    retry_after_s,
)
from llm.cost import UsageTotals, price_for

MSG = [{"role": "system", "content": "You judge web actions."}, {"role": "user", "content": "click('12')?"}]


def config_for(server, tmp_path, **kw) -> LLMConfig:
    """Short timeouts and backoffs so every fault test finishes in about a second."""
    base = dict(base_url=server.base_url, model="fake-model", cache_dir=str(tmp_path / "cache"),
                timeout_s=0.5, connect_timeout_s=0.5, max_retries=3, backoff_s=0.01, backoff_max_s=5.0,
                api_key_env="SURFPRM_TEST_KEY_UNSET")
    return LLMConfig(**{**base, **kw})


# -- pure functions -----------------------------------------------------------------------------
def test_build_request_has_every_sampling_parameter_and_no_key():
    cfg = LLMConfig(base_url="http://x/v1", model="m", temperature=0.2, seed=7, max_tokens=64, n=3)
    body = build_request(MSG, cfg)
    assert body == {"model": "m", "messages": MSG, "temperature": 0.2, "max_tokens": 64, "n": 3, "seed": 7}
    assert "seed" not in build_request(MSG, LLMConfig(base_url="http://x/v1", model="m", seed=None))
    with pytest.raises(ValueError):
        build_request([{"content": "no role"}], cfg)
    with pytest.raises(ValueError):
        build_request([], cfg)
    with pytest.raises(ValueError, match="--model"):
        build_request(MSG, LLMConfig(base_url="http://x/v1"))


def test_cache_key_changes_with_seed_messages_and_endpoint():
    cfg = LLMConfig(base_url="http://x/v1", model="m")
    body = build_request(MSG, cfg)
    key = request_key(body, cfg.endpoint)
    assert key == request_key(json.loads(json.dumps(body)), "http://x/v1")
    assert key != request_key(build_request(MSG, LLMConfig(base_url="http://x/v1", model="m", seed=1)), cfg.endpoint)
    assert key != request_key(build_request(MSG[:1], cfg), cfg.endpoint)
    assert key != request_key(body, "http://y/v1")


def test_parse_response_orders_choices_and_prices_usage():
    body = {"model": "gpt-4o-2024-08-06", "usage": {"prompt_tokens": 3100, "completion_tokens": 472},
            "choices": [{"index": 1, "message": {"content": "B"}, "finish_reason": "length"},
                        {"index": 0, "message": {"content": ""}, "finish_reason": "stop"}]}
    r = parse_response(body, price_for("gpt-4o-2024-08-06"))
    assert r.texts == ["", "B"] and r.finish_reasons == ["stop", "length"] and r.ok
    assert (r.prompt_tokens, r.completion_tokens) == (3100, 472)
    assert r.cost_usd == pytest.approx((3100 * 2.50 + 472 * 10.00) / 1e6)
    for bad in ({}, {"choices": []}, {"choices": [{"index": 0}]}, ["not", "a", "dict"]):
        with pytest.raises(MalformedResponse):
            parse_response(bad)


def _choice(index=0, content="ok", **kw) -> dict:
    return {"index": index, "message": {"role": "assistant", "content": content}, "finish_reason": "stop", **kw}


# 200 bodies that are JSON but not chat completions; each once crashed the client.
MALFORMED_BODIES = {
    "usage a list": {"choices": [_choice()], "usage": [1]},
    "usage a string": {"choices": [_choice()], "usage": "lots"},
    "tokens a string": {"choices": [_choice()], "usage": {"prompt_tokens": "12", "completion_tokens": 1}},
    "tokens a float": {"choices": [_choice()], "usage": {"prompt_tokens": 1.5, "completion_tokens": 1}},
    "tokens a bool": {"choices": [_choice()], "usage": {"prompt_tokens": True, "completion_tokens": 1}},
    "tokens negative": {"choices": [_choice()], "usage": {"prompt_tokens": -3, "completion_tokens": 1}},
    "index of mixed types": {"choices": [_choice(0), _choice("1")]},
    "index a list": {"choices": [_choice([0])]},
    "index repeated": {"choices": [_choice(0), _choice(0)]},
    "content a number": {"choices": [_choice(content=5)]},
    "content a list": {"choices": [_choice(content=["part"])]},
    "finish_reason a dict": {"choices": [_choice(finish_reason={"x": 1})]},
    "message a string": {"choices": [{"index": 0, "message": "hi"}]},
    # no answer at all: read as '' it was cached and served again on every rerun (issue 18)
    "content null, no tool calls": {"choices": [_choice(content=None)]},
    "second choice null, empty tool calls": {"choices": [_choice(0), {
        "index": 1, "message": {"role": "assistant", "content": None, "tool_calls": []}, "finish_reason": "stop"}]},
}


@pytest.mark.parametrize("body", MALFORMED_BODIES.values(), ids=MALFORMED_BODIES.keys())
def test_parse_response_turns_any_shape_error_into_malformed_response(body):
    with pytest.raises(MalformedResponse):
        parse_response(body, (1.0, 1.0))


def test_parse_response_accepts_what_real_servers_send():
    # no index, no usage, null finish_reason, and null content beside a tool call are all valid
    tool_call = {"id": "call_1", "type": "function", "function": {"name": "click", "arguments": "{}"}}
    r = parse_response({"choices": [{"message": {"content": "a"}},
                                    {"message": {"content": None, "tool_calls": [tool_call]}, "finish_reason": None}]})
    assert (r.texts, r.finish_reasons, r.prompt_tokens) == (["a", ""], ["", ""], 0)
    r = parse_response({"choices": [_choice()], "usage": {"prompt_tokens": 5, "completion_tokens": None}})
    assert (r.prompt_tokens, r.completion_tokens) == (5, 0)


def test_retry_after_in_seconds_milliseconds_and_http_date():
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry_after_s({"retry-after": later}) <= 30
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({}) is None


def test_price_table_and_overrides():
    assert price_for("gpt-4o-mini") == (0.15, 0.60)          # longest matching prefix wins
    assert price_for("my-vllm-model") == (0.0, 0.0)
    assert LLMConfig(base_url="http://x/v1", model="my-vllm-model", prices={"my-vllm": [1, 2]}).price() == (1, 2)
    assert LLMConfig(base_url="http://x/v1", model="gpt-4o", price_in=5.0).price() == (5.0, 0.0)
    assert LLMConfig().price() == (0.0, 0.0)                 # the local model is free


def test_config_from_yaml_then_cli_flags(tmp_path):
    path = tmp_path / "llm.yaml"
    path.write_text("llm:\n  base_url: http://h:8000/v1\n  model: qwen\n  temperature: 0.2\n  prices: {qwen: [1, 2]}\n")
    ap = argparse.ArgumentParser()
    LLMConfig.add_args(ap)
    LLMConfig.add_args(ap, prefix="policy-")
    args = ap.parse_args(["--llm-config", str(path), "--seed", "5", "--no-cache", "--policy-model", "p"])
    cfg = LLMConfig.from_args(args)
    got = (cfg.base_url, cfg.model, cfg.temperature, cfg.seed, cfg.no_cache)
    assert got == ("http://h:8000/v1", "qwen", 0.2, 5, True)
    assert cfg.price() == (1, 2) and not cfg.is_local
    policy = LLMConfig.from_args(args, prefix="policy-")
    assert policy.model == "p" and policy.is_local and policy.seed == 0
    path.write_text("model: m\ntemprature: 0.3\n")
    with pytest.raises(ValueError, match="temprature"):
        LLMConfig.from_yaml(path)


def test_usage_totals_separate_paid_cached_and_failed():
    totals = UsageTotals()
    totals.add(ChatResult(texts=["a"], prompt_tokens=10, completion_tokens=2, cost_usd=1.0, attempts=3))
    totals.add(ChatResult(texts=["a"], prompt_tokens=10, completion_tokens=2, cost_usd=1.0, cached=True))
    totals.add(ChatResult(infra_error="timeout", attempts=4))
    d = totals.as_dict()
    assert (d["calls"], d["cached"], d["failed"], d["retries"]) == (3, 1, 1, 5)
    got = (d["prompt_tokens"], d["cost_usd"], d["cached_cost_usd"], d["prompt_tokens_per_call"])
    assert got == (20, 1.0, 1.0, 10.0)


# -- faults through real HTTP -------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_5xx_is_retried_until_an_answer(fault_server, tmp_path):
    fault_server.faults = ["500", "500"]
    client = LLMClient(config_for(fault_server, tmp_path))
    r = client.chat(MSG, stage="teacher.verify")
    assert r.ok and r.text == "echo[0] click('12')?" and r.attempts == 3
    assert fault_server.requests == 3
    assert client.usage["teacher.verify"].as_dict()["retries"] == 2


@pytest.mark.timeout(30)
def test_429_honours_retry_after(fault_server, tmp_path):
    fault_server.faults = ["429:1"]
    client = LLMClient(config_for(fault_server, tmp_path, backoff_s=0.01))
    start = time.monotonic()
    r = client.chat(MSG)
    elapsed = time.monotonic() - start
    assert r.ok and r.attempts == 2 and fault_server.requests == 2
    assert elapsed >= 0.95, "the client must wait what Retry-After says, not its own 10 ms backoff"


@pytest.mark.timeout(30)
def test_hung_connection_times_out_and_is_retried(fault_server, tmp_path):
    fault_server.faults = ["hang"]
    r = LLMClient(config_for(fault_server, tmp_path, timeout_s=0.3)).chat(MSG)
    assert r.ok and r.attempts == 2 and fault_server.requests == 2


@pytest.mark.timeout(30)
def test_persistent_outage_is_an_infrastructure_failure_not_an_answer(fault_server, tmp_path):
    fault_server.faults = ["hang"] * 3
    client = LLMClient(config_for(fault_server, tmp_path, timeout_s=0.3, max_retries=2))
    start = time.monotonic()
    failed = client.chat(MSG, stage="teacher.verify")
    assert time.monotonic() - start < 5
    assert not failed.ok and failed.infra_error.startswith("timeout") and "3 attempts" in failed.infra_error
    assert failed.texts == [] and failed.attempts == 3 and fault_server.requests == 3
    with pytest.raises(InfraError):
        failed.check()
    # An empty answer is still an answer: the model spoke, nothing failed.
    fault_server.faults = ["empty"]
    empty = client.chat(MSG, stage="teacher.verify", seed=1)
    assert empty.ok and empty.texts == [""] and empty.check() is empty
    totals = client.usage["teacher.verify"].as_dict()
    assert (totals["calls"], totals["failed"]) == (2, 1)
    # Failures are not cached: once the server is healthy the same request is sent again.
    again = client.chat(MSG, stage="teacher.verify")
    assert again.ok and not again.cached and fault_server.requests == 5


@pytest.mark.timeout(30)
def test_malformed_json_is_retried_then_reported(fault_server, tmp_path):
    fault_server.faults = ["garbage"]
    client = LLMClient(config_for(fault_server, tmp_path, max_retries=1))
    assert client.chat(MSG).attempts == 2
    fault_server.faults = ["garbage", "garbage"]
    r = client.chat(MSG, seed=2)
    assert not r.ok and r.infra_error.startswith("malformed_response") and fault_server.requests == 4


@pytest.mark.timeout(30)
def test_malformed_200_bodies_are_retried_and_never_crash_a_batch(fault_server, tmp_path):
    bad = list(MALFORMED_BODIES.values())
    batch = [[{"role": "user", "content": f"q{i}"}] for i in range(len(bad))]
    # Each bad body is sent once, to whichever attempt comes first; every request then ends
    # with an answer, after len(bad) retries in all.
    client = LLMClient(config_for(fault_server, tmp_path, max_retries=len(bad)))
    fault_server.faults = list(bad)
    results = client.chat_many(batch, stage="teacher.verify")
    assert all(r.ok for r in results) and [r.text for r in results] == [f"echo[0] q{i}" for i in range(len(bad))]
    assert sum(r.attempts for r in results) == 2 * len(bad) == fault_server.requests
    # A server that keeps answering nonsense: an infrastructure failure, never an exception.
    fault_server.faults = [MALFORMED_BODIES["usage a list"], MALFORMED_BODIES["index of mixed types"]]
    r = LLMClient(config_for(fault_server, tmp_path, max_retries=1)).chat(MSG, stage="teacher.verify")
    assert not r.ok and r.infra_error.startswith("malformed_response") and "2 attempts" in r.infra_error


@pytest.mark.timeout(30)
def test_corrupt_cache_entry_is_a_miss_answered_afresh(fault_server, tmp_path):
    cfg = config_for(fault_server, tmp_path)
    key = request_key(build_request(MSG, cfg), cfg.endpoint)
    cache = ResponseCache(cfg.cache_dir)
    for n, body in enumerate(MALFORMED_BODIES.values(), 1):
        cache.put(key, build_request(MSG, cfg), body)    # a foreign or hand-edited entry
        r = LLMClient(cfg).chat(MSG)
        assert r.ok and not r.cached and r.text == "echo[0] click('12')?" and fault_server.requests == n
    again = LLMClient(cfg).chat(MSG)                     # the fresh answer replaced the entry
    assert again.cached and fault_server.requests == len(MALFORMED_BODIES)


@pytest.mark.timeout(30)
def test_client_errors_are_not_retried_and_connection_refused_is_infra(fault_server, tmp_path):
    fault_server.faults = ["401"]
    r = LLMClient(config_for(fault_server, tmp_path)).chat(MSG)
    assert not r.ok and r.infra_error.startswith("http_401") and fault_server.requests == 1
    with socket.socket() as s:        # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = config_for(fault_server, tmp_path, base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    r = LLMClient(cfg).chat(MSG)
    assert not r.ok and r.infra_error.startswith("connection_error") and r.attempts == 2


@pytest.mark.timeout(30)
def test_the_sdk_sends_the_hashed_request_once_per_attempt(fault_server, tmp_path):
    """The body on the wire is the one the cache key hashes, and the SDK adds no attempts."""
    cfg = config_for(fault_server, tmp_path, temperature=0.2, top_p=0.9, seed=3, n=2, max_tokens=32)
    r = LLMClient(cfg).chat(MSG)
    assert fault_server.bodies == [build_request(MSG, cfg)]
    assert r.texts == ["echo[0] click('12')?", "echo[1] click('12')?"] and r.key == request_key(
        build_request(MSG, cfg), cfg.endpoint)
    fault_server.faults = ["500", "429:0", "500"]
    r = LLMClient(cfg, max_retries=0, no_cache=True).chat(MSG)
    assert not r.ok and r.infra_error == "http_500 (after 1 attempts)" and fault_server.requests == 2


@pytest.mark.timeout(30)
def test_null_content_is_retried_and_never_cached(fault_server, tmp_path):
    cfg = config_for(fault_server, tmp_path, max_retries=2)
    fault_server.faults = ["null"]
    r = LLMClient(cfg).chat(MSG)
    assert r.ok and r.text == "echo[0] click('12')?" and r.attempts == 2 and fault_server.requests == 2
    # A server that only ever answers null: an infrastructure failure, and nothing is cached.
    fault_server.faults = ["null"] * 3
    client = LLMClient(cfg)
    failed = client.chat(MSG, stage="teacher.verify", seed=5)
    assert not failed.ok and failed.texts == [] and failed.attempts == 3 and fault_server.requests == 5
    assert failed.infra_error.startswith("malformed_response: choice 0 has null content and no tool calls")
    assert client.usage["teacher.verify"].failed == 1
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 1, "only the real answer is cached"
    rerun = LLMClient(cfg).chat(MSG, seed=5)           # a rerun asks again, and keeps the answer
    assert rerun.ok and not rerun.cached and rerun.text == "echo[0] click('12')?" and fault_server.requests == 6
    assert LLMClient(cfg).chat(MSG, seed=5).cached and fault_server.requests == 6


@pytest.mark.timeout(30)
def test_without_a_key_a_placeholder_is_sent_and_never_logged(fault_server, tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("SURFPRM_TEST_KEY_UNSET", raising=False)
    caplog.set_level(logging.DEBUG)
    client = LLMClient(config_for(fault_server, tmp_path))
    fault_server.faults = ["401"]                       # the server echoes the Authorization header
    refused, answered = client.chat(MSG), client.chat(MSG, seed=1)
    assert fault_server.auth == [f"Bearer {NO_KEY}"] * 2 and answered.ok
    assert refused.infra_error == "http_401: " + json.dumps(
        {"error": {"message": "bad key Bearer ***", "type": "invalid_request_error", "code": 401}})
    assert "no API key in $SURFPRM_TEST_KEY_UNSET" in caplog.text and "bad key Bearer ***" in caplog.text
    assert NO_KEY not in caplog.text and NO_KEY not in repr(client)


# -- cache and concurrency ----------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_cache_hits_send_no_request(fault_server, tmp_path):
    batch = [[{"role": "user", "content": f"pair {i}"}] for i in range(6)]
    cfg = config_for(fault_server, tmp_path, model="gpt-4o-mini")
    first = LLMClient(cfg).chat_many(batch, stage="teacher.verify")
    assert fault_server.requests == 6 and not any(r.cached for r in first)
    rerun = LLMClient(cfg)                     # a resumed run: new client, same cache folder
    second = rerun.chat_many(batch, stage="teacher.verify")
    assert fault_server.requests == 6, "a cached request reached the server"
    assert [r.texts for r in second] == [r.texts for r in first] and all(r.cached for r in second)
    totals = rerun.usage["teacher.verify"].as_dict()
    assert totals["cached"] == 6 and totals["cost_usd"] == 0
    assert totals["cached_cost_usd"] == pytest.approx(6 * (1000 * 0.15 + 100 * 0.60) / 1e6)
    assert totals["prompt_tokens"] == 6000
    rerun.chat(batch[0], seed=99)              # another seed is another request
    LLMClient(cfg, no_cache=True).chat(batch[0])
    rerun.chat(batch[0], use_cache=False)
    assert fault_server.requests == 9


@pytest.mark.timeout(30)
def test_concurrency_limit_holds_at_the_server(fault_server, tmp_path):
    fault_server.delay_s = 0.05
    client = LLMClient(config_for(fault_server, tmp_path, concurrency=4, no_cache=True))
    results = client.chat_many([[{"role": "user", "content": str(i)}] for i in range(24)])
    assert [r.text for r in results] == [f"echo[0] {i}" for i in range(24)]   # input order kept
    assert 2 <= fault_server.peak <= 4


@pytest.mark.timeout(30)
def test_chat_many_reports_each_answer_and_runs_inside_a_running_loop(fault_server, tmp_path):
    """``on_result`` sees every answer (progress bars), and a caller that already runs an event
    loop (a notebook calling ``proposals.mine``) gets its answers instead of asyncio.run's error."""
    client = LLMClient(config_for(fault_server, tmp_path, no_cache=True))
    seen = []

    async def from_a_notebook():
        return client.chat_many([[{"role": "user", "content": str(i)}] for i in range(5)], on_result=seen.append)

    results = asyncio.run(from_a_notebook())
    assert [r.text for r in results] == [f"echo[0] {i}" for i in range(5)]
    assert sorted(r.text for r in seen) == sorted(r.text for r in results)


class _SlowLocalModel:
    """Stands in for ``llm.local.LocalModel``: counts generations running at once."""

    def __init__(self):
        self.lock, self.inflight, self.peak = threading.Lock(), 0, 0

    def complete(self, payload: dict) -> dict:
        with self.lock:
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
        time.sleep(0.05)
        with self.lock:
            self.inflight -= 1
        return echo_completion(payload)


@pytest.mark.timeout(30)
def test_local_backend_honours_the_concurrency_limit(tmp_path, monkeypatch):
    model = _SlowLocalModel()
    monkeypatch.setattr("llm.local.load_local_model", lambda path: model)
    client = LLMClient(LLMConfig(model=str(tmp_path), concurrency=2, no_cache=True))
    results = client.chat_many([[{"role": "user", "content": str(i)}] for i in range(12)])
    assert [r.text for r in results] == [f"echo[0] {i}" for i in range(12)] and client.requests_sent == 12
    assert model.peak == 2, f"{model.peak} local generations ran at once with --concurrency 2"


def _wait_for(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


@pytest.mark.timeout(30)
def test_connection_pool_is_closed_with_its_event_loop(fault_server, tmp_path):
    """Async callers that never ``aclose()`` (one ``asyncio.run`` per batch) leak no sockets."""
    client = LLMClient(config_for(fault_server, tmp_path, no_cache=True))
    pools = []

    async def batch(i):
        results = await client.achat_many([[{"role": "user", "content": f"{i}.{j}"}] for j in range(3)])
        pools.append(client._openai)
        return results

    gc.collect()   # earlier tests' garbage (servers, browsers) must not be counted as this client's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            assert all(r.ok for r in asyncio.run(batch(i)))
            assert _wait_for(lambda: fault_server.connections == 0), "the server still holds a connection"
        assert len({id(p) for p in pools}) == 3 and all(p.is_closed() for p in pools)
        del pools[:]
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not unclosed, unclosed

    # A hand-run loop closed without shutting down async generators cannot close its pool any
    # more; the next loop drops it, and its connection ends when the pool is collected.
    loop = asyncio.new_event_loop()
    assert loop.run_until_complete(client.achat(MSG)).ok
    stale = client._openai
    loop.close()
    assert fault_server.connections == 1
    assert asyncio.run(client.achat(MSG, seed=1)).ok
    assert client._openai is not stale, "the client kept the stale pool"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)   # asyncio names the unclosed transport
        del stale
        gc.collect()
    assert _wait_for(lambda: fault_server.connections == 0), "the stale connection is still open"


def test_sync_chat_works_inside_a_running_event_loop(fault_server, tmp_path):
    client = LLMClient(config_for(fault_server, tmp_path))

    async def notebook_cell():
        return client.chat(MSG)

    assert asyncio.run(notebook_cell()).ok


def _write_entries(args):
    root, worker = args
    cache = ResponseCache(root)
    for i in range(40):
        cache.put(f"{i:064x}", {"i": i}, {"choices": [{"message": {"content": f"{i}"}}], "w": worker})
    return worker


def test_cache_is_safe_with_concurrent_writer_processes(tmp_path):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        assert sorted(pool.map(_write_entries, [(str(tmp_path), w) for w in range(4)])) == [0, 1, 2, 3]
    cache = ResponseCache(tmp_path)
    for i in range(40):
        assert cache.get(f"{i:064x}")["choices"][0]["message"]["content"] == f"{i}"
    assert not list(tmp_path.rglob("*.tmp")), "temp files left behind"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(cache.path(f"{0:064x}").stat().st_mode) == 0o666 & ~umask, "other runs must read the cache"
    cache.path("f" * 64).parent.mkdir(parents=True, exist_ok=True)
    cache.path("f" * 64).write_text('{"response": ')        # a torn entry reads as a miss
    assert cache.get("f" * 64) is None


# -- the API key --------------------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_api_key_never_appears_in_logs_files_or_reprs(fault_server, tmp_path, monkeypatch, caplog, capfd):
    key = f"sk-surfprm-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("SURFPRM_TEST_KEY", key)
    caplog.set_level(logging.DEBUG)            # the SDK's and httpx2's debug lines included
    run_log = logging.FileHandler(tmp_path / "run.log", encoding="utf-8")   # a run's log file
    logging.getLogger().addHandler(run_log)
    cfg = config_for(fault_server, tmp_path, api_key_env="SURFPRM_TEST_KEY", timeout_s=0.3, max_retries=1)
    try:
        client = LLMClient(cfg)
        fault_server.faults = ["429:0", "500", "hang", "garbage", "401"]
        results = [client.chat(MSG, seed=s) for s in range(4)]
    finally:
        logging.getLogger().removeHandler(run_log)
        run_log.close()
    assert fault_server.auth[0] == f"Bearer {key}", "the key must reach the server"
    # 429 then 500 | hang then garbage | 401 (the server echoes the key) | an answer
    assert [r.ok for r in results] == [False, False, False, True]
    assert "http_401" in results[2].infra_error and "***" in results[2].infra_error
    out, err = capfd.readouterr()
    # The echoed key did reach the client's logs -- masked: this grep has something to find.
    assert "http_401: " in caplog.text and "***" in caplog.text
    texts = [caplog.text, out, err, repr(cfg), repr(client), str(cfg.__dict__),
             *(r.infra_error or "" for r in results), *(repr(r) for r in results)]
    for text in texts:
        assert key not in text
    # Every file the run wrote: the log file and the cache entry of the one answer (with the
    # full request beside it); nothing here was written by the test itself.
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    cache_files = [p for p in files if p.suffix == ".json"]
    assert files == sorted([tmp_path / "run.log", *cache_files]) and len(cache_files) == 1
    assert json.loads(cache_files[0].read_text())["request"]["messages"] == MSG
    assert "***" in (tmp_path / "run.log").read_text()
    for path in files:
        assert key.encode() not in path.read_bytes(), path
