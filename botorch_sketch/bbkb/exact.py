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

:class:`ExactBUCBEngine` runs GP-BUCB (Desautels et al. 2014; BBKB Alg. 2) on
this posterior with the interface of :class:`~botorch_sketch.bbkb.engine.
BBKBEngine` (``start``, ``next_batch``, ``observe``), so that the bandit loop
that drives BBKB drives the exact baselines too. ``C = 1`` is GP-UCB (Srinivas
et al. 2010).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.bbkb.config import BBKBConfig
from botorch_sketch.bbkb.dense_kernel import DenseKernel, as_dense_kernel
from botorch_sketch.bbkb.selection import StepRecord
from botorch_sketch.bbkb.stopping import ProductRule, StoppingRule, make_rule

__all__ = ["ExactBUCBEngine", "ExactBatchView", "ExactPosterior"]


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


class ExactBatchView(NamedTuple):
    r"""The batch-start view of an exact engine (what the loop and rules read).

    Attributes:
        dict_size: Number of distinct pulled arms (the exact GP's "dictionary").
        rank: ``0`` (no embedding).
        s2_0: ``A`` batch-start variances (RLS units) when a stopping rule other
            than the product rule asks for them, else ``None``.
    """

    dict_size: int
    rank: int
    s2_0: Tensor | None


class ExactBUCBEngine:
    r"""Exact GP-BUCB on ``A`` arms, batch by batch (BBKB Alg. 2).

    Each batch: ``u_t(a) = mu_fb(a) + alpha_fb sigma_t(a)`` with the exact
    posterior (:class:`ExactPosterior`, hallucinated variances), ``alpha_fb = C
    beta_fb``; the batch ends when the stopping rule says so (default
    :class:`~botorch_sketch.bbkb.stopping.ProductRule`: ``prod_{s in batch} (1 +
    sigma^2_{s-1}(x_s)) > C``, the crossing point belongs to the batch).
    ``beta="paper"`` is Prop. 5 with the exact ``logdet``,
    ``beta = 2 xi sqrt(logdet(I + K_fb / lam) + log(1/delta)) + (1 + sqrt 2)
    sqrt(lam) F``; a number is a fixed ``beta``. ``O(t A)`` per step.

    Args:
        arms: ``A x d`` candidate set (float64).
        kernel: The prior covariance (gpytorch kernel or ``DenseKernel``).
        lam: Ridge ``lam > 0``.
        horizon: The run's horizon ``T`` (``delta``'s default ``1 / (T + 1)``).
        C: Batch threshold ``>= 1`` (``1``: GP-UCB).
        beta: ``"paper"`` or a fixed positive ``beta``.
        rule: ``None`` (product rule) or a rule name / ``StoppingRule``
            (e.g. ``"global"``: the sum rule of Lemma 1 under an exact
            dictionary).
        xi: Noise std in ``beta`` (``None``: ``sqrt(lam)``).
        delta: Confidence level in ``(0, 1)`` (``None``: ``1 / (T + 1)``).
        F: RKHS norm bound ``>= 0``.
    """

    def __init__(
        self,
        arms: Tensor,
        kernel: Kernel | DenseKernel,
        lam: float,
        horizon: int,
        C: float = BBKBConfig.C,
        beta: str | float = BBKBConfig.beta,
        rule: str | StoppingRule | None = None,
        xi: float | None = BBKBConfig.xi,
        delta: float | None = BBKBConfig.delta,
        F: float = BBKBConfig.F,
    ) -> None:
        if isinstance(beta, str) and beta != "paper":
            raise ValueError(f"unknown beta {beta!r} for GP-BUCB.")
        cfg = BBKBConfig(
            C=C,
            beta=beta,
            xi=xi,
            delta=delta,
            F=F,
            rule="product" if rule is None else rule,
        )
        self.rule = ProductRule(C) if rule is None else make_rule(rule, C)
        self.needs_view = rule is not None
        self.C, self.beta, self.lam, self.F = float(C), beta, float(lam), cfg.F
        self.xi = math.sqrt(lam) if xi is None else float(xi)
        self.delta = cfg.confidence(horizon)
        self.posterior = ExactPosterior(arms, kernel, lam, capacity=max(256, horizon))
        self.arms = self.posterior.arms
        self.alpha = math.nan
        self.state: ExactBatchView | None = None
        self.started = False
        self.kernel = None  # fixed: nothing learned (BanditResult.kernel: None)
        self.kernel_fits: list = []

    def beta_value(self) -> float:
        r"""``beta_fb`` of the next batch (from the points with feedback)."""
        if not isinstance(self.beta, str):
            return float(self.beta)
        b = 2 * self.xi * math.sqrt(self.posterior.logdet() + math.log(1 / self.delta))
        return b + (1 + math.sqrt(2)) * math.sqrt(self.lam) * self.F

    def start(self, idx: Tensor, y: Tensor, init_dictionary: object = None) -> None:
        r"""The initial arms ``idx`` and their rewards ``y`` (every arm is kept:
        ``init_dictionary`` is ignored)."""
        for a in idx.tolist():
            self.posterior.add(a)
        self.posterior.observe(y.to(torch.float64))
        self.started = True

    def next_batch(
        self,
        max_size: int,
        allow_repeats: bool = True,
        recorder: Callable[[StepRecord], None] | None = None,
    ) -> list[int]:
        r"""Select the next batch (at most ``max_size`` arms); the arms are added
        to the posterior as hallucinated points until :meth:`observe`."""
        post = self.posterior
        self.alpha = self.C * self.beta_value()
        mu = post.mean()
        s2_0 = post.variance() if self.needs_view else None
        self.state = ExactBatchView(len(set(post.points)), 0, s2_0)
        self.rule.start(self.state if self.needs_view else None)
        batch: list[int] = []
        masked = torch.zeros(mu.shape[0], dtype=torch.bool, device=mu.device)
        while True:
            var = post.variance()
            u = mu + self.alpha * var.sqrt()
            if not allow_repeats:
                u = u.masked_fill(masked, -math.inf)
            i = int(torch.argmax(u))
            batch.append(i)
            masked[i] = True
            post.add(i)
            stop = self.rule.update(i, float(var[i]))
            full = bool(masked.all()) and not allow_repeats
            done = stop or len(batch) >= max_size or full
            if recorder is not None:
                recorder(
                    StepRecord(
                        len(batch) - 1,
                        i,
                        float(u[i]),
                        float(var[i]),
                        self.rule.bound,
                        done,
                        mu.shape[0],
                    )
                )
            if done:
                return batch

    def observe(self, idx: Tensor, y: Tensor) -> None:
        r"""Rewards ``y`` of the batch ``idx`` returned by :meth:`next_batch`."""
        self.posterior.observe(y.to(torch.float64))
        self.state = None
