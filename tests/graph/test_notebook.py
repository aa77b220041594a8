"""notebooks/explore_graphs.ipynb is committed with its outputs, rendered from the bundled sample,
and they are current: a fresh run on the bundled sample gives the same text outputs and a figure
where the committed notebook has one.

After a change that moves them (graph building, the notebook itself), render them again with
``.venv/bin/python tests/graph/test_notebook.py --write`` and commit the notebook.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "explore_graphs.ipynb"


def render(run_dir: Path):
    """The notebook executed top to bottom on the bundled sample, built in ``run_dir``."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {"SURFPRM_RUN": str(run_dir), "MPLBACKEND": "Agg"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return nb


def outputs(nb) -> list[list[tuple]]:
    """Each code cell's outputs as comparable text: streams, results, and 'image' for a figure
    (its PNG bytes depend on the matplotlib build, its presence does not)."""
    cells = []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        out = []
        for o in cell.get("outputs", []):
            if o["output_type"] == "stream":
                out.append((o["name"], o["text"]))
            elif o["output_type"] == "error":
                out.append(("error", o["ename"], o["evalue"]))
            else:
                data = o.get("data", {})
                out.append(("image",) if "image/png" in data else ("text", data.get("text/plain", "")))
        cells.append(out)
    return cells


@pytest.mark.slow
def test_committed_outputs_are_current(tmp_path):
    import nbformat

    committed = nbformat.read(NOTEBOOK, as_version=4)
    fresh = render(tmp_path / "run")
    assert (tmp_path / "run" / "graphs" / "manifest.json").exists()
    got, want = outputs(fresh), outputs(committed)
    assert not [o for cell in got for o in cell if o[0] == "error"]
    assert ("image",) in [o for cell in got for o in cell], "the neighbourhood drawing"
    assert any(want), "the notebook is committed without outputs"
    assert got == want, ("notebook outputs are stale: "
                         "render with `.venv/bin/python tests/graph/test_notebook.py --write`")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/graph/test_notebook.py --write   "
                 "(renders notebooks/explore_graphs.ipynb in place)")
    import nbformat

    with tempfile.TemporaryDirectory() as tmp:
        nbformat.write(render(Path(tmp) / "run"), NOTEBOOK)
    print(f"wrote {NOTEBOOK}")
