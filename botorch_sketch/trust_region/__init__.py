r"""Trust-region Bayesian optimisation (TuRBO-1) on the sketched GP.

The region's state machine (:mod:`~botorch_sketch.trust_region.state`) and its
candidates by Thompson sampling of a ``NystromGP``'s posterior
(:mod:`~botorch_sketch.trust_region.candidates`), projected onto a mixed space's
integer and one-hot columns (:mod:`~botorch_sketch.trust_region.discrete`).
"""

from botorch_sketch.trust_region.candidates import (
    THOMPSON_SAMPLERS,
    default_num_candidates,
    fit_region_model,
    generate_batch,
    incumbent,
    perturbed_candidates,
    region_bounds,
)
from botorch_sketch.trust_region.discrete import DiscreteColumns
from botorch_sketch.trust_region.state import (
    TrustRegionState,
    is_improvement,
    restart_state,
    update_state,
)

__all__ = [
    "THOMPSON_SAMPLERS",
    "DiscreteColumns",
    "TrustRegionState",
    "default_num_candidates",
    "fit_region_model",
    "generate_batch",
    "incumbent",
    "is_improvement",
    "perturbed_candidates",
    "region_bounds",
    "restart_state",
    "update_state",
]
