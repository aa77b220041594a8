"""The run directory loads: ``datasets.load_dataset(RUN, config)`` for every config the card lists,
on a run with kept pairs and on one with none, without "Ignoring part of dataset_info"."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq
import pytest
import yaml

from dataset.card import card_data
from dataset.export import export
from scripted_teacher import ScriptedTeacher, llm_config, make_run, start
from teacher.verify import VerifyConfig, verify


def _verified_run(root, cache, outcome: str):
    pairs = make_run(root)
    teacher = ScriptedTeacher(pairs)
    teacher.script = {p["pair_id"]: [outcome] for p in pairs}
    server = start(teacher)
    try:
        verify(root, VerifyConfig(k=1, max_tokens=256), llm_config(server, cache), progress=False)
    finally:
        server.shutdown()
    for fmt in ("trl", "webprmbench"):
        export(root, fmt, card=fmt == "webprmbench")
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("llm-cache")
    return {"kept": _verified_run(tmp_path_factory.mktemp("kept"), cache, "agree"),
            "none": _verified_run(tmp_path_factory.mktemp("none"), cache, "disagree")}


def _card_header(run) -> dict:
    text = (run / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def _load_every_config(run, tmp_path, monkeypatch, caplog):
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    head = _card_header(run)
    listed = [c["config_name"] for c in head["configs"]]
    caplog.set_level(logging.WARNING)
    loaded = {}
    for c in head["configs"]:
        ds = datasets.load_dataset(str(run), c["config_name"], cache_dir=str(tmp_path / "hf"))
        loaded[c["config_name"]] = {s: len(ds[s]) for s in ds}
        for f in c["data_files"]:
            assert len(ds[f["split"]]) == pq.read_metadata(run / f["path"]).num_rows > 0
    assert "Ignoring part of dataset_info" not in caplog.text
    assert sum(1 for c in head["configs"] if c.get("default")) == 1
    return listed, loaded, head


def test_run_with_kept_pairs_loads_every_listed_config(runs, tmp_path, monkeypatch, caplog):
    from huggingface_hub import DatasetCard

    listed, loaded, head = _load_every_config(runs["kept"], tmp_path, monkeypatch, caplog)
    card = DatasetCard.load(runs["kept"] / "README.md")       # what the Hub's own reader makes of it
    assert card.data.configs == head["configs"] and "surfprm" in card.data.tags
    assert card.text.lstrip().startswith(f"# surfPRM process preferences: `{runs['kept'].name}`")
    assert {"preferences", "trl", "webprmbench"} <= set(listed)
    assert "discarded" not in listed                      # every pair was kept: an empty file
    assert loaded["preferences"]["train"] == 6
    assert next(c for c in head["configs"] if c.get("default"))["config_name"] == "preferences"
    for info in head["dataset_info"]:
        assert all({"name", "num_bytes", "num_examples"} <= set(s) for s in info["splits"])


def test_run_with_no_kept_pairs_lists_only_non_empty_splits_and_the_default(runs, tmp_path, monkeypatch, caplog):
    """The empty default (the kept pairs) is listed, so ``load_dataset(RUN)`` never gives the
    rejected pairs (tests/dataset/test_published_text.py loads it); the rest load as listed."""
    import datasets

    run = runs["none"]
    assert pq.read_metadata(run / "preferences.parquet").num_rows == 0
    head = _card_header(run)
    assert [c["config_name"] for c in head["configs"]] == ["preferences", "discarded"]
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    caplog.set_level(logging.WARNING)
    assert len(datasets.load_dataset(str(run), "discarded", cache_dir=str(tmp_path / "hf"))["train"]) == 6
    assert "Ignoring part of dataset_info" not in caplog.text


def test_header_leaves_out_empty_splits(runs):
    h = card_data(runs["none"])
    assert [c["config_name"] for c in h["configs"]] == ["preferences", "discarded"]
    assert h["configs"][0]["default"] is True and "default" not in h["configs"][1]


def test_the_warning_check_catches_a_malformed_card(runs, tmp_path, monkeypatch, caplog):
    """Control: the old header (splits without num_bytes) does warn, so the check above can fail."""
    import shutil

    import datasets

    run = tmp_path / "run"
    shutil.copytree(runs["kept"], run)
    text = (run / "README.md").read_text()
    head = yaml.safe_load(text.split("---\n")[1])
    for info in head["dataset_info"]:
        for s in info["splits"]:
            del s["num_bytes"]
    body = text.split("---\n", 2)[2]
    (run / "README.md").write_text(f"---\n{yaml.safe_dump(head, sort_keys=False)}---\n{body}")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    caplog.set_level(logging.WARNING)
    datasets.load_dataset(str(run), "preferences", cache_dir=str(tmp_path / "hf"))
    assert "Ignoring part of dataset_info" in caplog.text
