"""The app's state in one place (issue 15): the attention settings, the compared model and the lesson step live in
the Session; lessons set them there and the views' widgets follow, without feedback loops."""

from __future__ import annotations

from pathlib import Path

import pytest


def lesson_of(*steps: dict):
    from vit_explorer.explore.lessons import Lesson, Step

    return Lesson("state", tuple(Step(f"step {i}", f"caption {i}", **step) for i, step in enumerate(steps)),
                  Path("state.json"))


def test_the_attention_settings_are_the_sessions_and_the_controls_follow_them(qtbot, window) -> None:
    session, view = window.session, window.views["Attention"]
    window.docks["Attention"].raise_()
    with qtbot.waitSignal(session.attention_changed):
        session.set_attention(mode="rollout", fusion="max", discard=0.5, opacity=0.25, map_only=True)
    assert view.mode.currentText() == "rollout" and view.fusion.currentText() == "max"
    assert view.discard.value() == pytest.approx(0.5) and view.opacity.value() == 25 and view.raw.isChecked()
    view.bring_up_to_date()
    info = view.export_info()
    assert info["mode"] == "rollout" and info["head fusion"] == "max" and info["discard"] == "0.50"
    with qtbot.assertNotEmitted(session.attention_changed):  # no change, no signal: widgets cannot loop
        session.set_attention(mode="rollout", opacity=0.25)
    view.mode.setCurrentText("all heads")  # and the controls set the session
    view.opacity.setValue(70)
    assert session.attention.mode == "all heads" and session.attention.opacity == pytest.approx(0.7)
    with pytest.raises(ValueError, match="attention mode 'no such mode'"):
        session.set_attention(mode="no such mode")
    assert session.attention.mode == "all heads"


def test_the_class_attention_mode_counts_the_class_attention_blocks(qtbot, window) -> None:
    session = window.session
    session.select(layer=1)
    session.set_attention(mode="class attention (CaiT)")  # the tiny model has none: the layer stays within them
    assert session.class_layers and session.layer == session.num_layers - 1 == session.loaded.config.depth - 1
    session.set_attention(mode="one head")
    assert not session.class_layers


def test_a_lesson_sets_the_attention_mode_the_compared_model_and_its_step_in_the_session(
        qtbot, window, deit_checkpoint: Path) -> None:
    from vit_explorer.explore.lessons import Model

    session = window.session
    lesson = lesson_of({"mode": "mean of heads"},
                       {"mode": "all heads", "view": "Compare", "compare": Model(source=str(deit_checkpoint)),
                        "hover": True})
    window.lesson.start(lesson)
    assert session.lesson is lesson and session.step == 0 and session.attention.mode == "mean of heads"
    assert window.views["Attention"].mode.currentText() == "mean of heads"
    assert window.lesson.panel.caption.text() == "caption 0"
    with qtbot.waitSignal(window.lesson.applied, timeout=20000):
        window.lesson.next()
    assert session.step == 1 and session.hover and session.attention.mode == "all heads"
    assert window.lesson.panel.caption.text() == "caption 1"  # the panel follows the session's step
    assert session.compared is not None and session.compared.source == str(deit_checkpoint)
    assert session.compared_name == Path(deit_checkpoint).name
    compare = window.views["Compare"]
    compare.bring_up_to_date()
    assert compare.sides is not None and compare.sides[1].name == session.compared_name
    window.lesson.leave()
    assert session.lesson is None and session.step == -1 and not session.hover
    session.set_compared(None)
    compare.bring_up_to_date()
    assert compare.sides is None and "Choose a second model" in compare.note.text()


def test_the_training_runs_live_in_the_session(qtbot, window, tmp_path) -> None:
    """Issue 15: the runs were the Training view's own list; now lessons and menus set and read them in Session."""
    from vit_explorer.gui.session import Run
    from vit_explorer.models import preset

    view = window.views["Training"]
    heard = []
    window.session.runs_changed.connect(lambda: heard.append(True))
    run = Run("run 1", preset("classroom-tiny"), tmp_path / "run", steps=[5], loss=[2.0], accuracy=[0.1],
              started=True)
    window.session.set_runs([run])
    assert view.runs == [run] and heard == [True]
    assert view.pane.currentWidget() is view.plots  # the view drew the session's run, not its placeholder
    window.session.set_runs([run])  # no change: no signal
    assert heard == [True]
    window.session.set_runs([])
    assert view.pane.currentWidget() is view.placeholder
