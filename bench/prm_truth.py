"""The PRM proof on verified labels (issue 39): ``bench/prm_cpu.py --ground-truth``. Does a PRM
trained on graph negatives judge better than one trained on No-Graph or random negatives, when
every training label and every benchmark label was proven by replaying the pair in MiniWoB++?

    .venv/bin/python bench/prm_cpu.py --ground-truth --train-runs runs/verdict \\
        --bench runs/prmbench/export/webprmbench.parquet --out runs/prm-truth [--train-pairs 96 --seeds 0]
    .venv/bin/python bench/prm_cpu.py --ground-truth --tiny --out DIR      # hand-made runs, about a minute

Inputs: three replay-verified runs (``bench/replay.py``'s ``OUT/graph``, ``OUT/no_graph`` and
``OUT/random``: one demonstration set, three miners, ``teacher.verify --verifier replay``) on
training seeds, and a replay-verified benchmark (``make prmbench-miniwob``) on seeds 1000 and up,
which no training run sees. Steps, each skipped when its output exists (rerun to resume):

1. ``sets/<set>/``: a copy of the verified run (its tables and ``stats.json``; the source run is
   only read) and its label-only export, ``dataset.export --format trl-labels --preset paper``
   with the compact prompt (``--prompt-template``, ``configs/prm/cpu-compact-prompt.yaml``) and
   ``--axtree-chars`` (default 2,000 around the two targets: the benchmark's default build's pages,
   0.4-1.3k characters, fit whole; the larger pages of the ``rich`` tasks are cut, which keeps a
   training row under ~1,000 tokens where whole pages reach 3.5k). Label-only because the replay's
   evidence is the future (the continuation's steps after each action), which the judge cannot
   see: a rationale built from it would teach the model to assert what its input does not show;
   and the judge is read by scoring the answer tag right after the prompt (``--judge-mode
   score``), so the tag is the target.
2. ``train/<set>.parquet``: the rows whose pair the replay proved ``harmful`` or ``detour``; then
   equal task mixes (per MiniWoB++ task the minimum count over the three sets, a seeded sample in
   each) and at most ``--train-pairs`` pairs (the per-task quotas scaled down together, so the
   mixes stay equal). Every row left out is written with its reason to ``train/rejects.jsonl`` and
   counted (per set: in = out + rejected). ``--train-orders both`` (OUR option; the paper
   coin-flips the order once per pair, App. C) adds each pair's swapped prompt with the other
   answer, which leaves the model no position prior to learn.
3. ``bench.parquet``: the benchmark, or ``--bench-states N`` of its states drawn round-robin over
   its tasks (a seeded order within each task).
4. ``prm.train`` (``--train-config``, default ``configs/prm/truth-cpu.yaml``: LoRA on the embedded
   SmolLM2-135M, batch 1, one step per row) per set and seed, then ``prm.evaluate --both-orders
   --judge-mode score --prompt-template ...`` on ``bench.parquet``; the base model the same way; a
   random judge (a seeded random margin per prompt, so all three rules apply to it) in process.
5. ``summary.json`` / ``summary.md``: per model pairwise and best-of-N accuracy (mean over seeds)
   with 95% percentile bootstrap intervals over benchmark states (pooled over tasks; a state's
   pairs move together), and the paired differences graph - No-Graph and graph - random on the
   same resampled states, under the project's rule (``both_orders``: right only if both orders
   pick the demonstrated action) and, in ``by_rule``, under ``as_given`` and ``debiased``
   (``prm.stats``).

Torch runs with ``--threads`` (1) threads per process, ``--workers`` (2) jobs at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.prm_cpu import records  # noqa: E402  (prm_cpu imports this module only inside main)
from cli.config import Configurable, make_parser  # noqa: E402

SETS = ("graph", "no_graph", "random")
JUDGES = ("base", "random_judge")
KEPT = ("harmful", "detour")
RULE = "both_orders"
TEMPLATE = ROOT / "configs" / "prm" / "cpu-compact-prompt.yaml"
TRAIN_CONFIG = ROOT / "configs" / "prm" / "truth-cpu.yaml"
RUN_FILES = ("trajectories.parquet", "candidates.parquet", "preferences.parquet", "discarded.parquet", "stats.json")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


@dataclass
class TruthConfig(Configurable):
    """Sizes and inputs of one ``--ground-truth`` run (module doc); every field is a flag."""

    ARG_GROUP = "ground truth"

    out: str = field(default="runs/prm-truth", metadata={"help": "output folder (relative: to the repository)"})
    train_runs: str = field(default="runs/verdict", metadata={
        "help": "folder holding the replay-verified runs graph/, no_graph/ and random/ (bench/replay.py's OUT)"})
    bench: str = field(default="runs/prmbench/export/webprmbench.parquet", metadata={
        "help": "the replay-verified benchmark (make prmbench-miniwob OUT=DIR: DIR/export/webprmbench.parquet)"})
    bench_states: int | None = field(default=None, metadata={
        "min": 1, "help": "evaluate on this many of its states, round-robin over its tasks (default: all)"})
    train_pairs: int = field(default=96, metadata={"min": 1, "help": "at most this many verified pairs per set"})
    train_orders: str = field(default="coin", metadata={
        "choices": ("coin", "both"), "help": "coin: one row per pair at the export's coin-flipped order (the "
                                             "paper's); both: also the swapped order (our option)"})
    seeds: tuple[int, ...] = field(default=(0,), metadata={
        "type": _ints, "metavar": "0,1", "help": "comma-separated training seeds (every set gets each)"})
    sample_seed: int = field(default=42, metadata={"help": "seeds the training samples and the benchmark subset"})
    axtree_chars: int = field(default=2000, metadata={
        "min": 1, "help": "AXTree characters of a training prompt, around the two targets (dataset.export "
                          "--axtree-chars)"})
    train_config: str = field(default=str(TRAIN_CONFIG), metadata={
        "help": "prm.train's config (the model and the training values; truth-gpu.yaml for a GPU)"})
    eval_batch_size: int = field(default=1, metadata={"min": 1, "help": "prm.evaluate --batch-size"})
    threads: int = field(default=1, metadata={"min": 1, "help": "torch threads per process"})
    workers: int = field(default=2, metadata={"min": 1, "help": "trainings / evaluations at once"})
    bootstrap: int = field(default=2000, metadata={"min": 1, "help": "bootstrap resamples of the benchmark's states"})
    keep_models: bool = field(default=False, metadata={"help": "keep the trained weights after their evaluation"})
    tiny: bool = field(default=False, metadata={
        "help": "hand-made verified runs and benchmark (tests' helpers), 2 pairs a set, one seed: the suite's check"})


TINY = {"train_pairs": 2, "seeds": (0,), "bootstrap": 200}


def log(msg: str) -> None:
    print(f"[prm_truth {time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", flush=True)


class Steps:
    """Wall time and load of each step, kept in ``timings.json`` across resumed invocations."""

    def __init__(self, path: Path):
        self.path, self.lock = path, threading.Lock()
        self.data = json.loads(path.read_text()) if path.exists() else {}

    def run(self, cfg: TruthConfig, key: str, *args: str) -> None:
        """One project CLI (``-m MODULE FLAGS``), timed: in a subprocess (crash isolation, its own
        threads setting), or with ``--tiny`` in this process (its ``main``, the same flags: one
        import of torch instead of one per step)."""
        load0, t0 = os.getloadavg()[0], time.perf_counter()
        log(" ".join(args))
        if cfg.tiny:
            import importlib

            if importlib.import_module(args[1]).main(list(args[2:])) != 0:
                raise RuntimeError(f"{' '.join(args)} failed")
        else:
            subprocess.run([sys.executable, *args], cwd=ROOT, env={**os.environ, **self.env(cfg)}, check=True)
        self.record(key, time.perf_counter() - t0, load0)

    @staticmethod
    def env(cfg: TruthConfig) -> dict:
        return {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": str(cfg.threads),
                "MKL_NUM_THREADS": str(cfg.threads), "PYTHONPATH": str(ROOT)}

    def record(self, key: str, seconds: float, load0: float) -> None:
        with self.lock:
            self.data[key] = {"s": round(seconds, 1), "load": [round(load0, 1), round(os.getloadavg()[0], 1)]}
            self.path.write_text(json.dumps(self.data, indent=2) + "\n")


# -- 1-2: the training sets ---------------------------------------------------------------------------
def copy_run(src: Path, dst: Path) -> None:
    """The verified run's tables, copied (the export writes into its run directory)."""
    missing = [n for n in RUN_FILES if not (src / n).exists()]
    if not missing and "teacher.verify" not in json.loads((src / "stats.json").read_text()):
        missing = ["teacher.verify's entry in stats.json"]          # its tables written, its stats not yet
    if missing:
        raise FileNotFoundError(f"{src} is not a replay-verified run (missing {', '.join(missing)}): "
                                "bench/replay.py --out DIR writes DIR/graph, DIR/no_graph, DIR/random")
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in RUN_FILES + ("rejects.jsonl",):
        if (src / name).exists():
            shutil.copy2(src / name, tmp / name)
    tmp.rename(dst)


