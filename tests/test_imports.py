"""The import contracts (pyproject.toml [tool.importlinter], run by `make test` as lint-imports)
count imports inside functions, and cover every package."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _contracts() -> tuple[list[str], list[dict]]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return cfg["root_packages"], cfg["contracts"]


def test_every_package_is_in_the_layers_and_the_acyclic_contract():
    roots, contracts = _contracts()
    layers = next(c for c in contracts if c["type"] == "layers" and "containers" not in c)
    acyclic = next(c for c in contracts if c["type"] == "acyclic_siblings")
    assert sorted(layers["layers"]) == sorted(roots)
    assert sorted(acyclic["ancestors"]) == sorted(roots)
    assert any(c.get("containers") == ["llm"] for c in contracts)


def _lint(tmp_path: Path, lazy: str) -> subprocess.CompletedProcess:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n\nX = 1\n")
    (pkg / "b.py").write_text(f"def f():\n    {lazy}\n    return X\n")
    (tmp_path / ".importlinter").write_text("[importlinter]\nroot_package = pkg\n\n"
                                            "[importlinter:contract:acyclic]\nname = acyclic\n"
                                            "type = acyclic_siblings\nancestors = pkg\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_a_cycle_through_an_import_inside_a_function_breaks_the_contract(tmp_path):
    broken = _lint(tmp_path, "from pkg.a import X")
    assert broken.returncode == 1, broken.stdout
    assert "BROKEN" in broken.stdout


def test_the_same_package_without_the_lazy_import_keeps_it(tmp_path):
    kept = _lint(tmp_path, "X = 2")
    assert kept.returncode == 0, kept.stdout + kept.stderr
