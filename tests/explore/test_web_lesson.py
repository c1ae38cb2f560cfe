"""A lesson as one web page (explore/web_lesson.py): the JavaScript forward pass equals PyTorch's through node for
every bundled model and every step of every bundled lesson (logits, attention, class attention, rollout); the
page in headless Chromium, from file:// with every network request sent to a dead proxy, shows for every step the
prediction the app computes for it and follows its URL fragment; the file references nothing outside itself; text
from a lesson cannot break out of the page; a model too large is refused; presets are built seeded."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from vit_explorer.analysis.attention import class_rollout, rollout
from vit_explorer.checkpoints import load
from vit_explorer.cli import main
from vit_explorer.explore.forward import Inputs, Needs, run_forward
from vit_explorer.explore.lessons import LessonError, bundled_lessons, read_lesson
from vit_explorer.explore.web_lesson import (
    WEB,
    export_lesson,
    model_payload,
    open_step_image,
    page_data,
    render_page,
    script_json,
    unsupported,
)
from vit_explorer.paths import BUNDLED

TOLERANCE = 1e-5  # float32: the bound between the page's numbers and PyTorch's
NODE = shutil.which("node")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed (.ci/run installs it)")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)")

RUNNER = """
const F = require(process.argv[2]);
const fs = require("fs");
const job = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const out = job.runs.map((r) => {
  const m = job.models[r.model], img = job.images[r.image];
  const res = F.forward(m, F.decode(img.blob), img.height, img.width, { mask: r.mask, off: r.off });
  const heads = Object.fromEntries(Object.entries(res.heads).map(([k, v]) => [k, Array.from(v)]));
  return { logits: Array.from(res.logits), heads, attentions: res.blocks.map((b) => Array.from(b.probs)),
           class_attentions: res.classBlocks.map((b) => Array.from(b.probs)), rollout: Array.from(F.rollout(res)) };
});
fs.writeFileSync(process.argv[4], JSON.stringify(out));
"""


def run_node(tmp_path: Path, models: list[dict], images: dict, runs: list[dict]) -> list[dict]:
    """The page's forward pass (web/forward.js) under node, one result per run {model, image, mask, off}."""
    assert NODE is not None
    (tmp_path / "run.js").write_text(RUNNER)
    (tmp_path / "job.json").write_text(json.dumps({"models": models, "images": images, "runs": runs}))
    subprocess.run([NODE, str(tmp_path / "run.js"), str(WEB / "forward.js"), str(tmp_path / "job.json"),
                    str(tmp_path / "out.json")], check=True, timeout=600)
    return json.loads((tmp_path / "out.json").read_text())


def torch_pass(loaded, pixels: torch.Tensor, mask: np.ndarray, head_mask: np.ndarray) -> dict:
    with torch.inference_mode():
        out = loaded.model.forward_intermediates(pixels, mask=torch.from_numpy(mask.reshape(-1)),
                                                 head_mask=torch.from_numpy(head_mask),
                                                 capture=["attentions", "class_attentions"])
    layout = out["layout"]
    if out.get("class_attentions"):
        flow = class_rollout(out["class_attentions"], out["attentions"], layout)
    else:  # rollout from [CLS]; a model without one has none (the page says so)
        flow = rollout(out["attentions"], layout) if layout.num_prefix_tokens else None
    return {**out, "rollout": flow}


def assert_same(js: dict, ref: dict, where: str) -> float:
    """Every number of the JavaScript pass against PyTorch's; the largest difference."""
    diffs = [np.abs(np.asarray(js["logits"]) - ref["logits"][0].numpy()).max()]
    if ref["rollout"] is not None:
        diffs.append(np.abs(np.asarray(js["rollout"]) - ref["rollout"][0].numpy().reshape(-1)).max())
    diffs += [np.abs(np.asarray(js["heads"][name]) - value[0].numpy()).max()
              for name, value in ref["head_logits"].items()]
    assert len(js["attentions"]) == len(ref["attentions"]), where
    diffs += [np.abs(np.asarray(a) - b[0].numpy().reshape(-1)).max() for a, b in zip(js["attentions"],
                                                                                      ref["attentions"], strict=True)]
    diffs += [np.abs(np.asarray(a) - b[0].numpy().reshape(-1)).max()
              for a, b in zip(js["class_attentions"], ref.get("class_attentions", []), strict=True)]
    assert max(diffs) < TOLERANCE, f"{where}: the page's numbers differ from PyTorch's by {max(diffs):.2e}"
    return float(max(diffs))


