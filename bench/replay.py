"""Ground truth for mined negatives (issues 27, 38): replay every sampled pair in MiniWoB++ and measure
the false negatives and the hardness of six candidate sets, and the embedded teacher against that truth.

    .venv/bin/python bench/replay.py [--tasks axtree10] [--seeds 0-9] [--max-steps N] [--sample-size 60]
                                     [--sets graph graph_rank ...] [--no-fill] [--workers 2] [--figures DIR]
                                     [--out runs/bench-replay] [--teacher-base-url URL --teacher-model M]
    .venv/bin/python bench/replay.py --small        # 3 tasks x 2 seeds, 12 pairs per set: minutes

1. Demonstrations: ``search.miniwob --policy solver`` on ``--tasks`` x ``--seeds`` (the solvers of
   ``harness.solvers``; each episode's reward is the task's own validator's); skipped once
   ``OUT/demos/summary.json`` exists.
2. The candidate sets (``--sets``, ``SETS``): ``graph`` (``proposals.mine`` with every default),
   ``graph_rank`` (``--selection rank``), ``graph_cap5`` (``--max-per-rule 5``), ``graph_nocap``
   (``--max-per-rule 0``), all four mined from one ingest and graph (``OUT/graph``'s, copied);
   ``no_graph`` (``--no-graph``); ``random``: for every pair of the graph sample, the negative
   replaced by a uniformly random grounded element of O_t (not the positive's), its op by the same
   affordance rules (``proposals.affordance.role_op``; a fill types a fixed word, a select the first
   option). ``--no-fill`` mines every set without LLM fill values.
3. ``teacher.verify --verifier replay --replay-workers N`` on each set (one shared replay cache,
   ``OUT/replay_cache``: a pair two sets share is replayed once).
   With ``--min-verdicts N``, a set whose replayed pairs hold fewer than N verdicts (the rest
   ``replay_mismatch``) is topped up with more pairs drawn from its own pool (``top_up``: runs
   ``OUT/<set>_more<r>``, the same cache), and counted with them.
4. The summary of every set replayed in OUT (``bench/replay_verdict.py``): false negatives and the
   outcomes' shares, per rule, axis, task and containment-distance bucket, the hardness descriptors
   computed from O_t for every set alike, the differences to ``graph`` (Newcombe intervals) and
   each set's false-negative rate at the graph's distance mix; one PNG per set (``--figures``).
5. The embedded teacher (score-both) on the graph set (``TEACHER_SETS``): precision and recall of
   its discard decision against ``equivalent``, and the share of ``harmful`` pairs it keeps. With
   ``--teacher-base-url``/``--teacher-model`` (``llm.LLMConfig``'s flags, prefixed) an endpoint
   teacher is measured the same way on the same pairs.

Prints the tables (Markdown) and writes them with the raw counts to ``OUT/summary.json``
(``sets``, ``comparisons``). Figures go to bench/RESULTS.md by hand, with the command and the
machine.

Throughput (issue 37 Build 3), against the replay of an older commit in one sitting:

    git archive 0067963 | tar -x -C /tmp/replay-base      # once; the bench does it when missing
    .venv/bin/python bench/replay.py --throughput --out runs/bench-replay-tp [--rounds 2] [--fixed-set FILE]

takes the sampled pairs of ``OUT/graph`` (made by the stages above, with this checkout's code, when
missing) and replays them with ``teacher.verify --verifier replay --replay-no-cache`` from the base
tree and from this one (at its defaults, and with one worker), interleaved over ``--rounds``
(base, new, new-1 worker, then the other way round). Each run's wall time and CPU seconds (the
command and its descendants: Chromium, Playwright's driver, workers), the load before and after,
pairs/s and the ratio of medians; every pair's outcome compared with the base's.
``--fixed-set FILE`` also writes the first pairs of a few steps with the base's outcomes (the
fixed set ``tests/teacher/test_replay_identity.py`` replays).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from cli.config import Configurable, make_parser  # noqa: E402
from dataset.report import FN_PAPER, FN_WEBARBITER  # noqa: E402
from dataset.stats import wilson  # noqa: E402

SETS = ("graph", "graph_rank", "graph_cap5", "graph_nocap", "no_graph", "random")
NAMES = {"graph": "graph", "graph_rank": "graph rank", "graph_cap5": "graph cap 5", "graph_nocap": "graph no cap",
         "no_graph": "No-Graph", "random": "random"}
# What each mined set adds to proposals.mine's flags; the graph sets share one ingest and graph.
MINE_FLAGS = {"graph": [], "graph_rank": ["--selection", "rank"], "graph_cap5": ["--max-per-rule", "5"],
              "graph_nocap": ["--max-per-rule", "0"], "no_graph": ["--no-graph"]}
TEACHER_SETS = ("graph",)
TOP_UP_ROUNDS = 3       # --min-verdicts: at most this many top-up runs per set
SMALL = {"tasks": ["click-button", "enter-text", "login-user"], "seeds": "0-1", "sample_size": 12}


@dataclass
class ReplayBench(Configurable):
    ARG_GROUP = "bench"

    out: str = field(default="runs/bench-replay", metadata={"help": "working folder (reused: every stage resumes)"})
    tasks: list[str] = field(default_factory=lambda: ["axtree10"], metadata={
        "nargs": "*", "help": "MiniWoB tasks or a subset name"})
    seeds: str = field(default="0-9", metadata={"help": "demonstration seeds per task"})
    max_steps: int | None = field(default=None, metadata={
        "min": 1, "help": "search.miniwob's --max-steps for the demonstrations (default: its own)"})
    sets: list[str] = field(default_factory=lambda: list(SETS), metadata={
        "nargs": "*", "choices": SETS, "help": "candidate sets to build and replay (the summary reads every set "
                                              "already replayed in OUT)"})
    no_fill: bool = field(default=False, metadata={
        "help": "mine with --no-fill (no fill values from the embedded model: such negatives give their slot "
                "to the rule's next draw)"})
    figures: str | None = field(default=None, metadata={"help": "folder for the per-set PNGs (default OUT/figures)"})
    sample_size: int = field(default=60, metadata={"min": 1, "help": "pairs sampled per candidate set"})
    seed: int = field(default=42, metadata={"help": "seeds the samples and the random floor"})
    teacher: bool = field(default=True, metadata={"help": "also run the embedded teacher (score-both)"})
    small: bool = field(default=False, metadata={"help": f"a few minutes: {SMALL}"})
    workers: int = field(default=2, metadata={"min": 1, "help": "replay worker processes (--replay-workers)"})
    throughput: bool = field(default=False, metadata={"help": "pairs/s against --base-dir's replay (module doc)"})
    base_dir: str = field(default="/tmp/replay-base", metadata={"help": "the base tree (git archive of --base-commit)"})
    base_commit: str = field(default="0067963", metadata={"help": "the commit the base tree is made from"})
    rounds: int = field(default=2, metadata={"min": 1, "help": "interleaved rounds of the throughput runs"})
    fixed_set: str | None = field(default=None, metadata={"help": "write the identity test's fixed set here"})
    fixed_steps: int = field(default=4, metadata={"min": 1, "help": "steps in the fixed set"})
    pairs: int = field(default=0, metadata={"min": 0, "help": "throughput on the first N sampled pairs only (0: all)"})
    min_verdicts: int = field(default=0, metadata={
        "min": 0, "help": "top each set's sample up with more pairs from its pool until this many have a verdict "
                          "(top_up; 0: the sample only)"})


def _cli(*args: str) -> None:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    print(f"  {' '.join(args[:1])} {' '.join(a for a in args[1:3])} ... {time.perf_counter() - t:.0f} s",
          file=sys.stderr)


def share(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k / n:.0%} [{lo:.0%}, {hi:.0%}] (n={n})" if n else "n/a"


def random_floor(graph_run: Path, run: Path, seed: int) -> None:
    """``run``: the graph run's trajectories, and for each sampled graph pair one uniformly random
    grounded element of O_t as the negative (its op by the affordance rules)."""
    from data.actions import parse_action
    from data.rundir import RunDir, StageStats
    from data.schema import CANDIDATE_SCHEMA
    from graph.axtree import parse_axtree
    from proposals.affordance import options_of, role_op

    if (run / "candidates.parquet").exists():
        return
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    for name in ("trajectories.parquet", "stats.json"):
        shutil.copy(graph_run / name, run / name)
    cands = [c for c in pq.read_table(graph_run / "candidates.parquet").to_pylist() if c["sampled"]]
    states = RunDir(run).states((c["traj_id"], c["step_idx"]) for c in cands)
    rng, out = random.Random(seed), []
    for c in sorted(cands, key=lambda c: c["pair_id"]):
        tree = parse_axtree(states[(c["traj_id"], c["step_idx"])].axtree, "indented")
        pos_bid = getattr(parse_action(c["action_pos"]), "bid", None)
        nodes = [n for n in tree.nodes if n.bid is not None and n.bid != pos_bid]
        if not nodes:
            continue
        node = rng.choice(nodes)
        op = role_op(tree, node)[0]
        if op == "fill":
            neg = f"fill('{node.bid}', 'random')"
        elif op == "select_option":
            opts = options_of(tree, node)
            neg = f"select_option('{node.bid}', {json.dumps(opts[0].name if opts else '')})"
        else:
            neg = f"click('{node.bid}')"
        out.append({**c, "action_neg": neg, "neg_bid": node.bid, "neg_node": f"random:{node.bid}", "op_neg": op,
                    "gmcp": False, "value_source": None, "evidence": "{}", "mode": "random",
                    "pair_id": c["pair_id"][:-1] + "r"})
    rd = RunDir(run)
    rd.check_inputs("proposals.mine", rd.trajectories)
    pq.write_table(pa.Table.from_pylist(out, schema=CANDIDATE_SCHEMA), run / "candidates.parquet")
    rd.write_stage(StageStats("proposals.mine", n_in=len(out), n_out=len(out)), [])


def outcomes(run: Path) -> list[dict]:
    cols = ["pair_id", "rule", "axis", "gmcp", "replay_outcome", "action_pos", "action_neg"]
    return [r for f in ("preferences.parquet", "discarded.parquet") for r in pq.read_table(run / f, columns=cols)
            .to_pylist()]


def sampled_copy(source: Path, run: Path, keep: set[str] | None = None, draw: bool = False) -> None:
    """``run``: a fresh copy of the mined ``source`` (trajectories, stats, candidates); with ``keep``,
    only those sampled pairs stay sampled (``draw``: exactly the pairs ``keep`` names are sampled,
    drawn from the whole pool), recorded as the miner's output."""
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    for name in ("trajectories.parquet", "stats.json", "candidates.parquet"):
        shutil.copy(source / name, run / name)
    if keep is not None:
        from data.rundir import RunDir, StageStats

        cands = pq.read_table(source / "candidates.parquet")
        rows = [{**c, "sampled": (draw or c["sampled"]) and c["pair_id"] in keep} for c in cands.to_pylist()]
        rd = RunDir(run)
        rd.check_inputs("proposals.mine", rd.trajectories)
        pq.write_table(pa.Table.from_pylist(rows, schema=cands.schema), run / "candidates.parquet")
        rd.write_stage(StageStats("proposals.mine", n_in=len(rows), n_out=len(rows)), [])


