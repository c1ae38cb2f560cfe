"""The live views; each is a QWidget that takes the session. Order = default tab order."""

from .attention import AttentionView
from .builder import BuilderView
from .parameters import ParametersView
from .prediction import PredictionView

VIEW_CLASSES = (PredictionView, AttentionView, ParametersView, BuilderView)

__all__ = ["VIEW_CLASSES", "AttentionView", "BuilderView", "ParametersView", "PredictionView"]
