r"""Gradient-based sample selection (GSSBO), as pure torch functions.

Wei, Wang, Cao, Wang, Allmendinger & Alvarez, "Gradient-based Sample Selection for
Faster Bayesian Optimization" (2025), Sec. 4 and Algorithm 1. The surrogate is an
exact GP fitted on a subset ``U`` of ``M`` of the ``N`` observations; ``U`` holds
the ``n0`` initial points, the newest point, and ``M - n0 - 1`` points chosen so
that their per-sample gradients point in diverse directions.

Per-sample gradient (Eq. 3). For ``y ~ N(mu, K_y)`` with ``K_y = K + diag(noise)``
(the marginal covariance of the observations, spec caveat C3),

    g = d log p(y | X, theta) / d y = -K_y^{-1} (y - mu),     g_i a scalar,

evaluated at *pilot* hyperparameters ``theta`` (the paper's "pilot estimate",
after Zhu 2016). :func:`lml_gradients` computes it in one of two ways:

* ``"exact"``: one Cholesky of the ``N x N`` matrix ``K_y``, ``O(N^3)``.
* ``"subset"``: the gradients seen through the pilot subset ``P`` (``|P| = M``).
  For ``i in P``, ``g_i = -(K_PP^{-1} r_P)_i``, the exact gradient of the marginal
  likelihood of ``y_P``. For ``i not in P`` we use the exact gradient of the
  marginal likelihood of ``y_{P + i}`` with respect to ``y_i``; since
  ``log p(y_P, y_i) = log p(y_P) + log p(y_i | y_P)``, this is the standardised
  predictive residual ``-(r_i - mu_P(x_i)) / (sigma_P^2(x_i) + noise_i)``. Cost:
  one ``M x M`` Cholesky and one triangular solve with ``N`` right-hand sides,
  ``O(M^3 + N M^2 + N M d)``, instead of ``O(N^3)``. With ``P`` = all points both
  methods agree. This is how we avoid an ``O(N^3)`` solve per iteration once ``N``
  is large (``"auto"`` switches at ``exact_max_n`` points). The paper (Sec. 4.1)
  says ``K^{-1}`` is "available while updating the GP"; that stops being true once
  the GP is fitted on a subset, which is why a choice is needed here.

Selection objective (Eq. 1, after Aljundi et al., NeurIPS 2019): maximise the
variance of the normalised gradient directions over ``U``,

    Var_U[g / ||g||] = 1 - (1 / M^2) sum_{i, j in U} cos(g_i, g_j),

i.e. minimise the sum of pairwise cosine similarities. Three modes:

* ``"scalar"`` (paper-literal): ``g_i`` is a scalar, so ``cos(g_i, g_j) =
  sign(g_i) sign(g_j)`` and the sum equals ``(sum_{i in U} sign(g_i))^2``. Read
  literally, the criterion only balances the signs of the gradients (the signs of
  the leave-one-out residuals); within a sign every choice ties and ties are
  broken uniformly at random (spec caveat C1). We implement it faithfully.
* ``"vector"``: the per-sample gradient of the log likelihood with respect to the
  GP's function weights. Writing ``f(x) = <w, phi(x)>`` in the kernel's feature
  space, sample ``i``'s gradient is ``g_i phi(x_i)`` (the scalar of Eq. 3 times
  the "kernel column" ``phi_i`` of the paper's appendix A.1), so

      cos(g_i phi(x_i), g_j phi(x_j)) = sign(g_i) sign(g_j) rho(x_i, x_j),

  with ``rho(x, x') = k(x, x') / sqrt(k(x, x) k(x', x'))`` the kernel correlation.
  This is not degenerate: same-sign points close in input space are redundant,
  far-apart points are neutral. It is our choice, not the spec's "contribution"
  embedding ``-r_j K_y^{-1} e_j``, which needs all of ``K_y^{-1}`` (``O(N^3)``
  time, ``O(N^2)`` memory) at every iteration.
* ``"random"``: the free slots are filled uniformly at random (the paper's RSSBO
  baseline); the forced points are kept, so the ablation isolates the criterion.

Perturbation (Sec. 4.3, item 3): ``g~_i = g_i + eps_i``, ``eps_i ~ N(0,
sigma_d^2)`` with ``sigma_d^2 = 0.01`` (a variance, Sec. 6), drawn from a seeded
generator before the cosines; in ``"vector"`` mode the scalar factor is perturbed.
The noise is added to the raw gradients in the pilot model's (standardised) outcome
scale, as the paper does; its effect is therefore not scale-free (spec caveat C6):
it flips the sign of gradients with ``|g_i| <~ sigma_d``.

Solver (:func:`greedy_min_cosine`): greedy minimisation of the cosine sum (the
paper names no solver; Aljundi et al. solve an integer QP, NP-hard in general).
Each step adds the candidate with the smallest summed cosine to the points already
in ``U`` (forced points included, as Eq. 1 sums over all of ``U``) and then adds
one row of cosines to the running scores: ``O(k N)`` for the scores plus ``k +
n0 + 1`` similarity rows (``O(N)`` each for ``"scalar"``, ``O(N d)`` kernel
evaluations for ``"vector"``), ``k = M - n0 - 1``. For ``"scalar"`` the greedy
is exactly optimal (it alternates signs until one runs out).

The dynamic buffer rule (Sec. 4.3, item 1) is :class:`DynamicBufferSize`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import torch
from torch import Tensor

#: Selection modes accepted by :func:`select_subset`.
MODES = ("scalar", "vector", "random")
#: Gradient methods accepted by :func:`lml_gradients`.
GRADIENT_METHODS = ("auto", "exact", "subset")

#: Gradient-perturbation variance ``sigma_d^2`` of the paper (Sec. 6).
DEFAULT_PERTURBATION_VARIANCE = 0.01

Kernel = Callable[[Tensor, Tensor], Tensor]
KernelDiag = Callable[[Tensor], Tensor]


class SubsetReason(IntEnum):
    r"""Why a point is in the training subset."""

    INITIAL = 0  #: one of the ``n0`` initial-design points (forced)
    NEWEST = 1  #: the most recent observation (forced)
    SELECTED = 2  #: chosen by the gradient-diversity criterion
    RANDOM = 3  #: chosen uniformly at random (RSSBO)
    WITHIN_BUDGET = 4  #: ``N <= M``: every point is used, no selection


@dataclass(frozen=True)
class SubsetSelection:
    r"""Result of :func:`select_subset`.

    Attributes:
        indices: Sorted ``M``-long ``LongTensor`` of selected indices into ``D``.
        reasons: ``M``-long ``LongTensor`` of :class:`SubsetReason` codes, aligned
            with ``indices``.
    """

    indices: Tensor
    reasons: Tensor


# ---------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------


def validate_mode(mode: str) -> str:
    r"""Return ``mode`` if it is one of :data:`MODES`, else raise a ``ValueError``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
    return mode


