"""prm.train on a tiny random model: loss falls on a repeated batch and weights change, the loss
covers only the completion, LoRA merges, a saved model reloads with identical logits, and the
GPU recipe passes a dry run without loading weights."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch
from trl import SFTConfig

from dataset.export import export_trl_labels
from judgment.parse import parse_prompt
from prm.config import PRMTrainConfig
from prm.train import build_trainer, main, save_merged, train
from scripted_teacher import make_run
from tiny_lm import tiny_lm


@pytest.fixture(scope="module")
def label_run(tmp_path_factory):
    """A run of real steps exported as label-only TRL files (short prompts for the tiny model)."""
    root = tmp_path_factory.mktemp("prm_run")
    make_run(root, n_pairs=8)
    paths = export_trl_labels(root, axtree_chars=300)
    return root, paths


def _tiny(paths):
    rows = pq.read_table(paths["train"]).to_pylist() + pq.read_table(paths["test"]).to_pylist()
    return tiny_lm(m["content"] for r in rows for m in r["prompt"] + r["completion"])


def _config(paths, out, **fields) -> PRMTrainConfig:
    return PRMTrainConfig(**{"model_name_or_path": "tiny", "use_peft": False, "train_file": str(paths["train"]),
                             "max_length": 4096, "output_dir": str(out), "use_cpu": True, "learning_rate": 1e-2,
                             "lr_scheduler_type": "constant", "warmup_steps": 0.0, **fields})


def test_label_export_has_answer_tag_targets(label_run):
    root, paths = label_run
    tr, te = pq.read_table(paths["train"]).to_pylist(), pq.read_table(paths["test"]).to_pylist()
    assert len(tr) + len(te) == 8 and not {r["task_id"] for r in tr} & {r["task_id"] for r in te}
    for r in tr + te:
        assert r["completion"] == [{"role": "assistant", "content": f"<Answer>Response {r['label']}</Answer>"}]
        assert [m["role"] for m in r["prompt"]] == ["system", "user"] and parse_prompt(r["prompt"]) is not None
    assert {r["label"] for r in tr + te} == {1, 2}          # the order coin is not constant
    stats = json.loads((root / "stats.json").read_text())["data.export.trl_labels"]
    assert stats["targets"].startswith("answer tag only")


def test_full_finetune_loss_falls_on_a_repeated_batch(label_run, tmp_path):
    _, paths = label_run
    model, tok = _tiny(paths)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = _config(paths, tmp_path / "full", max_steps=8, per_device_train_batch_size=2,
                  max_train_samples=2)                   # one batch, seen 8 times
    record = train(cfg, model, tok)
    assert record["global_step"] == 8 and record["rows_dropped_too_long"] == 0
    from prm.train import done_summary  # the command's closing line
    assert done_summary(record).startswith(f"prm.train: done: 8 steps on {record['train_rows']} rows, loss ")
    assert done_summary(record).endswith(f"; merged model in {tmp_path / 'full'}")
    assert record["losses"][-1] < 0.5 * record["losses"][0]
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    saved = json.loads((tmp_path / "full" / "train_log.json").read_text())
    assert saved["losses"] == record["losses"] and (tmp_path / "full" / "model.safetensors").exists()


def test_loss_mask_covers_only_the_completion(label_run, tmp_path):
    _, paths = label_run
    model, tok = _tiny(paths)
    trainer = build_trainer(_config(paths, tmp_path / "mask", max_steps=1), model, tok)
    row = pq.read_table(paths["train"]).to_pylist()[0]
    batch = trainer.data_collator([trainer.train_dataset[0]])
    labels, ids = batch["labels"][0], batch["input_ids"][0]
    prompt_len = len(tok.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=True)["input_ids"])
    assert (labels[:prompt_len] == -100).all()                 # nothing of the prompt is learned
    learned = ids[labels != -100]
    assert learned.numel() > 0 and torch.equal(labels[prompt_len:][labels[prompt_len:] != -100], learned)
    text = tok.decode(learned)
    assert f"Response {row['label']}" in text and "Security" not in text and "assistant" not in text.split("Answer")[0]


def test_lora_merges_and_reloads_with_identical_logits(label_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, paths = label_run
    model, tok = _tiny(paths)
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    cfg = _config(paths, tmp_path / "lora", max_steps=3, per_device_train_batch_size=2, use_peft=True, lora_r=4,
                  lora_alpha=8, lora_dropout=0.0)
    trainer = build_trainer(cfg, model, tok)
    assert isinstance(trainer.model, PeftModel)
    trainer.train()
    ids = torch.tensor([tok.apply_chat_template(pq.read_table(paths["test"]).to_pylist()[0]["prompt"],
                                                add_generation_prompt=True, return_dict=True)["input_ids"]])
    peft_model = trainer.model.eval()
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
    out = save_merged(peft_model, tok, tmp_path / "merged")
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names and not any("adapter" in n for n in names)
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        got = reloaded(input_ids=ids).logits
    assert torch.allclose(expected, got, atol=1e-5)
    assert any(not torch.equal(base[k], v) for k, v in reloaded.state_dict().items() if k in base)
    assert AutoTokenizer.from_pretrained(out).chat_template == tok.chat_template


def test_config_yaml_cli_overrides_and_dry_run(label_run, capsys):
    _, paths = label_run
    gpu = "configs/prm/qwen-7b-lora.yaml"
    cfg = PRMTrainConfig.from_yaml(gpu)
    assert (cfg.lora_r, cfg.learning_rate, cfg.bf16, cfg.activation_checkpointing) == (128, 1e-4, True, True)
    assert isinstance(cfg, SFTConfig) and cfg.save_strategy == "epoch" and cfg.max_length == 4096
    data = ["--train-file", str(paths["train"]), "--eval-file", str(paths["test"])]
    assert main(["--config", gpu, "--dry-run", *data]) == 0      # bf16 on a CPU machine: checked at training
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and report["effective_batch_size"] == 256 and report["gradient_accumulation_steps"] == 8
    assert report["processes"] == 8 and report["per_device_train_batch_size"] == 4
    # flags override the file; arithmetic that cannot reach 256 is refused, as are missing files
    assert main(["--config", gpu, "--dry-run", *data, "--per-device-train-batch-size", "3"]) == 2
    assert "not a multiple" in capsys.readouterr().out
    assert main(["--config", gpu, "--dry-run"]) == 2
    assert "does not exist" in capsys.readouterr().out
    assert main(["--config", gpu, "--dry-run", *data, "--no-use-peft", "--num-processes", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "full fine-tune" and report["gradient_accumulation_steps"] == 16
    assert main(["--config", gpu, "--dry-run", *data, "--no-lora", "--name-or-path", "Qwen/Qwen3-8B"]) == 0
    out = capsys.readouterr()                                 # the flags of earlier recipes, with a warning
    assert json.loads(out.out)["mode"] == "full fine-tune" and json.loads(out.out)["model"] == "Qwen/Qwen3-8B"
    assert "--no-lora is deprecated" in out.err and "--name-or-path is deprecated" in out.err
    demo = PRMTrainConfig.from_yaml("configs/prm/cpu-demo.yaml")
    assert demo.model_name_or_path == "embedded" and not demo.bf16 and not demo.validate(check_paths=False)
    for bad in ("configs/prm/qwen-3b-full.yaml",):
        assert not PRMTrainConfig.from_yaml(bad).validate(check_paths=False)


def test_trainer_gets_a_plain_sft_config(tmp_path):
    cfg = PRMTrainConfig.from_yaml("configs/prm/cpu-demo.yaml", {"data": {"eval_file": "e.parquet"},
                                                                 "train": {"output_dir": str(tmp_path)}})
    args = cfg.trainer_args()
    assert type(args) is SFTConfig and args.output_dir == str(tmp_path / "checkpoints")
    assert (args.learning_rate, args.max_steps, args.max_length, args.gradient_accumulation_steps) == (2e-4, 3, 2048, 1)
    assert args.eval_strategy == "epoch" and args.completion_only_loss and args.use_cpu
    assert not args.activation_checkpointing and args.save_only_model and args.save_strategy == "no"
    sections = cfg.as_dict()
    assert sections["model"]["lora_r"] == 8 and sections["data"]["max_length"] == 2048
    assert sections["train"]["lr_scheduler_type"] == "constant"


def test_only_differing_sft_defaults_are_declared_again():
    """PRMTrainConfig re-declares an SFTConfig or ModelConfig field only to carry a default that
    differs from TRL's."""
    from dataclasses import MISSING, fields

    from trl import ModelConfig

    from prm.config import CARRIED_DEFAULTS

    def default(f):
        return f.default_factory() if f.default is MISSING else f.default

    trl = {f.name: default(f) for f in fields(SFTConfig) + fields(ModelConfig)}
    ours = {f.name: default(f) for f in fields(PRMTrainConfig)}
    redeclared = set(PRMTrainConfig.__annotations__) & set(trl)
    assert redeclared == set(CARRIED_DEFAULTS)
    for name, (trl_default, our_default) in CARRIED_DEFAULTS.items():
        assert trl[name] == trl_default and ours[name] == our_default and trl_default != our_default, name


