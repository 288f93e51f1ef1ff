r"""Linear-algebra core for Nyström / DTC sparse Gaussian processes.

Pure torch, no BoTorch imports. Every function is batched over leading dimensions
where that is natural, and documented with shapes (``batch_shape x n x d``).
Numerically sensitive steps (eigendecompositions, Cholesky factors, variance
differences) should be run in float64; callers cast before calling.

Notation (Calandriello et al., "Near-linear time Gaussian process optimization with
adaptive batching and resparsification", ICML 2020, Eqs. 1-3; and Calandriello et
al., "Gaussian process optimization with adaptive sketching", COLT 2019, Eq. 4):

- ``S`` is the dictionary (inducing points), ``K_S = k(S, S)`` (``m x m``),
  ``k_S(x) = k(S, x)``.
- The Nyström embedding is ``z(x) = K_S^{+1/2} k_S(x)``, so that
  ``z(x)^T z(x') = k_S(x)^T K_S^+ k_S(x')`` is the Nyström approximation of ``k``.
- ``Z = [z(x_1), ..., z(x_n)]^T`` (``n x r``) embeds the training inputs, and the
  observation noise variances are ``N = diag(noise)``.

All posterior formulas here use "GP units": with ``A = I + Z^T N^{-1} Z``,

    mean(x)      = z(x)^T A^{-1} Z^T N^{-1} (y - m)
    cov(x, x')   = k(x, x') - z(x)^T z(x') + z(x)^T A^{-1} z(x')

which is the DTC (deterministic training conditional, a.k.a. projected process)
predictive of Quiñonero-Candela & Rasmussen (2005) for the latent function. With a
homoscedastic noise ``noise = lambda`` this equals ``lambda * k~_t(x, x')`` of the
BBKB paper's Eq. 2, whose variances ``sigma~^2 = k~_t(x, x)`` are in "RLS units"
(ridge leverage scores). :func:`rls_units` converts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

__all__ = [
    "DTCFactor",
    "DTCPredictor",
    "DictionaryDraw",
    "ExactFactor",
    "LeverageDictionary",
    "REPEAT_RULES",
    "bless",
    "bless_dictionary",
    "budget_scale",
    "cholesky_embedding_map",
    "cholesky_features",
    "cholesky_rank_one_update",
    "dtc_covariance",
    "dtc_explained_basis",
    "dtc_factor",
    "dtc_log_marginal_likelihood",
    "dtc_features",
    "dtc_mean",
    "dtc_predict",
    "dtc_predictor",
    "dtc_variance",
    "embedding_residual",
    "exact_factor",
    "exact_features",
    "exact_log_marginal_likelihood",
    "exact_predictor",
    "exact_predictor_from_factor",
    "hallucinate_point",
    "jittered_cholesky",
    "nystrom_embedding_map",
    "rls_inclusion_probabilities",
    "ROW_CHUNK",
    "map_row_chunks",
    "rls_units",
    "row_chunks",
    "sample_dictionary",
    "variance_downdate",
    "whiten",
]


#: Rows processed at once by the ``O(n m)`` passes over the training data
#: (:func:`map_row_chunks`, :func:`dtc_factor`, :func:`dtc_variance`): their
#: transient memory is ``O(ROW_CHUNK m)`` instead of ``O(n m)``.
ROW_CHUNK = 16_384


def _eye_like(x: Tensor, n: int) -> Tensor:
    return torch.eye(n, dtype=x.dtype, device=x.device)


def _add_to_diagonal(K: Tensor, values: Tensor) -> Tensor:
    """``K + diag(values)`` as a new tensor, without an ``n x n`` identity."""
    out = K.clone()
    out.diagonal(dim1=-2, dim2=-1).add_(values)
    return out


def row_chunks(n: int, size: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` bounds of the consecutive chunks of ``size`` rows of ``n``."""
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def _row_slices(n: int, chunk_size: int) -> list[slice]:
    return [slice(lo, hi) for lo, hi in row_chunks(n, chunk_size)]


def map_row_chunks(
    fn: Callable[[Tensor], Tensor], X: Tensor, chunk_size: int = ROW_CHUNK
) -> Tensor:
    r"""``fn(X)`` computed over chunks of ``X``'s rows, written into one output.

    For a row-wise ``fn`` mapping ``batch_shape x n x d`` to ``batch_shape' x n x
    r`` (e.g. the embedding ``X -> k(X, S) W``), the ``n x |S|`` intermediate
    exists one chunk at a time, so the peak memory is the output plus
    ``O(chunk_size |S|)``. Without chunking (``n <= chunk_size``, or gradients
    flowing through ``X``) it is ``fn(X)``.
    """
    n = X.shape[-2]
    if n <= chunk_size or (torch.is_grad_enabled() and X.requires_grad):
        return fn(X)
    slices = _row_slices(n, chunk_size)
    first = fn(X[..., slices[0], :])
    out = first.new_empty(*first.shape[:-2], n, first.shape[-1])
    out[..., slices[0], :] = first
    del first
    for rows in slices[1:]:
        out[..., rows, :] = fn(X[..., rows, :])
    return out


# ---------------------------------------------------------------------------------
# Nyström embedding
# ---------------------------------------------------------------------------------


def nystrom_embedding_map(K_S: Tensor, rtol: float | None = None) -> Tensor:
    r"""Matrix ``W`` such that ``z(x) = W^T k_S(x)`` is the Nyström embedding.

    ``K_S = U diag(e) U^T`` is eigendecomposed and the eigenpairs with
    ``e_i <= max(e) * m * eps`` (the rule of ``numpy.linalg.pinv``; BKB, Sec. 9 of
    our spec) are dropped, so a singular dictionary (duplicated or collinear points)
    works. ``W = U_keep diag(e_keep^{-1/2})`` and ``W W^T = K_S^+``. The embedding
    differs from ``K_S^{+1/2} k_S(x)`` by the rotation ``U_keep^T``, which leaves
    every inner product ``z(x)^T z(x')``, hence every DTC quantity, unchanged.

    Without batch dimensions the returned map has exactly ``r = rank`` columns. With
    batch dimensions it has ``r = max rank`` columns, and the columns beyond each
    batch member's own rank are zero (a zero column embeds nothing and leaves the
    DTC posterior unchanged), so shapes stay rectangular.

    Args:
        K_S: ``batch_shape x m x m`` symmetric PSD kernel matrix of the dictionary.
        rtol: Relative eigenvalue cut-off; defaults to ``m * eps(dtype)``.

    Returns:
        A ``batch_shape x m x r`` tensor ``W`` (``r <= m``, ``r = 0`` if ``m = 0``).
    """
    m = K_S.shape[-1]
    if K_S.shape[-2] != m:
        raise ValueError(f"K_S must be square, got shape {tuple(K_S.shape)}.")
    if m == 0:
        return K_S.new_zeros(*K_S.shape[:-1], 0)
    if rtol is None:
        rtol = m * torch.finfo(K_S.dtype).eps
    evals, evecs = torch.linalg.eigh(0.5 * (K_S + K_S.mT))  # ascending order
    cutoff = evals[..., -1:].clamp_min(0.0) * rtol
    keep = evals > cutoff
    r = int(keep.sum(-1).max().item()) if keep.numel() else 0
    inv_sqrt = torch.where(keep, evals.clamp_min(torch.finfo(K_S.dtype).tiny), 1.0)
    inv_sqrt = torch.where(keep, inv_sqrt.rsqrt(), torch.zeros_like(evals))
    W = evecs * inv_sqrt.unsqueeze(-2)
    return W[..., m - r :]


