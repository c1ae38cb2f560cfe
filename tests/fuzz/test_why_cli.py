"""Issue 12's "Why" list, the command-line side (predict, inspect, convert): one-line errors for bad
flags, strict JSON, NaN weights reported, a full disk during convert. Public interface only (the
CLI), so these run against older code too, where they fail."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from runner import run
from safetensors.torch import load_file, save_file


def one_line_error(argv: list[str], *fragments: str) -> str:
    outcome = run(argv)
    lines = outcome.err.strip().splitlines()
    assert outcome.status == 2, outcome
    assert len(lines) == 1 and lines[0].startswith(f"vit-explorer {argv[0]}: error: "), outcome.err
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]


@pytest.mark.parametrize("device", ["foo", "meta", "cuda:99"] + ([] if torch.cuda.is_available() else ["cuda"]))
@pytest.mark.parametrize("command", ["predict", "inspect"])
def test_bad_devices_are_one_line_errors(valid_sources: Path, tmp_path: Path, device: str, command: str) -> None:
    source, image = str(valid_sources / "native"), str(valid_sources / "image.png")
    argv = [command, source, image] if command == "predict" else [command, source, "--out", str(tmp_path / "o")]
    one_line_error([*argv, "--device", device], "--device", repr(device))
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("k", ["0", "-3"])
def test_top_k_below_one_is_a_usage_error(valid_sources: Path, k: str) -> None:
    one_line_error(["predict", str(valid_sources / "native"), str(valid_sources / "image.png"), "--top-k", k],
                   "--top-k")


def _nan_native(valid_sources: Path, tmp_path: Path, tensor: str = "head.weight") -> Path:
    import shutil

    folder = Path(shutil.copytree(valid_sources / "native", tmp_path / "nan"))
    state = load_file(folder / "model.safetensors")
    state[tensor][:] = float("nan")
    save_file(state, folder / "model.safetensors")
    return folder


def test_predict_json_is_strict_and_nan_weights_are_reported(valid_sources: Path, tmp_path: Path) -> None:
    folder = _nan_native(valid_sources, tmp_path)
    outcome = run(["predict", str(folder), str(valid_sources / "image.png"), "--json"])
    assert outcome.status == 0

    def refuse(constant: str) -> None:
        raise ValueError(f"bare {constant} is not JSON")

    result = json.loads(outcome.out, parse_constant=refuse)
    assert result["logits"] == [None] * 7 and all(row["prob"] is None for row in result["top_k"])
    (warning,) = outcome.err.strip().splitlines()
    assert warning.startswith("vit-explorer predict: warning: ") and "head.weight" in warning


def test_inspect_reports_nan_weights(valid_sources: Path, tmp_path: Path) -> None:
    folder = _nan_native(valid_sources, tmp_path)
    outcome = run(["inspect", str(folder), "--out", str(tmp_path / "report")])
    warnings = [line for line in outcome.err.splitlines() if "warning:" in line]
    assert warnings and warnings[0].startswith("vit-explorer inspect: warning: ") and "head.weight" in warnings[0]


def test_inspect_with_nan_in_a_block_writes_what_it_can(valid_sources: Path, tmp_path: Path) -> None:
    """NaN before the head makes every token NaN: the figures that need numbers are skipped, and said so."""
    folder = _nan_native(valid_sources, tmp_path, "blocks.0.mlp.fc1.weight")
    outcome = run(["inspect", str(folder), "--out", str(tmp_path / "report")])
    assert outcome.status == 0 and "Traceback" not in outcome.err
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert any(w.startswith("pca_features.png not written: ") and "finite" in w for w in summary["warnings"])
    assert not (tmp_path / "report" / "pca_features.png").exists() and summary["pca_images"] == []
    assert (tmp_path / "report" / "attention_layers.png").is_file()


def test_a_decompression_bomb_is_a_one_line_error(valid_sources: Path, tmp_path: Path) -> None:
    from PIL import Image

    bomb = tmp_path / "bomb.png"
    Image.new("1", (20_000, 10_000)).save(bomb)  # 200 megapixels, a few kB on disk
    one_line_error(["predict", str(valid_sources / "native"), str(bomb)], str(bomb), "pixels")


def test_convert_on_a_full_disk_is_one_line_and_leaves_nothing(valid_sources: Path, tmp_path: Path) -> None:
    """A file-size limit makes the weights write fail as a full disk would; the retry then works."""
    code = textwrap.dedent(f"""
        import json, resource, signal, sys
        from pathlib import Path
        from vit_explorer.cli import main
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead of killing us
        out, statuses = Path({str(tmp_path / "out")!r}), []
        for to in ("native", "hf"):
            resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))
            statuses.append(main(["convert", {str(valid_sources / "hf")!r}, "--to", to, "--out", str(out)]))
            statuses.append(sorted(p.name for p in out.parent.iterdir()))
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            statuses.append(main(["convert", {str(valid_sources / "hf")!r}, "--to", to, "--out", str(out)]))
            import shutil; shutil.rmtree(out)
        print(json.dumps(statuses))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [2, [], 0, 2, [], 0], result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 2 and all(e.startswith("vit-explorer convert: error: ") for e in errors), result.stderr
    assert "Traceback" not in result.stderr
