"""BoTorch acquisition functions of botorch_sketch."""

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound, pending_cholesky

__all__ = ["BatchUpperConfidenceBound", "pending_cholesky"]
