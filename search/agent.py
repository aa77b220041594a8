"""The BrowserGym-action agent: knockout best-of-N search over an LLM policy's N candidate
BrowserGym actions on the AXTree, with feedback on its last action.

    from search.agent import AXTreeAgent, Policy, execute
    policy = Policy(LLMConfig(base_url="http://gpu:8000/v1", model="gpt-4o", temperature=1.0))
    raws = policy.propose(obs, history=["click('12')"], feedback="navigated to /results", n=5)
    agent = AXTreeAgent(policy.propose, judge_for, n=5, seed=0)
    action, step = agent.get_action(obs)                   # BrowserGym's agent contract
    result = search.loop.run_episode(harness, agent, execute)

The prompt shows the goal, the URL, the AXTree (cut to ``budget`` characters by
``judgment.axtree.budget_axtree``; the CLIs' ``--policy-axtree-chars``, default 12,000), the actions
taken so far and textual feedback on the last action. Feedback follows OpenWebRL's idea: compare
the browser state before and after an action and say what happened (``describe_outcome``:
navigated or not, new tab, typed value differs from what was asked, scroll did not move, element
not found), so the policy sees failed actions
that BrowserGym reports as success; and, as OpenWebRL's App. A.2 does, which element lay under a
click's point (an overlay that took the click) and which element has focus after typing
(``element_notes``; on by default, ``--no-element-feedback`` leaves them out). N samples are one
request with the endpoint's ``n`` at temperature 1.0 (``--prm none`` asks for one greedy sample).
Building the prompt and reading the actions out of the answers are pure functions; only
``Policy.propose`` calls the model. Each answer's action is ``data.actions.extract_action``'s
(``candidate_text``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from data.actions import ActionParseError, parse_action

# The AXTree policy itself (prompt, sampling) is harness.policy's: teacher.replay runs it too.
from harness.policy import AXTREE_BUDGET, SYSTEM, Policy, build_messages, candidate_text, sample_texts  # noqa: F401
from harness.robust import element_text
from llm import LLMConfig
from search.loop import AgentKind, run_episode, sample
from search.tournament import pick, read_actions, screen


def _node_value(axtree: str, bid: str):
    from graph.axtree import AXTreeParseError, parse_axtree

    try:
        node = parse_axtree(axtree).by_bid().get(bid)
    except AXTreeParseError:
        return None, False
    return (node.value if node else None), node is not None


CLICK_OPS = ("click", "dblclick")
FOCUS_OPS = ("fill", "press", "focus", "clear")


def element_notes(act, under: dict | None, focused: dict | None) -> list[str]:
    """OpenWebRL A.2's element messages (pure): which element lay under the click point
    (``harness.robust.element_under``, read before the click) and which has focus after typing
    (``focused_element``, read after); none without probes."""
    notes = []
    if act.op in CLICK_OPS and under:
        if under.get("covered"):
            notes.append(f"the click landed on {element_text(under['under'])}, which covers [{act.bid}] "
                         f"{element_text(under['target'])} at its centre")
        else:
            notes.append(f"clicked {element_text(under['target'])}")
    if act.op in FOCUS_OPS:
        notes.append(f"focused element: {element_text(focused)}" if focused else "no element has focus")
    return notes


def describe_outcome(action: str, before, after, under: dict | None = None, focused: dict | None = None,
                     probed: bool = False) -> str:
    """What an action did, from the observations before and after it (pure); ``probed``: the
    harness's element probes were read (``under``, ``focused``: ``element_notes``)."""
    try:
        act = parse_action(action)
    except ActionParseError:
        return f"the action {action!r} could not be parsed"
    notes = element_notes(act, under, focused) if probed else []
    err = (after.last_action_error or "").strip()
    if err:
        first = err.splitlines()[0]
        if act.bid is not None and ("Could not find" in err or "not found" in err.lower()
                                    or "bid" in err and "Timeout" in err):
            notes.append(f"element not found: there is no element [{act.bid}] to {act.op} ({first[:160]})")
        else:
            notes.append(f"the action failed: {first[:200]}")
    if len(after.open_urls) > len(before.open_urls):
        notes.append(f"a new tab opened ({len(after.open_urls)} tabs; the active one is {after.active_tab})")
    elif len(after.open_urls) < len(before.open_urls):
        notes.append(f"a tab closed ({len(after.open_urls)} left)")
    if after.url != before.url:
        notes.append(f"navigated from {before.url} to {after.url}")
    elif act.op in ("click", "press", "goto", "go_back", "go_forward", "select_option", "dblclick"):
        notes.append(f"did not navigate (still at {after.url})")
    if act.op == "fill" and not err:
        value, found = _node_value(after.axtree, act.bid)
        if found and value is not None and str(value) != str(act.value):
            notes.append(f"typed value differs: the field shows {str(value)!r}, asked {act.value!r}")
    if act.op in ("scroll", "scroll_at") and tuple(after.scroll) == tuple(before.scroll) and not err:
        notes.append("scroll did not move (already at the edge, or nothing to scroll)")
    return "; ".join(notes) or "done, no visible change of URL or tabs"


