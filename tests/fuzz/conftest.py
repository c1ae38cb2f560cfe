"""The fuzz suite imports its corpus as plain modules (tests/ is not a package) and builds the valid
sources that cases break once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def valid_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from corpus import build_valid

    return build_valid(tmp_path_factory.mktemp("fuzz-valid"))
