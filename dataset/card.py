"""The dataset card of a run: ``RUN/README.md`` in the Hugging Face format.

    python -m dataset.card --run RUN [--license apache-2.0]

A YAML header (``huggingface_hub.DatasetCardData``: license, language, task categories, tags, size
category, one ``configs`` entry per config with its non-empty ``data_files`` splits, and
``dataset_info`` with features derived from each file's pinned Parquet schema and each split's
size), then what the data is, how it was made (counts per stage from ``stats.json``), how to load
and train on it, and its limits. Written from the files alone: the same run gives the same card.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
from huggingface_hub import DatasetCard, DatasetCardData

from cli.config import CLIParser, Configurable, make_parser
from cli.errors import error_exit
from data.rundir import RunDir, atomic_write_text
from dataset.report import markdown_table, md_code
from dataset.tables import require_run_dir

if TYPE_CHECKING:
    import datasets

# (config name, split -> path relative to the run directory)
CONFIGS = [
    ("preferences", {"train": "preferences.parquet"}),
    ("trl", {"train": "export/trl/train.parquet", "test": "export/trl/test.parquet"}),
    ("trl-preference", {"train": "export/trl-preference/train.parquet", "test": "export/trl-preference/test.parquet"}),
    ("webprmbench", {"test": "export/webprmbench.parquet"}),
    ("discarded", {"train": "discarded.parquet"}),
]
DEFAULT_CONFIG = "preferences"


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if n < limit:
            return name
    return "100K<n<1M"


def _rows(path: Path) -> int:
    return pq.read_metadata(path).num_rows


def _num_bytes(path: Path) -> int:
    """The split's uncompressed size (what ``datasets`` records as ``num_bytes``)."""
    meta = pq.read_metadata(path)
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def _info(root: Path, files: dict[str, str]) -> datasets.DatasetInfo:
    """A config's ``datasets.DatasetInfo``: the features of its first file's Parquet schema (what
    ``load_dataset`` gives) and every split's ``name``, ``num_bytes`` and ``num_examples``
    (without all three ``datasets`` ignores the splits with a warning)."""
    import datasets

    splits = datasets.SplitDict()
    for split, rel in files.items():
        splits.add(datasets.SplitInfo(name=split, num_bytes=_num_bytes(root / rel), num_examples=_rows(root / rel)))
    features = datasets.Features.from_arrow_schema(pq.read_schema(root / next(iter(files.values()))))
    return datasets.DatasetInfo(features=features, splits=splits,
                                dataset_size=sum(s.num_bytes for s in splits.values()))


def card_data(run_dir: str | Path, license: str = "apache-2.0") -> DatasetCardData:
    """The card's YAML header. Only non-empty splits are listed (the pinned ``datasets`` cannot
    load an empty Parquet split) and a config without one is left out, except the default:
    ``preferences``, the kept pairs, is listed whenever the run has the file, even with no row, so
    that ``load_dataset(RUN)`` on a run that kept nothing fails (``datasets`` cannot load an empty
    split) instead of taking another config, the rejected pairs, as its ``train``. Without it the
    first listed config that is not ``discarded`` is the default, and ``discarded`` never is.
    ``dataset_info`` (of the configs with rows) is written by ``datasets`` itself
    (``DatasetInfosDict.to_dataset_card_data``, as ``push_to_hub`` does)."""
    from datasets.info import DatasetInfosDict

    root = Path(run_dir)
    configs, infos = [], DatasetInfosDict()
    for name, files in CONFIGS:
        present = {split: rel for split, rel in files.items() if (root / rel).exists() and _rows(root / rel) > 0}
        if not present:
            if name == DEFAULT_CONFIG and (root / files["train"]).exists():
                configs.append({"config_name": name, "data_files": [{"split": "train", "path": files["train"]}]})
            continue
        configs.append({"config_name": name, "data_files": [{"split": s, "path": p} for s, p in present.items()]})
        infos[name] = _info(root, present)
    default = next((c for c in configs if c["config_name"] == DEFAULT_CONFIG),
                   next((c for c in configs if c["config_name"] != "discarded"), None))
    if default is not None:
        default["default"] = True
    n = _rows(root / "preferences.parquet") if (root / "preferences.parquet").exists() else 0
    data = DatasetCardData(license=license, language=["en"], pretty_name=f"surfPRM process preferences ({root.name})",
                           task_categories=["text-generation", "text-classification"],
                           tags=["process-reward-model", "web-agents", "preference", "browsergym", "surfprm"],
                           size_categories=[_size_category(n)], configs=configs)
    infos.to_dataset_card_data(data)
    return data


