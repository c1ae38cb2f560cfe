"""Every command that opens a model takes the same model options (--device where it runs one, --arch, --dtype),
declared once (checkpoints/arguments.py), and hands them to `load`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import vit_explorer.checkpoints as checkpoints
from vit_explorer import cli


class Opened(Exception):
    """Raised by the stand-in for `load`, with what it was asked."""


COMMANDS = {  # the command line of each, before the model options
    "predict": ["predict", "SRC", "IMG"],
    "inspect": ["inspect", "SRC", "--image", "IMG", "--out", "OUT"],
    "convert": ["convert", "SRC", "--to", "native", "--out", "OUT"],
    "explain": ["explain", "SRC", "IMG", "--method", "rollout"],
    "components": ["components", "SRC", "IMG"],
    "patch": ["patch", "SRC", "IMG", "mask", "--masked", "0"],
    "embed": ["embed", "SRC", "--data", "shapes", "--out", "OUT"],
    "probe": ["probe", "SRC", "--data", "shapes", "--out", "OUT"],
    "cka": ["cka", "SRC", "--data", "shapes", "--out", "OUT"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_hands_its_model_options_to_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      command: str) -> None:
    image = tmp_path / "image.png"
    Image.new("RGB", (32, 32), "white").save(image)
    asked: dict[str, Any] = {}

    def load(source: str, **options: Any) -> None:
        asked.update(options, source=source)
        raise Opened

    monkeypatch.setattr(checkpoints, "load", load)
    words = [{"SRC": "some/model", "IMG": str(image), "OUT": str(tmp_path / "out")}.get(w, w)
             for w in COMMANDS[command]]
    device = [] if command == "convert" else ["--device", "cpu"]
    with pytest.raises(Opened):
        cli.main([*words, "--arch", "vit_tiny_patch16_224", "--dtype", "float64", *device])
    assert asked["source"] == "some/model"
    assert (asked["arch"], asked["dtype"], asked["device"]) == ("vit_tiny_patch16_224", "float64", "cpu")


def test_the_dtype_is_one_of_those_load_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["explain", "some/model", "image.png", "--dtype", "int8"])
    assert "--dtype: invalid choice: 'int8'" in capsys.readouterr().err
