"""botorch_sketch: scalable Bayesian optimization for BoTorch and Ax.

Nystrom/DTC sparse Gaussian processes (BKB), batch UCB (BBKB), GSSBO and
GO-UCB, packaged as BoTorch models and acquisition functions.
"""

from botorch_sketch.generation import EmbeddingThompsonSampling
from botorch_sketch.models import GOUCBModel, GradientSubsetGP, NystromGP

__version__ = "0.1.0"

__all__ = [
    "EmbeddingThompsonSampling",
    "GOUCBModel",
    "GradientSubsetGP",
    "NystromGP",
    "__version__",
]
