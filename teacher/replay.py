"""Ground truth for a candidate pair by replaying it in MiniWoB++: ``teacher.verify --verifier replay``.

    python -m teacher.verify --run RUN --verifier replay [--replay-solver-steps 10]

For runs whose trajectories are MiniWoB++ episodes (``meta.task`` and ``meta.seed``, or a
``task_id`` ``<task>.<seed>`` as ``search.miniwob`` writes it). For each sampled pair at step t:

1. reset the task with its seed and replay a_1 .. a_{t-1}; the replayed O_t must match the
   recorded one (``normalize_axtree``: the AXTree text with the task page's location cut to its
   file name, so that a run recorded in another checkout still matches). A mismatch, or a history
   action that now fails, is ``replay_mismatch``: no verdict, the pair is discarded;
2. run a⁺ and record the resulting state (hash of the normalised AXTree, the task's reward and
   done flag), then let the solver finish the task from there (at most ``solver_steps`` steps);
3. reset and replay again, run a⁻ from the same O_t, record its state, and let the solver finish.

Outcomes, first match wins:

- ``not_executable``: a⁻ raised an error in the browser (BrowserGym's ``last_action_error``);
- ``equivalent``: a⁻ leads to the same state as a⁺ (same hash, reward and done), or the solver
  finishes the task from a⁻ in no more steps than from a⁺ (the same completed reward path; also
  when the solver finishes from a⁻ but not from a⁺). A false negative: discarded;
- ``harmful``: the task ends failed after a⁻, or the solver cannot finish it;
- ``detour``: the solver finishes, but needs more steps than after a⁺ (a⁻ changed nothing useful,
  or undid something a step must repair).

Kept: ``harmful``, ``detour``, ``not_executable`` (``KEPT``). Every sampled pair is replayed as
given: a negative that only writes the positive differently (``click("12")`` for
``click('12')``) reaches the positive's state and is ``equivalent``.

A replay in which any browser action hit a Playwright timeout (BrowserGym allows its actions 500
ms, which a loaded machine exceeds) is replayed again, up to ``TIMEOUT_RETRIES`` more times.

``--replay-workers N`` replays in N spawned processes, each with its own harness and browser, by
whole episodes (task, seed); the outcomes and outputs are those of one worker (``replay_all``).

A finished pair's outcome is stored in a disk cache (``llm.cache.ResponseCache``, the LLM
teacher's resume mechanism) keyed by everything the replay depends on, so a killed run resumes
without replaying a finished pair, and a rerun writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from data.config import Configurable
from data.judgment import answer_text
from data.pairs import Pair
from data.rundir import RunDir

OUTCOMES = ("equivalent", "harmful", "detour", "not_executable", "replay_mismatch")
KEPT = ("harmful", "detour", "not_executable")
# Bump when the replay's rules change: cached outcomes of another version are not reused.
REPLAY_VERSION = 2
# A replay in which a browser action hit a Playwright timeout (BrowserGym gives its actions 500 ms,
# which a loaded machine can exceed) is replayed again, at most this many more times; a timeout that
# recurs every time (a click on a covered element) stands.
TIMEOUT_RETRIES = 2
_TASK_ID = re.compile(r"^(?:miniwob\.)?(?P<task>[a-z0-9-]+)\.(?P<seed>\d+)$")
# url='file:///any/checkout/.../miniwob/click-button.html' -> url='click-button.html'
_PAGE_URL = re.compile(r"url='[^']*/([^/']+)'")


@dataclass
class ReplayConfig(Configurable):
    """How ``--verifier replay`` replays pairs (``--replay-*``)."""

    ARG_GROUP = "replay verifier"

    solver_steps: int = field(default=10, metadata={
        "min": 1, "help": "steps the scripted solver may take to finish the task after a+ or a-"})
    cache_dir: str = field(default=".cache/replay", metadata={
        "help": "finished pairs' outcomes; a rerun (after a kill) replays only the others"})
    no_cache: bool = field(default=False, metadata={"help": "replay every pair, store nothing"})
    workers: int = field(default=1, metadata={
        "min": 1, "help": "worker processes, each with its own browser, replaying whole episodes (task, seed); "
                          "the outputs are those of one worker"})


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
        canon = json.dumps({"version": REPLAY_VERSION, "backend": backend, "solver_steps": config.solver_steps,
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
    (the checkout's path or server), trailing blanks."""
    return "\n".join(_PAGE_URL.sub(r"url='\1'", line).rstrip() for line in text.strip().splitlines())


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


