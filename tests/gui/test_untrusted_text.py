"""Text from files in the app: shown as written (never as HTML), bounded in the banner, lesson errors in the
banner instead of the event loop, and a lesson that lets go of the models no later step uses.

What once crashed the app (SIGSEGV) or took gigabytes runs in a child under a memory limit (limited_app.py)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from vit_explorer.explore.lessons import Lesson, Model, Step
from vit_explorer.gui.banner import MAX_LINE, MAX_MESSAGE

ROOT = Path(__file__).resolve().parents[2]
GROWTH = 1 << 30  # bytes a scenario may add to the window's peak (the blow-ups took 4 to 10 GB)


def run_limited(scenario: str, source: Path, scratch: Path, timeout: float = 240) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run([sys.executable, str(Path(__file__).with_name("limited_app.py")), scenario, str(source),
                               str(scratch)], capture_output=True, text=True, timeout=timeout, env=env, cwd=scratch)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{scenario}: the app did not get there within {timeout} s")
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["grown"] < GROWTH, seen
    return seen


@pytest.mark.slow
def test_lesson_html_is_shown_as_written_and_the_lesson_can_be_left(tmp_path: Path, tiny_checkpoint: Path) -> None:
    from .limited_app import HTML_60000

    seen = run_limited("lesson-html", tiny_checkpoint, tmp_path)
    dot = f'<img src="{tmp_path / "dot.png"}" width="40000" height="40000">'
    assert seen["seen"] == [HTML_60000, f"See: {HTML_60000}", dot, f"See: {dot}"]
    assert not seen["running"] and seen["panel_height"] < 400


@pytest.mark.slow
def test_a_model_named_like_html_heads_its_column_as_written(tmp_path: Path, tiny_checkpoint: Path) -> None:
    seen = run_limited("compare-html", tiny_checkpoint, tmp_path)
    escaped = seen["name"].replace("<", "&lt;").replace(">", "&gt;")
    assert any(escaped in title.replace("<br>", " ") for title in seen["titles"]), seen["titles"]
    assert not any("<img" in title for title in seen["titles"]), seen["titles"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["model-box", "lesson-title", "long-message"])
def test_a_long_message_is_one_bounded_line_and_never_grows_the_window(tmp_path: Path, tiny_checkpoint: Path,
                                                                         scenario: str) -> None:
    seen = run_limited(scenario, tiny_checkpoint, tmp_path)
    assert seen["after"] == seen["before"], seen
    assert 10 < seen["line"] <= MAX_LINE + 2 and seen["message"] <= MAX_MESSAGE + 100, seen
    assert seen["banner_height"] < 80 and seen["banner_hint"][0] < 1000, seen


def test_the_whole_message_is_one_click_away(qtbot, window) -> None:
    from PySide6.QtWidgets import QPlainTextEdit

    message = "load failed: " + "z" * 3000 + "\nsecond line: the way out"
    window.show_error(message)
    assert window.banner.label.text().startswith("load failed: zzz") and "\n" not in window.banner.label.text()
    window.banner.details.click()
    view = window.banner.details_view.findChild(QPlainTextEdit)
    assert view.toPlainText() == message and view.isReadOnly()
    window.banner.dismiss()
    assert not window.banner.details_view.isVisible() and not window.message_bar.isVisible()


@pytest.mark.parametrize("name", ["nul", "too-long", "fifo", "folder"])
def test_a_lesson_file_that_cannot_be_read_is_named_in_the_banner(qtbot, window, tmp_path: Path, name: str) -> None:
    path = {"nul": f"{tmp_path}/a\0b.json", "too-long": str(tmp_path / ("x" * 300 + ".json")),
            "fifo": str(tmp_path / "pipe.json"), "folder": str(tmp_path)}[name]
    if name == "fifo":
        os.mkfifo(path)
    window.open_lesson(path)  # from the Lesson menu: nothing may reach the event loop
    text = window.banner.text()
    assert window.banner.isVisible() and not window.lesson.running
    assert {"nul": "NUL byte", "too-long": "File name too long", "fifo": "is a named pipe",
            "folder": "is a folder"}[name] in text, text


@pytest.mark.slow
def test_a_lesson_keeps_only_the_models_this_and_later_steps_use(qtbot, window) -> None:
    models = [Model(preset="classroom-tiny", options={"num_classes": 2 + i}) for i in range(6)]
    uses = [0, 1, 2, 3, 4, 5, 0]  # the first model comes back at the end: kept all along
    lesson = Lesson("presets", tuple(Step(f"step {i}", "caption", model=models[m]) for i, m in enumerate(uses)),
                    Path("presets.json"))
    runner, built = window.lesson, {}
    for index, m in enumerate(uses):
        with qtbot.waitSignal(runner.applied, timeout=30000, check_params_cb=lambda i, n=index: i == n):
            runner.start(lesson) if index == 0 else runner.next()
        assert window.session.loaded.config.num_classes == 2 + m
        built.setdefault(m, weakref.ref(window.session.loaded.model))
        qtbot.wait(50)  # the views let go of the previous model
        gc.collect()
        alive = {k for k, ref in built.items() if ref() is not None}
        assert alive <= {m, *uses[index:]}, f"step {index + 1}: models {sorted(alive)} alive"
        assert 0 in alive, f"step {index + 1}: the model the last step uses again was let go"
    assert built[0]() is window.session.loaded.model  # loaded once, not rebuilt for the last step
    runner.leave()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wrong-types", "fifo"])
def test_the_app_starts_with_defaults_on_a_hostile_settings_file(tmp_path: Path, tiny_checkpoint: Path,
                                                                 kind: str) -> None:
    conf = tmp_path / "config" / "vit-explorer" / "vit-explorer.conf"  # where the child's QSettings looks
    conf.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(conf)
    else:  # every key the app reads, as an int (what QSettings writes for a typed value)
        keys = ("recent_sources", "theme", "text_scale", "presentation_text_scale", "export_folder")
        conf.write_text("[General]\n" + "".join(f"{key}=@Variant(\\0\\0\\0\\x2\\0\\0\\0\\x5)\n" for key in keys))
    seen = run_limited("started", tiny_checkpoint, tmp_path, timeout=90)
    banner = seen.pop("banner")
    default = seen.pop("presenting_default")  # 1.5, or 1.3 on a screen of under 900 lines
    assert seen == {"recent": [], "theme": "system", "scale": 1.0, "presenting": default, "grown": seen["grown"]}
    if kind == "fifo":
        assert f"{conf}: the settings file is a named pipe" in banner, banner
