"""Ground truth for a candidate pair by replaying it in MiniWoB++: ``teacher.verify --verifier replay``.

    python -m teacher.verify --run RUN --verifier replay [--replay-solver-steps 10] [--replay-workers 0]
    python -m teacher.verify --run RUN --verifier replay --replay-continuation policy --replay-rollouts 4 \
        [--replay-policy-base-url URL --replay-policy-model M --replay-policy-temperature 1.0]

For runs whose trajectories are MiniWoB++ episodes (``meta.task`` and ``meta.seed``, or a
``task_id`` ``<task>.<seed>`` as ``search.miniwob`` writes it). The pairs of one step (same task,
seed, history a_1 .. a_{t-1}, O_t and a⁺: ``steps``) are replayed together:

1. reset the task with its seed and replay the history; the replayed O_t must match the recorded
   one (``normalize_axtree``: the AXTree text with the task page's location cut to its file name,
   so that a run recorded in another checkout still matches, and without the clickable generic
   nodes ``harness.env.flatten_axtree`` prints, so that a run recorded before it printed them
   still matches). A mismatch, or a history action that
   now fails or is refused, is ``replay_mismatch``: no verdict, the step's pairs are discarded;
2. run a⁺ and record the resulting state (hash of the normalised AXTree, the task's reward and
   done flag), then let the continuation finish the task from there (at most ``solver_steps``
   steps). This side is replayed once per step, whatever the number of its negatives;
3. for each a⁻: reset and replay again (the O_t check again), run a⁻, record its state and, unless
   it is a⁺'s state or the action failed, let the continuation finish.

The browser is ``harness.lean``'s: one Chromium page kept for all resets (a new document each), and
observations reduced to the elements' marks and, where the judge reads it, the AXTree; actions run
through BrowserGym's action execution. Every action (history, a⁺, a⁻, the continuation's) runs only
as ``harness.lean.vet`` passes it: one call of the run's action set with literal arguments, ``goto``
confined to the task's hosts (none for ``file://`` pages), ``noop`` waits of at most
``harness.lean.MAX_WAIT_MS``; what runs is that one call's canonical text.

**Continuation** (``--replay-continuation``): ``solver`` (default), the task's scripted solver
(``harness.solvers``), deterministic, one run a side. Outcomes, first match wins:

- ``not_executable``: a⁻ raised an error in the browser (BrowserGym's ``last_action_error``) or was refused;
- ``equivalent``: a⁻ leads to the same state as a⁺ (same hash, reward and done), or the solver
  finishes the task from a⁻ in no more steps than from a⁺ (the same completed reward path; also
  when the solver finishes from a⁻ but not from a⁺). A false negative: discarded;
- ``harmful``: the task ends failed after a⁻, or the solver cannot finish it;
- ``detour``: the solver finishes, but needs more steps than after a⁺ (a⁻ changed nothing useful,
  or undid something a step must repair).

``policy``: the AXTree policy of ``search.miniwob`` (``harness.policy``) on the model of the
``--replay-policy-*`` flags (``llm.LLMConfig``: the embedded model, or an OpenAI-compatible
endpoint), one sample per step, ``--replay-rollouts M`` rollouts a side, rollout r sampling with
seed + r (temperature 0 makes them one greedy rollout repeated). Its prompt is search's (goal, URL,
AXTree, actions so far); its feedback on the last action is shorter than ``search.agent``'s: the
action's error line, else "done". Each side's ``successes`` (rollouts
that end with the task's reward 1) decide, first match wins: ``not_executable`` and ``equivalent``
(same state) as above; ``harmful`` when a⁻ ended the task failed; ``equivalent`` when a⁻'s successes
are not fewer than a⁺'s; ``harmful`` when a⁻ has none (and a⁺ some); ``detour`` when a⁻ has some,
but fewer than a⁺. The counts and each rollout are in the evidence (``successes``, ``rollouts``,
``rollout_runs``).

Kept: ``harmful``, ``detour``, ``not_executable`` (``KEPT``). Every sampled pair is replayed as
given: a negative that only writes the positive differently (``click("12")`` for
``click('12')``) reaches the positive's state and is ``equivalent``.

A side in which any browser action hit a Playwright timeout (BrowserGym allows its actions 500
ms, which a loaded machine exceeds) is replayed again, up to ``TIMEOUT_RETRIES`` more times.

``--replay-workers N`` replays steps in N spawned processes (default 0: two per core: a replay
waits on its page about half the time, BrowserGym's pre-observation delay after every action
above all, so a second browser per core fills the waits; ``bench/RESULTS.md``), each with its own
harness and browser, kept across tasks (``LeanHarness.retask``); the outcomes and outputs are
those of one worker (``replay_all``).

A finished pair's outcome is stored in a disk cache (``llm.cache.ResponseCache``, the LLM
teacher's resume mechanism) as soon as it is decided, keyed by everything the replay depends on,
so a killed run resumes without replaying a finished pair, and a rerun writes the same bytes (an
outcome that still shows a Playwright timeout is not stored: a later run replays it). A
cache folder that cannot be written gives a warning and a run without the cache. What would fail
only after work is done is refused first, in one line: a ``meta.seed`` outside 0 .. 2**32-1, a
task without a solver, a ``MINIWOB_URL`` that lacks the pages or does not answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from cli.config import Configurable
from data.rundir import RunDir
from harness.lean import ActionRefused, vet
from judgment.pairs import Pair
from judgment.parse import answer_text

OUTCOMES = ("equivalent", "harmful", "detour", "not_executable", "replay_mismatch")
KEPT = ("harmful", "detour", "not_executable")
# Bump when the replay's rules change: cached outcomes of another version are not reused.
REPLAY_VERSION = 3
CONTINUATIONS = ("solver", "policy")
MAX_SEED = 2**32 - 1        # MiniWoB's tasks seed numpy's RandomState: 0 .. 2**32 - 1
# A replay in which a browser action hit a Playwright timeout (BrowserGym gives its actions 500 ms,
# which a loaded machine can exceed) is replayed again, at most this many more times; a timeout that
# recurs every time (a click on a covered element) stands.
TIMEOUT_RETRIES = 2
_TASK_ID = re.compile(r"^(?:miniwob\.)?(?P<task>[a-z0-9-]+)\.(?P<seed>\d+)$")
# url='file:///any/checkout/.../miniwob/click-button.html' -> url='click-button.html'
_PAGE_URL = re.compile(r"url='[^']*/([^/']+)'")
# [12] generic, clickable=True (harness.env.flatten_axtree): BrowserGym's flattening skips such a node
_CLICKABLE_GENERIC = re.compile(r"(\t*)\[[^\]]*\] generic(?: (?:'.*'|\".*\"))?, clickable=True")


@dataclass
class ReplayConfig(Configurable):
    """How ``--verifier replay`` replays pairs (``--replay-*``)."""

    ARG_GROUP = "replay verifier"

    solver_steps: int = field(default=10, metadata={
        "min": 1, "help": "steps the continuation (the scripted solver, or the policy) may take to finish the "
                          "task after a+ or a-"})
    cache_dir: str = field(default=".cache/replay", metadata={
        "help": "finished pairs' outcomes; a rerun (after a kill) replays only the others"})
    no_cache: bool = field(default=False, metadata={"help": "replay every pair, store nothing"})
    workers: int = field(default=0, metadata={
        "min": 0, "help": "worker processes, each with its own browser, replaying whole steps; 0: two per core; "
                          "the outputs are those of one worker"})
    # -- issue 37: any policy as the continuation (kept last) --
    continuation: str = field(default="solver", metadata={
        "choices": CONTINUATIONS, "help": "who finishes the task after a+ and a-: the scripted solver, or the "
                                          "policy of --replay-policy-* (an LLMConfig: the embedded model or an "
                                          "endpoint)"})
    rollouts: int = field(default=1, metadata={
        "min": 1, "max": 1000, "help": "seeded policy rollouts from each side (rollout r samples with seed + r); "
                                       "the solver is deterministic: one"})


@dataclass(frozen=True, slots=True)
class Target:
    """What one pair's replay needs."""

    task: str
    seed: int
    history: tuple[str, ...]
    observation: str
    action_pos: str
    action_neg: str

    def key(self, config: ReplayConfig, backend: str) -> str:
        """The cache key: everything the outcome depends on (``backend``: the harness and solver
        versions)."""
        policy = {"continuation": "policy", "rollouts": config.rollouts} if config.continuation == "policy" else {}
        canon = json.dumps({"version": REPLAY_VERSION, "backend": backend, "solver_steps": config.solver_steps,
                            **policy,
                            "task": self.task, "seed": self.seed, "history": list(self.history),
                            "observation": state_hash(self.observation), "pos": self.action_pos,
                            "neg": self.action_neg}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()


@dataclass(slots=True)
class Replay:
    """One pair's outcome and its evidence (stored as ``replay_evidence``)."""

    outcome: str
    evidence: dict

    @property
    def kept(self) -> bool:
        return self.outcome in KEPT


def normalize_axtree(text: str) -> str:
    """The AXTree text without what differs between two replays of one state: the page's location
    (the checkout's path or server), trailing blanks; and as BrowserGym's ``flatten_axtree_to_str``
    prints it: the clickable generic lines out, the lines under each one tab left (``harness.env``)."""
    out, dropped = [], []       # the depths of the dropped lines whose subtrees are still open
    for line in text.strip().splitlines():
        line = _PAGE_URL.sub(r"url='\1'", line).rstrip()
        depth = len(line) - len(line.lstrip("\t"))
        while dropped and dropped[-1] >= depth:
            dropped.pop()
        if _CLICKABLE_GENERIC.fullmatch(line):
            dropped.append(depth)
        else:
            out.append(line[len(dropped):])
    return "\n".join(out)


def state_hash(axtree: str) -> str:
    return hashlib.sha256(normalize_axtree(axtree).encode()).hexdigest()[:16]


def episode_of(task_id: str, meta: str) -> tuple[str, int] | None:
    """A trajectory's MiniWoB task and seed: ``meta.task``/``meta.seed``, else, for an episode
    ``search.miniwob`` wrote before it recorded them, its ``task_id`` ``<task>.<seed>``; None when
    it is not a MiniWoB episode."""
    try:
        m = json.loads(meta or "{}")
    except ValueError:
        m = {}
    m = m if isinstance(m, dict) else {}
    if isinstance(m.get("task"), str) and isinstance(m.get("seed"), int):
        return m["task"].removeprefix("miniwob."), m["seed"]
    found = _TASK_ID.match(task_id or "") if m.get("benchmark") == "search.miniwob" else None
    return (found["task"], int(found["seed"])) if found else None


class NotReplayable(ValueError):
    """The run's trajectories are not MiniWoB episodes."""


def load_targets(run: RunDir, pairs: list[Pair]) -> list[Target]:
    """Each pair's replay target; ``NotReplayable`` naming the trajectories that are no MiniWoB episode."""
    trajs = sorted({p.row["traj_id"] for p in pairs})
    rows = pq.read_table(run.trajectories, columns=["traj_id", "task_id", "meta"],
                         filters=[("traj_id", "in", trajs)]).to_pylist() if trajs else []
    episodes = {r["traj_id"]: episode_of(r["task_id"], r["meta"]) for r in rows}
    if missing := sorted(t for t in trajs if episodes.get(t) is None):
        raise NotReplayable(f"--verifier replay needs MiniWoB episodes (meta task and seed): {len(missing)} "
                         f"trajectories are not, e.g. {missing[:3]}")
    return [Target(*episodes[p.row["traj_id"]], tuple(p.state.history), p.state.axtree,
                   p.row["action_pos"], p.row["action_neg"]) for p in pairs]


def _state(env, obs) -> dict:
    reward, _ = env.evaluate()
    return {"hash": state_hash(obs.axtree), "reward": float(reward), "done": bool(env.task_done),
            "error": obs.last_action_error or None}


# A branch whose action did not run (an error, a refusal, a state that is a+'s) continues no further.
NO_CONTINUATION = {"solver_steps": 0, "solver_actions": [], "solver_errors": [], "finished": False}


def _finish(env, choose, obs, history: list[str], limit: int) -> dict:
    """The continuation's steps from ``obs`` until the task is done or ``limit`` steps (``choose(obs,
    history, feedback, step)``: the next action, None to stop); its actions run through ``vet``
    (a refused one is a step that ran nothing); the final reward."""
    actions, errors, feedback = [], [], ""
    while not env.task_done and len(actions) < limit:
        action = choose(obs, history + actions, feedback, len(actions))
        if action is None:
            break
        actions.append(action)
        try:
            obs = env.step(vet(action, env))
            error = obs.last_action_error
        except ActionRefused as e:
            error = str(e)
        errors += [error] if error else []
        feedback = f"the action failed: {error.splitlines()[0][:200]}" if error else "done"
    reward, _ = env.evaluate()
    return {"solver_steps": len(actions), "solver_actions": actions, "solver_errors": errors,
            "final_reward": float(reward), "finished": bool(env.task_done) and reward >= 1}


def _vet_history(env, target: Target) -> tuple[list[str], dict | None]:
    """The history's canonical actions, or the first refused one's mismatch evidence (nothing ran)."""
    out = []
    for i, action in enumerate(target.history):
        try:
            out.append(vet(action, env))
        except ActionRefused as e:
            return out, {"mismatch": "history_action_refused", "history_step": i, "action": action, "error": str(e)}
    return out, None


def _replay_to_step(env, target: Target, history: list[str]) -> tuple[object, dict | None]:
    """Reset and replay the (vetted) history, extracting the AXTree only at O_t; (O_t, None) or
    (obs, the mismatch's evidence)."""
    obs = env.reset(seed=target.seed, observe=not history)
    for i, action in enumerate(history):
        obs = env.step(action, observe=i == len(history) - 1)
        if obs.last_action_error:
            return obs, {"mismatch": "history_action_failed", "history_step": i, "action": target.history[i],
                         "error": obs.last_action_error}
    replayed, recorded = state_hash(obs.axtree), state_hash(target.observation)
    if replayed != recorded:
        return obs, {"mismatch": "observation", "recorded_hash": recorded, "replayed_hash": replayed}
    return obs, None


def _same_state(a: dict, b: dict) -> bool:
    return (a["hash"], a["reward"], a["done"]) == (b["hash"], b["reward"], b["done"])


def classify(pos: dict, neg: dict) -> str:
    """The outcome from the two branches' evidence under the solver (module doc)."""
    if neg["error"]:
        return "not_executable"
    if _same_state(neg, pos):
        return "equivalent"
    if neg["finished"] and (not pos["finished"] or neg["solver_steps"] <= pos["solver_steps"]):
        return "equivalent"
    return "detour" if neg["finished"] else "harmful"


def classify_rollouts(pos: dict, neg: dict) -> str:
    """The outcome from the two branches' rollout successes under a policy (module doc)."""
    if neg["error"]:
        return "not_executable"
    if _same_state(neg, pos):
        return "equivalent"
    if neg["done"] and neg["reward"] < 1:       # a- ended the task failed: no continuation can help
        return "harmful"
    if neg["successes"] >= pos["successes"]:
        return "equivalent"
    return "detour" if neg["successes"] else "harmful"


def _branch(env, backend, target: Target, history: list[str], action: str, config: ReplayConfig,
            pos: dict | None = None) -> tuple[dict | None, dict | None]:
    """One side of a pair (``pos`` None: a+'s side, else a-'s, compared with a+'s state): (its
    evidence, None) or (None, a mismatch's evidence). Under ``policy`` it is replayed and continued
    ``rollouts`` times (rollout r samples with seed + r), the successes counted."""
    name = "pos" if pos is None else "neg"
    rollouts = config.rollouts if config.continuation == "policy" else 1
    first, runs = None, []
    for r in range(rollouts):
        obs, mismatch = _replay_to_step(env, target, history)
        if mismatch:
            return None, {**mismatch, **({"branch": "neg"} if name == "neg" else {})}
        try:
            after = env.step(vet(action, env))
            state = {"action": action, **_state(env, after)}
        except ActionRefused as e:
            state = {"action": action, **_state(env, obs), "error": str(e)}
        if state["error"] and name == "pos":     # the demonstration itself no longer runs here
            return None, {"mismatch": "positive_failed", "pos": state}
        if state["error"] or (pos is not None and _same_state(state, pos)):
            return {**state, **NO_CONTINUATION, "final_reward": state["reward"]}, None
        first = first or state
        runs.append(_finish(env, backend.chooser(target.task, r), after, [*history, action], config.solver_steps))
        if state["done"]:       # the action itself ended the task: every rollout would be this one
            runs *= rollouts
            break
    if config.continuation != "policy":
        return {**first, **runs[0]}, None
    return {**first, "final_reward": runs[0]["final_reward"], "finished": any(r["finished"] for r in runs),
            "successes": sum(r["finished"] for r in runs), "rollouts": len(runs),
            "solver_steps": min((r["solver_steps"] for r in runs if r["finished"]), default=0),
            "rollout_runs": runs}, None


def _retrying(replay) -> tuple[tuple, int]:
    """``replay()`` again while its evidence shows a Playwright timeout (``TIMEOUT_RETRIES``): its
    result and the attempts made."""
    attempt, result = 1, replay()
    while "TimeoutError" in json.dumps(result) and attempt <= TIMEOUT_RETRIES:
        attempt, result = attempt + 1, replay()
    return result, attempt


def replay_step(env, backend, targets: list[Target], config: ReplayConfig, on_pair=None) -> list[Replay]:
    """The pairs of one step (same task, seed, history, O_t and a+: ``steps``) on ``env``: a+'s side
    replayed and continued once, then each a-'s side from its own reset (see the module doc).
    ``evidence["attempts"]``: a+'s side's replays plus the pair's a-'s, less one. ``on_pair(target,
    replay)`` as each pair is decided (the cache: a kill loses at most the pair in progress)."""
    first = targets[0]
    base = {"task": first.task, "seed": first.seed, "step": len(first.history),
            "observation_hash": state_hash(first.observation)}
    on_pair = on_pair or (lambda target, replay: None)
    history, mismatch = _vet_history(env, first)
    pos_attempts = 1
    if not mismatch:
        (pos, mismatch), pos_attempts = _retrying(
            lambda: _branch(env, backend, first, history, first.action_pos, config))
    if mismatch:
        out = [Replay("replay_mismatch", {**base, **mismatch, "attempts": pos_attempts}) for _ in targets]
        for t, r in zip(targets, out):
            on_pair(t, r)
        return out
    rule = classify_rollouts if config.continuation == "policy" else classify
    out = []
    for t in targets:
        (neg, mismatch), attempts = _retrying(lambda t=t: _branch(env, backend, t, history, t.action_neg, config,
                                                                  pos))
        evidence = {**base, "attempts": pos_attempts + attempts - 1}
        out.append(Replay("replay_mismatch", {**evidence, **mismatch}) if mismatch
                   else Replay(rule(pos, neg), {**evidence, "pos": pos, "neg": neg}))
        on_pair(t, out[-1])
    return out


def replay_target(env, backend, target: Target, config: ReplayConfig) -> Replay:
    """One pair's replay on ``env`` (``replay_step`` of a one-pair step)."""
    return replay_step(env, backend, [target], config)[0]


class ReplayVerifier:
    """Replays pairs with the cache of finished pairs, on one harness at a time (BrowserGym's
    Playwright is one per process: closing one harness stops it for every other), reused while
    the task stays the same, and across tasks when the backend can move it to the next one
    (``retask(env, task)``, optional: one browser for the whole run). ``backend`` opens harnesses
    (``open(task)``), checks a run's tasks (``check(tasks)``) and gives the continuation's
    actions (``chooser(task, rollout)``); ``backend.version`` (else its ``name``) is part of every
    cache key."""

    def __init__(self, backend, config: ReplayConfig, cache=None):
        self.backend, self.config, self.cache = backend, config, cache
        self.backend_key = getattr(backend, "version", backend.name)
        self.env, self.env_task = None, None
        self.counts = Counter()     # replayed, cached

    def check(self, targets: list[Target]) -> None:
        """``NotReplayable`` for what would fail only after work is done: a seed MiniWoB cannot
        take, a task the backend cannot replay (no solver, no page)."""
        if bad := sorted({(t.task, t.seed) for t in targets if not 0 <= t.seed <= MAX_SEED}):
            raise NotReplayable(f"--verifier replay: meta.seed out of range 0..2**32-1 (MiniWoB's seeds) "
                                f"in {len(bad)} episode(s), e.g. {bad[:3]}")
        self.backend.check(sorted({t.task for t in targets}))

    def cached(self, target: Target) -> Replay | None:
        """The target's stored outcome, None when it was not replayed yet."""
        hit = self.cache.get(self.key(target)) if self.cache is not None else None
        if hit is not None and hit.get("outcome") in OUTCOMES and isinstance(hit.get("evidence"), dict):
            self.counts["cached"] += 1
            return Replay(hit["outcome"], hit["evidence"])
        return None

    def key(self, target: Target) -> str:
        return target.key(self.config, self.backend_key)

    def __call__(self, targets: list[Target]) -> list[Replay]:
        """The replays of one step's pairs (``replay_step``), each stored in the cache."""
        task = targets[0].task
        if task != self.env_task:
            retask = getattr(self.backend, "retask", None)
            if self.env is None or retask is None or not retask(self.env, task):
                self.close()
                self.env = self.backend.open(task)
            self.env_task = task
        replays = replay_step(self.env, self.backend, targets, self.config, self.store)
        self.counts["replayed"] += len(replays)
        return replays

    def store(self, target: Target, replay: Replay) -> None:
        """The replay into the cache; a cache that stops taking writes (disk full, made read-only)
        is dropped with a warning, as the LLM cache warns: the run goes on. An outcome whose evidence
        still shows a Playwright timeout after the retries is not stored: it may say more about the
        machine's load than about the action, so a later run decides it again."""
        if self.cache is None or "TimeoutError" in json.dumps(replay.evidence):
            return
        try:
            self.cache.put(self.key(target), {"target": self.key(target)},
                           {"outcome": replay.outcome, "evidence": replay.evidence})
        except OSError as e:
            import sys

            print(f"warning: the replay cache stopped taking writes ({e}): replaying on without it", file=sys.stderr)
            self.cache = None

    def close(self) -> None:
        env, self.env, self.env_task = self.env, None, None
        if env is not None:
            env.close()


def steps(targets: list[Target]) -> list[list[int]]:
    """The targets' indices grouped by step (task, seed, history, O_t, a+), the steps and their pairs
    in a fixed order (by task, seed, step, then index): one harness per task while a worker stays on it."""
    groups: dict[tuple, list[int]] = {}
    order = sorted(range(len(targets)), key=lambda i: (targets[i].task, targets[i].seed, len(targets[i].history), i))
    for i in order:
        t = targets[i]
        groups.setdefault((t.task, t.seed, t.history, state_hash(t.observation), t.action_pos), []).append(i)
    return list(groups.values())


def worker_count(config: ReplayConfig) -> int:
    """``config.workers``, 0 meaning two per core (module doc: the replays wait half the time)."""
    import os

    return config.workers or 2 * (os.cpu_count() or 1)


def replay_all(targets: list[Target], config: ReplayConfig, backend, on_done=None) -> tuple[list[Replay], Counter]:
    """Every target's replay, in the order of ``targets``, and the counts (``replayed``, ``cached``).
    Cached pairs are served here; the others are replayed by steps, here when one worker is
    enough, else in ``worker_count`` spawned processes, each with its own harness and browser
    (BrowserGym's Playwright is one per process) and the same disk cache (one file per pair,
    renamed into place: concurrent writers are safe). Outcomes do not depend on the worker that
    replays a pair: each side starts from a reset. ``on_done(replay)`` after every pair."""
    cache = cache_for(config)
    verifier = ReplayVerifier(backend, config, cache)
    verifier.check(targets)
    results: list[Replay | None] = [verifier.cached(t) for t in targets]
    for r in results:
        if r is not None and on_done is not None:
            on_done(r)
    todo = [[i for i in step if results[i] is None] for step in steps(targets)]
    todo = [step for step in todo if step]
    counts = verifier.counts
    workers = min(worker_count(config), len(todo))
    if workers <= 1:
        try:
            for step in todo:
                for i, r in zip(step, verifier([targets[i] for i in step])):
                    results[i] = r
                    if on_done is not None:
                        on_done(r)
        finally:
            verifier.close()
        return results, counts
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"), initializer=_start_worker,
                               initargs=(backend, config, cache is not None))
    try:
        futures = {pool.submit(_replay_step, [targets[i] for i in step]): step for step in todo}
        for future in as_completed(futures):
            replays, worker_counts = future.result()
            counts.update(worker_counts)
            for i, r in zip(futures[future], replays):
                results[i] = r
                if on_done is not None:
                    on_done(r)
    finally:
        pool.shutdown(cancel_futures=True)
    return results, counts


