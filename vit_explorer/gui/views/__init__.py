"""The live views; each is a QWidget that takes the session. Order = default tab order."""

from .builder import BuilderView
from .prediction import PredictionView

VIEW_CLASSES = (PredictionView, BuilderView)

__all__ = ["VIEW_CLASSES", "BuilderView", "PredictionView"]
