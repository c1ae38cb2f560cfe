"""Sparse autoencoders over a dataset's tokens: gather a state's tokens, train (resumable), measure (FVU, L0, dead
features, logit recovered) and score each feature against the built-in data's known factors.

The tokens of one state (0 the embedded input, i the output of block i - 1) come from the named hook site of that
state (`analysis.sae.state_site`); `store_tokens(...)` reads them from a feature store (explore/store.py, what the
`sae` command trains on, memory-mapped), `tokens(...)` gathers a few images' in memory (the app's browser).

logit recovered = 1 - (CE_recon - CE_clean) / (CE_zero - CE_clean): the cross-entropy of the labels (the clean
prediction where the data has none) when the state's tokens of the trained kind (patch tokens, or [CLS]) are
replaced by their reconstruction, against replacing them by zeros (Bricken et al. 2023; 1 is perfect, 0 no better
than zero-ablation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..analysis import sae as S
from ..checkpoints import LoadedModel
from ..data import synthetic
from ..errors import UserError
from ..jobs import Job
from . import dataset as D
from . import store

TOKEN_KINDS = ("patch", "cls")
GRID = 3  # position factor: the 3x3 cell of the shape's centre
HUES = 6  # colour factor: the hue sextant of the shape's mean colour


def _token_slice(loaded: LoadedModel, kind: str) -> slice:
    p = loaded.model.layout().num_prefix_tokens
    if kind == "cls":
        if not D.readout_states(loaded):
            raise ValueError("this model's token states hold no [CLS]; use --tokens patch")
        return slice(0, 1)
    return slice(p, None)


def check_state(loaded: LoadedModel, state: int) -> None:
    depth = loaded.config.depth
    if not 0 <= state <= depth:
        raise ValueError(f"argument --state: must be 0..{depth} (0 the embedded input, {depth} the last block's "
                         f"output), got {state}")


def tokens(loaded: LoadedModel, source: D.DatasetSource, state: int, kind: str, *, batch_size: int = 64,
           job: Job | None = None) -> tuple[np.ndarray, list[int]]:
    """(tokens (images, t, d) float32 of one state and kind, the indices of the images kept)."""
    job = job or Job()
    check_state(loaded, state)
    keep = _token_slice(loaded, kind)
    site = S.state_site(state)
    out, kept = [], []
    for indices, pixels, _ in D._batches(source, loaded, batch_size, job, np.arange(len(source))):
        if pixels is None:
            continue
        with torch.no_grad():
            _, cache = loaded.model.run_with_cache(pixels.to(loaded.device, loaded.dtype), names_filter=[site])
        out.append(cache[site][:, keep].float().cpu().numpy())  # (B, t, d)
        kept += indices
        job.progress(len(kept) / len(source), "tokens")
    if not out:
        raise ValueError("no image of the data could be read")
    return np.concatenate(out), kept


def store_tokens(loaded: LoadedModel, source: D.DatasetSource, path: str | Path, state: int, kind: str, *,
                 job: Job | None = None) -> tuple[np.ndarray, list[int]]:
    """(tokens (images x t, d) float32 of one state and kind, image-major, the source positions of the images kept),
    read from the feature store at `path` (explore/store.py), which embeds first what it does not hold yet (resuming
    an interrupted run; a new store keeps this state and kind only). Where the store holds exactly these images the
    tokens are its memory map, so training reads them from disk batch by batch; else the rows of these images."""
    check_state(loaded, state)
    _token_slice(loaded, kind)  # a [CLS] the model's states do not hold is refused before any work
    new = not (Path(path) / store.MANIFEST).is_file()
    held = store.write_store(loaded, source, path, states=[state] if new else None, kinds=[kind] if new else None,
                             job=job)
    where = {image_id: i for i, image_id in enumerate(D.image_ids(source))}
    images = held.manifest["images"]
    positions = [where.get(images[i]["id"]) for i in held.image_index()]
    rows = [r for r, position in enumerate(positions) if position is not None]
    if not rows:
        raise ValueError("no image of the data could be read")
    kept = [int(positions[r]) for r in rows]  # type: ignore[arg-type]
    if len(rows) == len(held):
        return held.tokens(state, kind), kept
    per = held.patches if kind == "patch" else 1
    return held.rows((np.asarray(rows)[:, None] * per + np.arange(per)).reshape(-1), state, kind), kept


@dataclass
class Training:
    """What training wrote down: the loss per step, FVU and L0 on each step's batch."""

    step: int = 0
    loss: list[float] = field(default_factory=list)
    fvu: list[float] = field(default_factory=list)
    l0: list[float] = field(default_factory=list)


