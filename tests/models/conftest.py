"""Tiny models run fastest on one thread: with more, thread hand-offs cost more than the work,
and on a busy 2-core machine they can slow a test tenfold."""

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
