"""Typed configuration of comparative PRM training: TRL's ``SFTConfig`` and ``ModelConfig`` plus
the data fields, loadable from YAML and overridable from flags (:mod:`cli.config`).

``PRMTrainConfig`` *is* an ``SFTConfig`` and a ``ModelConfig`` (a subclass of both): every
TRL/transformers training field (``learning_rate``, ``lr_scheduler_type``, ``save_strategy``,
``deepspeed``, ...) and every model/LoRA field (``model_name_or_path``, ``use_peft``, ``lora_r``,
``use_rslora``, ``load_in_4bit``, ...) keeps its TRL name, help and meaning; the adapters are
``trl.get_peft_config(cfg)`` and a quantized load ``trl.get_quantization_config(cfg)``. Only the
defaults that differ from TRL's are declared again, with today's values (``learning_rate`` 1e-4,
``max_length`` 4096, LoRA on all linear layers, ... see ``CARRIED_DEFAULTS``). A config file keeps
three sections for the reader; their keys are this one class's fields::

    model: {model_name_or_path: ..., use_peft: true, lora_r: 128, ...}   # ModelConfig's fields
    data:  {train_file: ..., eval_file: ..., max_length: 4096}           # DATA_FIELDS
    train: {output_dir: ..., learning_rate: 1.0e-4, effective_batch_size: 256, ...}   # the rest

Every field is also a flag named after it (``--learning-rate 5e-5``, ``--lora-r 16``,
``--train-file PATH``, ``--no-use-peft``); flags override the file (``--config FILE``). The names
of earlier recipes still work with a warning (``name_or_path``/``--name-or-path`` is
``model_name_or_path``, ``lora``/``--no-lora`` is ``use_peft``; a comma-separated
``lora_target_modules`` string is the list of those modules).

``output_dir`` is where the merged model goes (checkpoints, when saved, go to
``output_dir/checkpoints``). Gradient accumulation follows from ``effective_batch_size`` unless
``gradient_accumulation_steps`` is set; with an ``eval_file``, evaluation runs each epoch unless
``eval_strategy`` says otherwise. ``trainer_args()`` is the plain ``SFTConfig`` the trainer gets:
transformers checks ``bf16`` and ``deepspeed`` against the machine when that object is built, not
when a recipe for 8 GPUs is loaded or dry-run on a laptop.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from trl import ModelConfig, SFTConfig

from cli.config import Configurable, add_dataclass_args, check_keys, flag_name, renamed

MODEL_FIELDS = tuple(f.name for f in fields(ModelConfig))
DATA_FIELDS = ("train_file", "eval_file", "max_length", "max_train_samples")
# Keys of earlier config files, now TRL's own fields.
RENAMED = {"per_device_batch_size": "per_device_train_batch_size",
           "warmup_ratio": "warmup_steps (a share of the steps when < 1)",
           "save_checkpoints": "save_strategy (save_checkpoints: true is save_strategy: epoch)"}


@dataclass
class PRMTrainConfig(Configurable, SFTConfig, ModelConfig):
    """Comparative PRM training: TRL's SFTConfig and ModelConfig (backbone, LoRA), the data files."""

    FILE_FLAG = "config"

    # -- model: ModelConfig fields whose defaults differ from TRL's -------------------------------
    model_name_or_path: str = field(default="", metadata={
        "deprecated": ("name_or_path",),
        "help": "transformers folder or hub id of the base model ('embedded': the bundled SmolLM2-135M-Instruct)"})
    use_peft: bool = field(default=True, metadata={
        "deprecated": ("lora",),
        "help": "train LoRA adapters (trl.get_peft_config; merged into the saved model); --no-use-peft: a full "
                "fine-tune (TRL: off)"})
    lora_target_modules: list[str] | None = field(default_factory=lambda: ["all-linear"], metadata={
        "help": "modules that get adapters: all-linear, or their names (q_proj v_proj) (TRL: unset = peft's "
                "choice for the architecture)"})

    # -- data: conversational prompt/completion Parquet (dataset.export --format trl / trl-labels) --
    train_file: str = field(default="", metadata={"help": "training Parquet (prompt, completion columns)"})
    eval_file: str | None = field(default=None, metadata={"help": "optional evaluation Parquet (loss only)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training rows"})

    # -- train: batch arithmetic of our own ----------------------------------------------------
    effective_batch_size: int | None = field(default=None, metadata={
        "help": "examples per optimizer step over all devices; sets gradient accumulation = "
                "effective / (per_device_train_batch_size * processes), which must divide exactly"})
    num_processes: int | None = field(default=None, metadata={
        "help": "devices the recipe is written for (dry-run arithmetic; at run time: accelerate's world size)"})

    # -- SFTConfig fields whose defaults differ from TRL's: today's values, carried over ---------
    output_dir: str = field(default="", metadata={
        "help": "where the merged model goes (checkpoints, if saved, in output_dir/checkpoints)"})
    learning_rate: float = field(default=1e-4, metadata={"gt": 0, "help": "peak learning rate (TRL: 2e-5)"})
    num_train_epochs: float = field(default=1.0, metadata={"help": "epochs, ignored when max_steps > 0 (TRL: 3)"})
    per_device_train_batch_size: int = field(default=1, metadata={"min": 1,
                                                               "help": "examples per device per micro-step (TRL: 8)"})
    per_device_eval_batch_size: int = field(default=1, metadata={"help": "evaluation examples per device (TRL: 8)"})
    gradient_accumulation_steps: int | None = field(default=None, metadata={
        "help": "micro-steps per optimizer step (unset: from effective_batch_size, else 1)"})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "transformers scheduler name (TRL: linear)"})
    warmup_steps: float = field(default=0.03, metadata={
        "help": "warm-up steps; < 1: a share of the training steps (TRL: 0)"})
    bf16: bool = field(default=False, metadata={
        "help": "bfloat16 mixed precision (a GPU with bf16, or --use-cpu; TRL: on when fp16 is off)"})
    gradient_checkpointing: bool | None = field(default=None, metadata={
        "help": "deprecated alias of --activation-checkpointing (TRL: on; here off unless set)"})
    logging_steps: float = field(default=1, metadata={"help": "log the loss every N steps (TRL: 10)"})
    save_strategy: str = field(default="no", metadata={
        "help": "trainer checkpoints: no, epoch or steps (the merged model is always saved; TRL: steps)"})
    save_only_model: bool = field(default=True, metadata={
        "help": "checkpoints hold the weights only, not optimizer state (TRL: off)"})
    max_length: int | None = field(default=4096, metadata={
        "help": "tokens per example; rows whose completion is cut away entirely are dropped and counted (TRL: 1024)"})
    completion_only_loss: bool | None = field(default=True, metadata={
        "help": "loss on the judgment only, never on the prompt (TRL: unset = on for prompt/completion data)"})
    disable_tqdm: bool = field(default=False, metadata={
        "help": "no progress bar of the steps (with its ETA) on stderr (TRL: unset = off only while "
                "transformers' logger is quieter than WARNING)"})

    # -- loading -------------------------------------------------------------------------------
    @classmethod
    def section_of(cls, name: str) -> str:
        return "model" if name in MODEL_FIELDS else "data" if name in DATA_FIELDS else "train"

    @classmethod
    def file_values(cls, data: dict, where: str) -> dict:
        """The ``model``/``data``/``train`` sections, flattened; a key in the wrong section or an
        unknown key is refused, a key of TRL's renamed one too (an old name of ours is renamed,
        with a warning)."""
        check_keys(data, ("model", "data", "train"), f"{where} (sections)")
        names = [f.name for f in fields(cls) if f.init]
        flat = {}
        for section, values in data.items():
            values = values or {}
            for key in values:
                if key in RENAMED:
                    raise ValueError(f"{where}: {section}.{key} is now {RENAMED[key]}")
            values = renamed(cls, values, f"{where}: {section}")
            check_keys(values, [n for n in names if cls.section_of(n) == section], f"{where}: {section}")
            flat.update(values)
        return flat

    @classmethod
    def add_args(cls, parser, prefix: str = "", skip: tuple[str, ...] = ()) -> None:
        """``--config FILE`` and one flag per field, grouped by section in ``--help``."""
        parser.__dict__.setdefault("configs", []).append((cls, prefix, skip))     # for tests/test_cli_config.py
        parser.add_argument(flag_name(cls.FILE_FLAG, prefix), dest=f"{prefix.replace('-', '_')}config", metavar="FILE",
                            help="YAML file with model/data/train sections (flags override it)")
        names = [f.name for f in fields(cls) if f.init]
        for section in ("model", "data", "train"):
            group = parser.add_argument_group(section)
            add_dataclass_args(group, cls, prefix, tuple(skip) + tuple(n for n in names
                                                                        if cls.section_of(n) != section))

    def __post_init__(self):
        # transformers refuses bf16 on a machine without a bf16 GPU and loads DeepSpeed as soon as
        # TrainingArguments is built; those checks run in trainer_args(), on the machine that trains.
        held = (self.bf16, self.deepspeed)
        self.world_size()                # accelerate, in the chain below, reads $WORLD_SIZE with a bare int()
        self.bf16, self.deepspeed = False, None
        super().__post_init__()          # SFTConfig's chain; TrainingArguments does not go on to ModelConfig's
        self.bf16, self.deepspeed = held
        if isinstance(self.lora_target_modules, str) and "," in self.lora_target_modules:
            # earlier recipes wrote a comma-separated string; peft would read it as one regex
            self.lora_target_modules = [t.strip() for t in self.lora_target_modules.split(",") if t.strip()]
        targets = self.lora_target_modules
        ModelConfig.__post_init__(self)  # refuses 8-bit with 4-bit; unwraps a one-item target list
        # ... to a string, which peft matches as a regex against full module names: only
        # "all-linear" means the same either way, so one module name (--lora-target-modules q_proj) stays a list
        if isinstance(targets, list) and self.lora_target_modules != "all-linear":
            self.lora_target_modules = targets

    def as_dict(self) -> dict:
        """Every field (enums as their values), by section."""
        flat = self.to_dict()
        return {s: {k: v for k, v in flat.items() if self.section_of(k) == s} for s in ("model", "data", "train")}

    def trainer_args(self) -> SFTConfig:
        """The plain ``SFTConfig`` the trainer gets: this config's TRL fields, checkpoints under
        ``output_dir/checkpoints``, gradient accumulation resolved, and evaluation each epoch when
        there is an ``eval_file`` and ``eval_strategy`` is ``no``."""
        values = {f.name: getattr(self, f.name) for f in fields(SFTConfig) if f.init}
        values.update(output_dir=str(Path(self.output_dir) / "checkpoints"),
                      gradient_accumulation_steps=self.accumulation(),
                      eval_strategy="epoch" if self.eval_file and self.eval_strategy == "no" else self.eval_strategy)
        return SFTConfig(**values)

    # -- checks that need no weights -------------------------------------------------------------
    def world_size(self) -> int:
        """Processes: accelerate's (``WORLD_SIZE``) when launched, else the recipe's ``num_processes``."""
        env = os.environ.get("WORLD_SIZE")
        if not env:
            return self.num_processes or 1
        if not (env.strip().isascii() and env.strip().isdigit()) or int(env) < 1:
            raise ValueError(f"$WORLD_SIZE={env!r} is not a positive integer (accelerate sets it to the number of "
                             f"processes; unset it to use the recipe's num_processes)")
        return int(env)

    def accumulation(self, world_size: int | None = None) -> int:
        """Gradient accumulation steps (see ``effective_batch_size``)."""
        world = world_size or self.world_size()
        if self.gradient_accumulation_steps is not None:
            return self.gradient_accumulation_steps
        if self.effective_batch_size is None:
            return 1
        per_step = self.per_device_train_batch_size * world
        if self.effective_batch_size % per_step:
            raise ValueError(f"effective_batch_size {self.effective_batch_size} is not a multiple of "
                             f"per_device_train_batch_size {self.per_device_train_batch_size} x {world} processes")
        return self.effective_batch_size // per_step

    def validate(self, check_paths: bool = True) -> list[str]:
        """Problems with this config (empty: valid): fields, batch arithmetic and, when
        ``check_paths``, the data files (present, with prompt and completion columns) and the model
        (a local folder with config.json, or a hub id, reported as unchecked offline)."""
        problems = []
        if not self.model_name_or_path:
            problems.append("model.model_name_or_path is empty")
        if not self.train_file:
            problems.append("data.train_file is empty")
        if not self.output_dir:
            problems.append("train.output_dir is empty")
        if self.use_peft and (self.lora_r < 1 or self.lora_alpha < 1 or not 0 <= self.lora_dropout < 1):
            problems.append("LoRA needs lora_r >= 1, lora_alpha >= 1 and 0 <= lora_dropout < 1")
        if self.learning_rate <= 0 or self.per_device_train_batch_size < 1 or (self.max_length or 0) < 16:
            problems.append("learning_rate > 0, per_device_train_batch_size >= 1 and max_length >= 16 are required")
        if self.max_steps <= 0 and self.num_train_epochs <= 0:
            problems.append("either max_steps > 0 or num_train_epochs > 0")
        if self.gradient_accumulation_steps is not None and self.gradient_accumulation_steps < 1:
            problems.append("gradient_accumulation_steps must be >= 1")
        try:
            accum = self.accumulation()
            if self.effective_batch_size is not None and \
                    accum * self.per_device_train_batch_size * self.world_size() != self.effective_batch_size:
                problems.append(f"effective_batch_size {self.effective_batch_size} != per_device "
                                f"{self.per_device_train_batch_size} x accumulation {accum} x processes "
                                f"{self.world_size()}")
        except ValueError as e:
            problems.append(str(e))
        if self.bf16 and self.dtype == "float16":
            problems.append("bf16 training with float16 weights: use dtype bfloat16 or float32")
        if (self.load_in_4bit or self.load_in_8bit) and importlib.util.find_spec("bitsandbytes") is None:
            problems.append("load_in_4bit / load_in_8bit need bitsandbytes, which is not installed")
        if check_paths:
            for key in ("train_file", "eval_file"):
                path = getattr(self, key)
                if path:
                    problems += _check_data_file(key, Path(path))
            if self.model_name_or_path and self.model_name_or_path != "embedded":
                p = Path(self.model_name_or_path)
                looks_local = p.exists() or self.model_name_or_path.startswith((".", "/", "~"))
                if looks_local and not (p / "config.json").exists():
                    problems.append(f"model.model_name_or_path {p} has no config.json")
        return problems

    def summary(self) -> dict:
        """What a dry run reports: the resolved batch arithmetic and the model's location."""
        world = self.world_size()
        accum = self.accumulation() if not self.validate(check_paths=False) else None
        local = self.model_name_or_path == "embedded" or (Path(self.model_name_or_path) / "config.json").exists()
        return {"model": self.model_name_or_path,
                "model_location": "local folder" if local else "hub id (not checked: offline)",
                "mode": f"LoRA r={self.lora_r} alpha={self.lora_alpha}" if self.use_peft else "full fine-tune",
                "processes": world, "per_device_train_batch_size": self.per_device_train_batch_size,
                "gradient_accumulation_steps": accum,
                "effective_batch_size": None if accum is None else accum * self.per_device_train_batch_size * world,
                "bf16": self.bf16, "learning_rate": self.learning_rate, "max_length": self.max_length}


