"""The one episode loop of knockout best-of-N search: propose N, screen, knock out, execute the
winner, repeat. Every benchmark runs it; an agent says how its policy's outputs act on the page.

    from search.loop import run_episode
    result = run_episode(harness, propose, judge_for, n=5, max_steps=30, seed=0)    # BrowserGym actions
    result = run_episode(harness, propose, judge_for, agent=MagAgent("som"), max_steps=25,
                         max_format_errors=None)                                   # MAG (search.mag_agent)
    result.termination, result.reward, result.steps

``propose`` is the policy (``search.agent.Policy.propose``, ``search.mag_agent.MagPolicy.propose``,
or a script in tests); the agent calls it with what the policy sees. ``judge_for(obs, history) ->
pair judge`` gives the tournament's judge for this state (``search.tournament.prm_pair_judge``
over ``prm.judge``; ``search.runner.judge_factory``), or ``judge_for=None`` for the unguided
baseline (one greedy sample, executed if valid).

An agent (``Agent``; default ``search.agent.AXTreeAgent``: BrowserGym actions on the AXTree):

    reset(harness, seed) -> obs          start the task; the first observation
    memory() -> Memory                   what the episode carries across steps (``history``: the
                                         actions executed so far, which the judge sees)
    new_step(t, obs) -> step record      a dataclass with the fields of ``STEP_RECORD``
    propose(policy, obs, memory, n, t)   the policy's raw outputs for this state
    screen(step, outputs, obs, memory)   tournament candidates (``search.tournament.screen``)
    no_winner(step, candidates, memory)  note a step without a valid candidate
    execute(harness, step, winner, obs, memory) -> (obs, answer)
                                         run the winning candidate; ``answer`` is not None when
                                         the agent answered (the episode ends)
    Result                               the episode's result class (``EpisodeResult``)

Every episode ends with a termination reason, so an environment failure is never counted as an
agent failure:
- ``answered``: the agent answered (``send_msg_to_user``/``report_infeasible``, MAG's ``finish``);
- ``task_done``: the task ended the episode after an action (``harness.task_done``: MiniWoB's
  tasks end at their first submit, right or wrong);
- ``step_budget``: ``max_steps`` steps without an answer;
- ``format_errors``: ``max_format_errors`` steps in a row without one valid candidate (None: no
  limit; MAG's invalid steps just use budget);
- ``env_error``: the browser or the task raised;
- ``site_unreachable``: the start page did not load;
- ``policy_error``: the policy model gave no answer (an outage).
The task's validator runs once, at the end, for the first four (``evaluated=True``); the others
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
from typing import Protocol

from search.env import SiteUnreachable
from search.tournament import knockout

AGENT_ENDINGS = ("answered", "task_done", "step_budget", "format_errors")     # evaluated
STEP_COUNTS = ("proposed", "screened_invalid", "screened_duplicate", "judge_calls", "judge_unparsed",
               "judge_truncated")
# what the loop writes on every agent's step record
STEP_RECORD = ("step", "bracket", "error", "policy_s", "judge_s", "browser_s") + STEP_COUNTS


class PolicyError(RuntimeError):
    """The policy model gave no answer (an outage, not a format error): ends the episode."""


@dataclass(slots=True)
class Memory:
    """What an episode carries from step to step; agents extend it with what their policy sees."""

    history: list[str] = field(default_factory=list)     # actions executed (or refused), for the judge


class Agent(Protocol):
    """How a policy's outputs act on the page (see the module docstring)."""

    Result: type

    def reset(self, harness, seed: int): ...
    def memory(self) -> Memory: ...
    def new_step(self, t: int, obs): ...
    def propose(self, policy, obs, memory: Memory, n: int, t: int) -> list: ...
    def screen(self, step, outputs: list, obs, memory: Memory) -> list: ...
    def no_winner(self, step, candidates: list, memory: Memory) -> None: ...
    def execute(self, harness, step, winner, obs, memory: Memory) -> tuple: ...


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
    steps: list = field(default_factory=list)
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


def run_episode(harness, propose, judge_for=None, n: int = 5, max_steps: int = 30, seed: int = 0,
                max_format_errors: int | None = 3, both_orders: bool = False, on_step=None,
                agent: Agent | None = None) -> EpisodeResult:
    """Run one episode on ``harness`` (a ``search.env.BrowserHarness``); see the module docstring.
    ``on_step(step, obs)`` is called after every step with the observation it was decided on."""
    if agent is None:
        from search.agent import AXTreeAgent

        agent = AXTreeAgent()
    try:
        obs = agent.reset(harness, seed)
    except SiteUnreachable as e:
        return agent.Result("site_unreachable", error=str(e))
    except Exception as e:
        return agent.Result("env_error", error=f"reset: {type(e).__name__}: {e}")
    result = agent.Result("step_budget")
    memory = agent.memory()
    invalid_in_a_row = 0
    for t in range(max_steps):
        step = agent.new_step(t, obs)
        result.steps.append(step)
        decided_on = obs
        try:
            clock = time.perf_counter()
            try:
                outputs = list(agent.propose(propose, obs, memory, n if judge_for else 1, t))
            except PolicyError as e:
                step.error = f"policy: {e}"
                result.termination, result.error = "policy_error", step.error
                break
            if not judge_for:       # the unguided baseline executes its one (greedy) sample
                outputs = outputs[:1]
            step.policy_s = time.perf_counter() - clock
            candidates = agent.screen(step, outputs, obs, memory)
            judge_clock = [0.0]
            judge = _timed(judge_for(obs, memory.history), judge_clock) if judge_for else _never_judge
            bracket = knockout(candidates, judge, seed=seed * 100_003 + t, both_orders=both_orders)
            step.judge_s, step.bracket = judge_clock[0], bracket.to_dict()
            record_bracket(step, bracket)
            if bracket.winner is None:      # nothing to execute; the step still counts
                agent.no_winner(step, candidates, memory)
                invalid_in_a_row += 1
                if max_format_errors is not None and invalid_in_a_row >= max_format_errors:
                    result.termination = "format_errors"
                    break
                continue
            invalid_in_a_row = 0
            winner = next(c for c in candidates if c.dropped is None and c.action == bracket.winner)
            before = harness.browser_s
            try:
                obs, answer = agent.execute(harness, step, winner, obs, memory)
            except Exception as e:
                step.error = f"env: {type(e).__name__}: {e}"
                result.termination, result.error = "env_error", step.error + "\n" + traceback.format_exc(limit=3)
                break
            finally:
                step.browser_s = harness.browser_s - before
            if answer is not None:
                result.termination, result.answer = "answered", answer
                break
            if getattr(harness, "task_done", False):
                result.termination = "task_done"
                break
        finally:
            if on_step:
                on_step(step, decided_on)
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
