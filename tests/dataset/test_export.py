"""Exports of verified preferences (TRL, WebPRMBench), the dataset card and the report: files load
with ``datasets`` offline and train a tiny random model for one step with TRL's SFTTrainer."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from dataset.card import write_card
from dataset.export import TRL_SCHEMA, WEBPRMBENCH_SCHEMA, export, split_tasks
from dataset.report import write_report
from scripted_teacher import ScriptedTeacher, llm_config, make_run, start
from teacher.verify import VerifyConfig, verify


@pytest.fixture(scope="module")
def verified_run(tmp_path_factory):
    """A small run verified by the scripted teacher: 10 pairs over several tasks, two discarded."""
    root = tmp_path_factory.mktemp("export_run")
    pairs = make_run(root, n_pairs=10)
    teacher = ScriptedTeacher(pairs)
    teacher.script = {pairs[0]["pair_id"]: ["disagree", "agree"], pairs[1]["pair_id"]: ["disagree"] * 5,
                      pairs[2]["pair_id"]: ["unparsed"] * 5}
    server = start(teacher)
    try:
        # a small AXTree budget keeps the prompts short enough for the tiny model below
        verify(root, VerifyConfig(axtree_chars=800), llm_config(server, root / ".llm_cache"), progress=False)
    finally:
        server.shutdown()
    return root


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``markdown`` (header rows too, not the rules)."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in markdown.splitlines()
            if line.startswith("|") and not set(line.strip()) <= set("|:- ")]


def test_split_by_task_is_seeded_and_disjoint():
    tasks = [f"t{i}" for i in range(10)] * 3
    test = split_tasks(tasks, seed=1)
    assert len(test) == 2 and test == split_tasks(reversed(tasks), seed=1)
    assert split_tasks(tasks, seed=2) != test or split_tasks(tasks, seed=3) != test
    assert split_tasks(["a", "b"], test_fraction=0.01) and len(split_tasks(["a", "b"], test_fraction=0.99)) == 1
    assert split_tasks(["only"]) == set()


def test_exports_card_and_report(verified_run, tmp_path):
    import datasets

    root = verified_run
    paths = export(root, "trl") + export(root, "webprmbench")
    assert (root / "README.md") in paths and (root / "report" / "README.md") in paths
    train, test = root / "export/trl/train.parquet", root / "export/trl/test.parquet"
    assert pq.read_schema(train).equals(TRL_SCHEMA)
    kept = pq.read_table(root / "preferences.parquet").to_pylist()
    tr, te = pq.read_table(train).to_pylist(), pq.read_table(test).to_pylist()
    assert len(tr) + len(te) == len(kept) == 8 and tr and te
    assert not {r["task_id"] for r in tr} & {r["task_id"] for r in te}
    row = tr[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and row["completion"][0]["role"] == "assistant"
    assert row["completion"][0]["content"].rstrip().endswith(f"<Answer>Response {row['label']}</Answer>")

    bench = pq.read_table(root / "export/webprmbench.parquet")
    assert bench.schema.equals(WEBPRMBENCH_SCHEMA)
    b = bench.to_pylist()
    assert {r["pair_id"] for r in b} == {r["pair_id"] for r in te}      # the held-out tasks
    assert all(r["expected"] in (1, 2) and r["source_name"] == "surfprm/servicenow" for r in b)
    assert [(r["state_idx"], r["pair_idx"]) for r in b] == sorted({(r["state_idx"], r["pair_idx"]) for r in b})

    cache = str(tmp_path / "hf")
    ds = datasets.load_dataset("parquet", data_files={"train": str(train), "test": str(test)}, cache_dir=cache)
    assert ds["train"].num_rows == len(tr) and ds["train"][0]["prompt"][0]["role"] == "system"
    wb = datasets.load_dataset("parquet", data_files=str(root / "export/webprmbench.parquet"), cache_dir=cache)
    assert wb["train"].column_names[:5] == ["state_idx", "pair_idx", "expected", "prompt", "source_name"]

    card = (root / "README.md").read_text()
    head = yaml.safe_load(card.split("---\n")[1])
    assert head["license"] == "apache-2.0" and "text-generation" in head["task_categories"]
    configs = {c["config_name"]: c for c in head["configs"]}
    assert set(configs) == {"preferences", "trl", "webprmbench", "discarded"}
    assert {f["split"]: f["path"] for f in configs["trl"]["data_files"]} == {
        "train": "export/trl/train.parquet", "test": "export/trl/test.parquet"}
    features = {i["config_name"]: i["features"] for i in head["dataset_info"]}
    assert {"name": "label", "dtype": "int8"} in features["preferences"]
    assert "`teacher.verify` (sampled pairs verified by the teacher): in 10, out 8" in card
    for cfg in head["configs"]:       # every file the card names loads as it says
        files = {f["split"]: str(root / f["path"]) for f in cfg["data_files"]}
        assert datasets.load_dataset("parquet", data_files=files, cache_dir=cache)

    report = (root / "report" / "README.md").read_text()
    for name in ("distribution.png", "gmcp.png", "outcome_by_rule.png", "attempts.png"):
        png = root / "report" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"({name})" in report
    rows = table_rows(report)
    assert ["WebArbiter's data (paper)", "24.19%", "", ""] in rows
    assert ["surfPRM-data (paper)", "74.60%", "", ""] in rows
    assert ["calls per pair", "1.90", "1.12"] in rows       # (2 + 5 + 5 + 7 * 1) calls for 10 pairs
    assert ["first-attempt passes", "7", ""] in rows and ["discards", "2", "179"] in rows
    stats = json.loads((root / "stats.json").read_text())
    assert stats["data.export.trl"]["train"] + stats["data.export.trl"]["test"] == 8

    # the same run gives the same card, report and export bytes
    before = {p: p.read_bytes() for p in [train, test, root / "README.md", root / "report/README.md",
                                           root / "report/gmcp.png"]}
    write_report(root), write_card(root), export(root, "trl", card=False)
    assert {p: p.read_bytes() for p in before} == before


def test_preferences_are_read_with_the_teachers_pinned_schema(verified_run, tmp_path, capsys):
    """A preferences.parquet its stage recorded, but of another schema than teacher.schema pins (an
    older teacher, a hand edit): the export and the report name the file, every column that is off
    and the command that rewrites it, in one line with exit code 2; no export is written."""
    import shutil

    import pyarrow as pa

    from data.rundir import RunDirError, fingerprint
    from dataset.export import main
    from dataset.report import collect

    run = tmp_path / "run"
    shutil.copytree(verified_run, run, ignore=shutil.ignore_patterns("export", "report", "README.md"))
    prefs = pq.read_table(run / "preferences.parquet")
    step_idx = prefs.schema.get_field_index("step_idx")
    prefs = prefs.drop_columns(["label"]).set_column(step_idx, "step_idx", prefs["step_idx"].cast(pa.int64()))
    pq.write_table(prefs, run / "preferences.parquet")
    stats = json.loads((run / "stats.json").read_text())     # as its stage wrote it: not a stale input
    stats["teacher.verify"]["fingerprints"]["outputs"]["preferences.parquet"] = fingerprint(run / "preferences.parquet")
    (run / "stats.json").write_text(json.dumps(stats))

    assert main(["--run", str(run), "--format", "trl"]) == 2
    err = capsys.readouterr().err
    assert f"error: cannot read {run / 'preferences.parquet'}: column step_idx is int64, not int32; no column label, " \
           "against the schema teacher.verify pins (rewrite it with `python -m teacher.verify`)" in err
    assert "Traceback" not in err and not (run / "export").exists()
    with pytest.raises(RunDirError, match="no column label"):
        collect(run)


@pytest.mark.parametrize("module, flags", [("dataset.export", ["--format", "trl"]), ("dataset.card", []),
                                           ("dataset.report", [])])
def test_commands_do_not_make_a_run_directory_where_a_typo_points(module, flags, tmp_path, capsys):
    import importlib

    typo = tmp_path / "rnu"
    with pytest.raises(SystemExit) as done:
        importlib.import_module(module).main(["--run", str(typo), *flags])
    assert done.value.code == 2 and f"--run {typo}: no such run directory" in capsys.readouterr().err
    assert not typo.exists()


def test_data_export_shim_runs_dataset_export(verified_run, tmp_path):
    """``python -m data.export`` (the old command) is ``python -m dataset.export`` with a deprecation
    note on stderr: the same help, and the same files and lines from a real export."""
    import shutil

    from hostile_util import cli, no_traceback

    old, new = cli("data.export", "--help"), cli("dataset.export", "--help")
    assert old.returncode == new.returncode == 0 and old.stdout == new.stdout and "--format" in new.stdout
    assert old.stderr == ("warning: python -m data.export is deprecated and will be removed; "
                          "use python -m dataset.export (same flags)\n") and not new.stderr

    done = {}
    for module in ("data.export", "dataset.export"):
        run = tmp_path / module
        shutil.copytree(verified_run, run, ignore=shutil.ignore_patterns("export", "report", "README.md"))
        proc = cli(module, "--run", str(run), "--format", "webprmbench", "--no-card")
        no_traceback(proc)
        assert proc.returncode == 0, proc.stderr
        done[module] = (proc.stdout.replace(str(run), "RUN"), (run / "export/webprmbench.parquet").read_bytes())
    assert done["data.export"] == done["dataset.export"] and "wrote RUN/export/webprmbench.parquet" in \
        done["dataset.export"][0]


def test_trl_export_trains_a_tiny_model_one_step(verified_run, tmp_path):
    """The TRL export feeds SFTTrainer as it is: a random 2-layer Llama and a word-level tokenizer
    trained here (nothing downloaded); one optimizer step changes the weights."""
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    from tiny_lm import tiny_lm

    root = verified_run
    export(root, "trl", card=False)
    ds = datasets.load_dataset("parquet", data_files=str(root / "export/trl/train.parquet"),
                               cache_dir=str(tmp_path / "hf"))["train"]
    model, tokenizer = tiny_lm(m["content"] for r in ds for m in r["prompt"] + r["completion"])
    before = [p.detach().clone() for p in model.parameters()]
    args = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2,
                     learning_rate=1e-2, max_length=4096, bf16=False, report_to="none", save_strategy="no",
                     logging_steps=1, use_cpu=True, dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    out = trainer.train()
    assert out.global_step == 1 and torch.isfinite(torch.tensor(out.training_loss))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def _snippet(card: str) -> str:
    """The card's Python snippet (the first python block of its "Use" section)."""
    return card.split("## Use", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def _snippet_constants(card: str) -> dict:
    """The snippet's module-level constants (``MAX_LENGTH = 5696``), as literals."""
    import ast

    return {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(_snippet(card)).body
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id.isupper()}


@pytest.mark.slow
def test_card_snippet_trains_with_trl_and_keeps_every_row(verified_run, tmp_path, capsys):
    """The card's MAX_LENGTH keeps every row whole in plain TRL: SFTTrainer drops none, and its
    sequences are as long as the export counted them. Counted with the embedded SmolLM2 tokenizer;
    the model is a tiny random one over that vocabulary."""
    import datasets
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from conftest import EMBEDDED_MODEL
    from dataset.export import main, token_lengths
    from tiny_lm import tiny_model

    if not (EMBEDDED_MODEL / "tokenizer_config.json").exists():
        pytest.skip("the embedded model is prepared by `make setup`")
    root = verified_run
    assert main(["--run", str(root), "--format", "trl", "--tokenizer", str(EMBEDDED_MODEL), "--max-length", "64"]) == 0
    tokens = json.loads((root / "stats.json").read_text())["data.export.trl"]["tokens"]
    assert tokens["tokenizer"] == EMBEDDED_MODEL.name and tokens["rows"] == 8
    assert tokens["over_max_length"]["rows"] == 8 and "warning: 8 of 8 rows are longer than --max-length 64" in \
        capsys.readouterr().err
    card = (root / "README.md").read_text()
    max_length = _snippet_constants(card)["MAX_LENGTH"]
    assert max_length == tokens["max_length"] >= tokens["total"]["max"]
    assert [f"{tokens['total'][k]:,}" for k in ("min", "median", "p95", "max")] == \
        next(r[1:] for r in table_rows(card) if r[0] == "total")

    ds = datasets.load_dataset("parquet", data_files=str(root / "export/trl/train.parquet"),
                               cache_dir=str(tmp_path / "hf"))["train"]
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    test_only = dict(max_steps=1, per_device_train_batch_size=2, bf16=False, report_to="none", save_strategy="no",
                     use_cpu=True, dataloader_num_workers=0)
    trainer = SFTTrainer(model=tiny_model(tokenizer), train_dataset=ds, processing_class=tokenizer,
                         args=SFTConfig(output_dir=str(tmp_path / "sft"), max_length=max_length, **test_only))
    assert len(trainer.train_dataset) == ds.num_rows                # every row kept
    counted = sorted(sum(token_lengths(tokenizer, r["prompt"], r["completion"])) for r in ds)
    assert sorted(len(ids) for ids in trainer.train_dataset["input_ids"]) == counted   # none truncated
    assert trainer.train().global_step == 1

    # the counts are TRL's: at the shortest prompt's length, SFTTrainer keeps no row at all
    short = SFTConfig(output_dir=str(tmp_path / "short"), max_length=tokens["prompt"]["min"], **test_only)
    assert len(SFTTrainer(model=tiny_model(tokenizer), train_dataset=ds, processing_class=tokenizer,
                          args=short).train_dataset) == 0


@pytest.mark.slow       # TRL's SFTTrainer, one step
def test_card_snippet_runs_as_written(verified_run, tmp_path, monkeypatch):
    """The card's snippet itself, executed for one step (``MAX_STEPS=1``, which it reads): only its
    DATA and MODEL values are replaced (this run's folder; a random 2-layer Llama with the embedded
    SmolLM2's tokenizer), on this machine's device (a CPU here: no bf16, batch 1)."""
    import re

    from transformers import AutoTokenizer

    from conftest import EMBEDDED_MODEL
    from tiny_lm import tiny_model

    if not (EMBEDDED_MODEL / "tokenizer_config.json").exists():
        pytest.skip("the embedded model is prepared by `make setup`")
    root = verified_run
    export(root, "trl")                      # the card, its token lengths counted with the embedded tokenizer
    code = _snippet((root / "README.md").read_text())
    assert "trainer.train()" in code and _snippet_constants((root / "README.md").read_text())["MAX_LENGTH"]
    model_dir = tmp_path / "model"
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    tiny_model(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    code, n = re.subn(r'^(DATA|MODEL) = "[^"]*"', lambda m: f"{m[1]} = {str(root if m[1] == 'DATA' else model_dir)!r}",
                      code, flags=re.M)
    assert n == 2
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MAX_STEPS", "1")
    scope: dict = {}
    exec(compile(code, "card snippet", "exec"), scope)
    assert scope["trainer"].state.global_step == 1 and (tmp_path / "sft-out" / "config.json").exists()
    assert scope["args"].bf16 is False and scope["args"].per_device_train_batch_size == 1    # a CPU


def test_card_without_a_tokenizer_truncates_nothing(verified_run, capsys, monkeypatch, tmp_path):
    """No tokenizer at hand (an endpoint teacher and no embedded model): the export says so, and the
    card's snippet passes MAX_LENGTH = None (TRL then truncates nothing)."""
    import llm.embedded

    monkeypatch.setattr(llm.embedded, "default_model_dir", lambda: tmp_path / "no-model")
    root = verified_run
    export(root, "trl")
    assert "pass --tokenizer NAME" in capsys.readouterr().err
    assert json.loads((root / "stats.json").read_text())["data.export.trl"]["tokens"] is None
    assert _snippet_constants((root / "README.md").read_text())["MAX_LENGTH"] is None


def test_token_lengths_fall_back_to_the_embedded_tokenizer(verified_run):
    """An endpoint teacher (the scripted one here) and no --tokenizer: counted with the embedded
    model's tokenizer, so the card always has a MAX_LENGTH."""
    from conftest import EMBEDDED_MODEL

    if not (EMBEDDED_MODEL / "tokenizer_config.json").exists():
        pytest.skip("the embedded model is prepared by `make setup`")
    export(verified_run, "trl")
    tokens = json.loads((verified_run / "stats.json").read_text())["data.export.trl"]["tokens"]
    assert tokens["tokenizer"] == EMBEDDED_MODEL.name and tokens["rows"] == 8
    assert _snippet_constants((verified_run / "README.md").read_text())["MAX_LENGTH"] == tokens["max_length"]


def test_report_shows_an_example_timings_and_what_the_teacher_means(verified_run):
    root = verified_run
    report = write_report(root).read_text()
    kept = min(pq.read_table(root / "preferences.parquet").to_pylist(), key=lambda r: r["pair_id"])
    example = report.split("## An example pair", 1)[1]
    assert f"`{kept['pair_id']}` (kept; rule `{kept['rule']}`" in example and kept["intent"] in example
    assert kept["judgment"][:200] in example and "demonstrated (better)" in example
    seconds = json.loads((root / "stats.json").read_text())["teacher.verify"]["seconds"]
    assert ["`teacher.verify`", f"{seconds:.1f}"] in table_rows(report.split("## Stage timings", 1)[1])
    assert "answered through an endpoint" in report.split("## What the teacher's figures mean", 1)[1]


def test_report_plots_run_to_k_and_show_the_sample_beside_the_pool(verified_run, tmp_path):
    """With K=2 the attempts table and plot stop at 2; the sample and kept bars get panels of their
    own, scaled to them, not to the pool."""
    import pyarrow as pa

    from dataset.report import collect, distribution_figure, render_markdown

    run = tmp_path / "k2"
    run.mkdir()
    for name in ("candidates.parquet", "trajectories.parquet"):
        (run / name).write_bytes((verified_run / name).read_bytes())
    for name in ("preferences.parquet", "discarded.parquet"):        # the pairs decided within 2 attempts
        t = pq.read_table(verified_run / name)
        pq.write_table(t.filter(pa.array([a <= 2 for a in t["attempts"].to_pylist()])), run / name)
    stats = json.loads((verified_run / "stats.json").read_text())
    stats["teacher.verify"]["config"]["k"] = 2
    (run / "stats.json").write_text(json.dumps(stats))
    r = collect(run)
    assert r["k"] == 2 and list(r["cost"]["passes_per_retry"]) == [2]
    attempts = render_markdown(r).split("## Attempts", 1)[1].split("##", 1)[0]
    assert [r[0] for r in table_rows(attempts)] == ["attempts", "1", "2"]
    r["dist"]["pool"]["rule"]["structurally_near"] = 500          # a pool of hundreds beside a sample of a few
    fig = distribution_figure(r)
    pool_rule, sample_rule = fig.axes[0], fig.axes[2]            # each rule panel is followed by its axis panel
    assert [t.get_text() for t in pool_rule.get_legend().get_texts()] == ["pool"]
    assert [t.get_text() for t in sample_rule.get_legend().get_texts()] == ["sample", "kept"]
    assert sample_rule.get_ylim()[1] < 50 < pool_rule.get_ylim()[1]


def test_batched_token_lengths_equal_one_conversation_at_a_time(monkeypatch):
    """The export counts tokens TOKENIZE_BATCH conversations per call; each count is what
    apply_chat_template gives the row alone."""
    from transformers import AutoTokenizer

    import dataset.export as export
    from conftest import EMBEDDED_MODEL

    if not (EMBEDDED_MODEL / "tokenizer_config.json").exists():
        pytest.skip("the embedded model is prepared by `make setup`")
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED_MODEL)
    rows = [([{"role": "system", "content": "Judge."}, {"role": "user", "content": "page " * n + "<|im_end|> é"}],
             [{"role": "assistant", "content": "<Answer>Response 1</Answer>" + " why" * (n % 3)}]) for n in range(5)]

    def alone(prompt, completion):
        p = tokenizer.apply_chat_template(prompt, tokenize=True, return_dict=True,
                                          add_generation_prompt=True)["input_ids"]
        full = tokenizer.apply_chat_template(prompt + completion, tokenize=True, return_dict=True)["input_ids"]
        shared = next((i for i, (a, b) in enumerate(zip(p, full)) if a != b), min(len(p), len(full)))
        return shared, len(full) - shared

    monkeypatch.setattr(export, "TOKENIZE_BATCH", 2)
    assert export.token_lengths_many(tokenizer, rows) == [alone(p, c) for p, c in rows]
    assert len({n for n, _ in export.token_lengths_many(tokenizer, rows)}) == 5
