"""Benchmark proposals.mine on the replicated corpus of the graph benchmark, and its GMCP.

    .venv/bin/python bench/proposals.py [--shared ../shared/data] [--scale 32] [--workers N]
    .venv/bin/python bench/proposals.py --gmcp [--shared ../shared/data]
    .venv/bin/python bench/proposals.py --paper [--repeat 3] [--code DIR ...]
    .venv/bin/python bench/proposals.py --selection [--shared ../shared/data]


Ingests the shared AgentLab traces, replicates the successful trajectories ``--scale`` times
(>= 10,000 observations at 32x, as in bench/graphs.py), builds the graphs, warms the LLM cache
with one mining run (fill values completed by the embedded model), then times a second run in a
fresh process: the full pool with every fill completion cached. Prints candidates/s and peak RSS.

``--paper`` times the goal of issue 29 instead: the pool of ``bench/paper_scale.py`` (854
trajectories, ~9.5k observations, 50 sites, bids shifted per copy), its graphs, fill values
from a scripted OpenAI-protocol server (warm-up run), then ``python -m proposals.mine
--sample-size 10000 --seed 42`` as a command (``--repeat`` times, every fill from the LLM cache):
wall and CPU time of the whole command (process start and imports included), candidates/s
against the goal of 5,000, and the load average. ``--code DIR...`` runs each checkout's command in
turn on the same graphs (built by this checkout), interleaved, with a digest of each run's outputs.

``--gmcp`` runs the pipeline's own commands on the shared traces as they are (ingest, graph
build, mining with and without ``--prefer-same-op``, fills by the embedded model) and prints
what ``python -m proposals.audit --json`` re-derives from each run's files: GMCP is an outcome
of the rules, so it is reported both ways, per rule too.

``--selection`` (issue 36) mines the shared traces with ``--selection rank`` and with ``sample``
(seeds 42, 43, 44), both ``--no-fill`` (the rules are measured, not a fill model), and prints per
rule the candidates kept and the mean of the rule's own score over them (hops, similarity ratio,
steps away, extra distance to the goal, loop steps): how sampling from q_G changes the mix and
the difficulty of the negatives. Plus the pool's GMCP share.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.graphs import measure, replicate  # noqa: E402
from cli.config import make_parser  # noqa: E402
from data.ingest import ingest  # noqa: E402
from graph.build import build_graphs  # noqa: E402

_MINE = """
t = time.perf_counter()
from proposals.mine import MineConfig, mine
from llm import LLMConfig
stats = mine(sys.argv[1], MineConfig(sample_size=10000, seed=42), LLMConfig(cache_dir=sys.argv[2]),
             workers=int(sys.argv[3]) or None)
dt = time.perf_counter() - t
time.sleep(0.05)
print(json.dumps({"seconds": dt, "candidates": stats.n_out, "proposed": stats.n_in, "peak_rss_mb": peak[0] / 2**20,
                  "llm": stats.extra["llm"], "gmcp": stats.extra["audit"]["sample"]["gmcp_ratio"]}))
