"""The comparative PRM as a judge: ``f(s_t, a1, a2) -> (judgment, verdict)``.

    from prm.judge import make_judge
    judge = make_judge(LLMConfig(model="runs/demo/prm/cpu-demo", max_tokens=64))    # local folder
    judge = make_judge(LLMConfig(base_url="http://gpu:8000/v1", model="my-prm"))    # any OpenAI-compatible URL
    j = judge.judge(state, "click('12')", "click('40')")      # Judgment(text, verdict 1|2|None)

A judge takes ready chat prompts (``judge_prompts``: a benchmark's own prompts, used as given) or a
state and two raw actions (``judge``/``judge_pairs``: rendered in the comparative-judgment format,
``judgment.format.render_pair``, Action-Only). The verdict is read by ``judgment.parse.parse_verdict``:
a judgment is valid when it ends in exactly one ``<Answer>Response N</Answer>``; an invalid one
is ``truncated`` when the generation hit the length limit, else unparsed. A local
transformers folder loads where ``device`` says, in ``dtype`` (``placement``: ``auto`` is cuda
in bfloat16 when a GPU is visible, else the CPU in float32) and is judged in batches of
left-padded prompts with greedy decoding, or, with
``LocalJudge(mode="score")``, by the likelihoods of the two answer tags after the prompt
(``llm.scoring``: one forward pass, always a verdict; ``Judgment.mode`` and ``margin`` say so),
its answers kept in the LLM disk cache (``make_judge``: ``--cache-dir``/``--no-cache``), so a rerun
loads no model; an endpoint goes through ``llm.client`` (cached, retried, ``concurrency`` requests
in flight). An outage is
not a verdict: it is kept apart as ``infra_error``.

**Both orders** (``both_orders=True``): each pair is judged as given and with Response 1 and
Response 2 swapped. Rule: a pair counts as correct only if both orders pick the same action (the
expected one); when both verdicts name the same *position* the judge is position-biased on that
pair (counted as ``position_biased``, and wrong). ``position_stats`` reports how often a judge
names position 1 against how often position 1 is right, so position bias is measured even when
judging in one order.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from data.state import State
from judgment.format import DEFAULT_FORMAT, JudgmentFormat, render_pair
from judgment.parse import parse_verdict, swap_responses
from llm import LLMClient, LLMConfig
from llm.kvcache import KeptCache

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Judgment:
    """One judgment: the model's text and the response it prefers (1, 2 or None = no valid answer)."""

    text: str
    verdict: int | None
    infra_error: str | None = None
    truncated: bool = False             # generation hit the length limit before a valid answer
    mode: str = "generate"              # what produced the verdict: 'generate', 'score' or 'rationale'
    margin: float | None = None         # scoring: log p(Response 1 tag) - log p(Response 2 tag)

    @property
    def outcome(self) -> str:
        """'verdict', 'truncated', 'unparsed' or 'infra_error'."""
        if self.infra_error:
            return "infra_error"
        if self.verdict is not None:
            return "verdict"
        return "truncated" if self.truncated else "unparsed"


def read_judgment(text: str, finish_reason: str) -> Judgment:
    """A model's answer as a judgment: valid when it ends in one answer tag (``parse_verdict``);
    otherwise truncated when the generation stopped at the length limit, else unparsed."""
    verdict = parse_verdict(text)
    return Judgment(text, verdict, truncated=verdict is None and finish_reason == "length")


JUDGE_MODES = ("generate", "score", "score-both", "rationale")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16")
GENERATE_MAX_TOKENS = 1024      # a judge that generates gets this many tokens unless told: a full judgment fits


def placement(device: str = "auto", dtype: str = "auto") -> tuple[str, str]:
    """(device, dtype) a local judge loads with: ``auto`` device is cuda when torch sees a GPU,
    else cpu; ``auto`` dtype is bfloat16 on cuda, float32 on the CPU. ValueError for cuda
    without a GPU, or an unknown name."""
    if device not in DEVICES or dtype not in DTYPES:
        raise ValueError(f"device must be one of {DEVICES} and dtype one of {DTYPES}, not {device!r}, {dtype!r}")
    import torch

    gpu = torch.cuda.is_available()
    if device == "cuda" and not gpu:
        raise ValueError("device cuda: torch sees no CUDA GPU here (use auto or cpu)")
    device = ("cuda" if gpu else "cpu") if device == "auto" else device
    dtype = ("bfloat16" if device == "cuda" else "float32") if dtype == "auto" else dtype
    return device, dtype


