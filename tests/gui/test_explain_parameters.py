"""The Explain view's Parameters panel (issue 28, item 4 in the app): each control changes the map the view draws,
which equals the library's map with the same relevance.Options; only the chosen methods' parameters are shown, the
defaults are the methods as published."""

from __future__ import annotations

import numpy as np
import pytest

from vit_explorer.explore import relevance as rel


def _set(widget, value) -> None:
    if hasattr(widget, "setChecked"):
        widget.setChecked(value)
    elif hasattr(widget, "setValue"):
        widget.setValue(value)
    else:
        widget.setCurrentIndex(widget.findText(value))


# (method, {control: value}, the Options they give)
CASES = [
    ("integrated-gradients", {"ig_steps": 7}, rel.Options(ig_steps=7)),
    ("integrated-gradients", {"ig_baseline": "blur"}, rel.Options(ig_baseline="blur")),
    ("integrated-gradients", {"ig_baseline": "noise"}, rel.Options(ig_baseline="noise")),
    ("integrated-gradients", {"ig_baseline": "mask"}, rel.Options(ig_baseline="mask")),
    ("gradcam", {"gradcam_block": "0"}, rel.Options(gradcam_block=0)),
    ("gradient-x-input", {"smoothgrad": 3, "sigma": 0.3}, rel.Options(smoothgrad=3, smoothgrad_sigma=0.3)),
    ("occlusion", {"window_px": 12, "stride_px": 6}, rel.Options(occlusion_window=(12, 12), occlusion_stride=(6, 6))),
    ("integrated-gradients", {"pixels": True}, rel.Options(pixels=True)),
    ("attnlrp", {"gamma": 0.5}, rel.Options(attnlrp_gamma=0.5)),
]


def _drawn_with(qtbot, view, options: rel.Options) -> None:
    qtbot.waitUntil(lambda: view._request[-1:] == (options,) and bool(view.explanations) and view._drawn is not None,
                    timeout=60000)


@pytest.mark.parametrize(("method", "controls", "options"), CASES, ids=[f"{c[0]}-{'-'.join(c[1])}" for c in CASES])
def test_each_parameter_changes_the_map_to_the_librarys(window, qtbot, method: str, controls: dict,
                                                        options: rel.Options) -> None:
    view = window.views["Explain"]
    window.show_view("Explain")
    view.choose(methods=[method])
    _drawn_with(qtbot, view, rel.Options())
    default = view.explanations[0].relevance
    for name, value in controls.items():
        assert view.parameters.form.isRowVisible(getattr(view.parameters, name)), name  # shown for this method
        _set(getattr(view.parameters, name), value)
    assert view.parameters.options() == options
    _drawn_with(qtbot, view, options)
    shown = view.explanations[0]
    inputs = window.session.inputs()
    expected = rel.explain(inputs, [method], rel.Target(), "zero", measure=False, options=options)[0]
    np.testing.assert_allclose(shown.relevance, expected.relevance, rtol=1e-5, atol=1e-7)
    if not options.pixels:  # the control changed the map (pixels: the per-patch map stays, the pixels' is added)
        assert not np.allclose(shown.relevance, default, rtol=1e-5, atol=1e-7)
    assert view.parameters.text() == f"Parameters ({len(controls)} set)"  # the button says so
    drawn = view._detail.figure
    if options.pixels:  # the pixel-level map drawn large, beside the per-patch one in the grid
        assert shown.pixels is not None and "(pixels)" in drawn.titles[0]
        np.testing.assert_allclose(drawn.maps[0], expected.pixels, rtol=1e-5, atol=1e-7)
    else:
        np.testing.assert_allclose(drawn.maps[0], expected.relevance, rtol=1e-5, atol=1e-7)


def test_only_the_chosen_methods_parameters_are_shown(window, qtbot) -> None:
    view = window.views["Explain"]
    window.show_view("Explain")
    panel = view.parameters
    rows = {name: getattr(panel, name) for name in ("ig_steps", "ig_baseline", "gradcam_block", "smoothgrad",
                                                     "sigma", "window_px", "stride_px", "pixels", "gamma")}

    def shown() -> set[str]:
        return {name for name, widget in rows.items() if panel.form.isRowVisible(widget)}

    view.choose(methods=["rollout"])
    assert shown() == set() and panel.isHidden()  # rollout has no parameter: no button
    view.choose(methods=["rollout", "occlusion"])
    assert shown() == {"window_px", "stride_px"} and not panel.isHidden()
    view.choose(methods=["gradcam", "attnlrp"])
    assert shown() == {"gradcam_block", "smoothgrad", "sigma", "gamma"}
    view.choose(methods=["integrated-gradients"])
    assert shown() == {"ig_steps", "ig_baseline", "smoothgrad", "sigma", "pixels"}
    assert panel.options() == rel.Options()  # the defaults: the methods as published
    assert panel.gradcam_block.count() == window.session.loaded.config.depth + 1  # "the last" and every block
