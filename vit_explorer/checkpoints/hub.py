"""Hugging Face Hub downloads (HF and timm repositories): only the files a loader reads, cached.

The cache is as hostile as any other file: what huggingface_hub reads from it (the ref naming the
commit, the commit's tree listing) is checked with the bounded readers first (regular files,
bounded size and JSON depth, a ref that is a commit hash), and the snapshot folder it returns must
lie inside the cache's snapshots/ folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import CheckpointError
from .files import MAX_JSON_BYTES, parse_json, read_bounded
from .weights import WEIGHT_NAMES

MAX_REF_BYTES = 1024  # a ref holds one 40-character commit hash
COMMIT = re.compile(r"[0-9a-f]{40}")  # what huggingface_hub writes into a ref


def download(repo_id: str, config_files: tuple[str, ...]) -> Path:
    """The snapshot folder holding `config_files` (those that exist) and one weights file.

    Honours HF_HUB_OFFLINE (then only the cache is read). Safetensors is preferred; the pickle is
    fetched only when the repository has no safetensors file.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    where = f"{repo_id} (no such local file or folder, so read as a hub id)"
    folder = None
    try:
        snapshots = check_cache(repo_id)
        for weights in WEIGHT_NAMES:
            folder = Path(snapshot_download(repo_id, allow_patterns=[*config_files, weights]))
            _check_inside(folder, snapshots)
            if (folder / weights).exists():
                return folder
    except LocalEntryNotFoundError:
        if constants.is_offline_mode():
            raise CheckpointError(f"{where}: offline (HF_HUB_OFFLINE is set) and this hub id is not in the "
                                  "local cache; connect once to download it, or give a local folder") from None
        raise CheckpointError(f"{where}: cannot reach the Hugging Face Hub and the id is not cached") from None
    except RepositoryNotFoundError:
        raise CheckpointError(f"{where}: no such repository on the Hugging Face Hub (or it is private/gated)") \
            from None
    except HFValidationError as error:
        raise CheckpointError(f"{where}: not a valid hub id ({error})") from None
    except (HfHubHTTPError, EntryNotFoundError, OSError) as error:
        raise CheckpointError(f"{where}: download failed ({error})") from None
    raise CheckpointError(f"{where}: the repository (snapshot {folder}) has neither "
                          f"{' nor '.join(WEIGHT_NAMES)}")


def check_cache(repo_id: str) -> Path:
    """Check the files huggingface_hub reads from the cache for `repo_id` (its ref `main`, the tree listings
    and the snapshot the ref names) before it reads them; the cache's snapshots/ folder for the repository.
    A CheckpointError names the file, what is wrong, and the way out."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import validate_repo_id

    validate_repo_id(repo_id)  # before the id becomes a path
    storage = Path(constants.HF_HUB_CACHE).expanduser().resolve() / repo_folder_name(repo_id=repo_id,
                                                                                     repo_type="model")
    snapshots = storage / "snapshots"
    try:
        ref = storage / "refs" / "main"
        if os.path.lexists(ref):
            text = read_bounded(ref, MAX_REF_BYTES, "hub cache ref").decode("utf-8", "replace")
            if not COMMIT.fullmatch(text):
                raise CheckpointError(f"{ref}: holds {text[:100]!r}, not a commit hash")
            if os.path.lexists(snapshots / text):
                _check_inside(snapshots / text, snapshots)
        trees = storage / "trees"
        if trees.is_dir() and not trees.is_symlink():
            for tree in sorted(trees.glob("*.json")):
                parse_json(read_bounded(tree, MAX_JSON_BYTES, "hub cache tree listing"), str(tree))
        elif os.path.lexists(trees):
            raise CheckpointError(f"{trees}: not a folder of the hub cache")
    except CheckpointError as error:
        raise CheckpointError(f"{error}; the hub cache is damaged: delete {storage} "
                              "(it is downloaded again when online)") from None
    return snapshots


def _check_inside(folder: Path, snapshots: Path) -> None:
    """Refuse a snapshot folder that leads outside the cache's `snapshots` folder (through a link)."""
    real = folder.resolve()
    if not real.is_relative_to(snapshots.resolve()):
        raise CheckpointError(f"{folder}: leads to {real}, outside the hub cache's {snapshots}; the hub cache is "
                              f"damaged: delete {snapshots.parent} (it is downloaded again when online)")
