"""PRM-guided search on MiniWoB++ offline: quality, time per step, parallel episodes, the loop back.

    .venv/bin/python bench/miniwob.py [--tasks click-test click-button ...] [--seeds 0] [--out runs/bench-miniwob]

Part 1 (quality): ``python -m search.miniwob`` with the embedded SmolLM2 as the policy alone
(``--prm none``: one greedy sample) and with the embedded PRM (``--n`` samples at temperature 1.0,
knockout), same tasks and seeds; success rate per task and macro, and seconds per step split into
policy, judge and browser (the step lines' ``policy_s``, ``judge_s``, ``browser_s``). The runs use
``--resume``: a rerun reuses finished episodes.
Part 2 (the PRM's picks): the embedded PRM judges, at every step, the right and a wrong action of
a scripted policy (``tests/search/miniwob_scripts.py``) on click-button and enter-text: success
rate and judge seconds per step.
Part 3 (parallel episodes): episodes per minute with ``--workers 1`` (in process) and ``--workers 2``
(Prefect tasks on a local Dask cluster), wall clock of the whole command (Prefect's temporary
server and the cluster's start included), with a scripted policy that solves click-button and
enter-text (``tests/search/miniwob_scripts.py``, behind an OpenAI-protocol server): browser and
harness, not model, time.
Part 4 (the loop): the episodes of part 3 -> ``data.ingest --source canonical`` -> ``graph.build``
-> ``proposals.mine`` (fill values from the fixed-answer peer): trajectories, graph nodes and
edges, negatives by rule.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "search")]

from miniwob_scripts import actions, policy  # noqa: E402
from scripted_llm import scripted_server  # noqa: E402

from cli.config import make_parser  # noqa: E402

DEFAULT_TASKS = ["click-test", "click-button", "click-dialog", "focus-text", "enter-text"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "PREFECT_HOME": str(ROOT / ".cache" / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
       "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", "DO_NOT_TRACK": "1"}


def search(args: list[str]) -> float:
    """Run ``python -m search.miniwob args``; its wall-clock seconds."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "search.miniwob", *args], cwd=ROOT, env=ENV,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"search.miniwob {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return time.perf_counter() - t


def step_times(out: Path) -> dict:
    """Mean seconds per step (policy, judge, browser) over every step of a run."""
    steps = [r for f in sorted((out / "tasks").glob("*.jsonl")) for r in map(json.loads, f.read_text().splitlines())
             if r["type"] == "step"]
    return {"steps": len(steps), **{k: statistics.mean(r[k] for r in steps) if steps else None
                                    for k in ("policy_s", "judge_s", "browser_s")}}


def quality(a, out: Path) -> list[str]:
    common = ["--policy", "embedded", "--tasks", *a.tasks, "--seeds", a.seeds, "--max-steps", str(a.max_steps),
              "--max-format-errors", str(a.max_steps), "--policy-max-tokens", str(a.policy_max_tokens), "--resume"]
    search(["--prm", "none", "--out", str(out / "base"), *common])
    search(["--prm", "embedded", "--n", str(a.n), "--prm-max-tokens", str(a.prm_max_tokens), "--out", str(out / "prm"),
            *common])
    lines = ["| run | success rate | per task | steps | policy s/step | judge s/step | browser s/step |",
             "|---|---|---|---|---|---|---|"]
    for name in ("base", "prm"):
        s = json.loads((out / name / "summary.json").read_text())
        t = step_times(out / name)
        per = ", ".join(f"{k.removeprefix('miniwob.')} {v['success']}/{v['tasks']}" for k, v in s["per_task"].items())
        lines.append(f"| {name} | {s['macro']['success_rate']:.2f} | {per} | {t['steps']} | {t['policy_s']:.1f} | "
                     f"{t['judge_s']:.1f} | {t['browser_s']:.2f} |")
    return lines


def judged(a, out: Path) -> list[str]:
    """The embedded PRM alone: each step's candidates are the right and a wrong action (scripted)."""
    def both(payload):
        acts = actions(payload["messages"][-1]["content"])
        return [f"```\n{acts[k]}\n```" for k in ("wrong", "right")][:payload["n"]]

    server = scripted_server(both)
    try:
        search(["--prm", "embedded", "--n", "2", "--prm-max-tokens", str(a.prm_max_tokens), "--policy", "scripted",
                "--policy-base-url", server.base_url, "--policy-no-cache", "--policy-api-key-env",
                "SURFPRM_BENCH_KEY_UNSET", "--tasks", "click-button", "enter-text", "--seeds", a.parallel_seeds,
                "--max-steps", "4", "--out", str(out / "judge"), "--resume"])
    finally:
        server.shutdown()
    s = json.loads((out / "judge" / "summary.json").read_text())
    t = step_times(out / "judge")
    per = ", ".join(f"{k.removeprefix('miniwob.')} {v['success']}/{v['tasks']}" for k, v in s["per_task"].items())
    return ["| run | success rate | per task | steps | judge calls | policy s/step | judge s/step | browser s/step |",
            "|---|---|---|---|---|---|---|---|",
            f"| scripted right+wrong, embedded PRM | {s['macro']['success_rate']:.2f} | {per} | {t['steps']} | "
            f"{s['totals']['judge_calls']} | {t['policy_s']:.2f} | {t['judge_s']:.1f} | {t['browser_s']:.2f} |"]


def parallel(a, out: Path) -> list[str]:
    server = scripted_server(policy("right"))
    lines = ["| workers | episodes | wall s | episodes/min | browser s/step |", "|---|---|---|---|---|"]
    try:
        for workers in (1, 2):
            run = out / f"workers-{workers}"
            wall = search(["--prm", "none", "--policy", "scripted", "--policy-base-url", server.base_url,
                           "--policy-no-cache", "--policy-api-key-env", "SURFPRM_BENCH_KEY_UNSET",
                           "--tasks", "click-button", "enter-text", "--seeds", a.parallel_seeds, "--max-steps", "4",
                           "--workers", str(workers), "--out", str(run)])
            s = json.loads((run / "summary.json").read_text())
            lines.append(f"| {workers} | {s['tasks']} (success {s['macro']['success_rate']:.2f}) | {wall:.0f} | "
                         f"{60 * s['tasks'] / wall:.1f} | {step_times(run)['browser_s']:.2f} |")
    finally:
        server.shutdown()
    return lines


def loop(out: Path) -> list[str]:
    import pyarrow.parquet as pq

    from data.ingest import ingest
    from graph.build import build_graphs
    from llm import LLMConfig
    from llm.serve import fixed_answer, serve_in_thread
    from proposals.mine import MineConfig, mine

    run = out / "loop"
    stats = ingest("canonical", [out / "workers-1" / "trajectories.parquet"], run, quiet=True)
    rows = pq.read_table(run / "trajectories.parquet").to_pylist()
    ok = {r["traj_id"] for r in rows if r["success"]}
    build_graphs(run, workers=1)
    nodes = sum(pq.read_metadata(p).num_rows for p in (run / "graphs").glob("*/nodes.parquet"))
    edges = sum(pq.read_metadata(p).num_rows for p in (run / "graphs").glob("*/edges.parquet"))
    server = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "fixed")
    try:
        mine(run, MineConfig(sample_size=200, seed=42), LLMConfig(base_url=server.base_url, model="fixed",
                                                             cache_dir=str(run / "llm")), workers=1)
    finally:
        server.shutdown()
    cands = pq.read_table(run / "candidates.parquet").to_pylist()
    by_rule = dict(Counter(c["rule"] for c in cands))
    return [f"ingest: {stats.n_in} rows in, {stats.n_out} out, rejected {dict(stats.rejected)}; "
            f"{len({r['traj_id'] for r in rows})} trajectories, {len(ok)} successful",
            f"graphs: {len(list((run / 'graphs').glob('*/nodes.parquet')))} sites, {nodes} nodes, {edges} edges",
            f"negatives: {len(cands)} candidates, GMCP {sum(c['gmcp'] for c in cands)}, by rule {by_rule}"]


def main(argv=None) -> int:
    ap = make_parser(prog="bench/miniwob.py")
    ap.add_argument("--tasks", nargs="*", default=DEFAULT_TASKS)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--max-steps", type=int, default=2)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--policy-max-tokens", type=int, default=40)
    ap.add_argument("--prm-max-tokens", type=int, default=48)
    ap.add_argument("--parallel-seeds", default="0-3")
    ap.add_argument("--parts", nargs="*", default=["quality", "judge", "parallel", "loop"])
    ap.add_argument("--out", default="runs/bench-miniwob")
    a = ap.parse_args(argv)
    out = ROOT / a.out
    print(f"load average at start: {os.getloadavg()}, cores: {os.cpu_count()}")
    for part, fn in (("quality", lambda: quality(a, out)), ("judge", lambda: judged(a, out)),
                     ("parallel", lambda: parallel(a, out)),
                     ("loop", lambda: loop(out))):
        if part in a.parts:
            t = time.perf_counter()
            print(f"\n## {part}\n" + "\n".join(fn()) + f"\n({time.perf_counter() - t:.0f} s, load {os.getloadavg()})",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