def cholesky_features(K_XS: Tensor, K_S: Tensor, jitter: float = 1e-8) -> Tensor:
    r"""Nyström features ``Z = K_XS L_S^{-T}`` from a jittered Cholesky of ``K_S``.

    ``Z Z^T = K_XS (K_S + eps I)^{-1} K_SX``, the same Nyström approximation as
    :func:`nystrom_embedding_map` up to the jitter. Used for training objectives:
    gradients through an eigendecomposition are unstable when eigenvalues cluster
    (``1 / (e_i - e_j)`` terms), gradients through a Cholesky factor are not. The
    jitter is relative to the mean diagonal and is increased tenfold (up to 4 times)
    if the factorisation fails.

    Args:
        K_XS: ``batch_shape x n x m`` cross-covariance.
        K_S: ``batch_shape x m x m`` dictionary covariance.
        jitter: Initial relative jitter.

    Returns:
        A ``batch_shape x n x m`` tensor.
    """
    L = jittered_cholesky(K_S, 10.0 * jitter, first=jitter)
    return torch.linalg.solve_triangular(L, K_XS.mT, upper=False).mT


def jittered_cholesky(
    K: Tensor, jitter: float = 1e-8, first: float = 0.0, name: str = "K_S"
) -> Tensor:
    r"""Lower Cholesky factor of ``K + j s I`` (``s`` the mean diagonal).

    ``j = first`` at the first try, then ``jitter``, increased tenfold at each
    failure: five tries in all.

    Args:
        K: ``batch_shape x m x m`` symmetric matrix.
        jitter: Relative jitter of the second try.
        first: Relative jitter of the first try (``0``: none).
        name: How an error names ``K``.

    Returns:
        The ``batch_shape x m x m`` factor.

    Raises:
        torch.linalg.LinAlgError: If ``K`` is not positive definite even with
            the largest jitter.
    """
    scale = K.diagonal(dim1=-2, dim2=-1).mean(-1, keepdim=True)
    for j in (first, *(jitter * 10.0**k for k in range(4))):
        L, info = torch.linalg.cholesky_ex(_add_to_diagonal(K, j * scale) if j else K)
        if not info.any():
            return L
    raise torch.linalg.LinAlgError(f"{name} is not positive definite even with jitter.")


def cholesky_embedding_map(K_S: Tensor, jitter: float = 1e-8) -> Tensor:
    r"""Embedding map ``W = L_S^{-T}`` of a jittered Cholesky ``L_S L_S^T = K_S +
    eps I`` (:func:`jittered_cholesky`, ``eps`` = ``jitter`` times the mean
    diagonal, raised tenfold while the factorisation fails, as
    :func:`cholesky_features`).

    ``z(x) = W^T k_S(x) = L_S^{-1} k_S(x)``: the Nyström embedding of
    :func:`nystrom_embedding_map` up to the jitter and a rotation, in
    ``O(2 m^3 / 3)`` (a factor and a triangular inverse) instead of an
    eigendecomposition's ``O(10 m^3)``. For a dictionary whose ``K_S`` is well
    conditioned, e.g. every training point of a model (the noise keeps the
    posterior well posed whatever the jitter); a singular dictionary of
    duplicated points needs the pseudo-inverse of :func:`nystrom_embedding_map`.

    Args:
        K_S: ``batch_shape x m x m`` dictionary covariance.
        jitter: Initial relative jitter.

    Returns:
        A ``batch_shape x m x m`` tensor ``W``.
    """
    L = jittered_cholesky(K_S, 10.0 * jitter, first=jitter)
    eye = _eye_like(K_S, K_S.shape[-1]).expand_as(L)
    return torch.linalg.solve_triangular(L, eye, upper=False).mT


def embedding_residual(kdiag: Tensor, Z: Tensor) -> Tensor:
    r"""Nyström residual ``k(x, x) - ||z(x)||^2``, clamped at zero.

    This is the term that keeps the DTC variance from starving far away from the
    dictionary (BKB, Sec. 3.1). It is non-negative in exact arithmetic.

    Args:
        kdiag: ``batch_shape x n`` prior variances ``k(x, x)``.
        Z: ``batch_shape x n x r`` embeddings.

    Returns:
        A ``batch_shape x n`` tensor.
    """
    return (kdiag - Z.pow(2).sum(-1)).clamp_min(0.0)


# ---------------------------------------------------------------------------------
# DTC posterior from an embedding
# ---------------------------------------------------------------------------------


class DTCFactor(NamedTuple):
    r"""Cached factorisation of a DTC posterior.

    Attributes:
        chol: ``batch_shape x r x r`` lower Cholesky factor ``L`` of
            ``A = I + Z^T N^{-1} Z``.
        coef: ``batch_shape x r`` vector ``c = L^{-1} Z^T N^{-1} (y - m)``, so that
            the posterior mean is ``mean(x) = (L^{-1} z(x))^T c``.
    """

    chol: Tensor
    coef: Tensor


def dtc_factor(
    Z: Tensor, residual_y: Tensor, noise: Tensor, chunk_size: int = ROW_CHUNK
) -> DTCFactor:
    r"""Factorise the DTC posterior given embedded training data.

    Cost ``O(n r^2 + r^3)`` time; memory ``O(r^2 + chunk_size r)`` beyond the
    inputs (the weighted embedding ``N^{-1} Z`` is formed one chunk of rows at a
    time when ``n > chunk_size`` and no gradient flows through ``Z``).

    Args:
        Z: ``batch_shape x n x r`` embedded training inputs.
        residual_y: ``batch_shape x n`` centred targets ``y - m(X)``.
        noise: ``batch_shape x n`` (or broadcastable) observation noise variances,
            all strictly positive.
        chunk_size: Rows per chunk.

    Returns:
        The :class:`DTCFactor` of ``A = I + Z^T N^{-1} Z``.
    """
    n, r = Z.shape[-2:]
    noise = noise.expand(*noise.shape[:-1], n)
    grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (Z, residual_y, noise)
    )
    A = _eye_like(Z, r)
    b = 0.0
    for rows in [slice(None)] if grad else _row_slices(n, chunk_size):
        Zc = Z[..., rows, :]
        Zw = Zc * noise[..., rows].reciprocal().unsqueeze(-1)  # batch x c x r
        A = A + Zc.mT @ Zw
        b = b + Zw.mT @ residual_y[..., rows].unsqueeze(-1)  # batch x r x 1
    L = torch.linalg.cholesky(A)
    c = torch.linalg.solve_triangular(L, b, upper=False).squeeze(-1)
    return DTCFactor(chol=L, coef=c)


def whiten(factor: DTCFactor, Z_test: Tensor) -> Tensor:
    r"""``L^{-1} Z_test^T`` as a ``batch_shape x r x q`` tensor.

    For an unbatched factor, the test batch dimensions are folded into the columns
    of one triangular solve, so a ``b x q x r`` input never expands ``L`` to
    ``b x r x r``.
    """
    L = factor.chol
    if L.dim() == 2:
        r = L.shape[-1]
        cols = Z_test.reshape(-1, r).mT
        out = torch.linalg.solve_triangular(L, cols, upper=False)
        return out.mT.reshape(Z_test.shape).mT
    Zt = Z_test.mT
    batch = torch.broadcast_shapes(L.shape[:-2], Zt.shape[:-2])
    return torch.linalg.solve_triangular(
        L.expand(*batch, *L.shape[-2:]), Zt.expand(*batch, *Zt.shape[-2:]), upper=False
    )