def validate_sizes(subset_size: int, n_initial: int) -> None:
    r"""``M`` must leave at least one free slot: ``M >= n0 + 2`` (spec C5)."""
    if not isinstance(n_initial, int) or isinstance(n_initial, bool) or n_initial < 0:
        raise ValueError(f"n_initial must be a non-negative int, got {n_initial!r}.")
    if (
        not isinstance(subset_size, int)
        or isinstance(subset_size, bool)
        or subset_size <= n_initial + 1
    ):
        raise ValueError(
            "subset_size M must be an int with M > n_initial + 1 (the n_initial "
            "initial points and the newest point are always kept, and at least one "
            f"slot must be free); got M={subset_size!r}, n_initial={n_initial!r}."
        )


def _validate_variance(value: float) -> float:
    if not (isinstance(value, int | float) and value >= 0 and math.isfinite(value)):
        raise ValueError(
            f"perturbation_variance must be a finite number >= 0, got {value!r}."
        )
    return float(value)


# ---------------------------------------------------------------------------------
# Eq. 3: per-sample gradients of the log marginal likelihood w.r.t. y
# ---------------------------------------------------------------------------------


def exact_lml_gradient(covariance: Tensor, residual: Tensor) -> Tensor:
    r"""``g = -K_y^{-1} r`` (Eq. 3) by one Cholesky factorisation, ``O(N^3)``.

    Args:
        covariance: ``N x N`` marginal covariance ``K_y`` of the observations.
        residual: ``N`` residuals ``r = y - mu``.

    Returns:
        The ``N`` gradients ``d log p(y) / d y_i``.
    """
    L = torch.linalg.cholesky(covariance)
    return -torch.cholesky_solve(residual.unsqueeze(-1), L).squeeze(-1)


