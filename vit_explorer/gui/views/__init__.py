"""The live views; each is a QWidget that takes the session, in the order of explore.views.VIEWS (the tabs')."""

from ...explore.views import VIEWS
from .attention import AttentionView
from .builder import BuilderView
from .compare import CompareView
from .components import ComponentsView
from .dataset import DatasetView
from .embeddings import EmbeddingsView
from .explain import ExplainView
from .features import FeaturesView
from .heads import HeadsView
from .parameters import ParametersView
from .position import PositionView
from .prediction import PredictionView
from .training import TrainingView

_CLASSES = {cls.key: cls for cls in (PredictionView, AttentionView, ExplainView, PositionView, HeadsView,
                                     ComponentsView, EmbeddingsView, FeaturesView, CompareView, DatasetView,
                                     ParametersView, TrainingView, BuilderView)}
VIEW_CLASSES = tuple(_CLASSES[key] for key in VIEWS)

__all__ = ["VIEW_CLASSES", "AttentionView", "BuilderView", "CompareView", "ComponentsView", "DatasetView",
           "EmbeddingsView", "ExplainView", "FeaturesView", "HeadsView", "ParametersView", "PositionView",
           "PredictionView", "TrainingView"]
