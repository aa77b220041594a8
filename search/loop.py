"""One episode of knockout best-of-N search: propose N, knock out, execute the winner, repeat.

    from search.loop import run_episode
    result = run_episode(harness, propose, judge_for, n=5, max_steps=30, seed=0)
    result.termination, result.reward, result.steps

``propose(obs, history, feedback, n, step) -> list[str]`` gives raw candidate actions (a
``search.agent.Policy``'s ``propose``, or a script in tests). ``judge_for(obs, history) -> pair judge``
gives the tournament's judge for this state (``search.tournament.prm_pair_judge`` over
``prm.judge``), or ``judge_for=None`` for the unguided baseline (the first valid candidate).

Every episode ends with a termination reason, so an environment failure is never counted as an
agent failure:
- ``answered``: the agent ran ``send_msg_to_user`` or ``report_infeasible``;
- ``step_budget``: ``max_steps`` actions without an answer;
- ``format_errors``: ``max_format_errors`` steps in a row without one valid candidate;
- ``env_error``: the browser or the task raised;
- ``site_unreachable``: the start page did not load;
- ``policy_error``: the policy model gave no answer (an outage).
The task's validator runs once, at the end, for the first three (``evaluated=True``); the others
have ``reward=None``.

Every step records what happened before and in its tournament: ``proposed`` candidates,
``screened_invalid`` / ``screened_duplicate`` (dropped before the bracket), ``judge_calls`` and
the judgments without a verdict, ``judge_unparsed`` and ``judge_truncated`` (cut at the length
limit); ``EpisodeResult.totals`` sums them over the episode (``STEP_COUNTS``).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass, field

from data.actions import parse_action
from search.agent import PolicyError, describe_outcome
from search.env import SiteUnreachable
from search.tournament import knockout

AGENT_ENDINGS = ("answered", "step_budget", "format_errors")
STEP_COUNTS = ("proposed", "screened_invalid", "screened_duplicate", "judge_calls", "judge_unparsed",
               "judge_truncated")


@dataclass(slots=True)
class Step:
    step: int
    url: str
    candidates: list[str]
    bracket: dict | None
    chosen: str | None
    feedback: str = ""
    error: str = ""
    policy_s: float = 0.0
    judge_s: float = 0.0
    browser_s: float = 0.0
    proposed: int = 0                  # candidates the policy gave (before screening)
    screened_invalid: int = 0          # dropped before the bracket: unparseable, bid not in the AXTree, ...
    screened_duplicate: int = 0        # merged into an earlier candidate
    judge_calls: int = 0
    judge_unparsed: int = 0            # judgments without a valid answer (or an outage)
    judge_truncated: int = 0           # judgments cut at the length limit before an answer


def record_bracket(step, bracket) -> None:
    """Copy a tournament's screening and judgment counts onto a step record (``STEP_COUNTS``)."""
    screened, judged = bracket.screened, bracket.judgments
    step.proposed = len(bracket.candidates)
    step.screened_invalid, step.screened_duplicate = screened["invalid"], screened["duplicate"]
    step.judge_calls, step.judge_unparsed, step.judge_truncated = (judged["calls"], judged["unparsed"],
                                                                   judged["truncated"])


def sum_counts(records) -> dict:
    """``STEP_COUNTS`` summed over step records or over dicts holding them (result rows' ``totals``)."""
    def get(r, k):
        return (r.get(k) or 0) if isinstance(r, dict) else getattr(r, k, 0)
    return {k: sum(get(r, k) for r in records) for k in STEP_COUNTS}


@dataclass(slots=True)
class EpisodeResult:
    termination: str
    reward: float | None = None
    evaluated: bool = False
    steps: list[Step] = field(default_factory=list)
    answer: str | None = None
    error: str = ""
    eval_info: dict = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return bool(self.reward and self.reward > 0)

    @property
    def totals(self) -> dict:
        """The steps' screening and judgment counts summed over the episode."""
        return sum_counts(self.steps)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["success"] = self.success
        d["totals"] = self.totals
        d["eval_info"] = {k: v for k, v in self.eval_info.items() if isinstance(v, (str, int, float, bool, type(None)))}
        return d


