r"""BoTorch acquisition input constructors for the acquisition functions we add.

Ax builds every acquisition function through
``botorch.acquisition.input_constructors.get_acqf_input_constructor(cls)`` with
keyword arguments it assembles itself (``api_botorch_ax.md`` Sec. 2.5):
``model``, ``X_pending`` (whenever trials are pending), ``posterior_transform``
(a ``ScalarizedPosteriorTransform`` whose weight is ``-1`` for a minimisation),
``objective`` and ``constraints`` (outcome constraints), plus the user's
``botorch_acqf_options``. The registry's keyword filter *silently drops*
``posterior_transform``, ``objective`` and ``constraints`` when a constructor does
not name them, which turns a minimisation into a maximisation without an error, so
every constructor here names all of them and rejects what it cannot honour.
"""

from __future__ import annotations

import math
from typing import Any

from botorch.acquisition.input_constructors import acqf_input_constructor
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from torch import Tensor

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound

__all__ = ["construct_inputs_batch_ucb"]

#: BoTorch-units ``beta`` used when neither ``alpha`` nor ``beta`` is given.
DEFAULT_BETA = 4.0


@acqf_input_constructor(BatchUpperConfidenceBound)
def construct_inputs_batch_ucb(
    model: Model,
    posterior_transform: PosteriorTransform | None = None,
    objective: Any = None,
    constraints: Any = None,
    X_pending: Tensor | None = None,
    alpha: float | None = None,
    beta: float | None = None,
) -> dict[str, Any]:
    r"""Inputs of :class:`~botorch_sketch.acquisition.BatchUpperConfidenceBound`.

    The width is given either as BBKB's ``alpha`` (RLS units: it multiplies
    ``sigma_GP / sqrt(lam)``, ICML 2020 Sec. 3.1) or as BoTorch's UCB ``beta``
    (``alpha = sqrt(beta * lam)``, see
    :meth:`~botorch_sketch.acquisition.BatchUpperConfidenceBound.from_botorch_beta`);
    with neither, ``beta = 4`` (a two-sigma band, in the units of Ax's standardised
    outcome).

    Args:
        model: A single-output ``NystromGP``.
        posterior_transform: Ax's ``ScalarizedPosteriorTransform`` (weight ``+-1``).
        objective: Must be ``None``: an MC objective (Ax builds one for outcome
            constraints) has no closed-form batch UCB.
        constraints: Must be ``None`` (outcome constraints are not supported).
        X_pending: ``p x d`` pending points, hallucinated into the variance.
        alpha: BBKB's ``alpha~ >= 0``.
        beta: BoTorch's ``beta >= 0``.

    Returns:
        Keyword arguments for ``BatchUpperConfidenceBound``.
    """
    if objective is not None or constraints:
        raise ValueError(
            "BatchUpperConfidenceBound supports one objective without outcome "
            "constraints; remove the outcome constraints or use another strategy."
        )
    if alpha is not None and beta is not None:
        raise ValueError("Give either alpha (BBKB units) or beta (BoTorch units).")
    if alpha is None:
        beta = DEFAULT_BETA if beta is None else beta
        acqf = BatchUpperConfidenceBound.from_botorch_beta(model, beta)
        alpha = float(acqf.alpha)
    if not (math.isfinite(float(alpha)) and float(alpha) >= 0):
        raise ValueError(f"alpha must be a finite non-negative number, got {alpha}.")
    return {
        "model": model,
        "alpha": float(alpha),
        "posterior_transform": posterior_transform,
        "X_pending": X_pending,
    }