def top_ups(out: Path, name: str) -> list[Path]:
    """The replayed top-up runs of set ``name`` (``top_up``), in order."""
    return sorted(p for p in out.glob(f"{name}_more*") if p.name[len(name) + 5:].isdigit()
                  and (p / "preferences.parquet").exists())


def set_runs(out: Path, name: str) -> list[Path]:
    """A set's run and its top-ups: together, its sample."""
    return [out / name, *top_ups(out, name)]


def top_up(cfg: ReplayBench, out: Path, name: str) -> None:
    """Pairs added to set ``name`` until at least ``cfg.min_verdicts`` of its replayed pairs have a
    verdict (not ``replay_mismatch``), in at most ``TOP_UP_ROUNDS`` runs ``OUT/<name>_more<r>``:
    each draws, seeded, without replacement, from the pool pairs no earlier draw of the set took
    (``random``: graph pool steps, each given a random element as ``random_floor`` gives one), as
    many as the set's verdict rate so far says are missing, plus a margin. The first sample and
    every top-up are uniform draws from the same pool, so together they are one uniform sample;
    the rule stops on the count of verdicts, never on what the verdicts are."""
    import math

    base = out / "graph"
    pool = sorted(c["pair_id"] for c in pq.read_table((base if name == "random" else out / name) /
                                                      "candidates.parquet", columns=["pair_id"]).to_pylist())
    for r in range(1, TOP_UP_ROUNDS + 1):
        runs = set_runs(out, name)
        got = [o["replay_outcome"] for run in runs for o in outcomes(run)]
        verdicts = sum(o != "replay_mismatch" for o in got)
        if verdicts >= cfg.min_verdicts:
            return
        more = out / f"{name}_more{r}"
        if more in runs:
            continue
        sources = [base, *sorted(out.glob("random_more*_src"))] if name == "random" else runs
        taken = {c["pair_id"] for run in sources for c in pq.read_table(
            run / "candidates.parquet", columns=["pair_id", "sampled"]).to_pylist() if c["sampled"]}
        left = [p for p in pool if p not in taken]
        need = math.ceil((cfg.min_verdicts - verdicts) * len(got) / max(verdicts, 1) * 1.15) + 5
        extra = set(random.Random(f"{cfg.seed}/{name}/more{r}").sample(left, min(need, len(left))))
        if not extra:
            return
        if name == "random":
            src = out / f"random_more{r}_src"
            sampled_copy(base, src, extra, draw=True)
            shutil.rmtree(more, ignore_errors=True)
            random_floor(src, more, cfg.seed)
        else:
            sampled_copy(out / name, more, extra, draw=True)
        print(f"  {name}: {verdicts} verdicts of {len(got)} pairs; {len(extra)} more drawn ({more.name})",
              file=sys.stderr)
        _cli("teacher.verify", "--run", str(more), "--verifier", "replay", "--replay-cache-dir",
             str(out / "replay_cache"), "--replay-workers", str(cfg.workers), "--quiet")


