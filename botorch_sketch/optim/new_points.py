r"""New points first: a greedy step that re-proposes a point only when it pays.

On a discrete or mixed domain the batch UCB's maximiser is often a point already
evaluated, pending, or earlier in the same batch: hallucinating one more noisy
evaluation there lowers its width only a little, and its mean keeps it on top.
A user pays for every evaluation, so in one step of the greedy batch
(:func:`new_point_step`) a taken point ``x_r in T`` is worth its lower bound
``l_t(x_r) = mu(x_r) - alpha sigma~_t(x_r)`` instead of its UCB
(:meth:`~botorch_sketch.acquisition.BatchUpperConfidenceBound.set_X_avoid`), and
the caller's step optimiser maximises that. A repeat then wins only when the
model is sure it is better than the best new point found, ``l_t(x_r) >
u_t(x_new)`` (the elimination test of confidence-bound methods: no new point can
then be the maximiser, and the repeat narrows the width where the maximiser is);
otherwise the step takes the best new point.

``T`` is the model's training inputs, the caller's pending points and the batch
so far; matching costs ``O(|T| d)`` per evaluated point.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from botorch_sketch.acquisition.bbkb import SAME_POINT_TOL, BatchUpperConfidenceBound
from botorch_sketch.models.nystrom import NystromGP

logger = logging.getLogger(__name__)

__all__ = ["new_point_step", "observed_inputs"]


def observed_inputs(model: NystromGP) -> Tensor:
    r"""The model's training inputs in its input space (``n x d``).

    Taken back through the model's input transform; an input transform without
    ``untransform`` gives the stored inputs unchanged.
    """
    X = model.train_inputs[0]
    transform_in = getattr(model, "input_transform", None)
    if transform_in is not None:
        try:
            X = transform_in.untransform(X)
        except NotImplementedError:
            pass
    return X.detach()


def new_point_step(
    acqf: BatchUpperConfidenceBound,
    step_optimizer,
    step: int,
    taken: Tensor,
) -> tuple[Tensor, Tensor]:
    r"""One greedy step that prefers a point outside ``taken`` (module docstring).

    Args:
        acqf: The batch UCB with the batch so far as pending points.
        step_optimizer: ``step_optimizer(acqf, step) -> (x, value)``.
        step: Index of the step in the batch.
        taken: ``t x d`` points evaluated, pending or in the batch.

    Returns:
        ``(x, value)``: the point (``d``) and its value (the UCB of a new point,
        the lower bound of a taken one).
    """
    acqf.set_X_avoid(taken)
    try:
        x, value = step_optimizer(acqf, step)
    finally:
        acqf.set_X_avoid(None)
    x, value = x.detach().reshape(-1), value.detach().reshape(())
    if (
        taken.shape[0] > 0
        and float(torch.cdist(x.unsqueeze(0).to(taken), taken).min()) <= SAME_POINT_TOL
    ):
        logger.debug(
            "BBKB step %d: a taken point again (lower bound %.4g).", step, float(value)
        )
    return x, value
