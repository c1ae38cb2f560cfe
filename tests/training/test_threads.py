"""CPU threads of a training run: measured by the train command by default (torch's one per core learned nothing on
a busy 2-core PC, one thread made 1.7x fewer steps than two on an idle one), one in the app, a number or `auto`
when asked, said when the run starts, by the command and the app alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vit_explorer.cli import main
from vit_explorer.models import preset
from vit_explorer.training import threads

TINY = ["--preset", "classroom-tiny", "--image-size", "16", "--train-size", "64", "--val-size", "32",
        "--batch-size", "16", "--device", "cpu"]


@pytest.fixture(autouse=True)
def _threads_back(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_cpu_run_measures_the_threads_by_default_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The train command measures a few steps at 1 .. min(cores, 4) threads and takes the fastest (on an idle
    2-core PC two threads made 1.7x the steps of one, on a busy one a tenth); the app keeps one thread."""
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "measure", lambda config, batch, counts: {1: 11.8, 2: 20.5})
    assert main(["train", *TINY, "--steps", "2", "--out", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr().out
    assert "training on 2 CPU threads (auto, the default: the fastest measured here, steps/s 1: 11.8, 2: 20.5" in \
        printed and torch.get_num_threads() == 2
    monkeypatch.setattr(threads, "measure", lambda config, batch, counts: {1: 5.2, 2: 0.8})
    assert main(["train", *TINY, "--steps", "2", "--out", str(tmp_path / "busy")]) == 0
    assert "training on 1 CPU thread (auto, the default" in capsys.readouterr().out and torch.get_num_threads() == 1
    assert threads.choose(None, preset("classroom-tiny"), 8, "cpu").threads == threads.DEFAULT == 1  # the app's


def test_threads_as_given_on_the_command_line_or_in_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *TINY, "--steps", "1", "--threads", "2", "--out", str(tmp_path / "a")]) == 0
    assert "training on 2 CPU threads (--threads 2)" in capsys.readouterr().out and torch.get_num_threads() == 2
    monkeypatch.setenv(threads.ENV, "1")
    assert main(["train", *TINY, "--steps", "1", "--out", str(tmp_path / "b")]) == 0
    assert f"training on 1 CPU thread ({threads.ENV} 1)" in capsys.readouterr().out


def test_auto_measures_and_takes_the_fastest_within_the_tie(monkeypatch: pytest.MonkeyPatch) -> None:
    config = preset("classroom-tiny", image_size=16)
    rates = threads.measure(config, 8, [1, 2], steps=1)
    assert set(rates) == {1, 2} and all(rate > 0 for rate in rates.values())
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(threads, "measure", lambda config, batch, counts: {1: 10.0, 2: 10.5, 3: 30.0, 4: 31.0})
    choice = threads.choose("auto", config, 8, "cpu")
    assert choice.threads == 3 and "auto: the fastest measured here" in choice.reason  # 3 within 10 % of 4
    monkeypatch.setattr(threads, "measure", lambda config, batch, counts: {1: 10.0, 2: 10.5, 3: 3.0, 4: 1.0})
    assert threads.choose("auto", config, 8, "cpu").threads == 1


def test_a_gpu_run_leaves_the_threads_and_a_bad_setting_is_named(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = preset("classroom-tiny")
    assert threads.choose(None, config, 8, "cuda").threads is None
    monkeypatch.setenv(threads.ENV, "many")
    with pytest.raises(threads.ThreadsError, match=f"{threads.ENV}: 'many' is not a number of threads"):
        threads.choose(None, config, 8, "cpu")
    with pytest.raises(SystemExit):
        main(["train", *TINY, "--threads", "0", "--out", "unused"])
    assert "--threads: '0' is not a number of threads" in capsys.readouterr().err
