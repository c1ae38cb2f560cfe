"""Figures inline in a notebook (explore/notebook.py): every figure composition and the library's results render as
PNG with no Qt and no display, and the example notebook (examples/explore.ipynb) runs headless."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vit_explorer.explore.figures import (
    BarsFigure,
    ImagesFigure,
    LinesFigure,
    MapsFigure,
    ScatterFigure,
    SimilarityFigure,
    TilesFigure,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "explore.ipynb"


def figures() -> list:
    """One figure of every kind, with the options that change how it is drawn."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
    return [
        MapsFigure("heads", rng.random((3, 8, 8)), ("a", "b", "c"), image, (8, 8), masked=rng.random((8, 8)) < 0.2),
        MapsFigure("", rng.random((1, 5, 5)), ("alone",), None, (5, 5), scale="each", cmap="viridis"),
        SimilarityFigure("PE", rng.uniform(-1, 1, (4, 4, 4, 4)), maps=(("[CLS]", rng.uniform(-1, 1, (4, 4))),),
                         others=(("other", rng.uniform(-1, 1, (4, 4, 4, 4))),), note="a note"),
        BarsFigure("top", ("cat", "dog"), np.array([0.7, 0.2]), highlight=0, value_range=(0, 1),
                   markers={"class head": np.array([0.6, 0.3])}),
        BarsFigure("vertical", ("a", "b", "c"), np.array([1.0, -2.0, 3.0]), horizontal=False),
        LinesFigure("curves", np.arange(4.0) - 1, {"one": rng.random(4), "two": rng.random(4)}, "state", "acc",
                    ((-1.0, "input"), (0.0, "0"))),
        ScatterFigure("points", rng.random(20), rng.random(20), tuple("ab" * 10), "x", "y", jitter=0.3,
                      reference=(0.5, "uniform"), y_from_zero=True),
        TilesFigure("filters", rng.random((5, 4, 4, 3)), columns=3, note="untrained"),
        ImagesFigure("pictures", (image, image), ("one", "two"), grid=(8, 8)),
    ]


def decoded(data: bytes) -> np.ndarray:
    picture = Image.open(io.BytesIO(data))
    assert picture.format == "PNG"
    return np.asarray(picture.convert("RGB"))


@pytest.mark.parametrize("index", range(len(figures())))
def test_every_figure_kind_renders_inline_as_a_png(index: int) -> None:
    figure = figures()[index]
    pixels = decoded(figure._repr_png_())
    assert pixels.shape[1] >= 500 and pixels.shape[0] >= 200
    assert pixels.std() > 10, "a blank picture"


def test_figures_render_with_no_qt_and_no_display(tmp_path: Path) -> None:
    """In a fresh interpreter with no display: rendering every kind imports neither Qt nor pyqtgraph."""
    code = (f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(Path(__file__).parent)!r}]\n"
            "from test_notebook_figures import figures\n"
            "for figure in figures(): assert figure._repr_png_().startswith(b'\\x89PNG')\n"
            "bad = [m for m in ('PySide6', 'shiboken6', 'pyqtgraph') if m in sys.modules]\n"
            "assert not bad, bad\n")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM",
                                                             "MPLBACKEND")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_librarys_results_render_inline() -> None:
    """A prediction (the forward result), an explanation with its faithfulness, a decomposition: each is its own
    figure (the notebook test below shows a dataset analysis)."""
    from vit_explorer.checkpoints import load
    from vit_explorer.data.images import open_image, sample_images
    from vit_explorer.explore.components import decomposition
    from vit_explorer.explore.forward import Inputs, run_forward
    from vit_explorer.explore.relevance import explain
    from vit_explorer.paths import BUNDLED

    loaded = load(BUNDLED["classroom-patchify"], device="cpu")
    inputs = Inputs.unmasked(loaded, open_image(sample_images()[0]), loaded.preprocessing.size)
    result = run_forward(inputs)
    (explanation,) = explain(inputs, ["rollout"])
    assert explanation.faithfulness is not None
    parts = decomposition(inputs)
    assert abs(parts.total - parts.logit) < 1e-4
    for shown in (result, explanation, parts):
        assert decoded(shown._repr_png_()).std() > 10


@pytest.mark.slow
def test_the_example_notebook_runs_headless_and_shows_its_figures() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pictures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pictures) >= 6  # the prediction, two attention figures, an explanation, the parts, the dataset
    calls = "".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    for api in ("vit_explorer.load", "run_forward", "heads_figure", "explain(", "decomposition(", "analyse("):
        assert api in calls, f"the notebook does not walk {api}"