def batches(x: np.ndarray, batch_size: int, steps: int, seed: int, start: int = 0) -> Iterator[torch.Tensor]:
    """Batches (batch_size, d) of a seeded shuffle of x (n, d), epoch after epoch, from step `start` to `steps`."""
    per_epoch = max(1, len(x) // batch_size)
    order = None
    for step in range(start, steps):
        epoch, i = divmod(step, per_epoch)
        if order is None or i == 0:
            order = np.random.default_rng((seed, epoch)).permutation(len(x))
        yield torch.from_numpy(x[order[i * batch_size:(i + 1) * batch_size]])


def fit(sae: S.SAE, x: np.ndarray, *, steps: int, batch_size: int = 1024, lr: float = 1e-3, seed: int = 0,
        device: torch.device | str = "cpu", checkpoint: Path | None = None, every: int = 200,
        job: Job | None = None) -> Training:
    """Train the SAE on tokens x (n, d) with Adam for `steps` batches, resuming from `checkpoint` when it exists
    and saving to it every `every` steps; the job hears each step and may cancel between them."""
    job = job or Job()
    sae.to(device)
    optimiser = torch.optim.Adam(sae.parameters(), lr=lr)
    log = Training()
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, map_location=device, weights_only=True)
        sae.load_state_dict(state["sae"])
        optimiser.load_state_dict(state["optimiser"])
        log = Training(int(state["step"]), *[list(map(float, state[k])) for k in ("loss", "fvu", "l0")])

    def save() -> None:
        if checkpoint is not None:
            torch.save({"sae": sae.state_dict(), "optimiser": optimiser.state_dict(), "step": log.step,
                        "loss": log.loss, "fvu": log.fvu, "l0": log.l0}, checkpoint)

    sae.train()
    if log.step == 0:  # start the bias at the data's mean, as Gao et al. do (geometric median there)
        with torch.no_grad():
            sae.b_dec.copy_(torch.from_numpy(x[: 100_000].mean(0)).to(device))
    for batch in batches(x, batch_size, steps, seed, log.step):
        job.check()
        batch = batch.to(device)
        optimiser.zero_grad()
        loss = sae.loss(batch)
        torch.autograd.backward(loss)
        optimiser.step()
        with torch.no_grad():
            z, x_hat = sae(batch)
        log.step += 1
        log.loss.append(float(loss.detach()))
        log.fvu.append(S.fvu(batch, x_hat))
        log.l0.append(float((z > 0).sum(1).float().mean()))
        job.progress(log.step / steps, f"step {log.step}/{steps}")
        if log.step % every == 0:
            save()
    sae.normalise_decoder()
    save()
    sae.eval()
    return log


@torch.no_grad()
def codes(sae: S.SAE, x: np.ndarray, batch_size: int = 8192) -> np.ndarray:
    """Codes (n, m) float32 of tokens x (n, d), in evaluation mode."""
    device = sae.W_enc.device
    return np.concatenate([sae.encode(torch.from_numpy(x[s:s + batch_size]).to(device)).cpu().numpy()
                           for s in range(0, len(x), batch_size)])


@torch.no_grad()
def measure(sae: S.SAE, x: np.ndarray, batch_size: int = 8192) -> tuple[dict[str, float], np.ndarray]:
    """({fvu, l0 (mean active features per token), dead_fraction (never active on x)}, frequency (m,))."""
    device = sae.W_enc.device
    err = var = 0.0
    active = np.zeros(sae.width)
    l0 = 0.0
    mean = torch.from_numpy(x.mean(0)).to(device)
    for s in range(0, len(x), batch_size):
        xb = torch.from_numpy(x[s:s + batch_size]).to(device)
        z, x_hat = sae(xb)
        err += float((xb - x_hat).square().sum())
        var += float((xb - mean).square().sum())
        on = z > 0
        active += on.sum(0).cpu().numpy()
        l0 += float(on.sum())
    frequency = active / len(x)
    return {"fvu": err / max(var, 1e-12), "l0": l0 / len(x), "dead_fraction": float((active == 0).mean())}, frequency


