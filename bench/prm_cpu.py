"""The method at CPU scale: graph negatives, teacher-verified, train the embedded PRM, base vs trained.

    .venv/bin/python bench/prm_cpu.py [--out runs/prm-cpu] [--verify-pairs 64 --nograph-verify-pairs 24
        --train-pairs 12 --eval-pairs 24 --seeds 0,1,2 --ablation-seeds 0 --workers 1
        --variants graph,nograph,spatial,temporal,spatiotemporal]
    .venv/bin/python bench/prm_cpu.py --small            # make prm-demo: the bundled sample, minutes
    .venv/bin/python bench/prm_cpu.py --ground-truth [--tiny] ...   # replay-verified labels (bench/prm_truth.py)

Every stage is the project's own (``data.ingest``, ``graph.build``, ``proposals.mine``,
``teacher.verify``, ``dataset.export``, ``prm.train``, ``prm.evaluate``); this script only splits,
sizes and counts. Steps, each skipped when its output exists (rerun to resume):

1. ``all/``: the shared AgentLab traces (``--small``: the bundled sample) ingested once. Tasks are
   split by **template** (the task id without its seed suffix: ``order-ipad-pro_14`` and
   ``order-ipad-pro_2`` are one task), a seeded share ``--test-fraction`` of the templates held out
   (``prm.split.split_by_template``), and each side written as canonical trajectories
   (``split/{train,heldout}.parquet``) that the other run directories ingest: no held-out task
   reaches a training run, not even its graph.
2. ``heldout/``: graph built and negatives mined (all axes, the whole pool); the label-only export
   (``--format trl-labels``: the demonstrated action at a coin-flipped position) gives the
   evaluation pairs; ``--eval-pairs`` of them (random states, at most two pairs each) are ``eval.parquet``.
3. ``graph/`` and ``nograph/``: the training tasks mined with the graph and with ``--no-graph``
   (the paper's No-Graph ablation), ``--verify-pairs`` sampled (``--nograph-verify-pairs`` in the
   No-Graph run), verified by the embedded teacher
   (``teacher.verify``: score-both, one forward pass per order) and the kept pairs exported
   (``--format trl``). The kept share is measured, overall and per axis.
4. Training sets of ``--train-pairs`` rows each: ``graph`` (the mixture), ``nograph``, and one per
   axis (``spatial``, ``temporal``, ``spatiotemporal``: the graph run's kept pairs of that axis).
   Sets with fewer kept pairs are repeated to the same size, so every variant gets the same
   number of updates (the paper aligns update steps the same way for its smaller temporal axis).
5. ``prm.train`` (configs/prm/cpu-demo.yaml: LoRA r=8 on the embedded SmolLM2-135M, batch 1, one
   step per row) per variant and seed; ``prm.evaluate`` on ``eval.parquet`` for the base model and
   each trained one: verdicts by scoring the two answer tags (``--judge-mode score``), in both
   orders (a pair is right only when both orders pick the demonstrated action; pairs naming the
   same position twice are position-biased).
6. ``summary.json`` / ``summary.md``: pairwise and best-of-N accuracy per model (mean over seeds)
   with 95% intervals from a **bootstrap over held-out states** (pairs of one state move
   together; ``--bootstrap`` resamples), the paired difference to the base model with its
   interval, and whether the interval excludes zero.

Prompts use ``configs/prm/cpu-compact-prompt.yaml`` (the benchmark's markers and answer tag,
~900 tokens instead of ~1,600) with an AXTree budget of ``--axtree-chars`` characters, for the
teacher, the training rows and the evaluation alike. Torch runs with ``--threads`` (1) threads:
on a shared 2-core machine two spinning threads were ~3x slower per forward pass than one.
Trained model folders are deleted after their evaluation unless ``--keep-models``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa
import pyarrow.parquet as pq

from cli.config import CLIParser, Configurable, build, given, make_parser
from dataset.stats import wilson  # noqa: E402
from prm.split import fill_to, sample_states, split_by_template, task_template
from prm.stats import RULES, bootstrap, state_table

SHARED = ROOT.parent / "shared" / "data" / "agentlab_workarena"
BUNDLED = ROOT / "data" / "bundled" / "agentlab_workarena.parquet"
TEMPLATE = ROOT / "configs" / "prm" / "cpu-compact-prompt.yaml"
TRAIN_CONFIG = ROOT / "configs" / "prm" / "cpu-demo.yaml"
AXES = ("spatial", "temporal", "spatiotemporal")
VARIANTS = ("graph", "nograph") + AXES


def _ints(text: str) -> tuple[int, ...]:
    """``0,1,2`` -> (0, 1, 2); the empty text is no seeds."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers, not {text!r}") from None