_WORKER: ReplayVerifier | None = None       # a worker process's verifier (replay_all)


def _start_worker(backend, config: ReplayConfig, cached: bool) -> None:
    import atexit

    global _WORKER
    _WORKER = ReplayVerifier(backend, config, cache_for(config, quiet=True) if cached else None)
    atexit.register(_WORKER.close)      # the harness's browser ends with the worker


def _replay_step(targets: list[Target]) -> tuple[list[Replay], Counter]:
    before = Counter(_WORKER.counts)
    replays = _WORKER(targets)
    return replays, _WORKER.counts - before


def verdict_fields(pair: Pair, replay: Replay, seed: int) -> dict:
    """What ``teacher.verify`` records of a replayed pair: kept pairs' verdict is the positive
    (the label) and their judgment the bare answer tag, as a scoring teacher's; ``equivalent`` and
    ``replay_mismatch`` pairs get no verdict, their outcome as the verdict's outcome and the
    discard reason."""
    kept = replay.kept
    return {"status": "kept" if kept else "discarded", "verdict": pair.label if kept else None,
            "outcome": "agree" if kept else replay.outcome, "seed": seed,
            "judgment": answer_text(pair.label) if kept else None, "reason": None if kept else replay.outcome,
            "text": json.dumps(replay.evidence, sort_keys=True)}


