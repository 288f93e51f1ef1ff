r"""BBKB's batch-start state recomputed from scratch at a resparsification.

At every resparsification BBKB (Calandriello et al., ICML 2020, Alg. 1 L18)
recomputes, for all ``A`` arms and the new dictionary ``S`` (``m`` arm indices),
the Nystrom embeddings ``z(a) = K_S^{+1/2} k_S(a)`` (``A x r``, ``r <= m`` after
the pseudo-inverse eigenvalue cut-off of
:func:`~botorch_sketch.linalg.nystrom_embedding_map`), ``V_fb`` and its Cholesky
factor, the frozen means (Eq. 1) and the batch-start variances (Eqs. 2-3) of
:class:`~botorch_sketch.bbkb.batch_state.BatchState`.

:func:`rebuild` does so without materialising ``Z``: ``O(A m d + A m r + m^3)``
time (one ``A x m x r`` product, see its docstring), ``O(A m)`` memory for the
optional kernel-column cache (:class:`KernelColumnCache`), else ``O(chunk x
m)``; the kernel is evaluated in row chunks, never ``A x A``. It is the
reference, and the engine's path when ``A r`` floats exceed its memory budget.

Units: ``s2_0`` is in RLS units, ``sigma~^2 = sigma^2_DTC / lam`` (BBKB App. A.1;
:func:`~botorch_sketch.linalg.rls_units`). With ``lam`` equal to the noise variance
``xi^2``, ``lam * s2_0`` is the DTC (projected-process) posterior variance and
``mu`` the DTC posterior mean of a zero-mean GP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.bbkb.batch_state import (
    DEFAULT_CHUNK_SIZE,
    FactoredState,
    checked_cholesky,
    row_chunks,
    validate_state_inputs,
)
from botorch_sketch.bbkb.dense_kernel import DenseKernel, as_dense_kernel

logger = logging.getLogger(__name__)

__all__ = [
    "FUSED_MIN_RATIO",
    "KernelColumnCache",
    "RebuiltState",
    "embed_arms",
    "rebuild",
]

#: :func:`rebuild` uses the fused one-product sweep when ``A >= ratio * r``.
FUSED_MIN_RATIO = 8


@dataclass(eq=False)
class RebuiltState(FactoredState):
    r"""Batch-start state recomputed from scratch by :func:`rebuild`.

    Attributes (besides those of :class:`BatchState`):
        W: ``m x r`` embedding map, ``z(a) = W^T k_S(a)``.
        L: ``r x r`` lower Cholesky factor of ``V_fb``.
        weights: ``r`` vector ``V_fb^{-1} Z^T y``, so that ``mu = Z @ weights``.
        K_SA: Optional ``m x A`` kernel columns ``k(S, A)`` (``None`` when the
            block exceeds the memory budget; rows of ``Z`` are then recomputed
            from the kernel).

    The ``A x r`` embeddings :attr:`Z` and residuals :attr:`resid` are computed on
    first access only: :func:`rebuild` gets ``mu`` and ``s2_0`` without them, and
    batch selection only needs the rows of the arms it touches (:meth:`embed`).
    """

    arms: Tensor
    kernel: DenseKernel
    lam: float
    S_idx: Tensor
    W: Tensor
    kdiag: Tensor
    counts: Tensor
    reward_sums: Tensor
    L: Tensor
    weights: Tensor
    mu: Tensor
    s2_0: Tensor
    K_SA: Tensor | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE
    _Z: Tensor | None = field(default=None, repr=False)
    _resid: Tensor | None = field(default=None, repr=False)
    _Vinv: Tensor | None = field(default=None, repr=False)

    @property
    def Z(self) -> Tensor:
        r"""``A x r`` embeddings of all arms (computed once, ``O(A m r)``)."""
        if self._Z is None:
            self._Z = self.embed(None)
        return self._Z

    @property
    def resid(self) -> Tensor:
        r"""``A`` Nyström residuals ``max(k(a, a) - ||z(a)||^2, 0) / lam``."""
        if self._resid is None:
            self._resid = linalg.embedding_residual(self.kdiag, self.Z) / self.lam
        return self._resid

    def embed(self, idx: Tensor | None = None) -> Tensor:
        r"""Embeddings ``z(a) = W^T k_S(a)`` of the arms ``idx`` (all if ``None``).

        ``O(n m r)`` for ``n`` arms, from the cached kernel columns when present
        (else the kernel is evaluated, in chunks of :attr:`chunk_size` rows).
        """
        if self._Z is not None:
            return self._Z if idx is None else self._Z[idx]
        if self.K_SA is not None:
            cols = self.K_SA if idx is None else self.K_SA[:, idx]
            return cols.mT @ self.W
        X = self.arms if idx is None else self.arms[idx]
        return self._embed_rows(X, self.dictionary_points)

    @property
    def dictionary_points(self) -> Tensor:
        r"""``m x d`` dictionary points ``arms[S_idx]``."""
        return self.arms[self.S_idx]

    def resid_at(self, idx: Tensor, Z_idx: Tensor | None = None) -> Tensor:
        r"""Residuals :attr:`resid` of the arms ``idx`` only (``O(n m r)``)."""
        if self._resid is not None:
            return self._resid[idx]
        Z_idx = self.embed(idx) if Z_idx is None else Z_idx
        return linalg.embedding_residual(self.kdiag[idx], Z_idx) / self.lam


class KernelColumnCache:
    r"""Cache of the kernel columns ``k(A, s)`` of the current dictionary.

    Consecutive BBKB dictionaries share most of their points (every pulled arm
    with ``q_bar s2_0 >= 1`` is kept with probability one), so :meth:`columns`
    only evaluates the kernel for the new dictionary points, ``O(A d)`` each, and
    keeps exactly the requested columns afterwards (``A x m`` memory, as much as
    the embeddings). Disabled automatically (returns ``None``) when ``A m`` doubles
    exceed ``max_bytes``.

    Args:
        arms: ``A x d`` candidate set.
        kernel: A gpytorch kernel (or its :class:`DenseKernel`).
        max_bytes: Memory cap of the cached block.
    """

    def __init__(
        self, arms: Tensor, kernel: Kernel | DenseKernel, max_bytes: int = 2**30
    ) -> None:
        self.arms, self.max_bytes = arms, max_bytes
        self.kernel = as_dense_kernel(kernel, arms)
        self._ids = torch.empty(0, dtype=torch.long, device=arms.device)
        self._K_T = arms.new_empty(0, arms.shape[0])  # m x A, one row per column

    def columns(self, S_idx: Tensor) -> Tensor | None:
        """``k(arms[S_idx], arms)`` (``m x A``) for sorted unique ``S_idx``, or None."""
        A, m = self.arms.shape[0], S_idx.numel()
        if A * m * self.arms.element_size() > self.max_bytes:
            return None
        n_old = self._ids.numel()
        if n_old:
            pos = torch.searchsorted(self._ids, S_idx).clamp_max(n_old - 1)
            hit = self._ids[pos] == S_idx
        else:
            pos = torch.zeros(m, dtype=torch.long, device=S_idx.device)
            hit = torch.zeros(m, dtype=torch.bool, device=S_idx.device)
        K_T = self._K_T.new_empty(m, A)
        hit_rows = hit.nonzero().squeeze(-1)
        if hit_rows.numel():
            K_T.index_copy_(0, hit_rows, self._K_T.index_select(0, pos[hit_rows]))
        miss_rows = (~hit).nonzero().squeeze(-1)
        if miss_rows.numel():
            K_T[miss_rows] = self.kernel(self.arms[S_idx[miss_rows]], self.arms)
        self._ids, self._K_T = S_idx.clone(), K_T
        return K_T


def _cached_kernel(
    kernel: Kernel | DenseKernel, arms: Tensor, cache: KernelColumnCache | None
) -> DenseKernel:
    """``kernel`` as a :class:`DenseKernel`; with a cache, it must be the cache's."""
    dense = as_dense_kernel(kernel, arms)
    if cache is not None and dense is not cache.kernel:
        raise ValueError(
            "the kernel-column cache holds columns of another kernel: pass "
            "cache.kernel as the kernel."
        )
    return dense