def _variants(text: str) -> tuple[str, ...]:
    v = tuple(x for x in text.split(",") if x)
    if set(v) - set(VARIANTS) or "graph" not in v:
        raise argparse.ArgumentTypeError(
            f"a subset of {','.join(VARIANTS)} with graph (the main variant), not {text!r}")
    return v


@dataclass
class BenchConfig(Configurable):
    """Sizes and seeds of one bench run (see the module doc); every field is a flag (``cli.config``)."""

    ARG_GROUP = "bench"

    out: str = field(default="runs/prm-cpu", metadata={"help": "output folder (relative: to the repository)"})
    source: str = field(default="agentlab", metadata={
        "choices": ("agentlab", "canonical"), "help": "agentlab: the shared traces; canonical: the bundled sample"})
    input: str = field(default=str(SHARED), metadata={"help": "the traces data.ingest reads"})
    test_fraction: float = field(default=0.25, metadata={"gt": 0, "max": 1, "help": "share of task templates held out"})
    split_seed: int = field(default=42, metadata={
        "help": "seed of the split, the evaluation sample and the training sets"})
    verify_pairs: int = field(default=64, metadata={
        "min": 1, "help": "candidates the teacher verifies in the graph run"})
    nograph_verify_pairs: int | None = field(default=24, metadata={
        "min": 1, "help": "... in the No-Graph run (unset: --verify-pairs); it only needs --train-pairs kept, the "
                          "graph run also feeds each axis"})
    train_pairs: int = field(default=12, metadata={"min": 1, "help": "rows (= LoRA steps) per training"})
    eval_pairs: int = field(default=24, metadata={"min": 1, "help": "held-out pairs (random states, <= 2 pairs each)"})
    seeds: tuple[int, ...] = field(default=(0, 1, 2), metadata={
        "type": _ints, "metavar": "0,1,2", "help": "comma-separated training seeds of the main variant (graph)"})
    ablation_seeds: tuple[int, ...] = field(default=(0,), metadata={
        "type": _ints, "metavar": "0", "help": "comma-separated training seeds of the other variants ('' for none)"})
    variants: tuple[str, ...] = field(default=VARIANTS, metadata={
        "type": _variants, "metavar": "graph,...",
        "help": f"comma-separated subset of {','.join(VARIANTS)} with graph"})
    axtree_chars: int = field(default=400, metadata={
        "min": 1, "deprecated": ("prompt_budget",),
        "help": "AXTree characters of every prompt (teacher, training rows, evaluation; old name --prompt-budget)"})
    threads: int = field(default=1, metadata={"min": 1, "help": "torch threads per process"})
    workers: int = field(default=1, metadata={
        "min": 1, "help": "trainings (each followed by its evaluation) run at once"})
    bootstrap: int = field(default=2000, metadata={"min": 1, "help": "bootstrap resamples of the held-out states"})
    keep_models: bool = field(default=False, metadata={"help": "keep the trained weights after their evaluation"})
    extra_train_args: list[str] = field(default_factory=list, metadata={
        "help": "flags passed on to prm.train (the command line's unknown flags)"})

    def trainings(self) -> list[tuple[str, int]]:
        """(variant, seed) in the order they run, so that a cut-short run has the most to show: the
        main variant's first seed, the No-Graph ablation, the main variant's other seeds, then the
        single axes."""
        main = [("graph", s) for s in self.seeds] if "graph" in self.variants else []
        nograph = [("nograph", s) for s in self.ablation_seeds if "nograph" in self.variants]
        axes = [(v, s) for s in self.ablation_seeds for v in self.variants if v in AXES]
        graph_extra = [("graph", s) for s in self.ablation_seeds if "graph" in self.variants]
        return list(dict.fromkeys(main[:1] + nograph + main[1:] + graph_extra + axes))


SMALL = {"source": "canonical", "input": str(BUNDLED), "test_fraction": 0.25, "verify_pairs": 12,
         "train_pairs": 8, "eval_pairs": 8, "seeds": (0,), "ablation_seeds": (), "variants": ("graph",)}


