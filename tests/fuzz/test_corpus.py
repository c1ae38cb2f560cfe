"""Every light case of the corpus through the CLI in this process: exit 2, one line naming the file or
flag and the problem, no traceback, within seconds, nothing written or lost, no code run."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus import CASES
from runner import judge, snapshot

LIGHT = [case for case in CASES if not case.heavy]


@pytest.mark.parametrize("case", LIGHT, ids=[case.name for case in LIGHT])
def test_bad_input_is_refused_clearly(case, valid_sources: Path, tmp_path: Path) -> None:
    before = snapshot(valid_sources)
    assert judge(case, valid_sources, tmp_path) == []
    assert snapshot(valid_sources) == before
