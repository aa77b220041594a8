"""Every model call of the project: chat completions, cached, retried and accounted.

    python -m llm.client --prompt "Say hello."                      # embedded SmolLM2, in-process
    python -m llm.client --prompt "Say hello." --base-url http://127.0.0.1:8011/v1 --model SmolLM2-135M-Instruct
    python -m llm.client --prompt "Say hello." --backend openai --model gpt-4o-mini   # key in $OPENAI_API_KEY

Stage code builds one ``LLMClient`` and calls ``achat``/``achat_many`` (async) or ``chat``/
``chat_many`` (sync); ``chat(messages)`` at module level is the one-off form. With no endpoint
configured the embedded model answers in-process (``llm.local``); with ``base_url`` any
OpenAI-compatible server does (OpenAI, vLLM, SGLang, llama.cpp, ``python -m llm.serve``).

The request body is built and the response body checked by pure functions (``build_request``,
``parse_response``); only ``LLMClient._fetch`` touches the network, through the ``openai`` SDK's
``AsyncOpenAI`` on the SDK's aiohttp transport (``openai.DefaultAioHttpClient``, the
``openai[aiohttp]`` extra). The SDK carries the wire (URL, headers, key, JSON, the connection
pool) and reports faults as typed errors with the status and headers; its own retries are off
(``max_retries=0``) because the fault policy is the point of this module: one loop decides what
is retried, honours ``Retry-After``, counts every attempt, and turns whatever still fails into
``ChatResult.infra_error`` -- an outage is never a model answer, so the teacher can never count
it as a disagreement.

Requests go through the SDK's generic ``post`` with the body ``build_request`` made and come back
as the JSON the server sent (``cast_to=object``), not through ``chat.completions.create``: that
re-walks every request through the SDK's TypedDict transform and builds a ``ChatCompletion``
without validating it, which we would only dump back to a dict for ``parse_response`` and the
cache -- 1.8 instead of 1.2 ms of CPU per request, a fifth of the throughput at 64 in flight
(bench/RESULTS.md).

The API key is read from the environment variable named by ``api_key_env`` when a client is
built; it goes into the Authorization header and nowhere else (not the config, the cache key,
the cache files, logs or error messages). With no key set, the header carries the placeholder
``NO_KEY`` (the SDK requires some key; local servers ignore it), masked like a real key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import functools
import json
import logging
import math
import os
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace

from cli.config import Configurable, make_parser
from cli.errors import error_exit
from llm.cache import ResponseCache, request_key
from llm.config import LLMConfig
from llm.cost import UsageTotals, cost_usd

log = logging.getLogger(__name__)

# Answers that say "try again later"; every other 4xx is a configuration error that a retry
# cannot fix (bad key, unknown model, malformed request).
RETRYABLE_STATUS = {408, 409, 429}
SAMPLING_FIELDS = ("temperature", "top_p", "seed", "max_tokens", "n")
# Sent as the key when none is configured: the SDK will not send a request without one, and the
# servers that need no key (vLLM, SGLang, ``llm.serve``) ignore it.
NO_KEY = "surfprm-no-key"
# What ``chat.completions.create`` passes to ``post``: send the key as a Bearer token.
_REQUEST_OPTIONS = {"security": {"bearer_auth": True}}
# A token count above this is no count: refused before it is cached, summed or written (a
# Parquet int64 column, a stats.json total), so one server's 10**30 cannot poison a run.
MAX_TOKEN_COUNT = 2**31 - 1
# The largest response body read. An answer of n=8 choices of 4096 tokens is ~0.3 MB of JSON; a
# server that sends more is broken or hostile, and each body is held in memory and in the cache.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class ChatResult:
    """One request's outcome: the model's answer(s), or an infrastructure failure.

    ``infra_error`` is set when no answer came back (timeouts, refused connections, 5xx or 429
    after every retry, malformed bodies, a rejected request); ``texts`` is then empty. An empty
    string in ``texts`` is an answer, not a failure."""

    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    model: str = ""
    cached: bool = False
    attempts: int = 0            # HTTP requests made for this result (0 when cached)
    infra_error: str | None = None
    key: str = ""                # cache key (request hash)

    @property
    def ok(self) -> bool:
        return self.infra_error is None

    @property
    def text(self) -> str:
        """The first choice ('' for a failure: check ``ok`` first)."""
        return self.texts[0] if self.texts else ""

    def check(self) -> "ChatResult":
        """Raise ``InfraError`` for a failure (for callers that want an exception, e.g. a task
        retried by Prefect); return self otherwise."""
        if self.infra_error is not None:
            raise InfraError(self.infra_error)
        return self


class InfraError(RuntimeError):
    """No answer came back from the model: an outage, not a model's judgment."""