def teacher_decisions(run: Path, tdir: Path, llm: list[str]) -> dict[str, bool]:
    """pair_id -> kept by the teacher (``llm``: teacher.verify's model flags) on a copy of the
    replayed ``run`` holding only the pairs the replay decided (a ``replay_mismatch`` has no truth
    to hold the teacher against)."""
    if not (tdir / "preferences.parquet").exists():
        decided = {r["pair_id"] for r in outcomes(run) if r["replay_outcome"] != "replay_mismatch"}
        sampled_copy(run, tdir, decided)
        _cli("teacher.verify", "--run", str(tdir), *llm, "--quiet", "--axtree-chars", "2000")
    return {r["pair_id"]: kept for f, kept in (("preferences.parquet", True), ("discarded.parquet", False))
            for r in pq.read_table(tdir / f, columns=["pair_id"]).to_pylist()}


def teacher_accuracy(rows: list[dict], kept_by: dict[str, bool]) -> dict:
    """The teacher's discard decision against the replay's truth, on the pairs replayed to a verdict."""
    rows = [r for r in rows if r["replay_outcome"] != "replay_mismatch" and r["pair_id"] in kept_by]
    disc = [r for r in rows if not kept_by[r["pair_id"]]]
    harmful = [r for r in rows if r["replay_outcome"] == "harmful"]
    return {"pairs": len(rows), "discarded": len(disc),
            "equivalent": sum(r["replay_outcome"] == "equivalent" for r in rows),
            "true_discards": sum(r["replay_outcome"] == "equivalent" for r in disc),
            "harmful": len(harmful), "harmful_kept": sum(kept_by[r["pair_id"]] for r in harmful)}


