"""BoTorch acquisition functions of botorch_sketch."""

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound, pending_cholesky
from botorch_sketch.acquisition.goucb import GOUCBExactUCB

__all__ = ["BatchUpperConfidenceBound", "GOUCBExactUCB", "pending_cholesky"]
