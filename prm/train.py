"""Train a comparative PRM with TRL's SFTTrainer on prompt/completion pairs, and save it merged.

    python -m prm.train --config configs/prm/cpu-demo.yaml [--max-steps 4 --lora-r 8 ...]
    python -m prm.train --config configs/prm/qwen-7b-lora.yaml --dry-run        # validate, load nothing
    accelerate launch --num_processes 8 -m prm.train --config configs/prm/qwen-7b-lora.yaml

The data are the conversational files of ``dataset.export`` (``prompt`` = [system, user],
``completion`` = [assistant]): the judgment ending in the answer tag (``--format trl``) or the
answer tag alone (``--format trl-labels``, an ablation without rationales). TRL tokenizes the
prompt and the completion through the model's chat template and masks the prompt out of the
loss (``completion_only_loss``), so the model learns ``f(s_t, a1, a2) -> (judgment, y)`` and
nothing else. With ``model.use_peft`` the LoRA adapters (``trl.get_peft_config``) are merged into
the base weights before saving; either way ``output_dir`` ends up a plain transformers folder (safetensors, config,
tokenizer, chat template) that ``from_pretrained`` and vLLM load unchanged. Checkpoints, when
asked for (``save_strategy``), go to ``output_dir/checkpoints``; ``output_dir/train_log.json``
keeps the config, the loss per step and the timing. The config (``prm.config.PRMTrainConfig``)
is TRL's ``SFTConfig`` and ``ModelConfig`` with the data fields added; every field is a flag.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cli.config import make_parser
from cli.errors import error_exit

if TYPE_CHECKING:                 # prm.config imports TRL, hence torch: only where a config is built
    from prm.config import PRMTrainConfig

log = logging.getLogger(__name__)
# ``--help`` is printed from this file, rendered from the real parser (``write_help``; a test keeps
# it current): building the parser imports TRL's SFTConfig, and with it torch (seconds, not ms).
HELP_FILE = Path(__file__).with_name("train_help.txt")
HELP_WIDTH = 100


class ConfigError(ValueError):
    """A config or data that cannot train (invalid fields, no rows, every row too long): the
    command's one ``error:`` line, exit code 2."""


def resolve_model_path(name_or_path: str) -> str:
    """``embedded`` is the bundled SmolLM2-135M-Instruct folder; anything else is used as given."""
    if name_or_path == "embedded":
        from llm.embedded import default_model_dir

        return str(default_model_dir())
    return name_or_path


