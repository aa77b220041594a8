"""Served deployments load their flows by module path, and a flow run's process then still
imports the project's packages (a file-path entrypoint put ``flows/`` on sys.path, where
``flows/prm.py`` and ``flows/search.py`` shadowed the ``prm`` and ``search`` packages: the
served ``search-mag`` run failed with "'prm' is not a package")."""

import subprocess
import sys

import pytest

from conftest import ROOT


def test_every_deployment_entrypoint_loads_without_shadowing_packages():
    from flows.serve import deployments

    entrypoints = [d.entrypoint for d in deployments()]
    assert entrypoints and all(":" not in e and e.startswith("flows.") for e in entrypoints)
    code = ("import sys\n"
            "from prefect.flows import load_flow_from_entrypoint\n"
            "for ep in sys.argv[1:]:\n"
            "    flow = load_flow_from_entrypoint(ep)\n"
            "    assert not [p for p in sys.path if p.rstrip('/').endswith('flows')], (ep, sys.path)\n"
            "import prm.config, search.mag, llm.client, data.ingest\n"
            "print(flow.name, prm.config.__name__, search.mag.__name__)\n")
    # Every module-path entrypoint in one process, each checked to leave flows/ off sys.path (what
    # let flows/prm.py shadow the prm package), and the file-path form in another: it shows what
    # the module path avoids.
    loaded = subprocess.run([sys.executable, "-c", code, *entrypoints], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    by_path = subprocess.run([sys.executable, "-c", code, "flows/prm.py:train_prm_flow"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert by_path.returncode != 0 and "AssertionError: ('flows/prm.py:train_prm_flow'" in by_path.stderr


def test_every_deployment_parameter_validates_against_its_flow():
    """A deployment's parameters validate against its flow: a stage config given as a dict
    (``{"mine": {"sample_size": 8}}``) becomes that dataclass, and a misspelt or renamed key
    (``budget``) fails here rather than in the served run."""
    from dataclasses import is_dataclass

    from prefect.exceptions import ParameterTypeError

    from flows.propose_negatives import propose_negatives_flow
    from flows.serve import default_parameters

    validated = {f.name: f.validate_parameters(params) for f, params in default_parameters()}
    assert len(validated) == len(default_parameters())
    assert is_dataclass(validated["synthesize"]["mine"]) and validated["synthesize"]["mine"].sample_size == 8
    assert validated["synthesize"]["verify"].k == 2
    assert validated["propose-negatives"]["config"].sample_size == 200
    with pytest.raises(ParameterTypeError, match="budget"):
        propose_negatives_flow.validate_parameters({"run": "runs/demo", "config": {"budget": 200}})
