"""One base of user errors and one protocol of long work: every exception class the package defines is a
UserError (but the unpickler's internal refusal, which it turns into a ValueError), whose message is shown alone,
never its class name, in the app and the CLI; a Job reports progress(share, what) and its check() raises Cancelled,
a UserError, once cancelled; a part of a job maps its shares into the whole's."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import threading

import pytest

import vit_explorer
from vit_explorer.errors import Cancelled, UserError, describe
from vit_explorer.jobs import Job

INTERNAL = {"vit_explorer.data.cifar.Refused"}  # raised and caught inside the CIFAR unpickler


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(vit_explorer.__path__, "vit_explorer."):
        if info.name.startswith(("vit_explorer.gui", "vit_explorer.__main__")):
            continue  # the app raises none of its own (and __main__ would open it)
        module = importlib.import_module(info.name)
        found += [obj for obj in vars(module).values() if inspect.isclass(obj) and issubclass(obj, Exception)
                  and not issubclass(obj, Warning) and obj.__module__ == module.__name__]
    return found


def test_every_error_the_package_defines_is_a_user_error() -> None:
    classes = {f"{c.__module__}.{c.__qualname__}": c for c in _exception_classes()}
    assert len(classes) >= 11  # the nine of before, the base and DeviceError
    assert {name for name, c in classes.items() if not issubclass(c, UserError)} == INTERNAL
    assert issubclass(Cancelled, UserError)


@pytest.mark.parametrize("cls", [c for c in _exception_classes() if issubclass(c, UserError)],
                         ids=lambda c: c.__name__)
def test_a_user_error_is_shown_as_its_message_alone(cls: type[UserError]) -> None:
    try:
        error = cls("the file x.json: field y must be a number")
    except TypeError:  # DataError and RecipeError take (field, problem)
        error = cls("y", "must be a number")
    assert cls.__name__ not in describe(error) and describe(error) == str(error)


def test_other_errors_keep_their_class_name_to_be_reported() -> None:
    assert describe(RuntimeError("boom")) == "RuntimeError: boom" and describe(KeyError()) == "KeyError"
    assert describe(FileNotFoundError(2, "No such file or directory", "x.png")).startswith("[Errno 2]")


def test_a_cli_error_names_no_class(capsys: pytest.CaptureFixture[str]) -> None:
    from vit_explorer.cli import main

    assert main(["predict", "no/such/folder/here.safetensors", "missing.png"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vit-explorer predict: error: ") and "Error:" not in err


def test_a_job_reports_shares_and_stops_when_cancelled() -> None:
    seen: list[tuple[float, str]] = []
    cancel = threading.Event()
    job = Job(lambda share, what: seen.append((share, what)), cancel)
    part = job.part(0.5, 1.0, "second half")
    part.progress(0.5)
    part.progress(2.0, "done")  # clipped
    job.check()
    assert seen == [(0.75, "second half"), (1.0, "done")]
    cancel.set()
    with pytest.raises(Cancelled):
        part.check()
    Job().progress(0.3)  # a plain call's job reports nowhere