def _finish(env, backend, task: str, obs, limit: int) -> dict:
    """The solver's steps from ``obs`` until the task is done or ``limit`` steps; the final reward."""
    actions, errors = [], []
    while not env.task_done and len(actions) < limit:
        action = backend.solve_step(task, obs)
        if action is None:
            break
        obs = env.step(action)
        actions.append(action)
        errors += [obs.last_action_error] if obs.last_action_error else []
    reward, _ = env.evaluate()
    return {"solver_steps": len(actions), "solver_actions": actions, "solver_errors": errors,
            "final_reward": float(reward), "finished": bool(env.task_done) and reward >= 1}


def _replay_to_step(env, target: Target) -> tuple[object, dict | None]:
    """Reset and replay the history; (O_t, None) or (obs, the mismatch's evidence)."""
    obs = env.reset(seed=target.seed)
    for i, action in enumerate(target.history):
        obs = env.step(action)
        if obs.last_action_error:
            return obs, {"mismatch": "history_action_failed", "history_step": i, "action": action,
                         "error": obs.last_action_error}
    replayed, recorded = state_hash(obs.axtree), state_hash(target.observation)
    if replayed != recorded:
        return obs, {"mismatch": "observation", "recorded_hash": recorded, "replayed_hash": replayed}
    return obs, None


def classify(pos: dict, neg: dict) -> str:
    """The outcome from the two branches' evidence (module doc)."""
    if neg["error"]:
        return "not_executable"
    if (neg["hash"], neg["reward"], neg["done"]) == (pos["hash"], pos["reward"], pos["done"]):
        return "equivalent"
    if neg["finished"] and (not pos["finished"] or neg["solver_steps"] <= pos["solver_steps"]):
        return "equivalent"
    return "detour" if neg["finished"] else "harmful"


def replay_target(env, backend, target: Target, config: ReplayConfig) -> Replay:
    """One pair's replay on ``env`` (a harness for ``target.task``; see the module doc), replayed
    again while an action timed out (``TIMEOUT_RETRIES``); ``evidence["attempts"]``."""
    for attempt in range(1, TIMEOUT_RETRIES + 2):
        replay = _replay_once(env, backend, target, config)
        if "TimeoutError" not in json.dumps(replay.evidence):
            break
    replay.evidence["attempts"] = attempt
    return replay


def _replay_once(env, backend, target: Target, config: ReplayConfig) -> Replay:
    base = {"task": target.task, "seed": target.seed, "step": len(target.history),
            "observation_hash": state_hash(target.observation)}
    obs, mismatch = _replay_to_step(env, target)
    if mismatch:
        return Replay("replay_mismatch", {**base, **mismatch})
    branches = {}
    for name, action in (("pos", target.action_pos), ("neg", target.action_neg)):
        if name == "neg":
            obs, mismatch = _replay_to_step(env, target)
            if mismatch:        # the page is not deterministic for this seed after all
                return Replay("replay_mismatch", {**base, **mismatch, "branch": "neg"})
        after = env.step(action)
        state = {"action": action, **_state(env, after)}
        if name == "pos" and state["error"]:   # the demonstration itself no longer runs here
            return Replay("replay_mismatch", {**base, "mismatch": "positive_failed", "pos": state})
        finish = {} if name == "neg" and state["error"] else _finish(env, backend, target.task, after,
                                                                       config.solver_steps)
        branches[name] = {**state, "solver_steps": 0, "solver_actions": [], "solver_errors": [],
                          "final_reward": state["reward"], "finished": False, **finish}
    return Replay(classify(branches["pos"], branches["neg"]), {**base, **branches})


class ReplayVerifier:
    """Replays pairs with the cache of finished pairs, on one harness at a time (BrowserGym's
    Playwright is one per process: closing one harness stops it for every other), reused while
    the task stays the same: give it pairs grouped by task. ``backend`` opens harnesses
    (``open(task)``) and plays the solver (``solve_step(task, obs)``); ``backend.version`` (else its
    ``name``) is part of every cache key."""

    def __init__(self, backend, config: ReplayConfig, cache=None):
        self.backend, self.config, self.cache = backend, config, cache
        self.backend_key = getattr(backend, "version", backend.name)
        self.tasks = getattr(backend, "tasks", None)      # None: every task
        self.env, self.env_task = None, None
        self.counts = Counter()     # replayed, cached

    def check(self, targets: list[Target]) -> None:
        """``NotReplayable`` naming the targets' tasks that no solver of the backend finishes."""
        if self.tasks is not None and (unknown := sorted({t.task for t in targets} - set(self.tasks))):
            raise NotReplayable(f"--verifier replay: no scripted solver for MiniWoB task(s) {unknown}; "
                                f"solvers: {', '.join(sorted(self.tasks))}")

    def cached(self, target: Target) -> Replay | None:
        """The target's stored outcome, None when it was not replayed yet."""
        hit = self.cache.get(target.key(self.config, self.backend_key)) if self.cache is not None else None
        if hit is not None and hit.get("outcome") in OUTCOMES and isinstance(hit.get("evidence"), dict):
            self.counts["cached"] += 1
            return Replay(hit["outcome"], hit["evidence"])
        return None

    def __call__(self, target: Target) -> Replay:
        if (hit := self.cached(target)) is not None:
            return hit
        key = target.key(self.config, self.backend_key)
        if target.task != self.env_task:
            self.close()
            self.env, self.env_task = self.backend.open(target.task), target.task
        replay = replay_target(self.env, self.backend, target, self.config)
        self.counts["replayed"] += 1
        if self.cache is not None:
            self.cache.put(key, {"target": key}, {"outcome": replay.outcome, "evidence": replay.evidence})
        return replay

    def close(self) -> None:
        env, self.env, self.env_task = self.env, None, None
        if env is not None:
            env.close()


