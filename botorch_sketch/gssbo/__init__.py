"""GSSBO: Bayesian optimization on a gradient-diverse subset (Wei et al., 2025).

:mod:`~botorch_sketch.gssbo.selection` holds the algorithm (per-sample gradients of
the marginal likelihood, the selection modes and solver, the dynamic buffer rule);
:class:`~botorch_sketch.models.gssbo.GradientSubsetGP` is the BoTorch model and
:class:`~botorch_sketch.loops.gssbo.GSSBORefitter` re-selects it in a BoTorch loop.
"""

from botorch_sketch.gssbo.selection import (
    DynamicBufferSize,
    SubsetReason,
    SubsetSelection,
    lml_gradients,
    select_subset,
)

__all__ = [
    "DynamicBufferSize",
    "SubsetReason",
    "SubsetSelection",
    "lml_gradients",
    "select_subset",
]
