"""Acquisition optimisers of botorch_sketch."""

from botorch_sketch.optim.adaptive_batch import optimize_acqf_adaptive_batch

__all__ = ["optimize_acqf_adaptive_batch"]
