"""In-process chat completions with a local transformers model, in the OpenAI wire format.

``LocalModel.complete(payload)`` takes the body of a ``/v1/chat/completions`` request and returns
the body of its response (choices, finish reasons, usage counted with the model's tokenizer). The
client (``llm.client``) and the server (``llm.serve``) both call it, so the embedded default
and an HTTP endpoint go through the same parsing, caching and accounting.

Sampling follows the OpenAI parameters: ``temperature`` 0 is greedy, otherwise multinomial
sampling with ``top_p`` and no top-k (transformers would otherwise apply top_k=50); ``seed``
seeds torch's generator for that request only, so the same request gives the same answer, and a
request without one is seeded from OS randomness (a fresh sample every call); either way the
process's global RNG is left as it was. ``n`` returns that many choices; ``max_tokens`` bounds
each choice. ``check_request`` validates a request body with the pydantic model ``ChatRequest``
(``ValueError`` with a one-line message naming the field, an HTTP 400, for a bad one).

A request must fit the model's context (prompt tokens + ``max_tokens`` <= ``context``, as vLLM
checks; without ``max_tokens`` the default shrinks to what is left) and the batch budget
(``n`` sampled sequences x their length <= ``max_batch_tokens``, which bounds the KV cache):
otherwise ``ValueError`` before anything is allocated. ``complete(payload, stop=...)`` calls
``stop()`` before and after every decoding step and ends the generation (``Cancelled``) when it
returns a reason, e.g. the client disconnected. With ``max_active`` > 1, that many generations
take turns on the model one decoding step at a time (each with its own RNG state), so a short
request is not stuck behind a long one; further requests wait for a turn in arrival order.

Prompts are prefilled once: the KV cache of the last prompt is kept, the next prompt runs only
from where it differs (a policy's n samples and a search's repeated states share most of their
tokens), and the ``n`` sampled sequences start from copies of one prefill.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from llm.kvcache import KeptCache, common_prefix, prefill

DEFAULT_MAX_TOKENS = 256
MAX_N = 128                  # OpenAI's limit on choices per request
DEFAULT_MAX_BATCH_TOKENS = 65536   # n x (prompt + max_tokens): ~3 GB of KV cache for SmolLM2-135M

_loaded: dict[Path, "LocalModel"] = {}
_load_lock = threading.Lock()


def load_local_model(path: str | Path | None = None) -> "LocalModel":
    """The model at ``path`` (default: the embedded SmolLM2), loaded once per process."""
    if path is None:
        from llm.embedded import default_model_dir

        path = default_model_dir()
    path = Path(path).resolve()
    with _load_lock:
        if path not in _loaded:
            _loaded[path] = LocalModel(path)
        return _loaded[path]


def _text_of(content) -> str:
    """Message content as text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise ValueError(f"unsupported message content of type {type(content).__name__}")


class _Message(BaseModel):
    """One chat message; its content (a string or OpenAI content parts) is kept as text."""

    model_config = ConfigDict(extra="ignore", strict=True)

    role: str
    content: Any

    @field_validator("content", mode="after")
    @classmethod
    def _as_text(cls, content) -> str:
        return _text_of(content)


