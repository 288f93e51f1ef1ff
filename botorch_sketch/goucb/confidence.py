r"""GO-UCB's gradient confidence set: ``Sigma_t``, ``w_hat_t``, ``Ball_t``, ``beta_t``.

Liu & Wang (ICML 2023), Algorithm 1, Phase II. With ``g_i = \nabla_w f(x_i; w_hat_i)``
the parameter gradient at the ``i``-th Phase II query, *evaluated at the estimate
current when that point was chosen* and frozen afterwards,

    Sigma_t = lambda I + sum_{i<t} g_i g_i^T                                  (Eq. 3)
    w_hat_t = w_hat_0 + Sigma_t^{-1} sum_{i<t} g_i r_i,
        r_i = y_i - f(x_i; w_hat_i) + g_i^T (w_hat_i - w_hat_0)               (Eq. 5)
    Ball_t  = {w : ||w - w_hat_t||^2_{Sigma_t} <= beta_t}                     (Eq. 6)

The residual form of ``w_hat_t`` is algebraically Eq. (5) (expand
``Sigma_t w_hat_0``) and solves for a small offset from ``w_hat_0`` (spec Sec. 2.4).
Rounds are 1-indexed: ``Sigma_1 = lambda I`` and ``w_hat_1 = w_hat_0`` (the paper sums
over ``i = 0..t-1`` without defining ``x_0``; spec Sec. 8.1).

:class:`GradientConfidenceSet` keeps ``Sigma_t^{-1}`` up to date with Sherman-Morrison
rank-one updates (paper Lemma B.2), ``O(d_w^2)`` per round, and can be rebuilt from
the stored gradients by a Cholesky solve (:meth:`GradientConfidenceSet.recomputed`).
The ``beta_t`` schedules of Sec. 6.5 of the spec are small callables
``beta(t, confidence_set) -> float``.

Linearized optimism (spec Sec. 3.2): maximizing the first-order model
``f(x; w_hat) + g(x)^T (w - w_hat)`` over ``Ball_t`` gives
``f(x; w_hat) + sqrt(beta_t) ||g(x)||_{Sigma_t^{-1}}`` at
``w*(x) = w_hat + sqrt(beta_t) Sigma_t^{-1} g(x) / ||g(x)||_{Sigma_t^{-1}}``
(:func:`ellipsoid_argmax`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from torch import Tensor


def sherman_morrison(A_inv: Tensor, u: Tensor) -> Tensor:
    r"""``(A + u u^T)^{-1}`` from a symmetric ``A^{-1}`` (paper Lemma B.2).

    ``(A + u u^T)^{-1} = A^{-1} - A^{-1} u u^T A^{-1} / (1 + u^T A^{-1} u)``; the result
    is re-symmetrized to stop round-off from accumulating asymmetrically.

    Args:
        A_inv: ``d x d`` symmetric positive definite inverse.
        u: ``d`` vector.
    """
    v = A_inv @ u
    out = A_inv - torch.outer(v, v) / (1.0 + u @ v)
    return 0.5 * (out + out.transpose(-1, -2))


def paper_lambda(T: int) -> float:
    r"""The experiments' regularization ``lambda = sqrt(T) log^2 T`` (Appendix D.1).

    The log base is not stated; we use the natural log and clamp at 1, since
    ``log^2 T < 1`` for ``T <= 2`` (spec Sec. 6.4). Theory uses
    ``lambda = C_lambda sqrt(T)`` with ``C_lambda = O~(d_w^2 / mu)`` (Eq. 16).
    """
    if not (isinstance(T, int) and T > 0):
        raise ValueError(f"T must be a positive int, got {T!r}.")
    return max(1.0, math.sqrt(T) * math.log(T) ** 2)


#: The tensor fields of :class:`GradientConfidenceSet`.
TENSOR_FIELDS = ("w0", "sigma_inv", "b", "G", "r", "u2")


@dataclass(frozen=True)
class GradientConfidenceSet:
    r"""The state ``(Sigma_t, w_hat_t)`` of GO-UCB's Phase II.

    Immutable: :meth:`update` returns a new set, so a failed update never leaves a
    half-updated state behind.

    Attributes:
        lam: Regularization ``lambda > 0``.
        w0: ``d_w`` Phase I estimate ``w_hat_0`` (the ridge centre).
        sigma_inv: ``d_w x d_w`` matrix ``Sigma_t^{-1}``.
        b: ``d_w`` vector ``sum_i g_i r_i``.
        G: ``(t-1) x d_w`` frozen gradients ``g_i`` (rows in query order).
        r: ``t-1`` linearized residuals ``r_i`` relative to ``w_hat_0``.
        u2: ``t-1`` values ``u_i^2 = g_i^T Sigma_i^{-1} g_i`` (each taken before
            adding ``g_i``), so that
            ``log det Sigma_t = d_w log lambda + sum log(1 + u_i^2)`` (Lemma C.4).
    """

    lam: float
    w0: Tensor
    sigma_inv: Tensor
    b: Tensor
    G: Tensor
    r: Tensor
    u2: Tensor

    @classmethod
    def initial(cls, w0: Tensor, lam: float) -> GradientConfidenceSet:
        r"""``Sigma_1 = lambda I`` and ``w_hat_1 = w_hat_0``."""
        positive_float(lam, "lambda_")
        if w0.dim() != 1 or not torch.isfinite(w0).all():
            raise ValueError("w0 must be a finite 1-d parameter vector.")
        d_w = w0.shape[0]
        eye = torch.eye(d_w, dtype=w0.dtype, device=w0.device)
        empty = w0.new_zeros(0)
        return cls(
            lam=float(lam),
            w0=w0.detach().clone(),
            sigma_inv=eye / lam,
            b=torch.zeros_like(w0),
            G=w0.new_zeros(0, d_w),
            r=empty,
            u2=empty,
        )

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> GradientConfidenceSet:
        r"""The same set with ``fn`` applied to every tensor (e.g. a dtype cast)."""
        return replace(
            self, **{name: fn(getattr(self, name)) for name in TENSOR_FIELDS}
        )

    def to_dict(self) -> dict[str, Any]:
        r"""Plain ``{field: value}`` (tensors cloned), inverse of :meth:`from_dict`."""
        out: dict[str, Any] = {"lam": self.lam}
        out.update(
            {name: getattr(self, name).detach().clone() for name in TENSOR_FIELDS}
        )
        return out

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> GradientConfidenceSet:
        r"""The set saved by :meth:`to_dict`."""
        missing = {"lam", *TENSOR_FIELDS} - set(state)
        if missing:
            raise ValueError(f"confidence set state lacks {sorted(missing)}.")
        return cls(lam=float(state["lam"]), **{n: state[n] for n in TENSOR_FIELDS})

    @property
    def d_w(self) -> int:
        """Number of parameters."""
        return self.w0.shape[0]

    @property
    def num_updates(self) -> int:
        """Number of Phase II points absorbed (``t - 1``)."""
        return self.G.shape[0]

    @property
    def w_hat(self) -> Tensor:
        r"""``w_hat_t = w_hat_0 + Sigma_t^{-1} b`` (Eq. 5, residual form)."""
        return self.w0 + self.sigma_inv @ self.b

    @property
    def sigma(self) -> Tensor:
        r"""``Sigma_t = lambda I + G^T G`` (Eq. 3)."""
        eye = torch.eye(self.d_w, dtype=self.w0.dtype, device=self.w0.device)
        return self.lam * eye + self.G.transpose(-1, -2) @ self.G

    @property
    def log_det_ratio(self) -> float:
        r"""``log det Sigma_t - d_w log lambda = sum_i log(1 + u_i^2)`` (Lemma C.4)."""
        return float(torch.log1p(self.u2).sum())

    def update(
        self,
        g: Tensor,
        f: Tensor | float,
        y: Tensor | float,
        at: Tensor | None = None,
    ) -> GradientConfidenceSet:
        r"""Absorb one Phase II observation (Algorithm 1, steps 2-3 of the next round).

        Args:
            g: ``d_w`` gradient ``\nabla_w f(x_t; w)`` at the linearization point.
            f: ``f(x_t; w)``.
            y: The observation ``y_t``.
            at: The linearization point ``w``; default the current ``w_hat_t``
                (the paper's rule). Pass ``w0`` to linearize at ``w_hat_0``.

        Returns:
            The set of round ``t + 1``.
        """
        if g.shape != (self.d_w,):
            raise ValueError(f"g must have shape ({self.d_w},), got {tuple(g.shape)}.")
        g = g.detach().to(self.w0)
        f = torch.as_tensor(f, dtype=self.w0.dtype, device=self.w0.device).detach()
        y = torch.as_tensor(y, dtype=self.w0.dtype, device=self.w0.device).detach()
        if not (torch.isfinite(g).all() and torch.isfinite(f) and torch.isfinite(y)):
            raise ValueError("GO-UCB update got a non-finite gradient, value or y.")
        at = self.w_hat if at is None else at.detach().to(self.w0)
        r = y - f + g @ (at - self.w0)
        u2 = g @ self.sigma_inv @ g
        return replace(
            self,
            sigma_inv=sherman_morrison(self.sigma_inv, g),
            b=self.b + r * g,
            G=torch.cat([self.G, g.unsqueeze(0)]),
            r=torch.cat([self.r, r.reshape(1)]),
            u2=torch.cat([self.u2, u2.reshape(1)]),
        )

    def recomputed(self) -> GradientConfidenceSet:
        r"""The same set with ``Sigma_t^{-1}`` recomputed by a Cholesky solve.

        ``O(d_w^3)``; removes any drift of the Sherman-Morrison recursion.
        """
        L = torch.linalg.cholesky(self.sigma)
        eye = torch.eye(self.d_w, dtype=self.w0.dtype, device=self.w0.device)
        sigma_inv = torch.cholesky_solve(eye, L)
        return replace(self, sigma_inv=0.5 * (sigma_inv + sigma_inv.T))

    def quad(self, J: Tensor) -> Tensor:
        r"""``J Sigma_t^{-1} J^T`` for ``... x q x d_w`` Jacobians (``... x q x q``)."""
        JS = J @ self.sigma_inv
        return JS @ J.transpose(-1, -2)


def ridge_estimate(G: Tensor, r: Tensor, w0: Tensor, lam: float) -> Tensor:
    r"""``w_hat_t`` by a direct solve of Eq. (4) (reference for the recursion).

    ``argmin_w lambda/2 ||w - w0||^2 + 1/2 sum_i (g_i^T (w - w0) - r_i)^2``, solved in
    dual form ``w0 + G^T (lambda I + G G^T)^{-1} r`` (push-through identity,
    ``O(t^2 d_w + t^3)``).

    Args:
        G: ``t x d_w`` gradients.
        r: ``t`` residuals relative to ``w0``.
        w0: ``d_w`` ridge centre.
        lam: ``lambda > 0``.
    """
    K = G @ G.T + lam * torch.eye(G.shape[0], dtype=G.dtype, device=G.device)
    return w0 + G.T @ torch.linalg.solve(K, r)


def ellipsoid_argmax(
    g: Tensor, sigma_inv: Tensor, beta: float
) -> tuple[Tensor, Tensor]:
    r"""Maximize ``g^T v`` over ``v^T Sigma v <= beta`` (spec Sec. 3.2, Cauchy-Schwarz).

    Args:
        g: ``... x d_w`` gradients.
        sigma_inv: ``d_w x d_w`` matrix ``Sigma^{-1}``.
        beta: Squared radius ``beta >= 0``.

    Returns:
        ``(value, v*)``: ``sqrt(beta) ||g||_{Sigma^{-1}}`` (shape ``...``) and the
        maximizing offset ``v* = sqrt(beta) Sigma^{-1} g / ||g||_{Sigma^{-1}}``
        (``... x d_w``; zero where ``g = 0``).
    """
    Sg = g @ sigma_inv
    norm = (Sg * g).sum(-1).clamp_min(0.0).sqrt()
    scale = math.sqrt(beta) / torch.where(norm > 0, norm, torch.ones_like(norm))
    return math.sqrt(beta) * norm, Sg * scale.unsqueeze(-1)


# ---------------------------------------------------------------------------------
# beta_t schedules (spec Sec. 6.5). ``t`` is the 1-based Phase II round.
# ---------------------------------------------------------------------------------


class BetaSchedule(Protocol):
    """A squared ellipsoid radius ``beta_t`` for Phase II round ``t`` (1-based)."""

    def __call__(self, t: int, confidence_set: GradientConfidenceSet) -> float: ...


def positive_float(value: float, name: str) -> float:
    """``float(value)``, or ``ValueError`` naming ``name`` unless it is in (0, inf)."""
    if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}.")
    return float(value)


@dataclass(frozen=True)
class ConstantBeta:
    """A user-fixed ``beta_t = beta``."""

    beta: float

    def __post_init__(self) -> None:
        positive_float(self.beta, "beta")

    def __call__(self, t: int, confidence_set: GradientConfidenceSet) -> float:
        return float(self.beta)


@dataclass(frozen=True)
class PaperBeta:
    r"""The experiments' schedule ``beta_t = d_w^3 F^4 t / T`` (Appendix D.1).

    Astronomically large in the paper's settings (``~7.6e13`` at ``t = T`` for f1,
    spec Sec. 6.5): the optimism term then dominates and the selection is essentially
    uncertainty sampling. ``F`` (a bound on ``|f|``) is not given for the experiments;
    :func:`~botorch_sketch.loops.goucb.run_goucb` uses ``max |y|`` of Phase I.
    """

    T: int
    F: float

    def __post_init__(self) -> None:
        if not (isinstance(self.T, int) and self.T > 0):
            raise ValueError(f"T must be a positive int, got {self.T!r}.")
        positive_float(self.F, "F")

    def __call__(self, t: int, confidence_set: GradientConfidenceSet) -> float:
        return confidence_set.d_w**3 * self.F**4 * t / self.T


@dataclass(frozen=True)
class TheoryBeta:
    r"""Eq. (7) with one user constant: ``c0 (d_w sigma^2 + d_w^3 / mu^2 (1 + t / T))``.

    Eq. (7) is stated up to constants and log factors; ``c0`` absorbs them.
    """

    T: int
    sigma: float
    mu: float
    c0: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.T, int) and self.T > 0):
            raise ValueError(f"T must be a positive int, got {self.T!r}.")
        for name in ("sigma", "mu", "c0"):
            positive_float(getattr(self, name), name)

    def __call__(self, t: int, confidence_set: GradientConfidenceSet) -> float:
        d_w = confidence_set.d_w
        return self.c0 * (
            d_w * self.sigma**2 + d_w**3 / self.mu**2 * (1.0 + t / self.T)
        )


@dataclass(frozen=True)
class OFULBeta:
    r"""Self-normalized radius (not in the paper; spec Sec. 6.5, ``oful``).

    ``beta_t = (sigma sqrt(log det Sigma_t / lambda^{d_w} + 2 log(1/delta))
    + sqrt(lambda) S)^2``, the Abbasi-Yadkori et al. radius (paper Lemmas B.3 and
    C.4), ignoring the Taylor-remainder term. ``S`` guesses ``||w_hat_0 - w*||_2``.
    """

    sigma: float = 1.0
    delta: float = 0.1
    S: float = 1.0

    def __post_init__(self) -> None:
        positive_float(self.sigma, "sigma")
        positive_float(self.S, "S")
        if not (0 < self.delta < 1):
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}.")

    def __call__(self, t: int, confidence_set: GradientConfidenceSet) -> float:
        noise = self.sigma * math.sqrt(
            confidence_set.log_det_ratio + 2.0 * math.log(1.0 / self.delta)
        )
        return (noise + math.sqrt(confidence_set.lam) * self.S) ** 2


def as_beta_schedule(beta: float | BetaSchedule) -> BetaSchedule:
    """A number becomes :class:`ConstantBeta`; callables pass through."""
    if isinstance(beta, bool):
        raise TypeError("beta must be a positive number or a beta schedule.")
    if isinstance(beta, int | float):
        return ConstantBeta(float(beta))
    if callable(beta):
        return beta
    raise TypeError(
        f"beta must be a positive number or a beta schedule, got {type(beta).__name__}."
    )
