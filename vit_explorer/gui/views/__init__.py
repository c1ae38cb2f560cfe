"""The live views; each is a QWidget that takes the session. Order = default tab order."""

from .attention import AttentionView
from .builder import BuilderView
from .compare import CompareView
from .dataset import DatasetView
from .embeddings import EmbeddingsView
from .features import FeaturesView
from .heads import HeadsView
from .parameters import ParametersView
from .position import PositionView
from .prediction import PredictionView
from .training import TrainingView

VIEW_CLASSES = (PredictionView, AttentionView, PositionView, HeadsView, EmbeddingsView, FeaturesView, CompareView,
                DatasetView, ParametersView, TrainingView, BuilderView)

__all__ = ["VIEW_CLASSES", "AttentionView", "BuilderView", "CompareView", "DatasetView", "EmbeddingsView",
           "FeaturesView", "HeadsView", "ParametersView", "PositionView", "PredictionView", "TrainingView"]
