"""The README's batch-explanation example runs as written on the bundled model and gives what it says."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_batch_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Over a dataset, and a batch from Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    monkeypatch.chdir(ROOT)
    scope: dict[str, object] = {}
    exec(compile(code.group(1), "README.md", "exec"), scope)
    batch = scope["batch"]
    assert batch.relevance["gradcam"].shape == (4, 8, 8)  # type: ignore[attr-defined]
    deletion = batch.aucs("gradcam")["deletion"]  # type: ignore[attr-defined]
    assert deletion.shape == (4,) and np.isfinite(deletion).all()
    assert [t.index for t in batch.targets] == scope["labels"].tolist()  # type: ignore[attr-defined]
