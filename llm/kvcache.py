"""A transformers KV cache kept between forward passes, so that a prompt runs only from where it
differs from the one before (``prefill``), and the token-level helpers around it.

Both sides of the local model use it: ``llm.local`` (generation starts from ``prefill``) and
``llm.scoring`` (answer tags scored on one cache), so neither imports the other for it.
"""

from __future__ import annotations

import copy
import inspect
import threading
from dataclasses import dataclass, field

_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()


def lock_for(model) -> threading.Lock:
    """One lock per model object: forward passes of one model run one at a time."""
    with _locks_guard:
        return _locks.setdefault(id(model), threading.Lock())


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of two token lists."""
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def forward(model, ids: list[int], cache, keep: int):
    """(log-probabilities at the last ``keep`` positions of ``ids`` run on ``cache``, the cache).
    ``cache`` None starts a new one; it is extended in place."""
    import torch

    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"     # renamed in transformers 5
    kwargs = {"logits_to_keep": keep} if "logits_to_keep" in params else {}
    out = model(input_ids=torch.tensor([ids], device=next(model.parameters()).device), use_cache=True,
                **{cache_arg: cache}, **kwargs)
    logp = torch.log_softmax(out.logits[0, -keep:].float(), dim=-1)
    return logp, out["cache"] if "cache" in out else out["past_key_values"]


def crop(cache, length: int) -> None:
    """Cut ``cache`` back to its first ``length`` tokens (in place)."""
    drop = cache.get_seq_length() - length
    if drop > 0:
        cache.crop(-drop)         # a negative count removes that many tokens (transformers 4 and 5)


@dataclass
class KeptCache:
    """A KV cache kept between calls and the tokens it holds, so that prompts of one state run
    their common prefix once (a tournament's rounds, a policy's repeated states). One per model
    (``llm.local.LocalModel`` and ``prm.judge.LocalJudge`` each keep one)."""

    tokens: list[int] = field(default_factory=list)
    cache: object = None


def prefill(model, kept: KeptCache, tokens: list[int]):
    """A KV cache of ``tokens`` for a generation to start from (None for no tokens), computed from
    the longest prefix they share with ``kept``'s, which then holds ``tokens`` for the next call
    (transformers' prompt-reuse pattern: ``generate(..., cache=prefill(model, kept, prompt[:-1]))``
    runs only the prompt's last token before decoding). The caller runs one forward pass of
    ``model`` at a time."""
    shared = common_prefix(kept.tokens, tokens)
    cache = kept.cache if shared else None
    kept.cache, kept.tokens = None, []          # until this prefill ends well
    if cache is not None:
        crop(cache, shared)
    if tokens[shared:]:
        _, cache = forward(model, tokens[shared:], cache, 1)
    kept.cache, kept.tokens = cache, tokens
    return copy.deepcopy(cache) if cache is not None else None
