"""The one episode loop of knockout best-of-N search: the agent picks an action, the page runs it,
repeat. Every benchmark runs it; the agent is the search strategy, BrowserGym's agent contract.

    from search.agent import AXTreeAgent, execute
    agent = AXTreeAgent(propose, judge_for, n=5, seed=0)
    result = run_episode(harness, agent, execute, max_steps=30, seed=0)      # BrowserGym actions
    result.termination, result.reward, result.steps

An agent has one method, ``get_action(obs) -> (action, info)``, as BrowserGym's agents:
``action`` is what to run on the page (None: no valid candidate this step) and ``info`` the step's
record (a dataclass with the fields of ``STEP_RECORD``: the candidates, the knockout bracket, the
screening and judgment counts, timings; a line of ``tasks/<id>.jsonl``). The agents are
``search.agent.AXTreeAgent`` (BrowserGym actions on the AXTree) and ``search.mag.agent.MagAgent``
(MAG's JSON steps on the Set-of-Mark page); each builds its candidates with its policy's
``propose`` and picks one with the tournament (``search.tournament.pick``) over ``judge_for(obs,
history) -> pair judge`` (``search.runner.judge_factory``), or for the unguided baseline
(``judge_for=None``) takes its one greedy sample.

The page side is two functions beside each agent: ``reset(harness, seed) -> obs`` (default
``harness.reset``) and ``execute(harness, action, obs, info) -> (obs, answer)``, which runs the
action, writes what it did on the step's record (feedback, the browser's error: the agent reads it
back at its next step, as a BrowserGym agent reads ``last_action_error``) and returns the answer
when the action answered (the episode ends).

Every episode ends with a termination reason, so an environment failure is never counted as an
agent failure:
- ``answered``: the agent answered (``send_msg_to_user``/``report_infeasible``, MAG's ``finish``);
- ``task_done``: the task ended the episode after an action (``harness.task_done``: MiniWoB's
  tasks end at their first submit, right or wrong);
- ``step_budget``: ``max_steps`` steps without an answer;
- ``format_errors``: ``max_format_errors`` steps in a row without one valid candidate (None: no
  limit; MAG's invalid steps just use budget);
- ``env_error``: the browser or the task raised;
- ``site_unreachable``: the start page did not load, in any of the harness's attempts (OpenWebRL
  A.1: ``harness.robust``, retried with backoff) or its host is on the blocklist;
- ``policy_error``: the policy model gave no answer (an outage: ``PolicyError``, which carries
  the step's record).
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
from typing import Callable, Protocol

from harness.env import SiteUnreachable
from harness.policy import PolicyError  # noqa: F401  (the policy's outage; search's agents raise it)
from search.tournament import STEP_COUNTS

AGENT_ENDINGS = ("answered", "task_done", "step_budget", "format_errors")     # evaluated
# what every agent's step record holds
STEP_RECORD = ("step", "bracket", "error", "policy_s", "judge_s", "browser_s") + STEP_COUNTS


class Agent(Protocol):
    """The search strategy (see the module docstring)."""

    def get_action(self, obs) -> tuple[str | None, object]: ...


def sample(step, propose, state: tuple, n: int, guided) -> list:
    """A step's policy outputs, ``propose(*state, n, step)``, timed on its record (``policy_s``):
    N samples when ``guided`` (a judge), else the unguided baseline's one greedy sample. An outage
    (``PolicyError``) carries the step's record, its error set."""
    clock = time.perf_counter()
    try:
        outputs = list(propose(*state, n if guided else 1, step.step))
    except PolicyError as e:
        step.error, e.step = f"policy: {e}", step
        raise
    step.policy_s = time.perf_counter() - clock
    return outputs if guided else outputs[:1]


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


def reset(harness, seed: int):
    """The first observation of a BrowserGym-action episode (the default ``reset``)."""
    return harness.reset(seed=seed)


@dataclass(frozen=True)
class AgentKind:
    """An agent and its page side, as a search run builds them (``search.runner.Benchmark.agent``):
    ``policy(config, llm_config) -> propose`` loads the policy once a run; ``agent(config, propose,
    judge_for, seed)`` is one episode's agent; ``reset`` and ``execute`` its page side (module
    docstring); ``result_class`` its episode result; ``harness_options`` its ``BrowserHarness``
    options (MAG: viewport, action subsets); ``policy_llm`` the policy's ``llm.LLMConfig`` class
    (its ``--policy-*`` flags and defaults: MAG's 1,024 tokens)."""

    policy: Callable
    agent: Callable
    execute: Callable
    policy_llm: type
    reset: Callable = reset
    result_class: type = EpisodeResult
    harness_options: dict = field(default_factory=dict)


def run_episode(harness, agent: Agent, execute, max_steps: int = 30, seed: int = 0,
                max_format_errors: int | None = 3, on_step=None, reset=reset,
                result_class=EpisodeResult) -> EpisodeResult:
    """Run one episode of ``agent`` on ``harness`` (a ``harness.env.BrowserHarness``) with the page
    side ``reset`` and ``execute``; see the module docstring. ``on_step(info, obs)`` is called
    after every step with the observation it was decided on. ``result_class``: the agent's
    ``EpisodeResult`` (MAG's adds its guides)."""
    try:
        obs = reset(harness, seed)
    except SiteUnreachable as e:
        return result_class("site_unreachable", error=str(e))
    except Exception as e:
        return result_class("env_error", error=f"reset: {type(e).__name__}: {e}")
    result = result_class("step_budget")
    invalid_in_a_row = 0
    for _ in range(max_steps):
        decided_on, step = obs, None
        try:
            try:
                action, step = agent.get_action(obs)
            except PolicyError as e:
                step = e.step
                result.termination, result.error = "policy_error", step.error
                break
            finally:
                if step is not None:
                    result.steps.append(step)
            if action is None:          # nothing to execute; the step still counts
                invalid_in_a_row += 1
                if max_format_errors is not None and invalid_in_a_row >= max_format_errors:
                    result.termination = "format_errors"
                    break
                continue
            invalid_in_a_row = 0
            before = harness.browser_s
            try:
                obs, answer = execute(harness, action, obs, step)
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
            if on_step and step is not None:
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
