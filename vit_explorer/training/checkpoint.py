"""Writing a run's folder so that a kill at any moment (SIGKILL included) leaves either a whole
checkpoint or a folder that refuses to load with a clear message, never the config of one run
beside the weights of another.

Each checkpoint is written whole into a private staging folder inside `out` (`.checkpoint-*.tmp`),
then moved into place by renames (each atomic: the staging folder is on the same filesystem):

1. the first checkpoint of a new run in a folder that held another run (`--overwrite`) removes
   that run's vit_explorer.json (the description that makes a folder loadable), and its training
   state when the new run keeps none;
2. training_state.pt, 3. model.safetensors, 4. vit_explorer.json.

A kill before 1 leaves the old run whole. Between 1 and 4 the folder has no description:
`vit-explorer OUT` says vit_explorer.json is missing, and `train --resume` continues from whichever
training state is there (both are whole files), rewriting the description. After 4 the new
checkpoint is whole. Within one run every checkpoint describes the same model, so a kill between
3 and 4 leaves new weights beside the previous checkpoint's description of the same architecture.
A failed write (a full disk) removes the staging folder and changes nothing in place. The next run
in the folder removes what a kill left behind (staging folders, `write_atomic` temporaries).
Power loss is another matter: the files are not fsync'ed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..checkpoints.native import CONFIG_NAME, WEIGHTS_NAME, save_native
from ..checkpoints.preprocess import Preprocess
from ..models import VisionTransformer
from .state import STATE_NAME

STAGING = (".checkpoint-", ".tmp")  # prefix and suffix of a staging folder
# what an interrupted write leaves: staging folders, and write_atomic's temporaries (.NAME.XXXXXXXX.tmp)
LEFTOVERS = (f"{STAGING[0]}*{STAGING[1]}", *(f".{name}.*.tmp" for name in (STATE_NAME, WEIGHTS_NAME, CONFIG_NAME)))


def remove_leftovers(out: Path) -> list[str]:
    """Remove what interrupted checkpoint writes left in `out`; the names removed."""
    removed = []
    for pattern in LEFTOVERS:
        for path in sorted(out.glob(pattern)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def write_checkpoint(out: Path, model: VisionTransformer, labels: list[str], preprocessing: Preprocess,
                     extra: dict[str, Any], state: dict[str, Any] | None, replaces_run: bool) -> None:
    """Write a native checkpoint (and the training state, unless None) into `out` as the module docstring
    describes; `replaces_run` for a run's first checkpoint. Raises OSError with nothing changed in place
    when the files cannot be written."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out, prefix=STAGING[0], suffix=STAGING[1]))
    try:
        names = [WEIGHTS_NAME, CONFIG_NAME]
        if state is not None:
            torch.save(state, staging / STATE_NAME)
            names.insert(0, STATE_NAME)
        save_native(staging, model, labels, preprocessing, extra)
        if replaces_run:
            (out / CONFIG_NAME).unlink(missing_ok=True)
            if state is None:  # an old state beside the new weights would --resume the old run over them
                (out / STATE_NAME).unlink(missing_ok=True)
        for name in names:
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
