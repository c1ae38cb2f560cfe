"""The live views; each is a QWidget that takes the session. Order = default tab order."""

from .attention import AttentionView
from .builder import BuilderView
from .compare import CompareView
from .embeddings import EmbeddingsView
from .heads import HeadsView
from .parameters import ParametersView
from .position import PositionView
from .prediction import PredictionView
from .training import TrainingView

VIEW_CLASSES = (PredictionView, AttentionView, PositionView, HeadsView, EmbeddingsView, CompareView, ParametersView,
                TrainingView, BuilderView)

__all__ = ["VIEW_CLASSES", "AttentionView", "BuilderView", "CompareView", "EmbeddingsView", "HeadsView",
           "ParametersView", "PositionView", "PredictionView", "TrainingView"]
