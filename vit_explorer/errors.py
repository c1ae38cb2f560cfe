"""The one base of the errors a user causes and can fix (a file, a flag, a setting, a budget) or asked for (a
cancel): the app and the CLI show such an error's message alone, never its class name."""

from __future__ import annotations


class UserError(Exception):
    """A problem with what the user gave or did; str(error) is a complete message that says what to change."""


class Cancelled(UserError):
    """Work stopped because the user (or a newer request for the same work) cancelled it."""


def describe(error: BaseException) -> str:
    """One readable line for an exception: a user error's (and a file's or a value's) message alone; anything
    else, which is a bug or the platform's, with its class name so that it can be reported."""
    text = str(error).strip()
    if isinstance(error, (UserError, OSError, ValueError)) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
