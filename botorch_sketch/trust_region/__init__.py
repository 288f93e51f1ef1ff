r"""Trust-region Bayesian optimisation (TuRBO-1) on the sketched GP.

The region's state machine (:mod:`~botorch_sketch.trust_region.state`) and its
candidates by Thompson sampling of a ``NystromGP``'s posterior
(:mod:`~botorch_sketch.trust_region.candidates`) of the region's model
(:mod:`~botorch_sketch.trust_region.model`), projected onto a mixed space's
integer and one-hot columns (:mod:`~botorch_sketch.trust_region.discrete`).
"""

from botorch_sketch.trust_region.candidates import (
    THOMPSON_SAMPLERS,
    allocate_across_regions,
    batch_candidates,
    default_num_candidates,
    generate_batch,
    perturbed_candidates,
    region_bounds,
    thompson_samples,
)
from botorch_sketch.trust_region.discrete import DiscreteColumns
from botorch_sketch.trust_region.model import (
    fit_region_model,
    incumbent,
    noise_sd,
    region_covar_module,
)
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
    "allocate_across_regions",
    "batch_candidates",
    "default_num_candidates",
    "fit_region_model",
    "generate_batch",
    "incumbent",
    "is_improvement",
    "noise_sd",
    "perturbed_candidates",
    "region_bounds",
    "region_covar_module",
    "restart_state",
    "thompson_samples",
    "update_state",
]