def _stage_line(stats: dict, stage: str, what: str) -> str:
    s = stats.get(stage)
    if not s:
        return f"- `{stage}`: not run"
    rej = ", ".join(f"{k} {v}" for k, v in sorted(s.get("rejected", {}).items())) or "none"
    return f"- `{stage}` ({what}): in {s['in']}, out {s['out']}, rejected: {rej}"


def _lengths_table(tokens: dict) -> str:
    keys = ("min", "median", "p95", "max")
    rows = [[part, *(f"{tokens[part][k]:,}" for k in keys)] for part in ("prompt", "completion", "total")]
    return markdown_table(["tokens", *keys], rows, "lrrrr")


def trl_usage(name: str, tokens: dict | None) -> str:
    """The card's "Use" section: a script that trains on the ``trl`` config with TRL's ``SFTTrainer``
    as written, on a CPU or a GPU (the device, bf16 only where the GPU has it, a batch that fits,
    ``trainer.train()``), with a literal ``MAX_LENGTH`` at least the longest row
    (``dataset.export.token_stats``) so that nothing is truncated; without token lengths
    ``MAX_LENGTH = None`` (TRL then truncates nothing either)."""
    if tokens and tokens.get("rows"):
        max_length = tokens["max_length"]
        why = (f"The `trl` rows are {tokens['total']['min']:,}-{tokens['total']['max']:,} tokens with "
               f"`{tokens['tokenizer']}`'s tokenizer, counted as `SFTTrainer` tokenizes them (chat template over "
               f"prompt + completion):\n\n{_lengths_table(tokens)}\n\n"
               f"`MAX_LENGTH = {max_length}` (the longest row rounded up to a multiple of 64) keeps every row whole.")
        batch = "max(1, min(8, 16_384 // MAX_LENGTH))"
    else:
        max_length = None
        why = ("Token lengths were not measured (no tokenizer at hand: `python -m dataset.export --run RUN "
               "--format trl --tokenizer NAME` counts them); `MAX_LENGTH = None` truncates nothing.")
        batch = "1"
    return f"""## Use

The script runs as written on a CPU or a GPU (`MAX_STEPS=1 python train.py` tries one step):

```python
import os

import torch
from datasets import load_dataset
from trl import SFTConfig, SFTTrainer

DATA = "path/to/{name}"        # this dataset: its Hub id, or the folder this card is in
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"   # any chat model with a chat template
MAX_LENGTH = {max_length}

ds = load_dataset(DATA, "trl")      # any config listed in the header
gpu = torch.cuda.is_available()
batch = {batch} if gpu else 1       # rows per device step: ~16k tokens on a GPU, one row on a CPU
args = SFTConfig(
    output_dir="sft-out",
    max_length=MAX_LENGTH,
    per_device_train_batch_size=batch,
    gradient_accumulation_steps=max(1, 8 // batch),      # 8 rows per optimizer step either way
    bf16=gpu and torch.cuda.is_bf16_supported(),        # TRL's default bf16 fails on a CPU
    use_cpu=not gpu,
    model_init_kwargs={{"dtype": "auto" if gpu else "float32"}},
    max_steps=int(os.environ.get("MAX_STEPS", -1)),     # -1: num_train_epochs
    report_to="none",
)
trainer = SFTTrainer(model=MODEL, train_dataset=ds["train"], args=args)
trainer.train()
trainer.save_model()
```

{why} TRL's default `max_length=1024` cuts every longer row from the end
(`truncation_mode="keep_start"`, the default; `"keep_end"` is deprecated and would cut the system
prompt and the intent instead), which removes the completion first, and `SFTTrainer` then drops
every row left without completion tokens, without a warning. The loss is on the completion only
by TRL's default for prompt/completion data (`completion_only_loss=None`), and TRL has no option
that shortens only the prompt. With another model's tokenizer, count again: `python -m
dataset.export --run RUN --format trl --tokenizer NAME --max-length N` warns about every row
longer than `N`. On a CPU a step over rows of several thousand tokens takes minutes; a GPU is the
place for a full epoch.

The `trl-preference` config (`prompt` = the state, `chosen` = a⁺, `rejected` = a⁻, conversational)
goes to TRL's `RewardTrainer` and `DPOTrainer` the same way: `load_dataset(DATA, "trl-preference")`
with `RewardConfig` / `DPOConfig` and the same device settings."""


