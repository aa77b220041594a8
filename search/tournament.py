"""Knockout best-of-N: the PRM picks one of N candidate actions by a seeded single-elimination bracket.

What is the paper's and what is ours. surfPRM §5.1 says only that the policy proposes N=5
candidates and that the PRM "selects one via a knockout tournament". Everything else here is this
project's choice, not the paper's: dropping invalid candidates before the bracket, merging
duplicates, the seeded draw, the bye for an odd count, judging a round as one batch, the tie rule,
``both_orders``. A single-elimination bracket of N survivors then takes N-1 matches in
ceil(log2 N) rounds (a property of the bracket, not a figure the paper states).

    from search.tournament import knockout, prm_pair_judge
    result = knockout(["click('12')", "fill('34', 'shoes')", "click('12')"], judge,
                      axtree=obs_axtree_text, seed=7)
    result.winner, result.matches, result.to_dict()

Screening (``screen``, the one used by every agent): each proposal is read first (``Reading``:
BrowserGym actions by ``read_actions``, MAG outputs by ``search.mag.agent``); unreadable ones
(unparseable, targeting a bid absent from the current AXTree, ...) are dropped with a reason;
duplicates (the same page action) are merged into one representative and counted. One survivor
needs no judge call. Otherwise the survivors are shuffled by ``seed`` and paired in order; an odd
count gives the last one a bye. The matches of one round go to the judge as one batch. N survivors
take exactly N-1 matches in ceil(log2 N) rounds.

The judge is any callable ``judge(pairs) -> verdicts`` where ``pairs`` is a list of
``(action_1, action_2)`` canonical strings and each verdict is an object with ``verdict``
(1, 2 or None) and ``text`` (``prm.judge.Judgment``), a ``(verdict, text)`` tuple, or a bare int.
With ``both_orders`` every match is also judged swapped (same batch); a match goes to the action
with more votes. A tie, or no parsed verdict at all, goes to the action drawn first in the bracket
(a seeded, unbiased coin) and is marked ``tie``. A judgment cut at the length limit before a
valid answer (``Judgment.truncated``) is handled like an unparsed one but marked ``truncated``.

Accounting (``TournamentResult.screened`` / ``.judgments``, both in ``to_dict``): candidates
screened out before the bracket (``invalid``: unparseable, a bid not in the AXTree, or a caller's
reason; ``duplicate``: merged into an earlier one) and the judge's prompts by outcome (``calls``,
``verdicts``, ``unparsed``: no valid answer or an outage, ``truncated``).
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from data.actions import ELEMENT_OPS, ActionParseError, parse_action

PairJudge = Callable[[list[tuple[str, str]]], Sequence]
# the screening and judgment counts every step record holds (``record_counts``)
STEP_COUNTS = ("proposed", "screened_invalid", "screened_duplicate", "judge_calls", "judge_unparsed",
               "judge_truncated")


@dataclass(slots=True)
class Candidate:
    """One proposal as the policy wrote it, and what the tournament made of it."""

    index: int                    # position in the policy's list
    raw: str
    action: str | None = None     # canonical string (what the judge sees), None when unreadable
    dropped: str | None = None    # reason: 'unparseable: ...', 'bid not in AXTree: ...', 'duplicate of N'
    count: int = 1                # proposals merged into this one (valid survivors only)


@dataclass(slots=True)
class Match:
    round: int
    a1: str
    a2: str
    winner: str
    verdict: int | None           # the first-order verdict (1 = a1, 2 = a2, None = unparsed)
    judgment: str
    verdict_swapped: int | None = None     # both orders: the verdict on (a2, a1)
    judgment_swapped: str | None = None
    tie: bool = False
    truncated: bool = False                # the first-order judgment hit the length limit
    truncated_swapped: bool = False


@dataclass(slots=True)
class Bye:
    round: int
    action: str


@dataclass(slots=True)
class TournamentResult:
    winner: str | None            # None when no candidate is valid
    candidates: list[Candidate]
    matches: list[Match] = field(default_factory=list)
    byes: list[Bye] = field(default_factory=list)
    rounds: int = 0
    seed: int | None = None

    @property
    def survivors(self) -> list[str]:
        return [c.action for c in self.candidates if c.dropped is None]

    @property
    def calls(self) -> int:
        """Judge prompts issued (2 per match when judged in both orders)."""
        return sum(1 + (m.verdict_swapped is not None or m.judgment_swapped is not None) for m in self.matches)

    @property
    def screened(self) -> dict:
        """Candidates screened out before the bracket: ``invalid`` and ``duplicate``."""
        return screen_counts(self.candidates)

    @property
    def judgments(self) -> dict:
        """The judge's prompts by outcome: ``calls``, ``verdicts``, ``unparsed``, ``truncated``."""
        first = [(m.verdict, m.truncated) for m in self.matches]
        swapped = [(m.verdict_swapped, m.truncated_swapped) for m in self.matches
                   if m.verdict_swapped is not None or m.judgment_swapped is not None]
        every = first + swapped
        return {"calls": len(every), "verdicts": sum(v is not None for v, _ in every),
                "unparsed": sum(v is None and not t for v, t in every),
                "truncated": sum(v is None and t for v, t in every)}

    def to_dict(self) -> dict:
        return {"winner": self.winner, "rounds": self.rounds, "seed": self.seed,
                "candidates": [asdict(c) for c in self.candidates],
                "matches": [asdict(m) for m in self.matches], "byes": [asdict(b) for b in self.byes],
                "screened": self.screened, "judgments": self.judgments}