def endpoint_flags(llm) -> list[str]:
    """teacher.verify's flags for the endpoint teacher ``llm`` (the settings that differ from the defaults)."""
    from dataclasses import fields

    from llm import LLMConfig

    flags = []
    for f in fields(LLMConfig):
        value = getattr(llm, f.name)
        if f.name in ("seed", "temperature", "max_tokens") or value == getattr(LLMConfig(), f.name):
            continue
        flag = "--" + f.name.replace("_", "-")
        flags += [flag] if value is True else [flag.replace("--", "--no-", 1)] if value is False else [flag, str(value)]
    return flags


def base_tree(cfg: ReplayBench) -> Path:
    """The base tree (``git archive`` of ``cfg.base_commit``), made when missing, sharing this
    checkout's virtual environment and model cache."""
    base = Path(cfg.base_dir)
    if not (base / "teacher" / "replay.py").exists():
        base.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", cfg.base_commit], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
    for name in (".venv", ".cache"):
        if not (base / name).exists():
            (base / name).symlink_to(ROOT / name)
    return base


def timed_verify(tree: Path, run: Path, *flags: str) -> dict:
    """One ``teacher.verify --verifier replay --replay-no-cache`` from ``tree`` on ``run``: wall and
    CPU seconds (this process's waited-for descendants) and the load around it."""
    import os
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0, t = os.getloadavg()[0], time.perf_counter()
    subprocess.run([sys.executable, "-m", "teacher.verify", "--run", str(run), "--verifier", "replay",
                    "--replay-no-cache", "--quiet", *flags], cwd=tree, check=True, stdout=subprocess.DEVNULL)
    wall, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "load": [round(load0, 1), round(os.getloadavg()[0], 1)]}