@needs_node
@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_the_javascript_forward_equals_pytorch_on_every_bundled_model(tmp_path: Path, name: str) -> None:
    loaded = load(BUNDLED[name], device="cpu")
    cfg = loaded.config
    rng = np.random.default_rng(0)
    images = {}
    runs, refs = [], []
    for case, (share, off) in enumerate([(0.0, []), (0.3, [[0, 1], [cfg.depth - 1, cfg.num_heads - 1]])]):
        pixels = torch.from_numpy(rng.uniform(-1, 1, (1, 3, *cfg.image_size)).astype(np.float32))  # pixels' range
        mask = rng.random(cfg.grid_size) < share
        head_mask = np.ones((cfg.depth, cfg.num_heads), np.float32)
        for layer, head in off:
            head_mask[layer, head] = 0
        images[str(case)] = {"height": cfg.image_size[0], "width": cfg.image_size[1],
                             "blob": base64.b64encode(pixels[0].numpy().astype("<f4").tobytes()).decode("ascii")}
        runs.append({"model": 0, "image": str(case), "mask": np.flatnonzero(mask.reshape(-1)).tolist(), "off": off})
        refs.append(torch_pass(loaded, pixels, mask, head_mask))
    payload = model_payload(loaded, {cfg.grid_size}, name)
    for case, (js, ref) in enumerate(zip(run_node(tmp_path, [payload], images, runs), refs, strict=True)):
        assert_same(js, ref, f"{name}, case {case}")


@pytest.fixture(scope="module")
def bundled_pages() -> list[tuple[Path, dict, list, dict]]:
    """Every bundled lesson's page data, step states and models (built once)."""
    return [(path, *page_data(read_lesson(path))) for path in bundled_lessons()]


def app_prediction(state, models) -> tuple[np.ndarray, list[dict]]:
    """What the app computes for a step: its shared forward pass on the step's inputs (logits, top-k)."""
    loaded = models[state.model.key]
    inputs = Inputs(loaded, open_step_image(state.image), state.size, state.mask, state.head_mask, needs=Needs())
    result = run_forward(inputs)
    return result.logits.numpy(), loaded.top_k(result.logits, 5)


@needs_node
def test_the_javascript_forward_equals_pytorch_on_every_step_of_every_bundled_lesson(tmp_path: Path,
                                                                                      bundled_pages) -> None:
    worst = 0.0
    for path, data, states, models in bundled_pages:
        runs = [{"model": s["model"], "image": s["image"], "mask": s["mask"], "off": s["off"]} for s in data["steps"]]
        for index, (js, state) in enumerate(zip(run_node(tmp_path, data["models"], data["images"], runs), states,
                                                strict=True)):
            loaded = models[state.model.key]
            pixels = loaded.preprocessing.with_size(state.size)(open_step_image(state.image))
            worst = max(worst, assert_same(js, torch_pass(loaded, pixels, state.mask, state.head_mask),
                                           f"{path.name}, step {index + 1}"))
            logits, _ = app_prediction(state, models)
            assert np.abs(np.asarray(js["logits"]) - logits).max() < TOLERANCE, f"{path.name}, step {index + 1}"
    assert worst < TOLERANCE


def test_the_bundled_lesson_uses_what_the_page_must_show(bundled_pages) -> None:
    """The bundled lesson's steps have masks, heads off, a distilled model and CaiT: the tests above cover them."""
    _, data, states, _ = bundled_pages[0]
    configs = [m["config"] for m in data["models"]]
    assert any(s["mask"] for s in data["steps"]) and any(s["off"] for s in data["steps"])
    assert any(c["dist_head"] for c in configs) and any(c["class_attn_depth"] and c["talking_heads"]
                                                         and c["layer_scale"] for c in configs)
    assert any(c["stem"] == "conv" for c in configs) and any(not c["has_pos_embed"] for c in configs)
    assert sum(1 for s in states if s.mask.any()) == sum(1 for s in data["steps"] if s["mask"])


# ---------------------------------------------------------------------------------------------- the page itself
@pytest.fixture(scope="module")
def bundled_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("page") / "lesson.html"
    export_lesson(bundled_lessons()[0], out)
    return out


def page_state(page: Path, fragment: str = "") -> dict:
    """The page's data-state after it loaded in headless Chromium from file://, every network request sent to a
    closed port (no network)."""
    assert CHROMIUM is not None
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
                          "--virtual-time-budget=20000", "--dump-dom", page.as_uri() + fragment],
                         capture_output=True, text=True, timeout=180).stdout
    found = re.search(r'<body[^>]*\sdata-state="([^"]*)"', dom)
    assert found, f"no data-state in the page's DOM ({len(dom)} characters)"
    return json.loads(html.unescape(found.group(1)))


