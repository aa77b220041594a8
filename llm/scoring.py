"""Verdicts by scoring: which answer tag a local model finds likelier after a pairwise prompt.

    from llm.scoring import score_answers
    s = score_answers(model, tokenizer, messages)            # TagScore(logprob_1, logprob_2)
    s.verdict, s.margin, s.text                              # 1 | 2, logprob_1 - logprob_2, the tag

For a transformers causal LM and its tokenizer: the prompt is rendered with the tokenizer's chat
template (``add_generation_prompt=True``), optionally followed by a ``rationale`` the model
generated, and the two answers ``<Answer>Response 1</Answer>`` and ``<Answer>Response 2</Answer>``
(``data.judgment.ANSWER_TAG``) are scored as continuations: ``log p(tag | prompt)`` summed over
the tag's tokens. The tokens both tagged sequences share (the prompt, the rationale and
``<Answer>Response ``) go through the model once, with its KV cache kept; the two short tails
(``1</Answer>`` / ``2</Answer>``) are then scored on copies of that cache. So a verdict costs one
forward pass over the prompt, never a generation, and always parses. The likelier tag is the
verdict; a tie (only seen with degenerate models) goes to Response 1 and is flagged.

``score_both_orders`` scores the prompt as given and with the two responses swapped and takes
``margin(given) - margin(swapped)``: a constant pull toward one position (measured: Qwen2.5-Coder
-0.5B picks Response 1 on every one of 16 scored verdicts) cancels, at two forward passes a verdict.

This is the local models' second way to a verdict besides generating a judgment
(``prm.judge.LocalJudge(mode="score")``, ``teacher.verify`` with a local teacher); an endpoint
only generates. Scoring does not write the judgment's sections: what a caller keeps as text is
its choice (``TagScore.text`` is the bare answer).
"""

from __future__ import annotations

import copy
import inspect
import threading
from dataclasses import dataclass

from data.judgment import ANSWER_TAG, swap_responses

_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_for(model) -> threading.Lock:
    """One lock per model object: forward passes of one model run one at a time."""
    with _locks_guard:
        return _locks.setdefault(id(model), threading.Lock())


@dataclass(frozen=True, slots=True)
class TagScore:
    """The log-likelihoods of the two answer tags after a prompt (and rationale)."""

    logprob_1: float
    logprob_2: float
    prompt_tokens: int = 0

    @property
    def verdict(self) -> int:
        return 1 if self.logprob_1 >= self.logprob_2 else 2

    @property
    def margin(self) -> float:
        """``logprob_1 - logprob_2`` (> 0 prefers Response 1)."""
        return self.logprob_1 - self.logprob_2

    @property
    def tie(self) -> bool:
        return self.logprob_1 == self.logprob_2

    @property
    def text(self) -> str:
        """The bare answer for the verdict (a valid judgment for ``parse_verdict``)."""
        return ANSWER_TAG.format(self.verdict)


def prompt_text(tokenizer, messages: list[dict], rationale: str = "") -> str:
    """The chat-templated prompt with the assistant turn opened, then ``rationale``."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return text + rationale


def _encode(tokenizer, text: str) -> list[int]:
    # The chat template already holds any BOS token: add no special tokens again.
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def tag_token_ids(tokenizer, prefix: str) -> tuple[list[int], list[int], list[int]]:
    """(shared tokens, tail of tag 1, tail of tag 2) for ``prefix`` + each answer tag."""
    a = _encode(tokenizer, prefix + ANSWER_TAG.format(1))
    b = _encode(tokenizer, prefix + ANSWER_TAG.format(2))
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    if k == len(a) or k == len(b):
        raise ValueError("the tokenizer does not tell the two answer tags apart")
    return a[:k], a[k:], b[k:]


def score_answers(model, tokenizer, messages: list[dict], rationale: str = "") -> TagScore:
    """Score both answer tags after ``messages`` (and ``rationale``); see the module doc."""
    import torch

    shared, tail_1, tail_2 = tag_token_ids(tokenizer, prompt_text(tokenizer, messages, rationale))
    device = next(model.parameters()).device
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"     # renamed in transformers 5
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}  # the prompt's last logits only
    with _lock_for(model), torch.inference_mode():
        out = model(input_ids=torch.tensor([shared], device=device), use_cache=True, **keep)
        shared_cache = out["cache"] if "cache" in out else out["past_key_values"]
        last = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        scores = []
        for tail in (tail_1, tail_2):
            lp = float(last[tail[0]])
            if len(tail) > 1:               # the rest of the tag, on a copy of the shared cache
                nxt = model(input_ids=torch.tensor([tail[:-1]], device=device), use_cache=True,
                            **{cache_arg: copy.deepcopy(shared_cache)})
                logp = torch.log_softmax(nxt.logits[0].float(), dim=-1)
                lp += float(sum(logp[i, t] for i, t in enumerate(tail[1:])))
            scores.append(lp)
    return TagScore(scores[0], scores[1], len(shared))


def rationale_of(text: str) -> str:
    """A generated judgment cut before its first answer tag (what scoring may follow)."""
    i = text.find("<Answer>")
    return text if i < 0 else text[:i]


@dataclass(frozen=True, slots=True)
class BothOrdersScore:
    """Tag scores of a prompt as given and with its two responses swapped. Small models pull
    hard toward one position; ``margin_given - margin_swapped`` is the preference for the response
    shown first with a constant pull cancelled, so the verdict names the same *response* whichever
    order it is shown in (no position bias by construction)."""

    given: TagScore
    swapped: TagScore

    @property
    def margin(self) -> float:
        """> 0 prefers the response at position 1 of the prompt as given."""
        return self.given.margin - self.swapped.margin

    @property
    def verdict(self) -> int:
        return 1 if self.margin >= 0 else 2

    @property
    def text(self) -> str:
        return ANSWER_TAG.format(self.verdict)

    @property
    def prompt_tokens(self) -> int:
        return self.given.prompt_tokens + self.swapped.prompt_tokens


def score_both_orders(model, tokenizer, messages: list[dict], rationale: str = "") -> BothOrdersScore:
    """``score_answers`` on the prompt as given and with Response 1 and 2 swapped (two forward
    passes); ``ValueError`` when the prompt lacks the two response blocks."""
    swapped = swap_responses(messages)
    if swapped is None:
        raise ValueError("the prompt has no [The Begin of Response 1/2] blocks to swap")
    return BothOrdersScore(score_answers(model, tokenizer, messages, rationale),
                           score_answers(model, tokenizer, swapped, rationale))