def load_model_and_tokenizer(cfg: PRMTrainConfig):
    """The base model and tokenizer as TRL's SFT script loads them from a ``ModelConfig``: its
    revision, dtype, attention kernel and quantization (``trl.get_quantization_config``), and
    ``model_init_kwargs`` on top."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import get_quantization_config

    path = resolve_model_path(cfg.model_name_or_path)
    kwargs = {"revision": cfg.model_revision, "trust_remote_code": cfg.trust_remote_code,
              "dtype": cfg.dtype if cfg.dtype in ("auto", None) else getattr(torch, cfg.dtype),
              "attn_implementation": cfg.attn_implementation,
              "quantization_config": get_quantization_config(cfg), **(cfg.model_init_kwargs or {})}
    tokenizer = AutoTokenizer.from_pretrained(path, revision=cfg.model_revision,
                                              trust_remote_code=cfg.trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    return model, tokenizer


def load_split(path: str, max_rows: int | None = None):
    """A prompt/completion Parquet file as a ``datasets.Dataset`` (only those two columns)."""
    import datasets

    ds = datasets.Dataset.from_parquet(path)
    ds = ds.select_columns(["prompt", "completion"])
    if max_rows is not None:
        ds = ds.select(range(min(max_rows, len(ds))))
    return ds


def build_trainer(cfg: PRMTrainConfig, model=None, tokenizer=None):
    """An ``SFTTrainer`` for ``cfg`` (a model and tokenizer may be passed in instead of loaded)."""
    from trl import SFTTrainer, get_peft_config

    if model is None or tokenizer is None:
        model, tokenizer = load_model_and_tokenizer(cfg)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_ds = load_split(cfg.train_file, cfg.max_train_samples)
    if len(train_ds) == 0:
        raise ConfigError(f"{cfg.train_file} has no rows (every kept pair went to the test split: export with "
                         "more pairs, or train on `--format trl-labels`, built from the sampled candidates)")
    eval_ds = load_split(cfg.eval_file) if cfg.eval_file else None
    if eval_ds is not None and len(eval_ds) == 0:
        eval_ds = None
    trainer = SFTTrainer(model=model, args=cfg.trainer_args(), train_dataset=train_ds, eval_dataset=eval_ds,
                         processing_class=tokenizer, peft_config=get_peft_config(cfg))
    # TRL truncates to max_length and silently drops rows whose completion was cut away entirely:
    # count them, and refuse to train on nothing.
    trainer.rows_loaded = len(train_ds)
    trainer.rows_dropped_too_long = len(train_ds) - len(trainer.train_dataset)
    if trainer.rows_dropped_too_long:
        log.warning("%d of %d training rows dropped: prompt longer than max_length %d",
                    trainer.rows_dropped_too_long, len(train_ds), cfg.max_length)
    if len(trainer.train_dataset) == 0:
        raise ConfigError(f"every training row is longer than max_length {cfg.max_length}: raise it "
                         "or shorten the prompts (dataset.export --axtree-chars)")
    return trainer


def save_merged(model, tokenizer, out: str | Path) -> Path:
    """Merge LoRA adapters (if any) into the base weights and write a plain transformers folder."""
    from peft import PeftModel

    if isinstance(model, PeftModel):
        model = model.merge_and_unload()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def train(cfg: PRMTrainConfig, model=None, tokenizer=None) -> dict:
    """Train, save the merged model in ``cfg.output_dir``; returns the training log."""
    problems = cfg.validate(check_paths=True) if model is None else cfg.validate(check_paths=False)
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))
    t0 = time.perf_counter()
    trainer = build_trainer(cfg, model, tokenizer)
    result = trainer.train()
    seconds = time.perf_counter() - t0
    out = Path(cfg.output_dir)
    if trainer.is_world_process_zero():
        save_merged(trainer.model, trainer.processing_class, out)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    record = {"config": cfg.as_dict(), "global_step": result.global_step, "training_loss": result.training_loss,
              "losses": losses, "train_rows": len(trainer.train_dataset),
              "rows_dropped_too_long": trainer.rows_dropped_too_long, "seconds": round(seconds, 2),
              "seconds_per_step": round(seconds / max(result.global_step, 1), 3), "output_dir": str(out)}
    if trainer.is_world_process_zero():
        (out / "train_log.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def build_parser():
    """The command's parser: ``--dry-run``, ``--config FILE`` and one flag per config field."""
    from prm.config import PRMTrainConfig

    ap = make_parser(prog="python -m prm.train", description=__doc__.split("\n\n")[0],
                     formatter_class=lambda prog: argparse.HelpFormatter(prog, width=HELP_WIDTH))
    ap.add_argument("--dry-run", action=argparse.BooleanOptionalAction, default=False,
                    help="validate the config (fields, paths, batch arithmetic) without loading weights")
    PRMTrainConfig.add_args(ap)     # --config FILE and one flag per field (TRL's and ours)
    return ap


def write_help(path: Path = HELP_FILE) -> str:
    """Render ``--help`` from the real parser into ``path`` (after a TRL upgrade or a new field)."""
    text = build_parser().format_help()
    path.write_text(text)
    return text


def done_summary(record: dict) -> str:
    """The command's last line: steps, the loss from first to last step, time, where the model is."""
    from cli.progress import done_line

    losses = record["losses"]
    loss = f", loss {losses[0]:.4g} -> {losses[-1]:.4g}" if losses else ""
    return done_line("prm.train", f"{record['global_step']} steps on {record['train_rows']} rows{loss}",
                     record["seconds"], f"merged model in {record['output_dir']}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if ("-h" in argv or "--help" in argv) and HELP_FILE.exists():
        print(HELP_FILE.read_text(), end="")
        raise SystemExit(0)          # as argparse's --help does
    from prm.config import PRMTrainConfig

    ap = build_parser()
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = PRMTrainConfig.from_args(args)
    except (ValueError, TypeError, FileNotFoundError) as e:
        return error_exit(e)
    if args.dry_run:
        problems = cfg.validate(check_paths=True)
        print(json.dumps({"valid": not problems, "problems": problems, **cfg.summary()}, indent=2))
        return 0 if not problems else 2
    try:
        record = train(cfg)
    except ConfigError as e:
        return error_exit(e)
    print(json.dumps({k: v for k, v in record.items() if k != "config"}))
    print(done_summary(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