def test_model_fields_are_trls_model_config(tmp_path, capsys):
    """The model section is TRL's ModelConfig: trl.get_peft_config reads the recipe's LoRA, a full
    fine-tune has none, and the keys of earlier recipes load with a warning."""
    from peft import LoraConfig
    from trl import ModelConfig, get_peft_config

    cfg = PRMTrainConfig.from_yaml("configs/prm/qwen-7b-lora.yaml")
    lora = get_peft_config(cfg)
    assert isinstance(cfg, ModelConfig) and isinstance(lora, LoraConfig)
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, lora.target_modules) == (128, 256, 0.05, "all-linear")
    assert lora.task_type == "CAUSAL_LM" and not lora.use_rslora
    assert get_peft_config(PRMTrainConfig.from_yaml("configs/prm/qwen-3b-full.yaml")) is None
    assert get_peft_config(PRMTrainConfig(lora_target_modules=["q_proj"])).target_modules == {"q_proj"}   # no regex
    old = tmp_path / "old.yaml"
    old.write_text("model: {name_or_path: x, lora: false, lora_target_modules: 'q_proj, v_proj'}\n")
    cfg = PRMTrainConfig.from_yaml(old)
    assert (cfg.model_name_or_path, cfg.use_peft, cfg.lora_target_modules) == ("x", False, ["q_proj", "v_proj"])
    assert "'name_or_path' is deprecated" in capsys.readouterr().err
    old.write_text("model: {name_or_path: x, model_name_or_path: y}\n")
    with pytest.raises(ValueError, match="give only 'model_name_or_path'"):
        PRMTrainConfig.from_yaml(old)
    with pytest.raises(ValueError, match="8 bit and 4 bit"):
        PRMTrainConfig(load_in_8bit=True, load_in_4bit=True)


