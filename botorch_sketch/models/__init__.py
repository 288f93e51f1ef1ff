"""BoTorch models of botorch_sketch."""

from botorch_sketch.models.goucb import GOUCBModel
from botorch_sketch.models.gssbo import GradientSubsetGP
from botorch_sketch.models.kernels import GroupedRBFKernel
from botorch_sketch.models.nystrom import NystromGP

__all__ = ["GOUCBModel", "GradientSubsetGP", "GroupedRBFKernel", "NystromGP"]