def outcomes_of(run: Path) -> dict[str, str | None]:
    """pair id -> the replay's outcome, over the kept and the discarded pairs."""
    return {r["pair_id"]: r["replay_outcome"] for f in ("preferences.parquet", "discarded.parquet")
            for r in pq.read_table(run / f, columns=["pair_id", "replay_outcome"]).to_pylist()}


def quotas(counts: dict[str, int], cap: int) -> dict[str, int]:
    """Per task the pairs to take: ``counts`` (the minimum over the sets), scaled down together to
    at most ``cap`` in all (largest remainders, ties by task name)."""
    total = sum(counts.values())
    if total <= cap:
        return dict(counts)
    exact = {t: c * cap / total for t, c in counts.items()}
    out = {t: int(v) for t, v in exact.items()}
    for t in sorted(exact, key=lambda t: (-(exact[t] - out[t]), t))[:cap - sum(out.values())]:
        out[t] += 1
    return out


def swapped_row(row: dict) -> dict:
    """The same pair with the two responses exchanged and the other answer (``--train-orders both``)."""
    from judgment.parse import answer_text, swap_responses

    label = 3 - row["label"]
    return {**row, "prompt": swap_responses(row["prompt"]), "label": label,
            "completion": [{"role": "assistant", "content": answer_text(label)}]}


