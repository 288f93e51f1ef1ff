r"""Exact GP posterior over a finite arm set, updated one point at a time.

Reference model for the exact baselines GP-UCB / GP-BUCB (BBKB Eqs. 4-6, Alg. 2)
and for uncertainty-sampling initialisation (Alg. 3). In RLS units (BBKB App. A.1),
with ``K_t = k(X_t, X_t)`` over the pulled points (repetitions included):

    mu_t(a)      = k_t(a)^T (K_t + lam I)^{-1} y_t
    sigma_t^2(a) = (k(a, a) - k_t(a)^T (K_t + lam I)^{-1} k_t(a)) / lam

Representation: the Cholesky factor ``K_t + lam I = L L^T`` (grown by one row per
point) and ``W = L^{-1} K(X_t, A)`` (``t x A``). Adding a point ``x`` with
``l = W[:, x]`` and ``d = sqrt(k(x, x) + lam - ||l||^2)`` appends the row
``(k(x, A) - l^T W) / d`` in ``O(t A)``; the variances follow from the running
column norms of ``W``. Points may be added before their feedback arrives
("hallucinated", the mean does not change); feedback is supplied later in the
same order, and the mean uses only the rows with feedback (a leading block of
``L`` is the factor of the observed points). Total ``O(T^2 A)`` time and
``O(T A)`` memory; meant for ``T`` up to a few thousand.
"""

from __future__ import annotations

import math

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.bbkb.dense_kernel import DenseKernel, as_dense_kernel

__all__ = ["ExactPosterior"]


class ExactPosterior:
    r"""Incremental exact GP posterior (RLS units) over ``A`` arms.

    Args:
        arms: ``A x d`` candidate set.
        kernel: The prior covariance, a gpytorch kernel or a
            :class:`~botorch_sketch.bbkb.dense_kernel.DenseKernel`.
        lam: Ridge ``lam > 0`` (the noise variance for the Bayesian reading).
        capacity: Initial number of rows reserved (grown on demand).
    """

    def __init__(
        self,
        arms: Tensor,
        kernel: Kernel | DenseKernel,
        lam: float,
        capacity: int = 256,
    ) -> None:
        if arms.dim() != 2 or arms.shape[0] == 0:
            raise ValueError(
                f"arms must be a non-empty A x d tensor, got shape {tuple(arms.shape)}."
            )
        if not lam > 0:
            raise ValueError(f"lam must be positive, got {lam}.")
        self.arms, self.lam = arms, float(lam)
        self.kernel = as_dense_kernel(kernel, arms)
        self.kdiag = self.kernel.diag(arms)
        A = arms.shape[0]
        self._W = arms.new_zeros(capacity, A)
        self._L = arms.new_zeros(capacity, capacity)
        self._coef = arms.new_zeros(capacity)
        self._sqnorm = arms.new_zeros(A)
        self.points: list[int] = []
        self.n_obs = 0

    @property
    def t(self) -> int:
        """Number of points added (with or without feedback)."""
        return len(self.points)

    def _grow(self) -> None:
        n = self._W.shape[0]
        self._W = torch.cat([self._W, torch.zeros_like(self._W)])
        L = self._L.new_zeros(2 * n, 2 * n)
        L[:n, :n] = self._L
        self._L = L
        self._coef = torch.cat([self._coef, torch.zeros_like(self._coef)])

    def add(self, arm: int) -> None:
        """Add arm ``arm`` to ``X_t`` (its feedback may come later), ``O(t A)``."""
        t = self.t
        if t >= self._W.shape[0]:
            self._grow()
        W = self._W[:t]
        l_vec = W[:, arm]
        d2 = float(self.kdiag[arm]) + self.lam - float(l_vec @ l_vec)
        d = math.sqrt(max(d2, self.lam))
        k_row = self.kernel(self.arms[arm : arm + 1], self.arms).squeeze(0)
        row = (k_row - l_vec @ W) / d
        self._W[t] = row
        self._L[t, :t] = l_vec
        self._L[t, t] = d
        self._sqnorm += row.pow(2)
        self.points.append(arm)

    def observe(self, rewards: Tensor) -> None:
        """Feedback for the next ``len(rewards)`` added points, in order."""
        for y in rewards.tolist():
            j = self.n_obs
            if j >= self.t:
                raise ValueError("more rewards than added points.")
            c = (y - float(self._L[j, :j] @ self._coef[:j])) / float(self._L[j, j])
            self._coef[j] = c
            self.n_obs += 1

    def mean(self) -> Tensor:
        """``mu(a)`` from the points with feedback, ``A`` tensor, ``O(t A)``."""
        n = self.n_obs
        return self._coef[:n] @ self._W[:n]

    def variance(self) -> Tensor:
        """``sigma_t^2(a)`` with all added points (RLS units), ``A`` tensor."""
        return ((self.kdiag - self._sqnorm) / self.lam).clamp_min(0.0)

    def logdet(self) -> float:
        r"""``logdet(I + K_fb / lam)`` over the points with feedback."""
        n = self.n_obs
        return float((self._L[:n, :n].diagonal().pow(2) / self.lam).log().sum())