def episodes(targets: list[Target]) -> list[list[int]]:
    """The targets' indices grouped by episode (task, seed), episodes and their pairs in a fixed
    order (by task, then seed, then index): one harness per task while a worker stays on it."""
    groups: dict[tuple[str, int], list[int]] = {}
    for i in sorted(range(len(targets)), key=lambda i: (targets[i].task, targets[i].seed, i)):
        groups.setdefault((targets[i].task, targets[i].seed), []).append(i)
    return list(groups.values())


def replay_all(targets: list[Target], config: ReplayConfig, backend, on_done=None) -> tuple[list[Replay], Counter]:
    """Every target's replay, in the order of ``targets``, and the counts (``replayed``, ``cached``).
    Cached pairs are served here; the others are replayed by whole episodes, here when
    ``config.workers`` is 1, else in that many spawned worker processes, each with its own harness
    and browser (BrowserGym's Playwright is one per process) and the same disk cache (one file per
    pair, renamed into place: concurrent writers are safe). Outcomes do not depend on the worker
    that replays a pair: each replay starts from a reset. ``on_done(replay)`` after every pair."""
    verifier = ReplayVerifier(backend, config, cache_for(config))
    verifier.check(targets)
    results: list[Replay | None] = [verifier.cached(t) for t in targets]
    for r in results:
        if r is not None and on_done is not None:
            on_done(r)
    todo = [[i for i in ep if results[i] is None] for ep in episodes(targets)]
    todo = [ep for ep in todo if ep]
    counts = verifier.counts
    if config.workers == 1 or len(todo) <= 1:
        try:
            for i in (i for ep in todo for i in ep):
                results[i] = verifier(targets[i])
                if on_done is not None:
                    on_done(results[i])
        finally:
            verifier.close()
        return results, counts
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(min(config.workers, len(todo)), multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(backend, config))
    try:
        futures = {pool.submit(_replay_episode, [targets[i] for i in ep]): ep for ep in todo}
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


def _start_worker(backend, config: ReplayConfig) -> None:
    import atexit

    global _WORKER
    _WORKER = ReplayVerifier(backend, config, cache_for(config))
    atexit.register(_WORKER.close)      # the harness's browser ends with the worker


def _replay_episode(targets: list[Target]) -> tuple[list[Replay], Counter]:
    before = Counter(_WORKER.counts)
    replays = [_WORKER(t) for t in targets]
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
    """MiniWoB++ harnesses (``harness.miniwob``) and the scripted solvers (``harness.solvers``):
    the layer below ``teacher``."""

    name = "miniwob-solver"

    @property
    def version(self) -> str:
        """The solvers' source and the task pages' versions: a changed solver or page set
        invalidates cached outcomes."""
        import importlib.metadata

        import harness.solvers

        source = hashlib.sha256(Path(harness.solvers.__file__).read_bytes()).hexdigest()[:16]
        return (f"{self.name}/solvers-{source}/miniwob-{importlib.metadata.version('miniwob')}"
                f"/browsergym-miniwob-{importlib.metadata.version('browsergym-miniwob')}")

    @property
    def tasks(self) -> set[str]:
        """The tasks a scripted solver can finish (``harness.solvers.SOLVERS``)."""
        from harness.solvers import SOLVERS

        return set(SOLVERS)

    def open(self, task: str):
        from harness.miniwob import miniwob_harness

        return miniwob_harness(task)

    def solve_step(self, task: str, obs) -> str | None:
        from harness.solvers import solve_step

        return solve_step(task, obs.goal, obs.axtree)


def cache_for(config: ReplayConfig):
    from llm.cache import ResponseCache

    return None if config.no_cache else ResponseCache(Path(config.cache_dir))
