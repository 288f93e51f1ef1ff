r"""GO-UCB: global optimization with a parametric model and a gradient confidence set.

Liu & Wang, "Global Optimization with Parametric Function Approximation", ICML 2023.
The BoTorch model is :class:`botorch_sketch.models.goucb.GOUCBModel`; this package
holds the algorithm's pieces: networks and parameter Jacobians (``network``), the
Phase I regression oracle (``oracle``), the confidence set and ``beta_t`` schedules
(``confidence``), the exact inner maximum over the ellipsoid (``exact``) and the
two-phase loop (``loop``).
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
from botorch_sketch.goucb.exact import GOUCBExactUCB, ellipsoid_inner_max
from botorch_sketch.goucb.loop import GOUCBResult, run_goucb, uniform_design
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
    "GOUCBExactUCB",
    "GOUCBResult",
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
    "run_goucb",
    "sherman_morrison",
    "uniform_design",
    "values_and_jacobian",
]