def dtc_mean(factor: DTCFactor, Z_test: Tensor) -> Tensor:
    r"""DTC posterior mean minus the prior mean, ``z(x)^T A^{-1} Z^T N^{-1} (y - m)``.

    BBKB paper Eq. 1 (with ``V = lambda A`` for homoscedastic noise ``lambda``).

    Args:
        factor: The :class:`DTCFactor` of the training data.
        Z_test: ``batch_shape x q x r`` embedded test inputs.

    Returns:
        A ``batch_shape x q`` tensor.
    """
    return (whiten(factor, Z_test) * factor.coef.unsqueeze(-1)).sum(-2)


def dtc_variance(
    factor: DTCFactor, Z_test: Tensor, kdiag_test: Tensor, chunk_size: int = ROW_CHUNK
) -> Tensor:
    r"""DTC posterior variance of the latent function (GP units).

    ``var(x) = k(x, x) - ||z(x)||^2 + ||L^{-1} z(x)||^2``, i.e. BBKB Eq. 3 times
    ``lambda``. The residual is clamped at zero. The whitened embedding is formed
    ``chunk_size`` rows at a time (memory ``O(chunk_size r)`` beyond the inputs).

    Args:
        factor: The :class:`DTCFactor` of the training data.
        Z_test: ``batch_shape x q x r`` embedded test inputs.
        kdiag_test: ``batch_shape x q`` prior variances ``k(x, x)``.
        chunk_size: Rows per chunk.

    Returns:
        A ``batch_shape x q`` tensor.
    """

    def variance(rows: slice) -> Tensor:
        Zc = Z_test[..., rows, :]
        W = whiten(factor, Zc)
        return embedding_residual(kdiag_test[..., rows], Zc) + W.pow(2).sum(-2)

    q = Z_test.shape[-2]
    if q <= chunk_size:
        return variance(slice(None))
    return torch.cat([variance(rows) for rows in _row_slices(q, chunk_size)], -1)


def dtc_covariance(factor: DTCFactor, Z_test: Tensor, K_test: Tensor) -> Tensor:
    r"""Joint DTC posterior covariance of the latent function (GP units).

    ``cov = K** - Z* Z*^T + (L^{-1} Z*^T)^T (L^{-1} Z*^T)`` (BBKB Eq. 2 times
    ``lambda``). It uses the exact prior ``K**`` on the test points, which is what
    distinguishes DTC from SoR (``Z* Z*^T``) and FITC.

    Args:
        factor: The :class:`DTCFactor` of the training data.
        Z_test: ``batch_shape x q x r`` embedded test inputs.
        K_test: ``batch_shape x q x q`` prior covariance of the test inputs.

    Returns:
        A symmetric ``batch_shape x q x q`` tensor.
    """
    W = whiten(factor, Z_test)
    cov = K_test - Z_test @ Z_test.mT + W.mT @ W
    return 0.5 * (cov + cov.mT)


class DTCPredictor(NamedTuple):
    r"""Test-time weights of a DTC posterior in the dictionary's kernel basis.

    One product ``k_S(x)^T basis`` with ``basis = [a | P | N]`` gives

        mean(x)    = a^T k_S(x)                       (a = W L^{-T} c)
        cov(x, x') = k(x, x') - p(x)^T p(x') + n(x)^T n(x'),

    ``p(x) = P^T k_S(x)``, ``n(x) = N^T k_S(x)``, in one of two forms:

    - *folded* (``N`` empty): ``P = B`` of :func:`dtc_explained_basis`,
      ``B B^T = W (I - A^{-1}) W^T``; ``m x (1 + r)``, half the product of the
      other form, built without gradients;
    - *unfolded*: ``P = W`` (``p(x) = z(x)``) and ``N = M = W L^{-T}``
      (``n(x) = L^{-1} z(x)``); ``m x (1 + 2r)``, differentiable in the data
      (fantasy models for qKG / qNIPV).

    Neither forms the ``m x m`` matrix ``W W^T - M M^T``: with a nearly singular
    ``K_S`` that matrix has huge entries and loses about two digits to
    cancellation.

    Attributes:
        basis: ``batch_shape x m x (1 + r_p + r_n)`` matrix ``[a | P | N]``.
        num_explained: ``r_p``, the number of columns of ``P``.
    """

    basis: Tensor
    num_explained: int

    @property
    def folded(self) -> bool:
        """Whether this is the folded form (``N`` has no columns)."""
        return self.basis.shape[-1] == 1 + self.num_explained


def dtc_predictor(W: Tensor, factor: DTCFactor, fold: bool = True) -> DTCPredictor:
    r"""Precompute :class:`DTCPredictor` from the embedding map and the factor.

    Args:
        W: ``batch_shape x m x r`` embedding map (:func:`nystrom_embedding_map`).
        factor: The :class:`DTCFactor` of the training data.
        fold: The folded form (no gradients; ``O(r^3 + m r^2)``) or the unfolded
            one (``O(m r^2)``, differentiable).

    Returns:
        The :class:`DTCPredictor`.
    """
    L = factor.chol
    batch = torch.broadcast_shapes(L.shape[:-2], W.shape[:-2])
    W = W.expand(*batch, *W.shape[-2:])
    L = L.expand(*batch, *L.shape[-2:])
    c = factor.coef.expand(*batch, factor.coef.shape[-1]).unsqueeze(-1)
    mean_weights = W @ torch.linalg.solve_triangular(L.mT, c, upper=True)
    if fold:
        parts = [dtc_explained_basis(W, factor)]
    else:
        parts = [W, torch.linalg.solve_triangular(L, W.mT, upper=False).mT]
    return DTCPredictor(
        basis=torch.cat([mean_weights, *parts], dim=-1),
        num_explained=parts[0].shape[-1],
    )


class ExactFactor(NamedTuple):
    r"""The exact GP's training factor: ``C = K_XX + N = L L^T`` and the mean
    weights ``a = C^{-1} (y - m(X))``.

    Attributes:
        chol: ``batch_shape x n x n`` lower factor ``L``.
        coef: ``batch_shape x n`` weights ``a``.
    """

    chol: Tensor
    coef: Tensor


def exact_factor(
    K: Tensor, residual_y: Tensor, noise: Tensor, jitter: float = 1e-8
) -> ExactFactor:
    r"""One Cholesky factor of ``C = K_XX + N`` (``O(n^3 / 3)``) and ``a = C^{-1}
    (y - m)``: what the exact posterior's mean and, by triangular solves
    (:func:`exact_features`), its covariance need.

    ``C`` is positive definite (``N > 0``); if its factorisation fails in
    floating point, a jitter relative to the mean diagonal is added
    (:func:`jittered_cholesky`).

    Args:
        K: ``batch_shape x n x n`` prior covariance of the training inputs.
        residual_y: ``batch_shape x n`` centred targets ``y - m(X)``.
        noise: ``batch_shape x n`` (or broadcastable) noise variances, ``> 0``.
        jitter: Relative jitter used only if the factorisation fails, then
            raised tenfold (five tries in all).

    Returns:
        The :class:`ExactFactor`.
    """
    n = K.shape[-1]
    if K.shape[-2] != n:
        raise ValueError(f"K must be square, got shape {tuple(K.shape)}.")
    C = _add_to_diagonal(K, noise.expand(*noise.shape[:-1], n))
    L = jittered_cholesky(C, jitter, name="K + noise")
    del C
    coef = torch.cholesky_solve(residual_y.unsqueeze(-1), L).squeeze(-1)
    return ExactFactor(chol=L, coef=coef)


