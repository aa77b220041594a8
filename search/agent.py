"""The BrowserGym-action agent: knockout best-of-N search over an LLM policy's N candidate
BrowserGym actions on the AXTree, with feedback on its last action.

    from search.agent import AXTreeAgent, Policy, execute
    policy = Policy(LLMConfig(base_url="http://gpu:8000/v1", model="gpt-4o", temperature=1.0))
    raws = policy.propose(obs, history=["click('12')"], feedback="navigated to /results", n=5)
    agent = AXTreeAgent(policy.propose, judge_for, n=5, seed=0)
    action, step = agent.get_action(obs)                   # BrowserGym's agent contract
    result = search.loop.run_episode(harness, agent, execute)

The prompt shows the goal, the URL, the AXTree (cut to ``budget`` characters by
``data.judgment.budget_axtree``; the CLIs' ``--policy-axtree-chars``, default 12,000), the actions
taken so far and textual feedback on the last action. Feedback follows OpenWebRL's idea: compare
the browser state before and after an action and say what happened (``describe_outcome``: navigated or not, new tab, typed value differs
from what was asked, scroll did not move, element not found), so the policy sees failed actions
that BrowserGym reports as success. N samples are one request with the endpoint's ``n`` at
temperature 1.0 (``--prm none`` asks for one greedy sample). Building the prompt and reading the
actions out of the answers are pure functions; only ``Policy.propose`` calls the model. Each
answer's action is ``data.actions.extract_action``'s (``candidate_text``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from data.actions import ActionParseError, extract_action, parse_action, split_agent_output
from data.judgment import budget_axtree
from llm import LLMClient, LLMConfig
from search.loop import AgentKind, PolicyError, run_episode, sample
from search.tournament import pick, read_actions, screen

SYSTEM = """You are a web agent operating a browser through BrowserGym actions. Each turn you see the \
goal, the current URL, the page's accessibility tree (elements carry ids in brackets, e.g. [12]), \
the actions taken so far and what the last action did. Reply with one short thought, then exactly \
one action in a fenced code block, e.g.
```
click('12')
```
Actions: click(bid), fill(bid, text), select_option(bid, option), press(bid, key_comb), \
hover(bid), check(bid), uncheck(bid), scroll(dx, dy), go_back(), go_forward(), goto(url), \
new_tab(), tab_close(), tab_focus(index), send_msg_to_user(text) to give the final answer \
(or to say the task is done), report_infeasible(reason)."""

AXTREE_BUDGET = 12_000      # the policy's AXTree characters (~3k tokens), as the PRM's; --policy-axtree-chars


def build_messages(goal: str, axtree: str, url: str, history: list[str], feedback: str = "",
                   budget: int = AXTREE_BUDGET) -> list[dict]:
    """The policy's chat prompt for one step (pure)."""
    tree, _ = budget_axtree(axtree, set(), budget)
    past = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(history)) or "(none yet)"
    user = (f"# Goal\n{goal}\n\n# Current URL\n{url}\n\n# Accessibility tree\n{tree}\n\n"
            f"# Actions so far\n{past}\n\n# What the last action did\n{feedback or '(first step)'}\n\n"
            "Next action?")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def candidate_text(text: str) -> str:
    """The action text of one answer (``data.actions.extract_action``); when it holds no single
    action, its last fenced block, else the raw text (the tournament then drops it as unparseable,
    with that text shown)."""
    action = extract_action(text)
    if action is not None:
        return action.to_string()
    try:
        return split_agent_output(text)[1]
    except ActionParseError:
        return (text or "").strip()


class Policy:
    """N candidate actions per step from an LLM through ``llm.client``."""

    def __init__(self, config: LLMConfig, budget: int = AXTREE_BUDGET):
        self.config, self.budget = config, budget
        self.client = LLMClient(config)

    def propose(self, obs, history: list[str], feedback: str, n: int, step: int = 0) -> list[str]:
        """``n`` raw action texts (one greedy answer when ``n == 1`` and temperature is 0)."""
        messages = build_messages(obs.goal, obs.axtree, obs.url, history, feedback, self.budget)
        return [candidate_text(t) for t in sample_texts(self.client, messages, n, step, "search.policy")]


def sample_texts(client: LLMClient, messages: list[dict], n: int, step: int, stage: str) -> list[str]:
    """``n`` answers to one prompt in one request; the seed varies with the step so that cached
    N-samples are not the same at every step. An outage raises ``PolicyError``."""
    result = client.chat(messages, stage=stage, n=n, seed=(client.config.seed or 0) + step)
    if not result.ok:
        raise PolicyError(result.infra_error)
    return list(result.texts)


def _node_value(axtree: str, bid: str):
    from graph.axtree import AXTreeParseError, parse_axtree

    try:
        node = parse_axtree(axtree).by_bid().get(bid)
    except AXTreeParseError:
        return None, False
    return (node.value if node else None), node is not None


def describe_outcome(action: str, before, after) -> str:
    """What an action did, from the observations before and after it (pure)."""
    try:
        act = parse_action(action)
    except ActionParseError:
        return f"the action {action!r} could not be parsed"
    notes = []
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
    (``describe_outcome``); ``send_msg_to_user``/``report_infeasible`` answer."""
    parsed = parse_action(action)
    if refusal := harness.refused(parsed):
        step.error = step.feedback = refusal
        return obs, None
    after = harness.step(action)
    step.feedback = describe_outcome(action, obs, after)
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