# -- the stages ------------------------------------------------------------------------------------
def log(msg: str) -> None:
    print(f"[prm_cpu {time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", flush=True)


def env(cfg: BenchConfig) -> dict:
    e = dict(os.environ)
    e.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
              "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(cfg.threads),
              "MKL_NUM_THREADS": str(cfg.threads), "PYTHONPATH": str(ROOT)})
    return e


def sh(cfg: BenchConfig, *args: str, timings: dict | None = None, key: str | None = None) -> None:
    """One project CLI in a subprocess (crash isolation; its own threads setting)."""
    t0 = time.perf_counter()
    log(" ".join(args))
    subprocess.run([sys.executable, *args], cwd=ROOT, env=env(cfg), check=True)
    if timings is not None and key:
        timings[key] = round(time.perf_counter() - t0, 1)


def mine_run(run: Path, budget: int, no_graph: bool = False) -> None:
    """``proposals.mine`` with scripted fill values: the embedded 135M model never answers the fill
    prompt in JSON (bench/RESULTS.md), so a fixed plausible value keeps fill negatives in the pool."""
    from llm import LLMConfig
    from llm.serve import fixed_answer, serve_in_thread
    from proposals.mine import MineConfig, mine

    server = serve_in_thread(fixed_answer('{"value": "Zoom"}'), "scripted")
    try:
        mine(run, MineConfig(sample_size=budget, seed=42, no_graph=no_graph),
             LLMConfig(base_url=server.base_url, model="scripted", cache_dir=str(run.parent / "llm-cache")), workers=1)
    finally:
        server.shutdown()


def prepare(cfg: BenchConfig, out: Path, timings: dict,
            runs: tuple[str, ...] = ("heldout", "graph", "nograph")) -> dict:
    """Steps 1-3 for ``runs``: split, held-out evaluation pairs, mined and verified training pools."""
    if not (out / "all" / "trajectories.parquet").exists():
        sh(cfg, "-m", "data.ingest", "--source", cfg.source, "--input", cfg.input, "--out", str(out / "all"),
           timings=timings, key="ingest")
    split_path = out / "split.json"
    if not split_path.exists():
        table = pq.read_table(out / "all" / "trajectories.parquet")
        rows = table.select(["task_id", "success"]).to_pylist()
        train, test = split_by_template({r["task_id"] for r in rows if r["success"]}, cfg.split_seed,
                                        cfg.test_fraction)
        (out / "split").mkdir(parents=True, exist_ok=True)
        for name, tasks in (("train", train), ("heldout", test)):
            keep = pa.array([t in tasks for t in table.column("task_id").to_pylist()])
            pq.write_table(table.filter(keep), out / "split" / f"{name}.parquet")
        split_path.write_text(json.dumps({"seed": cfg.split_seed, "test_fraction": cfg.test_fraction,
                                          "by": "task template (task id without its seed suffix)",
                                          "train": sorted(train), "heldout": sorted(test),
                                          "templates": {"train": sorted({task_template(t) for t in train}),
                                                        "heldout": sorted({task_template(t) for t in test})}},
                                         indent=2) + "\n")
    split = json.loads(split_path.read_text())
    tmpl = ["--prompt-template", str(TEMPLATE)]
    for name, part, no_graph, budget in (("heldout", "heldout", False, 100000),
                                         ("graph", "train", False, cfg.verify_pairs),
                                         ("nograph", "train", True, cfg.nograph_verify_pairs or cfg.verify_pairs)):
        if name not in runs or (name == "nograph" and "nograph" not in cfg.variants):
            continue
        run = out / name
        if not (run / "candidates.parquet").exists():
            sh(cfg, "-m", "data.ingest", "--source", "canonical", "--input", str(out / "split" / f"{part}.parquet"),
               "--out", str(run))
            if not no_graph:
                sh(cfg, "-m", "graph.build", "--run", str(run))
            t0 = time.perf_counter()
            mine_run(run, budget, no_graph)
            timings[f"mine_{name}"] = round(time.perf_counter() - t0, 1)
        if name == "heldout":
            bench = run / "export" / "eval.parquet"
            if not bench.exists():
                sh(cfg, "-m", "dataset.export", "--run", str(run), "--format", "trl-labels", "--preset", "paper",
                   "--axtree-chars", str(cfg.axtree_chars), "--no-card", *tmpl)
                rows = pq.read_table(run / "export" / "trl-labels" / "train.parquet").to_pylist()
                chosen = sample_states(rows, cfg.eval_pairs, cfg.split_seed)
                chosen.sort(key=lambda r: (r["traj_id"], r["step_idx"], r["pair_id"]))
                schema = pq.read_schema(run / "export" / "trl-labels" / "train.parquet")
                pq.write_table(pa.Table.from_pylist(chosen, schema=schema), bench)
            continue
        if not (run / "preferences.parquet").exists():
            sh(cfg, "-m", "teacher.verify", "--run", str(run), "--k", "1", "--axtree-chars", str(cfg.axtree_chars),
               "--quiet", *tmpl, timings=timings, key=f"verify_{name}")
        if not (run / "export" / "trl" / "train.parquet").exists():
            sh(cfg, "-m", "dataset.export", "--run", str(run), "--format", "trl", "--preset", "paper", "--no-card")
    return split


