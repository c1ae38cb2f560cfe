"""Test-wide settings: no network, headless Qt, one torch thread, a fixed seed."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread_and_seed() -> Iterator[None]:
    # Tiny models run fastest on one thread: with more, thread hand-offs cost more than the work,
    # and where test runs share two cores OpenMP spin-waiting slows them tenfold.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(before)