"""


def _cli(*args: str) -> str:
    """Run ``python -m ...`` in the project and return its stdout (the audit exits 1 on bad pairs)."""
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout


def gmcp_both_ways(shared: Path) -> None:
    """GMCP of the shared traces mined with and without --prefer-same-op, as the audit re-derives it."""
    with tempfile.TemporaryDirectory() as tmp:
        base, cache = Path(tmp) / "base", Path(tmp) / "llm-cache"
        _cli("data.ingest", "--source", "agentlab", "--input", str(shared / "agentlab_workarena"), "--out", str(base))
        _cli("graph.build", "--run", str(base))
        rows = {}
        for name, flags in (("default", []), ("--prefer-same-op", ["--prefer-same-op"])):
            run = Path(tmp) / name.strip("-")
            subprocess.run(["cp", "-r", str(base), str(run)], check=True)
            t = time.perf_counter()
            _cli("proposals.mine", "--run", str(run), "--fill-cache-dir", str(cache), *flags)
            seconds = time.perf_counter() - t
            audit = json.loads(_cli("proposals.audit", "--run", str(run), "--json"))
            stats = json.loads((run / "stats.json").read_text())["proposals.mine"]
            rows[name] = (audit, stats, seconds)
        print("| mining | pairs | GMCP | virtual positives | affordance mismatches | other | hallucinated | "
              "fill fields (valid / rejected) | seconds |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
        for name, (a, st, sec) in rows.items():
            fill = st["fill"]
            rejected = sum(v for k, v in st["rejected"].items() if k.startswith("fill_"))
            print(f"| `{name}` | {a['pairs']} | {a['gmcp_ratio']:.2%} | {a['virtual_positive_ratio']:.2%} | "
                  f"{a['affordance_mismatch_ratio']:.2%} | {a['other']} | {a['hallucinated_targets']} | "
                  f"{fill['fields']} ({sum(fill['valid_at_attempt'].values())} / {rejected}: "
                  f"{fill['invalid_answers']}) | {sec:.0f} |")
        rules = sorted(set().union(*(a["by_rule"] for a, _, _ in rows.values())))
        print("\n| rule | " + " | ".join(f"`{n}` pairs, GMCP" for n in rows) + " |")
        print("| --- | " + " | ".join("---:" for _ in rows) + " |")
        for rule in rules:
            cells = [a["by_rule"].get(rule, {"pairs": 0, "gmcp_ratio": 0.0}) for a, _, _ in rows.values()]
            print(f"| {rule} | " + " | ".join(f"{c['pairs']}, {c['gmcp_ratio']:.2%}" for c in cells) + " |")


# The evidence field each rule scores its candidates by (proposals.rules).
SCORE = {"structurally_near": "hops", "textually_near_graph_distant": "ratio", "repeat_past": "k_back",
         "act_too_early": "k_ahead", "away_from_goal": "neg_hops", "create_a_cycle": "loop_steps"}


def selection_both_ways(shared: Path) -> None:
    """Per rule, candidates and their mean score, mined by rank and by seeded draws from q_G."""
    import pyarrow.parquet as pq

    from llm import LLMConfig
    from proposals.mine import MineConfig, mine

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        ingest("agentlab", [shared / "agentlab_workarena"], run, quiet=True)
        build_graphs(run, workers=1)
        cols = {}
        for name, selection, seed in (("rank", "rank", 42), ("sample 42", "sample", 42), ("sample 43", "sample", 43),
                                      ("sample 44", "sample", 44)):
            stats = mine(run, MineConfig(selection=selection, seed=seed, no_fill=True), LLMConfig(), workers=1,
                         show_progress=False)
            rows = pq.read_table(run / "candidates.parquet").to_pylist()
            by_rule = {}
            for rule, key in SCORE.items():
                got = [json.loads(r["evidence"]).get(key) for r in rows if r["rule"] == rule]
                got = [g for g in got if isinstance(g, (int, float))]
                by_rule[rule] = (sum(r["rule"] == rule for r in rows), sum(got) / len(got) if got else None)
            multi = sum(len(r["rules"]) > 1 for r in rows)
            cols[name] = (by_rule, stats.n_out, stats.extra["audit"]["gmcp_ratio"], multi)
        print("| rule (score) | " + " | ".join(f"{n}: kept, mean score" for n in cols) + " |")
        print("| --- | " + " | ".join("---:" for _ in cols) + " |")
        for rule, key in SCORE.items():
            cells = [c[0][rule] for c in cols.values()]
            shown = [f"{n}, {'-' if m is None else f'{m:.2f}'}" for n, m in cells]
            print(f"| {rule} ({key}) | " + " | ".join(shown) + " |")
        print("| pool, GMCP, drawn by several rules | " + " | ".join(
            f"{n}, {g:.2%}, {k}" for _, n, g, k in cols.values()) + " |")


def _outputs(run: Path) -> str:
    """A digest of what a mining run wrote (candidates, rejects, the audit; stats.json less its times)."""
    h = hashlib.sha256()
    for name in ("candidates.parquet", "rejects.jsonl", "audit/candidates.json"):
        h.update((run / name).read_bytes())
    st = json.loads((run / "stats.json").read_text())["proposals.mine"]
    h.update(json.dumps({k: v for k, v in st.items() if k not in ("seconds", "started_at", "finished_at", "inputs")},
                        sort_keys=True, default=str).encode())
    return h.hexdigest()[:12]


def paper_scale(shared: Path, repeat: int, codes: list[Path] | None = None) -> None:
    """The mining goal of issue 29: the whole command on the paper-scale pool, fills cached.
    ``codes``: checkouts whose ``proposals.mine`` runs in turn, interleaved, on the same graphs
    (built by this checkout); each run's outputs digested, so that they can be compared."""
    codes = codes or [ROOT]
    from bench.paper_scale import FILL_ANSWER, PAPER, build_pool
    from llm.serve import fixed_answer, serve_in_thread

    with tempfile.TemporaryDirectory() as tmp:
        base, run, cache = Path(tmp) / "base", Path(tmp) / "run", Path(tmp) / "llm-cache"
        ingest("agentlab", [shared / "agentlab_workarena"], base, quiet=True)
        pool = build_pool(base / "trajectories.parquet", Path(tmp) / "pool.parquet", PAPER["trajectories"],
                          PAPER["observations"], PAPER["sites"])
        ingest("canonical", [Path(tmp) / "pool.parquet"], run, quiet=True)
        build_graphs(run)
        server = serve_in_thread(fixed_answer(FILL_ANSWER), "scripted")
        cmd = [sys.executable, "-m", "proposals.mine", "--run", str(run), "--sample-size", "10000", "--seed", "42",
               "--quiet", "--fill-base-url", server.base_url, "--fill-model", "scripted",
               "--fill-cache-dir", str(cache)]
        try:
            for i in range(repeat + 1):
                for code in (codes[:1] if i == 0 else codes):
                    load = os.getloadavg()[0]
                    t0, t = os.times(), time.perf_counter()
                    subprocess.run(cmd, cwd=code, check=True, capture_output=True)
                    wall, t1 = time.perf_counter() - t, os.times()
                    cpu = t1.children_user - t0.children_user + t1.children_system - t0.children_system
                    st = json.loads((run / "stats.json").read_text())["proposals.mine"]
                    what = "warm-up (fills from the scripted server)" if i == 0 else f"run {i} (fills cached)"
                    print(f"{what}: {pool['observations']} observations, {pool['sites']} sites, {st['out']} "
                          f"candidates, wall {wall:.2f} s, CPU {cpu:.2f} s, {st['out'] / wall:.0f} candidates/s "
                          f"(goal >= 5000), fill calls {st['llm'].get('calls', 0)}, cached "
                          f"{st['llm'].get('cached', 0)}, load {load:.2f}, outputs {_outputs(run)}, code {code}",
                          flush=True)
        finally:
            server.shutdown()


