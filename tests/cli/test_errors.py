"""cli.errors: every command's bad-input tail is one line on stderr and exit code 2."""

import subprocess
import sys

from cli.errors import error_exit, error_line


def test_a_message_over_several_lines_becomes_one(capsys):
    assert error_exit(FileNotFoundError("no such run\n  run `python -m data.ingest` first\n")) == 2
    err = capsys.readouterr().err
    assert err == "error: no such run; run `python -m data.ingest` first\n"


def test_the_prefix_names_the_command_and_an_empty_message_names_the_error():
    assert error_line(ValueError("bad --seed"), "search.miniwob") == "search.miniwob: bad --seed"
    assert error_line(ValueError()) == "error: ValueError"


def test_a_stage_cli_ends_a_missing_input_with_the_tail(tmp_path):
    """Through a real command: a run directory without trajectories is one line, exit 2."""
    done = subprocess.run([sys.executable, "-m", "graph.build", "--run", str(tmp_path / "none")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
