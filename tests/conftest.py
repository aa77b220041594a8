"""Shared fixtures: the real traces in ../shared/data (skipped with a message when absent)."""

from __future__ import annotations

import atexit
import gzip
import os
import pickle
import random
import shutil
import sys
import tempfile
import types
from pathlib import Path

import pytest

# Each pytest process (each xdist worker) gets its own Prefect home before anything imports
# Prefect: flow results, caches and an ephemeral server's SQLite database are then neither shared
# between workers running at once nor left from an earlier session (the Makefile's .cache/prefect
# is for `make run`).
_PREFECT_HOME = tempfile.mkdtemp(prefix="surfprm-prefect-")
os.environ["PREFECT_HOME"] = _PREFECT_HOME
atexit.register(shutil.rmtree, _PREFECT_HOME, ignore_errors=True)

# xdist workers share the cores: each worker's torch (OpenMP) threads get its share, set before
# torch is imported. Two workers on this 2-core machine with torch's default of 2 threads each spin
# against each other: two SmolLM2 generations side by side took 167 s with 2 threads each, 40 s with
# 1. An OMP_NUM_THREADS already set is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))

# Fixtures from helper modules in tests/ (not `from ... import fixture` in each test module).
pytest_plugins = ["fake_openai"]

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
BUNDLED = ROOT / "data" / "bundled"
EMBEDDED_MODEL = ROOT / ".cache" / "models" / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED / "agentlab_workarena").is_dir():
        pytest.skip(f"real traces not found at {SHARED} (the shared/ folder beside the project)")
    return SHARED


@pytest.fixture(scope="session")
def agentlab_run(shared_data, tmp_path_factory) -> Path:
    """All 53 shared AgentLab runs ingested once per session."""
    from data.ingest import ingest

    out = tmp_path_factory.mktemp("agentlab_run")
    ingest("agentlab", [shared_data / "agentlab_workarena"], out)
    return out


def write_step_pickle(path: Path, state: dict, module: str = "browsergym.experiments.loop",
                      name: str = "StepInfo") -> None:
    """Pickle a StepInfo-like object the way AgentLab does, without BrowserGym installed."""
    cls = type(name, (), {"__module__": module, "__qualname__": name})
    fake = types.ModuleType(module)
    setattr(fake, name, cls)
    saved = sys.modules.get(module)
    sys.modules[module] = fake
    try:
        obj = cls()
        obj.__dict__.update(state)
        with gzip.open(path, "wb") as f:
            pickle.dump(obj, f)
    finally:
        if saved is None:
            del sys.modules[module]
        else:
            sys.modules[module] = saved


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API for the whole session (starting one costs 5-25 s here)."""
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ["DO_NOT_TRACK"] = "1"
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (``make test``: ``--dist loadscope --no-loadscope-reorder``), hand out the
    modules that hold ``slow`` tests first: the scheduler sends whole modules in the order of their
    first test, so a module-scoped fixture is built on one worker only, and a long browser or model
    test does not start last and keep one worker busy alone while the other idles. (Not
    ``--dist loadgroup``: with pytest 9.2 it silently stops grouping, pytest-xdist issue #1386.)"""
    seed = config.getoption("shuffle_seed")
    if seed is not None:                        # the same shuffle on every worker: xdist checks they agree
        random.Random(seed).shuffle(items)
    if hasattr(config, "workerinput"):          # each worker sorts the same collection the same way
        items.sort(key=lambda item: "slow" not in item.keywords)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shuffle-seed", type=int, default=None,
                     help="run the tests in an order shuffled with this seed: a test that reads another "
                          "test's files, server records or leftovers fails in some order")
