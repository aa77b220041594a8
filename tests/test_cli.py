"""Every command behaves the same at the command line: ``--help`` answers at once (no torch, no
transformers imported), a mistyped flag is never taken for a longer one (no prefix matching) and
gets a short error naming the closest flags, and ``python -m llm.client`` runs without runpy's
warning."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from cli.config import make_parser
from conftest import ROOT
from test_cli_config import PACKAGES, entry_points


def test_every_entry_point_answers_help_without_torch():
    mods = entry_points()
    assert {"prm.train", "prm.evaluate", "flows.serve", "flows.search", "teacher.verify", "search.mag"} <= set(mods)
    code = (
        "import contextlib, io, runpy, sys\n"
        "bad = []\n"
        "for mod in sys.argv[1:]:\n"
        "    sys.argv = [mod, '--help']\n"
        "    out = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(out):\n"
        "            runpy.run_module(mod, run_name='__main__', alter_sys=True)\n"
        "        bad.append(f'{mod}: no exit')\n"
        "    except SystemExit as e:\n"
        "        if e.code not in (0, None) or 'usage:' not in out.getvalue():\n"
        "            bad.append(f'{mod}: exit {e.code}')\n"
        "    heavy = [m for m in ('torch', 'transformers', 'trl') if m in sys.modules]\n"
        "    if heavy:\n"
        "        bad.append(f'{mod}: imported {heavy}')\n"
        "        break\n"
        "print(bad)\n")
    p = subprocess.run([sys.executable, "-c", code, *mods], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout[-3000:]


def test_help_names_the_command_as_typed():
    p = subprocess.run([sys.executable, "-m", "flows.search", "mag", "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("usage: python -m flows.search mag "), p.stdout[:200]


def test_no_parser_is_built_without_the_shared_helper():
    """Every command's parser comes from ``cli.config.make_parser`` (no prefix matching, short errors)."""
    offenders = []
    for pkg in (*PACKAGES, "bench"):
        for path in (ROOT / pkg).rglob("*.py"):
            if path == ROOT / "data" / "config.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "ArgumentParser":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def _parser():
    ap = make_parser("python -m demo", "A demo command.\n\nMore text.")
    ap.add_argument("--learning-rate", type=float)
    ap.add_argument("--max-steps", type=int)
    for i in range(40):                       # a usage far longer than a screen's few lines
        ap.add_argument(f"--option-number-{i}", metavar="VALUE")
    return ap


def test_a_prefix_is_not_taken_for_a_flag_and_the_error_is_short(capsys):
    with pytest.raises(SystemExit) as done:
        _parser().parse_args(["--learning-rat", "0.1"])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert "unrecognized arguments: --learning-rat 0.1" in err and "did you mean --learning-rate?" in err
    assert len(err.splitlines()) <= 3 and "--option-number-7" not in err        # no usage dump
    with pytest.raises(SystemExit):
        _parser().parse_args(["--max-step=3"])
    assert "--max-step: did you mean --max-steps?" in capsys.readouterr().err
    assert _parser().parse_args(["--max-steps", "3"]).max_steps == 3
    assert _parser().description == "A demo command."


def test_a_real_command_answers_a_typo_in_a_line_or_two():
    p = subprocess.run([sys.executable, "-m", "teacher.verify", "--run", "R", "--temprature", "0.5"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "did you mean --temperature?" in p.stderr
    assert len(p.stderr.splitlines()) <= 4, p.stderr


def test_llm_client_runs_as_a_module_without_runpy_warning():
    p = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "llm.client", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "RuntimeWarning" not in p.stderr, p.stderr[-2000:]


def test_prm_evaluate_answers_a_missing_benchmark_in_one_line(tmp_path, capsys):
    from prm.evaluate import main

    assert main(["--bench", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: benchmark {tmp_path / 'nope.parquet'} not found") and err.count("\n") == 1
