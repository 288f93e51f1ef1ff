"""Every tutorial notebook runs top to bottom (small budgets) and is stored clean."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

TUTORIALS = sorted((Path(__file__).resolve().parents[1] / "tutorials").glob("*.ipynb"))
#: Seconds one cell may take (smoke budgets keep every notebook well below it).
CELL_TIMEOUT = 600


def test_tutorials_exist():
    assert len(TUTORIALS) >= 6, [p.name for p in TUTORIALS]


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: strip outputs before committing"
            assert cell.execution_count is None, path.name


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch):
    # SMOKE_TEST shrinks budgets, as in BoTorch's own tutorials; one thread per
    # worker, as in the rest of the suite.
    monkeypatch.setenv("SMOKE_TEST", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError naming the failing cell
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors
