"""MAG's teacher-forced step diagnostics (MAG App. D): SAA, GACS, Faith and Suff, scored by
deterministic rules (a verb lexicon, token F1), no judge model.

    python -m search.mag --demo --policy embedded --prm none --diagnostics --out runs/mag/diag
    python -m search.mag --policy gpt-4o --policy-base-url ... --prm none --gold-guides gold.jsonl --diagnostics

    from search.mag.diagnostics import score_step, summarize_steps
    s = score_step(output_text, obs, gold_step, gold_mark, grounding="som")
    s["A"], s["Faith"], s["Suff"], s["GACS"]

Teacher forcing (``teacher_forced``): for each task with gold actions, the page starts at the
task's start; at every gold step the policy, given the gold guides so far as its guide history
(the gold prefix), writes one greedy output; it is scored against the gold step; then the GOLD
step runs on the page, so every prediction is made on the gold path. A finish, or a gold target
that is not on the page (the path diverged from the gold one: the task stops, said in
``stopped``), ends the task.

Per step (App. D; ``F`` is the output's OFCR bit, ``search.mag.metrics.check_step``):
- A = Type * Target * Content against the gold step. Type: the same verb. Target: under
  Set-of-Mark the same menu id; under coordinates 1 inside the gold element's box, else
  exp(-d / tau) with d the distance to the box's edge and tau = 120 px; 1 for verbs that target
  no element. Content: token F1 of the payloads, at least 0.9 for type and select and 0.5 for the
  finish answer (1 or 0); 1 for the other verbs.
- Faith = Verb/2 + Obj/2 (Eq. 9): Verb is 1 when the guide's head verb is one the lexicon
  (``LEXICON``) allows for the step's own verb; Obj is the token F1 of the guide's quoted anchor
  span (``anchor``: the first quoted span, else the whole guide) and the step's target string:
  the element's visible text for click and select, the typed text for type, the direction for
  scroll, the answer for finish. press_enter and go_back have no target string: their Obj is
  their Verb (ours: App. D names none).
- Suff (Eq. 10) for the element verbs: m = the best token F1 of the anchor with any candidate's
  text on the page; 0 when m < 0.10, else m * p_tie, p_tie = 0.5 when the two best lie within
  0.10 of each other, else 1. For the other verbs 1 with a clear head verb (Verb = 1), else 0.5.
- GACS = F * A * sqrt(Faith * Suff) (Eq. 11); SAA = the mean of A.
An output that forms no valid step scores 0 throughout (F = A = Faith = Suff = 0). Faith and Suff
are gold-free: they judge the guide against the output's own action and the page.

The lexicon, the anchor's quote marks and the tokenization are this project's (App. D gives
the rules, not the word lists). The means go to the run's ``summary.json`` as ``diagnostics``
(with their denominators), the per-step scores to ``diagnostics/<task_id>.jsonl``.

Gold steps: the gold-guide JSONL (``search.mag.metrics``) whose steps also carry
``action_type``, ``target`` (the visible text of the element, for click, type and select) and
``content`` (typed text, option label, scroll direction, finish answer); tasks whose steps lack
them are left out of the diagnostics (``tasks_without_gold_actions``). The demo task has them.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from search.mag.metrics import ELEMENT_VERBS, VERBS, Step, check_step

TAU_PX = 120.0
CONTENT_THRESHOLD = {"type": 0.9, "select": 0.9, "finish": 0.5}
SUFF_FLOOR = 0.10           # below this best match the guide names nothing
TIE_MARGIN = 0.10           # two best matches this close: an ambiguous reference
# Head verbs a guide may start with for each action verb (ours: App. D uses "a small lexicon").
LEXICON = {
    "click": {"click", "tap", "press", "open", "select", "choose", "pick", "go", "navigate", "follow", "visit",
              "view", "expand", "toggle", "check", "uncheck", "hit", "switch", "submit", "place", "sign", "log",
              "add", "apply", "save", "show", "sort", "filter"},
    "type": {"type", "enter", "input", "write", "fill", "search", "put", "insert", "key"},
    "select": {"select", "choose", "pick", "set", "change", "switch"},
    "scroll": {"scroll", "swipe", "move"},
    "press_enter": {"press", "hit", "submit", "search", "confirm", "enter"},
    "go_back": {"go", "return", "navigate", "back"},
    "finish": {"answer", "report", "finish", "read", "tell", "note", "say", "state", "give", "respond", "find"},
}
_FILLERS = {"please", "now", "then", "next", "first", "finally", "and", "just", "simply"}
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|‘([^’]+)’|(?<!\w)'([^']+)'(?!\w)")


@dataclass(frozen=True, slots=True)
class GoldStep:
    guide: str
    action_type: str
    target: str | None = None       # the element's visible text (element verbs)
    content: str | None = None


def tokens(text: str | None) -> list[str]:
    return re.findall(r"[a-z0-9]+", (text or "").lower())


def token_f1(pred: str | None, gold: str | None) -> float:
    """Unigram token F1 (counts clipped, lower-cased alphanumeric tokens); 1 when both are empty."""
    p, g = tokens(pred), tokens(gold)
    if not p or not g:
        return float(not p and not g)
    overlap = sum((Counter(p) & Counter(g)).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / len(p), overlap / len(g)
    return 2 * precision * recall / (precision + recall)


def head_verb(guide: str) -> str:
    """The guide's first word, lower-cased, past filler words ('please', 'now', 'then', ...)."""
    words = tokens(guide)
    return next((w for w in words if w not in _FILLERS), "")