def exact_predictor_from_factor(factor: ExactFactor) -> DTCPredictor:
    r"""The folded :class:`DTCPredictor` ``[a | L^{-T}]`` of an
    :class:`ExactFactor`: one triangular inverse (``O(n^3)`` as a solve against
    the identity), worth it where the posterior is then evaluated at many more
    than ``n`` points through products with the basis (e.g. BBKB's batch UCB).
    Peak memory: ``L``, the basis and the solve's output, three ``n x n``
    blocks (no identity: the basis's last ``n`` columns hold it)."""
    L = factor.chol
    n = L.shape[-1]
    basis = torch.zeros(*L.shape[:-1], 1 + n, dtype=L.dtype, device=L.device)
    basis[..., 0] = factor.coef
    inverse = basis[..., 1:]
    inverse.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    inverse.copy_(torch.linalg.solve_triangular(L, inverse, upper=False).mT)
    return DTCPredictor(basis=basis, num_explained=n)


def exact_predictor(
    K: Tensor, residual_y: Tensor, noise: Tensor, jitter: float = 1e-8
) -> DTCPredictor:
    r"""The exact GP posterior as a folded :class:`DTCPredictor` with ``S = X``.

    With every training point in the dictionary the DTC posterior is the exact
    GP's (Quinonero-Candela & Rasmussen, 2005; BBKB Eq. 2 with ``S = X``):
    with ``C = K_XX + N = L L^T``,

        mean(x)    = m(x) + k_X(x)^T C^{-1} (y - m(X))        (a = C^{-1} (y - m))
        cov(x, x') = k(x, x') - p(x)^T p(x'),   p(x) = L^{-1} k_X(x)   (P = L^{-T}).

    One Cholesky factor (:func:`exact_factor`) and one triangular inverse
    (:func:`exact_predictor_from_factor`), where the eigendecomposition route
    (:func:`nystrom_embedding_map`, ``Z = K W``, :func:`dtc_factor`,
    :func:`dtc_explained_basis`) costs about ``14 n^3``.

    Args:
        K: ``batch_shape x n x n`` prior covariance of the training inputs.
        residual_y: ``batch_shape x n`` centred targets ``y - m(X)``.
        noise: ``batch_shape x n`` (or broadcastable) noise variances, ``> 0``.
        jitter: Relative jitter used only if the factorisation fails
            (:func:`exact_factor`).

    Returns:
        The folded :class:`DTCPredictor` ``[a | L^{-T}]`` (``batch_shape x n x
        (1 + n)``, ``num_explained = n``).
    """
    return exact_predictor_from_factor(exact_factor(K, residual_y, noise, jitter))


def exact_features(factor: ExactFactor, K_XS: Tensor) -> tuple[Tensor, Tensor]:
    r"""The exact posterior's mean offset and covariance factor from its
    :class:`ExactFactor`: ``(K_XS a, P)`` with ``P = K_XS L^{-T}``, so that
    ``cov = K_test - P P^T`` (the folded :func:`dtc_features` of
    :func:`exact_predictor` without its ``n x n`` inverse).

    One triangular solve with ``q`` right-hand sides (``n^2 q`` flops, as the
    product with the inverse); an unbatched factor solves the whole test batch
    as one ``n x (batch q)`` right-hand side, a batched one broadcasts.

    Args:
        factor: The :class:`ExactFactor` (``batch_shape x n x n``).
        K_XS: ``batch_shape' x q x n`` cross-covariance ``k(X, X_train)``.

    Returns:
        ``(offset, P)``: ``batch_shape'' x q`` and ``batch_shape'' x q x n``.
    """
    L, coef = factor.chol, factor.coef
    offset = (K_XS @ coef.unsqueeze(-1)).squeeze(-1)
    n = L.shape[-1]
    if L.dim() == 2:
        rhs = K_XS.reshape(-1, n).mT
        P = torch.linalg.solve_triangular(L, rhs, upper=False).mT
        return offset, P.reshape(K_XS.shape)
    P = torch.linalg.solve_triangular(L, K_XS.mT, upper=False).mT
    return offset, P


def dtc_explained_basis(W: Tensor, factor: DTCFactor) -> Tensor:
    r"""``B`` (``m x r``) with ``B B^T = W (I - A^{-1}) W^T``: one factor for the
    part of the prior variance that the DTC posterior explains.

    With ``z(x) = W^T k_S(x)``, ``u(x) = L^{-1} z(x)`` and ``A = L L^T``,

        z(x)^T z(x') - u(x)^T u(x') = z(x)^T (I - A^{-1}) z(x') = b(x)^T b(x'),

    ``b(x) = B^T k_S(x)``, so the DTC covariance (BBKB Eq. 2 times ``lambda``) is
    ``k(x, x') - b(x)^T b(x')``: one ``m x r`` product per point instead of two.
    ``A = V diag(e) V^T`` with ``e >= 1`` (``A = I + Z^T N^{-1} Z``), so
    ``B = W V diag(sqrt(1 - 1/e))`` has entries no larger than ``W``'s (unlike
    ``W W^T - M M^T``, which squares them), and
    ``||b(x)||^2 <= ||z(x)||^2 <= k(x, x)``.

    ``O(r^3 + m r^2)`` (one ``r x r`` eigendecomposition). Built without
    gradients: an eigendecomposition's gradient is unstable at repeated
    eigenvalues (:func:`dtc_predictor` keeps the unfolded form for data with
    gradients).

    Args:
        W: ``batch_shape x m x r`` embedding map (:func:`nystrom_embedding_map`).
        factor: The :class:`DTCFactor` of the training data.

    Returns:
        The ``batch_shape x m x r`` tensor ``B``.
    """
    L = factor.chol
    with torch.no_grad():
        e, V = torch.linalg.eigh(L @ L.mT)
        scale = (1.0 - e.clamp_min(1.0).reciprocal()).sqrt()
        return W @ (V * scale.unsqueeze(-2))