def test_unknown_config_keys_are_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model: {model_name_or_path: x, lora_rank: 8}\n")
    with pytest.raises(ValueError, match="lora_rank"):
        PRMTrainConfig.from_yaml(path)
    path.write_text("model: {model_name_or_path: x}\ndata: {learning_rate: 0.1}\n")      # a train key in data
    with pytest.raises(ValueError, match="learning_rate"):
        PRMTrainConfig.from_yaml(path)
    path.write_text("train: {per_device_batch_size: 4}\n")                          # renamed to TRL's name
    with pytest.raises(ValueError, match="per_device_train_batch_size"):
        PRMTrainConfig.from_yaml(path)


def test_help_is_the_parsers_and_loads_no_torch(capsys):
    """``--help`` is printed from prm/train_help.txt: the real parser's help (regenerate with
    ``python -c "from prm.train import write_help; write_help()"``), shown without importing TRL."""
    import subprocess
    import sys

    from prm.train import HELP_FILE, build_parser

    assert HELP_FILE.read_text() == build_parser().format_help(), "prm/train_help.txt is stale: run write_help()"
    code = ("import sys\nfrom prm.train import main\ntry:\n    main(['--help'])\nexcept SystemExit as e:\n"
            "    print(e.code, 'torch' in sys.modules, 'trl' in sys.modules)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith("usage: python -m prm.train") and p.stdout.splitlines()[-1] == "0 False False"


def test_a_flag_prefix_is_refused_with_a_suggestion(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--config", "configs/prm/cpu-demo.yaml", "--dry-run", "--learning-rat", "1e-3"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "did you mean --learning-rate?" in err and len(err.splitlines()) <= 3


def test_cpu_demo_points_at_the_export_make_run_writes(tmp_path, capsys, monkeypatch):
    """configs/prm/cpu-demo.yaml trains on RUN/export/trl (what `make run` writes); a missing
    export is named with the command that writes it."""
    import yaml

    demo = yaml.safe_load(open("configs/prm/cpu-demo.yaml"))
    assert demo["data"]["train_file"] == "runs/demo/export/trl/train.parquet"
    monkeypatch.chdir(tmp_path)                       # no runs/demo here
    (tmp_path / "configs" / "prm").mkdir(parents=True)
    (tmp_path / "configs" / "prm" / "cpu-demo.yaml").write_text(yaml.safe_dump(demo))
    assert main(["--config", "configs/prm/cpu-demo.yaml", "--dry-run"]) == 2
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert any("runs/demo/export/trl/train.parquet does not exist: write it with "
               "`python -m dataset.export --run runs/demo --format trl`" in p for p in problems), problems
