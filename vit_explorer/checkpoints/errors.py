"""The error loaders raise (a message naming the file and what is wrong), and the warning they give."""

from ..errors import UserError


class CheckpointError(UserError):
    """A checkpoint or source that cannot be loaded; str(error) is a complete user-facing message."""


class CheckpointWarning(UserWarning):
    """Something found while loading that does not stop it (NaN weights); also in LoadedModel.warnings."""