def embed_arms(
    arms: Tensor,
    kernel: Kernel | DenseKernel,
    S_idx: Tensor,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    cache: KernelColumnCache | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Nyström embedding of all arms for the dictionary ``S`` (BBKB spec Sec. 4.1).

    ``K_S = k(S, S)`` is eigendecomposed with the pseudo-inverse cut-off
    (:func:`~botorch_sketch.linalg.nystrom_embedding_map`), and
    ``Z = k(A, S) W`` is computed in row chunks. ``O(A m (d + r) + m^3)``.

    Args:
        arms: ``A x d`` candidate set.
        kernel: A gpytorch kernel or a :class:`DenseKernel` (``cache.kernel``
            when a cache is given).
        S_idx: ``m`` dictionary indices into ``arms`` (``m = 0`` allowed).
        chunk_size: Rows embedded at once.
        cache: Optional :class:`KernelColumnCache` (``S_idx`` sorted, unique).

    Returns:
        ``(W, Z)`` of shapes ``m x r`` and ``A x r``.
    """
    kernel = _cached_kernel(kernel, arms, cache)
    X_S = arms[S_idx]
    K_SA = cache.columns(S_idx) if cache is not None else None
    K_S = kernel(X_S, X_S) if K_SA is None else K_SA[:, S_idx]
    W = linalg.nystrom_embedding_map(K_S)
    A, r = arms.shape[0], W.shape[-1]
    Z = arms.new_empty(A, r)
    if r > 0 and K_SA is not None:
        torch.matmul(K_SA.mT, W, out=Z)
    elif r > 0:
        for lo, hi in row_chunks(A, chunk_size):
            Z[lo:hi] = kernel(arms[lo:hi], X_S) @ W
    return W, Z


def rebuild(
    arms: Tensor,
    kernel: Kernel | DenseKernel,
    S_idx: Tensor,
    counts: Tensor,
    reward_sums: Tensor,
    lam: float,
    *,
    kdiag: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    cache: KernelColumnCache | None = None,
) -> RebuiltState:
    r"""Recompute the frozen state at a resparsification (BBKB Alg. 1 L18).

    With ``z(a) = W^T k_S(a)`` and pulled arms ``P = {a : n_a > 0}``:

        V_fb = Z_P^T diag(n_P) Z_P + lam I = L L^T = Q diag(e) Q^T
        weights = V_fb^{-1} Z_P^T Ysum_P,       mu(a) = k_S(a)^T (W weights)   (Eq. 1)
        s2_0(a) = (k(a, a) - ||D^T z(a)||^2)_+ / lam,
                  D = Q diag(sqrt(1 - lam / e)),  D D^T = I - lam V_fb^{-1}     (Eq. 3)

    The last line is Eq. 3, ``(k - ||z||^2) / lam + z^T V^{-1} z``, with both
    quadratic forms folded into one: all ``A`` arms then cost a single
    ``A x m x r`` product with ``W D`` and a matrix-vector product with
    ``W weights`` (chunked), the flop
    floor of a resparsification, instead of forming ``Z`` and then ``Z L^{-T}``
    (twice the flops). The rounding error is the one of the Nyström residual
    ``k - ||z||^2`` of the two-term form, ``O(m eps k / lam)``. ``Z`` itself is only
    formed for the pulled arms (``O(|P| m r)``); :attr:`BatchState.Z` builds the
    rest on demand. The fused form needs an ``r x r`` eigendecomposition, so when
    ``A < FUSED_MIN_RATIO * r`` (few arms per dimension) the two-product form is
    used instead, and ``Z`` is kept.

    Cost ``O(A m (d + r) + m^3 + |P| m r)`` time; ``O(A m)`` memory for the cached
    kernel columns, else ``O(chunk_size m)``. An empty dictionary gives ``r = 0``,
    ``mu = 0`` and ``s2_0 = k(a, a) / lam`` (BBKB spec Sec. 11.3).

    Args:
        arms: ``A x d`` candidate set (float64 recommended, see
            :func:`~botorch_sketch.loops.bbkb.run_bbkb`'s ``dtype``).
        kernel: The prior covariance, a gpytorch kernel (any kernel without batch
            dimensions; evaluated through a frozen :class:`DenseKernel` copy in the
            dtype and device of ``arms``) or a :class:`DenseKernel`.
        S_idx: Dictionary arm indices (deduplicated and sorted here).
        counts: ``A`` pull counts (non-negative).
        reward_sums: ``A`` sums of observed rewards per arm.
        lam: Ridge ``lam > 0``.
        kdiag: Optional cached ``kernel.diag(arms)``.
        chunk_size: Rows processed at once.
        cache: Optional :class:`KernelColumnCache` reused across rebuilds (then
            ``kernel`` must be ``cache.kernel``).

    Returns:
        The :class:`RebuiltState`.
    """
    S_idx = validate_state_inputs(arms, S_idx, counts, reward_sums, lam)
    A = arms.shape[0]
    kernel = _cached_kernel(kernel, arms, cache)
    if kdiag is None:
        kdiag = kernel.diag(arms)
    K_SA = cache.columns(S_idx) if cache is not None else None
    X_S = arms[S_idx]
    K_S = kernel(X_S, X_S) if K_SA is None else K_SA[:, S_idx]
    W = linalg.nystrom_embedding_map(K_S)
    r = W.shape[-1]
    counts = counts.to(W)
    reward_sums = reward_sums.to(W)
    state = RebuiltState(
        arms=arms,
        kernel=kernel,
        lam=float(lam),
        S_idx=S_idx,
        W=W,
        kdiag=kdiag,
        counts=counts,
        reward_sums=reward_sums,
        L=W.new_empty(r, r),
        weights=W.new_empty(r),
        mu=W.new_empty(A),
        s2_0=W.new_empty(A),
        K_SA=K_SA,
        chunk_size=chunk_size,
    )
    pulled = (counts > 0).nonzero().squeeze(-1)
    Zp = state.embed(pulled)
    V = Zp.mT @ (Zp * counts[pulled].unsqueeze(-1))
    V = 0.5 * (V + V.mT) + lam * torch.eye(r, dtype=W.dtype, device=W.device)
    state.L = checked_cholesky(V, lam)
    b = Zp.mT @ reward_sums[pulled]
    state.weights = torch.cholesky_solve(b.unsqueeze(-1), state.L).squeeze(-1)
    if A < FUSED_MIN_RATIO * max(r, 1):
        # Few arms per embedding dimension: the two-product form is cheaper than
        # the r x r eigendecomposition of the fused one, and keeps Z.
        Z = state.Z  # embedded once and kept by the state
        state.mu = Z @ state.weights
        L_inv_T = torch.linalg.solve_triangular(
            state.L, torch.eye(r, dtype=W.dtype, device=W.device), upper=False
        ).mT
        state.s2_0 = state.resid + (Z @ L_inv_T).square().sum(-1)
    else:
        _fused_sweep(state, V, X_S)
    logger.debug("rebuild: m=%d, r=%d, pulled=%d", S_idx.numel(), r, pulled.numel())
    return state


def _fused_sweep(state: RebuiltState, V: Tensor, X_S: Tensor) -> None:
    r"""``mu`` and ``s2_0`` of all arms with one ``A x m x r`` product.

    ``D D^T = I - lam V^{-1}`` with ``V = Q diag(e) Q^T`` (``e >= lam``, clamped for
    rounding), ``D = Q diag(sqrt(1 - lam / e))``; see :func:`rebuild`.
    """
    lam, r, A = state.lam, state.rank, state.num_arms
    e, Q = torch.linalg.eigh(V)
    D = Q * (1.0 - lam / e.clamp_min(lam)).sqrt()
    WD, Ww = state.W @ D, state.W @ state.weights
    for lo, hi in row_chunks(A, state.chunk_size):
        if r == 0:
            state.mu[lo:hi] = 0.0
            state.s2_0[lo:hi] = state.kdiag[lo:hi] / lam
            continue
        if state.K_SA is not None:
            # (W D)^T K_SA: the long A dimension is the output's row length,
            # which BLAS runs about twice as fast as K_SA^T (W D) here.
            K_cols = state.K_SA[:, lo:hi]
            state.mu[lo:hi] = Ww @ K_cols
            quad = (WD.mT @ K_cols).square_().sum(0)
        else:
            K_block = state.kernel(state.arms[lo:hi], X_S)
            state.mu[lo:hi] = K_block @ Ww
            quad = (K_block @ WD).square_().sum(-1)
        state.s2_0[lo:hi] = ((state.kdiag[lo:hi] - quad) / lam).clamp_min_(0.0)
