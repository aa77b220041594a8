"""Three judges on the replay-verified PRM benchmark (issue 38 Build 3): a random judge, a
position-biased judge and the embedded PRM, each through ``prm.evaluate``'s metrics and intervals.

    make prmbench-miniwob OUT=runs/prmbench                # the benchmark (SIZE=full: 300+ states)
    .venv/bin/python bench/prmbench.py --bench runs/prmbench/export/webprmbench.parquet --out runs/prmbench/judges

- ``random``: a fair coin per pair (seeded by the prompt): the chance floor, 50% pairwise and
  1/16 best-of-N at 4 negatives per state;
- ``position-1``: always ``Response 1``: right exactly when the coin put the demonstrated action
  first, so a benchmark whose positions leak gives it more than chance;
- ``embedded``: the embedded model (``llm.embedded``) as ``prm.evaluate`` runs it with ``--judge-mode
  score`` (the likelier answer tag, one forward pass; ``--embedded-mode generate`` writes judgments).

``--states-per-task N`` (the embedded judge costs seconds a row on a CPU): the embedded judge on a
seeded sample of N states of each task (``OUT/subset.parquet``, all of a task's states where it has
fewer), the two scripted judges on the whole benchmark and on that subset (``<judge>-subset.json``).

Each judge's result is ``OUT/<judge>.json`` (and its ``.md`` and ``.pairs.jsonl``), as
``prm.evaluate --out`` writes it; the comparison table is ``OUT/compare.md``. Any endpoint is judged
on the same file with ``python -m prm.evaluate --bench FILE --base-url URL --model M --out R.json``.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from cli.config import Configurable, make_parser  # noqa: E402
from judgment.parse import answer_text  # noqa: E402
from prm.evaluate import compare, evaluate, find_candidates, load_bench, markdown  # noqa: E402
from prm.judge import Judgment  # noqa: E402


class CoinJudge:
    """A fair coin per prompt (sha256 of the prompt and the seed): the same verdicts on a rerun."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def judge_prompts(self, prompts: list[list[dict]]) -> list[Judgment]:
        out = []
        for p in prompts:
            digest = hashlib.sha256((json.dumps(p, sort_keys=True) + str(self.seed)).encode()).digest()
            verdict = 1 + digest[0] % 2
            out.append(Judgment(answer_text(verdict), verdict))
        return out


class FirstJudge:
    """Always the first response: the position-biased judge."""

    name = "position-1"

    def judge_prompts(self, prompts: list[list[dict]]) -> list[Judgment]:
        return [Judgment(answer_text(1), 1) for _ in prompts]


@dataclass
class BenchConfig(Configurable):
    bench: str = field(default="runs/prmbench/export/webprmbench.parquet", metadata={"help": "the benchmark file"})
    out: str = field(default="runs/prmbench/judges", metadata={"help": "results folder"})
    embedded_mode: str = field(default="score", metadata={
        "choices": ("score", "score-both", "generate"), "help": "prm.evaluate --judge-mode for the embedded PRM"})
    no_embedded: bool = field(default=False, metadata={"help": "only the two scripted judges"})
    states_per_task: int | None = field(default=None, metadata={
        "min": 1, "metavar": "N", "help": "the embedded judge on a seeded sample of N states per task only"})
    seed: int = field(default=0, metadata={"help": "seeds the random judge and the states' sample"})


def stratified_subset(bench: str, per_task: int, seed: int, out: Path) -> Path:
    """``out``: the rows of a seeded sample of ``per_task`` states of each ``source_name`` (every
    state of a task that has fewer), in the benchmark's order."""
    table = pq.read_table(bench)
    states: dict[str, list[int]] = {}
    for src, idx in zip(table["source_name"].to_pylist(), table["state_idx"].to_pylist()):
        if idx not in states.setdefault(src, []):
            states[src].append(idx)
    keep = sorted(i for src, idx in sorted(states.items())
                  for i in random.Random(f"{seed}/{src}").sample(idx, min(per_task, len(idx))))
    pq.write_table(table.filter(pc.is_in(table["state_idx"], value_set=pa.array(keep, table["state_idx"].type))), out)
    return out


def write(result: dict, records: list[dict], out: Path) -> None:
    """What ``prm.evaluate --out`` writes: the JSON, its Markdown table and the judged pairs."""
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    out.with_suffix(".pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def main(argv: list[str] | None = None) -> int:
    ap = make_parser("bench/prmbench.py", __doc__)
    BenchConfig.add_args(ap)
    cfg = BenchConfig.from_args(ap.parse_args(argv))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    benches = {"": cfg.bench}
    if cfg.states_per_task:
        benches["-subset"] = str(stratified_subset(cfg.bench, cfg.states_per_task, cfg.seed, out / "subset.parquet"))
    files = []
    for suffix, bench in benches.items():
        rows = load_bench(bench, find_candidates(Path(cfg.bench)))
        for judge in (CoinJudge(cfg.seed), FirstJudge()):
            metrics, records = evaluate(judge, rows)
            files.append(out / f"{judge.name}{suffix}.json")
            write({"name": judge.name + suffix, "model": judge.name, "bench": bench, **metrics}, records, files[-1])
    if not cfg.no_embedded:
        suffix = "-subset" if cfg.states_per_task else ""
        files.append(out / f"embedded{suffix}.json")
        candidates = find_candidates(Path(cfg.bench))
        subprocess.run([sys.executable, "-m", "prm.evaluate", "--bench", benches[suffix], "--out", str(files[-1]),
                        "--judge-mode", cfg.embedded_mode, "--name", f"embedded ({cfg.embedded_mode}){suffix}",
                        "--cache-dir", str(out / ".llm"), *(["--candidates", str(candidates)] if candidates else [])],
                       check=True, cwd=ROOT)
    table = compare([json.loads(f.read_text()) for f in files])
    (out / "compare.md").write_text(table)
    print(table)
    for f in files:
        r = json.loads(f.read_text())
        m = r["macro"]
        print(f"{r['name']}: macro pairwise {100 * m['pairwise']:.1f}% {_ci(m.get('pairwise_ci'))}, "
              f"best-of-N {100 * m['bon']:.1f}% {_ci(m.get('bon_ci'))}; pooled {r['overall']['correct']}/"
              f"{r['overall']['pairs']} pairs, {r['overall']['states_correct']}/{r['overall']['states']} states")
    return 0


def _ci(ci) -> str:
    return "" if not ci else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


if __name__ == "__main__":
    sys.exit(main())