def summarize(rows: list[tuple[Pair, Replay]]) -> dict:
    """Outcome counts overall, per rule and per axis (for stats.json and the report)."""
    out = {"outcomes": Counter(), "by_rule": {}, "by_axis": {}}
    for pair, replay in rows:
        out["outcomes"][replay.outcome] += 1
        for key, name in (("by_rule", "rule"), ("by_axis", "axis")):
            out[key].setdefault(pair.row[name], Counter())[replay.outcome] += 1
    return {"outcomes": dict(sorted(out["outcomes"].items())),
            **{k: {g: dict(sorted(c.items())) for g, c in sorted(out[k].items())} for k in ("by_rule", "by_axis")}}


class MiniWoBBackend:
    """MiniWoB++ harnesses (``harness.miniwob``, lean: ``harness.lean``) and the continuation: the
    scripted solvers (``harness.solvers``) or, given ``policy`` (an ``llm.LLMConfig``), the AXTree
    policy of ``search.miniwob`` (``harness.policy``) on that model; the layer below ``teacher``."""

    def __init__(self, policy=None):
        self.policy = policy
        self.name = "miniwob-policy" if policy is not None else "miniwob-solver"
        self._policies = {}         # rollout -> harness.policy.Policy

    @property
    def version(self) -> str:
        """The continuation (the solvers' source, or the policy's model and sampling) and the task
        pages' versions: a changed solver, model or page set invalidates cached outcomes."""
        import importlib.metadata

        import harness.solvers

        if self.policy is None:
            files = sorted(Path(harness.solvers.__file__).parent.glob("solvers*.py"))
            who = "solvers-" + hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]
        else:
            p = self.policy
            who = f"policy-{p.endpoint}/{p.model_id}/t{p.temperature}/top_p{p.top_p}/seed{p.seed}/max{p.max_tokens}"
        return (f"{self.name}/{who}/miniwob-{importlib.metadata.version('miniwob')}"
                f"/browsergym-miniwob-{importlib.metadata.version('browsergym-miniwob')}")

    def check(self, tasks: list[str]) -> None:
        """``NotReplayable`` naming the tasks this backend cannot replay: no scripted solver (under
        the solver), no task page at ``MINIWOB_URL`` (missing, or a server that does not answer)."""
        from harness.miniwob import MiniWoBSetupError, base_url, check_pages, task_classes

        known = set(self.solvable() if self.policy is None else task_classes())
        if (unknown := sorted(set(tasks) - known)) and self.policy is None:
            raise NotReplayable(f"--verifier replay: no scripted solver for MiniWoB task(s) {unknown}; "
                                f"solvers: {', '.join(sorted(known))}")
        if unknown:
            raise NotReplayable(f"--verifier replay: not MiniWoB task(s): {unknown}")
        try:
            check_pages(base_url(), tasks)
        except MiniWoBSetupError as e:
            raise NotReplayable(f"--verifier replay: {e}") from None

    @staticmethod
    def solvable() -> set[str]:
        """The tasks a scripted solver can finish (``harness.solvers.SOLVERS``)."""
        from harness.solvers import SOLVERS

        return set(SOLVERS)

    def open(self, task: str):
        from harness.miniwob import miniwob_harness

        return miniwob_harness(task, lean=True)

    def retask(self, env, task: str) -> bool:
        """``env`` (a harness this backend opened) on ``task`` without a new browser
        (``LeanHarness.retask``): True, or False when it needs one."""
        from harness.miniwob import PREFIX, task_classes

        return env.retask(task_classes()[task.removeprefix(PREFIX)], env.task_kwargs)

    def chooser(self, task: str, rollout: int):
        """The continuation's ``choose(obs, history, feedback, step)``: the task's solver, or the
        policy sampling rollout ``rollout`` (its seed + ``rollout``; one sample per step)."""
        if self.policy is None:
            from harness.solvers import solve_step

            return lambda obs, history, feedback, step: solve_step(task, obs.goal, obs.axtree)
        from dataclasses import replace

        from harness.policy import Policy

        if rollout not in self._policies:
            self._policies[rollout] = Policy(replace(self.policy, seed=(self.policy.seed or 0) + rollout, n=1))

        def choose(obs, history, feedback, step):
            return next(iter(self._policies[rollout].propose(obs, history, feedback, 1, step)), None)
        return choose


def cache_for(config: ReplayConfig, quiet: bool = False):
    """The replay cache, or None: ``no_cache``, or a folder that cannot be written (a warning on
    stderr, as the LLM cache warns: the replay then runs, storing nothing)."""
    import sys
    import tempfile

    from llm.cache import ResponseCache

    if config.no_cache:
        return None
    root = Path(config.cache_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".probe-"):
            pass
    except OSError as e:
        if not quiet:
            print(f"warning: --replay-cache-dir {root} cannot be written ({e}): replaying without a cache "
                  "(a rerun replays every pair again)", file=sys.stderr)
        return None
    return ResponseCache(root)