def screen_counts(candidates: Sequence[Candidate]) -> dict:
    """How many candidates were dropped before the bracket, as ``invalid`` (any reason but a
    merge) and ``duplicate`` (merged into an earlier candidate)."""
    dup = sum(bool(c.dropped) and c.dropped.startswith("duplicate of") for c in candidates)
    return {"invalid": sum(c.dropped is not None for c in candidates) - dup, "duplicate": dup}


def _bids(axtree) -> set[str] | None:
    if axtree is None:
        return None
    if isinstance(axtree, str):
        from graph.axtree import AXTreeParseError, parse_axtree

        try:
            axtree = parse_axtree(axtree)
        except AXTreeParseError:
            return set()
    if isinstance(axtree, (set, frozenset)):
        return set(axtree)
    return set(axtree.by_bid())


@dataclass(slots=True, frozen=True)
class Reading:
    """What an agent makes of one raw proposal before the bracket (``screen``)."""

    key: str | None = None        # the page action it runs: proposals with the same key are duplicates
    shown: str | None = None      # what the judge sees of it (default: ``key``); unique per key
    dropped: str | None = None    # why it cannot enter the bracket ('unparseable: ...', 'invalid: ...')
    preferred: bool = True        # among duplicates, a preferred proposal represents the group


def screen(raws: Sequence, readings: Sequence[Reading]) -> list[Candidate]:
    """The tournament's candidates for one step's proposals and their ``readings``: a dropped
    proposal keeps its reason (an unreadable one has no ``action``); duplicates (same ``key``)
    merge into one representative, the first one unless a later one is ``preferred`` and the
    first is not, and are counted on it."""
    out: list[Candidate] = []
    first: dict[str, Candidate] = {}
    for i, (raw, r) in enumerate(zip(raws, readings, strict=True)):
        c = Candidate(i, raw if isinstance(raw, str) else repr(raw))
        out.append(c)
        if r.dropped is not None or r.key is None:
            c.dropped = r.dropped or "unreadable"
            continue
        c.action = r.shown if r.shown is not None else r.key
        rep = first.get(r.key)
        if rep is not None and (readings[rep.index].preferred or not r.preferred):
            c.dropped = f"duplicate of {rep.index}"
            rep.count += 1
            continue
        if rep is not None:      # a preferred proposal replaces the representative
            rep.dropped, c.count = f"duplicate of {i}", rep.count + 1
        first[r.key] = c
    return out


def read_actions(raws: Sequence, axtree=None) -> list[Reading]:
    """Readings of BrowserGym action strings: parsed (else 'unparseable'), targets checked
    against the AXTree (text, ``AXTree`` or a set of bids; None: no check), keyed by the
    canonical action."""
    bids = _bids(axtree)
    out = []
    for raw in raws:
        try:
            action = parse_action(raw if isinstance(raw, str) else "")
        except ActionParseError as e:
            out.append(Reading(dropped=f"unparseable: {e}"))
            continue
        if bids is not None and action.op in ELEMENT_OPS:
            targets = [str(action.args[0][1])]
            if action.op == "drag_and_drop":
                targets.append(str(action.args[1][1]))
            missing = [b for b in targets if b not in bids]
            if missing:
                out.append(Reading(dropped=f"bid not in AXTree: {missing[0]}"))
                continue
        out.append(Reading(key=action.to_string()))
    return out


def _verdict(v) -> tuple[int | None, str, bool]:
    """(verdict 1|2|None, text, truncated) of whatever the judge returned for one prompt."""
    truncated = False
    if isinstance(v, tuple):
        verdict, text = v
    elif isinstance(v, int) or v is None:
        verdict, text = v, ""
    else:
        verdict, text = v.verdict, getattr(v, "text", "") or getattr(v, "infra_error", "") or ""
        truncated = bool(getattr(v, "truncated", False))
    verdict = verdict if verdict in (1, 2) else None
    return verdict, str(text), truncated and verdict is None


