"""Bad input gives one CheckpointError that names the file and says what is wrong."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vit_explorer.checkpoints import CheckpointError, load


def copy_folder(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_missing_path_that_is_no_hub_id(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "model.safetensors"
    with pytest.raises(CheckpointError, match="no such file or folder") as info:
        load(path)
    assert str(path) in str(info.value)


def test_folder_without_weights(hf_folder, tmp_path: Path) -> None:
    _, folder = hf_folder("vit")
    bad = tmp_path / "no_weights"
    bad.mkdir()
    shutil.copy(folder / "config.json", bad / "config.json")
    with pytest.raises(CheckpointError, match="no weights found") as info:
        load(bad)
    assert str(bad) in str(info.value)


def test_folder_that_is_no_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="config.json") as info:
        load(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_truncated_safetensors(hf_folder, tmp_path: Path) -> None:
    _, folder = hf_folder("vit")
    bad = copy_folder(folder, tmp_path / "trunc")
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt") as info:
        load(bad)
    assert str(weights) in str(info.value)


def test_truncated_pth(timm_hub, tmp_path: Path) -> None:
    model, _ = timm_hub("deit_distilled")
    path = tmp_path / "weights.pth"
    torch.save(model.state_dict(), path)
    path.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(CheckpointError, match="truncated or corrupt") as info:
        load(path, arch="deit_tiny_distilled_patch16_224")
    assert str(path) in str(info.value)


def test_checkpoint_of_another_architecture(timm_hub, tmp_path: Path) -> None:
    """CaiT weights read as a ViT with LayerScale of the same sizes (its timm config, the name replaced
    by arch): the message lists missing, unexpected and mis-shaped keys."""
    model, folder = timm_hub("cait")
    path = tmp_path / "cait.pth"
    torch.save(model.state_dict(), path)
    config = json.loads((folder / "config.json").read_text())
    config["model_args"]["init_values"] = 1e-5
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        load(path, arch="vit_tiny_patch16_224")
    message = str(info.value)
    assert str(path) in message
    # talking heads and class-attention blocks, each named once for all blocks
    assert "44 unexpected keys: blocks.*.attn.proj_l.bias" in message
    assert "class_blocks.*.ls1.gamma" in message and "class_blocks.*.attn.q.weight" in message
    assert "mis-shaped keys" in message and "pos_embed" in message


def test_weights_that_disagree_with_the_config(hf_folder, tmp_path: Path) -> None:
    """config.json says 3 layers of width 64; the weights have 2 of width 48."""
    _, folder = hf_folder("vit")
    bad = copy_folder(folder, tmp_path / "disagree")
    config = json.loads((bad / "config.json").read_text())
    config.update(num_hidden_layers=3, hidden_size=64, intermediate_size=128)
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        load(bad)
    message = str(info.value)
    assert str(bad / "model.safetensors") in message
    assert "missing keys: blocks.2.attn.proj.bias" in message
    assert "mis-shaped keys" in message and "(48,) vs model (64,)" in message


def test_absurd_config_is_refused_before_allocating(hf_folder, tmp_path: Path, monkeypatch) -> None:
    _, folder = hf_folder("vit")
    bad = copy_folder(folder, tmp_path / "absurd")
    config = json.loads((bad / "config.json").read_text())
    config.update(num_hidden_layers=4000, hidden_size=8192, intermediate_size=32768, num_attention_heads=64)
    (bad / "config.json").write_text(json.dumps(config))

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built for an absurd config")

    monkeypatch.setattr("vit_explorer.checkpoints.formats.build_model", no_model)
    with pytest.raises(CheckpointError, match="parameters") as info:
        load(bad)
    assert str(bad / "config.json") in str(info.value)


def test_pickle_with_objects_is_not_unpickled(timm_hub, tmp_path: Path) -> None:
    """Training checkpoints often carry an argparse.Namespace: weights_only refuses it, and so do we."""
    model, _ = timm_hub("deit_distilled")
    path = tmp_path / "checkpoint.pth"
    torch.save({"model": model.state_dict(), "args": argparse.Namespace(lr=0.1)}, path)
    with pytest.raises(CheckpointError, match="non-tensor objects") as info:
        load(path, arch="deit_tiny_distilled_patch16_224")
    message = str(info.value)
    assert str(path) in message and "argparse.Namespace" in message and "weights_only=True" in message


def test_bare_state_dict_needs_a_name(timm_hub, tmp_path: Path) -> None:
    model, _ = timm_hub("deit_distilled")
    path = tmp_path / "weights.safetensors"
    from safetensors.torch import save_file

    save_file(model.state_dict(), path)
    with pytest.raises(CheckpointError, match="arch") as info:
        load(path)
    assert str(path) in str(info.value)


def test_unknown_timm_name_lists_what_is_supported(timm_hub, tmp_path: Path) -> None:
    model, _ = timm_hub("vit")
    path = tmp_path / "weights.pth"
    torch.save(model.state_dict(), path)
    with pytest.raises(CheckpointError, match="not supported; supported names: .*cait_"):
        load(path, arch="swin_tiny_patch4_window7_224")


def test_hf_model_type_that_is_not_vit(hf_folder, tmp_path: Path) -> None:
    _, folder = hf_folder("vit")
    bad = copy_folder(folder, tmp_path / "swin")
    config = json.loads((bad / "config.json").read_text())
    config["model_type"] = "swin"
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="model_type 'swin' is not supported") as info:
        load(bad)
    assert str(bad / "config.json") in str(info.value)


def test_missing_weights_file_with_a_path_like_name(tmp_path: Path) -> None:
    """'runs/model.pth' looks like org/name but is a missing file, not a hub id."""
    with pytest.raises(CheckpointError, match="no such file or folder"):
        load("runs/model.pth")


def test_invalid_json(hf_folder, tmp_path: Path) -> None:
    _, folder = hf_folder("vit")
    bad = copy_folder(folder, tmp_path / "badjson")
    (bad / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON") as info:
        load(bad)
    assert str(bad / "config.json") in str(info.value)


@pytest.mark.parametrize("hub_id", ["some-org/not-cached-model", "timm/vit_tiny_patch16_224.not_cached"])
def test_hub_id_while_offline_and_not_cached(hub_id: str, tmp_path: Path, monkeypatch) -> None:
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointError, match="offline") as info:
        load(hub_id)
    assert hub_id in str(info.value)


def _fake_cache(cache: Path, repo_id: str, files: dict[str, Path]) -> None:
    """The huggingface_hub cache layout: refs/main -> commit, snapshots/<commit>/<files>."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, src in files.items():
        shutil.copy(src, snapshot / name)


