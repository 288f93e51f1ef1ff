r"""Confidence-width schedules ``beta~`` and ``alpha~`` of BBKB.

The BBKB UCB (Sec. 3.1) is ``u~(x) = mu~_fb(x) + alpha~_fb * sigma~_t(x)`` with the
standard deviation ``sigma~ = sqrt(sigma~^2)`` in RLS units, and ``alpha~`` constant
inside a batch (updated only at resparsifications).

**Units relative to BoTorch.** BoTorch's ``UpperConfidenceBound(beta=b)`` computes
``mu + sqrt(b) * sigma_GP`` with the posterior std of the GP. With ``lam`` equal to
the model's noise variance, ``sigma~ = sigma_GP / sqrt(lam)`` (BBKB App. A.1), so our
``alpha~`` corresponds to ``b = alpha~^2 / lam`` (:func:`botorch_beta`) and
conversely ``alpha~ = sqrt(b lam)`` (:func:`alpha_from_botorch_beta`).

Schedules (BBKB spec Sec. 6):

- :class:`PaperSchedule` (Theorem 2, App. C.2):
  ``beta~ = 2 xi sqrt(sum_s log(1 + 3 s2_0[x_s]) + log(1/delta))
  + (1 + sqrt 2) sqrt(lam) F``
  and ``alpha~ = C~ beta~``; the sum runs over all evaluated points, each scored
  with the batch-start variance of its batch, and is accumulated incrementally at
  every resparsification.
- :class:`ReferenceCodeSchedule` (the authors' code, spec Sec. 6.3):
  ``logdet += sum log(1 + s2_0[x_s])``, ``beta = sqrt(lam) F +
  sqrt(xi^2 (C~ logdet + log(1/delta)))``, ``alpha = beta``; the first batch uses
  ``logdet`` without ``C~``, as the authors' code does.
- :class:`FixedSchedule`: a user ``beta``, ``alpha = C beta``.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.bbkb.dense_kernel import DenseKernel, as_dense_kernel
from botorch_sketch.bbkb.state import BatchState

logger = logging.getLogger(__name__)

__all__ = [
    "BetaSchedule",
    "FixedSchedule",
    "PaperSchedule",
    "ReferenceCodeSchedule",
    "alpha_from_botorch_beta",
    "botorch_beta",
    "exact_logdet",
    "make_schedule",
]

#: Largest initial set whose ``logdet(I + K / lam)`` is computed exactly.
MAX_EXACT_LOGDET = 4000


def botorch_beta(alpha: float, lam: float) -> float:
    r"""BoTorch ``UpperConfidenceBound`` ``beta`` for ``alpha~``: ``alpha^2 / lam``."""
    return alpha**2 / lam


def alpha_from_botorch_beta(beta: float, lam: float) -> float:
    r"""``alpha~ = sqrt(beta lam)`` for a BoTorch UCB ``beta`` (inverse map)."""
    return math.sqrt(beta * lam)


def exact_logdet(X: Tensor, kernel: Kernel | DenseKernel, lam: float) -> float:
    r"""``logdet(I + K_X / lam)`` by a Cholesky factorisation, ``O(n^3)``.

    ``= sum_s log(1 + sigma^2_{s-1}(x_s))`` (exact GP, Schur complements), the
    quantity of Prop. 5 that ``beta`` bounds. Repeated rows are allowed.
    """
    if X.shape[0] == 0:
        return 0.0
    K = as_dense_kernel(kernel, X)(X, X)
    M = 0.5 * (K + K.mT) / lam + torch.eye(X.shape[0], dtype=X.dtype, device=X.device)
    return float(2.0 * torch.linalg.cholesky(M).diagonal().log().sum())


class BetaSchedule(ABC):
    r"""A schedule of ``beta~`` and of the UCB multiplier ``alpha~``.

    Protocol: :meth:`initialize` once after the initial rebuild, then
    :meth:`update` at every resparsification with the batch-start variances of the
    points of the batch just evaluated (repetitions included).
    """

    @property
    @abstractmethod
    def beta(self) -> float:
        """Current ``beta~``."""

    @property
    @abstractmethod
    def alpha(self) -> float:
        """Current UCB multiplier ``alpha~`` on ``sigma~`` (RLS units)."""

    def initialize(self, state: BatchState, init_idx: Tensor) -> None:  # noqa: B027
        """Set the initial term from the initial points ``init_idx`` and ``state``."""

    def update(self, batch_s2_0: Tensor) -> None:  # noqa: B027
        """Accumulate one evaluated batch (its batch-start variances)."""


class PaperSchedule(BetaSchedule):
    r"""Theorem 2's ``beta~`` with ``alpha~ = C~ beta~`` (BBKB spec Sec. 6.1).

    ``logdet_acc`` starts at ``logdet(I + K_{X_0} / lam)`` over the initial points
    (exact, :func:`exact_logdet`; a valid value for Prop. 5. With more than
    :data:`MAX_EXACT_LOGDET` initial points it falls back to ``sum log(1 + 3 s2_0)``
    under the initial dictionary, not rigorous) and then accumulates
    ``sum_{s in batch} log(1 + 3 s2_0[x_s])`` per batch.

    Args:
        xi: Noise standard deviation.
        delta: Confidence level in ``(0, 1)``.
        F: RKHS norm bound.
        lam: Ridge.
        C: Batch threshold ``C~``.
        multiplier: ``"C"`` (paper, ``alpha = C beta``) or ``"sqrt_C"`` (also
            valid, since variance ratio ``<= C`` implies std ratio ``<= sqrt C``).
    """

    def __init__(
        self,
        xi: float,
        delta: float,
        F: float,
        lam: float,
        C: float,
        multiplier: str = "C",
    ) -> None:
        if not 0 < delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {delta}.")
        if multiplier not in ("C", "sqrt_C"):
            raise ValueError(f"multiplier must be 'C' or 'sqrt_C', got {multiplier!r}.")
        self.xi, self.delta, self.F, self.lam, self.C = xi, delta, F, lam, C
        self.multiplier = multiplier
        self.logdet_acc = 0.0

    @property
    def beta(self) -> float:
        return (
            2.0 * self.xi * math.sqrt(self.logdet_acc + math.log(1.0 / self.delta))
            + (1.0 + math.sqrt(2.0)) * math.sqrt(self.lam) * self.F
        )

    @property
    def alpha(self) -> float:
        mult = self.C if self.multiplier == "C" else math.sqrt(self.C)
        return mult * self.beta

    def initialize(self, state: BatchState, init_idx: Tensor) -> None:
        if init_idx.numel() <= MAX_EXACT_LOGDET:
            X0 = state.arms[init_idx]
            self.logdet_acc = exact_logdet(X0, state.kernel, self.lam)
        else:
            logger.warning(
                "PaperSchedule: %d initial points, using sum log(1 + 3 s2_0) under the "
                "initial dictionary instead of the exact logdet.",
                init_idx.numel(),
            )
            self.logdet_acc = float(torch.log1p(3.0 * state.s2_0[init_idx]).sum())

    def update(self, batch_s2_0: Tensor) -> None:
        self.logdet_acc += float(torch.log1p(3.0 * batch_s2_0.clamp_min(0.0)).sum())


class ReferenceCodeSchedule(BetaSchedule):
    r"""The authors' code (``Batch_BKB.update``, BBKB spec Sec. 6.3).

    ``logdet = (sum_a n_a s2(a)) log(t_0)`` at initialisation, then
    ``logdet += sum_{s in batch} log(1 + s2_0[x_s])``;
    ``beta = sqrt(lam) F + sqrt(xi^2 (C~ logdet + log(1/delta)))`` and
    ``alpha = beta`` (``C~`` sits inside the square root).

    The first batch (before any :meth:`update`) uses ``beta = sqrt(lam) F +
    sqrt(xi^2 (logdet + log(1/delta)))`` without ``C~``: the authors'
    ``Batch_BKB`` inherits ``BKB.initialize``, whose ``_update_beta`` has no
    ``ratio_threshold``; from the first update on, ``C~`` multiplies the whole
    accumulated ``logdet``, initial term included.
    """

    def __init__(self, xi: float, delta: float, F: float, lam: float, C: float) -> None:
        if not 0 < delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {delta}.")
        self.xi, self.delta, self.F, self.lam, self.C = xi, delta, F, lam, C
        self.logdet_acc = 0.0
        self.num_updates = 0

    @property
    def beta(self) -> float:
        C = self.C if self.num_updates else 1.0
        return math.sqrt(self.lam) * self.F + math.sqrt(
            self.xi**2 * (C * self.logdet_acc + math.log(1.0 / self.delta))
        )

    @property
    def alpha(self) -> float:
        return self.beta

    def initialize(self, state: BatchState, init_idx: Tensor) -> None:
        t0 = init_idx.numel()
        self.logdet_acc = float((state.counts * state.s2_0).sum()) * math.log(t0)

    def update(self, batch_s2_0: Tensor) -> None:
        self.logdet_acc += float(torch.log1p(batch_s2_0.clamp_min(0.0)).sum())
        self.num_updates += 1


class FixedSchedule(BetaSchedule):
    r"""Constant ``beta~`` given by the user, ``alpha~ = C beta~``.

    Pass ``C = 1`` to use ``beta`` directly as the UCB multiplier. For a BoTorch
    UCB ``beta_bt``, use ``beta = alpha_from_botorch_beta(beta_bt, lam)``.
    """

    def __init__(self, beta: float, C: float = 1.0) -> None:
        if not beta >= 0:
            raise ValueError(f"beta must be non-negative, got {beta}.")
        self._beta, self.C = float(beta), float(C)

    @property
    def beta(self) -> float:
        return self._beta

    @property
    def alpha(self) -> float:
        return self.C * self._beta


def make_schedule(
    beta: str | float | BetaSchedule,
    *,
    C: float,
    lam: float,
    xi: float,
    delta: float,
    F: float = 1.0,
) -> BetaSchedule:
    """Build a schedule from ``"paper" | "reference_code" | float | BetaSchedule``."""
    if isinstance(beta, BetaSchedule):
        return beta
    if isinstance(beta, str):
        if beta == "paper":
            return PaperSchedule(xi=xi, delta=delta, F=F, lam=lam, C=C)
        if beta == "reference_code":
            return ReferenceCodeSchedule(xi=xi, delta=delta, F=F, lam=lam, C=C)
        raise ValueError(
            f"unknown beta schedule {beta!r}; expected 'paper', 'reference_code', "
            "a number or a BetaSchedule."
        )
    return FixedSchedule(float(beta), C=C)