# The SFTConfig and ModelConfig defaults declared again above, with TRL's own value beside ours.
CARRIED_DEFAULTS = {
    "model_name_or_path": (None, ""), "use_peft": (False, True), "lora_target_modules": (None, ["all-linear"]),
    "output_dir": (None, ""), "learning_rate": (2e-5, 1e-4), "num_train_epochs": (3.0, 1.0),
    "per_device_train_batch_size": (8, 1), "per_device_eval_batch_size": (8, 1),
    "gradient_accumulation_steps": (1, None), "lr_scheduler_type": ("linear", "cosine"),
    "warmup_steps": (0, 0.03), "bf16": (None, False), "gradient_checkpointing": (True, None),
    "logging_steps": (10, 1), "save_strategy": ("steps", "no"), "save_only_model": (False, True),
    "max_length": (1024, 4096), "completion_only_loss": (None, True), "disable_tqdm": (None, False),
}


def _check_data_file(key: str, path: Path) -> list[str]:
    import pyarrow.parquet as pq

    if not path.exists():
        return [f"data.{key} {path} does not exist" + _export_hint(path)]
    try:
        meta = pq.read_metadata(path)
        names = set(meta.schema.to_arrow_schema().names)
    except Exception as e:  # noqa: BLE001 - any unreadable file is a config problem to report
        return [f"data.{key} {path} is not readable Parquet: {e}"]
    missing = {"prompt", "completion"} - names
    if missing:
        return [f"data.{key} {path} lacks columns {sorted(missing)}"]
    if key == "train_file" and meta.num_rows == 0:
        return [f"data.train_file {path} has no rows (every kept pair went to the test split: export with more "
                f"pairs, e.g. a larger --sample-size, or another --seed)"]
    return []


def _export_hint(path: Path) -> str:
    """How to write a missing ``RUN/export/<format>/<split>.parquet`` (``make run`` writes ``trl``)."""
    parts = path.parts
    if len(parts) >= 3 and parts[-3] == "export" and path.suffix == ".parquet":
        run, fmt = Path(*parts[:-3]) if len(parts) > 3 else Path("."), parts[-2]
        return (f": write it with `python -m dataset.export --run {run} --format {fmt}` (`make run` writes the "
                f"`trl` and `webprmbench` exports of runs/demo)")
    return ""