def kept_share(run: Path) -> dict:
    """Kept / verified pairs of a training run, overall and per axis (from its two tables)."""
    kept = pq.read_table(run / "preferences.parquet", columns=["axis", "label"]).to_pylist()
    disc_path = run / "discarded.parquet"
    disc = pq.read_table(disc_path, columns=["axis"]).to_pylist() if disc_path.exists() else []
    out = {"verified": len(kept) + len(disc), "kept": len(kept),
           "kept_share": len(kept) / max(len(kept) + len(disc), 1),
           "kept_label_1": sum(r["label"] == 1 for r in kept), "by_axis": {}}
    for axis in AXES:
        k = sum(r["axis"] == axis for r in kept)
        d = sum(r["axis"] == axis for r in disc)
        out["by_axis"][axis] = {"verified": k + d, "kept": k, "kept_share": k / (k + d) if k + d else None}
    return out


def training_sets(cfg: BenchConfig, out: Path) -> dict:
    """Step 4: one TRL train file of ``train_pairs`` rows per variant; returns their sources."""
    sets, info = out / "train", {}
    sets.mkdir(parents=True, exist_ok=True)
    graph_path = out / "graph" / "export" / "trl" / "train.parquet"
    schema = pq.read_schema(graph_path)
    graph_rows = pq.read_table(graph_path).to_pylist()
    for v in cfg.variants:
        if v == "nograph":
            rows = pq.read_table(out / "nograph" / "export" / "trl" / "train.parquet").to_pylist()
        elif v == "graph":
            rows = graph_rows
        else:
            rows = [r for r in graph_rows if r["axis"] == v]
        chosen = fill_to(rows, cfg.train_pairs, cfg.split_seed)
        info[v] = {"unique_pairs": len(rows), "rows": len(chosen),
                   "repeated": len(chosen) > len(rows) and bool(rows)}
        path = sets / f"{v}.parquet"
        if chosen and not path.exists():
            pq.write_table(pa.Table.from_pylist(chosen, schema=schema), path)
    return info


def evaluate_model(cfg: BenchConfig, out: Path, name: str, model: str, timings: dict) -> Path:
    result = out / "evals" / f"{name}.json"
    if not result.exists():
        sh(cfg, "-m", "prm.evaluate", "--model", model, "--name", name, "--bench",
           str(out / "heldout" / "export" / "eval.parquet"), "--out", str(result), "--both-orders",
           "--judge-mode", "score", "--batch-size", "1", timings=timings, key=f"eval_{name}")
    return result


def train_and_evaluate(cfg: BenchConfig, out: Path, variant: str, seed: int, timings: dict) -> Path | None:
    name = f"{variant}-s{seed}"
    result = out / "evals" / f"{name}.json"
    model_dir = out / "models" / name
    train_file = out / "train" / f"{variant}.parquet"
    if result.exists():
        return result
    if not train_file.exists():
        log(f"skip {name}: no kept pairs for this variant")
        return None
    if not (model_dir / "train_log.json").exists():
        sh(cfg, "-m", "prm.train", "--config", str(TRAIN_CONFIG), "--train-file", str(train_file),
           "--output-dir", str(model_dir), "--max-steps", str(cfg.train_pairs), "--seed", str(seed),
           *cfg.extra_train_args, timings=timings, key=f"train_{name}")
    evaluate_model(cfg, out, name, str(model_dir), timings)
    if not cfg.keep_models:
        for f in model_dir.glob("*.safetensors"):
            f.unlink()
    return result


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.with_suffix(".pairs.jsonl").read_text().splitlines() if line.strip()]