def test_cached_hub_ids_load_offline(hf_folder, timm_hub, tmp_path: Path, monkeypatch) -> None:
    import huggingface_hub.constants as constants

    cache = tmp_path / "cache"
    hf_model, hf_dir = hf_folder("deit")
    _fake_cache(cache, "someone/tiny-deit", {n: hf_dir / n for n in ("config.json", "model.safetensors")})
    timm_model, timm_dir = timm_hub("cait")
    _fake_cache(cache, "timm/cait_xxs24_224.tiny", {n: timm_dir / n for n in ("config.json", "model.safetensors")})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    x = torch.randn(1, 3, 32, 32)
    hf = load("someone/tiny-deit")
    timm = load("timm/cait_xxs24_224.tiny")
    assert (hf.kind, hf.source, timm.kind) == ("hf", "someone/tiny-deit", "timm")
    with torch.no_grad():
        assert (hf.model(x) - hf_model(x).logits).abs().max() < 1e-4
        assert (timm.model(x) - timm_model(x)).abs().max() < 1e-4


def test_fp16_weights_stay_fp16_unless_upcast(hf_folder, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    _, folder = hf_folder("vit")
    half = copy_folder(folder, tmp_path / "half")
    save_file({k: v.half() for k, v in load_file(folder / "model.safetensors").items()}, half / "model.safetensors")
    assert all(p.dtype == torch.float16 for p in load(half).model.parameters())
    loaded = load(half, dtype="float32")
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