@dataclass(slots=True)
class AXTreeStep:
    """One step of a BrowserGym-action episode (a line of ``tasks/<id>.jsonl``)."""

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


ANSWER_OPS = ("send_msg_to_user", "report_infeasible")


class AXTreeAgent:
    """Knockout best-of-N search over BrowserGym actions on the AXTree (``search.loop.Agent``):
    the policy (``propose(obs, history, feedback, n, step)``) sees the goal, URL, AXTree, the
    actions so far and feedback on the last one; candidates are screened against the AXTree's
    bids and knocked out by ``judge_for`` (None: one greedy sample, executed if valid). ``info``
    is the step's ``AXTreeStep``."""

    def __init__(self, propose, judge_for=None, n: int = 5, seed: int = 0, both_orders: bool = False):
        self.propose, self.judge_for, self.n, self.seed, self.both_orders = propose, judge_for, n, seed, both_orders
        self.history: list[str] = []        # actions executed (or refused), for the policy and the judge
        self.steps: list[AXTreeStep] = []

    def feedback(self) -> str:
        """What the last step did, for the policy: ``execute``'s note on its record, or why
        nothing ran."""
        if not self.steps:
            return ""
        last = self.steps[-1]
        if last.chosen is None:
            return f"none of your proposed actions was valid ({last.error[:300]})"
        return last.feedback

    def get_action(self, obs) -> tuple[str | None, AXTreeStep]:
        t = len(self.steps)
        step = AXTreeStep(t, obs.url, [], None, None)
        feedback = self.feedback()
        self.steps.append(step)
        outputs = step.candidates = sample(step, self.propose, (obs, self.history, feedback), self.n, self.judge_for)
        candidates = screen(outputs, read_actions(outputs, obs.axtree))
        winner = pick(step, candidates, self.judge_for, obs, self.history, self.seed, self.both_orders)
        if winner is None:
            step.error = "no valid candidate: " + "; ".join(c.dropped or "" for c in candidates)
            return None, step
        step.chosen = winner.action
        self.history.append(winner.action)
        return winner.action, step


def execute(harness, action: str, obs, step: AXTreeStep):
    """Run a BrowserGym action (``search.loop``'s page side): a ``goto`` outside the harness's
    hosts is refused (recorded, not run); the step records what the action did
    (``describe_outcome``, with OpenWebRL A.2's element messages when the harness probes:
    ``harness.element_probes``, ``--no-element-feedback`` turns them off);
    ``send_msg_to_user``/``report_infeasible`` answer."""
    parsed = parse_action(action)
    if refusal := harness.refused(parsed):
        step.error = step.feedback = refusal
        return obs, None
    probed = bool(getattr(harness, "element_probes", False))
    under = harness.element_under(parsed.bid) if probed and parsed.op in CLICK_OPS and parsed.bid else None
    after = harness.step(action)
    focused = harness.focused_element() if probed and parsed.op in FOCUS_OPS else None
    step.feedback = describe_outcome(action, obs, after, under, focused, probed)
    return after, (str(parsed.value) if parsed.op in ANSWER_OPS else None)


def run_axtree_episode(harness, propose, judge_for=None, n: int = 5, max_steps: int = 30, seed: int = 0,
                       max_format_errors: int | None = 3, both_orders: bool = False, on_step=None):
    """One BrowserGym-action episode on ``harness`` (``search.loop.run_episode`` with an
    ``AXTreeAgent``)."""
    agent = AXTreeAgent(propose, judge_for, n=n, seed=seed, both_orders=both_orders)
    return run_episode(harness, agent, execute, max_steps=max_steps, seed=seed,
                       max_format_errors=max_format_errors, on_step=on_step)


def axtree_policy(config, llm: LLMConfig):
    """A search config's AXTree policy (``--policy-axtree-chars``): its ``propose``."""
    return Policy(llm, budget=config.policy_axtree_chars).propose


def axtree_agent(config, propose, judge_for, seed: int) -> AXTreeAgent:
    """A search config's agent for one episode."""
    return AXTreeAgent(propose, judge_for, n=config.n, seed=seed, both_orders=config.both_orders)


@dataclass
class PolicyLLMConfig(LLMConfig):
    """The policy's ``LLMConfig`` (``--policy-*`` flags): ``max_tokens`` is per policy output."""

    max_tokens: int = field(default=LLMConfig.max_tokens, metadata={
        "min": 1, "help": "maximum completion tokens per policy output"})


AXTREE = AgentKind(policy=axtree_policy, agent=axtree_agent, execute=execute,       # WebArena-Lite, MiniWoB
                   policy_llm=PolicyLLMConfig)