def summarize(cfg: BenchConfig, out: Path, split: dict, train_info: dict, timings: dict) -> dict:
    """Step 6: the table, from the evaluation files on disk."""
    evals = out / "evals"
    base_json = json.loads((evals / "base.json").read_text())
    base_records = records(evals / "base.json")

    def per_rule(files: list[Path], with_base: bool) -> dict:
        recs = [records(f) for f in files]
        return {rule: bootstrap([state_table(r, rule) for r in recs],
                                [state_table(base_records, rule)] if with_base else None, cfg.bootstrap)
                for rule in RULES}

    rows = {"base": {**per_rule([evals / "base.json"], False), "seeds": 1, "position": base_json["position"],
                     "seconds": base_json["seconds"]}}
    for v in cfg.variants:
        files = sorted(evals.glob(f"{v}-s*.json"))
        if not files:
            continue
        res = [json.loads(f.read_text()) for f in files]
        per_seed = [{"seed": f.stem.split("-s")[-1], "pairwise": r["overall"]["pairwise"], "bon": r["overall"]["bon"],
                     "pairwise_wilson": wilson(r["overall"]["correct"], r["overall"]["pairs"]),
                     "position": r["position"], "seconds": r["seconds"]} for f, r in zip(files, res)]
        logs = [json.loads((out / "models" / f.stem / "train_log.json").read_text()) for f in files
                if (out / "models" / f.stem / "train_log.json").exists()]
        rows[v] = {**per_rule(files, True), "seeds": len(files), "per_seed": per_seed,
                   "train_seconds": [lg["seconds"] for lg in logs],
                   "final_loss": [lg["losses"][-1] if lg["losses"] else None for lg in logs],
                   "first_loss": [lg["losses"][0] if lg["losses"] else None for lg in logs]}
    summary = {"config": {k: v for k, v in asdict(cfg).items() if k != "extra_train_args"},
               "split": {k: split[k] for k in ("by", "templates")} | {"train_tasks": len(split["train"]),
                                                                      "heldout_tasks": len(split["heldout"])},
               "eval_pairs": base_json["overall"]["pairs"], "eval_states": base_json["overall"]["states"],
               "teacher": {n: kept_share(out / n) for n in ("graph", "nograph")
                           if (out / n / "preferences.parquet").exists()},
               "training_sets": train_info, "models": rows, "timings_s": timings,
               "interval": "95% percentile bootstrap over held-out states (pairs of a state resampled together), "
                           f"{cfg.bootstrap} resamples; per-seed pairwise also with a Wilson interval"}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(markdown(summary))
    return summary


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _ci(c) -> str:
    return f"[{_pct(c[0])}, {_pct(c[1])}]"


