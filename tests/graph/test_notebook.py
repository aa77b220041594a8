"""notebooks/explore_graphs.ipynb runs top to bottom on the bundled sample and draws a figure."""

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_explore_graphs_notebook_runs(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SURFPRM_RUN", str(tmp_path / "run"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(ROOT / "notebooks" / "explore_graphs.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the neighbourhood drawing"
    assert (tmp_path / "run" / "graphs" / "manifest.json").exists()