class MalformedResponse(ValueError):
    """A 200 response that is not a chat completion, or one with a choice that holds no answer."""


class ResponseRefused(Exception):
    """A response the client will not read: a body over ``MAX_RESPONSE_BYTES``, a compressed one
    (only ``identity`` is asked for, so no decompression bomb), or a redirect to another origin
    (the prompt would leave the configured endpoint). Not retried: the same server says the same."""


# -- pure request building and response parsing -----------------------------------------------
def build_request(messages: list[dict], config: LLMConfig) -> dict:
    """The JSON body of a ``/chat/completions`` request (no network, no key)."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {role, content}")
    msgs = []
    for m in messages:
        if not isinstance(m, dict) or not {"role", "content"} <= m.keys():
            raise ValueError(f"a message needs 'role' and 'content': {m!r:.80}")
        msgs.append({"role": m["role"], "content": m["content"]})
    body = {"model": config.model_id, "messages": msgs, "temperature": config.temperature,
            "max_tokens": config.max_tokens, "n": config.n}
    if config.top_p is not None:
        body["top_p"] = config.top_p
    if config.seed is not None:
        body["seed"] = config.seed
    return body


def parse_response(body: dict, price: tuple[float, float] = (0.0, 0.0), n: int | None = None) -> ChatResult:
    """A chat-completions response body as a ``ChatResult``.

    Raises ``MalformedResponse`` for anything that is not a chat completion -- whatever its
    shape (choices that are not objects, an ``index`` that is not a distinct integer, content
    that is neither a UTF-8 string nor null, ``usage`` that is not an object of counts up to
    ``MAX_TOKEN_COUNT``) -- and
    never another exception: the client retries it, then reports an infrastructure failure, and
    a cache entry that fails here is a miss.

    A choice whose content is null and that calls no tool is no answer either: the server
    produced nothing for it (we never ask for tools), so it fails like a malformed body, is
    retried, and is never cached -- not read as an empty answer that a rerun would serve again.
    Null content beside tool calls reads as ''.

    With ``n`` (the request's), a body with another number of choices is malformed too: the
    caller would read choice 0 of answers to some other request, or miss answers it paid for."""
    try:
        result = _parse_response(body, price)
    except MalformedResponse:
        raise
    except Exception as e:          # a shape we did not foresee is still a malformed body
        raise MalformedResponse(f"not a chat completion: {type(e).__name__}: {e}") from e
    if n is not None and len(result.texts) != n:
        raise MalformedResponse(f"{len(result.texts)} choices for n={n}")
    return result


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value) -> bool:
    """A str that can be written as UTF-8: JSON's ``\\ud800`` escapes decode to lone surrogates,
    which the cache and Parquet cannot encode."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_response(body, price: tuple[float, float]) -> ChatResult:
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list) or not body["choices"]:
        raise MalformedResponse("response has no 'choices'")
    indexed = []
    for position, choice in enumerate(body["choices"]):
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            raise MalformedResponse("a choice has no 'message'")
        index = choice.get("index", position)
        if not _is_int(index):
            raise MalformedResponse(f"a choice's 'index' is not an integer: {index!r:.40}")
        message = choice["message"]
        content = message.get("content")
        if content is None and not (isinstance(message.get("tool_calls"), list) and message["tool_calls"]):
            raise MalformedResponse(f"choice {index} has null content and no tool calls")
        if content is not None and not _is_text(content):
            raise MalformedResponse(f"a choice's content is not a UTF-8 string: {type(content).__name__}")
        reason = choice.get("finish_reason")
        if reason is not None and not _is_text(reason):
            raise MalformedResponse(f"a choice's finish_reason is not a UTF-8 string: {type(reason).__name__}")
        indexed.append((index, content or "", reason or ""))
    if len({i for i, _, _ in indexed}) != len(indexed):
        raise MalformedResponse("two choices share an 'index'")
    indexed.sort(key=lambda c: c[0])
    usage = body.get("usage")
    usage = {} if usage is None else usage
    if not isinstance(usage, dict):
        raise MalformedResponse(f"'usage' is a {type(usage).__name__}, not an object")
    tokens = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        value = 0 if value is None else value
        if not _is_int(value) or not 0 <= value <= MAX_TOKEN_COUNT:
            shown = f"a {value.bit_length()}-bit number" if _is_int(value) else f"{value!r:.40}"
            raise MalformedResponse(f"usage.{name} is not a count of at most {MAX_TOKEN_COUNT}: {shown}")
        tokens.append(value)
    p_tok, c_tok = tokens
    return ChatResult(texts=[t for _, t, _ in indexed], finish_reasons=[r for _, _, r in indexed],
                      prompt_tokens=p_tok, completion_tokens=c_tok, cost_usd=cost_usd(p_tok, c_tok, price),
                      model=body["model"][:200] if _is_text(body.get("model")) else "")


