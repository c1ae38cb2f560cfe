"""The README's hook-sites example runs as written, on the bundled model: cache a pass, zero-ablate a head
through hook_z, patch the residual stream, read a pattern's gradient through a backward hook."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_hook_example_runs_and_each_step_does_what_it_says(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Hook sites"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    monkeypatch.chdir(ROOT)
    scope: dict[str, object] = {}
    exec(compile(code.group(1), "README.md", "exec"), scope)
    logits, ablated, patched = scope["logits"], scope["ablated"], scope["patched"]
    assert isinstance(logits, torch.Tensor) and isinstance(ablated, torch.Tensor) and isinstance(patched, torch.Tensor)
    assert not torch.allclose(ablated, logits) and not torch.allclose(patched, logits)
    model, pixels = scope["model"], scope["pixels"]
    head_mask = torch.ones(model.config.num_blocks, model.config.num_heads)
    head_mask[2, 1] = 0
    with torch.no_grad():
        torch.testing.assert_close(ablated.detach(), model(pixels.detach(), head_mask=head_mask))
    grad = scope["grads"]["blocks.3.attn.hook_pattern"]
    assert grad.shape == scope["cache"]["blocks.2.attn.hook_pattern"].shape and grad.abs().sum() > 0