class ChatRequest(BaseModel):
    """The sampling fields of a ``/v1/chat/completions`` body (others, like ``model`` or ``stop``,
    are ignored). Strict types: ``"2"`` is not an integer nor ``true`` a number; floats must be
    finite; ranges as OpenAI's. ``max_tokens`` is checked against ``max_tokens_cap`` given as
    validation context."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    messages: list[_Message] = Field(min_length=1)
    stream: bool | None = None
    n: int | None = Field(None, ge=1, le=MAX_N)
    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=-2**63, le=2**64 - 1)

    @model_validator(mode="after")
    def _served(self, info: ValidationInfo) -> "ChatRequest":
        if self.stream:
            raise ValueError("streaming is not supported by this server")
        cap = (info.context or {}).get("max_tokens_cap")
        key = "max_tokens" if self.max_tokens is not None else "max_completion_tokens"
        value = getattr(self, key)
        if cap is not None and value is not None and value > cap:
            raise ValueError(f"'{key}' must be in [1, {cap}], not {value!r}")
        return self


def _one_line(error: ValidationError) -> str:
    """The first problem of a refused request as one line naming the field (the 400's message)."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    text = first["msg"].removeprefix("Value error, ")
    if not where:
        return text
    shown = "" if first["type"] == "missing" else f" (got {first['input']!r:.40})"
    return f"'{where}': {text}{shown}"


def check_request(payload, max_tokens_cap: int | None = None) -> dict:
    """The sampling request in a chat-completions body, validated (:class:`ChatRequest`):
    ``messages`` (content as text), ``n``, ``temperature``, ``top_p``, ``max_tokens`` (at most
    ``max_tokens_cap`` when given), ``seed``. Raises ``ValueError`` (an HTTP 400) for any field of
    the wrong type, out of range or not finite."""
    if not isinstance(payload, dict):
        raise ValueError("request body must be a JSON object")
    try:
        request = ChatRequest.model_validate(payload, context={"max_tokens_cap": max_tokens_cap})
    except ValidationError as e:
        raise ValueError(_one_line(e)) from None
    max_tokens = request.max_tokens if request.max_tokens is not None else request.max_completion_tokens
    default_max_tokens = DEFAULT_MAX_TOKENS if max_tokens_cap is None else min(DEFAULT_MAX_TOKENS, max_tokens_cap)
    return {"messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "n": 1 if request.n is None else request.n,
            "temperature": 1.0 if request.temperature is None else request.temperature,    # OpenAI's default
            "top_p": request.top_p or 1.0,
            "max_tokens": default_max_tokens if max_tokens is None else max_tokens,
            "seed": request.seed}


class Cancelled(Exception):
    """A generation ended by its ``stop`` callable before it finished; ``reason`` is what
    ``stop`` returned (e.g. ``"disconnected"``, ``"time_limit"``)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Turn:
    def __init__(self, rng_state):
        self.rng_state = rng_state     # this generation's torch RNG state while another one runs


class _Turns:
    """Who may run the model now. Generations queue in arrival order; the first ``max_active``
    are admitted and take turns, one decoding step each (``pass_turn``); only the head of the
    queue runs. The head's RNG state is the process's global one; a generation that passes its
    turn keeps its own, and the process's state from before the model got busy comes back when
    it is idle again."""

    def __init__(self, max_active: int = 1):
        if max_active < 1:
            raise ValueError("max_active must be >= 1")
        self.max_active = max_active
        self._queue: deque[_Turn] = deque()
        self._cond = threading.Condition()
        self._idle_rng = None

    def _wait_for_head(self, turn: _Turn, stop: Callable[[], str | None] | None) -> str | None:
        """Wait (holding the condition) until ``turn`` heads the queue; ``stop``'s reason if it
        fires first (``turn`` has then left the queue)."""
        import torch

        while self._queue[0] is not turn:
            reason = stop() if stop else None
            if reason:
                self._leave(turn)
                return reason
            self._cond.wait(0.2)
        torch.random.set_rng_state(turn.rng_state)
        return None

    def enter(self, seed: int, stop: Callable[[], str | None] | None = None) -> _Turn:
        """Queue a generation seeded with ``seed`` and wait for its first turn (``Cancelled``
        when ``stop`` fires first)."""
        import torch

        gen = torch.Generator()
        gen.manual_seed(seed)
        turn = _Turn(gen.get_state())
        with self._cond:
            if not self._queue:
                self._idle_rng = torch.random.get_rng_state()
            self._queue.append(turn)
            reason = self._wait_for_head(turn, stop)
        if reason:
            raise Cancelled(reason)
        return turn

    def pass_turn(self, turn: _Turn, stop: Callable[[], str | None] | None = None) -> str | None:
        """Let the next admitted generation run one step, then wait for this one's turn again;
        ``stop``'s reason if it fires meanwhile (``turn`` has then left the queue)."""
        import torch

        with self._cond:
            if self.max_active < 2 or len(self._queue) < 2 or self._queue[0] is not turn:
                return None
            turn.rng_state = torch.random.get_rng_state()
            self._queue.popleft()
            self._queue.insert(min(self.max_active, len(self._queue) + 1) - 1, turn)
            self._cond.notify_all()
            return self._wait_for_head(turn, stop)

    def _leave(self, turn: _Turn) -> None:
        import torch

        if turn not in self._queue:
            return
        was_head = self._queue[0] is turn
        self._queue.remove(turn)
        if not self._queue and was_head:
            torch.random.set_rng_state(self._idle_rng)
        self._cond.notify_all()

    def leave(self, turn: _Turn) -> None:
        with self._cond:
            self._leave(turn)


class LocalModel:
    """A transformers causal LM and its tokenizer. Generations take turns on the model (see
    ``max_active``); ``steps`` counts decoding steps run (all requests), ``prefilled`` the prompt
    tokens that went through the model (a prefix shared with the previous prompt runs once)."""

    def __init__(self, path: Path, max_active: int = 1, max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not (path / "config.json").exists():
            raise FileNotFoundError(f"no transformers model at {path} (run `make setup` for the embedded one)")
        self.path = path
        self.name = path.name
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        eos = self.model.generation_config.eos_token_id
        eos = self.tokenizer.eos_token_id if eos is None else eos
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.context = int(getattr(self.model.config, "max_position_embeddings", None) or 2048)
        self.max_batch_tokens = max_batch_tokens
        self.steps = 0
        self.prefilled = 0          # prompt tokens run through the model (those reused from the kept cache are not)
        # The last prompt's KV cache (llm.kvcache.KeptCache): the next request's common prefix
        # reuses it. At most one context of keys and values (~370 MB for SmolLM2-135M's 8,192).
        self._kept = KeptCache()
        # generate() and the global RNG are not safe to share between threads: one runs at a time.
        self._turns = _Turns(max_active)

    @property
    def max_active(self) -> int:
        return self._turns.max_active

    @max_active.setter
    def max_active(self, value: int) -> None:
        if value < 1:
            raise ValueError("max_active must be >= 1")
        self._turns.max_active = value

    def _prepare(self, payload: dict, max_tokens_cap: int | None = None) -> tuple[dict, dict]:
        """(the checked request, the tokenized prompt); ``ValueError`` for a request that does
        not fit the context or the batch budget. Nothing model-sized is allocated here."""
        request = check_request(payload, max_tokens_cap)
        inputs = self.tokenizer.apply_chat_template(request["messages"], add_generation_prompt=True,
                                                    return_tensors="pt", return_dict=True)
        prompt_len = inputs["input_ids"].shape[1]
        explicit = payload.get("max_tokens") is not None or payload.get("max_completion_tokens") is not None
        if not explicit:       # as vLLM: without max_tokens, the default shrinks to what is left
            request["max_tokens"] = max(1, min(request["max_tokens"], self.context - prompt_len))
        if prompt_len >= self.context:
            raise ValueError(f"This model's maximum context length is {self.context} tokens. However, your "
                             f"request has {prompt_len} input tokens. Please reduce the length of the input messages.")
        if prompt_len + request["max_tokens"] > self.context:
            raise ValueError(f"This model's maximum context length is {self.context} tokens. However, you "
                             f"requested {prompt_len + request['max_tokens']} tokens ({prompt_len} in the "
                             f"messages, {request['max_tokens']} in the completion). Please reduce the length "
                             "of the messages or completion.")
        sequences = 1 if request["temperature"] == 0.0 else request["n"]
        if sequences * (prompt_len + request["max_tokens"]) > self.max_batch_tokens:
            raise ValueError(f"n={sequences} sequences of {prompt_len} + {request['max_tokens']} tokens exceed this "
                             f"server's batch budget of {self.max_batch_tokens} tokens; lower n or max_tokens")
        return request, inputs

    def _prefill(self, tokens: list[int]):
        """``llm.kvcache.prefill`` on the kept cache, run by the generation whose turn it is."""
        self.prefilled += len(tokens) - common_prefix(self._kept.tokens, tokens)
        return prefill(self.model, self._kept, tokens)

    def check(self, payload: dict, max_tokens_cap: int | None = None) -> None:
        """Raise ``ValueError`` if ``complete`` would refuse ``payload`` (cheap: tokenizes only)."""
        self._prepare(payload, max_tokens_cap)

    def complete(self, payload: dict, stop: Callable[[], str | None] | None = None) -> dict:
        """Answer one chat-completions request body with a chat-completions response body.
        ``stop()`` returning a reason ends the generation with ``Cancelled(reason)``."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        request, inputs = self._prepare(payload)
        n, temperature = request["n"], request["temperature"]
        top_p, max_tokens, seed = request["top_p"], request["max_tokens"], request["seed"]
        prompt_len = inputs["input_ids"].shape[1]
        greedy = temperature == 0.0
        gen = dict(max_new_tokens=max_tokens, pad_token_id=self.tokenizer.pad_token_id or min(self.eos_ids))
        if greedy:
            # Greedy choices are identical: decode once and repeat, as an OpenAI server would answer.
            gen.update(do_sample=False, num_return_sequences=1)
        else:
            gen.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0, num_return_sequences=n)
        turns, model = self._turns, self
        stopped: list[str] = []

        class _StopOrPass(StoppingCriteria):
            """After each decoding step: end the generation if ``stop`` says so, else let the
            other admitted generations run a step."""

            def __call__(self, input_ids, scores, **kwargs):
                model.steps += 1
                reason = (stop() if stop else None) or turns.pass_turn(turn, stop)
                if reason:
                    stopped.append(reason)
                return torch.full((input_ids.shape[0],), bool(reason), dtype=torch.bool)

        # Sampling draws from torch's global generator, so each generation carries its own state,
        # seeded with the request's seed (same request, same answer) or, unseeded, from OS
        # randomness; the process's global state is put back when the model is idle.
        turn = turns.enter(seed if seed is not None else secrets.randbits(63), stop)
        try:
            with torch.inference_mode():
                # The prompt up to its last token runs on the kept KV cache of the previous one
                # (only what differs goes through the model); the n sampled sequences start from
                # copies of that one cache instead of n prefills of the prompt.
                cache = self._prefill(inputs["input_ids"][0].tolist()[:-1])
                rows = gen.pop("num_return_sequences")
                if cache is not None and rows > 1:
                    cache.batch_repeat_interleave(rows)
                out = self.model.generate(input_ids=inputs["input_ids"].repeat(rows, 1),
                                          attention_mask=inputs["attention_mask"].repeat(rows, 1),
                                          cache=cache, **gen,
                                          stopping_criteria=StoppingCriteriaList([_StopOrPass()]))
        finally:
            turns.leave(turn)
        if stopped:
            raise Cancelled(stopped[0])

        choices, completion_tokens = [], 0
        for row in out[:, prompt_len:].tolist():
            end = next((i for i, t in enumerate(row) if t in self.eos_ids), None)
            kept = row if end is None else row[:end]
            completion_tokens += len(kept) + (end is not None)   # the stop token is generated too
            choices.append({"message": {"role": "assistant",
                                        "content": self.tokenizer.decode(kept, skip_special_tokens=True)},
                            "finish_reason": "length" if end is None else "stop"})
        if greedy:
            choices, completion_tokens = choices * n, completion_tokens * n
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
                "created": int(time.time()), "model": self.name,
                "choices": [{"index": i, **c} for i, c in enumerate(choices)],
                "usage": {"prompt_tokens": prompt_len, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_len + completion_tokens}}
