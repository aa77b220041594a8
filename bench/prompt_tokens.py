"""Where the tokens of a judgment prompt go, on the shared traces: before (a git revision's
``data/judgment.py``) and after (the working tree's).

    .venv/bin/python bench/prompt_tokens.py [--shared ../shared/data] [--run DIR] [--baseline ae7df4c]
                                            [--axtree-chars 12000 --axtree-chars 2000]

The prompt is the teacher's pairwise verification prompt (``judgment.pairs.load_pairs``), which is
also the PRM's training and evaluation prompt (``dataset.export``). The pairs are the mined
sample of the shared WorkArena traces: unless ``--run`` names a run directory that holds
``candidates.parquet``, the pipeline's own commands build one in ``runs/bench-prompt-tokens``
(ingest, graph build, mining with the default sample and seed; fill values by the embedded model,
cached in that folder) and later calls reuse it.

Each pair is rendered by the baseline's ``render_pair`` and by the working tree's, with the same
state, the same order and the same ``--axtree-chars`` budget, then counted with the embedded
SmolLM2-135M tokenizer exactly as the local teacher counts a call (the chat template with the
generation prompt). Every token is attributed to the part of the prompt its first character lies
in: ``goal`` (the intent), ``axtree`` (and, of it, the ``indentation`` and the ``url``
properties), ``history`` (the trajectory), ``urls`` (start and current
URL), ``candidates`` (both response blocks, markers included), ``format`` (the output
instructions) and ``instructions`` (the system prompt, section headers and notes, chat-template
tokens). The parts sum to the call's total. One call here is one prompt; the embedded teacher's
``score-both`` verdict makes two (both orders), so ``make run``'s report counts twice this.
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cli.config import make_parser  # noqa: E402
from data.rundir import RunDir  # noqa: E402
from judgment.format import JudgmentFormat, render_pair
from judgment.pairs import load_pairs  # noqa: E402
from judgment.parse import parse_prompt, response_blocks  # noqa: E402
from llm.embedded import smallest_model_dir  # noqa: E402

PARTS = ("instructions", "goal", "axtree", "history", "urls", "candidates", "format")
AXTREE_DETAIL = ("axtree/indentation", "axtree/urls")      # of the axtree part, what could go next
_INDENT = re.compile(r"^\t+", re.M)
_URL_PROP = re.compile(r"\burl(?:=|: )(?:'[^'\n]*'|\"[^\"\n]*\"|\S+)")
OUTPUT_HEADER = "### Output Instructions ###"
DEFAULT_RUN = ROOT / "runs" / "bench-prompt-tokens"
BEFORE = "ae7df4c"          # data/judgment.py before issue 29 item 3 shortened the prompts


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def prepare_run(run: Path, shared: Path) -> Path:
    """A run directory with mined candidates of the shared WorkArena traces (built once)."""
    if (run / "candidates.parquet").exists():
        return run
    _cli("data.ingest", "--source", "agentlab", "--input", str(shared / "agentlab_workarena"), "--out", str(run))
    _cli("graph.build", "--run", str(run))
    _cli("proposals.mine", "--run", str(run), "--quiet", "--fill-cache-dir", str(run / "llm-cache"))
    return run


def baseline_renderer(rev: str):
    """``render_pair`` of ``data/judgment.py`` at git revision ``rev``."""
    source = subprocess.run(["git", "show", f"{rev}:data/judgment.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    name = f"judgment_at_{rev.replace('~', '_').replace('^', '_')}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    sys.modules[name] = module          # dataclasses look their module up
    exec(compile(source, f"{rev}:data/judgment.py", "exec"), module.__dict__)
    return lambda state, a1, a2, budget: module.render_pair(state, a1, a2, fmt=module.JudgmentFormat(budget=budget))[0]


def current_renderer(state, a1, a2, budget):
    return render_pair(state, a1, a2, fmt=JudgmentFormat(axtree_chars=budget))[0]


def part_labels(messages: list[dict], text: str) -> list[str]:
    """The part of each character of ``text`` (the chat-templated ``messages``)."""
    labels = ["instructions"] * len(text)

    def mark(start: int, end: int, part: str) -> None:
        labels[start:end] = [part] * (end - start)

    user = messages[-1]["content"]
    base = text.rindex(user)
    fields = parse_prompt(messages)
    pos = 0
    for part, value in (("goal", fields.intent), ("axtree", fields.axtree), ("history", fields.trajectory),
                        ("urls", fields.start_url), ("urls", fields.current_url)):
        at = user.index(value, pos)
        mark(base + at, base + at + len(value), part)
        pos = at + len(value)
        if part == "axtree":
            for detail, pattern in zip(AXTREE_DETAIL, (_INDENT, _URL_PROP)):
                for m in pattern.finditer(value):
                    mark(base + at + m.start(), base + at + m.end(), detail)
    for start, end, _, _ in response_blocks(user):
        mark(base + start, base + end, "candidates")
    if (at := user.find(OUTPUT_HEADER)) >= 0:
        mark(base + at, base + len(user), "format")
    return labels


def count_parts(tokenizer, messages: list[dict]) -> dict[str, int]:
    """Tokens per part of one call (their sum is the call's prompt tokens)."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    labels = part_labels(messages, text)
    counts = dict.fromkeys(PARTS + AXTREE_DETAIL, 0)
    for start, _ in enc["offset_mapping"]:
        label = labels[min(start, len(text) - 1)]
        counts[label] += 1
        if label in AXTREE_DETAIL:
            counts["axtree"] += 1
    return counts


def breakdown(tokenizer, render, pairs, budget: int) -> dict[str, list[int]]:
    """Per part (and ``total``), the tokens of every pair's call."""
    rows = [count_parts(tokenizer, render(p.state, p.response_1, p.response_2, budget)) for p in pairs]
    out = {part: [r[part] for r in rows] for part in PARTS + AXTREE_DETAIL}
    out["total"] = [sum(r[part] for part in PARTS) for r in rows]
    return out


def print_table(budget: int, npairs: int, columns: dict[str, dict[str, list[int]]]) -> None:
    names = list(columns)
    print(f"\n--axtree-chars {budget}: {npairs} pairs, tokens per call (SmolLM2 tokenizer), mean / median")
    print("| part | " + " | ".join(names) + " | change of the mean |")
    print("| --- | " + " | ".join("---:" for _ in names) + " | ---: |")
    for part in (*PARTS[:3], *AXTREE_DETAIL, *PARTS[3:], "total"):
        cells = [f"{statistics.mean(c[part]):,.1f} / {statistics.median(c[part]):,.0f}" for c in columns.values()]
        first, last = statistics.mean(columns[names[0]][part]), statistics.mean(columns[names[-1]][part])
        change = f"{(last - first) / first:+.1%}" if first else "-"
        print(f"| {part} | " + " | ".join(cells) + f" | {change} |")


def build_parser():
    ap = make_parser("bench/prompt_tokens.py", __doc__)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--run", type=Path, default=DEFAULT_RUN, help="run directory with candidates.parquet "
                    "(built from the shared traces when it has none)")
    ap.add_argument("--baseline", default=BEFORE, help="git revision whose data/judgment.py is 'before' "
                    "(default: the last commit before the prompts were shortened)")
    ap.add_argument("--axtree-chars", type=int, action="append", help="AXTree budgets to measure "
                    "(default: 12000, the teacher's default, and 2000, make run's)")
    ap.add_argument("--seed", type=int, default=42, help="the coin that orders each pair")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from transformers import AutoTokenizer

    run = prepare_run(args.run, args.shared)
    tokenizer = AutoTokenizer.from_pretrained(smallest_model_dir())
    pairs = load_pairs(RunDir(run), args.seed, JudgmentFormat())
    before = baseline_renderer(args.baseline)
    print(f"run {run}: {len(pairs)} sampled pairs; before = data/judgment.py at {args.baseline}, "
          "after = the working tree")
    for budget in args.axtree_chars or [12_000, 2_000]:
        print_table(budget, len(pairs), {"before": breakdown(tokenizer, before, pairs, budget),
                                         "after": breakdown(tokenizer, current_renderer, pairs, budget)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