def subset_lml_gradient(
    X: Tensor,
    residual: Tensor,
    noise: Tensor,
    kernel: Kernel,
    kernel_diag: KernelDiag,
    pilot_subset: Tensor,
) -> Tensor:
    r"""Per-sample gradients seen through a pilot subset ``P``, ``O(M^3 + N M^2)``.

    ``g_i = -(K_PP,y^{-1} r_P)_i`` for ``i in P`` and ``g_i = -(r_i - mu_P(x_i)) /
    (sigma_P^2(x_i) + noise_i)`` otherwise, where ``mu_P``, ``sigma_P^2`` are the
    (latent) GP predictive on ``P``. Each is an exact gradient of a marginal
    likelihood: of ``y_P`` for members, of ``y_{P + i}`` for the others (see the
    module docstring). With ``P`` = all points this equals
    :func:`exact_lml_gradient`.

    Args:
        X: ``N x d`` inputs (in the kernel's input space).
        residual: ``N`` residuals ``y - mu``.
        noise: ``N`` noise variances.
        kernel: ``kernel(A, B)`` returns the dense ``|A| x |B|`` prior covariance.
        kernel_diag: ``kernel_diag(A)`` returns the ``|A|`` prior variances.
        pilot_subset: Indices of ``P`` (unique).

    Returns:
        The ``N`` gradients.
    """
    n = X.shape[0]
    P = pilot_subset.to(device=X.device)
    in_P = torch.zeros(n, dtype=torch.bool, device=X.device)
    in_P[P] = True
    C = kernel(X[P], X[P]) + torch.diag_embed(noise[P])
    L = torch.linalg.cholesky(C)
    alpha = torch.cholesky_solve(residual[P].unsqueeze(-1), L).squeeze(-1)
    grad = torch.empty_like(residual)
    grad[P] = -alpha
    out = (~in_P).nonzero().squeeze(-1)
    if out.numel() > 0:
        K_PO = kernel(X[P], X[out])
        mean = K_PO.transpose(-1, -2) @ alpha
        V = torch.linalg.solve_triangular(L, K_PO, upper=False)
        var = (kernel_diag(X[out]) - V.square().sum(0)).clamp_min(0) + noise[out]
        grad[out] = -(residual[out] - mean) / var
    return grad


def lml_gradients(
    X: Tensor,
    residual: Tensor,
    noise: Tensor,
    kernel: Kernel,
    kernel_diag: KernelDiag,
    method: str = "auto",
    pilot_subset: Tensor | None = None,
    exact_max_n: int = 1000,
) -> Tensor:
    r"""Per-sample gradients of Eq. 3 at fixed hyperparameters.

    Args:
        X: ``N x d`` inputs, residual / noise: ``N`` each (see
            :func:`subset_lml_gradient`).
        kernel, kernel_diag: Prior covariance callables.
        method: ``"exact"`` (``O(N^3)``), ``"subset"`` (``O(M^3 + N M^2)``, needs
            ``pilot_subset``) or ``"auto"``: exact while ``N <= exact_max_n`` or no
            pilot subset is given, else subset.
        pilot_subset: Indices of the pilot subset ``P``.
        exact_max_n: Threshold of ``"auto"``.

    Returns:
        The ``N`` gradients.
    """
    if method not in GRADIENT_METHODS:
        raise ValueError(
            f"gradient_method must be one of {GRADIENT_METHODS}, got {method!r}."
        )
    if method == "auto":
        exact = pilot_subset is None or X.shape[0] <= exact_max_n
        method = "exact" if exact else "subset"
    if method == "exact":
        K = kernel(X, X) + torch.diag_embed(noise)
        return exact_lml_gradient(K, residual)
    if pilot_subset is None:
        raise ValueError("gradient_method='subset' needs a pilot subset.")
    return subset_lml_gradient(X, residual, noise, kernel, kernel_diag, pilot_subset)


# ---------------------------------------------------------------------------------
# Eq. 1: gradient-direction diversity
# ---------------------------------------------------------------------------------


def gradient_direction_variance(cosines: Tensor) -> Tensor:
    r"""Eq. 1: ``1 - (1 / M^2) sum_{i, j} cos(g_i, g_j)`` from an ``M x M`` matrix."""
    M = cosines.shape[-1]
    return 1 - cosines.sum((-1, -2)) / M**2


def sign_balance_variance(gradients: Tensor) -> Tensor:
    r"""Eq. 1 for scalar gradients: ``1 - (sum_i sign(g_i) / M)^2`` (caveat C1)."""
    return 1 - (torch.sign(gradients).sum(-1) / gradients.shape[-1]) ** 2


