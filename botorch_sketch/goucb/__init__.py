r"""GO-UCB: global optimization with a parametric model and a gradient confidence set.

Liu & Wang, "Global Optimization with Parametric Function Approximation", ICML 2023.
This package holds the algorithm's math: networks and parameter Jacobians
(``network``), the Phase I regression oracle (``oracle``), the confidence set and
``beta_t`` schedules (``confidence``) and the exact inner maximum over the ellipsoid
(``exact``). Above it: the BoTorch model
:class:`botorch_sketch.models.goucb.GOUCBModel`, the exact acquisition
:class:`botorch_sketch.acquisition.goucb.GOUCBExactUCB` and the two-phase loop
:func:`botorch_sketch.loops.goucb.run_goucb`.
"""

from botorch_sketch.goucb.confidence import (
    BetaSchedule,
    ConstantBeta,
    GradientConfidenceSet,
    OFULBeta,
    PaperBeta,
    TheoryBeta,
    ellipsoid_argmax,
    paper_lambda,
    ridge_estimate,
    sherman_morrison,
)
from botorch_sketch.goucb.exact import ellipsoid_inner_max
from botorch_sketch.goucb.network import (
    ParameterLayout,
    paper_network,
    realizable_network,
    reset_parameters,
    values_and_jacobian,
)
from botorch_sketch.goucb.oracle import (
    PAPER_ORACLE,
    OracleOptions,
    fit_regression_oracle,
)

__all__ = [
    "PAPER_ORACLE",
    "BetaSchedule",
    "ConstantBeta",
    "GradientConfidenceSet",
    "OFULBeta",
    "OracleOptions",
    "PaperBeta",
    "ParameterLayout",
    "TheoryBeta",
    "ellipsoid_argmax",
    "ellipsoid_inner_max",
    "fit_regression_oracle",
    "paper_lambda",
    "paper_network",
    "realizable_network",
    "reset_parameters",
    "ridge_estimate",
    "sherman_morrison",
    "values_and_jacobian",
]
