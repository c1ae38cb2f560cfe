"""The flow row a view's controls wrap in, and its tail (the Export button): Ctrl+plus made a narrow dock's
control row wider than the dock (its widest control beside the Export button), so the dock scrolled across."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton

from vit_explorer.gui.flow import flow_row


def test_the_tail_goes_last_at_the_right_and_never_widens_the_row(qtbot) -> None:
    buttons = [QPushButton(text) for text in ("top 5", "a long control's text", "x")]
    tail = QPushButton("Export")
    holder = flow_row(buttons[:1])
    holder.layout().set_tail(tail)
    for button in buttons[1:]:  # added after the tail, as a view's subclass adds its controls
        holder.layout().addWidget(button)
    qtbot.addWidget(holder)
    widest = max(b.sizeHint().width() for b in [*buttons, tail])
    assert holder.minimumSizeHint().width() == widest  # the widest control alone, not it and the tail

    holder.resize(2000, holder.heightForWidth(2000))
    holder.show()
    qtbot.waitExposed(holder)
    tops = {b.geometry().top() for b in [*buttons, tail]}
    assert len(tops) == 1  # one line
    assert tail.geometry().right() == holder.width() - 1  # at its right edge
    assert all(b.geometry().right() < tail.geometry().left() for b in buttons)  # after the others

    narrow = widest + 4
    holder.resize(narrow, holder.heightForWidth(narrow))
    qtbot.wait(10)
    assert all(w.geometry().right() < narrow for w in [*buttons, tail])  # nothing past the row's width
    assert tail.geometry().top() >= max(b.geometry().top() for b in buttons)  # on the last line
    assert tail.geometry().right() == narrow - 1