def _replay_note(v: dict) -> str:
    """The replay verifier's paragraph (``teacher.verify --verifier replay``), or nothing."""
    r = v.get("replay")
    if not r:
        return ""
    outcomes = ", ".join(f"`{k}` {n}" for k, n in r.get("outcomes", {}).items()) or "none"
    return f"""

**Replay-verified** (`teacher.verify --verifier replay`): no model judged these pairs. Each was
replayed in MiniWoB++ with its episode's seed (the recorded O_t checked first), a⁺ and a⁻ run from
the same state and the scripted solver `{r.get('backend', 'n/a')}` (at most {r.get('solver_steps', 'n/a')}
steps) left to finish the task; the task's own validator decides. Outcomes: {outcomes}. Kept:
`harmful`, `detour`, `not_executable`; discarded: `equivalent` (a false negative) and
`replay_mismatch`. Each row's `replay_evidence` holds the two resulting state hashes, rewards and
the solver's steps."""


def _bench_note(stats: dict) -> str:
    """What the replay-verified benchmark's labels mean and do not (``dataset.prmbench``), or nothing."""
    b = stats.get("data.export.webprmbench", {})
    if b.get("verifier") != "replay":
        return ""
    outcomes = ", ".join(f"`{k}` {n}" for k, n in sorted(b.get("outcomes", {}).items())) or "none"
    mined = stats.get("proposals.mine", {}).get("config", {})
    sample = (f" (of which a seeded {mined['sample_per_step']} per step were replayed)"
              if mined.get("sample_per_step") else "")
    return f"""

**The `webprmbench` config is an offline PRM benchmark with replay-verified labels**: {b.get('states', 0)}
states over {b.get('tasks', 0)} MiniWoB++ tasks, each the demonstrated action against
{b.get('negatives_per_state', 4)} negatives (one row each; outcomes: {outcomes}); {b.get('states_short', 0)}
states with fewer `harmful` or `detour` negatives are left out (`stats.json`, `rejects.jsonl`).
`source_name` is `miniwob/<task>`, so `prm.evaluate --bench` reports each task and the macro over
tasks. What a label means: on this task's page, with this seed, after a⁻ the continuation
({md_code(stats.get('teacher.verify', {}).get('replay', {}).get('backend', 'n/a'))}) ended the task failed or could not
finish it (`harmful`), or finished it in more steps than after a⁺ (`detour`); the task's own validator
decides. What it does not mean: that a⁻ is wrong on any other site or page, that a⁻ is worse by any
measure other than this continuation's reward (a stronger agent might recover from it), or that a⁺
is the only good action (negatives proven `equivalent` were discarded, the others were not tried).
Which states are in: only steps where the miner found at least {b.get('negatives_per_state', 4)} grounded
negatives{sample} and the replay proved {b.get('negatives_per_state', 4)} of them worse, so the benchmark is no
random sample of the tasks' steps: pages with few controls the accessibility tree names (a single
button, rows or icons without an id) give none. MiniWoB++ pages are small synthetic tasks, not
real websites, and the continuation is a scripted solver, not an agent."""