def _timed_judge(judge, clock: list[float]):
    def call(pairs):
        t = time.perf_counter()
        try:
            return judge(pairs)
        finally:
            clock[0] += time.perf_counter() - t
    return call


def run_episode(harness, propose, judge_for=None, n: int = 5, max_steps: int = 30, seed: int = 0,
                max_format_errors: int = 3, both_orders: bool = False, on_step=None) -> EpisodeResult:
    """Run one episode on ``harness`` (a ``search.env.BrowserHarness``); see the module docstring."""
    try:
        obs = harness.reset(seed=seed)
    except SiteUnreachable as e:
        return EpisodeResult("site_unreachable", error=str(e))
    except Exception as e:
        return EpisodeResult("env_error", error=f"reset: {type(e).__name__}: {e}")
    result = EpisodeResult("step_budget")
    history: list[str] = []
    feedback = ""
    bad_in_a_row = 0
    for t in range(max_steps):
        step = Step(t, obs.url, [], None, None)
        result.steps.append(step)
        try:
            clock = time.perf_counter()
            try:
                step.candidates = list(propose(obs, history, feedback, n if judge_for else 1, t))
                if not judge_for:       # the unguided baseline executes its one (greedy) sample
                    step.candidates = step.candidates[:1]
            except PolicyError as e:
                step.error = f"policy: {e}"
                result.termination, result.error = "policy_error", step.error
                break
            step.policy_s = time.perf_counter() - clock
            judge_clock = [0.0]
            judge = _timed_judge(judge_for(obs, history), judge_clock) if judge_for else never_judge
            bracket = knockout(step.candidates, judge, axtree=obs.axtree, seed=seed * 100_003 + t,
                               both_orders=both_orders)
            step.judge_s, step.bracket, step.chosen = judge_clock[0], bracket.to_dict(), bracket.winner
            record_bracket(step, bracket)
            if bracket.winner is None:
                bad_in_a_row += 1
                step.error = "no valid candidate: " + "; ".join(c.dropped or "" for c in bracket.candidates)
                feedback = f"none of your proposed actions was valid ({step.error[:300]})"
                if bad_in_a_row >= max_format_errors:
                    result.termination = "format_errors"
                    break
                continue
            bad_in_a_row = 0
            action = parse_action(bracket.winner)
            refusal = harness.refused(action)
            if refusal:
                step.error = feedback = step.feedback = refusal
                history.append(bracket.winner)
                continue
            before_s = harness.browser_s
            try:
                after = harness.step(bracket.winner)
            except Exception as e:
                step.error = f"env: {type(e).__name__}: {e}"
                result.termination, result.error = "env_error", step.error + "\n" + traceback.format_exc(limit=3)
                step.browser_s = harness.browser_s - before_s
                break
            step.browser_s = harness.browser_s - before_s
            step.feedback = feedback = describe_outcome(bracket.winner, obs, after)
            history.append(bracket.winner)
            obs = after
            if action.op in ("send_msg_to_user", "report_infeasible"):
                result.termination, result.answer = "answered", str(action.value)
                break
        finally:
            if on_step:
                on_step(step)
    return evaluate_episode(harness, result)


def evaluate_episode(harness, result):
    """Run the task's evaluator once for an episode the agent ended; an evaluator crash turns
    the episode into an ``env_error``. Returns ``result``."""
    if result.termination in AGENT_ENDINGS:
        try:
            result.reward, result.eval_info = harness.evaluate()
            result.evaluated = True
        except Exception as e:
            result.termination, result.error = "env_error", f"evaluate: {type(e).__name__}: {e}"
    return result


def never_judge(pairs):
    raise AssertionError("the unguided baseline proposes one candidate and never judges")