def verb_score(guide: str, verb: str) -> float:
    """Verb (Eq. 9): 1 when the guide's head verb is in the lexicon of ``verb``."""
    return float(head_verb(guide) in LEXICON.get(verb, ()))


def anchor(guide: str) -> str:
    """The guide's first quoted span, else the whole guide."""
    m = _QUOTED.search(guide or "")
    return next(g for g in m.groups() if g) if m else (guide or "")


def label(mark) -> str:
    """A mark's visible text without the field's current value (`` = "..."``)."""
    return mark.text.split(' = "', 1)[0] if mark is not None else ""


def box_distance(x: float, y: float, box: tuple[float, float, float, float]) -> float:
    """Pixels from (x, y) to the box (x, y, w, h); 0 inside it."""
    bx, by, bw, bh = box
    dx = max(bx - x, 0.0, x - (bx + bw))
    dy = max(by - y, 0.0, y - (by + bh))
    return math.hypot(dx, dy)


def target_score(step: Step, gold: GoldStep, gold_mark, grounding: str) -> float:
    """Target: the same id (Set-of-Mark), or 1 inside the gold box and exp(-d/tau) outside
    (coordinates); 1 for verbs that target no element."""
    if gold.action_type not in ELEMENT_VERBS:
        return 1.0
    if gold_mark is None:
        return 0.0
    if grounding == "som":
        return float(step.candidate_id == gold_mark.id)
    return math.exp(-box_distance(*step.coords, gold_mark.box) / TAU_PX)


def content_score(step: Step, gold: GoldStep) -> float:
    """Content: token F1 of the payloads over the verb's threshold (1 or 0); 1 for other verbs."""
    threshold = CONTENT_THRESHOLD.get(gold.action_type)
    if threshold is None:
        return 1.0
    return float(token_f1(step.content, gold.content) >= threshold)


def step_mark(step: Step, obs, grounding: str):
    """The mark a valid step targets: its id's, or the one under its point."""
    from search.mag.som import mark_at

    if step.action_type not in ELEMENT_VERBS:
        return None
    return obs.by_id.get(step.candidate_id) if grounding == "som" else mark_at(obs, *step.coords)


def target_string(step: Step, obs, grounding: str) -> str | None:
    """Obj's reference (App. D): the element's visible text for click and select, the typed text,
    the scroll direction, the finish answer; None for press_enter and go_back."""
    if step.action_type in ("click", "select"):
        return label(step_mark(step, obs, grounding))
    if step.action_type in ("type", "scroll", "finish"):
        return step.content or ""
    return None


def suff_score(guide: str, verb: str, candidate_texts: list[str]) -> float:
    """Suff (Eq. 10): does the guide name one referent on the page (element verbs), or say its
    action clearly (the others)."""
    if verb not in ELEMENT_VERBS:
        return 1.0 if verb_score(guide, verb) else 0.5
    scores = sorted((token_f1(anchor(guide), v) for v in candidate_texts), reverse=True)
    if not scores or scores[0] < SUFF_FLOOR:
        return 0.0
    tie = len(scores) > 1 and scores[0] - scores[1] <= TIE_MARGIN
    return scores[0] * (0.5 if tie else 1.0)


