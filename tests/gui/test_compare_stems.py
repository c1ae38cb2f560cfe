"""The Compare preset of the three stems: the bundled patchify and conv-stem models and the same transformer
after the hybrid ResNet stem, side by side on the current image."""

from __future__ import annotations

import torch

from vit_explorer.explore.compare import PRESETS, stem_models

from .conftest import wait_result


def test_stem_models_share_the_transformer_and_differ_in_the_stem() -> None:
    (_, patchify), (_, conv), (hybrid_name, hybrid) = stem_models()
    assert [m.config.stem for m in (patchify, conv, hybrid)] == ["patchify", "conv", "hybrid"]
    assert hybrid_name == f"hybrid stem: {hybrid.config.stem_parameters():,} params, untrained"
    mine, theirs = hybrid.model.state_dict(), conv.model.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in mine.items() if not k.startswith("patch_embed."))
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        grids = {m.config.stem: m.model.forward_intermediates(x, capture="stem")["stem"].shape[-2:]
                 for m in (patchify, conv, hybrid)}
    assert set(grids.values()) == {(8, 8)}  # the same patch grid, from three stems


def test_the_preset_shows_three_columns(qtbot, window) -> None:
    wait_result(qtbot, window.session)
    window.docks["Compare"].raise_()
    view = window.views["Compare"]
    name = next(iter(PRESETS))
    view.choice.setCurrentIndex(view.choice.findData(f"preset:{name}"))
    view.compare_with(f"preset:{name}")
    qtbot.waitUntil(lambda: view.sides is not None and len(view.sides) == 3, timeout=30000)
    view.bring_up_to_date()
    assert [s.name.split(":")[0] for s in view.sides] == ["patchify stem", "conv stem", "hybrid stem"]
    assert all(s.result.inputs.image is window.session.image for s in view.sides)
    assert all(s.rollout.maps.shape == (1, 8, 8) and s.prediction is not None for s in view.sides)
    assert len(view.table()[1]) == 3 * 3  # each side's top classes
    assert "PE similarity is shown for two models" in view.note.text()


def test_the_builder_offers_the_hybrid_stem_with_its_parameter_count(qtbot, window) -> None:
    from vit_explorer.models import preset

    window.docks["Model builder"].raise_()
    view = window.views["Model builder"]
    view.set_config(preset("classroom"))
    view.stem.setCurrentIndex(view.stem.findData("hybrid"))
    cfg = view.config()
    assert cfg.stem == "hybrid" and cfg.hybrid_plan() == (3,)  # patch 4: the ResNet's first stage
    assert f"{cfg.estimate_parameters():,} parameters (stem {cfg.stem_parameters():,})" in view.estimate.text()
    view.patch.setValue(2)  # 32 px is a multiple of 2, but no ResNet has that stride
    assert "stride of 4, 8, 16 or 32" in view.estimate.text() and not view.build_button.isEnabled()
