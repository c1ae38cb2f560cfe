"""The one table of the app's views (like position.SCHEMES): each record's key (what code names it by), title
(its tab, and the `view` a lesson step names), and the panels of a multi-panel view that a lesson step can show
alone, each larger (a projector has no room for all; `main_panels` are always drawn, the others hang on them).
The table's order is the app's tab order; the window and the lessons read it, and each view class names its key."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ViewRecord:
    key: str
    title: str
    panels: tuple[str, ...] = ()
    main_panels: tuple[str, ...] = ()


VIEWS: dict[str, ViewRecord] = {v.key: v for v in (
    ViewRecord("prediction", "Prediction"),
    ViewRecord("attention", "Attention"),
    ViewRecord("explain", "Explain", ("maps", "rollout and best", "curves")),  # rollout and best: two maps, larger
    ViewRecord("position", "Position embeddings", ("similarity", "maps"), ("similarity",)),
    ViewRecord("heads", "Heads"),
    ViewRecord("components", "Components"),
    ViewRecord("embeddings", "Embeddings", ("filters", "tokens")),
    ViewRecord("features", "Features"),
    ViewRecord("compare", "Compare", ("prediction", "rollout", "position")),
    ViewRecord("dataset", "Dataset"),
    ViewRecord("parameters", "Parameters", ("table", "chart"), ("table",)),
    ViewRecord("training", "Training"),
    ViewRecord("builder", "Model builder"),
)}
BY_TITLE = {v.title: v for v in VIEWS.values()}
