r"""BBKB: batch UCB with adaptive batches, frozen dictionaries and lazy updates.

Pure-torch implementation of Calandriello, Carratino, Lazaric, Valko & Rosasco,
"Near-linear time Gaussian process optimization with adaptive batching and
resparsification" (ICML 2020) on a finite candidate set, plus the BKB, exact
GP-UCB / GP-BUCB and uniform baselines (whose loops are in
:mod:`botorch_sketch.loops.bbkb`). One concept per module:

- :mod:`~botorch_sketch.bbkb.state`: frozen batch-start state, by kind:
  :mod:`~botorch_sketch.bbkb.batch_state` (the interface),
  :mod:`~botorch_sketch.bbkb.rebuilt_state` (rebuilt at each resparsification)
  and :mod:`~botorch_sketch.bbkb.incremental_state` (updated in place);
- :mod:`~botorch_sketch.bbkb.posterior_state`: the same state from a fitted sparse
  GP's posterior (dictionary and data need not be arms; the BoTorch optimizer
  over ``choices`` selects on it);
- :mod:`~botorch_sketch.bbkb.stopping`: batch stopping rules (Lemma 1, Lemma 3,
  GP-BUCB's product rule);
- :mod:`~botorch_sketch.bbkb.schedules`: ``beta~`` / ``alpha~`` schedules;
- :mod:`~botorch_sketch.bbkb.selection`: exact UCB batch selection (pooled
  eager downdates or the paper's lazy rule);
- :mod:`~botorch_sketch.bbkb.exact`: incremental exact GP posterior;
- :mod:`~botorch_sketch.bbkb.learning`: kernel hyperparameters refitted on a
  schedule during a run (``run_bbkb(..., learn=True)``);
- :mod:`~botorch_sketch.bbkb.config`: the engine's options, one validated
  dataclass shared by the engine, the loop and Ax;
- :mod:`~botorch_sketch.bbkb.engine`: Algorithm 1 as a state machine
  (:class:`BBKBEngine`: start, next batch, observe, checkpoint), driven by the
  finite-arm loop (:func:`botorch_sketch.loops.run_bbkb`) and by the Ax generator
  of a finite library;
- :mod:`~botorch_sketch.bbkb.dense_kernel`: the prior covariance, any gpytorch
  kernel, evaluated in dense blocks (and the paper's frozen Gaussian kernel).
"""

from botorch_sketch.bbkb.config import BBKBConfig
from botorch_sketch.bbkb.dense_kernel import (
    DenseKernel,
    as_dense_kernel,
    fixed_rbf_kernel,
)
from botorch_sketch.bbkb.engine import BBKBEngine
from botorch_sketch.bbkb.exact import ExactPosterior
from botorch_sketch.bbkb.learning import KernelFit, KernelLearning
from botorch_sketch.bbkb.posterior_state import PosteriorState
from botorch_sketch.bbkb.schedules import (
    BetaSchedule,
    FixedSchedule,
    PaperSchedule,
    ReferenceCodeSchedule,
    alpha_from_botorch_beta,
    botorch_beta,
    make_schedule,
)
from botorch_sketch.bbkb.selection import (
    LazyUCBSelector,
    PooledUCBSelector,
    StepRecord,
    select_batch,
)
from botorch_sketch.bbkb.state import (
    BatchState,
    IncrementalState,
    RebuiltState,
    embed_arms,
    rebuild,
)
from botorch_sketch.bbkb.stopping import (
    GlobalLocalRule,
    GlobalRule,
    LocalRule,
    ProductRule,
    StoppingRule,
    make_rule,
)

__all__ = [
    "BBKBConfig",
    "BBKBEngine",
    "BatchState",
    "BetaSchedule",
    "DenseKernel",
    "ExactPosterior",
    "FixedSchedule",
    "GlobalLocalRule",
    "IncrementalState",
    "KernelFit",
    "KernelLearning",
    "GlobalRule",
    "LazyUCBSelector",
    "LocalRule",
    "PaperSchedule",
    "PooledUCBSelector",
    "PosteriorState",
    "ProductRule",
    "RebuiltState",
    "ReferenceCodeSchedule",
    "StepRecord",
    "StoppingRule",
    "alpha_from_botorch_beta",
    "as_dense_kernel",
    "botorch_beta",
    "embed_arms",
    "fixed_rbf_kernel",
    "make_rule",
    "make_schedule",
    "rebuild",
    "select_batch",
]