def knockout(candidates: Sequence[str] | Sequence[Candidate], judge: PairJudge, axtree=None,
             seed: int | None = 0, both_orders: bool = False) -> TournamentResult:
    """Pick one candidate by knockout; see the module docstring. ``candidates`` are raw action
    strings (screened here against ``axtree``), or ``Candidate``s an agent screened itself
    (``screen``: each ``action`` is the text the judge sees, unique among survivors)."""
    if candidates and all(isinstance(c, Candidate) for c in candidates):
        screened = list(candidates)
    else:
        screened = screen(candidates, read_actions(candidates, axtree))
    result = TournamentResult(winner=None, candidates=screened, seed=seed)
    alive = [c.action for c in screened if c.dropped is None]
    if not alive:
        return result
    random.Random(seed).shuffle(alive)
    rnd = 0
    while len(alive) > 1:
        rnd += 1
        pairs = [(alive[i], alive[i + 1]) for i in range(0, len(alive) - 1, 2)]
        prompts = pairs + ([(b, a) for a, b in pairs] if both_orders else [])
        verdicts = list(judge(prompts))
        if len(verdicts) != len(prompts):
            raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(prompts)} pairs")
        nxt = []
        for k, (a1, a2) in enumerate(pairs):
            v1, j1, t1 = _verdict(verdicts[k])
            votes = {1: 0, 2: 0}
            if v1:
                votes[v1] += 1
            m = Match(rnd, a1, a2, a1, v1, j1, truncated=t1)
            if both_orders:
                v2, j2, m.truncated_swapped = _verdict(verdicts[len(pairs) + k])
                m.verdict_swapped, m.judgment_swapped = v2, j2
                if v2:
                    votes[3 - v2] += 1      # swapped: verdict 1 names a2
            m.tie = votes[1] == votes[2]
            m.winner = a2 if votes[2] > votes[1] else a1
            result.matches.append(m)
            nxt.append(m.winner)
        if len(alive) % 2:
            result.byes.append(Bye(rnd, alive[-1]))
            nxt.append(alive[-1])
        alive = nxt
    result.winner, result.rounds = alive[0], rnd
    return result


def pick(step, candidates: Sequence[Candidate], judge_for, obs, history: list[str], seed: int,
         both_orders: bool = False) -> Candidate | None:
    """One search step's knockout: ``candidates`` (screened) judged by ``judge_for(obs, history)``
    (None: the unguided baseline, which never needs a judge), the bracket drawn from the episode's
    ``seed`` and the step; the bracket, the judge's seconds and the counts (``STEP_COUNTS``) go on
    the step record. The winning candidate, or None when none is valid."""
    clock = [0.0]
    judge = _timed(judge_for(obs, history), clock) if judge_for else _never_judge
    bracket = knockout(candidates, judge, seed=seed * 100_003 + step.step, both_orders=both_orders)
    step.judge_s, step.bracket = clock[0], bracket.to_dict()
    record_counts(step, bracket)
    if bracket.winner is None:
        return None
    return next(c for c in candidates if c.dropped is None and c.action == bracket.winner)


def record_counts(step, bracket: TournamentResult) -> None:
    """Copy a tournament's screening and judgment counts onto a step record (``STEP_COUNTS``)."""
    screened, judged = bracket.screened, bracket.judgments
    step.proposed = len(bracket.candidates)
    step.screened_invalid, step.screened_duplicate = screened["invalid"], screened["duplicate"]
    step.judge_calls, step.judge_unparsed, step.judge_truncated = (judged["calls"], judged["unparsed"],
                                                                   judged["truncated"])


def _timed(judge, clock: list[float]):
    def call(pairs):
        t = time.perf_counter()
        try:
            return judge(pairs)
        finally:
            clock[0] += time.perf_counter() - t
    return call


def _never_judge(pairs):
    raise AssertionError("the unguided baseline proposes one candidate and never judges")


def prm_pair_judge(judge_, state, budget: int | None = None, fmt=None) -> PairJudge:
    """Adapt a ``prm.judge`` judge (local or endpoint) and a ``data.state.State`` to the
    tournament's pair judge: one batched ``judge_pairs`` call per round, in the comparative-judgment
    format (or ``fmt``, a ``judgment.format.JudgmentFormat``: ``--prm-prompt-template``)."""
    from judgment.format import DEFAULT_FORMAT
    from prm.judge import judge_pairs

    def call(pairs: list[tuple[str, str]]):
        return judge_pairs(judge_, [(state, a1, a2) for a1, a2 in pairs], budget=budget, fmt=fmt or DEFAULT_FORMAT)

    return call


def prm_format(config):
    """The PRM's ``JudgmentFormat`` from a search config's ``prm_prompt_template``
    (``--prm-prompt-template FILE``; ValueError on a bad template)."""
    from judgment.format import DEFAULT_FORMAT, JudgmentFormat

    path = getattr(config, "prm_prompt_template", None)
    return JudgmentFormat.from_options(path) if path else DEFAULT_FORMAT


def prm_state(obs, history):
    """The PRM's state for a search step (``data.state.State``): the goal, the AXTree, the
    current URL, the task's real start URL (``obs.start_url``, set by the harness from the task:
    not the current page, nor the first page observed when they differ) and the executed actions."""
    from data.state import State

    return State(intent=obs.goal, axtree=obs.axtree, url=obs.url, start_url=getattr(obs, "start_url", "") or "",
                 history=list(history))