def main(argv: list[str] | None = None) -> int:
    ap = make_parser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--scale", type=int, default=32)
    ap.add_argument("--workers", type=int, default=0, help="0: one per core")
    ap.add_argument("--gmcp", action="store_true", help="GMCP with and without --prefer-same-op on the shared traces")
    ap.add_argument("--paper", action="store_true", help="the whole command on the paper-scale pool (issue 29's goal)")
    ap.add_argument("--repeat", type=int, default=3, help="--paper: timed runs after the warm-up")
    ap.add_argument("--code", type=Path, nargs="+", default=[ROOT],
                    help="--paper: checkouts whose proposals.mine runs in turn, interleaved (e.g. a `git archive` "
                         "of the base beside this one)")
    ap.add_argument("--selection", action="store_true", help="rank vs sample: rule mix and scores (issue 36)")
    args = ap.parse_args(argv)
    if not (args.shared / "agentlab_workarena").is_dir():
        print(f"skip: shared traces not found at {args.shared}")
        return 0
    if args.gmcp:
        gmcp_both_ways(args.shared)
        return 0
    if args.paper:
        paper_scale(args.shared, args.repeat, [c.resolve() for c in args.code])
        return 0
    if args.selection:
        selection_both_ways(args.shared)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base, run, cache = Path(tmp) / "base", Path(tmp) / "run", Path(tmp) / "llm-cache"
        ingest("agentlab", [args.shared / "agentlab_workarena"], base)
        n = replicate(base / "trajectories.parquet", run, args.scale)
        build_graphs(run)
        t = time.perf_counter()
        warm = measure(_MINE, run, cache, args.workers)
        print(f"warm-up (fills through the embedded model): {time.perf_counter() - t:.1f} s, "
              f"{warm['llm'].get('calls', 0)} fill calls, {warm['llm'].get('cached', 0)} cached")
        r = measure(_MINE, run, cache, args.workers)
        print(f"{n} observations, {r['proposed']} proposals, {r['candidates']} candidates in {r['seconds']:.2f} s "
              f"(process start and imports included)")
        print(f"candidates/s: {r['candidates'] / r['seconds']:.0f} (goal >= 2000); "
              f"proposals/s: {r['proposed'] / r['seconds']:.0f}; peak RSS {r['peak_rss_mb']:.0f} MB; "
              f"fill calls {r['llm'].get('calls', 0)}, all cached: {r['llm'].get('cached') == r['llm'].get('calls')}; "
              f"sample GMCP {r['gmcp']:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