def cosine_rows(
    mode: str,
    signs: Tensor,
    X: Tensor | None = None,
    kernel: Kernel | None = None,
    kernel_diag: KernelDiag | None = None,
) -> Callable[[Tensor, Tensor], Tensor]:
    r"""Return ``rows(a, b)``: the ``|a| x |b|`` cosines between gradients a and b.

    ``"scalar"``: ``sign_a sign_b``. ``"vector"``: ``sign_a sign_b rho(x_a, x_b)``
    (needs ``X``, ``kernel`` and ``kernel_diag``).
    """
    if mode == "scalar":
        return lambda a, b: signs[a].unsqueeze(-1) * signs[b].unsqueeze(-2)
    if X is None or kernel is None or kernel_diag is None:
        raise ValueError("mode='vector' needs X, kernel and kernel_diag.")
    scale = kernel_diag(X).clamp_min(torch.finfo(X.dtype).tiny).rsqrt()

    def rows(a: Tensor, b: Tensor) -> Tensor:
        rho = kernel(X[a], X[b]) * scale[a].unsqueeze(-1) * scale[b].unsqueeze(-2)
        return signs[a].unsqueeze(-1) * signs[b].unsqueeze(-2) * rho

    return rows


def greedy_min_cosine(
    rows: Callable[[Tensor, Tensor], Tensor],
    forced: Tensor,
    candidates: Tensor,
    k: int,
    generator: torch.Generator | None = None,
    include_forced: bool = True,
) -> Tensor:
    r"""Greedily pick ``k`` candidates minimising the summed pairwise cosines.

    Cost: ``k + |forced|`` calls of ``rows`` with one row each (``O(N)`` entries)
    and ``O(k N)`` for the running scores. Ties are broken uniformly at random: the
    candidates are visited in a random order and the first minimum wins.

    Args:
        rows: ``rows(a, b)`` -> ``|a| x |b|`` cosines (see :func:`cosine_rows`).
        forced: Indices already in the subset.
        candidates: Indices to choose from (disjoint from ``forced``).
        k: How many to choose (``<= |candidates|``).
        generator: Generator for the tie-breaking order.
        include_forced: Count cosines to the forced points (Eq. 1 sums over all of
            ``U``; spec caveat C8).

    Returns:
        The ``k`` chosen candidate indices, in the order they were picked.
    """
    order = torch.randperm(candidates.numel(), generator=generator).to(
        candidates.device
    )
    cand = candidates[order]
    score = torch.zeros(cand.numel(), dtype=torch.float64, device=cand.device)
    if include_forced and forced.numel() > 0:
        score = score + rows(forced, cand).to(score).sum(0)
    taken = torch.zeros(cand.numel(), dtype=torch.bool, device=cand.device)
    picked = []
    for _ in range(k):
        j = int(torch.argmin(score.masked_fill(taken, math.inf)))
        taken[j] = True
        picked.append(j)
        score = score + rows(cand[j : j + 1], cand).to(score)[0]
    picked_t = torch.tensor(picked, dtype=torch.long, device=cand.device)
    return cand[picked_t]