def generate_max_tokens(config: LLMConfig, mode: str, given: bool) -> LLMConfig:
    """``config`` with ``max_tokens`` >= ``GENERATE_MAX_TOKENS`` when the judge generates its
    judgments (an endpoint, or a local judge in ``generate`` mode) and ``max_tokens`` was not
    ``given``; otherwise as it is (scoring needs no tokens, a rationale is cut where it stops)."""
    from dataclasses import replace

    if given or (config.is_local and mode != "generate"):
        return config
    return replace(config, max_tokens=max(config.max_tokens, GENERATE_MAX_TOKENS))


class LocalJudge:
    """A transformers causal LM judging in batches (greedy, left padding).

    ``mode``: ``generate`` writes a judgment and reads its answer tag (may be unparsed or
    truncated); ``score`` compares the likelihoods of the two answer tags right after the prompt
    (``llm.scoring``: one forward pass, always a verdict; the judgment text is the bare tag);
    ``score-both`` scores the prompt as given and swapped and takes the difference of the margins
    (``llm.scoring.score``, mode ``score-both``: no position bias by construction; the part of the prompt
    before the responses runs once);
    ``rationale`` generates up to ``max_tokens``, cuts the text before any answer tag and scores
    the two tags after it (always a verdict; the text is the rationale and the chosen tag).

    **Cached** when given a ``cache`` (``llm.cache.ResponseCache``) and the ``model_id`` to key
    it by (``from_pretrained``/``make_judge`` do, with ``llm.scoring.local_model_id``: the folder's
    fingerprint): each generation is keyed by model, dtype, prompt and ``max_tokens``, each score
    by model, dtype, prompt, mode and rationale, at the endpoint ``local:<folder>``, in the same
    disk cache as the client's answers. A folder's model loads only on the first miss, so a
    rerun served by the cache neither loads it nor runs a forward pass. ``cached`` and ``computed``
    count the answers each way.

    **Scoring shares prefixes**: the prompts of one call that miss the cache are scored on one KV
    cache (``llm.scoring.score_many``), and the last one's cache is kept for the next call
    (``llm.kvcache.KeptCache``), so a tournament's later rounds on the same state run only from
    where their prompts part from the round before. **Generation shares them too** on a CPU
    (``shared_prefill`` None: on a CPU; True/False forces it): prompts run one at a time, each from
    where it parts from the one before, instead of in padded batches of ``batch_size``."""

    def __init__(self, model, tokenizer, max_tokens: int = 256, batch_size: int = 8, mode: str = "generate",
                 cache=None, model_id: str | None = None, endpoint: str = "local", load=None,
                 placed: tuple[str, str] | None = None, shared_prefill: bool | None = None):
        if mode not in JUDGE_MODES:
            raise ValueError(f"mode must be one of {JUDGE_MODES}, not {mode!r}")
        self._model, self._tokenizer, self._load, self._placed = model, tokenizer, load, placed
        if model is not None:
            model.eval()
        self.max_tokens, self.batch_size, self.mode = max_tokens, batch_size, mode
        self.name = model_id or getattr(model, "name_or_path", "") or type(model).__name__
        self.cache = cache if model_id else None        # no identity, no key: never cached
        self.model_id, self.endpoint = model_id, endpoint
        self.cached = self.computed = 0
        self._load_lock = threading.Lock()
        self._kept = KeptCache()        # the last prompt's KV cache, for the next call's common prefix
        self.shared_prefill = shared_prefill

    @classmethod
    def from_pretrained(cls, path: str, device: str = "auto", dtype: str = "auto", cache=None,
                        **kwargs) -> "LocalJudge":
        """A judge of the folder ``path`` on ``device`` in ``dtype`` (``placement``), loaded at
        its first uncached answer; ``cache`` (a ``ResponseCache``) keeps its answers."""
        from llm.scoring import local_model_id

        device, dtype = placement(device, dtype)
        root = Path(path).resolve()

        def load():
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(root)
            return AutoModelForCausalLM.from_pretrained(root, dtype=getattr(torch, dtype)).to(device), tokenizer
        return cls(None, None, cache=cache, model_id=local_model_id(root), endpoint=f"local:{root}", load=load,
                   placed=(device, dtype), **kwargs)

    def _loaded(self):
        with self._load_lock:
            if self._model is None:
                self._model, self._tokenizer = self._load()
                self._model.eval()
        return self._model, self._tokenizer

    @property
    def model(self):
        return self._loaded()[0]

    @property
    def tokenizer(self):
        return self._loaded()[1]

    @property
    def device(self) -> str:
        if self._placed:
            return self._placed[0]
        return str(next(self.model.parameters()).device)

    @property
    def dtype(self) -> str:
        if self._placed:
            return self._placed[1]
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    def _key(self, request: dict) -> str | None:
        from llm.cache import request_key

        return None if self.cache is None else request_key({**request, "dtype": self.dtype}, self.endpoint)

    def _put(self, key: str | None, request: dict, body: dict) -> None:
        if key is None:
            return
        try:
            self.cache.put(key, {**request, "dtype": self.dtype}, body)
        except OSError as e:        # a full disk costs a repeated forward pass next run, not this answer
            log.warning("could not cache a local judge's answer: %s", e)

    def generate(self, prompts: list[list[dict]]) -> list[tuple[str, str]]:
        """(text, finish reason: 'stop' or 'length') per prompt, greedy; from the cache where it
        has them, the rest generated in batches (and cached)."""
        texts: list[tuple[str, str] | None] = [None] * len(prompts)
        keys, requests = [None] * len(prompts), [None] * len(prompts)
        for i, p in enumerate(prompts):
            requests[i] = {"model": self.model_id, "mode": "generate", "max_tokens": self.max_tokens,
                           "messages": [{"role": m["role"], "content": m["content"]} for m in p]}
            keys[i] = self._key(requests[i])
            body = self.cache.get(keys[i]) if keys[i] else None
            if (isinstance(body, dict) and body.get("object") == "surfprm.generation"
                    and isinstance(body.get("text"), str) and body.get("finish_reason") in ("stop", "length")):
                texts[i] = (body["text"], body["finish_reason"])
                self.cached += 1
        todo = [i for i, t in enumerate(texts) if t is None]
        for i, t in zip(todo, self._generate([prompts[i] for i in todo]) if todo else []):
            texts[i] = t
            self.computed += 1
            self._put(keys[i], requests[i], {"object": "surfprm.generation", "text": t[0], "finish_reason": t[1]})
        return texts

    def _generate(self, prompts: list[list[dict]]) -> list[tuple[str, str]]:
        import torch

        tok = self.tokenizer
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos = self.model.generation_config.eos_token_id
        eos = tok.eos_token_id if eos is None else eos
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        encoded = [tok.apply_chat_template(p, add_generation_prompt=True, return_dict=True)["input_ids"]
                   for p in prompts]
        texts: list[tuple[str, str]] = [("", "stop")] * len(prompts)
        device = next(self.model.parameters()).device
        if self.shared_prefill or (self.shared_prefill is None and device.type == "cpu"):
            # On a CPU the prompts' prefill is most of the time and a padded batch cannot share
            # it: one prompt at a time, in token order, each run from where it parts from the one
            # before (a tournament's prompts share their state; llm.kvcache.prefill on the kept
            # cache the scoring modes use too). Greedy, as the batches below.
            from llm.kvcache import lock_for, prefill

            with lock_for(self.model), torch.inference_mode():
                for i in sorted(range(len(prompts)), key=lambda i: encoded[i]):
                    ids = encoded[i]
                    cache = prefill(self.model, self._kept, ids[:-1])
                    out = self.model.generate(input_ids=torch.tensor([ids], device=device),
                                              attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device),
                                              cache=cache, max_new_tokens=self.max_tokens, do_sample=False,
                                              pad_token_id=pad_id)
                    texts[i] = self._decoded(out[0, len(ids):].tolist(), eos_ids)
            return texts
        # On an accelerator, batches: similar lengths share one, so little compute goes to padding.
        order = sorted(range(len(prompts)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            width = max(len(encoded[i]) for i in idx)
            ids = torch.tensor([[pad_id] * (width - len(encoded[i])) + encoded[i] for i in idx], device=device)
            mask = torch.tensor([[0] * (width - len(encoded[i])) + [1] * len(encoded[i]) for i in idx], device=device)
            with torch.inference_mode():
                out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=self.max_tokens,
                                          do_sample=False, pad_token_id=pad_id)
            for i, row in zip(idx, out[:, width:].tolist()):
                texts[i] = self._decoded(row, eos_ids)
        return texts

    def _decoded(self, row: list[int], eos_ids: set[int]) -> tuple[str, str]:
        """(the text up to the first end token, 'stop' or 'length')."""
        stop = next((k for k, t in enumerate(row) if t in eos_ids), None)
        return self.tokenizer.decode(row[:stop], skip_special_tokens=True), "length" if stop is None else "stop"

    def _scores(self, prompts: list[list[dict]], mode: str, rationales: list[str]) -> list:
        """``llm.scoring.score_many`` of the prompts, from the cache where it holds them; the rest
        are scored together (one KV cache: their common prefixes run once) and cached."""
        from llm.scoring import score_from_dict, score_many, score_request, score_to_dict

        requests = [score_request(self.model_id, p, mode, r) for p, r in zip(prompts, rationales, strict=True)]
        keys = [self._key(r) for r in requests]
        scores = [score_from_dict(self.cache.get(k), mode) if k else None for k in keys]
        self.cached += sum(s is not None for s in scores)
        todo = [i for i, s in enumerate(scores) if s is None]
        if todo:
            computed = score_many(self.model, self.tokenizer, [prompts[i] for i in todo], mode,
                                  [rationales[i] for i in todo], self._kept)
            for i, s in zip(todo, computed):
                scores[i] = s
                self.computed += 1
                self._put(keys[i], requests[i], score_to_dict(s))
        return scores

    def score(self, prompts: list[list[dict]], rationales: list[str] | None = None) -> list[Judgment]:
        """Verdicts by the answer tags' likelihoods (``llm.scoring``)."""
        given = rationales or [""] * len(prompts)
        out = []
        for rationale, s in zip(given, self._scores(prompts, "score", given)):
            text = (rationale.rstrip() + "\n" if rationale.strip() else "") + s.text
            out.append(Judgment(text, s.verdict, mode="rationale" if rationales else "score", margin=s.margin))
        return out

    def score_both(self, prompts: list[list[dict]]) -> list[Judgment]:
        """Verdicts by both orders' tag scores (``llm.scoring.score``, mode ``score-both``)."""
        return [Judgment(s.text, s.verdict, mode="score-both", margin=s.margin)
                for s in self._scores(prompts, "score-both", [""] * len(prompts))]

    def judge_prompts(self, prompts: list[list[dict]]) -> list[Judgment]:
        if self.mode == "score":
            return self.score(prompts)
        if self.mode == "score-both":
            return self.score_both(prompts)
        if self.mode == "rationale":
            from llm.scoring import rationale_of

            return self.score(prompts, [rationale_of(t) for t, _ in self.generate(prompts)])
        return [read_judgment(t, reason) for t, reason in self.generate(prompts)]


class EndpointJudge:
    """Any OpenAI-compatible endpoint through ``llm.client`` (cached, retried, concurrent)."""

    def __init__(self, config: LLMConfig):
        self.client = LLMClient(config)
        self.name = config.model_id

    def judge_prompts(self, prompts: list[list[dict]]) -> list[Judgment]:
        results = self.client.chat_many(prompts, stage="prm.judge")
        return [read_judgment(r.text, r.finish_reasons[0] if r.finish_reasons else "")
                if r.ok else Judgment("", None, r.infra_error) for r in results]


def make_judge(config: LLMConfig, batch_size: int = 8, mode: str = "generate", device: str = "auto",
               dtype: str = "auto"):
    """A local batched judge for a transformers folder (no ``base_url``) on ``device`` in ``dtype``
    (``placement``), its answers kept in ``config``'s LLM cache (``--cache-dir``; none with
    ``--no-cache``), else an endpoint judge (``mode``, ``device`` and ``dtype`` apply to the local
    judge; an endpoint only generates)."""
    if config.is_local:
        from llm.cache import ResponseCache

        return LocalJudge.from_pretrained(str(config.local_model_dir()), device=device, dtype=dtype,
                                          cache=None if config.no_cache else ResponseCache(config.cache_dir),
                                          max_tokens=config.max_tokens, batch_size=batch_size, mode=mode)
    return EndpointJudge(config)


def judge(judge_, state: State, a1: str, a2: str, budget: int | None = None,
          fmt: JudgmentFormat = DEFAULT_FORMAT) -> Judgment:
    """Judge one state and two raw actions in the comparative-judgment format."""
    return judge_pairs(judge_, [(state, a1, a2)], budget=budget, fmt=fmt)[0]


def judge_pairs(judge_, items: list[tuple[State, str, str]], budget: int | None = None,
                fmt: JudgmentFormat = DEFAULT_FORMAT) -> list[Judgment]:
    """Judge many (state, action 1, action 2) triples in one batch."""
    prompts = [render_pair(s, a1, a2, budget, fmt)[0] for s, a1, a2 in items]
    return judge_.judge_prompts(prompts)


@dataclass(slots=True)
class PairOutcome:
    """A pair judged against its expected answer, in one order or both."""

    expected: int
    first: Judgment
    swapped: Judgment | None = None     # the swapped prompt's judgment (both orders)

    @property
    def correct(self) -> bool:
        if self.first.verdict != self.expected:
            return False
        return self.swapped is None or self.swapped.verdict == 3 - self.expected

    @property
    def position_biased(self) -> bool:
        """Both orders parsed and named the same position (so not the same action)."""
        return (self.swapped is not None and self.first.verdict is not None
                and self.first.verdict == self.swapped.verdict)

    @property
    def unparsed(self) -> bool:
        return self.first.verdict is None or (self.swapped is not None and self.swapped.verdict is None)


def judge_expected(judge_, prompts: list[list[dict]], expected: list[int],
                   both_orders: bool = False) -> list[PairOutcome]:
    """Judge ready prompts against their expected answers; with ``both_orders`` also the swapped
    prompts (pairs whose prompt cannot be swapped are judged in one order: see ``swap_responses``)."""
    first = judge_.judge_prompts(prompts)
    outcomes = [PairOutcome(e, j) for e, j in zip(expected, first)]
    if both_orders:
        swapped = [(i, s) for i, p in enumerate(prompts) if (s := swap_responses(p)) is not None]
        for (i, _), j in zip(swapped, judge_.judge_prompts([s for _, s in swapped])):
            outcomes[i].swapped = j
    return outcomes


def position_stats(outcomes: list[PairOutcome]) -> dict:
    """How often position 1 is chosen vs right, consistency across orders, biased pairs."""
    verdicts = [o.first.verdict for o in outcomes] + [o.swapped.verdict for o in outcomes if o.swapped]
    expected = [o.expected for o in outcomes] + [3 - o.expected for o in outcomes if o.swapped]
    parsed = [v for v in verdicts if v is not None]
    both = [o for o in outcomes if o.swapped is not None]
    both_parsed = [o for o in both if o.first.verdict is not None and o.swapped.verdict is not None]
    return {"chose_position_1": sum(v == 1 for v in parsed) / len(parsed) if parsed else None,
            "expected_position_1": sum(e == 1 for e in expected) / len(expected) if expected else None,
            "judged_both_orders": len(both),
            "position_biased": sum(o.position_biased for o in both),
            "consistent": (sum(not o.position_biased for o in both_parsed) / len(both_parsed)) if both_parsed
            else None}
