"""Hostile settings files: the app starts with the default for every value of the wrong type or out of range,
and with all defaults (saying which file it could not use, and why) when the file is a FIFO, a folder, a device,
too large, or holds a pickled Python object. Each case runs the app's start in a child with a timeout, with
XDG_CONFIG_HOME and HOME in a scratch folder: the user's own settings are never read or touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json
from vit_explorer.gui import settings, theme
from vit_explorer.gui.app import make_app
from vit_explorer.gui.main_window import MainWindow

app = make_app(["vit-explorer"])
window = MainWindow(None)  # reads the recent sources; torch and the views come later, with the event loop
normal = window.presentation.scale
window.presentation.presenting = True
print(json.dumps({"recent": window.recent_sources(), "theme": theme.chosen(), "scale": normal,
                  "presenting": window.presentation.scale, "presenting_default": window.presentation.default,
                  "export": settings.read_text("export_folder", "HOME"),
                  "problem": settings.problem()}))
"""
DEFAULTS = {"recent": [], "theme": "system", "scale": 1.0, "export": "HOME"}  # "presenting": the screen's (1.5 or 1.3)
INT_5 = r"@Variant(\0\0\0\x2\0\0\0\x5)"  # what QSettings writes for an int in a typed value
PICKLE = (r"@Variant(\0\0\0\x7f\0\0\0\x18PySide::PyObjectWrapper\0\0\0\0\x10\x80\x4\x95\x5\0\0\0\0\0\0\0\x43\x1"
          r"\xff\x94.)")  # what PySide writes for a bytes value: unpickled when read


@dataclass(frozen=True)
class Case:
    name: str  # "settings/what"
    make: Callable[[Path], None]  # writes the settings file(s) under a config folder
    expected: dict[str, Any] = field(default_factory=dict)  # what differs from DEFAULTS
    unsafe_file: bool = False  # the app must say it could not use the file


def conf(config: Path) -> Path:
    (config / "vit-explorer").mkdir(parents=True, exist_ok=True)
    return config / "vit-explorer" / "vit-explorer.conf"


def ini(**values: str) -> Callable[[Path], None]:
    def make(config: Path) -> None:
        conf(config).write_text("[General]\n" + "".join(f"{k}={v}\n" for k, v in values.items()))
    return make


def every_key(value: str) -> Callable[[Path], None]:
    return ini(recent_sources=value, theme=value, text_scale=value, presentation_text_scale=value, export_folder=value)


def raw(content: bytes) -> Callable[[Path], None]:
    return lambda config: conf(config).write_bytes(content)


def fifo(config: Path) -> None:
    os.mkfifo(conf(config))


def organization_fifo(config: Path) -> None:
    config.mkdir(parents=True, exist_ok=True)
    os.mkfifo(config / "vit-explorer.conf")  # QSettings also reads the organization's file


def folder(config: Path) -> None:
    conf(config).mkdir()


def dev_zero(config: Path) -> None:
    conf(config).symlink_to("/dev/zero")


CASES = [
    Case("settings/valid-values-are-kept", ini(recent_sources="/models/a, /models/b", theme="dark", text_scale="1.3",
                                               presentation_text_scale="2", export_folder="/exports"),
         {"recent": ["/models/a", "/models/b"], "theme": "dark", "scale": 1.3, "presenting": 2.0,
          "export": "/exports"}),
    Case("settings/no-file", lambda config: None),
    Case("settings/every-key-an-int", every_key(INT_5)),
    Case("settings/every-key-a-map", every_key(r"@Variant(\0\0\0\b\0\0\0\x1\0\0\0\x2\0\x61\0\0\0\x2\0\0\0\x1)")),
    Case("settings/every-key-a-rect", every_key("@Rect(1 2 3 4)")),
    Case("settings/every-key-bytes", every_key(r"@ByteArray(\xff\0)")),
    Case("settings/every-key-invalid", every_key("@Invalid()")),
    Case("settings/every-key-a-truncated-variant", every_key("@Variant("),  # QSettings reads it as that text
         {"recent": ["@Variant("], "export": "@Variant("}),
    Case("settings/every-key-an-unknown-type", every_key(r"@Variant(\0\0\0\x7f\0\0\0\x5junk)")),
    Case("settings/recent-sources-an-int", ini(recent_sources=INT_5)),
    Case("settings/recent-sources-invalid-items", ini(recent_sources="@Invalid(), @Rect(1 2 3 4)")),
    Case("settings/recent-sources-one-of-100k-characters", ini(recent_sources="s" * 100_000)),
    Case("settings/recent-sources-10000-items", ini(recent_sources=", ".join(f"/m/{i}" for i in range(10_000))),
         {"recent": [f"/m/{i}" for i in range(12)]}),
    Case("settings/theme-unknown", ini(theme="neon")),
    Case("settings/theme-of-100k-characters", ini(theme="t" * 100_000)),
    Case("settings/text-scale-nan", ini(text_scale="nan", presentation_text_scale="nan")),
    Case("settings/text-scale-inf", ini(text_scale="inf", presentation_text_scale="-inf")),
    Case("settings/text-scale-huge", ini(text_scale="1e308", presentation_text_scale="9" * 400)),
    Case("settings/text-scale-negative", ini(text_scale="-3", presentation_text_scale="0")),
    Case("settings/text-scale-text", ini(text_scale="large", presentation_text_scale="true")),
    Case("settings/text-scale-a-list", ini(text_scale="1, 2", presentation_text_scale="1.5, 2")),
    Case("settings/export-folder-a-list", ini(export_folder="/a, /b")),
    Case("settings/invalid-utf8", raw(b"[General]\ntheme=\xff\xfe\nrecent_sources=\xc3\x28\n")),
    Case("settings/nul-bytes", raw(b"[General]\ntheme=dark\0\nrecent_sources=\0\0\n")),
    Case("settings/utf8-bom", raw(b"\xef\xbb\xbf[General]\ntext_scale=@Rect(1 2 3 4)\n")),
    Case("settings/not-ini-at-all", raw(bytes(range(256)) * 8)),
    Case("settings/one-line-of-900k-characters", raw(b"[General]\nrecent_sources=" + b"r" * 900_000 + b"\n")),
    Case("settings/a-fifo", fifo, unsafe_file=True),
    Case("settings/the-organization-file-a-fifo", organization_fifo, unsafe_file=True),
    Case("settings/a-folder", folder, unsafe_file=True),
    Case("settings/a-link-to-dev-zero", dev_zero, unsafe_file=True),
    Case("settings/larger-than-1-MiB", raw(b"[General]\n" + b"k=v\n" * 300_000), unsafe_file=True),
    Case("settings/a-pickled-object", ini(theme=PICKLE), unsafe_file=True),
]


def test_case_names_are_unique_and_name_their_surface() -> None:
    names = [case.name for case in CASES]
    assert len(set(names)) == len(names) and all(name.startswith("settings/") for name in names)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_hostile_settings_file_starts_the_app_with_defaults(tmp_path: Path, case: Case) -> None:
    config = tmp_path / "config"
    case.make(config)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(config),
           "HOME": str(tmp_path)}
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, env=env,
                              cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("the app did not start within 60 s (a read that never ends)")
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    problem = seen.pop("problem")
    assert seen == {**DEFAULTS, "presenting": seen.pop("presenting_default"), **case.expected}
    if case.unsafe_file:
        assert str(config) in problem and "default settings" in problem, problem
    else:
        assert problem == "", problem
