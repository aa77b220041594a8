"""``LLMConfig``: where chat completions go and how they are sampled, retried, cached and
priced; every field is a flag (``LLMConfig.add_args(ap, prefix=...)``) and a YAML key, by the
rules of :mod:`cli.config` (``--llm-config FILE``, optionally under an ``llm:`` key; flags
override the file; ``--no-cache``/``--cache``)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

from cli.config import Configurable, check_ranges
from llm.cost import DEFAULT_PRICES, price_for

OPENAI_BASE_URL = "https://api.openai.com/v1"
MAX_SEED = 2**32 - 1


@dataclass
class LLMConfig(Configurable):
    """Where chat completions go and how they are sampled, retried, cached and priced."""

    FILE_FLAG = "llm-config"     # --llm-config FILE, --policy-llm-config FILE, ...
    YAML_KEY = "llm"             # a stage config may nest the settings under `llm:`
    ARG_GROUP = "LLM"

    base_url: str | None = field(default=None, metadata={
        "help": "OpenAI-compatible endpoint ending in /v1 (OpenAI, vLLM, SGLang, llama.cpp, "
                "`python -m llm.serve`); unset: the local backend"})
    model: str | None = field(default=None, metadata={
        "help": "model name at the endpoint; for the local backend a transformers folder "
                "(default: the embedded SmolLM2-135M-Instruct)"})
    backend: str | None = field(default=None, metadata={
        "choices": ("openai", "local"),
        "help": "'openai' (HTTP) or 'local' (in-process transformers); default: openai when "
                "--base-url is set, else local. 'openai' without --base-url calls api.openai.com"})
    api_key_env: str = field(default="OPENAI_API_KEY", metadata={
        "help": "NAME of the environment variable holding the API key (the key itself is never "
                "taken on the command line or written anywhere)"})
    temperature: float = field(default=0.0, metadata={"min": 0, "help": "sampling temperature; 0 is greedy"})
    top_p: float | None = field(default=None, metadata={"gt": 0, "max": 1,
                                                        "help": "nucleus sampling mass (unset: server default)"})
    # A uint32: what every server takes (llama.cpp's seed is 32 bits; OpenAI's and vLLM's are wider).
    seed: int | None = field(default=0, metadata={"min": 0, "max": MAX_SEED,
                                                  "help": "sampling seed sent with every request"})
    max_tokens: int = field(default=256, metadata={"min": 1, "help": "maximum completion tokens per choice"})
    n: int = field(default=1, metadata={"min": 1, "max": 128, "help": "number of choices per request"})
    timeout_s: float = field(default=120.0, metadata={"gt": 0, "help": "seconds to wait for a response (read timeout)"})
    connect_timeout_s: float = field(default=10.0, metadata={"gt": 0, "help": "seconds to wait for a connection"})
    max_retries: int = field(default=6, metadata={"min": 0, "max": 100,
        "help": "retries after the first attempt on 408/409/429, 5xx, connection errors, timeouts "
                "and malformed responses"})
    backoff_s: float = field(default=1.0, metadata={"min": 0,
        "help": "first retry delay; doubles per retry, with jitter"})
    backoff_max_s: float = field(default=60.0, metadata={"min": 0,
        "help": "longest retry delay, also the cap on a server's Retry-After"})
    concurrency: int = field(default=16, metadata={"min": 1, "max": 4096, "help": "requests in flight at once"})
    cache_dir: str = field(default=".cache/llm", metadata={"help": "response cache folder"})
    no_cache: bool = field(default=False, metadata={"help": "bypass the response cache (neither read nor write)"})
    price_in: float | None = field(default=None, metadata={"min": 0,
        "help": "USD per 1M prompt tokens (default: the price table, 0 for unknown and local models)"})
    price_out: float | None = field(default=None, metadata={"min": 0, "help": "USD per 1M completion tokens"})
    prices: dict = field(default_factory=dict, metadata={
        "help": "YAML only: extra price-table rows {model: [usd_in_per_1M, usd_out_per_1M]}"})

    @property
    def is_local(self) -> bool:
        return (self.backend or ("openai" if self.base_url else "local")) == "local"

    @property
    def endpoint(self) -> str:
        """The URL requests go to, or ``local:<folder>`` for the in-process backend."""
        if self.is_local:
            return f"local:{self.local_model_dir()}"
        return (self.base_url or OPENAI_BASE_URL).rstrip("/")

    def local_model_dir(self) -> Path:
        from llm.embedded import default_model_dir

        return Path(self.model).resolve() if self.model else default_model_dir().resolve()

    @property
    def model_id(self) -> str:
        """The ``model`` field of a request."""
        if self.is_local:
            return self.local_model_dir().name
        if not self.model:
            raise ValueError("an HTTP endpoint needs --model (the model name the server serves)")
        return self.model

    def price(self) -> tuple[float, float]:
        """(input, output) USD per 1M tokens for this model."""
        if self.price_in is not None or self.price_out is not None:
            return (self.price_in or 0.0, self.price_out or 0.0)
        if self.is_local:
            return (0.0, 0.0)
        return price_for(self.model_id, {**DEFAULT_PRICES, **{k: tuple(v) for k, v in self.prices.items()}})

    def validate(self) -> "LLMConfig":
        if self.backend not in (None, "openai", "local"):
            raise ValueError(f"backend must be 'openai' or 'local', not {self.backend!r}")
        check_ranges(self, "LLM config")    # every field's range (the flags check them when parsed)
        if self.is_local and not self.model:
            from llm.embedded import default_model_name

            default_model_name()            # a bad $SURFPRM_EMBEDDED_MODEL: one line here, not a traceback later
        for model, row in self.prices.items():
            if not (isinstance(row, (list, tuple)) and len(row) == 2 and
                    all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in row)):
                raise ValueError(f"LLM config: prices[{model!r}] must be [usd_in_per_1M, usd_out_per_1M], "
                                 f"two finite numbers >= 0, not {row!r:.60}")
        return self

    # -- loading (cli.config): defaults, then the YAML file, then the flags given -----------
    @classmethod
    def from_yaml(cls, path: str | Path, overrides: dict | None = None) -> "LLMConfig":
        return super().from_yaml(path, overrides).validate()

    @classmethod
    def from_args(cls, args: argparse.Namespace, prefix: str = "") -> "LLMConfig":
        """``add_args(ap, prefix)``'s flags over its ``--{prefix}llm-config`` file over the defaults."""
        return super().from_args(args, prefix).validate()
