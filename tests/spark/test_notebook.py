"""notebooks/quickstart.ipynb runs end to end on the embedded default, so it cannot go stale."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_executes(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(
        not c.get("outputs") for c in notebook.cells if c.cell_type == "code"
    )  # committed clean
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    text = "\n".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    assert "120 rows;" in text and "'ok':" in text
    assert "rows with rescued data, e.g. {" in text and "metadata" in text
    assert "http_error" in text  # the failed requests kept their rows
    assert (tmp_path / "quickstart-output" / "requests.png").stat().st_size > 0
