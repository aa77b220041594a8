"""Verdicts by scoring: which answer tag a local model finds likelier after a pairwise prompt.

    from llm.scoring import score
    s = score(model, tokenizer, messages, "score")           # TagScore(logprob_1, logprob_2)
    s.verdict, s.margin, s.text                              # 1 | 2, logprob_1 - logprob_2, the tag

For a transformers causal LM and its tokenizer: the prompt is rendered with the tokenizer's chat
template (``add_generation_prompt=True``), optionally followed by a ``rationale`` the model
generated, and the two answers ``<Answer>Response 1</Answer>`` and ``<Answer>Response 2</Answer>``
(``judgment.format.ANSWER_TAG``) are scored as continuations: ``log p(tag | prompt)`` summed over
the tag's tokens. The tokens both tagged sequences share (the prompt, the rationale and
``<Answer>Response ``) go through the model once, with its KV cache kept; the two short tails
(``1</Answer>`` / ``2</Answer>``) continue from it, the cache cut back to the shared tokens between
them. So a verdict costs one forward pass over the prompt, never a generation, and always parses.
The likelier tag is the verdict; a tie (only seen with degenerate models) goes to Response 1 and
is flagged.

Mode ``score-both`` scores the prompt as given and with the two responses swapped and takes
``margin(given) - margin(swapped)``: a constant pull toward one position (measured: Qwen2.5-Coder
-0.5B picks Response 1 on every one of 16 scored verdicts) cancels.

**One KV cache for many prompts** (``score_many``, ``tag_logprobs``): the token sequences to score
run in sorted order on one cache, each cut back to what it has in common with the one before. The
two orders of a prompt share everything before Response 1's action (the instructions, the intent,
the AXTree, the trajectory, the URLs), so the swapped order runs only its responses and the output
instructions; the prompts of one state (a tournament round's matches, ``prm.judge.LocalJudge``)
also share their common prefix (at least the system prompt and the intent; all of it up to the
responses when their AXTrees are cut alike). The scores equal separate full passes up to float
rounding (``tests/llm/test_scoring.py``).

This is the local models' second way to a verdict besides generating a judgment
(``prm.judge.LocalJudge(mode="score")``, ``teacher.verify`` with a local teacher); an endpoint
only generates. Scoring does not write the judgment's sections: what a caller keeps as text is
its choice (``TagScore.text`` is the bare answer).

``cached_score(model_dir, messages, mode, cache)`` is the cached form ``teacher.verify`` uses: the
scores go into the LLM disk cache (``llm.cache``) under a hash of the model, the prompt and the
mode, so a rerun finds every verdict there and neither loads the model nor runs a forward pass,
as a generated answer is served from the same cache. The model in the key is
``local_model_id(folder)``: the folder's name and ``model_fingerprint`` (its config, tokenizer
and weight files' names, sizes and modification times), so a folder trained again, or an adapter
beside its base, never gets another model's verdicts.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from judgment.format import ANSWER_TAG
from judgment.parse import swap_responses
from llm.cache import ResponseCache, request_key
from llm.kvcache import KeptCache, common_prefix, crop, forward, lock_for

SCORE_MODES = ("score", "score-both")
log = logging.getLogger(__name__)
# What a local model folder's answers depend on besides its weights (*.safetensors, *.bin).
FINGERPRINT_FILES = ("config.json", "generation_config.json", "adapter_config.json", "tokenizer.json",
                     "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "vocab.json",
                     "merges.txt", "tokenizer.model")


def model_fingerprint(model_dir: str | Path) -> str:
    """Hex SHA-256 over the name, size and modification time (ns) of each config, tokenizer and
    weight file directly in ``model_dir``: what the model answers with, read from the file
    system without reading the weights. Saving the folder again (training, merging) changes it."""
    h = hashlib.sha256()
    for p in sorted(Path(model_dir).resolve().iterdir()):
        if p.name in FINGERPRINT_FILES or p.suffix in (".safetensors", ".bin"):
            st = p.stat()
            h.update(f"{p.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def local_model_id(model_dir: str | Path) -> str:
    """``<folder name>@<fingerprint[:16]>``: a local model as the LLM cache's keys name it."""
    return f"{Path(model_dir).resolve().name}@{model_fingerprint(model_dir)[:16]}"

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
    k = common_prefix(a, b)
    if k == len(a) or k == len(b):
        raise ValueError("the tokenizer does not tell the two answer tags apart")
    return a[:k], a[k:], b[k:]


def _tail_logprob(logp, tail: list[int]) -> float:
    """log p(tail) from the log-probabilities at the positions before each of its tokens."""
    return float(sum(logp[i, t] for i, t in enumerate(tail)))


def tag_logprobs(model, sequences: list[tuple[list[int], list[int], list[int]]],
                 kept: KeptCache | None = None) -> list[tuple[float, float]]:
    """(log p(tail 1 | shared), log p(tail 2 | shared)) for each ``(shared, tail_1, tail_2)`` of
    ``tag_token_ids``, computed on one KV cache (``kept``'s, when given, left holding the last
    sequence): the sequences run in sorted order, each one cut back to the tokens it has in common
    with the one before and continued from there (a depth-first walk of the sequences' token trie:
    every common prefix goes through the model once). A sequence runs its shared tokens and tag
    1's tail in one pass, then is cut back to the shared tokens and runs tag 2's tail. Only the
    tags' positions are projected to logits."""
    import torch

    kept = kept if kept is not None else KeptCache()
    scores: list[tuple[float, float]] = [(0.0, 0.0)] * len(sequences)
    with lock_for(model), torch.inference_mode():
        cache, seen = kept.cache, kept.tokens       # the tokens ``cache`` holds
        kept.cache, kept.tokens = None, []          # until this call ends well
        for i in sorted(range(len(sequences)), key=lambda i: sequences[i]):
            shared, tail_1, tail_2 = sequences[i]
            # The last shared token always runs: its logits score the tags' first tokens.
            k = min(common_prefix(seen, shared), len(shared) - 1)
            if cache is not None:
                crop(cache, k)
            logp, cache = forward(model, shared[k:] + tail_1[:-1], cache, len(tail_1))
            lp_1, lp_2 = _tail_logprob(logp, tail_1), float(logp[0, tail_2[0]])
            seen = shared + tail_1[:-1]
            if len(tail_2) > 1:
                crop(cache, len(shared))
                logp, cache = forward(model, tail_2[:-1], cache, len(tail_2) - 1)
                lp_2 += _tail_logprob(logp, tail_2[1:])
                seen = shared + tail_2[:-1]
            scores[i] = (lp_1, lp_2)
        kept.cache, kept.tokens = cache, seen
    return scores


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


def score_many(model, tokenizer, prompts: list[list[dict]], mode: str, rationales: list[str] | None = None,
               kept: KeptCache | None = None) -> list[TagScore] | list[BothOrdersScore]:
    """``score`` of each prompt (after its rationale) in ``mode``, all on one KV cache
    (``tag_logprobs``, ``kept``'s when given): the orders of a prompt, and prompts of one state,
    share their common prefix. ``ValueError`` for another mode, or in ``score-both`` for a prompt
    without the two response blocks."""
    if mode not in SCORE_MODES:
        raise ValueError(f"mode must be one of {SCORE_MODES}, not {mode!r}")
    rationales = rationales or [""] * len(prompts)
    orders = []                                     # (messages, rationale) to score, given then swapped
    for messages, rationale in zip(prompts, rationales, strict=True):
        orders.append((messages, rationale))
        if mode == "score-both":
            swapped = swap_responses(messages)
            if swapped is None:
                raise ValueError("the prompt has no [The Begin of Response 1/2] blocks to swap")
            orders.append((swapped, rationale))
    sequences = [tag_token_ids(tokenizer, prompt_text(tokenizer, m, r)) for m, r in orders]
    scored = tag_logprobs(model, sequences, kept)
    tags = [TagScore(lp_1, lp_2, len(seq[0])) for (lp_1, lp_2), seq in zip(scored, sequences)]
    if mode == "score":
        return tags
    return [BothOrdersScore(tags[i], tags[i + 1]) for i in range(0, len(tags), 2)]


