"""transformer-attribution as the authors' code computes it: Chefer et al.'s Transformer-Explainability rolls out
each block's mean_heads((grad * R_A)+) with the identity added and no row normalisation (their
`compute_rollout_attention`, the normalisation line commented out; the paper's Eq. 13-14), on the same weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vit_explorer.explore import relevance as rel

from .test_relevance import _inputs


def compute_rollout_attention(all_layer_matrices: list[torch.Tensor], start_layer: int = 0) -> torch.Tensor:
    """A transcription of Transformer-Explainability's `baselines/ViT/ViT_explanation_generator.py`."""
    num_tokens = all_layer_matrices[0].shape[1]
    batch_size = all_layer_matrices[0].shape[0]
    eye = torch.eye(num_tokens).expand(batch_size, num_tokens, num_tokens).to(all_layer_matrices[0].device)
    all_layer_matrices = [all_layer_matrices[i] + eye for i in range(len(all_layer_matrices))]
    joint_attention = all_layer_matrices[start_layer]
    for i in range(start_layer + 1, len(all_layer_matrices)):
        joint_attention = all_layer_matrices[i].bmm(joint_attention)
    return joint_attention


@pytest.mark.parametrize("name", ["vit-s16", "deit-s-distilled"])
def test_transformer_attribution_is_the_authors_rollout_without_normalisation(name: str) -> None:
    session = rel.prepare(_inputs(name), rel.Target(index=1, head="cls" if "distilled" in name else "average"))
    done = rel.propagate(session.scorer, session.config)
    cams = [(g * r).clamp(min=0).mean(dim=1) for r, g in zip(done.attention, done.gradients, strict=True)]
    rollout = compute_rollout_attention(cams)  # (1, T, T)
    k = session.scorer.layout.num_prefix_tokens
    ref = rollout[0, 0, k:].reshape(session.scorer.layout.grid).numpy()  # generate_LRP: rollout[:, 0, 1:]
    ours = rel.relevance_map(session, "transformer-attribution")
    difference = np.abs(ours - ref).max() / np.abs(ref).max()
    assert difference <= 1e-6, f"max |diff| {difference:.3g} of the map's maximum"