def dtc_features(
    predictor: DTCPredictor, K_XS: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    r"""DTC mean offset and the two low-rank factors of the covariance.

    ``cov = K_test - P P^T + N N^T`` (:class:`DTCPredictor`; ``N`` has no columns
    in the folded form), so marginal variances cost ``O(q r)`` once the factors
    are known and the ``q x q`` covariance need never be formed.

    Args:
        predictor: The :class:`DTCPredictor`.
        K_XS: ``batch_shape x q x m`` cross-covariance ``k(X, S)``.

    Returns:
        ``(mean, P, N)``: the ``batch_shape x q`` mean minus the prior mean and the
        ``batch_shape x q x r_p`` and ``batch_shape x q x r_n`` factors.
    """
    basis = predictor.basis
    if basis.dim() == 2:
        # Fold the test batch into the rows of one product: a batch of ``q = 1``
        # posteriors must not stream the basis once per batch member.
        F = (K_XS.reshape(-1, basis.shape[0]) @ basis).reshape(
            *K_XS.shape[:-1], basis.shape[-1]
        )
    else:
        F = K_XS @ basis
    r_p = 1 + predictor.num_explained
    return F[..., 0], F[..., 1:r_p], F[..., r_p:]


def dtc_predict(
    predictor: DTCPredictor, K_XS: Tensor, K_test: Tensor
) -> tuple[Tensor, Tensor]:
    r"""DTC mean offset and joint covariance from kernel evaluations alone.

    Args:
        predictor: The :class:`DTCPredictor`.
        K_XS: ``batch_shape x q x m`` cross-covariance ``k(X, S)``.
        K_test: ``batch_shape x q x q`` prior covariance ``k(X, X)``.

    Returns:
        ``(mean, cov)``: the ``batch_shape x q`` mean minus the prior mean and the
        symmetric ``batch_shape x q x q`` covariance (GP units).
    """
    mean, P, N = dtc_features(predictor, K_XS)
    cov = K_test - P @ P.mT + N @ N.mT
    return mean, 0.5 * (cov + cov.mT)


def rls_units(gp_variance: Tensor, noise: Tensor | float) -> Tensor:
    r"""Convert a DTC variance in GP units to the BKB/BBKB "RLS units".

    ``sigma~^2 = var / lambda`` with ``lambda`` the (homoscedastic) noise variance
    (BKB spec, "Variance units"). At training points this is the ridge leverage
    score, at most 1 for an exact dictionary.

    Args:
        gp_variance: Variances of any shape.
        noise: ``lambda``, broadcastable to ``gp_variance``.

    Returns:
        ``gp_variance / noise``.
    """
    return gp_variance / noise


def dtc_log_marginal_likelihood(
    Z: Tensor,
    residual_y: Tensor,
    noise: Tensor,
    kdiag: Tensor | None = None,
) -> Tensor:
    r"""DTC log marginal likelihood, or Titsias' collapsed variational bound.

    With ``Q = Z Z^T`` the DTC marginal likelihood is ``N(y | m, Q + N)``. By the
    matrix determinant lemma and Woodbury, with ``A = I + Z^T N^{-1} Z = L L^T`` and
    ``c = L^{-1} Z^T N^{-1} r``:

        log p = -1/2 [ n log 2pi + sum log noise + 2 sum log diag L
                       + r^T N^{-1} r - ||c||^2 ]

    If ``kdiag`` is given, Titsias' (2009) trace term
    ``-1/2 sum_i (k(x_i, x_i) - ||z(x_i)||^2) / noise_i`` is added, which gives the
    collapsed evidence lower bound (the "VFE"/SGPR objective). Cost ``O(n r^2)``.

    Args:
        Z: ``batch_shape x n x r`` embedded training inputs.
        residual_y: ``batch_shape x n`` centred targets.
        noise: ``batch_shape x n`` (or broadcastable) noise variances.
        kdiag: Optional ``batch_shape x n`` prior variances for the trace term.

    Returns:
        A ``batch_shape`` tensor (not normalised by ``n``).
    """
    n = residual_y.shape[-1]
    noise = noise.expand(residual_y.shape)
    factor = dtc_factor(Z, residual_y, noise)
    logdet = noise.log().sum(-1) + 2 * factor.chol.diagonal(dim1=-2, dim2=-1).log().sum(
        -1
    )
    quad = (residual_y.pow(2) / noise).sum(-1) - factor.coef.pow(2).sum(-1)
    ll = -0.5 * (n * math.log(2 * math.pi) + logdet + quad)
    if kdiag is not None:
        ll = ll - 0.5 * ((kdiag - Z.pow(2).sum(-1)) / noise).sum(-1)
    return ll


def exact_log_marginal_likelihood(
    K: Tensor, residual_y: Tensor, noise: Tensor
) -> Tensor:
    r"""Exact GP log marginal likelihood ``log N(y | m, K + N)``, by Cholesky.

    ``-1/2 [ r^T (K + N)^{-1} r + log det (K + N) + n log 2 pi ]``, ``O(n^3 / 3)``
    (the objective of ``ExactMarginalLogLikelihood`` before its division by ``n``,
    computed here always by a Cholesky factorisation, never by CG/Lanczos). The
    gradient is the closed form ``d/dA = (a a^T - A^{-1}) / 2`` with ``A = K + N``
    and ``a = A^{-1} r`` (Rasmussen & Williams, Eq. 5.9), one
    ``cholesky_inverse`` instead of autograd through the factorisation (about
    half the cost at ``n = 1000``).

    Args:
        K: ``batch_shape x n x n`` prior covariance of the training inputs.
        residual_y: ``batch_shape x n`` centred targets.
        noise: ``batch_shape x n`` (or broadcastable) noise variances.

    Returns:
        A ``batch_shape`` tensor.

    Raises:
        torch.linalg.LinAlgError: If ``K + N`` is not numerically positive definite.
    """
    noise = noise.expand(residual_y.shape)
    if K.dim() == 2 and residual_y.dim() == 1:  # unbatched: nothing to broadcast
        return _ExactLogMarginalLikelihood.apply(K, residual_y, noise)
    batch = torch.broadcast_shapes(K.shape[:-2], residual_y.shape[:-1])
    return _ExactLogMarginalLikelihood.apply(
        K.expand(*batch, *K.shape[-2:]),
        residual_y.expand(*batch, residual_y.shape[-1]),
        noise.expand(*batch, noise.shape[-1]),
    )


class _ExactLogMarginalLikelihood(torch.autograd.Function):
    r"""Autograd function of :func:`exact_log_marginal_likelihood`."""

    @staticmethod
    def forward(ctx: Any, K: Tensor, r: Tensor, noise: Tensor) -> Tensor:
        A = K + torch.diag_embed(noise)
        L, info = torch.linalg.cholesky_ex(0.5 * (A + A.mT))
        if info.any():
            raise torch.linalg.LinAlgError("K + noise is not positive definite.")
        a = torch.cholesky_solve(r.unsqueeze(-1), L).squeeze(-1)
        ctx.save_for_backward(L, a)
        logdet = 2 * L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        n = r.shape[-1]
        return -0.5 * ((r * a).sum(-1) + logdet + n * math.log(2 * math.pi))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        L, a = ctx.saved_tensors
        grad = grad.unsqueeze(-1)
        dA = 0.5 * (a.unsqueeze(-1) * a.unsqueeze(-2) - torch.cholesky_inverse(L))
        dA = dA * grad.unsqueeze(-1)
        return dA, -a * grad, dA.diagonal(dim1=-2, dim2=-1)


# ---------------------------------------------------------------------------------
# Within-batch (hallucinated) updates
# ---------------------------------------------------------------------------------


def cholesky_rank_one_update(L: Tensor, v: Tensor) -> Tensor:
    r"""Cholesky factor of ``L L^T + v v^T`` in ``O(r^2)``, without a Python loop.

    Write ``L L^T + v v^T = L (I + w w^T) L^T`` with ``w = L^{-1} v``. The Cholesky
    factor of ``I + w w^T`` is lower triangular with, for ``s_k = 1 + sum_{i<=k}
    w_i^2`` (and ``s_0 = 1``),

        C_kk = sqrt(s_k / s_{k-1}),    C_ik = w_i w_k / sqrt(s_k s_{k-1})  (i > k),

    so ``L C = L diag(C_kk) + T diag(a)`` where ``a_k = w_k / sqrt(s_k s_{k-1})``
    and column ``k`` of ``T`` is ``sum_{i>k} w_i L[:, i]`` (an exclusive suffix
    sum). Everything is a vectorised ``O(r^2)`` operation after the triangular
    solve for ``w``.

    Args:
        L: ``batch_shape x r x r`` lower-triangular Cholesky factor.
        v: ``batch_shape x r`` update vector.

    Returns:
        The ``batch_shape x r x r`` lower Cholesky factor of ``L L^T + v v^T``.
    """
    w = torch.linalg.solve_triangular(L, v.unsqueeze(-1), upper=False).squeeze(-1)
    s = 1.0 + torch.cumsum(w.pow(2), dim=-1)
    s_prev = torch.cat([torch.ones_like(s[..., :1]), s[..., :-1]], dim=-1)
    diag = (s / s_prev).sqrt()
    a = w / (s * s_prev).sqrt()
    P = L * w.unsqueeze(-2)  # column i scaled by w_i
    suffix = torch.flip(torch.cumsum(torch.flip(P, dims=(-1,)), dim=-1), dims=(-1,))
    T = suffix - P  # exclusive suffix sum over columns
    return L * diag.unsqueeze(-2) + T * a.unsqueeze(-2)


def variance_downdate(
    variances: Tensor, Z_cand: Tensor, c: Tensor, denom: Tensor
) -> Tensor:
    r"""Variances after adding one point to ``V``, for many candidates at once.

    Sherman-Morrison on ``V' = V + z z^T`` with ``c = V^{-1} z`` and
    ``denom = 1 + z^T c`` gives ``z(x)^T V'^{-1} z(x) = z(x)^T V^{-1} z(x) -
    (z(x)^T c)^2 / denom`` (BBKB spec Sec. 4.2). The Nyström residual term of the
    variance does not change, so the whole variance drops by the same amount.
    Cost ``O(A r)``. The result is clamped at zero.

    Args:
        variances: ``batch_shape x A`` current variances (RLS units).
        Z_cand: ``batch_shape x A x r`` candidate embeddings.
        c: ``batch_shape x r`` solved vector ``V^{-1} z``.
        denom: ``batch_shape`` scalar ``1 + z^T V^{-1} z``.

    Returns:
        A ``batch_shape x A`` tensor of downdated variances.
    """
    proj = (Z_cand @ c.unsqueeze(-1)).squeeze(-1)
    return (variances - proj.pow(2) / denom.unsqueeze(-1)).clamp_min(0.0)


def hallucinate_point(
    L: Tensor, z: Tensor, variances: Tensor, Z_cand: Tensor
) -> tuple[Tensor, Tensor]:
    r"""Add one point without feedback to ``V = Z^T Z + lambda I`` (RLS units).

    Within a BBKB batch the dictionary and mean are frozen, and each selected point
    is "hallucinated" into the variance: ``V_{t+1} = V_t + z_{t+1} z_{t+1}^T``
    (BBKB Alg. 1, L7). Returns the updated factor and the ``O(A r)`` eager variance
    downdate for all candidates.

    Args:
        L: ``batch_shape x r x r`` Cholesky factor of ``V_t``.
        z: ``batch_shape x r`` embedding of the new point.
        variances: ``batch_shape x A`` variances ``sigma~_t^2`` (RLS units).
        Z_cand: ``batch_shape x A x r`` candidate embeddings.

    Returns:
        ``(L_new, variances_new)`` with ``L_new L_new^T = V_t + z z^T``.
    """
    c = torch.cholesky_solve(z.unsqueeze(-1), L).squeeze(-1)
    denom = 1.0 + (z * c).sum(-1)
    return cholesky_rank_one_update(L, z), variance_downdate(
        variances, Z_cand, c, denom
    )


# ---------------------------------------------------------------------------------
# Posterior-variance (ridge leverage score) sampling
# ---------------------------------------------------------------------------------


class DictionaryDraw(NamedTuple):
    r"""Result of :func:`sample_dictionary`.

    Attributes:
        selected: ``n`` boolean mask of the points kept in the dictionary.
        probabilities: ``n`` inclusion probabilities that were used.
        fallback: Whether the empty-draw fallback decided the result.
    """

    selected: Tensor
    probabilities: Tensor
    fallback: bool


#: Rules for a point pulled ``n`` times, see :func:`rls_inclusion_probabilities`.
REPEAT_RULES = ("union", "per_pull")


def rls_inclusion_probabilities(
    variances: Tensor,
    q_bar: float,
    counts: Tensor | None = None,
    repeats: str = "union",
) -> Tensor:
    r"""Inclusion probabilities of BKB's posterior-variance sampling.

    A single pull of a point is kept with probability ``p = min(1, q_bar
    sigma~^2)`` (BKB Alg. 1; COLT 2019 footnote 5 for the clipping). A point pulled
    ``n_i`` times (a dictionary only matters as a set) is kept with probability

    - ``repeats="union"`` (default): ``min(1, q_bar n_i sigma~^2)``, the union bound
      over the ``n_i`` pulls, as in the authors' code (``BKB._resample_dict`` of
      ``luigicarratino/batch-bkb``: ``rand < variances * pulled_arms_count * qbar``);
    - ``repeats="per_pull"``: ``1 - (1 - p)^{n_i}``, one independent coin per pull,
      BBKB Alg. 1 L12-L15 read literally. Never larger than the union rule.

    Why the union rule is the default: a well-sampled best arm has ``n s2 ~ 1``;
    the union rule always keeps it, per-pull coins drop it at some
    resparsifications. A dropped arm's variance jumps to its Nyström residual
    over ``lam`` (tens of RLS units), it wins the UCB and inflates ``beta~``
    through ``log(1 + s2)`` for ever (measurements against the authors' code in
    ``benchmarks/results/bbkb_reference.md``). The union rule keeps
    every point with at least the per-pull probability, and both have expected
    dictionary size at most ``q_bar sum_i n_i sigma~_i^2``.

    Args:
        variances: ``n`` posterior variances in RLS units (``var / lambda``).
        q_bar: Oversampling factor, ``> 0``.
        counts: Optional ``n`` non-negative integer counts (pulls per unique point);
            a zero count gives probability zero.
        repeats: ``"union"`` or ``"per_pull"`` (ignored without ``counts``).

    Returns:
        An ``n`` tensor of probabilities in ``[0, 1]``.
    """
    if not q_bar > 0:
        raise ValueError(f"q_bar must be positive, got {q_bar}.")
    if repeats not in REPEAT_RULES:
        raise ValueError(f"repeats must be one of {REPEAT_RULES}, got {repeats!r}.")
    s2 = variances.clamp_min(0.0)
    if counts is None:
        return (q_bar * s2).clamp_max(1.0)
    counts = counts.to(s2)
    if repeats == "union":
        return (q_bar * counts * s2).clamp_max(1.0)
    p = (q_bar * s2).clamp_max(1.0)
    return 1.0 - (1.0 - p).pow(counts)


def sample_dictionary(
    variances: Tensor,
    q_bar: float,
    counts: Tensor | None = None,
    generator: torch.Generator | None = None,
    max_redraws: int = 10,
    repeats: str = "union",
    uniforms: Tensor | None = None,
) -> DictionaryDraw:
    r"""Draw a dictionary by posterior-variance (ridge leverage score) sampling.

    Independent Bernoulli coins with :func:`rls_inclusion_probabilities` (BKB
    Sec. 3.1, BBKB Alg. 1 L11-L16). The paper does not handle an empty draw, which
    would throw away all data (mean identically zero). Our documented fallback
    (a deviation from the paper, which conditions the draw on being non-empty):
    redraw up to ``max_redraws`` times, and if every draw is empty keep the single
    point with the largest probability (lowest index on ties).

    With ``uniforms`` (one fixed ``U(0, 1)`` number per point) the coin of point
    ``i`` is ``u_i < p_i``: each draw keeps every point with its probability
    ``p_i``, as the independent coins do, but two draws from nearby
    probabilities keep nearly the same points (a coupled draw; an empty one
    keeps the argmax, without redraws).

    Args:
        variances: ``n`` posterior variances in RLS units.
        q_bar: Oversampling factor, ``> 0``.
        counts: Optional ``n`` counts of repeated points.
        generator: Optional ``torch.Generator`` for reproducibility.
        max_redraws: Number of redraws before the argmax fallback.
        repeats: Rule for repeated points, ``"union"`` (default) or
            ``"per_pull"`` (:func:`rls_inclusion_probabilities`).
        uniforms: Optional ``n`` numbers in ``[0, 1)``: the coupled draw.

    Returns:
        A :class:`DictionaryDraw`.
    """
    if variances.dim() != 1 or variances.numel() == 0:
        raise ValueError(
            "variances must be a non-empty 1-d tensor, got shape "
            f"{tuple(variances.shape)}."
        )
    if torch.isnan(variances).any():
        raise ValueError("variances contain NaN.")
    p = rls_inclusion_probabilities(variances, q_bar, counts, repeats)
    if uniforms is not None and uniforms.shape != p.shape:
        raise ValueError(
            f"uniforms must have shape {tuple(p.shape)}, got {tuple(uniforms.shape)}."
        )
    # The coupled draw is one draw (its uniforms are fixed); fresh coins redraw.
    draws = 1 if uniforms is not None else max_redraws + 1
    for _ in range(draws):
        u = uniforms
        if u is None:
            u = torch.rand(p.shape, generator=generator, dtype=p.dtype, device="cpu")
        selected = u.to(p) < p
        if selected.any():
            return DictionaryDraw(selected, p, False)
    selected = torch.zeros_like(p, dtype=torch.bool)
    selected[torch.argmax(p)] = True
    return DictionaryDraw(selected, p, True)


# ---------------------------------------------------------------------------------
# From-scratch dictionary (BLESS)
# ---------------------------------------------------------------------------------


class LeverageDictionary(NamedTuple):
    r"""A dictionary drawn by ridge leverage score sampling.

    Attributes:
        indices: Sorted ``LongTensor`` of the selected points.
        ridge: The ridge whose leverage scores the draw samples: the requested
            ``lam``, or a larger one where a size budget bound (the ridge at which
            ``q_bar d_eff`` meets the budget).
        capped: Whether the size budget bound.
    """

    indices: Tensor
    ridge: float
    capped: bool


def bless(
    X: Tensor,
    kernel: Callable[[Tensor, Tensor], Tensor],
    kernel_diag: Callable[[Tensor], Tensor],
    lam: float,
    q_bar: float = 2.0,
    generator: torch.Generator | None = None,
    level_factor: float = 2.0,
    max_size: int | None = None,
    chunk_size: int = 16_384,
) -> LeverageDictionary:
    r"""Build a dictionary for ``n`` points with BLESS, in ``O(n m^2)`` per level.

    Bottom-up leverage score sampling (Rudi, Calandriello, Carratino & Rosasco,
    NeurIPS 2018), written for unnormalised ridge ``lam`` (leverage scores
    ``tau_i = [K (K + lam I)^{-1}]_ii``). Starting from ``lam_0 = tr(K)``, where
    ``d_eff <= 1``, walk ``lam_h = lam_{h-1} / level_factor`` down to ``lam``:

    1. pre-sample a pool ``R``: point ``i`` w.p. ``u_i = min(1, q_bar k_ii /
       (k_ii + lam_h))``, an upper bound of ``q_bar tau_i(lam_h)``;
    2. estimate ``tau~_i = (k_ii - k_D(x_i)^T (K_D + lam_h diag(p_D))^{-1}
       k_D(x_i)) / lam_h`` with the current dictionary ``D`` and its inclusion
       probabilities ``p_D`` (the importance weights of the Nyström estimate);
    3. keep ``i in R`` w.p. ``min(q_bar tau~_i, u_i) / u_i``, i.e. overall with
       probability ``min(1, q_bar tau~_i)``.

    Guarantee (BLESS Thm. 1): for ``q_bar >= c log(n / delta) / eps^2`` the result is
    ``(eps, lam)``-accurate w.p. ``1 - delta`` (as BKB's Lemma 2 needs, ``eps = 1/2``)
    and has ``O(q_bar d_eff(lam))`` points. Practical runs use ``q_bar`` in
    ``[2, 10]``. Cost per level ``O(|R| |D|^2)``, ``O(n m^2)`` at the small-``lam``
    levels, never ``O(n^3)``; memory ``O(|D|^2 + chunk_size |D|)`` (the pool is
    scored in chunks).

    Budget (an extension, not in BLESS): with ``max_size``, the walk stops at the
    first level ``lam_h`` whose dictionary would exceed ``max_size`` points, and
    that level's acceptance probabilities are thinned in proportion to the leverage
    scores, ``min(s q_bar tau~_i, u_i)`` with the scale ``s <= 1`` at which the
    expected size is ``max_size`` (:func:`budget_scale`); the excess of an unlucky
    draw is trimmed from the lowest probabilities. The result samples the ridge
    leverage scores at the ridge ``lam_h / s`` where ``q_bar d_eff`` meets the
    budget, i.e. the best dictionary of that size in BLESS's sense, instead of
    silently growing with ``d_eff(lam)``: every level costs at most
    ``O(n max_size^2)`` and the memory is ``O(max_size^2 + chunk_size max_size)``.
    The ``(eps, lam)``-accuracy guarantee then holds for that larger ridge only.
    :func:`bless` reports the ridge.

    Args:
        X: ``n x d`` points.
        kernel: ``k(X1, X2)`` returning a dense ``n1 x n2`` tensor.
        kernel_diag: ``k(X, X)`` diagonal, an ``n`` tensor.
        lam: Target ridge (``> 0``), the noise variance for a GP.
        q_bar: Oversampling factor (``> 0``).
        generator: Optional ``torch.Generator``.
        level_factor: Ratio between consecutive ridges (``> 1``).
        max_size: Optional cap on the dictionary at every level (see above).
        chunk_size: Pool points scored at once.

    Returns:
        A :class:`LeverageDictionary`: sorted indices (at least one, at most
        ``max_size``), the ridge they sample and whether the budget bound.
    """
    if X.dim() != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty n x d tensor, got {tuple(X.shape)}.")
    if not lam > 0 or not q_bar > 0 or not level_factor > 1:
        raise ValueError(
            f"need lam > 0, q_bar > 0, level_factor > 1 (got {lam}, {q_bar}, "
            f"{level_factor})."
        )
    if max_size is not None and not (int(max_size) == max_size >= 1):
        raise ValueError(f"max_size must be an integer >= 1, got {max_size}.")
    n = X.shape[0]
    kdiag = kernel_diag(X).clamp_min(0.0)
    lam_h = max(float(kdiag.sum()), lam)

    def _rand(size: int) -> Tensor:
        return torch.rand(size, generator=generator, dtype=X.dtype).to(X.device)

    # Level 0: tau_i(lam_0) <= k_ii / lam_0.
    probs = (q_bar * kdiag / lam_h).clamp_max(1.0)
    keep = _rand(n) < probs
    if not keep.any():
        keep[torch.argmax(probs)] = True
    D, p_D = keep.nonzero().squeeze(-1), probs[keep]
    if max_size is not None and D.numel() > max_size:
        # Even the top level holds more than the budget (max_size < q_bar).
        D, p_D, scale = _thin(D, p_D, torch.ones_like(p_D), max_size, _rand)
        return LeverageDictionary(torch.sort(D).values, lam_h / scale, True)

    def level(ridge: float) -> tuple[Tensor, Tensor, Tensor]:
        """Pool, scores ``q_bar tau~`` at ``ridge`` (with ``D``) and pool caps."""
        u = (q_bar * kdiag / (kdiag + ridge)).clamp_max(1.0)
        pool = (_rand(n) < u).nonzero().squeeze(-1)
        X_D = X[D]
        M = kernel(X_D, X_D) + ridge * torch.diag(p_D)
        L = torch.linalg.cholesky(0.5 * (M + M.mT))
        # Explicit L^{-1} (|D|^3 / 3 flops) so that scoring the pool is a matrix
        # product, which runs several times faster than a triangular solve with
        # many right-hand sides; L is well conditioned (eigenvalues of M are
        # >= ridge min p_D).
        eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device)
        L_inv = torch.linalg.solve_triangular(L, eye, upper=False)
        tau = torch.empty(pool.numel(), dtype=X.dtype, device=X.device)
        for lo in range(0, pool.numel(), chunk_size):
            R = pool[lo : lo + chunk_size]
            W = L_inv @ kernel(X_D, X[R])
            tau[lo : lo + chunk_size] = (kdiag[R] - W.square().sum(0)) / ridge
        return pool, q_bar * tau.clamp_(0.0, 1.0), u[pool]

    while lam_h > lam:
        lam_next = max(lam_h / level_factor, lam)
        pool, scores, u_pool = level(lam_next)
        if pool.numel() == 0:
            lam_h = lam_next
            continue
        expected = float((torch.minimum(scores, u_pool) / u_pool).sum())
        if max_size is not None and expected > max_size:
            # The budget binds between lam_h and lam_next: rerun this level at the
            # ridge where the expected size meets the budget (scores scale about
            # as 1 / ridge), draw there, thinning any remaining excess, and stop.
            scale = budget_scale(scores, max_size, u_pool)
            ridge = min(lam_next / scale, lam_h)
            pool, scores, u_pool = level(ridge)
            # The rerun's estimates are better than the extrapolation: rescale
            # again, up to the ridge of the level that overflowed.
            D, p_D, scale = _thin(
                pool, scores, u_pool, max_size, _rand, max_scale=ridge / lam_next
            )
            return LeverageDictionary(torch.sort(D).values, ridge / scale, True)
        p_new = torch.minimum(scores, u_pool)
        accept = _rand(pool.numel()) < p_new / u_pool
        if not accept.any():
            accept[torch.argmax(p_new)] = True
        D, p_D = pool[accept], p_new[accept].clamp_max(1.0)
        lam_h = lam_next
    return LeverageDictionary(torch.sort(D).values, float(lam), False)


