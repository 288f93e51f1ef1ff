r"""The GO-UCB procedure (Liu & Wang, ICML 2023, Algorithm 1) on a box.

Phase I draws ``n`` points iid uniformly from the box (default ``n = ceil(sqrt(T))``,
Theorem 4.1) and fits ``w_hat_0`` with the regression oracle. Phase II runs ``T``
optimistic rounds: each round builds BoTorch's ``UpperConfidenceBound`` with
``beta = beta_t`` on the :class:`~botorch_sketch.models.goucb.GOUCBModel` (the
linearized inner maximum, spec Sec. 3.2) or :class:`~botorch_sketch.acquisition.goucb.
GOUCBExactUCB` (``exact=True``), maximizes it with ``optimize_acqf``, observes
``y_t`` and absorbs it online with ``condition_on_observations`` (the gradient is
taken at the current ``w_hat_t`` and frozen: the paper's rule). The oracle runs once,
and the outcome transform's statistics are those of Phase I.

Output: the paper reports ``x_hat ~ U{x_1..x_T}`` (Remark 4.2) and cumulative
regret; :class:`GOUCBResult` keeps every query so both can be computed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from botorch.acquisition.analytic import UpperConfidenceBound
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform
from botorch.optim import optimize_acqf
from botorch.utils.types import _DefaultType
from torch import Tensor, nn

from botorch_sketch.acquisition.goucb import GOUCBExactUCB
from botorch_sketch.goucb.confidence import (
    BetaSchedule,
    PaperBeta,
    as_beta_schedule,
    paper_lambda,
)
from botorch_sketch.goucb.oracle import OracleOptions
from botorch_sketch.models.goucb import GOUCBModel

logger = logging.getLogger(__name__)


@dataclass
class GOUCBResult:
    """Queries and observations of one GO-UCB run.

    Attributes:
        X: ``(n + T) x d`` queries in order (Phase I first).
        Y: ``(n + T) x 1`` observations.
        n_init: Phase I length ``n``.
        betas: ``beta_t`` used in each Phase II round.
        model: The final model (all rows absorbed).
    """

    X: Tensor
    Y: Tensor
    n_init: int
    betas: list[float] = field(default_factory=list)
    model: GOUCBModel | None = None


def uniform_design(bounds: Tensor, n: int, generator: torch.Generator) -> Tensor:
    r"""``n`` iid uniform points in the box ``bounds`` (``2 x d``) -> ``n x d``."""
    lb, ub = bounds[0], bounds[1]
    u = torch.rand(n, bounds.shape[-1], generator=generator, dtype=bounds.dtype)
    return lb + (ub - lb) * u.to(bounds.device)


def run_goucb(
    observe: Callable[[Tensor], Tensor],
    bounds: Tensor,
    T: int,
    *,
    n: int | None = None,
    network: nn.Module | None = None,
    lambda_: float | None = None,
    beta: str | float | BetaSchedule = "paper",
    F: float | None = None,
    oracle: OracleOptions | None = None,
    outcome_transform: OutcomeTransform | _DefaultType | None = None,
    input_transform: InputTransform | None = None,
    exact: bool = False,
    num_restarts: int = 4,
    raw_samples: int = 256,
    maxiter: int = 100,
    seed: int = 0,
    callback: Callable[[int, Tensor, Tensor], None] | None = None,
) -> GOUCBResult:
    r"""Run GO-UCB for ``n + T`` evaluations of ``observe``.

    Args:
        observe: Black box mapping ``1 x d`` (or ``n x d``) inputs to ``... x 1``
            noisy observations, to be maximized.
        bounds: ``2 x d`` box.
        T: Phase II horizon.
        n: Phase I length (default ``ceil(sqrt(T))``).
        network: Regressor (default: the paper's width-25 sigmoid network).
        lambda_: Regularization (default :func:`paper_lambda` ``(T)``).
        beta: ``"paper"`` (``d_w^3 F^4 t / T``), a number, or a schedule.
        F: Bound on ``|f|`` for ``beta="paper"`` (default: ``max |y|`` of Phase I
            in model units).
        oracle: Phase I solver settings.
        outcome_transform: Default ``None``: raw ``y`` as in the paper; ``DEFAULT``
            standardizes with the Phase I statistics.
        input_transform: Optional input transform of the model.
        exact: Use the exact inner maximum (:class:`GOUCBExactUCB`) instead of
            the linearized UCB.
        num_restarts, raw_samples, maxiter: ``optimize_acqf`` settings.
        seed: Seed of Phase I, the oracle and the acquisition optimizer.
        callback: Called as ``callback(t, x_t, y_t)`` after each evaluation
            (``t`` counts all evaluations from 1).

    Returns:
        A :class:`GOUCBResult`.
    """
    if not (isinstance(T, int) and T > 0):
        raise ValueError(f"T must be a positive int, got {T!r}.")
    if bounds.dim() != 2 or bounds.shape[0] != 2 or not (bounds[1] > bounds[0]).all():
        raise ValueError(f"bounds must be 2 x d with lower < upper, got {bounds}.")
    n = math.ceil(math.sqrt(T)) if n is None else n
    if not (isinstance(n, int) and n > 0):
        raise ValueError(f"n must be a positive int, got {n!r}.")
    lambda_ = paper_lambda(T) if lambda_ is None else lambda_
    generator = torch.Generator().manual_seed(seed)

    def evaluate(x: Tensor, t0: int) -> Tensor:
        y = observe(x).reshape(x.shape[0], 1).to(x)
        if callback is not None:
            for i in range(x.shape[0]):
                callback(t0 + i + 1, x[i], y[i])
        return y

    X = uniform_design(bounds, n, generator)
    Y = evaluate(X, 0)
    model = GOUCBModel(
        X,
        Y,
        network=network,
        n_init=n,
        lambda_=lambda_,
        beta=1.0,
        oracle=oracle,
        outcome_transform=outcome_transform,
        input_transform=input_transform,
        seed=seed,
    )
    if beta == "paper":
        F = float(model.train_targets.abs().max()) if F is None else F
        schedule: BetaSchedule = PaperBeta(T=T, F=max(F, 1e-12))
    elif isinstance(beta, str):
        raise ValueError(f"beta must be 'paper', a number or a schedule, got {beta!r}.")
    else:
        schedule = as_beta_schedule(beta)
    model.beta_schedule = schedule
    result = GOUCBResult(X=X, Y=Y, n_init=n)
    for t in range(1, T + 1):
        beta_t = model.beta_t()
        if exact:
            acqf = GOUCBExactUCB(model, beta=beta_t)
        else:
            acqf = UpperConfidenceBound(model, beta=beta_t)
        x, _ = optimize_acqf(
            acqf,
            bounds=bounds,
            q=1,
            num_restarts=num_restarts,
            raw_samples=raw_samples,
            options={"seed": seed * 100_003 + t, "maxiter": maxiter},
        )
        x = x.detach()
        y = evaluate(x, n + t - 1)
        model = model.condition_on_observations(x, y)
        result.betas.append(beta_t)
        result.X = torch.cat([result.X, x])
        result.Y = torch.cat([result.Y, y])
        logger.debug("GO-UCB round %d: beta %.3g, y %.4g", t, beta_t, float(y))
    result.model = model
    return result
