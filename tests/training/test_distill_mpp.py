"""DeiT distillation and masked patch prediction run end to end on tiny models."""

from pathlib import Path

import torch

import vit_explorer
from vit_explorer.checkpoints.native import save_native
from vit_explorer.data.datasets import TrainingData
from vit_explorer.models import VisionTransformer
from vit_explorer.training import events as ev
from vit_explorer.training.recipe import Recipe
from vit_explorer.training.trainer import train

from .conftest import tiny_config


def _recipe(**kw: object) -> Recipe:
    return Recipe(**{"batch_size": 32, "lr": 3e-3, "log_every": 1, "eval_every": 1.0, **kw})


def test_hard_distillation_from_a_cnn_teacher(tmp_path: Path, colour_data: TrainingData) -> None:
    config = tiny_config(num_classes=4, prefix_tokens="cls+dist")
    found = list(train(config, colour_data, _recipe(steps=12, distill="hard", teacher="cnn", teacher_steps=15),
                       tmp_path))
    notices = [e.message for e in found if isinstance(e, ev.Notice)]
    assert any("CNN teacher" in n and "validation accuracy" in n for n in notices)
    steps = [e for e in found if isinstance(e, ev.Step)]
    assert steps[-1].loss < steps[0].loss
    # the teacher is saved with the run, so a resume does not retrain it
    state = torch.load(tmp_path / "training_state.pt", weights_only=True)
    assert "teacher" in state
    assert vit_explorer.load(str(tmp_path)).config.distilled


def test_soft_distillation_from_a_saved_vit_teacher(tmp_path: Path, colour_data: TrainingData) -> None:
    teacher = VisionTransformer(tiny_config(num_classes=4, image_size=24, embed_dim=16))
    pre = colour_data.preprocessing.with_size((24, 24))
    save_native(tmp_path / "teacher", teacher, colour_data.labels, pre)
    config = tiny_config(num_classes=4, prefix_tokens="cls+dist")
    recipe = _recipe(steps=3, distill="soft", teacher=str(tmp_path / "teacher"), distill_tau=2.0)
    found = list(train(config, colour_data, recipe))
    assert isinstance(found[-1], ev.Finished) and found[-1].step == 3


def test_mpp_pretraining_then_fine_tuning(tmp_path: Path, tiny_data: TrainingData) -> None:
    config = tiny_config(mask_token=True)
    found = list(train(config, tiny_data, _recipe(steps=4, task="mpp"), tmp_path / "mpp"))
    vals = [e for e in found if isinstance(e, ev.Validation)]
    assert vals and 0.0 <= vals[-1].accuracy <= 1.0 and vals[-1].loss < 7.0  # ln 512 = 6.24 at chance
    assert "mpp_head" in torch.load(tmp_path / "mpp" / "training_state.pt", weights_only=True)
    pretrained = vit_explorer.load(str(tmp_path / "mpp")).model.state_dict()

    # fine-tune from it: every weight but the classifier comes from the MPP checkpoint
    fine = list(train(config, tiny_data, _recipe(steps=1, lr=1e-12, warmup=0.0), init=str(tmp_path / "mpp")))
    assert any(isinstance(e, ev.Notice) and "started from" in e.message for e in fine)
    tuned = fine[-1].model.state_dict()
    assert torch.allclose(tuned["blocks.0.attn.qkv.weight"], pretrained["blocks.0.attn.qkv.weight"], atol=1e-6)
