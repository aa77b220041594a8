"""Mining and verification on Dask: one process against 1 and 2 local Dask workers (issue 29 item 5).

    .venv/bin/python bench/dask_flows.py [--scale 1] [--latency 0.2] [--concurrency 64] [--rounds 1] [--out DIR]

The pool of ``bench/paper_scale.py`` (854 x scale trajectories, ~9,497 x scale observations, 50
sites, bids perturbed per copy), ingested and its graphs built once (not timed). Then, in rounds
that interleave the three ways on one machine, each command in its own process:

- mining, the fills served from a warm LLM cache (a first, untimed ``proposals.mine`` asks them
  from the scripted server): ``proposals.mine`` (one command, its fork pool: one process per
  core), ``flows.propose_negatives --dask-local --dask-workers 1`` and ``... 2`` (one ``mine-chunk``
  task per chunk of a site's trajectories);
- verification with a cold cache against ``paper_scale``'s scripted teacher (``--latency`` per
  answer, ~1.12 calls per pair): ``teacher.verify --k 5 --concurrency C`` and ``flows.synthesize
  --verify-only --dask-local --dask-workers 1|2`` (``verify-shard`` tasks; the flow also exports and
  writes the card and report).

Per command: wall time, CPU time (the command and what it waited for: Dask's worker processes,
Prefect's temporary server), peak RSS (``bench/graphs.py``'s sampler), the stage's own seconds
from ``stats.json`` (from its checks to its files: without Prefect's, Dask's and the export's
start-up), and whether its outputs are byte-identical to the one-process command's.
Writes ``OUT/summary.json`` and the logs; the run directories are removed unless ``--keep``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.paper_scale import MODEL, PAPER, Endpoint, build_pool, commit, machine, run_stage, write_labels  # noqa: E402
from cli.config import make_parser  # noqa: E402
from data.ingest import ingest  # noqa: E402

MINED = ("candidates.parquet", "audit/candidates.json", "rejects.jsonl")
VERIFIED = ("preferences.parquet", "discarded.parquet")
WAYS = {"one process": [], "Dask, 1 worker": ["--dask-local", "--dask-workers", "1"],
        "Dask, 2 workers": ["--dask-local", "--dask-workers", "2"]}


def _same(a: Path, b: Path, rels) -> bool:
    return all((a / rel).read_bytes() == (b / rel).read_bytes() for rel in rels)


def _stage_seconds(run: Path, stage: str) -> float:
    return json.loads((run / "stats.json").read_text())[stage]["seconds"]


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(prog="bench/dask_flows.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--scale", type=float, default=1.0, help="x the paper's 854 trajectories / 9,497 observations")
    ap.add_argument("--latency", type=float, default=0.2, help="the scripted endpoint's seconds per answer")
    ap.add_argument("--concurrency", type=int, default=64, help="the teacher's requests in flight (split between "
                                                                "the Dask workers' shards)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the three ways")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "dask-flows")
    ap.add_argument("--keep", action="store_true", help="keep the run directories and caches")
    args = ap.parse_args(argv)
    if not (args.shared / "agentlab_workarena").is_dir():
        print(f"skip: shared traces not found at {args.shared}")
        return 0
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    logs = out / "logs"
    logs.mkdir(parents=True)
    prefect_home = out / "prefect"
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TQDM_DISABLE="1",
                      TOKENIZERS_PARALLELISM="false", PREFECT_HOME=str(prefect_home),
                      PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1",
                      PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300")
    py = sys.executable
    n_traj = max(1, round(PAPER["trajectories"] * args.scale))
    summary = {"commit": commit(), "machine": machine(), "scale": args.scale, "latency_s": args.latency,
               "concurrency": args.concurrency, "load_start": [round(x, 2) for x in os.getloadavg()], "rows": []}
    base = out / "base"
    t = time.perf_counter()
    ingest("agentlab", [args.shared / "agentlab_workarena"], out / "agentlab", quiet=True)
    summary["pool"] = build_pool(out / "agentlab" / "trajectories.parquet", out / "pool.parquet", n_traj,
                                 max(n_traj, round(PAPER["observations"] * args.scale)), PAPER["sites"])
    ingest("canonical", [out / "pool.parquet"], base, quiet=True)
    run_stage("graph.build (setup)", [py, "-m", "graph.build", "--run", str(base)], logs)
    print(f"setup: {summary['pool']} in {time.perf_counter() - t:.0f} s", flush=True)

    cache = out / "fill-cache"
    mine = ["--sample-size", str(PAPER["pairs"]), "--seed", "42", "--quiet", "--fill-model", MODEL,
            "--fill-cache-dir", str(cache), "--fill-concurrency", str(args.concurrency)]
    with Endpoint(args.latency, out / "labels.json") as ep:
        mine += ["--fill-base-url", ep.url]
        shutil.copytree(base, out / "mined")
        run_stage("proposals.mine (fills, setup)", [py, "-m", "proposals.mine", "--run", str(out / "mined"), *mine],
                  logs)
        write_labels(out / "mined", out / "labels.json")        # the scripted teacher's verdicts per pair
        teacher = ["--k", "5", "--base-url", ep.url, "--model", MODEL, "--concurrency", str(args.concurrency)]
        for rnd in range(args.rounds):
            for i, (way, dask) in enumerate(WAYS.items()):
                run = out / f"mine-{rnd}-{i}"
                shutil.copytree(base, run)
                cmd = [py, "-m", "flows.propose_negatives", *dask] if dask else [py, "-m", "proposals.mine"]
                before = ep.calls()
                r = run_stage(f"mining, {way}", [*cmd, "--run", str(run), *mine], logs)
                r.update(stage="mining", way=way, round=rnd, stage_seconds=_stage_seconds(run, "proposals.mine"),
                         identical=_same(run, out / "mined", MINED), fill_calls=ep.calls()[0] - before[0])
                summary["rows"].append(r)
                shutil.rmtree(run)
            for i, (way, dask) in enumerate(WAYS.items()):
                run = out / f"verify-{rnd}-{i}"
                shutil.copytree(out / "mined", run)
                cmd = [py, "-m", "flows.synthesize", "--verify-only", *dask] if dask else \
                    [py, "-m", "teacher.verify", "--quiet"]
                before = ep.calls()
                r = run_stage(f"verify, {way}", [*cmd, "--run", str(run), *teacher,
                                                 "--cache-dir", str(out / f"teacher-cache-{rnd}-{i}")], logs)
                calls = ep.calls()[1] - before[1]
                r.update(stage="verify", way=way, round=rnd, stage_seconds=_stage_seconds(run, "teacher.verify"),
                         judgment_calls=calls, floor_s=calls * args.latency / args.concurrency)
                if dask:
                    r["identical"] = _same(run, out / f"verify-{rnd}-0", VERIFIED)
                summary["rows"].append(r)
            for i in range(len(WAYS)):
                shutil.rmtree(out / f"verify-{rnd}-{i}")
    summary["load_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"\ndask_flows x{args.scale:g}: commit {summary['commit']}; {summary['machine']}")
    print(f"load average at start {summary['load_start']}, at end {summary['load_end']}")
    print(f"{'command':<28} {'wall s':>7} {'CPU s':>7} {'stage s':>8} {'RSS MB':>7} {'load':>5}  identical  calls")
    for r in summary["rows"]:
        calls = r.get("judgment_calls", r.get("fill_calls"))
        floor = f" (floor {r['floor_s']:.1f} s)" if "floor_s" in r else ""
        print(f"{r['name']:<28} {r['seconds']:>7.1f} {r['cpu']:>7.1f} {r['stage_seconds']:>8.1f} "
              f"{r['peak_rss_mb']:>7.0f} {r['load']:>5.1f}  {str(r.get('identical', '-')):<9}  {calls}{floor}")
    if not args.keep:
        for bulky in ("agentlab", "base", "mined", "pool.parquet", "labels.json", "fill-cache", "prefect"):
            path = out / bulky
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        for path in out.glob("teacher-cache-*"):
            shutil.rmtree(path, ignore_errors=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"summary: {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
