"""botorch_sketch: scalable Bayesian optimization for BoTorch and Ax.

Nystrom/DTC sparse Gaussian processes (BKB), batch UCB (BBKB), GSSBO and
GO-UCB, packaged as BoTorch models and acquisition functions.
"""

__version__ = "0.1.0"
