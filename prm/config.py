"""Typed configuration of comparative PRM training, loadable from YAML and overridable from flags.

A config file has three sections, each a dataclass below::

    model: {name_or_path: ..., lora: true, lora_r: 128, ...}
    data:  {train_file: ..., eval_file: ..., max_length: 4096}
    train: {output_dir: ..., learning_rate: 1.0e-4, effective_batch_size: 256, ...}

Every field is also a flag named after it (``--learning-rate 5e-5``, ``--lora-r 16``,
``--train-file PATH``; field names are unique across sections); flags override the file. Help
texts live in the fields' metadata, as TRL does.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

import yaml


@dataclass
class ModelConfig:
    """The backbone and how it is adapted."""

    name_or_path: str = field(default="", metadata={
        "help": "transformers folder or hub id of the base model ('embedded': the bundled SmolLM2-135M-Instruct)"})
    dtype: str = field(default="float32", metadata={
        "choices": ("float32", "bfloat16", "float16"), "help": "weights dtype when loading"})
    lora: bool = field(default=True, metadata={"help": "train LoRA adapters (merged into the saved model); false: full"})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (scale = alpha / r)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout"})
    lora_target_modules: str = field(default="all-linear", metadata={
        "help": "modules that get adapters: 'all-linear' or a comma-separated list (q_proj,v_proj)"})
    attn_implementation: str | None = field(default=None, metadata={
        "help": "attention kernel (sdpa, flash_attention_2, eager); unset: transformers' choice"})


@dataclass
class DataConfig:
    """Conversational prompt/completion Parquet files (``data.export --format trl`` or ``trl-labels``)."""

    train_file: str = field(default="", metadata={"help": "training Parquet (prompt, completion columns)"})
    eval_file: str | None = field(default=None, metadata={"help": "optional evaluation Parquet (loss only)"})
    max_length: int = field(default=4096, metadata={
        "help": "tokens per example; longer ones are truncated from the end"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training rows"})


@dataclass
class TrainConfig:
    """Optimisation, precision and where the merged model goes."""

    output_dir: str = field(default="", metadata={"help": "where the merged model (and checkpoints) go"})
    learning_rate: float = field(default=1e-4, metadata={"help": "peak learning rate"})
    num_train_epochs: float = field(default=1.0, metadata={"help": "epochs (ignored when max_steps > 0)"})
    max_steps: int = field(default=-1, metadata={"help": "optimizer steps; -1: run num_train_epochs"})
    per_device_batch_size: int = field(default=1, metadata={"help": "examples per device per micro-step"})
    effective_batch_size: int | None = field(default=None, metadata={
        "help": "examples per optimizer step over all devices; sets gradient accumulation = "
                "effective / (per_device * processes), which must divide exactly"})
    gradient_accumulation_steps: int | None = field(default=None, metadata={
        "help": "micro-steps per optimizer step (unset: from effective_batch_size, else 1)"})
    num_processes: int | None = field(default=None, metadata={
        "help": "devices the recipe is written for (dry-run arithmetic; at run time: accelerate's world size)"})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "transformers scheduler name"})
    warmup_ratio: float = field(default=0.03, metadata={"help": "share of steps spent warming up"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 mixed precision (GPU; must be false on CPU)"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "trade compute for activation memory"})
    seed: int = field(default=42, metadata={"help": "seeds data order and initialisation of adapters"})
    logging_steps: int = field(default=1, metadata={"help": "log the loss every N steps"})
    save_checkpoints: bool = field(default=False, metadata={
        "help": "also save trainer checkpoints each epoch (the merged model is always saved)"})
    deepspeed: str | None = field(default=None, metadata={"help": "DeepSpeed JSON config (multi-GPU full fine-tunes)"})
    use_cpu: bool = field(default=False, metadata={"help": "train on CPU even if a GPU is visible"})


@dataclass
class PRMTrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    SECTIONS = ("model", "data", "train")

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def from_yaml(cls, path: str | Path) -> "PRMTrainConfig":
        raw = yaml.safe_load(Path(path).read_text()) or {}
        unknown = sorted(set(raw) - set(cls.SECTIONS))
        if unknown:
            raise ValueError(f"{path}: unknown sections {unknown}; known: {list(cls.SECTIONS)}")
        parts = {}
        for name in cls.SECTIONS:
            section_cls = type(getattr(cls(), name))
            data = raw.get(name) or {}
            known = {f.name for f in fields(section_cls)}
            bad = sorted(set(data) - known)
            if bad:
                raise ValueError(f"{path}: unknown {name} settings {bad}; known: {sorted(known)}")
            parts[name] = section_cls(**data)
        return cls(**parts)

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field (``--lora-r``, ``--train-file``, ...), each with its help text."""
        for name in cls.SECTIONS:
            group = parser.add_argument_group(name)
            for f in fields(type(getattr(cls(), name))):
                flag = "--" + f.name.replace("_", "-")
                if _kind(f) is bool:
                    group.add_argument(flag, type=_parse_bool, default=None, metavar="{true,false}",
                                       help=f.metadata["help"])
                else:
                    default = None if f.default is MISSING else f.default
                    group.add_argument(flag, type=_kind(f), default=None, choices=f.metadata.get("choices"),
                                       help=f.metadata["help"] + (f" (default: {default})" if default not in
                                                                  (None, "") else ""))

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "PRMTrainConfig":
        """The YAML file (``args.config``), then every flag given on top of it."""
        cfg = cls.from_yaml(args.config) if getattr(args, "config", None) else cls()
        for name in cls.SECTIONS:
            section = getattr(cfg, name)
            given = {f.name: getattr(args, f.name) for f in fields(section) if getattr(args, f.name, None) is not None}
            setattr(cfg, name, replace(section, **given))
        return cfg

    def as_dict(self) -> dict:
        return {name: {f.name: getattr(getattr(self, name), f.name) for f in fields(getattr(self, name))}
                for name in self.SECTIONS}

    # -- checks that need no weights ---------------------------------------------------------
    def world_size(self) -> int:
        """Processes: accelerate's (``WORLD_SIZE``) when launched, else the recipe's ``num_processes``."""
        env = os.environ.get("WORLD_SIZE")
        return int(env) if env else (self.train.num_processes or 1)

    def accumulation(self, world_size: int | None = None) -> int:
        """Gradient accumulation steps (see ``effective_batch_size``)."""
        t, world = self.train, world_size or self.world_size()
        if t.gradient_accumulation_steps is not None:
            return t.gradient_accumulation_steps
        if t.effective_batch_size is None:
            return 1
        per_step = t.per_device_batch_size * world
        if t.effective_batch_size % per_step:
            raise ValueError(f"effective_batch_size {t.effective_batch_size} is not a multiple of "
                             f"per_device_batch_size {t.per_device_batch_size} x {world} processes")
        return t.effective_batch_size // per_step

    def validate(self, check_paths: bool = True) -> list[str]:
        """Problems with this config (empty: valid): fields, batch arithmetic and, when
        ``check_paths``, the data files (present, with prompt and completion columns) and the model
        (a local folder with config.json, or a hub id, reported as unchecked offline)."""
        m, d, t = self.model, self.data, self.train
        problems = []
        if not m.name_or_path:
            problems.append("model.name_or_path is empty")
        if not d.train_file:
            problems.append("data.train_file is empty")
        if not t.output_dir:
            problems.append("train.output_dir is empty")
        if m.lora and (m.lora_r < 1 or m.lora_alpha < 1 or not 0 <= m.lora_dropout < 1):
            problems.append("LoRA needs lora_r >= 1, lora_alpha >= 1 and 0 <= lora_dropout < 1")
        if t.learning_rate <= 0 or t.per_device_batch_size < 1 or d.max_length < 16:
            problems.append("learning_rate > 0, per_device_batch_size >= 1 and max_length >= 16 are required")
        if t.max_steps <= 0 and t.num_train_epochs <= 0:
            problems.append("either max_steps > 0 or num_train_epochs > 0")
        if t.gradient_accumulation_steps is not None and t.gradient_accumulation_steps < 1:
            problems.append("gradient_accumulation_steps must be >= 1")
        try:
            accum = self.accumulation()
            if t.effective_batch_size is not None and \
                    accum * t.per_device_batch_size * self.world_size() != t.effective_batch_size:
                problems.append(f"effective_batch_size {t.effective_batch_size} != per_device "
                                f"{t.per_device_batch_size} x accumulation {accum} x processes {self.world_size()}")
        except ValueError as e:
            problems.append(str(e))
        if t.bf16 and m.dtype == "float16":
            problems.append("bf16 training with float16 weights: use dtype bfloat16 or float32")
        if check_paths:
            for key in ("train_file", "eval_file"):
                path = getattr(d, key)
                if path:
                    problems += _check_data_file(key, Path(path))
            if m.name_or_path and m.name_or_path != "embedded":
                p = Path(m.name_or_path)
                looks_local = p.exists() or m.name_or_path.startswith((".", "/", "~"))
                if looks_local and not (p / "config.json").exists():
                    problems.append(f"model.name_or_path {p} has no config.json")
        return problems

    def summary(self) -> dict:
        """What a dry run reports: the resolved batch arithmetic and the model's location."""
        t, m = self.train, self.model
        world = self.world_size()
        accum = self.accumulation() if not self.validate(check_paths=False) else None
        local = m.name_or_path == "embedded" or (Path(m.name_or_path) / "config.json").exists()
        return {"model": m.name_or_path, "model_location": "local folder" if local else
                "hub id (not checked: offline)", "mode": f"LoRA r={m.lora_r} alpha={m.lora_alpha}" if m.lora
                else "full fine-tune", "processes": world, "per_device_batch_size": t.per_device_batch_size,
                "gradient_accumulation_steps": accum,
                "effective_batch_size": None if accum is None else accum * t.per_device_batch_size * world,
                "bf16": t.bf16, "learning_rate": t.learning_rate, "max_length": self.data.max_length}


def _check_data_file(key: str, path: Path) -> list[str]:
    import pyarrow.parquet as pq

    if not path.exists():
        return [f"data.{key} {path} does not exist"]
    try:
        names = set(pq.read_schema(path).names)
    except Exception as e:  # noqa: BLE001 - any unreadable file is a config problem to report
        return [f"data.{key} {path} is not readable Parquet: {e}"]
    missing = {"prompt", "completion"} - names
    return [f"data.{key} {path} lacks columns {sorted(missing)}"] if missing else []


def _kind(f):
    t = str(f.type)
    return bool if t == "bool" else int if t.startswith("int") else float if t.startswith("float") else str


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
