"""The ``trl-preference`` export (conversational prompt / chosen / rejected): its rows are the kept
pairs' states and actions, the card lists the config, and TRL's ``RewardTrainer`` and
``DPOTrainer`` each train one step on it: the embedded SmolLM2's tokenizer and chat template, a
random 2-layer Llama over its vocabulary (the 135M weights took minutes a step on a loaded 2-core
machine, and the test checks the data path, not the model)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import EMBEDDED_MODEL
from dataset.export import TRL_PREFERENCE_SCHEMA, export, split_tasks
from scripted_teacher import ScriptedTeacher, llm_config, make_run, start
from teacher.verify import VerifyConfig, verify


@pytest.fixture(scope="module")
def preference_run(tmp_path_factory):
    """Six pairs verified by the scripted teacher (one discarded) with a short AXTree budget, exported
    as trl-preference with the card."""
    root = tmp_path_factory.mktemp("preference_run")
    pairs = make_run(root, n_pairs=6)
    teacher = ScriptedTeacher(pairs)
    teacher.script = {pairs[0]["pair_id"]: ["disagree"] * 5}
    server = start(teacher)
    try:
        verify(root, VerifyConfig(axtree_chars=300), llm_config(server, root / ".llm_cache"), progress=False)
    finally:
        server.shutdown()
    export(root, "trl-preference")
    return root


def _rows(root, split):
    return pq.read_table(root / "export" / "trl-preference" / f"{split}.parquet").to_pylist()


def test_rows_are_the_kept_pairs_state_and_actions(preference_run):
    root = preference_run
    kept = {r["pair_id"]: r for r in pq.read_table(root / "preferences.parquet").to_pylist()}
    train, test = _rows(root, "train"), _rows(root, "test")
    assert pq.read_schema(root / "export/trl-preference/train.parquet").equals(TRL_PREFERENCE_SCHEMA)
    assert sorted(r["pair_id"] for r in train + test) == sorted(kept) and len(kept) == 5
    assert {r["task_id"] for r in test} == split_tasks(r["task_id"] for r in kept.values())   # trl's split
    for r in train + test:
        pair = kept[r["pair_id"]]
        assert r["chosen"] == [{"role": "assistant", "content": pair["action_pos"]}]
        assert r["rejected"] == [{"role": "assistant", "content": pair["action_neg"]}]
        system, user = r["prompt"]
        assert (system["role"], user["role"]) == ("system", "user") and "next action" in system["content"]
        # the state the teacher saw, without the two responses (neither action is given away)
        assert pair["intent"].strip()[:40] in user["content"] and "#### AXTREE ####" in user["content"]
        assert "[The Begin of Response" not in user["content"] and "<Answer>" not in user["content"]
    stats = json.loads((root / "stats.json").read_text())["data.export.trl_preference"]
    assert stats["in"] == stats["out"] == 5 and stats["axtree_chars"] == 300
    # counted with the embedded model's tokenizer (the teacher was an endpoint): two sequences a pair
    assert stats["tokens"]["rows"] == 10 and stats["tokens"]["tokenizer"] == EMBEDDED_MODEL.name


def test_card_lists_the_preference_config(preference_run):
    header = yaml.safe_load((preference_run / "README.md").read_text().split("---")[1])
    config = next(c for c in header["configs"] if c["config_name"] == "trl-preference")
    assert {f["split"] for f in config["data_files"]} <= {"train", "test"}
    import datasets

    ds = datasets.load_dataset(str(preference_run), "trl-preference")
    assert set(ds["train"].column_names) >= {"prompt", "chosen", "rejected"}


def _trl_args(tmp_path):
    return dict(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, learning_rate=1e-4,
                bf16=False, use_cpu=True, report_to="none", save_strategy="no", dataloader_num_workers=0,
                max_length=1024)


def _dataset(root):
    import datasets

    return datasets.load_dataset(str(root), "trl-preference")["train"]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A random 2-layer Llama with the embedded SmolLM2's tokenizer, saved as a model folder."""
    from transformers import AutoTokenizer

    from tiny_lm import tiny_model

    if not (EMBEDDED_MODEL / "tokenizer_config.json").exists():
        pytest.skip("the embedded model is prepared by `make setup`")
    folder = tmp_path_factory.mktemp("tiny_smollm2")
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    tiny_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow       # TRL's trainer, one step
def test_reward_trainer_trains_one_step(preference_run, tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    before = model.score.weight.detach().clone()
    trainer = RewardTrainer(model=model, args=RewardConfig(**_trl_args(tmp_path)),
                            train_dataset=_dataset(preference_run), processing_class=tokenizer)
    assert len(trainer.train_dataset) == len(_rows(preference_run, "train"))      # no pair dropped as too long
    out = trainer.train()
    assert out.global_step == 1 and torch.isfinite(torch.tensor(out.training_loss))
    assert not torch.equal(before, model.score.weight)


@pytest.mark.slow       # TRL's trainer and a reference copy, one step
def test_dpo_trainer_trains_one_step(preference_run, tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    before = [p.detach().clone() for p in model.parameters()]
    # one pair a step: DPO's log-probabilities over SmolLM2's 49k-token vocabulary dominate a CPU step
    args = DPOConfig(**{**_trl_args(tmp_path), "per_device_train_batch_size": 1})
    trainer = DPOTrainer(model=model, args=args, train_dataset=_dataset(preference_run),
                         processing_class=tokenizer)
    out = trainer.train()
    assert out.global_step == 1 and torch.isfinite(torch.tensor(out.training_loss))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


class RecordingHub:
    """Stands in for the Hub: ``HfApi.create_repo`` and ``create_commit`` record their calls."""

    def __init__(self, monkeypatch):
        import huggingface_hub
        from huggingface_hub import constants

        self.calls = []
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", self.create_repo)
        monkeypatch.setattr(huggingface_hub.HfApi, "create_commit", self.create_commit)

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def create_commit(self, repo_id, operations, **kwargs):
        from types import SimpleNamespace

        self.calls.append(("create_commit", repo_id, {**kwargs, "operations": list(operations)}))
        return SimpleNamespace(commit_url=f"https://huggingface.co/datasets/{repo_id}/commit/0")


def test_push_to_hub_commits_the_card_and_every_configs_files(preference_run, monkeypatch, tmp_path, capsys):
    """``--push-to-hub`` creates the dataset repository and commits, in one commit, the card and
    every file its configs name (and the report); those files alone load as the run does."""
    import shutil

    import datasets

    from dataset.export import main

    hub = RecordingHub(monkeypatch)
    assert main(["--run", str(preference_run), "--format", "trl-preference", "--push-to-hub", "me/surfprm-test",
                 "--hub-private"]) == 0
    assert "pushed https://huggingface.co/datasets/me/surfprm-test/commit/0" in capsys.readouterr().out
    (_, repo, created), (_, repo2, commit) = hub.calls
    assert repo == repo2 == "me/surfprm-test" and created == {"repo_type": "dataset", "private": True, "exist_ok": True}
    pushed = {op.path_in_repo: op.path_or_fileobj for op in commit["operations"]}
    header = yaml.safe_load((preference_run / "README.md").read_text().split("---")[1])
    named = {f["path"] for c in header["configs"] for f in c["data_files"]}
    assert commit["repo_type"] == "dataset" and {"README.md", "report/README.md"} | named <= set(pushed)
    mirror = tmp_path / "hub"
    for rel, src in pushed.items():
        (mirror / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, mirror / rel)
    assert datasets.load_dataset(str(mirror), "trl-preference")["train"].num_rows == len(_rows(preference_run, "train"))


def test_push_to_hub_offline_is_one_line(preference_run, capsys, monkeypatch):
    from huggingface_hub import constants

    from dataset.export import main

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)      # as the Makefile sets it
    assert main(["--run", str(preference_run), "--format", "trl-preference", "--no-card",
                 "--push-to-hub", "me/x"]) == 2
    err = capsys.readouterr().err
    assert "needs the network" in err and err.count("\n") == 1
