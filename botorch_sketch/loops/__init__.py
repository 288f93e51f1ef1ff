"""Optimization loops over the models and acquisition functions below them.

:mod:`~botorch_sketch.loops.bbkb` runs BBKB (and BKB, exact GP-UCB / GP-BUCB,
uniform sampling) on a finite arm set with an oracle;
:mod:`~botorch_sketch.loops.gssbo` re-selects and refits GSSBO's subset GP at each
iteration of a BoTorch loop; :mod:`~botorch_sketch.loops.goucb` runs GO-UCB's two
phases.
"""

from botorch_sketch.loops.bbkb import (
    BanditResult,
    BBKBCheckpoint,
    BBKBInterrupted,
    noisy_oracle,
    run_bbkb,
    run_botorch_fixed_q,
    run_gp_bucb,
    run_gp_ucb,
    run_uniform,
    uncertainty_sampling_init,
    uniform_regret,
)
from botorch_sketch.loops.goucb import GOUCBResult, run_goucb, uniform_design
from botorch_sketch.loops.gssbo import GSSBORefitter, hyperparameter_state

__all__ = [
    "BBKBCheckpoint",
    "BBKBInterrupted",
    "BanditResult",
    "GOUCBResult",
    "GSSBORefitter",
    "hyperparameter_state",
    "noisy_oracle",
    "run_bbkb",
    "run_botorch_fixed_q",
    "run_goucb",
    "run_gp_bucb",
    "run_gp_ucb",
    "run_uniform",
    "uncertainty_sampling_init",
    "uniform_design",
    "uniform_regret",
]
