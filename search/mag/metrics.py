"""MAG (multimodal action and guide generation): the step output contract, its one tolerant
parser, and the MAG paper's metrics (OFCR, guide quality G, GGS, guide tax) as its Appendix D
defines them. Pure and offline; the observation and executor are ``search.mag.som``, the episode
``search.mag.agent``, the CLI ``python -m search.mag``.

Contract (App. C-D): ONE JSON object with exactly the five keys ``think, action_type,
selected_candidate_id, content, guide_text`` (``coordinates`` instead of
``selected_candidate_id`` under coordinate grounding, an ``[x, y]`` pixel pair). The parser takes
the FIRST well-formed JSON object of the text (code fences and preambles are skipped; a later
object never overrides it) and never raises.

OFCR (App. D): a step passes when (i) it parses under the contract with a non-empty ``think``,
a non-empty ``guide_text`` and a recognized verb (exactly one of ``VERBS`` as written: no strip,
no case folding; App. D's "one of the seven in A" under "a single locked parser");
(ii) the element verbs click, type and select carry a grounding argument (a SoM id, as an int or a
string of digits, that is in the current menu; or a pair of numbers), ``type`` carries text and
``select`` an option label (non-empty strings), ``finish`` a string or null (OFCR does not judge
the answer; SR does); (iii) the guide matches none of ``LEAK_PATTERNS``. Nothing else is judged:
the other verbs' grounding argument and content are not part of the gate (the executor ignores
their target, and a scroll without "up"/"down" is a valid step the executor cannot run). Steps
failing (i)-(ii) have no action and execute nothing; a step failing only (iii) is executed.

G (Eq. 4) joins a task's guides in step order, those of steps that fail OFCR included (App. D:
they are not zeroed), and scores them against the joined gold guides with BLEU-1, BLEU-2
(``nltk``, method1 smoothing, brevity penalty), ROUGE-1 and ROUGE-L F (``rouge-score``), equal
weights; GGS = S (0.4 + 0.6 G) (Eq. 5); tax = SR - GGS. Denominators (Table 1, App. D): SR and
OFCR over every task run; the guide columns over the tasks with gold guides; corpus GGS
(``GGS_corpus``) over every task, a task without gold guides scoring G = 0 there.

Gold guides: JSONL, one task per line, ``{"task_id": 27, "steps": [{"guide": "..."}, ...]}``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Sequence

VERBS = ("click", "type", "select", "scroll", "press_enter", "go_back", "finish")
ELEMENT_VERBS = ("click", "type", "select")          # the verbs that carry a grounding argument
GROUNDING_KEY = {"som": "selected_candidate_id", "coord": "coordinates"}
BASE_KEYS = ("think", "action_type", "content", "guide_text")
KEYS = {g: frozenset(BASE_KEYS + (key,)) for g, key in GROUNDING_KEY.items()}

# The leak family (App. D (iii)): a guide that names a mark or a pixel is useless to a person.
#   mark_bracket  [12]       mark_word  id 12, element #17, mark: 3, box 4, candidate 9, label 2
#   mark_hash     #12        coord_pair (312, 174), [312.5,174]      coord_xy  x=312, y=174
_NUM = r"\d+(?:\.\d+)?"
LEAK_PATTERNS = {
    "mark_bracket": re.compile(r"\[\s*\d+\s*\]"),
    "mark_word": re.compile(r"\b(?:id|element|mark|box|candidate|label)\s*(?:#|no\.?|number)?\s*:?\s*\d+\b",
                            re.IGNORECASE),
    "mark_hash": re.compile(r"(?<![\w&])#\s*\d+\b"),
    "coord_pair": re.compile(rf"[(\[]\s*{_NUM}\s*,\s*{_NUM}\s*[)\]]"),
    "coord_xy": re.compile(rf"\bx\s*[=:]\s*{_NUM}\s*,?\s*y\s*[=:]\s*{_NUM}", re.IGNORECASE),
}
# Site objects legitimately numbered ("issue #12", "order id 170", "product ID 42"): removed
# before the leak check, so that task wording is not taken for a mark id.
_ALLOWED_OBJECT_IDS = re.compile(
    r"\b(?:issues?|orders?|merge\s+requests?|pull\s+requests?|mrs?|prs?|tickets?|products?|customers?|users?"
    r"|posts?|comments?|reviews?|invoices?|projects?|items?|sku)\s*(?:#|id\b|no\.|number\b)?\s*:?\s*#?\s*\d+",
    re.IGNORECASE)


@dataclass(slots=True)
class Step:
    """One step that forms a valid action: ``candidate_id`` (Set-of-Mark) or ``coords``
    (coordinate grounding) for the element verbs; ``content`` None when null."""

    think: str
    action_type: str
    content: str | None
    guide_text: str
    candidate_id: int | None = None
    coords: tuple[float, float] | None = None


def first_object(text) -> dict | None:
    """The first well-formed JSON object in ``text`` (None when there is none): decoded from each
    ``{`` in turn (``json.JSONDecoder.raw_decode``), the first that decodes wins."""
    if not isinstance(text, str):
        return None
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            return decoder.raw_decode(text, start)[0]
        except ValueError:
            start = text.find("{", start + 1)
    return None


def _as_id(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def _as_pair(v) -> tuple[float, float] | None:
    if (isinstance(v, (list, tuple)) and len(v) == 2
            and all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) for c in v)):
        return float(v[0]), float(v[1])
    return None


def _filled(v) -> bool:
    return isinstance(v, str) and bool(v.strip())


def raw_guide(text) -> str | None:
    """The ``guide_text`` of the first JSON object in ``text`` when it is a non-empty string,
    whether or not the step passes OFCR (such guides still enter G and the guide history)."""
    obj = first_object(text)
    return obj["guide_text"].strip() if obj is not None and _filled(obj.get("guide_text")) else None


def parse_step(text: str, menu_ids: Collection[int] = (), grounding: str = "som"
               ) -> tuple[Step | None, str | None]:
    """OFCR's clauses (i) and (ii): ``(Step, None)`` for a step that parses under the contract
    and forms a valid action, else ``(None, "category: detail")``; never raises. ``menu_ids``:
    the ids of this step's menu (ints; not used under coordinate grounding)."""
    try:
        return _parse_step(text, menu_ids, grounding)
    except Exception as e:  # the contract is "never raises": a bug here is an invalid step
        return None, f"parser_error: {type(e).__name__}: {e}"


def _parse_step(text, menu_ids, grounding):
    if grounding not in KEYS:
        return None, f"bad_grounding: {grounding!r}"
    obj = first_object(text)
    if obj is None:
        return None, "no_json: no well-formed JSON object"
    keys = KEYS[grounding]
    if missing := sorted(keys - obj.keys()):
        return None, f"missing_keys: {', '.join(missing)}"
    if extra := sorted(obj.keys() - keys):
        return None, f"extra_keys: {', '.join(extra)}"
    if not _filled(obj["think"]):
        return None, "empty_think: think must be a non-empty string"
    if not _filled(obj["guide_text"]):
        return None, "empty_guide: guide_text must be a non-empty string"
    verb = obj["action_type"]                 # exactly one of the verbs, as the contract states them
    if not isinstance(verb, str) or verb not in VERBS:
        return None, f"bad_verb: {obj['action_type']!r}"
    content = obj["content"]
    step = Step(think=obj["think"].strip(), action_type=verb, guide_text=obj["guide_text"].strip(),
                content=content if verb == "type" or not isinstance(content, str) else content.strip())
    if verb in ELEMENT_VERBS:
        raw = obj[GROUNDING_KEY[grounding]]
        if grounding == "som":
            step.candidate_id = _as_id(raw)
            if step.candidate_id is None:
                return None, f"bad_target: {verb} needs a candidate id, got {raw!r}"
            if step.candidate_id not in {int(m) for m in menu_ids}:
                return None, f"id_not_in_menu: {step.candidate_id}"
        else:
            step.coords = _as_pair(raw)
            if step.coords is None:
                return None, f"bad_target: {verb} needs coordinates [x, y], got {raw!r}"
    if verb in ("type", "select") and not _filled(content):
        return None, f"missing_content: {verb} needs {'text' if verb == 'type' else 'an option label'}"
    if verb == "finish" and content is not None and not isinstance(content, str):
        return None, f"bad_content: finish carries a string or null, got {content!r}"
    if verb not in ("type", "select", "finish"):
        step.content = content if isinstance(content, str) else None     # not judged
    return step, None


def guide_leaks(guide: str) -> list[str]:
    """Names of the ``LEAK_PATTERNS`` the guide matches (empty: a clean guide)."""
    text = _ALLOWED_OBJECT_IDS.sub(" ", guide)
    return [name for name, pat in LEAK_PATTERNS.items() if pat.search(text)]


def check_step(text: str, menu_ids: Collection[int] = (), grounding: str = "som"
               ) -> tuple[Step | None, str | None]:
    """OFCR for one raw output (App. D): ``(step or None, reason or None)``. ``step`` is None when
    the output forms no valid action (clauses (i)-(ii)); ``reason`` is None when the step passes
    all three clauses. A step whose guide leaks (iii) is a valid action and is executed.
    ``menu_ids``: the current menu's ids (ints); the output's id may be an int or a string."""
    step, err = parse_step(text, menu_ids, grounding)
    if err:
        return None, err
    if leaks := guide_leaks(step.guide_text):
        return step, f"guide_leak: {', '.join(leaks)}"
    return step, None


def ofcr(reasons: Sequence[str | None]) -> float | None:
    """Share of compliant steps (``reasons`` from ``check_step``; None = compliant)."""
    return sum(r is None for r in reasons) / len(reasons) if reasons else None


def _tokens(text: str) -> list[str]:
    from rouge_score.tokenize import tokenize
    return tokenize(text, None)


def guide_scores(pred_guides: Sequence[str], gold_guides: Sequence[str]) -> dict[str, float]:
    """BLEU-1, BLEU-2, ROUGE-1, ROUGE-L (F) and their mean G, joined predictions vs joined gold."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    from rouge_score import rouge_scorer

    pred, gold = " ".join(pred_guides), " ".join(gold_guides)
    hyp, ref = _tokens(pred), _tokens(gold)
    if not hyp or not ref:
        return dict(bleu1=0.0, bleu2=0.0, rouge1=0.0, rougeL=0.0, G=0.0)
    smooth = SmoothingFunction().method1
    s = dict(bleu1=sentence_bleu([ref], hyp, weights=(1.0,), smoothing_function=smooth),
             bleu2=sentence_bleu([ref], hyp, weights=(0.5, 0.5), smoothing_function=smooth))
    rouge = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=False).score(gold, pred)
    s.update(rouge1=rouge["rouge1"].fmeasure, rougeL=rouge["rougeL"].fmeasure)
    s = {k: float(v) for k, v in s.items()}
    s["G"] = sum(s.values()) / 4
    return s


def ggs(success: float, g: float) -> float:
    """Guide-gated success: S * (0.4 + 0.6 G)."""
    return success * (0.4 + 0.6 * g)


@dataclass(slots=True)
class TaskScore:
    """One task's MAG metrics; guide columns are None without gold guides for the task."""

    task_id: str
    success: float
    n_steps: int
    n_compliant: int
    reasons: dict[str, int]
    bleu1: float | None = None
    bleu2: float | None = None
    rouge1: float | None = None
    rougeL: float | None = None
    G: float | None = None
    GGS: float | None = None
    tax: float | None = None

    @property
    def ofcr(self) -> float | None:
        return self.n_compliant / self.n_steps if self.n_steps else None


def score_task(task_id, success: float, reasons: Sequence[str | None], pred_guides: Sequence[str],
               gold_guides: Sequence[str] | None) -> TaskScore:
    """Score one episode: ``reasons`` per step from ``check_step``; ``pred_guides`` its guides in
    step order (those of steps that fail OFCR included); ``gold_guides`` None when the task has
    no gold."""
    ts = TaskScore(task_id=str(task_id), success=float(success), n_steps=len(reasons),
                   n_compliant=sum(r is None for r in reasons),
                   reasons=dict(Counter(r.split(":")[0] for r in reasons if r is not None)))
    if gold_guides is not None:
        s = guide_scores(pred_guides, gold_guides)
        ts.bleu1, ts.bleu2, ts.rouge1, ts.rougeL, ts.G = s["bleu1"], s["bleu2"], s["rouge1"], s["rougeL"], s["G"]
        ts.GGS = ggs(ts.success, ts.G)
        ts.tax = ts.success - ts.GGS
    return ts


def summarize(scores: Sequence[TaskScore], gold_given: bool | None = None) -> dict:
    """Table 1's columns with the paper's denominators: SR and OFCR (pooled over steps) over
    every task; BLEU, ROUGE, G, GGS and the tax over the tasks with gold guides; ``GGS_corpus``
    (App. D) over every task, G = 0 for a task without gold. The guide columns are absent when
    no gold was given (``gold_given``; default: some task has gold). ``denominators`` labels them."""
    n = len(scores)
    steps = sum(s.n_steps for s in scores)
    gold = [s for s in scores if s.G is not None]
    out = {"n_tasks": n, "n_steps": steps, "n_with_gold": len(gold),
           "SR": sum(s.success for s in scores) / n if n else None,
           "OFCR": sum(s.n_compliant for s in scores) / steps if steps else None,
           "reasons": dict(sum((Counter(s.reasons) for s in scores), Counter()))}
    out["denominators"] = {"SR": f"all {n} tasks run", "OFCR": f"all {steps} steps of all {n} tasks"}
    if gold:
        for k in ("bleu1", "bleu2", "rouge1", "rougeL", "G", "GGS"):
            out[k] = sum(getattr(s, k) for s in gold) / len(gold)
        out["SR_gold"] = sum(s.success for s in gold) / len(gold)
        out["tax"] = out["SR_gold"] - out["GGS"]
        out["denominators"]["BLEU-1, BLEU-2, ROUGE-1, ROUGE-L, G, GGS, tax"] = \
            f"the {len(gold)} tasks with gold guides"
    if n and (bool(gold) if gold_given is None else gold_given):
        out["GGS_corpus"] = sum(s.GGS if s.GGS is not None else ggs(s.success, 0.0) for s in scores) / n
        out["denominators"]["GGS_corpus"] = f"all {n} tasks run (G = 0 without gold guides)"
    return out


def load_gold_guides(path: str | Path | None) -> dict[str, list[str]] | None:
    """Read the gold-guide JSONL into ``{task_id: [guide, ...]}``; None when no path is given
    (then report success and OFCR only). A given path that does not exist is an error, so a typo
    does not silently drop the guide columns."""
    if path is None:
        return None
    gold: dict[str, list[str]] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("task_id"), (int, str)) \
                or isinstance(rec.get("task_id"), bool):
            raise ValueError(f"{path}:{n}: needs an int or string task_id")
        tid = str(rec["task_id"])
        steps = rec.get("steps")
        if not isinstance(steps, list) or not steps:
            raise ValueError(f"{path}:{n}: task {tid}: steps must be a non-empty list")
        guides = []
        for k, st in enumerate(steps):
            g = st.get("guide") if isinstance(st, dict) else None
            if not isinstance(g, str) or not g.strip():
                raise ValueError(f"{path}:{n}: task {tid}: step {k} needs a non-empty guide string")
            guides.append(g.strip())
        if tid in gold:
            raise ValueError(f"{path}:{n}: task {tid} repeated")
        gold[tid] = guides
    return gold


def score_episodes(episodes: Iterable[dict], gold: dict[str, list[str]] | None) -> list[TaskScore]:
    """Score episodes given as ``{"task_id", "success", "outputs": [(text, menu_ids), ...]}``
    under Set-of-Mark grounding (``"grounding": "coord"`` to switch): one output per step, its
    guide in G whether or not it passes OFCR."""
    scores = []
    for ep in episodes:
        outputs = ep["outputs"]
        reasons = [check_step(text, menu_ids, ep.get("grounding", "som"))[1] for text, menu_ids in outputs]
        guides = [g for g in (raw_guide(text) for text, _ in outputs) if g]
        tid = str(ep["task_id"])
        scores.append(score_task(tid, ep["success"], reasons, guides,
                                 None if gold is None else gold.get(tid)))
    return scores
