"""Does a map depend on the model? Adebayo et al. 2018's cascading model-parameter randomisation: on a copy of the
model (the user's is never touched), the parameters are drawn anew from the top down, one step at a time: the head
(final norm, attention pool, projection, classifier heads), then each block from the last to the first (CaiT: its
class-attention blocks first, named 'class block j'), then the embedding (stem, prefix tokens, position embedding).
After each step every method's map is computed again for the same target and compared with the trained model's
map, by Spearman's rank correlation and SSIM (analysis.sanity). The steps are named 'head', 'block 11', ...,
'block 0', 'embedding': each step randomises that part and everything above it. A map that stays alike after
the head is random does not explain the decision.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from ..analysis import sanity as checks
from ..jobs import Job
from ..models import VisionTransformer
from . import relevance as rel
from .figures import MapsFigure, json_number

HEAD_PARTS = ("norm", "fc_norm", "attn_pool", "proj", "head", "head_dist")  # what lies above the last block
EMBEDDING_PARTS = ("patch_embed", "embed_norm", "norm_pre")  # with the model's own parameters (tokens, position)


def cascade(model: VisionTransformer) -> list[tuple[str, list[torch.nn.Parameter]]]:
    """The randomisation's steps, top first: (name, the parameters that step draws anew)."""
    def params(*modules: torch.nn.Module) -> list[torch.nn.Parameter]:
        return [p for m in modules for p in m.parameters()]

    steps = [("head", params(*(getattr(model, n) for n in HEAD_PARTS if hasattr(model, n))))]
    steps += [(f"class block {j}", params(model.class_blocks[j])) for j in reversed(range(len(model.class_blocks)))]
    steps += [(f"block {i}", params(model.blocks[i])) for i in reversed(range(len(model.blocks)))]
    own = [p for _, p in model.named_parameters(recurse=False)]
    steps.append(("embedding", params(*(getattr(model, n) for n in EMBEDDING_PARTS if hasattr(model, n))) + own))
    return steps


def run(session: rel.Session, originals: dict[str, np.ndarray], *, job: Job | None = None
        ) -> dict[str, list[rel.SanityStep]]:
    """Each method's map (`originals`: the trained model's, by method) after each cascade step, with its Spearman
    correlation and SSIM to the original; seeded by the session's Options.seed. Baseline rows (random) are left out:
    they do not read the model."""
    job = job or Job()
    methods = [m for m in originals if not rel.METHODS[m].baseline]
    model = copy.deepcopy(session.scorer.model)
    steps = cascade(model)
    scorer = replace(session.scorer, model=model)
    generator = torch.Generator().manual_seed(session.scorer.options.seed)
    results: dict[str, list[rel.SanityStep]] = {m: [] for m in methods}
    total = len(steps) * max(len(methods), 1)
    for i, (name, parameters) in enumerate(steps):
        checks.randomise_(parameters, generator)
        for j, method in enumerate(methods):
            done = i * len(methods) + j
            part = job.part(done / total, (done + 1) / total, f"sanity: {method}, randomised from {name}")
            relevance = rel.compute_maps(session, method, job=part, scorer=scorer).relevance
            original = originals[method]
            results[method].append(rel.SanityStep(name, checks.spearman(original, relevance),
                                                  checks.map_ssim(original, relevance), relevance))
    job.progress(1.0)
    return results


def attach(explanations: Sequence[rel.Explanation], steps: dict[str, list[rel.SanityStep]]) -> None:
    """Each explanation's sanity steps (its JSON then has 'sanity')."""
    for e in explanations:
        if e.method in steps:
            e.sanity = steps[e.method]


def check(session: rel.Session, explanations: Sequence[rel.Explanation], *, job: Job | None = None) -> None:
    """Run the cascade for the explanations' methods, their maps the originals, and attach the steps to them."""
    attach(explanations, run(session, {e.method: e.relevance for e in explanations}, job=job))


def strip_figure(explanation: rel.Explanation, *, image: bool = True, columns: int | None = None,
                 compact: bool = False) -> MapsFigure:
    """The original map and the map after each step, each scaled to its own maximum, titled with the step and
    its Spearman correlation and SSIM to the original ('block 3: 0.79/0.39'; `compact`: the correlation alone,
    'block 3 ρ 0.79', for narrow columns, the SSIM said elsewhere: `numbers_text`); in one row (`columns`: that
    many per row)."""
    assert explanation.sanity is not None
    steps = explanation.sanity
    maps = np.stack([explanation.relevance, *(s.relevance for s in steps)]).astype(np.float64)
    titles = ("trained", *(f"{s.randomised_from} ρ {_shown(s.spearman)}" if compact else
                           f"{s.randomised_from}: {_shown(s.spearman)}/{_shown(s.ssim)}" for s in steps))
    return MapsFigure(f"{strip_heading(explanation)} ({explanation.target.title})", maps, titles,
                      explanation.display if image else None, explanation.grid,
                      colorbar_label="share of the map's maximum", scale="each", masked=explanation.masked,
                      columns=columns or len(maps))


def strip_heading(explanation: rel.Explanation) -> str:
    """What the strip shows, for its heading."""
    return (f"{rel.METHODS[explanation.method].label}, the parameters drawn anew from the top: Spearman ρ / SSIM "
            "to the trained map")


def numbers_text(explanation: rel.Explanation) -> str:
    """Each step's Spearman correlation and SSIM in one line ('head 0.41/0.39 · block 3 ...')."""
    return " · ".join(f"{s.randomised_from} {_shown(s.spearman)}/{_shown(s.ssim)}" for s in explanation.sanity or [])


def _shown(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"  # NaN: a constant map has no rank order


def csv_rows(explanations: Sequence[rel.Explanation]) -> list[dict[str, object]]:
    """One row per method and step: method, randomised_from, spearman, ssim."""
    return [{"method": e.method, "randomised_from": s.randomised_from, "spearman": json_number(s.spearman),
             "ssim": json_number(s.ssim)} for e in explanations for s in e.sanity or []]