def throughput(cfg: ReplayBench, out: Path) -> dict:
    """The interleaved runs (module doc): per arm its runs, median pairs/s and CPU s per pair,
    the ratios to the base and the pairs whose outcome differs from the base's."""
    import statistics

    base, source = base_tree(cfg), out / "graph"
    cands = pq.read_table(source / "candidates.parquet")
    sampled = sorted(c["pair_id"] for c in cands.to_pylist() if c["sampled"])
    keep = set(sampled[:cfg.pairs] if cfg.pairs else sampled)
    pairs = len(keep)
    arms = {"base": (base, ()), "new": (ROOT, ()), "new_1_worker": (ROOT, ("--replay-workers", "1"))}
    runs: dict[str, list[dict]] = {a: [] for a in arms}
    outcome_of: dict[str, dict] = {}
    for r in range(cfg.rounds):
        for arm in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
            run = out / "tp" / f"{arm}-{r}"
            sampled_copy(source, run, keep if cfg.pairs else None)     # the first --pairs sampled pairs
            tree, flags = arms[arm]
            m = timed_verify(tree, run, *flags)
            runs[arm].append(m)
            got = {row["pair_id"]: row["replay_outcome"] for row in outcomes(run)}
            outcome_of.setdefault(arm, got)
            print(f"  round {r} {arm}: {m}", file=sys.stderr)
    result = {"pairs": pairs, "runs": runs, "arms": {}}
    for arm, ms in runs.items():
        wall, cpu = statistics.median(m["wall_s"] for m in ms), statistics.median(m["cpu_s"] for m in ms)
        result["arms"][arm] = {"pairs_per_s": round(pairs / wall, 3), "wall_s": wall,
                               "cpu_s_per_pair": round(cpu / pairs, 2)}
    for arm in ("new", "new_1_worker"):
        a, b = result["arms"][arm], result["arms"]["base"]
        a["ratio_pairs_per_s"] = round(a["pairs_per_s"] / b["pairs_per_s"], 2)
        a["ratio_cpu_s"] = round(b["cpu_s_per_pair"] / a["cpu_s_per_pair"], 2) if a["cpu_s_per_pair"] else None
        a["outcomes_differ"] = sorted(p for p, o in outcome_of[arm].items() if outcome_of["base"].get(p) != o)
    result["outcomes"] = dict(Counter(outcome_of["base"].values()))
    if cfg.fixed_set:
        write_fixed_set(source, outcome_of["base"], Path(cfg.fixed_set), cfg.fixed_steps)
    return result


