"""Hugging Face Hub downloads (HF and timm repositories): only the files a loader reads, cached."""

from __future__ import annotations

from pathlib import Path

from .errors import CheckpointError
from .weights import WEIGHT_NAMES


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
        for weights in WEIGHT_NAMES:
            folder = Path(snapshot_download(repo_id, allow_patterns=[*config_files, weights]))
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