def bless_dictionary(*args: Any, **kwargs: Any) -> Tensor:
    r"""The sorted indices of :func:`bless` (same arguments)."""
    return bless(*args, **kwargs).indices


def budget_scale(
    scores: Tensor,
    budget: float,
    upper: Tensor | None = None,
    max_scale: float = 1.0,
    iters: int = 64,
) -> float:
    r"""Scale ``s`` in ``(0, max_scale]`` with ``sum_i min(u_i, s a_i) / u_i = budget``.

    Leverage-score sampling keeps point ``i`` with probability ``min(u_i, a_i)``
    (``a_i = q_bar tau_i``, possibly times a pull count; ``u_i`` a cap, 1 by
    default) and its expected size is ``sum_i min(u_i, a_i) / u_i`` when the draw
    is made among points pre-sampled with probabilities ``u_i`` (BLESS's pool) or
    ``sum_i min(1, a_i)`` otherwise. Scaling every score by ``s`` samples the
    leverage scores of the ridge ``lam / s`` (to first order; exactly for scores
    below the cap, since ``tau_i(lam / s) >= s tau_i(lam)``), so the ``s`` at which
    the expected size equals the budget gives the budget's ridge. Found by
    bisection (the expected size is increasing in ``s``); returns ``max_scale`` if
    the budget is not reached there.

    Args:
        scores: ``n`` non-negative unclipped scores ``a_i``.
        budget: Target expected size ``> 0``.
        upper: Optional ``n`` caps ``u_i`` in ``(0, 1]`` (default 1).
        max_scale: Largest scale considered (``> 1`` extrapolates the scores to a
            smaller ridge).
        iters: Bisection steps.

    Returns:
        The scale ``s``.
    """
    if not budget > 0:
        raise ValueError(f"budget must be positive, got {budget}.")
    upper = torch.ones_like(scores) if upper is None else upper

    def size(scale: float) -> float:
        return float((torch.minimum(upper, scale * scores) / upper).sum())

    if size(max_scale) <= budget:
        return max_scale
    lo, hi = 0.0, max_scale
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if size(mid) <= budget else (lo, mid)
    return max(lo, torch.finfo(scores.dtype).tiny)