def markdown(s: dict) -> str:
    held = ", ".join(t.split(".")[-1] for t in s["split"]["templates"]["heldout"])
    n_held, n_train = len(s["split"]["templates"]["heldout"]), len(s["split"]["templates"]["train"])
    lines = [(f"Held-out: {s['eval_pairs']} pairs in {s['eval_states']} states of {s['split']['heldout_tasks']} "
              f"task instances of {n_held} templates ({held}); training: {s['split']['train_tasks']} task instances "
              f"of {n_train} templates. Intervals: {s['interval']}."), ""]
    titles = {"both_orders": "both orders (right only if both orders pick the demonstrated action)",
              "as_given": "as given (first order only; chance 50%)",
              "debiased": "debiased (sign of margin(as given) - margin(swapped))"}
    for rule in RULES:
        lines += [f"**{titles[rule]}**", "",
                  ("| model | seeds | pairwise % [95% CI] | vs base, points [95% CI] | best-of-N % [95% CI] | "
                   "vs base, points [95% CI] |"), "| --- | ---: | --- | --- | --- | --- |"]
        for name, r in s["models"].items():
            m = r[rule]
            diff_pw = f"{100 * m['pairwise_diff']:+.1f} {_ci(m['pairwise_diff_ci'])}" if "pairwise_diff" in m else "-"
            diff_bon = f"{100 * m['bon_diff']:+.1f} {_ci(m['bon_diff_ci'])}" if "bon_diff" in m else "-"
            lines.append(f"| {name} | {r['seeds']} | {_pct(m['pairwise'])} {_ci(m['pairwise_ci'])} | {diff_pw} | "
                         f"{_pct(m['bon'])} {_ci(m['bon_ci'])} | {diff_bon} |")
        lines.append("")
    lines += [("| model | chose position 1 % (mean over seeds) | position-biased pairs (mean over seeds) | "
               "first -> last training loss |"), "| --- | ---: | ---: | --- |"]
    for name, r in s["models"].items():
        pos = [r["position"]] if "position" in r else [p["position"] for p in r.get("per_seed", [])]
        chose = sum(p["chose_position_1"] or 0 for p in pos) / max(len(pos), 1)
        biased = sum(p["position_biased"] for p in pos) / max(len(pos), 1)
        loss = ", ".join(f"{a:.2f} -> {b:.2f}" for a, b in zip(r.get("first_loss", []), r.get("final_loss", []))
                         if a is not None and b is not None) or "-"
        lines.append(f"| {name} | {_pct(chose)} | {biased:.1f} | {loss} |")
    lines += ["", "Teacher (embedded, score-both) kept share:"]
    for n, t in s["teacher"].items():
        axes = ", ".join(f"{a} {t['by_axis'][a]['kept']}/{t['by_axis'][a]['verified']}" for a in AXES)
        lines.append(f"- {n}: {t['kept']}/{t['verified']} ({_pct(t['kept_share'])}%; kept with label 1: "
                     f"{t['kept_label_1']}); {axes}")
    lines += ["", "Training sets: " + "; ".join(f"{v}: {i['unique_pairs']} unique pairs -> {i['rows']} rows"
                                              for v, i in s["training_sets"].items())]
    return "\n".join(lines) + "\n"


def build_parser() -> CLIParser:
    """``--small`` and one flag per ``BenchConfig`` field; unknown flags go to prm.train."""
    ap = make_parser(prog="bench/prm_cpu.py", doc=__doc__)
    ap.add_argument("--small", action="store_true", help="the bundled sample, one variant and seed (make prm-demo)")
    ap.add_argument("--ground-truth", action="store_true",
                    help="train and judge on replay-verified labels instead (bench/prm_truth.py; its --help)")
    BenchConfig.add_args(ap, skip=("extra_train_args",))
    return ap


def bench_config(argv: list[str] | None = None) -> BenchConfig:
    """The run's settings: the defaults (``--small``: ``SMALL``), then the flags given."""
    args, extra = build_parser().parse_known_args(argv)
    values = {**SMALL, "out": "runs/prm-demo"} if args.small else {}
    return build(BenchConfig, {**values, **given(args, BenchConfig), "extra_train_args": extra}, "flags")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--ground-truth" in argv:        # the PRM proof on replay-verified labels (issue 39): its own module
        from bench.prm_truth import main as ground_truth

        return ground_truth(argv)
    cfg = bench_config(argv)
    out = ROOT / cfg.out if not Path(cfg.out).is_absolute() else Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    timings_path = out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    t0 = time.perf_counter()
    log(f"config {json.dumps({k: v for k, v in asdict(cfg).items()})}")
    try:
        from llm.embedded import default_model_dir

        split = prepare(cfg, out, timings, ("heldout", "graph"))
        with ThreadPoolExecutor(max_workers=min(cfg.workers, 2)) as pool:    # base model || No-Graph pool
            jobs = [pool.submit(evaluate_model, cfg, out, "base", str(default_model_dir()), timings),
                    pool.submit(prepare, cfg, out, timings, ("nograph",))]
            for f in jobs:
                f.result()
        train_info = training_sets(cfg, out)
        log(f"training sets {json.dumps(train_info)}")
        lock = threading.Lock()

        def job(variant_seed: tuple[str, int]) -> None:
            train_and_evaluate(cfg, out, *variant_seed, timings)
            with lock:
                summarize(cfg, out, split, train_info, timings)     # after each model: a crash keeps the table

        with ThreadPoolExecutor(max_workers=cfg.workers) as pool:   # started in order
            futures = [pool.submit(job, t) for t in cfg.trainings()]
            try:
                for f in futures:
                    f.result()
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)       # the running jobs end, no new one starts
                raise
    finally:
        timings["wall_this_invocation"] = round(time.perf_counter() - t0, 1)
        timings_path.write_text(json.dumps(timings, indent=2) + "\n")
    summary = summarize(cfg, out, split, train_info, timings)
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
