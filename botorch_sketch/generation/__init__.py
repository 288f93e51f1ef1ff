"""Candidate-generation strategies of botorch_sketch."""

from botorch_sketch.generation.thompson import EmbeddingThompsonSampling

__all__ = ["EmbeddingThompsonSampling"]