def write_fixed_set(run: Path, outcome: dict, path: Path, n_steps: int) -> None:
    """The identity test's fixed set: the sampled pairs of the first ``n_steps`` steps with more than
    one outcome among them first (by task, trajectory, step), each with what it replays and the
    base's outcome."""
    from data.rundir import RunDir

    cands = sorted((c for c in pq.read_table(run / "candidates.parquet").to_pylist() if c["sampled"]),
                   key=lambda c: (c["task_id"], c["traj_id"], c["step_idx"], c["pair_id"]))
    keys = list(dict.fromkeys((c["traj_id"], c["step_idx"]) for c in cands))
    kinds = {k: {outcome[c["pair_id"]] for c in cands if (c["traj_id"], c["step_idx"]) == k} for k in keys}
    keys = sorted(keys, key=lambda k: -len(kinds[k]))
    chosen = set(keys[:n_steps])
    states = RunDir(run).states(chosen)
    meta = {r["traj_id"]: json.loads(r["meta"]) for r in pq.read_table(run / "trajectories.parquet",
                                                                       columns=["traj_id", "meta"]).to_pylist()}
    rows = [{"pair_id": c["pair_id"], "task": meta[c["traj_id"]]["task"], "seed": meta[c["traj_id"]]["seed"],
             "history": list(states[(c["traj_id"], c["step_idx"])].history),
             "observation": states[(c["traj_id"], c["step_idx"])].axtree, "action_pos": c["action_pos"],
             "action_neg": c["action_neg"], "base_outcome": outcome[c["pair_id"]]}
            for c in cands if (c["traj_id"], c["step_idx"]) in chosen]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


def build_sets(cfg: ReplayBench, out: Path, demos: Path, sets) -> None:
    """The candidate sets: one ingest and graph (in ``OUT/graph``) copied into every graph set,
    each mined with its flags (``MINE_FLAGS``); No-Graph ingested and mined alone; the random floor
    on the graph sample's steps."""
    base = out / "graph"
    fill = ["--no-fill"] if cfg.no_fill else []
    if any(s.startswith("graph") or s == "random" for s in sets) and not (base / "graphs" / "manifest.json").exists():
        _cli("data.ingest", "--source", "canonical", "--input", str(demos / "trajectories.parquet"), "--out", str(base))
        _cli("graph.build", "--run", str(base))
    for name in sets:
        run = out / name
        if name == "random" or (run / "candidates.parquet").exists():
            continue
        if name == "no_graph":
            shutil.rmtree(run, ignore_errors=True)
            _cli("data.ingest", "--source", "canonical", "--input", str(demos / "trajectories.parquet"),
                 "--out", str(run))
        elif name != "graph":
            shutil.rmtree(run, ignore_errors=True)
            run.mkdir(parents=True)
            for f in ("trajectories.parquet", "stats.json", "rejects.jsonl"):
                if (base / f).exists():
                    shutil.copy(base / f, run / f)
            shutil.copytree(base / "graphs", run / "graphs")
        _cli("proposals.mine", "--run", str(run), "--sample-size", str(cfg.sample_size), "--seed", str(cfg.seed),
             "--quiet", *fill, *MINE_FLAGS[name])
    if "random" in sets:
        if not (base / "candidates.parquet").exists():
            _cli("proposals.mine", "--run", str(base), "--sample-size", str(cfg.sample_size), "--seed",
                 str(cfg.seed), "--quiet", *fill)
        random_floor(base, out / "random", cfg.seed)


