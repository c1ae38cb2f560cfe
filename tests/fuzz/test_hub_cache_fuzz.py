"""A poisoned Hugging Face hub cache: each case breaks one file that huggingface_hub reads for an offline hub
id (the ref naming the commit, the commit's tree listing, the snapshot folder) and runs `predict HUB_ID`.
The outcome is always a refusal: exit status 2, one line naming the file and the problem, no traceback,
within seconds. `heavy` cases (a FIFO, /dev/zero) would hang or read without end if a guard failed, so they
run in a child process with a memory limit and a timeout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from runner import run

ROOT = Path(__file__).resolve().parents[2]
HUB_ID = "someone/tiny-vit"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "models--someone--tiny-vit"


@dataclass(frozen=True)
class HubCase:
    name: str  # "hub-cache/what"
    poison: Callable[[Path, Path], list[str]]  # (repository folder in the cache, scratch) -> fragments expected
    heavy: bool = False


def build_cache(cache: Path, valid: Path) -> Path:
    """A cache holding HUB_ID as huggingface_hub lays it out: refs/main -> commit, snapshots/<commit>/<files>,
    trees/<commit>.json listing them; the repository folder."""
    repo = cache / REPO
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(valid / "hf", snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "trees").mkdir()
    files = {p.name: {"size": p.stat().st_size, "blob_id": f"{i:040x}"}
             for i, p in enumerate(sorted(snapshot.iterdir()))}
    (repo / "trees" / f"{COMMIT}.json").write_text(json.dumps({"format_version": 1, "files": files}))
    return repo


def _ref(write: Callable[[Path], object]) -> Callable[[Path, Path], list[str]]:
    def poison(repo: Path, scratch: Path) -> list[str]:
        ref = repo / "refs" / "main"
        ref.unlink()
        write(ref)
        return [str(ref), "delete " + str(repo)]

    return poison


def _tree(write: Callable[[Path], object], *problem: str) -> Callable[[Path, Path], list[str]]:
    def poison(repo: Path, scratch: Path) -> list[str]:
        tree = repo / "trees" / f"{COMMIT}.json"
        tree.unlink()
        write(tree)
        return [str(tree), *problem, "delete " + str(repo)]

    return poison


def _elsewhere(repo: Path, scratch: Path) -> Path:
    """A valid model outside the cache, where a poisoned ref or link would lead."""
    return Path(shutil.copytree(repo / "snapshots" / COMMIT, scratch / "elsewhere"))


def _ref_outside(repo: Path, scratch: Path) -> list[str]:
    _elsewhere(repo, scratch)
    ref = repo / "refs" / "main"
    ref.write_text(os.path.relpath(scratch / "elsewhere", repo / "snapshots"))  # ../../../elsewhere
    return [str(ref), "not a commit hash"]


def _snapshot_link_outside(repo: Path, scratch: Path) -> list[str]:
    elsewhere = _elsewhere(repo, scratch)
    snapshot = repo / "snapshots" / COMMIT
    shutil.rmtree(snapshot)
    snapshot.symlink_to(elsewhere)
    return [str(snapshot), f"leads to {elsewhere}", "outside the hub cache"]


def _deep(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000)


def _sparse(size: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with path.open("wb") as f:
            f.truncate(size)

    return write


CASES = [
    HubCase("hub-cache/ref-outside-the-cache", _ref_outside),
    HubCase("hub-cache/ref-not-a-hash", _ref(lambda p: p.write_text("main\nand more"))),
    HubCase("hub-cache/ref-binary", _ref(lambda p: p.write_bytes(b"\xff\xfe\x00" * 10))),
    HubCase("hub-cache/ref-huge", _ref(_sparse(10 * 2**20))),
    HubCase("hub-cache/ref-is-a-folder", _ref(lambda p: p.mkdir())),
    HubCase("hub-cache/ref-fifo", _ref(os.mkfifo), heavy=True),
    HubCase("hub-cache/ref-dev-zero", _ref(lambda p: p.symlink_to("/dev/zero")), heavy=True),
    HubCase("hub-cache/snapshot-link-outside", _snapshot_link_outside),
    HubCase("hub-cache/tree-deep-json", _tree(_deep, "nested more than")),
    HubCase("hub-cache/tree-not-json", _tree(lambda p: p.write_text("{not json"), "not valid JSON")),
    HubCase("hub-cache/tree-huge", _tree(_sparse(2**31), "more than"), heavy=True),
    HubCase("hub-cache/tree-is-a-folder", _tree(lambda p: p.mkdir(), "a folder")),
    HubCase("hub-cache/tree-fifo", _tree(os.mkfifo, "named pipe"), heavy=True),
    HubCase("hub-cache/tree-dev-zero", _tree(lambda p: p.symlink_to("/dev/zero"), "character device"), heavy=True),
]

CHILD = """
import os, resource, sys
import torch  # what importing torch maps is not counted: the limit is on what the command allocates
from vit_explorer.cli import main
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (mapped + 2 * 2**30, resource.RLIM_INFINITY))
sys.exit(main(sys.argv[1:]))
"""


def _judge(status: int, err: str, fragments: list[str]) -> list[str]:
    lines = err.strip().splitlines()
    problems = [] if status == 2 else [f"exit status {status}, not 2"]
    if len(lines) != 1 or not lines[0].startswith("vit-explorer predict: error: "):
        problems.append(f"stderr is not one error line: {err[-2000:]!r}")
    elif missing := [f for f in fragments if f not in lines[0]]:
        problems.append(f"the message lacks {missing}: {lines[0][:600]!r}")
    return problems


@pytest.fixture
def cache(valid_sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import huggingface_hub.constants as constants

    cache = tmp_path / "cache"
    build_cache(cache, valid_sources)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_the_valid_cache_loads(cache: Path, valid_sources: Path) -> None:
    outcome = run(["predict", HUB_ID, str(valid_sources / "image.png"), "--json"])
    assert outcome.status == 0 and outcome.err == "", outcome.err
    assert json.loads(outcome.out)["source"] == HUB_ID


LIGHT = [case for case in CASES if not case.heavy]
HEAVY = [case for case in CASES if case.heavy]


@pytest.mark.parametrize("case", LIGHT, ids=[case.name for case in LIGHT])
def test_poisoned_cache_is_refused(case: HubCase, cache: Path, valid_sources: Path, tmp_path: Path) -> None:
    fragments = case.poison(cache / REPO, tmp_path)
    outcome = run(["predict", HUB_ID, str(valid_sources / "image.png")])
    assert _judge(outcome.status, outcome.err, fragments) == []
    assert outcome.seconds < 60


@pytest.mark.parametrize("case", HEAVY, ids=[case.name for case in HEAVY])
def test_poisoned_cache_is_refused_in_bounded_memory_and_time(case: HubCase, valid_sources: Path,
                                                              tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fragments = case.poison(build_cache(cache, valid_sources), tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, "predict", HUB_ID, str(valid_sources / "image.png")],
                          env=env, capture_output=True, text=True, timeout=120)  # a hang fails the test
    assert _judge(done.returncode, done.stderr, fragments) == []