def body(run_dir: str | Path) -> str:
    root = Path(run_dir)
    stats = RunDir(root).read_stats()
    v = stats.get("teacher.verify", {})
    audit = stats.get("proposals.mine", {}).get("audit", {}).get("sample", {})
    gmcp = f"{audit['gmcp_ratio']:.2%}" if "gmcp_ratio" in audit else "n/a"
    return f"""
# surfPRM process preferences: {md_code(root.name)}

Step-level preference pairs for training **comparative process reward models** for web agents,
made by surfprm from demonstration trajectories, following *From
Trajectories to Grounded Preferences: Process Preference Synthesis via Interaction Element
Graphs for Web PRMs* (surfPRM). Each example is a state of a web task (intent, accessibility
tree, action history, URLs), two candidate actions in random order (the demonstrated action and
a grounded negative proposed by one of six rules on an Interaction Element Graph), the position
of the better one (`label`), and a teacher model's judgment that agrees with it.

## How it was made

{_stage_line(stats, "ingest", "demonstration steps")}
{_stage_line(stats, "graph.build", "steps mapped to the Interaction Element Graphs")}
{_stage_line(stats, "proposals.mine", "grounded negatives")}
{_stage_line(stats, "teacher.verify", "sampled pairs verified by the teacher")}

Teacher: {md_code(v.get('teacher_model', 'n/a'))}, Action-Only pairwise prompt (no candidate thoughts),
order by a fair coin per pair, temperature {v.get('config', {}).get('temperature', 'n/a')}, a fixed seed
per attempt, up to K={v.get('config', {}).get('k', 'n/a')} sequential attempts; verdict mode
`{v.get('config', {}).get('verdict_mode', 'generate')}`. With `generate` a pair is kept at the first
attempt whose written judgment ends in the answer tag that agrees with the demonstration, and
discarded when no attempt does; with `score` / `score-both` (a local teacher) the verdict is the
likelier of the two answer tags (`score-both`: both orders combined), one attempt, and the kept
judgment is the bare answer tag (a label-only row). GMCP ratio of the verified
sample: {gmcp} (paper: 74.60% for surfPRM-data, 24.19% for WebArbiter's data). The report in
[`report/`](report/README.md) has the distributions, outcomes and costs.{_replay_note(v)}{_bench_note(stats)}

## Configs

- `preferences`: one row per kept pair: `pair_id, rule, axis, gmcp, label (1|2), response_1,
  response_2, judgment, attempts, verdicts, teacher_model, messages` (system, user, assistant:
  ready for TRL), the state fields and usage per pair; `replay_outcome, replay_evidence` when the
  pairs were replay-verified (null otherwise).
- `trl`: conversational prompt/completion (`prompt` = [system, user], `completion` =
  [assistant]) split by task: no task is in both train and test.
- `trl-preference`: conversational `prompt` / `chosen` / `rejected` for TRL's `RewardTrainer` and
  `DPOTrainer`: `prompt` = [system, user] asking for the next action in the state (the teacher's
  sections without the two responses), `chosen` = [assistant: a⁺], `rejected` = [assistant: a⁻];
  the same task split as `trl`.
- `webprmbench`: WebPRMBench format (`state_idx, pair_idx, expected, prompt, source_name`),
  `expected` the position (1 or 2) of the better response: the held-out tasks, or every task
  with `dataset.export --split all` (the replay-verified benchmark above).
- `discarded`: the pairs no attempt agreed on, with every verdict and answer (replay-verified: the
  `equivalent` and `replay_mismatch` pairs, their outcome as `reason`).

Only configs and splits with rows are listed (an empty split cannot be loaded), except the
default config `preferences`: on a run that kept no pair, `load_dataset(RUN)` fails (an empty split
cannot be loaded) rather than give the rejected pairs; they load by name, `load_dataset(RUN, "discarded")`.

{trl_usage(root.name, stats.get("data.export.trl", {}).get("tokens"))}

## Limitations

Prompts are in WebPRMBench's comparative-judgment format (WebArbiter-style sections, the
candidates' actions only between `[The Begin of Response N]` / `[The End of Response N]`, the
answer as `<Answer>Response N</Answer>`). Page text in them is untrusted web content: response
markers, output tags and section headers inside it are escaped. The labels come from
demonstrations: the demonstrated action is treated as the better one, and the teacher only
filters pairs it cannot confirm. A run with the embedded 135M-parameter teacher exercises the
pipeline, not quality: real datasets use a strong teacher behind an OpenAI-compatible endpoint.
The source trajectories keep their own licenses and terms.
"""


def write_card(run_dir: str | Path, license: str = "apache-2.0") -> Path:
    """Write ``RUN/README.md``; returns its path."""
    path = Path(run_dir) / "README.md"
    card = DatasetCard(f"---\n{card_data(run_dir, license).to_yaml()}\n---\n{body(run_dir)}")
    atomic_write_text(path, str(card))
    return path


@dataclass
class CardOptions(Configurable):
    """What ``python -m dataset.card`` writes; every field is a flag (``cli.config``)."""

    ARG_GROUP = "card"

    license: str = field(default="apache-2.0", metadata={"help": "license id for the card's header"})


def build_parser() -> CLIParser:
    ap = make_parser("python -m dataset.card", __doc__)
    ap.add_argument("--run", required=True, help="run directory to write README.md into")
    CardOptions.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    opts = CardOptions.from_args(args)
    require_run_dir(ap, args.run)
    try:
        print(f"wrote {write_card(args.run, opts.license)}")
    except (FileNotFoundError, ValueError) as e:
        return error_exit(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