def dom_of(page: Path) -> str:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--proxy-server=http://127.0.0.1:9", "--virtual-time-budget=20000", "--dump-dom",
                           page.as_uri()], capture_output=True, text=True, timeout=180).stdout


def assert_prediction(state: dict, logits: np.ndarray, top: list[dict], where: str) -> None:
    assert np.abs(np.asarray(state["logits"]) - logits).max() < TOLERANCE, where
    assert [row["index"] for row in state["top_k"]] == [row["index"] for row in top], where
    assert [row["label"] for row in state["top_k"]] == [row["label"] for row in top], where
    assert np.abs(np.asarray([r["prob"] for r in state["top_k"]]) - [r["prob"] for r in top]).max() < TOLERANCE


@needs_chromium
@pytest.mark.slow
@pytest.mark.timeout(1200)  # one browser start per step: about 8 s each on a laptop
def test_the_page_shows_every_steps_prediction_as_the_app_computes_it(bundled_html: Path, bundled_pages) -> None:
    path, data, states, models = bundled_pages[0]
    lesson = read_lesson(path)
    for index, state in enumerate(states):
        shown = page_state(bundled_html, f"#step={index + 1}")
        where = f"step {index + 1}"
        assert shown["step"] == index + 1 and shown["title"] == data["steps"][index]["title"], where
        assert shown["model"] == data["models"][data["steps"][index]["model"]]["name"], where
        assert shown["mask"] == np.flatnonzero(state.mask.reshape(-1)).tolist(), where
        assert shown["off"] == np.argwhere(state.head_mask < 1).tolist(), where
        assert shown["input"] == ("query" if lesson.steps[index].input_mode == "query" else "mask"), where
        assert_prediction(shown, *app_prediction(state, models), where)


@needs_chromium
@pytest.mark.slow
def test_a_fragment_with_masks_and_heads_off_equals_the_librarys_forward(bundled_html: Path, bundled_pages) -> None:
    _, data, states, models = bundled_pages[0]
    index = next(i for i, s in enumerate(data["steps"]) if s["view"] == "Prediction")  # the [MASK] step
    shown = page_state(bundled_html, f"#step={index + 1}&mask=10,11,12&off=1:0,3:2")
    state = states[index]
    mask = np.zeros(state.mask.size, bool)
    mask[[10, 11, 12]] = True
    head_mask = np.ones_like(state.head_mask)
    head_mask[1, 0] = head_mask[3, 2] = 0
    loaded = models[state.model.key]
    with torch.inference_mode():
        logits = loaded.model(loaded.preprocessing.with_size(state.size)(open_step_image(state.image)),
                              mask=torch.from_numpy(mask), head_mask=torch.from_numpy(head_mask))[0]
    assert shown["mask"] == [10, 11, 12] and shown["off"] == [[1, 0], [3, 2]]
    assert_prediction(shown, logits.numpy(), loaded.top_k(logits, 5), "the fragment")


def test_the_page_references_nothing_outside_itself(bundled_html: Path) -> None:
    text = bundled_html.read_text(encoding="utf-8")
    assert not re.search(r"https?:", text, re.IGNORECASE)
    assert not re.search(r"\b(src|href)\s*=", text, re.IGNORECASE), "an element loads something"
    assert not re.search(r"url\(|@import|fetch\(|XMLHttpRequest|import\(", text)
    assert "default-src 'none'" in text  # and the browser is told to load nothing from anywhere
    assert bundled_html.stat().st_size < 16 * 2**20  # the bundled lesson's six classroom models: about 11.5 MB


def lesson_file(folder: Path, **step: object) -> Path:
    path = folder / "lesson.json"
    base = {"title": "t", "caption": "c", "model": "bundled:classroom-patchify", "image": "sample:star"}
    path.write_text(json.dumps({"format": "vit-explorer-lesson", "version": 1, "title": "A <b>lesson</b>",
                                "steps": [{**base, **step}]}))
    return path


CAPTION = "</script><script>document.title='owned'</script><!-- & <img src=x onerror=alert(1)>"


@needs_chromium
def test_text_from_a_lesson_is_shown_as_text_and_cannot_break_the_page(tmp_path: Path) -> None:
    out = tmp_path / "lesson.html"
    export_lesson(lesson_file(tmp_path, caption=CAPTION, title="<i>step</i>"), out)
    text = out.read_text(encoding="utf-8")
    assert "</script><script>document.title" not in text and "<img src=x" not in text
    assert text.count("</script>") == 3  # the data's, the forward pass's and the page's
    dom = dom_of(out)
    assert f'<p id="caption">{html.escape(CAPTION, quote=False)}</p>' in dom  # the caption as text, whole
    assert '<h2 id="step-title">&lt;i&gt;step&lt;/i&gt;</h2>' in dom
    assert "<title>A &lt;b&gt;lesson&lt;/b&gt;</title>" in dom and "owned" not in dom.split("<body")[0]
    assert page_state(out)["step"] == 1  # and the page runs


