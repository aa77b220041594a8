"""MAG (multimodal action and guide generation): the step output contract, its one tolerant
parser, and the paper's metrics (OFCR, guide quality G, GGS, guide tax). Pure and offline: the
Set-of-Mark observation and executor (``search.som``), the episode loop (``search.mag_loop``)
and the search CLI (``python -m search.mag``) build on this module.

Output contract. A step is ONE JSON object with exactly the keys
``think, action_type, selected_candidate_id, content, guide_text`` (Set-of-Mark grounding), or
``think, action_type, coordinates, content, guide_text`` (coordinate grounding, ``coordinates`` an
``[x, y]`` pixel pair inside the 1440x900 viewport). Missing or extra keys make the step invalid.

Per-verb rules (``target`` is the candidate id, or the pixel pair under coordinate grounding):

    click        target required                      content ignored
    type         target required                      content: non-empty text to type
    select       target required                      content: non-empty option text
    scroll       target optional (null: the page)    content: "up" or "down"
    press_enter  target optional (null: focused)      content ignored
    go_back      target ignored                       content ignored
    finish       target ignored                       content: non-empty answer

A target that is given must be in the menu (any id for an optional target too), and must be an
integer or a string of digits; ``action_type`` is compared after strip/lower; ``think`` is a
string; ``content`` a string or null; ``guide_text`` a non-empty string for every verb.

Parser. ``parse_step`` takes the FIRST well-formed JSON object in the text: it scans each ``{``,
finds its balanced ``}`` (braces inside JSON strings do not count), and ``json.loads`` the span;
code fences and preambles are skipped that way, and a later object never overrides the first.
It never raises: it returns ``(Step, None)`` or ``(None, "category: detail")``.

Guide leakage (part of OFCR): a guide must read as instructions to a human, so it may not name
mark ids or pixels. The fixed family ``LEAK_PATTERNS``:

    mark_bracket   [12]                               a mark label as drawn on the screenshot
    mark_word      id 12, element #17, mark: 3, box 4, candidate 9, label 2
    mark_hash      #12
Numbered site objects are not leaks and are removed first: "issue #12", "order id 170",
"product ID 42", "merge request #3", "MR/PR #3" (issues, orders, tickets, products, customers,
users, posts, comments, reviews, invoices, projects, items, SKUs).
    coord_pair     (312, 174)  [312, 174]  (312.5,174)
    coord_xy       x=312, y=174   x: 312 y: 174

OFCR (output-format compliance rate) = compliant steps / steps, where a step is compliant when it
parses under the rules above AND its guide matches no leak pattern; reported per task and pooled
over all steps of all tasks.

Guide quality. Per task, the guides of the parsed steps are joined with spaces and compared with
the joined gold guides: BLEU-1 and BLEU-2 (``nltk`` ``sentence_bleu``, uniform weights, brevity
penalty, ``SmoothingFunction().method1``), ROUGE-1 and ROUGE-L F-measures (``rouge-score``, no
stemming); both on ``rouge-score``'s tokens (lowercase, alphanumeric runs). G is their mean
(0 when either side is empty). GGS = S * (0.4 + 0.6 G) with S the task's success in {0, 1}; the
guide tax is S - GGS. A summary averages each over tasks; G, GGS and the tax only over tasks that
have gold guides, and not at all without a gold file (success and OFCR only).

Gold guides: JSONL, one task per line, ``{"task_id": 27, "steps": [{"guide": "..."}, ...]}`` with
steps in order; other keys are allowed and ignored. ``task_id`` is a WebArena id (int or string,
compared as a string); a repeated id, a bad line or a step without a non-empty ``guide`` string is
a ``ValueError`` naming the line.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable, Sequence

VERBS = ("click", "type", "select", "scroll", "press_enter", "go_back", "finish")
TARGET_REQUIRED = {"click", "type", "select"}
TARGET_OPTIONAL = {"scroll", "press_enter"}
CONTENT_REQUIRED = {"type", "select", "finish"}
SCROLL_DIRECTIONS = ("up", "down")
VIEWPORT = (1440, 900)
BASE_KEYS = ("think", "action_type", "content", "guide_text")
KEYS = {"som": frozenset(BASE_KEYS + ("selected_candidate_id",)),
        "coord": frozenset(BASE_KEYS + ("coordinates",))}

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
    """One parsed step; ``candidate_id`` (Set-of-Mark) or ``coords`` (coordinate grounding)."""

    think: str
    action_type: str
    content: str
    guide_text: str
    candidate_id: int | None = None
    coords: tuple[int, int] | None = None


def _json_objects(text: str):
    """Yield each balanced ``{...}`` span that json-decodes to a dict, in order of its ``{``."""
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        depth, in_str, esc = 0, False, False
        for j in range(start, len(text)):
            ch = text[j]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = json.loads(text[start:j + 1])
                    except ValueError:
                        break
                    if isinstance(obj, dict):
                        yield obj
                    break


def _as_id(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v.strip())
    return None


def _as_coords(v) -> tuple[int, int] | None:
    if (isinstance(v, (list, tuple)) and len(v) == 2
            and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in v)):
        x, y = round(v[0]), round(v[1])
        if 0 <= x < VIEWPORT[0] and 0 <= y < VIEWPORT[1]:
            return x, y
    return None


def parse_step(text: str, menu_ids: Collection[int] = (), grounding: str = "som"
               ) -> tuple[Step | None, str | None]:
    """Parse a policy output into a valid ``Step`` or ``(None, "category: detail")``; never raises.

    ``menu_ids`` are the candidate ids of this step's menu (ignored under ``grounding="coord"``).
    """
    try:
        return _parse_step(text, menu_ids, grounding)
    except Exception as e:  # the contract is "never raises": a bug here is an invalid step
        return None, f"parser_error: {type(e).__name__}: {e}"


def _parse_step(text, menu_ids, grounding):
    if grounding not in KEYS:
        return None, f"bad_grounding: {grounding!r}"
    if not isinstance(text, str):
        return None, "no_json: output is not text"
    obj = next(_json_objects(text), None)
    if obj is None:
        return None, "no_json: no well-formed JSON object"
    keys = KEYS[grounding]
    if missing := sorted(keys - obj.keys()):
        return None, f"missing_keys: {', '.join(missing)}"
    if extra := sorted(obj.keys() - keys):
        return None, f"extra_keys: {', '.join(extra)}"
    verb = obj["action_type"].strip().lower() if isinstance(obj["action_type"], str) else None
    if verb not in VERBS:
        return None, f"bad_verb: {obj['action_type']!r}"
    think, content, guide = obj["think"], obj["content"], obj["guide_text"]
    if not isinstance(think, str):
        return None, "bad_think: not a string"
    if content is None:
        content = ""
    if not isinstance(content, str):
        return None, "bad_content: not a string or null"
    if not isinstance(guide, str) or not guide.strip():
        return None, "missing_guide: guide_text empty or not a string"

    step = Step(think=think, action_type=verb, content=content.strip(), guide_text=guide.strip())
    raw = obj["selected_candidate_id" if grounding == "som" else "coordinates"]
    if verb in TARGET_REQUIRED or (verb in TARGET_OPTIONAL and raw is not None):
        if grounding == "som":
            cid = _as_id(raw)
            if cid is None:
                return None, f"bad_target: {verb} needs a candidate id, got {raw!r}"
            if cid not in {int(m) for m in menu_ids}:
                return None, f"id_not_in_menu: {cid}"
            step.candidate_id = cid
        else:
            xy = _as_coords(raw)
            if xy is None:
                return None, f"bad_target: {verb} needs [x, y] inside {VIEWPORT[0]}x{VIEWPORT[1]}, got {raw!r}"
            step.coords = xy
    if verb in CONTENT_REQUIRED and not step.content:
        return None, f"missing_content: {verb} needs content"
    if verb == "scroll":
        step.content = step.content.lower()
        if step.content not in SCROLL_DIRECTIONS:
            return None, f"bad_content: scroll needs 'up' or 'down', got {content!r}"
    return step, None


def guide_leaks(guide: str) -> list[str]:
    """Names of the ``LEAK_PATTERNS`` the guide matches (empty: a clean guide)."""
    text = _ALLOWED_OBJECT_IDS.sub(" ", guide)
    return [name for name, pat in LEAK_PATTERNS.items() if pat.search(text)]


def check_step(text: str, menu_ids: Collection[int] = (), grounding: str = "som"
               ) -> tuple[Step | None, str | None]:
    """``parse_step`` plus the leak check: the step (None if unparsable) and the reason it is
    not compliant (None: compliant). A leaky step is still a valid action and is executed."""
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
    """Score one episode: ``reasons`` per step from ``check_step``; ``pred_guides`` the guides of
    its parsed steps in order; ``gold_guides`` None when the task has no gold."""
    ts = TaskScore(task_id=str(task_id), success=float(success), n_steps=len(reasons),
                   n_compliant=sum(r is None for r in reasons),
                   reasons=dict(Counter(r.split(":")[0] for r in reasons if r is not None)))
    if gold_guides is not None:
        s = guide_scores(pred_guides, gold_guides)
        ts.bleu1, ts.bleu2, ts.rouge1, ts.rougeL, ts.G = s["bleu1"], s["bleu2"], s["rouge1"], s["rougeL"], s["G"]
        ts.GGS = ggs(ts.success, ts.G)
        ts.tax = ts.success - ts.GGS
    return ts


def summarize(scores: Sequence[TaskScore]) -> dict:
    """Table-1 columns: SR and pooled OFCR over all tasks; guide columns over tasks with gold
    (absent when none has gold); the non-compliance reasons counted by category."""
    n = len(scores)
    steps = sum(s.n_steps for s in scores)
    out = {"n_tasks": n, "n_steps": steps,
           "SR": sum(s.success for s in scores) / n if n else None,
           "OFCR": sum(s.n_compliant for s in scores) / steps if steps else None,
           "reasons": dict(sum((Counter(s.reasons) for s in scores), Counter()))}
    gold = [s for s in scores if s.G is not None]
    out["n_with_gold"] = len(gold)
    if gold:
        for k in ("bleu1", "bleu2", "rouge1", "rougeL", "G", "GGS"):
            out[k] = sum(getattr(s, k) for s in gold) / len(gold)
        out["SR_gold"] = sum(s.success for s in gold) / len(gold)
        out["tax"] = out["SR_gold"] - out["GGS"]
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
    under Set-of-Mark grounding (``"grounding": "coord"`` to switch)."""
    scores = []
    for ep in episodes:
        reasons, guides = [], []
        for text, menu_ids in ep["outputs"]:
            step, reason = check_step(text, menu_ids, ep.get("grounding", "som"))
            reasons.append(reason)
            if step is not None:
                guides.append(step.guide_text)
        tid = str(ep["task_id"])
        scores.append(score_task(tid, ep["success"], reasons, guides,
                                 None if gold is None else gold.get(tid)))
    return scores
