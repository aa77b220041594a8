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
each choice. ``check_request`` validates a request body (``ValueError`` for a bad one).
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from pathlib import Path

DEFAULT_MAX_TOKENS = 256
MAX_N = 128                  # OpenAI's limit on choices per request

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


def _check_messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    out = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError("each message needs 'role' and 'content'")
        if not isinstance(m["role"], str):
            raise ValueError("a message's 'role' must be a string")
        out.append({"role": m["role"], "content": _text_of(m["content"])})
    return out


def _number(payload: dict, name: str, default, kind=float, low=None, high=None):
    """``payload[name]`` (``default`` when absent or null) checked for type and range."""
    value = payload.get(name)
    if value is None:
        return default
    ok_type = isinstance(value, int) if kind is int else isinstance(value, (int, float))
    if not ok_type or isinstance(value, bool):
        raise ValueError(f"'{name}' must be {'an integer' if kind is int else 'a number'}, not {value!r:.40}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"'{name}' must be in [{low}, {'inf' if high is None else high}], not {value!r}")
    return kind(value)


def check_request(payload) -> dict:
    """The sampling request in a chat-completions body, validated: ``messages`` (content as
    text), ``n``, ``temperature``, ``top_p``, ``max_tokens``, ``seed``. Raises ``ValueError``
    (an HTTP 400) for any field of the wrong type or out of range."""
    if not isinstance(payload, dict):
        raise ValueError("request body must be a JSON object")
    if not isinstance(payload.get("stream", False), (bool, type(None))):
        raise ValueError("'stream' must be a boolean")
    if payload.get("stream"):
        raise ValueError("streaming is not supported by this server")
    max_tokens = payload.get("max_tokens")
    key = "max_tokens" if max_tokens is not None else "max_completion_tokens"
    return {"messages": _check_messages(payload.get("messages")),
            "n": _number(payload, "n", 1, int, 1, MAX_N),
            "temperature": _number(payload, "temperature", 1.0, float, 0.0),   # OpenAI's default
            "top_p": _number(payload, "top_p", 1.0, float, 0.0, 1.0) or 1.0,
            "max_tokens": _number(payload, key, DEFAULT_MAX_TOKENS, int, 1),
            "seed": _number(payload, "seed", None, int, -2**63, 2**64 - 1)}


class LocalModel:
    """A transformers causal LM and its tokenizer, answering one request at a time."""

    def __init__(self, path: Path):
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
        # generate() and the global RNG are not safe to share between threads.
        self._lock = threading.Lock()

    def count_tokens(self, messages: list[dict]) -> int:
        """Prompt tokens of ``messages`` after the chat template (what ``usage`` reports)."""
        ids = self.tokenizer.apply_chat_template(_check_messages(messages), add_generation_prompt=True,
                                                 return_dict=True)["input_ids"]
        return len(ids)

    def complete(self, payload: dict) -> dict:
        """Answer one chat-completions request body with a chat-completions response body."""
        import torch

        request = check_request(payload)
        messages, n, temperature = request["messages"], request["n"], request["temperature"]
        top_p, max_tokens, seed = request["top_p"], request["max_tokens"], request["seed"]

        inputs = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                    return_tensors="pt", return_dict=True)
        prompt_len = inputs["input_ids"].shape[1]
        greedy = temperature == 0.0
        gen = dict(max_new_tokens=max_tokens, pad_token_id=self.tokenizer.pad_token_id or min(self.eos_ids))
        if greedy:
            # Greedy choices are identical: decode once and repeat, as an OpenAI server would answer.
            gen.update(do_sample=False, num_return_sequences=1)
        else:
            gen.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0, num_return_sequences=n)
        # Sampling draws from torch's global generator, so seed it inside a fork that restores it:
        # with the request's seed (same request, same answer) or, unseeded, from OS randomness
        # (restoring the fork would otherwise replay one sample forever).
        with self._lock, torch.inference_mode(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed if seed is not None else secrets.randbits(63))
            out = self.model.generate(**inputs, **gen)

        choices, completion_tokens = [], 0
        for row in out[:, prompt_len:].tolist():
            stop = next((i for i, t in enumerate(row) if t in self.eos_ids), None)
            kept = row if stop is None else row[:stop]
            completion_tokens += len(kept) + (stop is not None)   # the stop token is generated too
            choices.append({"message": {"role": "assistant",
                                        "content": self.tokenizer.decode(kept, skip_special_tokens=True)},
                            "finish_reason": "length" if stop is None else "stop"})
        if greedy:
            choices, completion_tokens = choices * n, completion_tokens * n
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
                "created": int(time.time()), "model": self.name,
                "choices": [{"index": i, **c} for i, c in enumerate(choices)],
                "usage": {"prompt_tokens": prompt_len, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_len + completion_tokens}}