def comparisons(rows: dict[str, list[dict]], res: dict[str, dict]) -> dict:
    """The pre-stated comparisons (bench/RESULTS.md, "Replay verdict at size"): every set's false
    negatives and hardness shares against the graph set's (difference, Newcombe interval), and
    each set's false-negative rate at the graph's hardness (``replay_verdict.standardized``)."""
    from bench.replay_verdict import difference, standardized

    if "graph" not in res:
        return {}
    g = res["graph"]
    out = {}
    for name, s in res.items():
        if name == "graph":
            continue
        out[name] = {"fn_minus_graph": difference(s["false_negatives"], g["false_negatives"]),
                     **{f"{h}_minus_graph": difference(s["hardness"][h], g["hardness"][h])
                        for h in ("gmcp", "same_op", "same_container")},
                     "fn_minus_graph_by_bucket": {
                         b: difference(s["by"]["bucket"][b]["false_negatives"], g["by"]["bucket"][b]["false_negatives"])
                         for b in s["by"]["bucket"] if b in g["by"]["bucket"]},
                     "fn_at_graph_hardness": standardized(rows[name], rows["graph"]),
                     "graph_fn_at_its_hardness": standardized(rows["graph"], rows[name])}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("bench/replay.py", __doc__)
    ReplayBench.add_args(ap)
    from llm import LLMConfig

    LLMConfig.add_args(ap, prefix="teacher-", skip=("seed", "temperature", "max_tokens"))
    args = ap.parse_args(argv)
    cfg, endpoint = ReplayBench.from_args(args), LLMConfig.from_args(args, prefix="teacher-")
    if cfg.small:
        cfg.tasks, cfg.seeds, cfg.sample_size = SMALL["tasks"], SMALL["seeds"], SMALL["sample_size"]
    out = (ROOT / cfg.out).resolve()
    t0 = time.perf_counter()
    demos = out / "demos"
    if not (demos / "summary.json").exists():     # written when every episode is done
        _cli("search.miniwob", "--policy", "solver", "--prm", "none", "--resume", "--tasks", *cfg.tasks,
             "--seeds", cfg.seeds, "--out", str(demos),
             *(["--max-steps", str(cfg.max_steps)] if cfg.max_steps else []))
    summary = json.loads((demos / "summary.json").read_text())
    if cfg.throughput:
        build_sets(cfg, out, demos, ["graph"])
        result = throughput(cfg, out)
        (out / "throughput.json").write_text(json.dumps(result, indent=1, sort_keys=True))
        print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
        return 0
    build_sets(cfg, out, demos, cfg.sets)
    cache = out / "replay_cache"
    for name in cfg.sets:
        if not (out / name / "preferences.parquet").exists():
            _cli("teacher.verify", "--run", str(out / name), "--verifier", "replay", "--replay-cache-dir", str(cache),
                 "--replay-workers", str(cfg.workers), "--quiet")
    if cfg.min_verdicts:
        for name in cfg.sets:
            top_up(cfg, out, name)
    return report(cfg, endpoint, out, summary, t0)


