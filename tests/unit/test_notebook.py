"""examples/analysis.ipynb runs top to bottom in a fresh kernel: a sweep on the simulator, its plot, a lab run
loaded from its folder (no root, no lab)."""
import nbformat
from nbclient import NotebookClient

from tests.conftest import REPO

NOTEBOOK = REPO / "examples" / "analysis.ipynb"


def test_the_example_notebook_runs_and_draws():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == 2
    text = "".join(o.get("text", "") for o in outputs)
    assert "slowest step: MRC" in text and "fidelity ok:" in text
