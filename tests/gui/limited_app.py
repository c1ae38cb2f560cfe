"""Drive the main window through one scenario with hostile text, in this process under a memory limit and an
alarm; print one JSON line of what it saw. Used by test_untrusted_text.py as
`python limited_app.py SCENARIO SOURCE SCRATCH` (settings go to SCRATCH, never the user's own).

The address-space limit is what this process maps once torch and Qt are imported plus LIMIT_BYTES, so a
label that lays out gigabytes fails here instead of swapping the machine.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LIMIT_BYTES = 2 * 2**30
ALARM_SECONDS = 120
HTML_60000 = '<img src="/nonexistent.png" width="60000" height="60000">'
STEP = {"title": "Patches", "caption": "An image becomes a sequence of patches."}


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _wait(app: Any, until: Callable[[], bool], seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not until():
        if time.monotonic() > end:
            raise TimeoutError("the window did not get there in time")
        app.processEvents()
        time.sleep(0.005)


def _settle(app: Any) -> None:
    for _ in range(20):
        app.processEvents()


def _lesson(scratch: Path, steps: list[dict[str, Any]], title: str = "t") -> str:
    from vit_explorer.explore.lessons import FORMAT

    path = scratch / "lesson.json"
    path.write_text(json.dumps({"format": FORMAT, "version": 1, "title": title, "steps": steps}))
    return str(path)


def lesson_html(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """Titles, captions and figure lines holding <img> tags: shown as written, entered and left."""
    from PIL import Image

    Image.new("RGB", (1, 1), (255, 0, 0)).save(scratch / "dot.png")
    scaled = f'<img src="{scratch / "dot.png"}" width="40000" height="40000">'
    path = _lesson(scratch, [{"title": HTML_60000, "caption": HTML_60000, "figure": HTML_60000},
                             {"title": scaled, "caption": scaled, "figure": scaled}], title=HTML_60000)
    panel = window.lesson.panel
    window.open_lesson(path)
    _settle(app)
    seen = [panel.title.text(), panel.figure.text()]
    window.grab()  # paint it
    window.lesson.next()
    _settle(app)
    seen += [panel.title.text(), panel.figure.text()]
    window.grab()
    window.lesson.leave()
    _settle(app)
    window.grab()
    return {"seen": seen, "panel_height": panel.sizeHint().height(), "running": window.lesson.running}


def banner(app: Any, window: Any, show: Callable[[], None]) -> dict[str, Any]:
    before = window.size().toTuple()
    show()
    _wait(app, lambda: window.banner.isVisible())
    _settle(app)
    window.grab()
    return {"before": before, "after": window.size().toTuple(), "line": len(window.banner.label.text()),
            "message": len(window.banner.text()), "banner_height": window.banner.height(),
            "banner_hint": window.banner.sizeHint().toTuple()}


def model_box(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """A 100,000-character Model box entry: the load fails and the banner says why."""
    def show() -> None:
        window.source_box.setCurrentText("x" * 100_000)
        window.load_typed()
    return banner(app, window, show)


def lesson_title(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """A lesson error in a step whose title has 150,000 characters."""
    path = _lesson(scratch, [{**STEP, "title": "x" * 150_000, "view": 3}])
    return banner(app, window, lambda: window.open_lesson(path))


def long_message(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """Any message of 150,000 characters on one line (whoever sends it)."""
    return banner(app, window, lambda: window.show_error("y" * 150_000))


def started(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """The app as it started (on whatever settings files the test left in SCRATCH/config)."""
    from vit_explorer.gui import theme

    normal = window.presentation.scale
    window.presentation.presenting = True
    return {"recent": window.recent_sources(), "theme": theme.chosen(), "scale": normal,
            "presenting": window.presentation.scale, "presenting_default": window.presentation.default,
            "banner": window.banner.text()}


def compare_html(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """A second model whose folder is named like an <img> tag: its name heads its column as written."""
    import shutil

    import pyqtgraph as pg
    from PIL import Image

    from vit_explorer.checkpoints import load

    Image.new("RGB", (1, 1), (255, 0, 0)).save(scratch / "dot.png")
    folder = scratch / '<img src="dot.png" width="40000" height="40000">'
    shutil.copytree(window.session.loaded.source, folder)
    compare = window.views["Compare"]
    window.session.set_compared(load(str(folder)))
    window.docks["Compare"].raise_()
    compare.bring_up_to_date()
    window.grab()
    titles = [item.text for item in compare.plots.scene().items() if isinstance(item, pg.LabelItem)]
    return {"name": folder.name, "titles": titles}


def _drive_dataset(app: Any, window: Any, view: Any, scratch: Path) -> None:
    """Analyse the folder whose class folders are named like HTML (the test made it), then hover a point."""
    view.data.setCurrentText(str(scratch / "classes"))
    view.limit.setValue(20)
    view.run_button.click()
    _wait(app, lambda: view.analysis is not None and view.points is not None, 90)
    _settle(app)
    view._hovered(None, [next(iter(view.scatter.points()))], None)  # the hover text of a point


DRIVE = {"Dataset": _drive_dataset}  # views that wait for a user's action before they show a file's text


def every_view(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """Every view of the window, brought up to date on a model whose labels and folder hold HTML and 100,000
    characters (and driven where it waits for a user, DRIVE), walked by screen_text for rich or long text; then a
    200,000-character dataset entry."""
    from screen_text import problems

    found: dict[str, list[str]] = {"Image": problems(window.image_panel)}
    for title, view in window.views.items():
        window.docks[title].raise_()
        _settle(app)
        view.bring_up_to_date(30)
        if title in DRIVE:
            DRIVE[title](app, window, view, scratch)
        view.bring_up_to_date(30)
        window.grab()  # painted: an <img> rendered here takes gigabytes
        found[title] = problems(view)
    dataset = window.views["Dataset"]
    shown = {"heading": window.views["Explain"].heading.text(), "hover": dataset.thumb_text.text(),
             "legend": [label.text for _, label in dataset.legend.items]}
    window.docks["Dataset"].raise_()
    dataset.data.setCurrentText("d" * 200_000)
    dataset.run_button.click()
    _wait(app, lambda: dataset.run_button.text() == "Analyse", 60)
    _settle(app)
    window.grab()
    found["Dataset, a long entry"] = problems(dataset)
    return {"problems": {title: seen for title, seen in found.items() if seen}, "views": sorted(window.views), **shown,
            "note": dataset.note.full_text,
            "title": len(window.windowTitle()), "status": len(window.statusBar().currentMessage())}


def exports(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """Every view exported as PNG and as CSV onto a named pipe, a link to one, a folder and under a file (as if it
    were a folder): each refused with a message naming the path, within seconds, the target left as it was."""
    import stat

    targets = scratch / "targets"
    targets.mkdir()
    os.mkfifo(targets / "pipe")
    (targets / "link").symlink_to(targets / "pipe")
    (targets / "folder").mkdir()
    (targets / "file").write_text("x")
    outcomes: dict[str, str] = {}
    for title, view in window.views.items():
        window.docks[title].raise_()
        view.bring_up_to_date(30)
        for name in ("pipe", "link", "folder", "file/x"):
            for kind in ("png", "csv"):
                path = targets / f"{name}.{kind}" if name == "file/x" else targets / name
                start = time.monotonic()
                try:
                    view.export_png(path) if kind == "png" else view.export_csv(path)
                    said = "written"
                except (OSError, ValueError) as error:
                    said = str(error)
                outcomes[f"{title} {kind} {name}"] = f"{time.monotonic() - start:.1f}s {said}"
    kinds = {name: stat.S_IFMT(os.lstat(targets / name).st_mode) for name in ("pipe", "link", "folder", "file")}
    return {"outcomes": outcomes, "kinds": kinds, "left": sorted(p.name for p in targets.iterdir()),
            "in_folder": sorted(p.name for p in (targets / "folder").iterdir())}


def dataset_inputs(app: Any, window: Any, scratch: Path) -> dict[str, Any]:
    """The Dataset view on hostile input (the folders the test made in SCRATCH): what its note and its projector's
    line say after each, and that the window lived through them."""
    view = window.views["Dataset"]
    window.docks["Dataset"].raise_()
    said: dict[str, str] = {}

    def analyse(data: str, limit: int) -> None:
        view.data.setCurrentText(data)
        view.limit.setValue(limit)
        view.run_button.click()
        _wait(app, lambda: view.run_button.text() == "Analyse", 90)
        _settle(app)

    analyse("shapes", 1_000_000)  # the spin box allows it: about 12 GB of pixels, killed without a word before
    said["million"] = view.note.full_text
    analyse(str(scratch / "three"), 10)
    said["three"] = view.note.full_text
    analyse(str(scratch / "same"), 10)
    said["same"] = view.note.full_text
    for method in ("tsne", "umap"):  # t-SNE of identical features: a SIGSEGV inside scikit-learn before
        view.projection.setCurrentText(method)
        _wait(app, lambda: not view.detail.text().startswith("projecting"), 90)
        said[method] = view.detail.text()
    window.grab()
    return {"said": said}


SCENARIOS = {"started": started,
             "dataset-inputs": dataset_inputs,
             "every-view": every_view,
             "exports": exports,
             "compare-html": compare_html,
             "lesson-html": lesson_html,
             "model-box": model_box,
             "lesson-title": lesson_title,
             "long-message": long_message}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))  # screen_text, beside this file
    scenario, source, scratch = SCENARIOS[sys.argv[1]], sys.argv[2], Path(sys.argv[3])
    os.environ.update(QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1", XDG_CONFIG_HOME=str(scratch / "config"))
    import torch  # noqa: F401 - mapped before the limit, as the window would import it anyway

    from vit_explorer.gui.app import make_app
    from vit_explorer.gui.main_window import MainWindow

    app = make_app(["vit-explorer"])
    torch.set_num_threads(1)
    window = MainWindow(source or None)  # "": the bundled model
    window.show()
    _wait(app, lambda: window.session is not None and window.session.result is not None
          and window.lesson is not None)
    resource.setrlimit(resource.RLIMIT_AS, (_status("VmSize:") + LIMIT_BYTES, resource.RLIM_INFINITY))
    signal.alarm(ALARM_SECONDS)
    baseline = _status("VmRSS:")
    seen = scenario(app, window, scratch)
    print(json.dumps({**seen, "grown": _status("VmHWM:") - baseline}), flush=True)
    window.close()


if __name__ == "__main__":
    main()
