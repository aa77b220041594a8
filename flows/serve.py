"""Serve the project's Prefect deployments.

    python -m flows.serve

With a Prefect server running (``prefect server start --host 127.0.0.1 --port 4200`` and
``PREFECT_API_URL=http://127.0.0.1:4200/api``), this process serves the deployments below; run
one with e.g. ``prefect deployment run 'build-graphs/default' --param run=runs/demo --watch``
(also ``propose-negatives/default``, ``verify-pairs/default``, ``synthesize/default``,
``train-prm/default``, ``evaluate-prm/default``, ``search-webarena/default``,
``search-miniwob/default``, ``search-mag/default``). The whole job from one pipeline file, as
``python -m flows.synthesize --config``: ``prefect deployment run 'synthesize/default' --param
config=configs/pipeline.yaml --watch`` (the file's settings fill what the deployment leaves unset).
Set ``PREFECT_SERVER_ANALYTICS_ENABLED=false``
and ``DO_NOT_TRACK=1`` (as the Makefile does) where the server and this process run: offline, the
server's telemetry otherwise logs ``Failed to send telemetry`` as an ERROR with every flow run.
"""

from __future__ import annotations

import sys

from prefect import serve
from prefect.types.entrypoint import EntrypointType

from cli.config import make_parser
from flows.build_graphs import build_graphs_flow
from flows.prm import evaluate_prm_flow, train_prm_flow
from flows.propose_negatives import propose_negatives_flow
from flows.search import search_mag_flow, search_miniwob_flow, search_webarena_flow
from flows.synthesize import synthesize_flow, verify_pairs_flow

# Deployments load their flow by module path (``flows.prm.train_prm_flow``): a file-path entrypoint
# puts ``flows/`` on sys.path, where ``flows/prm.py`` and ``flows/search.py`` would shadow the
# ``prm`` and ``search`` packages in the flow run.
MODULE = EntrypointType.MODULE_PATH


def default_parameters() -> list:
    """(flow, its default deployment's parameters) for every flow this project serves; a stage
    config is given as a dict of its fields (``{"sample_size": 8}``), which Prefect validates into
    the flow's dataclass."""
    return [
        (build_graphs_flow, {"run": "runs/demo"}),
        (propose_negatives_flow, {"run": "runs/demo", "config": {"sample_size": 200}}),
        (verify_pairs_flow, {"run": "runs/demo"}),
        (synthesize_flow, {"run": "runs/demo", "mine": {"sample_size": 8}, "verify": {"k": 2}}),
        (train_prm_flow, {"config": "configs/prm/cpu-demo.yaml"}),
        (evaluate_prm_flow, {"bench": "runs/demo/export/trl/test.parquet", "out": "runs/demo/prm/eval-trained.json",
                             "model": "runs/demo/prm/cpu-demo", "max_tokens": 24}),
        # Fails fast with the missing-variable message until the WA_* site URLs are set.
        (search_webarena_flow, {"config": {"prm": "none", "policy": "embedded", "sites": ["shopping"],
                                           "out": "runs/webarena/baseline"}}),
        # MiniWoB++ offline with the embedded model as policy and PRM, two episodes at a time on a
        # local Dask cluster; tasks 'axtree10' and seeds '0-4' for the benchmark's subset.
        (search_miniwob_flow, {"config": {"prm": "embedded", "policy": "embedded",
                                          "tasks": ["click-test", "click-button"], "seeds": "0-1",
                                          "n": 3, "max_steps": 4, "workers": 2, "out": "runs/miniwob/flow",
                                          "policy_llm": {"max_tokens": 80}, "prm_llm": {"max_tokens": 48}}}),
        # The built-in demo shop with the embedded model (offline); demo=false and task_ids for WebArena.
        (search_mag_flow, {"config": {"prm": "embedded", "policy": "embedded", "demo": True, "n": 3, "max_steps": 4,
                                      "out": "runs/mag-demo/flow", "policy_llm": {"max_tokens": 80},
                                      "prm_llm": {"max_tokens": 48}}}),
    ]


def deployments():
    """Every deployment this project serves (name 'default' each)."""
    return [f.to_deployment(name="default", entrypoint_type=MODULE, parameters=params)
            for f, params in default_parameters()]


def build_parser():
    """One flag, written by hand."""
    ap = make_parser("python -m flows.serve", __doc__)
    ap.add_argument("--list", action="store_true", help="print the deployments and their default parameters, then exit")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for d in deployments():
            print(f"{d.flow_name}/{d.name}  {d.entrypoint}  {d.parameters}")
        return 0
    serve(*deployments())
    return 0


if __name__ == "__main__":
    sys.exit(main())