def score(model, tokenizer, messages: list[dict], mode: str, rationale: str = "") -> TagScore | BothOrdersScore:
    """The two answer tags' scores after ``messages`` (and ``rationale``): in ``mode`` 'score' as
    given (``TagScore``), in 'score-both' also with Response 1 and 2 swapped (``BothOrdersScore``;
    one KV cache: the part before the responses runs once; ``ValueError`` when the prompt lacks
    the two response blocks). See the module doc."""
    return score_many(model, tokenizer, [messages], mode, [rationale])[0]


def score_request(model_id: str, messages: list[dict], mode: str, rationale: str = "") -> dict:
    """What a scoring verdict depends on, as the cache's request: the model, the prompt (and
    rationale) and the mode. Nothing is sampled, so there are no sampling parameters."""
    return {"model": model_id, "mode": mode, "rationale": rationale,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages]}


def score_to_dict(s: TagScore | BothOrdersScore) -> dict:
    """The cache's response body for a score (floats round-trip exactly through JSON)."""
    if isinstance(s, BothOrdersScore):
        return {"object": "surfprm.score", "given": asdict(s.given), "swapped": asdict(s.swapped)}
    return {"object": "surfprm.score", "given": asdict(s)}


def _tag_score(d) -> TagScore | None:
    if not isinstance(d, dict) or set(d) != {"logprob_1", "logprob_2", "prompt_tokens"}:
        return None
    lp = (d["logprob_1"], d["logprob_2"])
    tokens = d["prompt_tokens"]
    # a log-probability is a finite number <= 0; a count is a non-negative int
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x <= 0 for x in lp):
        return None
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        return None
    return TagScore(float(lp[0]), float(lp[1]), tokens)


def score_from_dict(body, mode: str) -> TagScore | BothOrdersScore | None:
    """A cached score of ``mode``, or None for an entry of another shape or out of range (a
    hand-edited or foreign entry is a miss, scored afresh)."""
    if not isinstance(body, dict) or body.get("object") != "surfprm.score":
        return None
    given = _tag_score(body.get("given"))
    if mode == "score":
        return given if "swapped" not in body else None
    swapped = _tag_score(body.get("swapped"))
    return BothOrdersScore(given, swapped) if given and swapped else None


def cached_score(model_dir: str | Path, messages: list[dict], mode: str, cache: ResponseCache | None,
                 rationale: str = "") -> tuple[TagScore | BothOrdersScore, bool]:
    """(the score of ``messages`` by the local model at ``model_dir`` in ``mode``, whether it came
    from ``cache``). The key is ``llm.cache.request_key`` of ``score_request`` at the endpoint
    ``local:<folder>`` (as the client keys the model's generations) with the model named by
    ``local_model_id``; on a hit the model is not even loaded. ``cache=None`` scores every time."""
    from llm.local import load_local_model

    if mode not in SCORE_MODES:
        raise ValueError(f"mode must be one of {SCORE_MODES}, not {mode!r}")
    model_dir = Path(model_dir).resolve()
    payload = score_request(local_model_id(model_dir), messages, mode, rationale)
    key = request_key(payload, f"local:{model_dir}")
    if cache is not None:
        hit = score_from_dict(cache.get(key), mode)
        if hit is not None:
            return hit, True
    local = load_local_model(model_dir)
    s = score(local.model, local.tokenizer, messages, mode, rationale)
    if cache is not None:
        try:
            cache.put(key, payload, score_to_dict(s))
        except OSError as e:        # a full disk costs a repeated forward pass next run, not this verdict
            log.warning("could not cache a scoring verdict: %s", e)
    return s, False
