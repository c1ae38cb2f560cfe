"""The one error type loaders raise: a message naming the file and what is wrong."""


class CheckpointError(Exception):
    """A checkpoint or source that cannot be loaded; str(error) is a complete user-facing message."""