def test_script_json_holds_no_markup() -> None:
    text = script_json({"caption": CAPTION, "line": "a\u2028b"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"caption": CAPTION, "line": "a\u2028b"}


def test_a_model_too_large_for_a_page_is_refused_with_its_size_and_the_limit(tmp_path: Path) -> None:
    path = lesson_file(tmp_path, model="preset:vit-b16")
    with pytest.raises(LessonError, match=r"86,5\d\d,\d{3} parameters .* at most 4,000,000"):
        page_data(read_lesson(path))


def test_presets_are_built_seeded_so_an_export_is_deterministic(tmp_path: Path) -> None:
    path = lesson_file(tmp_path, model="preset:classroom-tiny")
    first, second, other = (page_data(read_lesson(path), seed)[0] for seed in (0, 0, 1))
    assert first["models"][0]["blob"] == second["models"][0]["blob"] != other["models"][0]["blob"]
    assert first["models"][0]["built"] and render_page(first) == render_page(second)


def test_the_command_writes_the_page_and_names_what_is_wrong(tmp_path: Path, capsys) -> None:
    lesson, out = lesson_file(tmp_path), tmp_path / "page.html"
    out.write_text("an older export")
    assert main(["export-lesson", str(lesson), "--out", str(out)]) == 0  # replaced
    assert "wrote" in capsys.readouterr().out and out.read_text(encoding="utf-8").startswith("<!doctype html>")
    assert main(["export-lesson", str(lesson), "--out", str(tmp_path)]) == 2  # a folder
    assert "not a file" in capsys.readouterr().err
    assert main(["export-lesson", str(tmp_path / "missing.json"), "--out", str(tmp_path / "x.html")]) == 2
    assert "missing.json" in capsys.readouterr().err


VARIANTS = {  # options of the model family the page's forward pass computes, beyond the bundled models'
    "gap-fc-norm": dict(prefix_tokens="none", pool="gap", fc_norm=True),
    "registers-sincos": dict(reg_tokens=2, pos_embed="sincos_2d", mlp="quick_gelu"),
    "deit-layerscale-talking": dict(prefix_tokens="cls+dist", layer_scale_init=0.1, talking_heads=True,
                                    mlp="gelu_tanh"),
    "cait": dict(class_attn_depth=2, pos_embed_prefix=False, layer_scale_init=0.1),
    "conv-no-pre-norm": dict(pre_norm=False, stem="conv"),
}


@needs_node
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_javascript_forward_equals_pytorch_on_the_options_it_supports(tmp_path: Path, name: str) -> None:
    from vit_explorer.explore.build import build_loaded
    from vit_explorer.models import PRESETS, ViTConfig

    torch.manual_seed(0)
    loaded = build_loaded(ViTConfig(**{**PRESETS["classroom-tiny"], **VARIANTS[name]}), device="cpu")
    for p in loaded.model.parameters():  # trained-like weights: every part matters (biases, norms, tokens)
        p.data.normal_(0, 0.3)
    assert not unsupported(loaded.config)
    cfg = loaded.config
    pixels = torch.randn(1, 3, *cfg.image_size)
    mask = np.zeros(cfg.grid_size, bool)
    mask[2, 3:6] = True
    head_mask = np.ones((cfg.depth + cfg.class_attn_depth, cfg.num_heads), np.float32)
    head_mask[-1, 0] = 0
    images = {"0": {"height": cfg.image_size[0], "width": cfg.image_size[1],
                    "blob": base64.b64encode(pixels[0].numpy().astype("<f4").tobytes()).decode("ascii")}}
    run = {"model": 0, "image": "0", "mask": np.flatnonzero(mask).tolist(), "off": [[len(head_mask) - 1, 0]]}
    (js,) = run_node(tmp_path, [model_payload(loaded, {cfg.grid_size}, name)], images, [run])
    assert_same(js, torch_pass(loaded, pixels, mask, head_mask), name)


def test_what_the_page_cannot_compute_is_refused_by_name() -> None:
    from vit_explorer.models import PRESETS, ViTConfig

    assert any("rope" in p for p in unsupported(ViTConfig(**{**PRESETS["classroom"], "pos_embed": "rope"})))
    assert any("swiglu" in p for p in unsupported(ViTConfig(**{**PRESETS["classroom"], "mlp": "swiglu"})))