def training_sets(cfg: TruthConfig, out: Path, steps: Steps, train_runs: Path) -> dict:
    """Steps 1-2: one TRL file per set, equal in size and task mix; returns each set's account."""
    from dataset.export import TRL_LABELS_SCHEMA
    from dataset.prmbench import task_of

    info_path = out / "train" / "sets.json"
    if info_path.exists() and all((out / "train" / f"{s}.parquet").exists() for s in SETS):
        return json.loads(info_path.read_text())
    rows, outcome = {}, {}
    for s in SETS:
        run = out / "sets" / s
        if not run.exists():
            copy_run(train_runs / s, run)
        export = run / "export" / "trl-labels" / "train.parquet"
        if not export.exists() or "data.export.trl_labels" not in json.loads((run / "stats.json").read_text()):
            steps.run(cfg, f"export_{s}", "-m", "dataset.export", "--run", str(run), "--format", "trl-labels",
                      "--preset", "paper", "--axtree-chars", str(cfg.axtree_chars), "--prompt-template",
                      str(TEMPLATE), "--no-card")
        rows[s] = pq.read_table(export).to_pylist()
        outcome[s] = outcomes_of(run)
    rejects, info, kept = [], {}, {}
    for s in SETS:
        kept[s] = defaultdict(list)
        for r in sorted(rows[s], key=lambda r: r["pair_id"]):
            o = outcome[s].get(r["pair_id"])
            if o in KEPT:
                kept[s][task_of(r["task_id"])].append(r)
            else:
                rejects.append({"set": s, "pair_id": r["pair_id"], "reason": o or "not_replayed",
                                "why": "the replay did not prove the negative harmful or detour"})
    tasks = sorted(set().union(*(kept[s] for s in SETS)))
    minimum = {t: min(len(kept[s].get(t, [])) for s in SETS) for t in tasks}
    quota = quotas(minimum, cfg.train_pairs)
    (out / "train").mkdir(parents=True, exist_ok=True)
    for s in SETS:
        chosen = []
        for t in tasks:
            pool = kept[s].get(t, [])
            order = random.Random(f"{cfg.sample_seed}/{s}/{t}").sample(range(len(pool)), len(pool))
            chosen += [pool[i] for i in sorted(order[:quota[t]])]
            for reason, ix in (("size_cap", order[quota[t]:minimum[t]]), ("task_mix", order[minimum[t]:])):
                why = (f"--train-pairs {cfg.train_pairs}: {t}'s quota is {quota[t]} of {minimum[t]}"
                       if reason == "size_cap" else f"{t}: more than the fewest of the three sets ({minimum[t]})")
                rejects += [{"set": s, "pair_id": pool[i]["pair_id"], "reason": reason, "why": why} for i in ix]
        pairs = len(chosen)
        if cfg.train_orders == "both":
            chosen = [x for r in chosen for x in (r, swapped_row(r))]
        random.Random(f"{cfg.sample_seed}/{s}/order").shuffle(chosen)
        pq.write_table(pa.Table.from_pylist(chosen, schema=TRL_LABELS_SCHEMA), out / "train" / f"{s}.parquet")
        n_in = len(rows[s])
        why = Counter(r["reason"] for r in rejects if r["set"] == s)
        info[s] = {"in": n_in, "pairs": pairs, "rows": len(chosen), "rejected": dict(sorted(why.items())),
                   "outcomes": dict(Counter(outcome[s].get(r["pair_id"]) for r in chosen)),
                   "tasks": dict(Counter(task_of(r["task_id"]) for r in chosen)),
                   "label_1_share": sum(r["label"] == 1 for r in chosen) / max(len(chosen), 1),
                   "gmcp_share": sum(bool(r["gmcp"]) for r in chosen) / max(len(chosen), 1),
                   "axes": dict(Counter(r["axis"] for r in chosen)),
                   "demonstrations": len({r["traj_id"] for r in chosen}),
                   "export_tokens": json.loads((out / "sets" / s / "stats.json").read_text())
                   ["data.export.trl_labels"].get("tokens")}
        assert n_in == pairs + sum(why.values()), (s, n_in, pairs, why)      # in = out + rejected
    with open(out / "train" / "rejects.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rejects)
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    return info


# -- 3: the benchmark ----------------------------------------------------------------------------------
def bench_subset(cfg: TruthConfig, out: Path, bench: Path) -> dict:
    """``bench.parquet``: the benchmark's rows, or those of ``--bench-states`` states round-robin over
    its tasks (``source_name``); returns what it holds."""
    path, info_path = out / "bench.parquet", out / "bench.json"
    if path.exists() and info_path.exists():
        return json.loads(info_path.read_text())
    table = pq.read_table(bench)
    rows = table.to_pylist()
    by_task: dict = defaultdict(list)
    for key in dict.fromkeys((r["source_name"], r["state_idx"]) for r in rows):
        by_task[key[0]].append(key)
    chosen, order = [], {t: random.Random(f"{cfg.sample_seed}/{t}").sample(v, len(v)) for t, v in by_task.items()}
    limit = cfg.bench_states or sum(len(v) for v in order.values())
    while len(chosen) < limit and any(order.values()):
        for t in sorted(order):
            if order[t] and len(chosen) < limit:
                chosen.append(order[t].pop(0))
    keep = set(chosen)
    sub = [r for r in rows if (r["source_name"], r["state_idx"]) in keep]
    pq.write_table(pa.Table.from_pylist(sub, schema=table.schema), path)
    info = {"source": str(bench), "states": len(keep), "of_states": sum(len(v) for v in by_task.values()),
            "pairs": len(sub), "tasks": dict(Counter(t for t, _ in keep)),
            "outcomes": dict(Counter(r.get("replay_outcome") for r in sub))}
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    return info


# -- 4: the judges ---------------------------------------------------------------------------------------
class RandomScoreJudge:
    """A seeded random margin in [-1, 1) per prompt, its sign the verdict: the chance floor under every
    rule (25% pairwise in both orders, 50% as given and debiased)."""

    name = "random_judge"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def judge_prompts(self, prompts: list[list[dict]]) -> list:
        from judgment.parse import answer_text
        from prm.judge import Judgment

        out = []
        for p in prompts:
            digest = hashlib.sha256((json.dumps(p, sort_keys=True) + f"/{self.seed}").encode()).digest()
            margin = int.from_bytes(digest[:8], "big") / 2 ** 63 - 1
            verdict = 1 if margin >= 0 else 2
            out.append(Judgment(answer_text(verdict), verdict, mode="score", margin=margin))
        return out


def random_judge(out: Path, steps: Steps) -> Path:
    from prm.evaluate import evaluate, load_bench

    path = out / "evals" / "random_judge.json"
    if not path.exists():
        t0, load0 = time.perf_counter(), os.getloadavg()[0]
        metrics, records = evaluate(RandomScoreJudge(), load_bench(out / "bench.parquet"), both_orders=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        path.write_text(json.dumps({"name": "random_judge", **metrics}, indent=2) + "\n")
        steps.record("eval_random_judge", time.perf_counter() - t0, load0)
    return path


def base_model(cfg: TruthConfig) -> str:
    """The train config's base model, resolved as prm.train resolves it (``embedded``: the bundled folder)."""
    import yaml

    from prm.train import resolve_model_path

    return resolve_model_path(yaml.safe_load(Path(cfg.train_config).read_text())["model"]["model_name_or_path"])


def evaluate_model(cfg: TruthConfig, out: Path, steps: Steps, name: str, model: str) -> Path:
    result = out / "evals" / f"{name}.json"
    if not result.exists():
        steps.run(cfg, f"eval_{name}", "-m", "prm.evaluate", "--model", model, "--name", name,
                  "--bench", str(out / "bench.parquet"), "--out", str(result), "--both-orders",
                  "--judge-mode", "score", "--batch-size", str(cfg.eval_batch_size),
                  "--prompt-template", str(TEMPLATE), "--cache-dir", str(out / "llm-cache"))
    return result


def train_and_evaluate(cfg: TruthConfig, out: Path, steps: Steps, s: str, seed: int, rows: int) -> Path:
    name = f"{s}-s{seed}"
    model_dir = out / "models" / name
    if not (out / "evals" / f"{name}.json").exists() and not (model_dir / "train_log.json").exists():
        steps.run(cfg, f"train_{name}", "-m", "prm.train", "--config", cfg.train_config,
                  "--train-file", str(out / "train" / f"{s}.parquet"), "--output-dir", str(model_dir),
                  "--max-steps", str(rows), "--seed", str(seed))
    result = evaluate_model(cfg, out, steps, name, str(model_dir))
    if not cfg.keep_models:
        for f in model_dir.glob("*.safetensors"):
            f.unlink()
    return result


# -- 5: the summary ----------------------------------------------------------------------------------------
def _pair(res: dict, key: str) -> dict:
    return {"estimate": res[key], "ci": res[f"{key}_ci"]}


def models_of(out: Path) -> dict[str, list[Path]]:
    evals = out / "evals"
    found = {s: sorted(evals.glob(f"{s}-s*.json")) for s in SETS}
    found.update({j: [evals / f"{j}.json"] for j in JUDGES if (evals / f"{j}.json").exists()})
    return {k: v for k, v in found.items() if v}


def compare(tables: dict[str, list], rule: str, n: int) -> dict:
    """Accuracy per model and the paired differences, on the same resampled states (``prm.stats``)."""
    from prm.stats import bootstrap, state_table

    t = {k: [state_table(r, rule) for r in recs] for k, recs in tables.items()}
    acc = {}
    for k, tabs in t.items():
        res = bootstrap(tabs, None, n)
        acc[k] = {"pairwise": _pair(res, "pairwise"), "bon": _pair(res, "bon"), "states": res["states"],
                  "seeds": len(tabs)}
    diff = {}
    for a, b in (("graph", "no_graph"), ("graph", "random"), ("graph", "base"), ("no_graph", "base"),
                 ("random", "base"), ("base", "random_judge")):
        if a in t and b in t:
            res = bootstrap(t[a], t[b], n)
            diff[f"{a}_minus_{b}"] = {"pairwise": {"estimate": res["pairwise_diff"], "ci": res["pairwise_diff_ci"]},
                                      "bon": {"estimate": res["bon_diff"], "ci": res["bon_diff_ci"]}}
    return {"accuracy": acc, "diff": diff}


def summarize(cfg: TruthConfig, out: Path, sets: dict, bench: dict, steps: Steps) -> dict:
    from prm.stats import RULES

    files = models_of(out)
    tables = {k: [records(f) for f in fs] for k, fs in files.items()}
    by_rule = {rule: compare(tables, rule, cfg.bootstrap) for rule in RULES}
    logs = {f.stem: json.loads((out / "models" / f.stem / "train_log.json").read_text())
            for s in SETS for f in files.get(s, []) if (out / "models" / f.stem / "train_log.json").exists()}
    position = {f.stem: json.loads(f.read_text()).get("position") for fs in files.values() for f in fs}
    summary = {"rule": RULE, **by_rule[RULE], "by_rule": by_rule,
               "interval": f"95% percentile bootstrap over benchmark states pooled over tasks ({cfg.bootstrap} "
                           "resamples, a state's pairs together); differences paired on the same resampled states; "
                           "accuracy is the mean over training seeds",
               "config": {k: v for k, v in asdict(cfg).items()}, "training_sets": sets, "bench": bench,
               "training": {k: {"steps": lg["global_step"], "seconds": lg["seconds"],
                                "first_loss": lg["losses"][0] if lg["losses"] else None,
                                "last_loss": lg["losses"][-1] if lg["losses"] else None} for k, lg in logs.items()},
               "position": position, "timings": steps.data,
               "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(markdown(summary))
    return summary


def _pct(x) -> str:
    return f"{100 * x:.1f}"


def _est(e: dict, sign: bool = False) -> str:
    fmt = "{:+.1f}" if sign else "{:.1f}"
    return f"{fmt.format(100 * e['estimate'])} [{_pct(e['ci'][0])}, {_pct(e['ci'][1])}]"


def markdown(s: dict) -> str:
    b = s["bench"]
    lines = [f"Benchmark: {b['states']} states ({b['pairs']} pairs) of {b['of_states']}, tasks {b['tasks']}. "
             f"Intervals: {s['interval']}.", ""]
    titles = {"both_orders": "both orders (the project's rule: right only if both orders pick the demonstrated "
                             "action; chance 25% pairwise)",
              "as_given": "as given (the first order only; chance 50%)",
              "debiased": "debiased (sign of margin(as given) - margin(swapped); chance 50%)"}
    for rule, r in s["by_rule"].items():
        lines += [f"**{titles[rule]}**", "", "| model | seeds | pairwise % [95% CI] | best-of-N % [95% CI] |",
                  "| --- | ---: | --- | --- |"]
        lines += [f"| {k} | {a['seeds']} | {_est(a['pairwise'])} | {_est(a['bon'])} |"
                  for k, a in r["accuracy"].items()]
        lines += ["", "| difference | pairwise, points [95% CI] | best-of-N, points [95% CI] |", "| --- | --- | --- |"]
        names = {"graph_minus_no_graph": "graph - No-Graph", "graph_minus_random": "graph - random"}
        lines += [f"| {names.get(k, k.replace('_minus_', ' - '))} | {_est(d['pairwise'], True)} | "
                  f"{_est(d['bon'], True)} |" for k, d in r["diff"].items()]
        lines.append("")
    lines += ["| set | verified pairs in | trained pairs | rows | label 1 | GMCP | outcomes | rejected |",
              "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for k, t in s["training_sets"].items():
        lines.append(f"| {k} | {t['in']} | {t['pairs']} | {t['rows']} | {_pct(t['label_1_share'])}% | "
                     f"{_pct(t['gmcp_share'])}% | {t['outcomes']} | {t['rejected']} |")
    lines += ["", "Training mix per task (equal in every set): " + json.dumps(next(iter(s["training_sets"].values()))
                                                                               ["tasks"], sort_keys=True), ""]
    for k, t in s["training"].items():
        lines.append(f"- {k}: {t['steps']} steps, {t['seconds']:.0f} s, loss {t['first_loss']:.3f} -> "
                     f"{t['last_loss']:.3f}" if t["first_loss"] is not None else f"- {k}: {t['steps']} steps")
    return "\n".join(lines) + "\n"


# -- --tiny: hand-made verified runs ---------------------------------------------------------------------
TINY_TASKS = ("click-button", "click-link")


def _tiny_episode(task: str, seed: int) -> tuple[list[dict], str, list[str]]:
    """One recorded step of a made-up MiniWoB++ page: (trajectory rows, a+, the other elements' bids)."""
    rng = random.Random(f"{task}/{seed}")
    role = "button" if task == "click-button" else "link"
    words = ["submit", "cancel", "next", "ok", "yes", "no", "back", "more"]
    rng.shuffle(words)
    bids = [str(10 + i) for i in range(6)]
    tree = f"RootWebArea '{task}', focused\n" + "".join(f"\t[{b}] {role} '{w}'\n" for b, w in zip(bids, words))
    target = rng.randrange(len(bids))
    pos = f"click('{bids[target]}')"
    base = {"source": "search", "site": "miniwob", "task_id": f"{task}.{seed}", "traj_id": f"tiny/{task}.{seed}",
            "intent": f"Click on the {role} \"{words[target]}\".", "url": f"file:///x/miniwob/{task}.html",
            "obs_format": "indented", "html": None, "action_error": None, "thought": None, "success": True,
            "source_path": f"tasks/{task}.{seed}.jsonl", "meta": json.dumps({"task": task, "seed": seed})}
    rows = [{**base, "step_idx": 0, "observation": tree, "action": pos},
            {**base, "step_idx": 1, "observation": tree, "action": None}]
    return rows, pos, [b for i, b in enumerate(bids) if i != target]


def write_tiny_run(root: Path, seeds: range, mode: str, outcome_of) -> None:
    """A mined run of ``TINY_TASKS`` x ``seeds`` (``tests/mined_run.write_mined_run``), one pair per
    other element, then the replay's verdicts written as ``teacher.verify --verifier replay`` writes
    them, each outcome ``outcome_of(pair_id)``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from data.rundir import RunDir, StageStats
    from data.schema import AXIS_OF, RULES
    from judgment.format import JudgmentFormat
    from judgment.pairs import load_pairs
    from mined_run import write_mined_run
    from teacher.replay import Replay, verdict_fields
    from teacher.verify import STAGE, Attempt, Decision, write_outputs

    rows, cands = [], []
    for task in TINY_TASKS:
        for seed in seeds:
            ep, pos, others = _tiny_episode(task, seed)
            rows += ep
            for k, b in enumerate(others):
                rule = RULES[k % len(RULES)]
                cands.append({"pair_id": f"{mode}-{task}-{seed}-{b}", "site": "miniwob", "traj_id": ep[0]["traj_id"],
                              "task_id": ep[0]["task_id"], "step_idx": 0, "rule": rule, "axis": AXIS_OF[rule],
                              "action_pos": pos, "action_neg": f"click('{b}')", "gmcp": mode != "random",
                              "sampled": True, "pos_kind": "element", "pos_bid": pos[7:-2], "pos_node": "p",
                              "neg_bid": b, "neg_node": "n", "op_pos": "click", "op_neg": "click",
                              "value_source": None, "evidence": "{}", "mode": mode})
    root.parent.mkdir(parents=True, exist_ok=True)
    write_mined_run(root, rows, cands)
    run = RunDir(root)
    run.check_inputs(STAGE, root / "candidates.parquet", run.trajectories)
    decisions = []
    for p in load_pairs(run, 0, JudgmentFormat()):
        replay = Replay(outcome_of(p.row["pair_id"]), {"tiny": True})
        f = verdict_fields(p, replay, 0)
        attempt = Attempt(1, 0, f["verdict"], f["outcome"], f["text"], 0, 0, 0.0, mode="replay")
        decisions.append(Decision(p, f["status"], [attempt], judgment=f["judgment"], reason=f["reason"],
                                  replay=replay))
    kept, disc = write_outputs(run, decisions, "replay:tiny")
    stats = StageStats(STAGE, n_in=kept + disc, n_out=kept,
                       rejected=Counter(d.reason for d in decisions if d.status == "discarded"))
    stats.extra = {"config": {"verifier": "replay"}, "teacher_model": "replay:tiny", "endpoint": "replay"}
    run.write_stage(stats, [])


def tiny_inputs(out: Path) -> tuple[Path, Path]:
    """(the folder of the three hand-made training runs, the hand-made benchmark): outcomes from a
    hash of the pair id, so the three sets differ in what the replay kept."""
    def outcome(pair_id: str) -> str:
        h = hashlib.sha256(pair_id.encode()).digest()[0]
        return ("harmful", "detour", "harmful", "equivalent", "not_executable", "detour")[h % 6]

    runs = out / "tiny-inputs"
    for mode, name in (("graph", "graph"), ("no_graph", "no_graph"), ("random", "random")):
        if not (runs / name / "preferences.parquet").exists():
            shutil.rmtree(runs / name, ignore_errors=True)
            write_tiny_run(runs / name, range(0, 2), mode, outcome)
    bench_run = runs / "bench"
    bench = bench_run / "export" / "webprmbench.parquet"
    if not bench.exists():
        shutil.rmtree(bench_run, ignore_errors=True)
        write_tiny_run(bench_run, range(1000, 1001), "bench",
                       lambda p: ("harmful", "detour")[hashlib.sha256(p.encode()).digest()[0] % 2])
        from dataset.export import export_webprmbench

        export_webprmbench(bench_run, split="all")
    return runs, bench


# -- the command ---------------------------------------------------------------------------------------------
def build_parser():
    ap = make_parser(prog="bench/prm_cpu.py --ground-truth", doc=__doc__)
    ap.add_argument("--ground-truth", action="store_true", help="this mode (bench/prm_cpu.py's flag)")
    TruthConfig.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    cfg = TruthConfig.from_args(build_parser().parse_args(argv))
    if cfg.tiny:        # one process, one job at a time (Steps.run)
        for k, v in TINY.items():
            setattr(cfg, k, v)
        cfg.workers = 1
        os.environ.update(Steps.env(cfg))       # before torch is imported: its threads setting
    out = ROOT / cfg.out if not Path(cfg.out).is_absolute() else Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = Steps(out / "timings.json")
    t0 = time.perf_counter()
    log(f"config {json.dumps(asdict(cfg))}")
    train_runs, bench_file = tiny_inputs(out) if cfg.tiny else (Path(cfg.train_runs), Path(cfg.bench))
    train_runs = train_runs if train_runs.is_absolute() else ROOT / train_runs
    bench_file = bench_file if bench_file.is_absolute() else ROOT / bench_file
    bench = bench_subset(cfg, out, bench_file)
    log(f"benchmark {json.dumps(bench)}")
    random_judge(out, steps)
    lock, sets = threading.Lock(), {}

    def job(fn, *args) -> None:
        fn(*args)
        if sets:
            with lock:
                summarize(cfg, out, sets, bench, steps)      # after each model: a cut-short run keeps its table

    # the base model's evaluation needs no training set: it starts while the sets are built (in
    # subprocesses; --tiny runs its steps in this process, one at a time: two threads importing
    # transformers at once can see it half-initialised)
    if cfg.tiny:
        sets.update(training_sets(cfg, out, steps, train_runs))
    with ThreadPoolExecutor(max_workers=cfg.workers) as pool:
        futures = [pool.submit(job, evaluate_model, cfg, out, steps, "base", base_model(cfg))]
        try:
            sets.update(sets or training_sets(cfg, out, steps, train_runs))
            log("training sets " + json.dumps({s: {k: v[k] for k in ("pairs", "rows", "rejected")}
                                               for s, v in sets.items()}))
            futures += [pool.submit(job, train_and_evaluate, cfg, out, steps, s, seed, sets[s]["rows"])
                        for seed in cfg.seeds for s in SETS if sets[s]["rows"]]
            for f in futures:
                f.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    steps.record("wall_this_invocation", time.perf_counter() - t0, os.getloadavg()[0])
    summary = summarize(cfg, out, sets, bench, steps)
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