def _replace(sae: S.SAE, keep: slice, how: str) -> Callable[[torch.Tensor, object], torch.Tensor]:
    def hook(x: torch.Tensor, _site: object) -> torch.Tensor:
        x = x.clone()
        part = x[:, keep]  # (B, t, D)
        if how == "zero":
            x[:, keep] = 0
        else:
            flat = part.reshape(-1, part.shape[-1]).to(sae.W_enc.dtype)
            x[:, keep] = sae(flat)[1].reshape(part.shape).to(x.dtype)
        return x
    return hook


@torch.no_grad()
def logit_recovered(loaded: LoadedModel, source: D.DatasetSource, sae: S.SAE, state: int, kind: str, *,
                    batch_size: int = 64, job: Job | None = None) -> dict[str, float]:
    """CE clean, with the reconstruction, with zeros, and the share recovered (see the module doc)."""
    job = job or Job()
    keep = _token_slice(loaded, kind)
    site = S.state_site(state)
    sums = {"clean": 0.0, "recon": 0.0, "zero": 0.0}
    n = 0
    for indices, pixels, _ in D._batches(source, loaded, batch_size, job, np.arange(len(source))):
        if pixels is None:
            continue
        pixels = pixels.to(loaded.device, loaded.dtype)
        clean = loaded.model(pixels).float()
        labels = torch.as_tensor(source.labels[indices], device=clean.device)
        target = labels if source.labelled and int(labels.max()) < clean.shape[1] else clean.argmax(1)
        for name, logits in (("clean", clean),
                             ("recon", loaded.model.run_with_hooks(pixels, fwd_hooks=[(site, _replace(sae, keep,
                                                                                                       "recon"))])),
                             ("zero", loaded.model.run_with_hooks(pixels, fwd_hooks=[(site, _replace(sae, keep,
                                                                                                      "zero"))]))):
            sums[name] += float(torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum"))
        n += len(indices)
        job.progress(n / len(source), "logit recovered")
    ce = {k: v / max(n, 1) for k, v in sums.items()}
    gap = ce["zero"] - ce["clean"]
    recovered = 1 - (ce["recon"] - ce["clean"]) / gap if abs(gap) > 1e-12 else math.nan
    return {"ce_clean": ce["clean"], "ce_recon": ce["recon"], "ce_zero": ce["zero"], "logit_recovered": recovered}


# ground truth on the built-in data


def factors(loaded: LoadedModel, source: D.DatasetSource, kept: list[int], kind: str, seed: int = 0
            ) -> dict[str, np.ndarray]:
    """Per token (images * t,) binary targets named 'factor=value' of the built-in data's known factors: the object
    mask per patch (patch tokens only), the shape class ('shapes'), the colour (hue sextant of the shape's mean
    colour) and the position (3x3 cell of the shape's centre), each repeated over the image's tokens."""
    if source.name not in synthetic.VARIANTS or source.pixels is None:
        raise ValueError("the known factors exist only for the built-in data (shapes, where)")
    n_all = len(source)
    side = source.pixels.shape[-1]
    masks = synthetic.object_masks(n_all, seed=seed, size=side, variant=source.name, split="val")[kept]  # (n, S, S)
    pixels = source.pixels[kept].float() / 255  # (n, 3, S, S)
    m = masks.float()
    area = m.sum((1, 2)).clamp_min(1)
    colour = (pixels * m[:, None]).sum((2, 3)) / area[:, None]  # (n, 3)
    hue = _hue(colour.numpy())
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    cy = (m * ys).sum((1, 2)) / area
    cx = (m * xs).sum((1, 2)) / area
    cell = (cy * GRID / side).long().clamp(0, GRID - 1) * GRID + (cx * GRID / side).long().clamp(0, GRID - 1)
    per_image: dict[str, np.ndarray] = {}
    if source.name == "shapes":
        for c, name in enumerate(synthetic.SHAPES):
            per_image[f"shape={name}"] = source.labels[kept] == c
    for c in range(HUES):
        per_image[f"colour=hue{c * 360 // HUES}"] = hue == c
    for c, name in enumerate(synthetic.WHERE):
        per_image[f"position={name}"] = cell.numpy() == c
    layout = loaded.model.layout()
    t = 1 if kind == "cls" else layout.num_patches
    out = {k: np.repeat(v, t) for k, v in per_image.items() if v.any() and not v.all()}
    if kind == "patch":
        gh, gw = layout.grid
        cover = torch.nn.functional.adaptive_avg_pool2d(m[:, None], (gh, gw))[:, 0]  # (n, gh, gw) share on shape
        out["object"] = (cover >= 0.5).reshape(-1).numpy()
    return out


def _hue(rgb: np.ndarray) -> np.ndarray:
    """Hue sextant (n,) of colours (n, 3) in [0, 1]."""
    r, g, b = rgb.T
    hue = np.degrees(np.arctan2(np.sqrt(3) * (g - b), 2 * r - g - b)) % 360
    return (hue // (360 / HUES)).astype(int)


def average_precision(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Average precision (f, m) of each column of scores (n, m) at predicting each binary target column (n, f), as
    sklearn's average_precision_score (ties share a threshold; a target with no positive scores 0)."""
    targets = targets.astype(np.float64)
    positives = targets.sum(0)  # (f,)
    out = np.zeros((targets.shape[1], scores.shape[1]))
    for j in range(scores.shape[1]):
        order = np.argsort(-scores[:, j], kind="stable")
        ss = scores[order, j]
        last = np.r_[np.flatnonzero(np.diff(ss)), len(ss) - 1]  # the last index of each run of equal scores
        tp = np.cumsum(targets[order], axis=0)[last]  # (thresholds, f)
        precision = tp / (last + 1)[:, None]
        recall = tp / np.maximum(positives, 1)
        out[:, j] = (np.diff(recall, axis=0, prepend=0) * precision).sum(0)
    return out


def baselines(x: np.ndarray, m: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Dictionary scores (n, m) of the same size as the SAE: PCA (the first m/2 components, each as + and -
    projection; at most 2d) and k-means (m centroids, fewer for fewer tokens, score = minus the squared distance)."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.decomposition import PCA

    pca = PCA(n_components=min(m // 2 or 1, *x.shape), random_state=seed).fit(x)
    p = pca.transform(x)
    km = MiniBatchKMeans(n_clusters=min(m, len(x)), random_state=seed, n_init=1, batch_size=4096).fit(x)
    d2 = (x ** 2).sum(1)[:, None] - 2 * x @ km.cluster_centers_.T + (km.cluster_centers_ ** 2).sum(1)[None]
    return {"pca": np.concatenate([p, -p], axis=1).astype(np.float32), "kmeans": (-d2).astype(np.float32)}


def sample(n: int, limit: int = 50_000, seed: int = 0) -> np.ndarray:
    """Sorted indices of a seeded sample of at most `limit` of n tokens (what the ground truth is scored on)."""
    return np.sort(np.random.default_rng(seed).permutation(n)[:limit])


def ground_truth(dictionaries: dict[str, np.ndarray], targets: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per dictionary (name -> scores (n, m)), AP (factors, features) of each feature at each factor (n,)."""
    t = np.stack(list(targets.values()), axis=1)  # (n, f)
    return {name: average_precision(scores, t) for name, scores in dictionaries.items()}


WEIGHTS, METRICS = "sae.safetensors", "metrics.json"


class SaeFileError(UserError):
    """A trained SAE's folder that cannot be opened (missing, damaged or not of this model)."""


MAX_WEIGHTS_BYTES = 8 << 30  # an SAE's weights: 2 x d x m float32 (d = 4096, m = 256k fits)
MAX_METRICS_BYTES = 1 << 20


def open_sae(folder: Path | str, loaded: LoadedModel) -> tuple[S.SAE, dict[str, Any]]:
    """The SAE written by the `sae` command into `folder` (sae.safetensors, metrics.json) and its metrics, checked:
    SaeFileError naming the file for a missing or damaged file, or one whose width is not this model's."""
    import json

    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    weights_path, metrics_path = folder / WEIGHTS, folder / METRICS
    for path, most in ((weights_path, MAX_WEIGHTS_BYTES), (metrics_path, MAX_METRICS_BYTES)):
        if not path.is_file():
            raise SaeFileError(f"{path}: no such file (a trained SAE's folder, as `vit-explorer sae --out` writes, "
                               f"holds {WEIGHTS} and {METRICS})")
        if path.stat().st_size > most:
            raise SaeFileError(f"{path}: {path.stat().st_size:,} bytes, more than an SAE's {most:,}")
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise SaeFileError(f"{metrics_path}: not readable JSON ({error})") from None
    if not isinstance(metrics, dict) or metrics.get("kind") not in S.KINDS or metrics.get("tokens") not in TOKEN_KINDS \
            or not all(isinstance(metrics.get(key), int) and not isinstance(metrics.get(key), bool)
                       for key in ("k", "state")):
        raise SaeFileError(f"{metrics_path}: needs kind ({', '.join(S.KINDS)}), k, state and tokens "
                           f"({', '.join(TOKEN_KINDS)}) as the `sae` command writes them")
    try:
        tensors = load_file(weights_path)
    except (OSError, SafetensorError, ValueError) as error:
        raise SaeFileError(f"{weights_path}: not a readable safetensors file ({error})") from None
    d = loaded.config.embed_dim
    shapes = {name: tuple(tensors[name].shape) for name in ("W_enc", "b_enc", "W_dec", "b_dec") if name in tensors}
    m = shapes.get("b_enc", (0,))[0] if len(shapes.get("b_enc", ())) == 1 else 0
    expected = {"W_enc": (d, m), "b_enc": (m,), "W_dec": (m, d), "b_dec": (d,)}
    if m < 1 or shapes != expected:
        raise SaeFileError(f"{weights_path}: holds {shapes or 'no SAE weights'}; an SAE over this model's width "
                           f"{d} needs W_enc (d, m), b_enc (m), W_dec (m, d), b_dec (d) with d = {d}")
    if not all(bool(torch.isfinite(t).all()) for t in tensors.values() if t.is_floating_point()):
        raise SaeFileError(f"{weights_path}: holds NaN or infinite weights")
    try:
        check_state(loaded, metrics["state"])
        sae = S.SAE(d, m, metrics["k"], metrics["kind"])
    except ValueError as error:
        raise SaeFileError(f"{metrics_path}: {error}") from None
    threshold = metrics.get("threshold")
    if metrics["kind"] == "batchtopk" and not (isinstance(threshold, (int, float)) and math.isfinite(threshold)):
        raise SaeFileError(f"{metrics_path}: a batchtopk SAE needs its running threshold (a number), as the `sae` "
                           "command writes it")
    with torch.no_grad():
        for name in expected:
            getattr(sae, name).copy_(tensors[name].float())
        if metrics["kind"] == "batchtopk":
            sae.threshold.fill_(float(threshold))  # type: ignore[arg-type]
    return sae.eval(), metrics


# the feature browser's figures (drawn by the app's compositions, in the app and under --out)

CROP = 1  # patches of context on each side of a top-activating patch


def top_tokens(z: np.ndarray, feature: int, count: int = 16) -> np.ndarray:
    """Indices (<= count,) of the tokens where a feature is largest among codes z (n, m), where it fires at all."""
    column = z[:, feature]
    order = np.argsort(-column, kind="stable")[:count]
    return order[column[order] > 0]


def crops(source: D.DatasetSource, kept: list[int], tokens: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """Image crops (k, h, w, 3) uint8 around patch tokens (flat indices over images x patches), with CROP patches
    of context, from the images as stored (scaled to the patch grid)."""
    gh, gw = grid
    out = []
    for token in tokens:
        image, cell = divmod(int(token), gh * gw)
        row, col = divmod(cell, gw)
        picture = np.asarray(source.image(kept[image]).convert("RGB"))
        ph, pw = picture.shape[0] / gh, picture.shape[1] / gw
        r0, r1 = max(0, row - CROP), min(gh, row + CROP + 1)
        c0, c1 = max(0, col - CROP), min(gw, col + CROP + 1)
        part = picture[round(r0 * ph):round(r1 * ph), round(c0 * pw):round(c1 * pw)]
        side = round((2 * CROP + 1) * ph), round((2 * CROP + 1) * pw)
        tile = np.zeros((*side, 3), np.uint8)
        tile[:part.shape[0], :part.shape[1]] = part
        out.append(tile)
    return np.stack(out) if out else np.zeros((0, 1, 1, 3), np.uint8)


def order(frequency: np.ndarray, effect: np.ndarray | None = None, by: str = "frequency") -> np.ndarray:
    """Features, most frequent (or most moving the prediction) first; dead features last."""
    key = frequency if by == "frequency" or effect is None else effect
    return np.argsort(-key, kind="stable")


@torch.no_grad()
def effects(loaded: LoadedModel, pixels: torch.Tensor, sae: S.SAE, state: int, features: np.ndarray) -> np.ndarray:
    """How much ablating each feature moves the prediction: the mean L1 change of the probabilities (features,)
    on a batch of images (B, 3, H, W)."""
    site = S.state_site(state)
    clean = loaded.model(pixels).float().softmax(-1)
    out = []
    for f in features:
        moved = loaded.model.run_with_hooks(pixels, fwd_hooks=[(site, S.steer(sae, int(f), 0.0))]).float()
        out.append(float((moved.softmax(-1) - clean).abs().sum(-1).mean()))
    return np.asarray(out)


def feature_map(z: np.ndarray, image: int, feature: int, grid: tuple[int, int]) -> np.ndarray:
    """A feature's activation (gh, gw) over one image's patches, from patch codes z (images * patches, m)."""
    n = grid[0] * grid[1]
    return z[image * n:(image + 1) * n, feature].reshape(grid)


def features_at(z: np.ndarray, image: int, patch: int, grid: tuple[int, int], count: int = 10
                ) -> list[tuple[int, float]]:
    """(feature, activation) of the features active at one patch of one image, largest first (a click's list)."""
    row = z[image * grid[0] * grid[1] + patch]
    active = np.flatnonzero(row > 0)
    return [(int(f), float(row[f])) for f in active[np.argsort(-row[active], kind="stable")][:count]]


def browser_figures(source: D.DatasetSource, kept: list[int], z: np.ndarray, grid: tuple[int, int],
                    features: np.ndarray, labels: dict[int, str], *, image: int = 0) -> dict[str, tuple[Any, tuple[int,
                                                                                                               int]]]:
    """name -> (figure, size): per feature its top-activating patches; the features' maps on one image; their
    activation histograms."""
    from .figures import LinesFigure, TilesFigure

    out: dict[str, tuple[Any, tuple[int, int]]] = {}
    for f in features:
        tiles = crops(source, kept, top_tokens(z, int(f)), grid)
        if len(tiles):
            out[f"feature_{int(f)}.png"] = (TilesFigure(f"Feature {int(f)}: top-activating patches "
                                                        f"({labels.get(int(f), '')})", tiles, columns=8), (900, 500))
    picture = np.asarray(source.image(kept[image]).convert("RGB"))
    out["feature_maps.png"] = (map_figure("Features on one image", z[image * grid[0] * grid[1]:], features, picture,
                                          grid), (1100, 700))
    edges = np.linspace(0, max(float(z[:, features].max()), 1e-6), 31)
    centres = (edges[:-1] + edges[1:]) / 2
    out["histograms.png"] = (LinesFigure("Activation histograms (active tokens only)", centres,
                                         {f"feature {int(f)}": np.histogram(z[:, f][z[:, f] > 0], edges)[0]
                                          .astype(float) for f in features}, "activation", "tokens"), (900, 500))
    return out


def map_figure(title: str, z: np.ndarray, features: np.ndarray, picture: np.ndarray, grid: tuple[int, int]) -> Any:
    """The features' maps over one image (picture (H, W, 3) uint8), from its patch codes z (patches, m) (the rows
    after its patches are not read)."""
    from .figures import MapsFigure

    maps = np.stack([feature_map(z, 0, int(f), grid) for f in features])
    return MapsFigure(title, maps, tuple(f"feature {int(f)}" for f in features), picture, grid,
                      colorbar_label="activation", scale="each")


@torch.no_grad()
def steering_figure(loaded: LoadedModel, pixels: torch.Tensor, sae: S.SAE, state: int, feature: int,
                    value: float) -> Any:
    """The prediction of one image (1, 3, H, W) with a feature set to `value` at every token (0 ablates), the clean
    prediction marked on its bars."""
    from .figures import BarsFigure

    site = S.state_site(state)
    clean = loaded.model(pixels).float().softmax(-1)[0].cpu().numpy()
    moved = loaded.model.run_with_hooks(pixels, fwd_hooks=[(site, S.steer(sae, feature, value))])
    steered = moved.float().softmax(-1)[0].cpu().numpy()
    top = np.argsort(-np.maximum(clean, steered), kind="stable")[:10]
    return BarsFigure(f"Steering: feature {feature} set to {value:g} at state {state} (bars), clean (markers)",
                      tuple(loaded.label(int(i)) for i in top), steered[top], "probability",
                      markers={"clean": clean[top]}, value_range=(0.0, 1.0))