def score_step(text: str, obs, gold: GoldStep, gold_mark, grounding: str = "som") -> dict:
    """One teacher-forced output's App. D scores (module docstring); ``gold_mark`` is the gold
    target's mark on this page (None for verbs without a target)."""
    step, reason = check_step(text, obs.menu_ids, grounding)
    out = {"F": float(step is not None and reason is None), "reason": reason}
    if step is None:
        return {**out, **dict.fromkeys(("Type", "Target", "Content", "A", "Verb", "Obj", "Faith", "Suff", "GACS"), 0.0)}
    t = float(step.action_type == gold.action_type)
    target = target_score(step, gold, gold_mark, grounding) if t else 0.0
    content = content_score(step, gold) if t else 0.0
    a = t * target * content
    verb = verb_score(step.guide_text, step.action_type)
    ref = target_string(step, obs, grounding)
    obj = verb if ref is None else token_f1(anchor(step.guide_text), ref)
    faith = verb / 2 + obj / 2
    suff = suff_score(step.guide_text, step.action_type, [label(m) for m in obs.marks])
    return {**out, "Type": t, "Target": target, "Content": content, "A": a, "Verb": verb, "Obj": obj,
            "Faith": faith, "Suff": suff, "GACS": out["F"] * a * math.sqrt(faith * suff)}


def summarize_steps(scores: list[dict], tasks: int, skipped: list[str]) -> dict:
    """The means of the step scores (SAA = mean A) with their denominators."""
    n = len(scores)

    def mean(k):
        return sum(s[k] for s in scores) / n if n else None
    out = {"SAA": mean("A"), "GACS": mean("GACS"), "Faith": mean("Faith"), "Suff": mean("Suff"), "F": mean("F"),
           "Type": mean("Type"), "Target": mean("Target"), "Content": mean("Content"), "Verb": mean("Verb"),
           "Obj": mean("Obj"), "n_steps": n, "n_tasks": tasks, "tasks_without_gold_actions": skipped}
    out["denominators"] = {"every mean": f"all {n} teacher-forced gold steps of {tasks} task(s); an output without "
                                         "a valid step scores 0"}
    return out


# -- gold steps and the teacher-forced pass ------------------------------------------------------

def gold_steps(raw: dict) -> list[GoldStep] | None:
    """A gold-guide record's steps with their actions, or None when some step has no valid action."""
    steps = []
    for st in raw.get("steps") or []:
        verb = st.get("action_type")
        if verb not in VERBS or (verb in ELEMENT_VERBS and not st.get("target")):
            return None
        steps.append(GoldStep(st["guide"], verb, st.get("target"), st.get("content")))
    return steps or None


def load_gold_steps(path: str | Path | None) -> dict[str, list[GoldStep] | None]:
    """task id -> its gold steps (None: the task's steps lack actions), from the gold-guide JSONL
    (``search.mag.metrics.load_gold_guides`` checks the file first)."""
    if path is None:
        return {}
    from search.mag.metrics import load_gold_guides

    load_gold_guides(path)
    return {str(rec["task_id"]): gold_steps(rec) for rec in
            (json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip())}


def find_mark(obs, text: str):
    """The mark whose visible text is ``text`` (case-insensitive), else the first that holds it."""
    want = (text or "").strip().lower()
    marks = [m for m in obs.marks if label(m).strip().lower() == want]
    marks = marks or [m for m in obs.marks if want and want in label(m).lower()]
    return marks[0] if marks else None


@dataclass(slots=True)
class ForcedTask:
    """One task's teacher-forced pass: its step scores, and why it stopped early (or None)."""

    task_id: str
    steps: list[dict]
    stopped: str | None = None


def teacher_forced(harness, propose, task_id: str, gold: list[GoldStep], grounding: str = "som",
                   seed: int = 0) -> ForcedTask:
    """Teacher-forced scores of one task (module docstring): ``propose(obs, guides, n, step)``
    is the policy (``search.mag.agent.MagPolicy.propose``), asked for one output per gold step."""
    from search.mag.agent import reset
    from search.mag.som import observe, to_code

    obs = reset(harness, seed)
    out = ForcedTask(task_id, [])
    for k, g in enumerate(gold):
        mark = find_mark(obs, g.target) if g.action_type in ELEMENT_VERBS else None
        if g.action_type in ELEMENT_VERBS and mark is None:
            out.stopped = f"step {k}: the gold target {g.target!r} is not on the page"
            break
        outputs = propose(obs, [s.guide for s in gold[:k]], 1, k)
        text = outputs[0] if outputs else ""
        out.steps.append({"step": k, "gold": asdict(g), "output": text, **score_step(text, obs, g, mark, grounding)})
        if g.action_type == "finish":
            break
        gold_step = Step("gold", g.action_type, g.content, g.guide, candidate_id=mark.id if mark else None)
        code, _ = to_code(gold_step, obs, "som")
        harness.step(code)
        obs = observe(harness)
    return out
