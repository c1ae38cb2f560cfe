"""timm checkpoints loaded through our loaders give timm's numbers: logits, per-block hidden states,
attention maps (CaiT: class attention and class tokens), at 32x32 and at a rectangular 32x48."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from vit_explorer.checkpoints import load

from .conftest import assert_close

SIZES = [(32, 32), (24, 48)]  # the second shrinks the grid vertically and widens it


def timm_capture(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """Logits plus what each block and each attention's softmax produced (explicit attention)."""
    hidden, attn, cls_tokens, cls_attn = [], [], [], []
    hooks = []
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False  # timm's fused path never forms the probabilities
    for block in model.blocks:
        hooks.append(block.register_forward_hook(lambda m, i, o: hidden.append(o)))
        hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, i, o: attn.append(o)))
    for block in getattr(model, "blocks_token_only", []):
        hooks.append(block.register_forward_hook(lambda m, i, o: cls_tokens.append(o)))
        hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, i, o: cls_attn.append(o)))
    try:
        with torch.no_grad():
            logits = model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return dict(logits=logits, hidden_states=hidden, attentions=attn, class_tokens=cls_tokens,
                class_attentions=cls_attn)


def reference_at(case: str, model: torch.nn.Module, size: tuple[int, int], timm_build) -> torch.nn.Module:
    """timm's model for an input size: ViT/DeiT resize PEs themselves (dynamic_img_size); timm's CaiT
    cannot, so build it at that size with the table resampled by timm's resample_abs_pos_embed."""
    if case != "cait" or size == (32, 32):
        return model
    from timm.layers import resample_abs_pos_embed

    rect = timm_build(case, img_size=size)
    state = dict(model.state_dict())
    state["pos_embed"] = resample_abs_pos_embed(state["pos_embed"], new_size=[s // 8 for s in size],
                                                num_prefix_tokens=0)
    rect.load_state_dict(state)
    return rect.eval()


@pytest.mark.parametrize("case", ["vit", "deit_distilled", "cait"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_timm_hub_folder_parity(timm_hub, timm_build, case: str, size: tuple[int, int]) -> None:
    model, folder = timm_hub(case)
    loaded = load(folder)
    assert loaded.kind == "timm"
    ref = timm_capture(reference_at(case, model, size, timm_build), x := torch.randn(2, 3, *size))
    with torch.no_grad():
        ours = loaded.model.forward_intermediates(x, capture="all")
    assert_close(ours["logits"], ref["logits"], "logits")
    assert len(ours["hidden_states"]) == len(ref["hidden_states"]) == 2
    for i, (a, b) in enumerate(zip(ours["hidden_states"], ref["hidden_states"], strict=True)):
        assert_close(a, b, f"hidden state {i}")
    for i, (a, b) in enumerate(zip(ours["attentions"], ref["attentions"], strict=True)):
        assert_close(a, b, f"attention {i}")
    if case == "cait":
        assert len(ours["class_attentions"]) == len(ref["class_attentions"]) == 2
        for i, (a, b) in enumerate(zip(ours["class_attentions"], ref["class_attentions"], strict=True)):
            assert_close(a, b, f"class attention {i}")
        for i, (a, b) in enumerate(zip(ours["class_tokens"], ref["class_tokens"], strict=True)):
            assert_close(a, b, f"class token {i}")


@pytest.fixture(scope="module")
def full_size() -> dict[str, torch.nn.Module]:
    """The named models at their real sizes (a bare state dict has only its name to say what it is,
    and the name's sizes must match the weights), with a 7-class head; small enough to run in 0.1 s."""
    import timm

    from .conftest import LABELS, TIMM_CASES, randomize

    return {case: randomize(timm.create_model(TIMM_CASES[case][0], num_classes=len(LABELS)))
            for case in ("deit_distilled", "cait")}


@pytest.mark.parametrize("case", ["deit_distilled", "cait"])
@pytest.mark.parametrize("wrap", ["bare", "model", "state_dict"])
def test_bare_pth_with_arch(full_size, timm_names, tmp_path: Path, case: str, wrap: str) -> None:
    """A bare (or wrapped) .pth state dict plus the model name; heads come from the name."""
    model = full_size[case]
    state = model.state_dict()
    path = tmp_path / "weights.pth"
    torch.save(state if wrap == "bare" else {wrap: state, "epoch": 3}, path)
    loaded = load(path, arch=timm_names[case] + ".fake_tag")
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert_close(loaded.model(x), model(x), "logits")
    assert loaded.config.num_heads == {"deit_distilled": 3, "cait": 4}[case]


def test_bare_safetensors_with_sibling_config(timm_hub, tmp_path: Path) -> None:
    """A renamed weights file next to a timm config.json: the config says what it is."""
    import shutil

    model, folder = timm_hub("vit")
    shutil.copy(folder / "config.json", tmp_path / "config.json")
    shutil.copy(folder / "model.safetensors", tmp_path / "epoch_10.safetensors")
    loaded = load(tmp_path / "epoch_10.safetensors")
    assert loaded.config.num_heads == 2  # from model_args, not the name's 3
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert_close(loaded.model(x), model(x), "logits")


def test_timm_labels_and_preprocessing(timm_hub) -> None:
    _, folder = timm_hub("deit_distilled")
    loaded = load(folder)
    assert loaded.labels == [f"class {i}" for i in range(7)]
    assert loaded.preprocessing.size == (32, 32)
    assert loaded.preprocessing.resize_shortest == 36  # floor(32 / 0.875)
    assert loaded.details["architecture"] == "deit_tiny_distilled_patch16_224"


def test_timm_label_names_from_pretrained_cfg(timm_hub, tmp_path: Path) -> None:
    import json
    import shutil

    _, folder = timm_hub("vit")
    copy = Path(shutil.copytree(folder, tmp_path / "named"))
    config = json.loads((copy / "config.json").read_text())
    config["pretrained_cfg"]["label_names"] = [f"kind {i}" for i in range(7)]
    (copy / "config.json").write_text(json.dumps(config))
    assert load(copy).labels == [f"kind {i}" for i in range(7)]


def test_imagenet_head_gets_imagenet_names(tmp_path: Path) -> None:
    import timm

    model = timm.create_model("deit_tiny_patch16_224")  # the name's sizes: a bare file has only the name
    torch.save(model.state_dict(), tmp_path / "in1k.pth")
    loaded = load(tmp_path / "in1k.pth", arch="deit_tiny_patch16_224")
    assert len(loaded.labels) == 1000
    assert loaded.labels[0] == "tench" and loaded.labels[207] == "golden retriever"
