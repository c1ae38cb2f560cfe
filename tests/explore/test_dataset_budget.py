"""The dataset analyses' one budget (explore/budget.py), checked before any work: the features every image keeps
and the pixels a built-in set draws, against the memory free here; the refusal names the figure and the largest
--limit that fits, and nothing has run (no batch, no progress)."""

from __future__ import annotations

import pytest

from vit_explorer.checkpoints import load
from vit_explorer.checkpoints.memory import BudgetError
from vit_explorer.explore import budget
from vit_explorer.explore import dataset as D
from vit_explorer.jobs import Job
from vit_explorer.paths import BUNDLED_MODEL


def test_features_that_would_not_fit_are_refused_before_the_first_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = load(str(BUNDLED_MODEL))
    source = D.open_source("shapes", limit=40)
    each = budget.feature_bytes(loaded.config, D.PATCHES_PER_IMAGE)
    monkeypatch.setattr(budget, "available_bytes", lambda device: 2 * 25 * each)  # room for 25 images' features
    batches: list[float] = []
    with pytest.raises(BudgetError) as error:
        D.extract(loaded, source, job=Job(lambda share, what: batches.append(share)))
    message = str(error.value)
    assert message.startswith("--data shapes: the features (") and "of 40 images need about" in message, message
    assert "use --limit 25 or fewer" in message and batches == []
    assert len(D.extract(loaded, source.subset(list(range(25))), batch_size=25).cls[0]) == 25  # 25 fit


def test_a_built_in_set_too_large_is_refused_before_it_is_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[int] = []
    monkeypatch.setattr(D.synthetic, "generate", lambda n, **kwargs: drawn.append(n))
    monkeypatch.setattr(budget, "available_bytes", lambda device: 2 * 100 * budget.pixel_bytes(D.BUILTIN_SIDE))
    with pytest.raises(BudgetError, match=r"--data where: the pixels of 101 images .* use --limit 100 or fewer"):
        D.open_source("where", limit=101)
    assert drawn == []
