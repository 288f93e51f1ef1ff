"""Optimization loops over the models and acquisition functions below them.

:mod:`~botorch_sketch.loops.gssbo` re-selects and refits GSSBO's subset GP at each
iteration of a BoTorch loop; :mod:`~botorch_sketch.loops.goucb` runs GO-UCB's two
phases. (BBKB's finite-arm loop, :func:`botorch_sketch.bbkb.run_bbkb`, belongs to
this layer too.)
"""

from botorch_sketch.loops.goucb import GOUCBResult, run_goucb, uniform_design
from botorch_sketch.loops.gssbo import GSSBORefitter, hyperparameter_state

__all__ = [
    "GOUCBResult",
    "GSSBORefitter",
    "hyperparameter_state",
    "run_goucb",
    "uniform_design",
]