def select_subset(
    gradients: Tensor,
    subset_size: int,
    n_initial: int,
    mode: str = "vector",
    X: Tensor | None = None,
    kernel: Kernel | None = None,
    kernel_diag: KernelDiag | None = None,
    perturbation_variance: float = DEFAULT_PERTURBATION_VARIANCE,
    generator: torch.Generator | None = None,
    include_forced: bool = True,
) -> SubsetSelection:
    r"""Algorithm 1, lines 12-14: the training subset ``U`` of ``D``.

    ``D`` is in time order: indices ``0 .. n0 - 1`` are the initial design and
    ``N - 1`` is the newest point; these are forced into ``U``. The other
    ``M - n0 - 1`` points are chosen by ``mode`` (see the module docstring). With
    ``N <= M`` every point is kept.

    Args:
        gradients: ``N`` per-sample gradients (Eq. 3), unperturbed.
        subset_size: ``M`` (``> n_initial + 1``).
        n_initial: ``n0``, the number of initial-design points.
        mode: ``"scalar"``, ``"vector"`` or ``"random"``.
        X, kernel, kernel_diag: Inputs and kernel, for ``mode="vector"``.
        perturbation_variance: ``sigma_d^2`` of the Gaussian perturbation.
        generator: Seeded generator for the perturbation and the tie-breaking.
        include_forced: Whether Eq. 1 counts the forced points.

    Returns:
        A :class:`SubsetSelection`.
    """
    validate_mode(mode)
    validate_sizes(subset_size, n_initial)
    sigma2 = _validate_variance(perturbation_variance)
    if gradients.dim() != 1 or gradients.numel() == 0:
        raise ValueError(
            f"gradients must be a non-empty 1-d tensor, got {tuple(gradients.shape)}."
        )
    if not torch.isfinite(gradients).all():
        raise ValueError("gradients contain NaN or Inf.")
    n = gradients.numel()
    device = gradients.device
    if n <= subset_size:
        return SubsetSelection(
            indices=torch.arange(n, device=device),
            reasons=torch.full(
                (n,), int(SubsetReason.WITHIN_BUDGET), dtype=torch.long, device=device
            ),
        )
    forced = torch.cat(
        [torch.arange(n_initial, device=device), torch.tensor([n - 1], device=device)]
    )
    candidates = torch.arange(n_initial, n - 1, device=device)
    k = subset_size - n_initial - 1
    if mode == "random":
        perm = torch.randperm(candidates.numel(), generator=generator).to(device)
        chosen = candidates[perm[:k]]
        reason = SubsetReason.RANDOM
    else:
        noise = torch.randn(n, generator=generator, dtype=gradients.dtype)
        perturbed = gradients + math.sqrt(sigma2) * noise.to(device)
        rows = cosine_rows(mode, torch.sign(perturbed), X, kernel, kernel_diag)
        chosen = greedy_min_cosine(
            rows, forced, candidates, k, generator, include_forced=include_forced
        )
        reason = SubsetReason.SELECTED
    reasons = torch.full((n,), -1, dtype=torch.long, device=device)
    reasons[:n_initial] = int(SubsetReason.INITIAL)
    reasons[n - 1] = int(SubsetReason.NEWEST)
    reasons[chosen] = int(reason)
    indices = (reasons >= 0).nonzero().squeeze(-1)
    return SubsetSelection(indices=indices, reasons=reasons[indices])


# ---------------------------------------------------------------------------------
# Sec. 4.3 item 1: dynamic buffer size
# ---------------------------------------------------------------------------------


class DynamicBufferSize:
    r"""The paper's time-triggered switch to a fixed buffer size (Sec. 4.3, Alg. 1).

    ``T_bar`` is the mean compute time of the first ``n_warmup`` iterations
    (spec caveat C5: the paper's "average time for a single initial iteration");
    at the first later iteration with ``T_current > Z T_bar`` the buffer size is
    frozen at ``M = max(N, min_size)`` and never changes again. Times are passed
    in by the caller (it measures them), so the rule is deterministic given the
    times; the times themselves depend on the machine.

    Args:
        factor: ``Z``, the tolerated slow-down (paper: 4).
        n_warmup: Iterations averaged into ``T_bar``.
        min_size: Lower bound on ``M`` (use ``n0 + 2``).
    """

    def __init__(self, factor: float = 4.0, n_warmup: int = 3, min_size: int = 2):
        if not (isinstance(factor, int | float) and factor > 0):
            raise ValueError(f"factor Z must be a positive number, got {factor!r}.")
        if not (isinstance(n_warmup, int) and n_warmup > 0):
            raise ValueError(f"n_warmup must be a positive int, got {n_warmup!r}.")
        self.factor = float(factor)
        self.n_warmup = n_warmup
        self.min_size = min_size
        self.warmup_times: list[float] = []
        self.size: int | None = None
        self.switch_n: int | None = None

    @property
    def mean_initial_time(self) -> float | None:
        r"""``T_bar`` once the warm-up is complete, else ``None``."""
        if len(self.warmup_times) < self.n_warmup:
            return None
        return sum(self.warmup_times) / len(self.warmup_times)

    def update(self, iteration_time: float, n: int) -> int | None:
        r"""Record one iteration's compute time with ``n`` points in ``D``.

        Returns:
            The frozen buffer size ``M`` once switched, else ``None`` (use all).
        """
        if self.size is not None:
            return self.size
        if len(self.warmup_times) < self.n_warmup:
            self.warmup_times.append(float(iteration_time))
            return None
        t_bar = self.mean_initial_time
        if t_bar is not None and iteration_time > self.factor * t_bar:
            self.size = max(n, self.min_size)
            self.switch_n = n
        return self.size