def report(cfg: ReplayBench, endpoint, out: Path, summary: dict, t0: float) -> int:
    """The summary of every set replayed in ``out`` (the tables, figures, comparisons, teachers)."""
    from bench.replay_verdict import by, figure, group_table, markdown, stats, verdict_rows

    result = {"demonstrations": {"per_task": {k: v["success_rate"] for k, v in summary["per_task"].items()},
                                 "episodes": summary["tasks"]},
              "config": {"tasks": cfg.tasks, "seeds": cfg.seeds, "sample_size": cfg.sample_size, "seed": cfg.seed,
                         "workers": cfg.workers, "no_fill": cfg.no_fill, "max_steps": cfg.max_steps}}
    lines = [f"Demonstrations: {summary['tasks']} solver episodes, success per task "
             f"{result['demonstrations']['per_task']}", "",
             f"False negatives = `equivalent` among pairs replayed to a verdict; paper's audit: "
             f"{FN_PAPER:.0%} (surfPRM-data), {FN_WEBARBITER:.0%} (WebArbiter's data). Wilson 95% intervals.", ""]
    done = [s for s in SETS if (out / s / "preferences.parquet").exists()]
    rows = {s: [r for run in set_runs(out, s) for r in verdict_rows(run)] for s in done}
    res = {s: stats(rows[s]) for s in done}
    figures = Path(cfg.figures).resolve() if cfg.figures else out / "figures"
    for s in done:
        res[s]["by"] = {k: by(rows[s], k) for k in ("rule", "axis", "task", "bucket", "same_container")}
        res[s]["stored_gmcp_agrees"] = sum(r["stored_gmcp"] == r["gmcp"] for r in rows[s])
        figure(NAMES[s], rows[s], figures / f"replay_verdict_{s}.png")
    result["sets"] = res
    result["comparisons"] = comparisons(rows, res)
    lines += markdown(res, NAMES)
    for s in done:
        lines += ["", f"### {NAMES[s]}", ""]
        for k in ("rule", "axis", "task", "bucket"):
            if s == "random" and k in ("rule", "axis"):
                continue
            lines += group_table(res[s]["by"][k], k) + [""]
    for s, c in result["comparisons"].items():
        d, st = c["fn_minus_graph"], c["fn_at_graph_hardness"]
        if d["diff"] is not None:
            at = "n/a" if st["rate"] is None else f"{st['rate']:.1%}"
            lines.append(f"{NAMES[s]} - graph, false negatives: {d['diff']:+.1%} [{d['lo']:+.1%}, {d['hi']:+.1%}]; "
                         f"at the graph's distance mix {at} (uncovered {st['uncovered']:.0%}); per distance bucket: "
                         + ", ".join(f"{b} {x['diff']:+.1%} [{x['lo']:+.1%}, {x['hi']:+.1%}]"
                                     for b, x in c["fn_minus_graph_by_bucket"].items() if x["diff"] is not None))
    teachers = {"teacher": ("embedded teacher (score-both)", ["--backend", "local"])} if cfg.teacher else {}
    if endpoint.base_url:
        teachers["teacher_endpoint"] = (f"endpoint teacher {endpoint.model} at {endpoint.base_url}",
                                        endpoint_flags(endpoint))
    for key, (label, llm) in teachers.items():
        for name in (s for s in TEACHER_SETS if s in done):
            runs = set_runs(out, name)          # the sample and its top-ups, each judged in its own copy
            decisions = {pid: kept for run in runs
                         for pid, kept in teacher_decisions(run, out / f"{run.name}_{key}", llm).items()}
            t = res[name][key] = teacher_accuracy([o for run in runs for o in outcomes(run)], decisions)
            lines += ["", f"{label.capitalize()} on {NAMES[name]} ({t['pairs']} pairs): discard precision vs "
                      f"`equivalent` {share(t['true_discards'], t['discarded'])}, "
                      f"recall {share(t['true_discards'], t['equivalent'])}; "
                      f"keeps {share(t['harmful_kept'], t['harmful'])} of the `harmful` pairs."]
    result["seconds"] = round(time.perf_counter() - t0, 1)
    lines.append(f"\nWall time {result['seconds']} s.")
    (out / "summary.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
