"""Lessons in the app: the views a lesson may name are the app's."""

from __future__ import annotations

from vit_explorer.explore.lessons import VIEWS
from vit_explorer.gui.views import VIEW_CLASSES


def test_a_lesson_can_open_every_view_of_the_app() -> None:
    assert VIEWS == tuple(view.title for view in VIEW_CLASSES)
