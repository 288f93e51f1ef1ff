"""BoTorch models of botorch_sketch."""

from botorch_sketch.models.nystrom import NystromGP

__all__ = ["NystromGP"]