def _thin(
    candidates: Tensor,
    scores: Tensor,
    upper: Tensor,
    max_size: int,
    rand: Callable[[int], Tensor],
    max_scale: float = 1.0,
) -> tuple[Tensor, Tensor, float]:
    r"""Leverage-proportional draw of at most ``max_size`` of ``candidates``.

    Each candidate (pre-sampled with probability ``upper``) is kept with overall
    probability ``p = min(upper, s scores)``, ``s = budget_scale(...)``; a draw
    above the budget is trimmed from the lowest probabilities. Returns the kept
    candidates, their probabilities and ``s``.
    """
    scale = budget_scale(scores, max_size, upper, max_scale=max_scale)
    p = torch.minimum(upper, scale * scores)
    accept = rand(candidates.numel()) < p / upper
    if not accept.any():
        accept[torch.argmax(p)] = True
    D, p_D = _trim(candidates[accept], p[accept].clamp_max(1.0), max_size)
    return D, p_D, scale


def _trim(D: Tensor, p_D: Tensor, max_size: int) -> tuple[Tensor, Tensor]:
    """The ``max_size`` points of largest probability (ties to the lower index)."""
    if D.numel() <= max_size:
        return D, p_D
    order = torch.sort(-p_D, stable=True).indices[:max_size]
    return D[order], p_D[order]