def retry_after_s(headers) -> float | None:
    """Seconds a server asked us to wait (``retry-after-ms``, ``Retry-After`` seconds or date);
    None for a value that is no wait (``nan`` would sleep forever), so the backoff applies."""
    if headers.get("retry-after-ms"):
        try:
            return _wait(float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return _wait(float(value))
    except ValueError:
        pass
    try:
        return max(email.utils.parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError):
        return None


def _wait(seconds: float) -> float:
    if math.isnan(seconds):
        raise ValueError("not a number of seconds")
    return max(seconds, 0.0)     # inf stays inf: the caller caps it at backoff_max_s


def backoff_s(retry: int, config: LLMConfig, rng: random.Random) -> float:
    """Exponential backoff with jitter: retries of many requests that failed together spread out."""
    return min(config.backoff_max_s, config.backoff_s * 2 ** retry) * rng.uniform(0.5, 1.0)


# -- the client ----------------------------------------------------------------------------------
class LLMClient:
    """Chat completions with a disk cache, bounded concurrency, retries and usage per stage.

    Nothing happens at construction beyond reading the key from the environment: the SDK client
    and its connection pool are opened by the first call (per event loop) and the local model is
    loaded by the first local call. ``usage[stage]`` totals what each stage used.

    A pool belongs to the event loop that opened it and is closed with that loop: by
    ``aclose()`` (``async with client``, the sync ``chat``/``chat_many``), else when
    ``asyncio.run`` (or any runner that shuts down async generators) ends the loop, else, when
    the client is next used from another loop, on its own loop if that still runs elsewhere. A
    pool whose loop was closed without that (a hand-run loop) can no longer be closed through
    it: its sockets close when it is garbage collected."""

    def __init__(self, config: LLMConfig | None = None, **overrides):
        self.config = replace(config or LLMConfig(), **overrides).validate()
        self.usage: dict[str, UsageTotals] = defaultdict(UsageTotals)
        self.requests_sent = 0        # HTTP requests (every attempt) or local generations
        self._cache = None if self.config.no_cache else ResponseCache(self.config.cache_dir)
        self._key = None if self.config.is_local else os.environ.get(self.config.api_key_env) or NO_KEY
        if not self.config.is_local and self._key == NO_KEY:
            log.info("no API key in $%s; requests carry a placeholder key", self.config.api_key_env)
        self._loop = None
        self._sem: asyncio.Semaphore | None = None
        self._openai = None
        self._openai_lifetime = None
        self._rng = random.Random()

    def __repr__(self) -> str:
        return f"LLMClient(endpoint={self.config.endpoint!r}, model={self.config.model!r})"

    def _mask(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _bind_loop(self) -> None:
        # A semaphore and a connection pool belong to one event loop; the sync wrappers run a
        # fresh loop per call, so rebuild both when the loop changes.
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            stale, old_loop = self._openai, self._loop
            self._openai = self._openai_lifetime = None
            if stale is not None and not stale.is_closed() and old_loop.is_running():
                asyncio.run_coroutine_threadsafe(stale.close(), old_loop)   # alive on another thread
            self._loop = loop
            self._sem = asyncio.Semaphore(self.config.concurrency)

    async def _client(self):
        if self._openai is None:
            import httpx2
            import openai

            c = self.config
            # The SDK's aiohttp transport (``openai[aiohttp]``): headers and body leave in one
            # write, and the pool is not rescanned (a socket probe per idle connection) for every
            # request, which cuts the client's CPU per request at 64 in flight by ~40% against
            # httpx's pool (bench/RESULTS.md). As many connections as requests in flight: none is reopened
            # per request. Bodies come uncompressed and capped, and a redirect stays on the
            # endpoint's origin (``_guard_response``).
            http = openai.DefaultAioHttpClient(
                limits=httpx2.Limits(max_connections=c.concurrency, max_keepalive_connections=c.concurrency),
                headers={"Accept-Encoding": "identity"},
                event_hooks={"response": [functools.partial(_guard_response, origin=_origin(httpx2.URL(c.endpoint)))]})
            self._openai = openai.AsyncOpenAI(
                api_key=self._key, base_url=c.endpoint, max_retries=0, http_client=http,
                timeout=openai.Timeout(c.timeout_s, connect=c.connect_timeout_s))
            # The loop's runner closes open async generators before it closes the loop
            # (``asyncio.run`` does): this one then closes the pool on its own loop.
            self._openai_lifetime = _closed_with_loop(self._openai)
            await self._openai_lifetime.__anext__()
        return self._openai

    async def aclose(self) -> None:
        if self._openai is not None:
            await self._openai.close()
            self._openai = self._openai_lifetime = None

    async def __aenter__(self) -> "LLMClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def achat(self, messages: list[dict], *, stage: str = "default", use_cache: bool = True,
                    **sampling) -> ChatResult:
        """One chat completion. ``sampling`` overrides temperature, top_p, seed, max_tokens or n
        for this request (the teacher's fixed seed per attempt)."""
        unknown = set(sampling) - set(SAMPLING_FIELDS)
        if unknown:
            raise TypeError(f"unknown sampling overrides {sorted(unknown)}; allowed: {SAMPLING_FIELDS}")
        self._bind_loop()
        cfg = replace(self.config, **sampling) if sampling else self.config
        if sampling:
            cfg.validate()        # e.g. a seed + attempt past the seed's range: refused before it is sent
        payload = build_request(messages, cfg)
        key = request_key(payload, cfg.endpoint)
        cache = self._cache if use_cache else None
        result = self._from_cache(cache, key, cfg, payload["n"]) if cache is not None else None
        if result is None:
            body, attempts, error = await (self._generate_local(payload) if cfg.is_local else self._fetch(payload))
            if error is not None:
                result = ChatResult(attempts=attempts, infra_error=error, model=payload["model"])
                log.error("LLM call failed: %s", error)
            else:
                result = parse_response(body, cfg.price(), payload["n"])
                result.attempts = attempts
                if cache is not None:
                    self._store(cache, key, payload, body)
        result.key = key
        self.usage[stage].add(result)
        return result

    @staticmethod
    def _store(cache: ResponseCache, key: str, payload: dict, body: dict) -> None:
        # On the event loop: an unsynced write is ~0.4 ms of syscalls into the page cache, less
        # than a hand-off to a thread costs in CPU and loop lag at 64 requests in flight.
        try:
            cache.put(key, payload, body)
        except OSError as e:     # a full disk costs a repeated call on the next run, not this answer
            log.warning("could not cache an LLM response: %s", e)

    @staticmethod
    def _from_cache(cache: ResponseCache, key: str, cfg: LLMConfig, n: int) -> ChatResult | None:
        body = cache.get(key)
        try:
            result = parse_response(body, cfg.price(), n) if body is not None else None
        except MalformedResponse:      # a hand-edited or foreign entry: a miss, answered afresh
            return None
        if result is not None:
            result.cached = True
        return result

    async def achat_many(self, messages_list: list[list[dict]], *, stage: str = "default",
                         use_cache: bool = True, on_result=None, **sampling) -> list[ChatResult]:
        """Many chat completions at up to ``concurrency`` at once, results in input order;
        ``on_result(result)`` is called as each one arrives (a progress bar).

        Twice ``concurrency`` workers take the requests in turn, so a request is prepared (its
        body, key and cache lookup) shortly before a slot frees, not all of them before the
        first answer is read (3,000 small ones are ~0.1 s of CPU, 10,000 teacher prompts ~0.8 s,
        measured on the loaded 2-core machine); the spare workers keep
        the slots full while others wait out a retry's backoff."""
        results: list[ChatResult | None] = [None] * len(messages_list)
        todo = iter(enumerate(messages_list))

        async def worker():
            for i, messages in todo:
                results[i] = await self.achat(messages, stage=stage, use_cache=use_cache, **sampling)
                if on_result is not None:
                    on_result(results[i])
        await asyncio.gather(*(worker() for _ in range(min(len(messages_list), 2 * self.config.concurrency))))
        return results

    def chat(self, messages: list[dict], *, stage: str = "default", use_cache: bool = True,
             **sampling) -> ChatResult:
        """Synchronous ``achat``."""
        return self.chat_many([messages], stage=stage, use_cache=use_cache, **sampling)[0]

    def chat_many(self, messages_list: list[list[dict]], *, stage: str = "default", use_cache: bool = True,
                  on_result=None, **sampling) -> list[ChatResult]:
        """Synchronous ``achat_many`` (works inside a running event loop too, e.g. a notebook)."""
        async def run():
            try:
                return await self.achat_many(messages_list, stage=stage, use_cache=use_cache,
                                             on_result=on_result, **sampling)
            finally:
                await self.aclose()
        return _run_sync(run())

    async def _generate_local(self, payload: dict) -> tuple[dict | None, int, str | None]:
        from llm.local import load_local_model

        try:
            model = await asyncio.to_thread(load_local_model, self.config.local_model_dir())
            async with self._sem:     # --concurrency bounds local generations too
                self.requests_sent += 1
                return await asyncio.to_thread(model.complete, payload), 1, None
        except (ValueError, FileNotFoundError, RuntimeError, MemoryError) as e:
            return None, 1, f"local_error: {type(e).__name__}: {e}"

    def _no_response(self, e: Exception) -> str:
        """``timeout: NAME`` or ``connection_error: NAME: message`` for a request that got no
        response. The aiohttp transport reports every dropped or refused connection as a connect
        timeout (``ConnectTimeout``); it is one only when what failed underneath timed out."""
        import openai

        causes, c = [], e.__cause__
        while c is not None and len(causes) < 8:
            causes.append(c)
            c = c.__cause__
        timed_out = len(causes) < 2 or any(isinstance(x, TimeoutError) for x in causes[1:])
        if isinstance(e, openai.APITimeoutError) and timed_out:
            return f"timeout: {type(causes[0] if causes else e).__name__}"
        root = causes[-1] if causes else e
        return f"connection_error: {type(root).__name__}: {self._mask(str(root))[:200]}"

    async def _fetch(self, payload: dict) -> tuple[dict | None, int, str | None]:
        """Send ``payload`` until a valid answer, a non-retryable status or the retry budget.
        Returns (response body, attempts, error)."""
        import openai

        cfg, client, error = self.config, await self._client(), "no attempt"
        for attempt in range(cfg.max_retries + 1):
            wait = None
            try:
                async with self._sem:     # only the request holds a slot, never the backoff sleep
                    self.requests_sent += 1
                    # the JSON body as sent (a str when it is not JSON, None for null)
                    body = await client.post("/chat/completions", body=payload, cast_to=object,
                                             options=_REQUEST_OPTIONS)
                parse_response(body, n=payload["n"])
                return body, attempt + 1, None
            except openai.APIConnectionError as e:     # APITimeoutError too; the causes say what failed
                error = self._no_response(e)
            except openai.APIStatusError as e:
                status = e.status_code
                if status in RETRYABLE_STATUS or status >= 500:
                    error = f"http_{status}"
                    wait = retry_after_s(e.response.headers)
                else:
                    return None, attempt + 1, f"http_{status}: {self._mask(e.response.text)[:300]}"
            except ValueError as e:      # MalformedResponse, or a body that does not decode
                error = f"malformed_response: {self._mask(str(e))[:200]}"
            except RecursionError:       # JSON nested past the parser's depth
                error = "malformed_response: JSON nested too deeply"
            except ResponseRefused as e:
                return None, attempt + 1, self._mask(str(e))[:300]
            if attempt == cfg.max_retries:
                break
            wait = min(wait, cfg.backoff_max_s) if wait is not None else backoff_s(attempt, cfg, self._rng)
            log.warning("LLM call attempt %d/%d: %s; retrying in %.2fs",
                        attempt + 1, cfg.max_retries + 1, error, wait)
            await asyncio.sleep(wait)
        return None, cfg.max_retries + 1, f"{error} (after {cfg.max_retries + 1} attempts)"


def _origin(url) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or {"http": 80, "https": 443}.get(url.scheme)


async def _guard_response(response, origin: tuple) -> None:
    """An httpx response hook: refuse a redirect to another origin, a compressed body and one
    over ``MAX_RESPONSE_BYTES`` (by its Content-Length, else while it is read). See
    ``ResponseRefused``."""
    if response.has_redirect_location:
        target = response.url.join(response.headers["location"])
        if _origin(target) != origin:
            raise ResponseRefused(f"redirect_refused: http_{response.status_code} to another origin "
                                  f"({target.scheme}://{target.host}) is not followed; set --base-url to the "
                                  "server that answers")
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ResponseRefused(f"response_refused: a {encoding[:20]!r}-encoded body although identity was asked for")
    length = response.headers.get("content-length", "")
    if length.strip().isdigit() and int(length) > MAX_RESPONSE_BYTES:
        raise ResponseRefused(f"response_too_large: {int(length)} bytes (Content-Length) is over the client's "
                              f"limit of {MAX_RESPONSE_BYTES}")
    response.stream = _capped_stream()(response.stream)


@functools.cache
def _capped_stream():
    """The class of a response stream that stops past ``MAX_RESPONSE_BYTES`` (httpx is imported
    with the first request, not with this module)."""
    import httpx2

    class CappedStream(httpx2.AsyncByteStream):
        def __init__(self, inner):
            self.inner = inner

        async def __aiter__(self):
            seen = 0
            async for chunk in self.inner:
                seen += len(chunk)
                if seen > MAX_RESPONSE_BYTES:
                    raise ResponseRefused(f"response_too_large: over the client's limit of {MAX_RESPONSE_BYTES} "
                                          "bytes")
                yield chunk

        async def aclose(self):
            await self.inner.aclose()

    return CappedStream


async def _closed_with_loop(client):
    try:
        yield
    finally:
        await client.close()


def _run_sync(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Already inside an event loop (a notebook, an async flow): run on a private loop in a thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def chat(messages: list[dict], config: LLMConfig | None = None, **overrides) -> ChatResult:
    """One chat completion, synchronously: ``chat([{"role": "user", "content": "Hi"}])``.

    ``overrides`` are ``LLMConfig`` fields (``temperature=0.2, seed=3, base_url=...``). Stages
    that make many calls build one ``LLMClient`` instead, for its connection pool and totals."""
    return LLMClient(config, **overrides).chat(messages)


@dataclass
class ChatCommand(Configurable):
    """The messages ``python -m llm.client`` sends (where and how: ``LLMConfig``)."""

    ARG_GROUP = "messages"

    prompt: str = field(metadata={"help": "user message"})
    system: str | None = field(default=None, metadata={"help": "optional system message"})


def build_parser():
    ap = make_parser("python -m llm.client", __doc__)
    ChatCommand.add_args(ap)
    LLMConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = ChatCommand.from_args(args)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        client = LLMClient(LLMConfig.from_args(args))
    except ValueError as e:
        return error_exit(e)
    messages = ([{"role": "system", "content": cmd.system}] if cmd.system else []) + \
        [{"role": "user", "content": cmd.prompt}]
    result = client.chat(messages, stage="cli")
    if not result.ok:
        print(f"infrastructure failure: {result.infra_error}", file=sys.stderr)
        return 1
    for i, text in enumerate(result.texts):
        print(f"[{i}] {text}")
    print(json.dumps({"endpoint": client.config.endpoint, "model": result.model, **client.usage["cli"].as_dict()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
