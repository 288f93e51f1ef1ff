r"""Frozen batch-start quantities of BBKB over a finite arm set.

At every resparsification BBKB (Calandriello et al., ICML 2020, Alg. 1 L18)
recomputes, for all ``A`` arms and the new dictionary ``S`` (``m`` arm indices):

- the Nyström embeddings ``z(a) = K_S^{+1/2} k_S(a)`` (``A x r``, ``r <= m`` after
  the pseudo-inverse eigenvalue cut-off of
  :func:`~botorch_sketch.linalg.nystrom_embedding_map`);
- ``V_fb = sum_a n_a z(a) z(a)^T + lam I_r`` and its Cholesky factor ``L``
  (``n_a`` = number of pulls of arm ``a``, i.e. ``Z(X_t)^T Z(X_t) + lam I`` with
  repetitions);
- the frozen mean (Eq. 1) ``mu~(a) = z(a)^T V_fb^{-1} sum_b z(b) Ysum_b``;
- the batch-start variances (Eqs. 2-3, "RLS units")
  ``s2_0(a) = (k(a, a) - ||z(a)||^2) / lam + z(a)^T V_fb^{-1} z(a)``.

These are frozen for the whole next batch (BBKB spec Sec. 3.1, Sec. 4.1). Cost of
:func:`rebuild`: ``O(A m d + A m r + m^3)`` time (one ``A x m x r`` product, see
its docstring), ``O(A m)`` memory for the optional kernel-column cache, else
``O(chunk x m)``; the kernel is evaluated in row chunks, never ``A x A``.

Two implementations of the same :class:`BatchState` interface:

- :class:`RebuiltState`, from :func:`rebuild`: everything recomputed from the
  kernel for the new dictionary, without materialising ``Z`` (bounded memory,
  ``O(chunk x m)``); the reference, and the path when ``A r`` floats exceed the
  memory budget of the loop.
- :class:`IncrementalState`: keeps ``Z`` (``A x r``), ``V``, ``V^{-1}``, the
  quadratic forms ``z(a)^T V^{-1} z(a)`` and the residuals of all arms, and updates
  them at a resparsification by the changes only (new pulls, points leaving and
  entering the dictionary, :mod:`botorch_sketch.incremental_nystrom`), ``O(A r
  (p + k_out + k_in))`` instead of ``O(A m r)``; see its docstring for when it
  falls back to a full recomputation.

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
from botorch_sketch.bbkb.dense_kernel import DenseKernel, as_dense_kernel
from botorch_sketch.incremental_nystrom import IncrementalNystrom

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "BatchState",
    "FactoredState",
    "IncrementalState",
    "KernelColumnCache",
    "RebuiltState",
    "embed_arms",
    "rebuild",
]

#: Rows of the arm set embedded at once (``chunk x m`` kernel blocks).
DEFAULT_CHUNK_SIZE = 65_536

#: :class:`IncrementalState` checks its accuracy once its incremental work since
#: the last check exceeds this multiple of the check's cost, ``r^3 + 2 |P| r^2``
#: flops plus :data:`CHECK_OVERHEAD` for its fixed cost (<= ~2 % overhead).
CHECK_WORK_RATIO = 64

#: Fixed cost of a check in flop equivalents (~1 ms of small operations here).
CHECK_OVERHEAD = 2e7

#: :func:`rebuild` uses the fused one-product sweep when ``A >= ratio * r``.
FUSED_MIN_RATIO = 8


class BatchState:
    r"""Batch-start state of BBKB over ``A`` arms (BBKB spec Sec. 3.1): the interface.

    What batch selection, stopping rules and schedules read (all frozen within a
    batch): the ``A`` frozen means :attr:`mu` (Eq. 1) and batch-start variances
    :attr:`s2_0` (Eq. 3, RLS units), the embeddings (:meth:`embed`, :attr:`Z`), the
    residuals (:meth:`resid_at`, :attr:`resid`) and ``V_fb = sum_a n_a z(a) z(a)^T +
    lam I_r`` (:attr:`V`, :attr:`Vinv`, and ``L``, its lower Cholesky factor).
    Implemented by
    :class:`RebuiltState` (:func:`rebuild`) and :class:`IncrementalState`.

    Attributes (set by the subclasses):
        arms: ``A x d`` candidate set.
        kernel: The prior covariance as a :class:`~botorch_sketch.bbkb.dense_kernel.
            DenseKernel` (``kernel(X1, X2)`` an ``n1 x n2`` tensor,
            ``kernel.diag(X)`` an ``n`` tensor).
        lam: Ridge ``lam > 0``.
        S_idx: ``m`` sorted, unique arm indices of the dictionary ``S``.
        kdiag: ``A`` prior variances ``k(a, a)``.
        counts: ``A`` pull counts ``n_a`` (integer valued).
        reward_sums: ``A`` sums of the observed rewards per arm.
        mu: ``A`` frozen means ``mu~_fb(a)``.
        s2_0: ``A`` batch-start variances ``sigma~^2_fb(a)`` (RLS units).
        chunk_size: Rows processed at once by the ``A``-sized sweeps.
    """

    arms: Tensor
    kernel: DenseKernel
    lam: float
    S_idx: Tensor
    kdiag: Tensor
    counts: Tensor
    reward_sums: Tensor
    mu: Tensor
    s2_0: Tensor
    chunk_size: int

    @property
    def num_arms(self) -> int:
        """Number of arms ``A``."""
        return self.arms.shape[0]

    @property
    def dict_size(self) -> int:
        """Dictionary size ``m = |S|``."""
        return self.S_idx.numel()

    @property
    def rank(self) -> int:
        """Embedding dimension ``r <= m``."""
        raise NotImplementedError

    @property
    def Z(self) -> Tensor:
        r"""``A x r`` embeddings of all arms."""
        return self.embed(None)

    @property
    def resid(self) -> Tensor:
        r"""``A`` Nyström residuals ``max(k(a, a) - ||z(a)||^2, 0) / lam``."""
        raise NotImplementedError

    @property
    def V(self) -> Tensor:
        r"""``r x r`` matrix ``V_fb`` (do not modify)."""
        raise NotImplementedError

    @property
    def Vinv(self) -> Tensor:
        r"""``r x r`` inverse ``V_fb^{-1}`` (do not modify)."""
        raise NotImplementedError

    def embed(self, idx: Tensor | None = None) -> Tensor:
        r"""``n x r`` embeddings ``z(a)`` of the arms ``idx`` (all if ``None``)."""
        raise NotImplementedError

    def resid_at(self, idx: Tensor, Z_idx: Tensor | None = None) -> Tensor:
        r"""Residuals :attr:`resid` of the arms ``idx`` only."""
        raise NotImplementedError

    def solve(self, v: Tensor) -> Tensor:
        r"""``V_fb^{-1} v`` for an ``r`` vector or an ``r x k`` matrix, ``O(r^2 k)``."""
        return (self.Vinv @ v.reshape(self.rank, -1)).reshape(v.shape)

    def variances(
        self, hallucinated: Tensor | None = None, idx: Tensor | None = None
    ) -> Tensor:
        r"""Brute-force variances with extra points hallucinated into ``V``.

        ``sigma~^2_t(a) = resid(a) + z(a)^T (V_fb + sum_{j in H} z_j z_j^T)^{-1} z(a)``
        (BBKB spec Sec. 4.2), recomputed from scratch: ``O(r^3 + |H| r^2 + n r^2)``
        for ``n`` arms. A reference for tests and diagnostics, not used in the loop.

        Args:
            hallucinated: Arm indices (repetitions allowed) added without feedback.
            idx: Arms to evaluate (default all).

        Returns:
            Variances in RLS units, shape ``n``.
        """
        if idx is None:
            idx = torch.arange(self.num_arms, device=self.arms.device)
        V = self.V
        if hallucinated is not None and hallucinated.numel() > 0:
            Zh = self.embed(hallucinated)
            V = V + Zh.mT @ Zh
        Lh = torch.linalg.cholesky(0.5 * (V + V.mT))
        Z_idx = self.embed(idx)
        Wt = torch.linalg.solve_triangular(Lh, Z_idx.mT, upper=False)
        return self.resid_at(idx, Z_idx) + Wt.pow(2).sum(0)

    def covariance_with(self, j: int, c_j: Tensor | None = None) -> Tensor:
        r"""Batch-start covariances ``k~_fb(a, x_j)`` for all arms ``a`` (Eq. 2).

        ``k~_fb(a, x_j) = (k(a, x_j) - z(a)^T z_j) / lam + z(a)^T V_fb^{-1} z_j``,
        the full approximate covariance including the Nyström residual (what the
        local rule of Lemma 3 needs, BBKB spec Sec. 5.2), computed as
        ``k(a, x_j) / lam + z(a)^T (c_j - z_j / lam)``, ``O(A (d + r))``.

        Args:
            j: Arm index ``x_j``.
            c_j: Optional precomputed ``V_fb^{-1} z_j``.

        Returns:
            An ``A`` tensor.
        """
        z_j = self.embed(torch.tensor([j], device=self.arms.device))[0]
        if c_j is None:
            c_j = self.solve(z_j)
        g = c_j - z_j / self.lam
        Z = self.Z
        x_j = self.arms[j : j + 1]
        out = torch.empty(self.num_arms, dtype=self.mu.dtype, device=self.mu.device)
        for lo, hi in _chunks(self.num_arms, self.chunk_size):
            k = self.kernel(self.arms[lo:hi], x_j).squeeze(-1) / self.lam
            out[lo:hi] = k if self.rank == 0 else torch.addmv(k, Z[lo:hi], g)
        return out


class FactoredState(BatchState):
    r"""A :class:`BatchState` keeping ``W`` and the Cholesky factor ``L`` of ``V_fb``.

    Shared by :class:`RebuiltState` and
    :class:`~botorch_sketch.bbkb.posterior_state.PosteriorState`: the arms are
    embedded from the kernel, ``z(a) = W^T k_S(a)`` (``m`` dictionary points,
    ``W`` of shape ``m x r``), and ``V_fb = L L^T`` is kept as its factor.

    Attributes (set by the subclasses):
        W: ``m x r`` embedding map.
        L: ``r x r`` lower Cholesky factor of ``V_fb``.
    """

    W: Tensor
    L: Tensor
    _Vinv: Tensor | None
    #: Optional cached ``m x A`` kernel columns ``k(S, A)``.
    K_SA: Tensor | None = None

    @property
    def dictionary_points(self) -> Tensor:
        r"""``m x d`` dictionary points ``S``."""
        raise NotImplementedError

    @property
    def rank(self) -> int:
        """Embedding dimension ``r <= m``."""
        return self.W.shape[-1]

    @property
    def V(self) -> Tensor:
        r"""``r x r`` matrix ``V_fb = L L^T``."""
        return self.L @ self.L.mT

    @property
    def Vinv(self) -> Tensor:
        r"""``r x r`` inverse ``V_fb^{-1}`` (computed once from ``L``, ``O(r^3)``)."""
        if self._Vinv is None:
            self._Vinv = torch.cholesky_inverse(self.L)
        return self._Vinv

    def solve(self, v: Tensor) -> Tensor:
        r"""``V_fb^{-1} v`` for an ``r`` vector or an ``r x k`` matrix, ``O(r^2 k)``."""
        return torch.cholesky_solve(v.reshape(self.rank, -1), self.L).reshape(v.shape)

    def covariance_with(self, j: int, c_j: Tensor | None = None) -> Tensor:
        r"""Batch-start covariances ``k~_fb(a, x_j)`` for all arms ``a`` (Eq. 2).

        As :meth:`BatchState.covariance_with`, without forming ``Z``:
        ``k(a, x_j) / lam + k_S(a)^T g`` with ``g = W (c_j - z_j / lam)``, one
        matrix-vector product with the kernel columns (cached ``K_SA``, else
        evaluated in row chunks), ``O(A (d + m) + m r)`` time, ``O(chunk_size m)``
        memory without the cache.

        Args:
            j: Arm index ``x_j``.
            c_j: Optional precomputed ``V_fb^{-1} z_j``.

        Returns:
            An ``A`` tensor.
        """
        z_j = self.embed(torch.tensor([j], device=self.arms.device))[0]
        if c_j is None:
            c_j = self.solve(z_j)
        g = self.W @ (c_j - z_j / self.lam)
        x_j, X_S = self.arms[j : j + 1], self.dictionary_points
        out = torch.empty(self.num_arms, dtype=self.W.dtype, device=self.W.device)
        for lo, hi in _chunks(self.num_arms, self.chunk_size):
            k = self.kernel(self.arms[lo:hi], x_j).squeeze(-1) / self.lam
            if self.rank == 0:
                out[lo:hi] = k
            elif self.K_SA is not None:
                out[lo:hi] = torch.addmv(k, self.K_SA[:, lo:hi].mT, g)
            else:
                out[lo:hi] = torch.addmv(k, self.kernel(self.arms[lo:hi], X_S), g)
        return out

    def _embed_rows(self, X: Tensor, X_S: Tensor) -> Tensor:
        r"""``k(X, X_S) W`` (``n x r``) in row chunks of :attr:`chunk_size`."""
        out = X.new_empty(X.shape[0], self.rank)
        if self.rank > 0:
            for lo, hi in _chunks(X.shape[0], self.chunk_size):
                out[lo:hi] = self.kernel(X[lo:hi], X_S) @ self.W
        return out


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


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


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
        for lo, hi in _chunks(A, chunk_size):
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
    S_idx = _validate_state_inputs(arms, S_idx, counts, reward_sums, lam)
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
    state.L = torch.linalg.cholesky(V)
    b = Zp.mT @ reward_sums[pulled]
    state.weights = torch.cholesky_solve(b.unsqueeze(-1), state.L).squeeze(-1)
    if A < FUSED_MIN_RATIO * max(r, 1):
        # Few arms per embedding dimension: the two-product form is cheaper than
        # the r x r eigendecomposition of the fused one, and keeps Z.
        Z = state.embed(None)
        state._Z = Z
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
    for lo, hi in _chunks(A, state.chunk_size):
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


def _sym(A: Tensor) -> Tensor:
    return 0.5 * (A + A.mT)


class _Grown:
    """A matrix in a buffer with spare rows and columns (grown by 50 %), so that
    appending rows or columns does not copy it."""

    def __init__(self, A: Tensor) -> None:
        self.buf, self.shape = A.clone(), tuple(A.shape)

    @property
    def view(self) -> Tensor:
        return self.buf[: self.shape[0], : self.shape[1]]

    def set(self, A: Tensor) -> Tensor:
        self.resize(*A.shape)
        self.view.copy_(A)
        return self.view

    def resize(self, rows: int, cols: int) -> Tensor:
        R, Cc = self.buf.shape
        if rows > R or cols > Cc:
            buf = self.buf.new_empty(max(rows, R + R // 2), max(cols, Cc + Cc // 2))
            r, c = min(rows, self.shape[0]), min(cols, self.shape[1])
            buf[:r, :c] = self.buf[:r, :c]
            self.buf = buf
        self.shape = (rows, cols)
        return self.view


def _solve_lower(L: Tensor, B: Tensor) -> Tensor:
    return torch.linalg.solve_triangular(L, B, upper=False)


class _Deferred:
    """``base + sum_j L_j R_j^T`` with the low-rank terms (each on a leading block,
    zero-padded) applied together once they hold :attr:`MAX_PENDING` columns: a
    rank-one update of an ``r x r`` matrix is one memory pass over it, ``k`` of
    them in one product are one pass too."""

    MAX_PENDING = 32

    def __init__(self, A: Tensor) -> None:
        self.base = _Grown(A)
        self.terms: list[tuple[Tensor, Tensor]] = []
        self.width = 0

    def add(self, L: Tensor, R: Tensor) -> None:
        self.terms.append((L, R))
        self.width += L.shape[-1]
        if self.width > self.MAX_PENDING:
            self.flush()

    def matmul(self, X: Tensor) -> Tensor:
        out = self.base.view @ X
        for L, R in self.terms:
            r = L.shape[0]
            out[:r] += L @ (R.mT @ X[:r])
        return out

    def flush(self) -> None:
        if not self.terms:
            return
        n = self.base.shape[0]
        Lp = self.base.buf.new_zeros(n, self.width)
        Rp = self.base.buf.new_zeros(n, self.width)
        j = 0
        for L, R in self.terms:
            r, k = L.shape
            Lp[:r, j : j + k], Rp[:r, j : j + k] = L, R
            j += k
        self.base.view.addmm_(Lp, Rp.mT)
        self.terms, self.width = [], 0

    @property
    def view(self) -> Tensor:
        self.flush()
        return self.base.view

    def resize(self, n: int) -> Tensor:
        return self.base.resize(n, n)

    def set(self, A: Tensor) -> None:
        self.terms, self.width = [], 0
        self.base.set(A)


class IncrementalState(BatchState):
    r"""Batch-start state updated in place at every resparsification.

    Keeps for all ``A`` arms the embeddings ``Z`` (``A x r``, as the ``r x A`` rows of
    an :class:`~botorch_sketch.incremental_nystrom.IncrementalNystrom`), the
    residuals ``k(a, a) - ||z(a)||^2``, and the quadratic forms ``q(a) = z(a)^T
    V^{-1} z(a)``, with ``V = sum_a n_a z(a) z(a)^T + lam I``, ``V^{-1}`` and
    ``b = sum_a z(a) Ysum_a`` (so ``mu = Z V^{-1} b``, Eq. 1, and ``s2_0 = resid /
    lam + q``, Eq. 3). :meth:`resparsify` brings them to the next dictionary and
    counts with the changes only, in this order (BBKB spec Sec. 4.1 quantities,
    incremental algebra ours):

    1. new pulls of ``p`` distinct arms ``B`` (counts ``Dn``), in the old basis:
       ``V += Z_B^T diag(Dn) Z_B``; Woodbury, ``E = V^{-1} Z_B^T L_s^{-T}`` with
       ``L_s L_s^T = diag(1/Dn) + Z_B V^{-1} Z_B^T``: ``V^{-1} -= E E^T`` and
       ``q(a) -= ||E^T z(a)||^2``;
    2. ``k_out`` pivots leave: the embedding drops the coordinates ``Q_d`` (an
       orthonormal ``r x k_out`` block, see
       :meth:`~botorch_sketch.incremental_nystrom.IncrementalNystrom.apply`);
       marginalising them out of ``V^{-1}`` (Schur complement), ``E = V^{-1} Q_d
       L^{-T}`` with ``L L^T = Q_d^T V^{-1} Q_d``: ``q(a) -= ||E^T z(a)||^2``,
       ``V^{-1} <- Q_k^T (V^{-1} - E E^T) Q_k``, ``V <- Q_k^T V Q_k``, ``b <- Q_k^T
       b``; the residuals grow by the dropped coordinates;
    3. ``k_in`` points enter: new coordinate rows ``W`` (``k_in x A``); with ``B =
       Z_P^T diag(n_P) W_P^T``, ``C = W_P diag(n_P) W_P^T + lam I``, ``U = V^{-1} B``
       and the Schur complement ``s = C - B^T U = L_s L_s^T``: ``q(a) += ||L_s^{-1}
       (w(a) - U^T z(a))||^2``, ``V^{-1}`` and ``V`` gain the block row/column, and
       the residuals shrink by ``||w(a)||^2``;
    4. ``mu = Z (V^{-1} b)`` is updated along: each step changes ``x = V^{-1} b``
       by a combination of the same directions (``E``, ``U``, the new
       coordinates), so ``mu`` needs no projection of its own (the algebra is in
       the comments of the implementation).

    The projections of all arms that steps 1-4 need are computed in the matrix
    product that updates ``Z`` (probes), so a resparsification costs about
    ``2 A r (p + 3 k_out + 2 k_in)`` flops in two passes over ``Z``,
    plus ``O(A d k_in)`` kernel evaluations and ``O(|P| r k_in)``. The low-rank
    updates of ``V`` and ``V^{-1}`` are deferred and applied 32 columns at a time
    (one product), and the new rows and columns are written into grown buffers,
    so the ``O(r^2)`` work per resparsification is about two matrix-vector
    products with ``V^{-1}``: with the dictionary growing with ``t`` (``r = t``)
    the total stays ``O(A T^2)``. A full recomputation costs ``~A r^2 + 2 |P| r^2
    + r^3`` (:meth:`refresh`) and a new embedding ``O(A m (d + r))``
    (:meth:`reset`).

    When each path runs:

    - **incremental** (steps 1-4), the default;
    - :meth:`refresh` (``V`` from ``Z``, its Cholesky factor, ``q`` and ``mu`` of
      all arms; the embedding itself still updated incrementally) when it is
      cheaper, i.e. ``p + k_out + k_in > refresh_fraction * r`` (``r`` after the
      change; the incremental work is ``~2 A r (p + k)``, a refresh ``~A r^2``),
      or when the accuracy check fails: once the work since the last check
      exceeds :data:`CHECK_WORK_RATIO` times the check's ``O(r^3 + |P| r^2)``
      cost, :meth:`check` recomputes ``V`` from ``Z`` and ``s2_0`` and ``mu`` of
      a probe set of arms (the batch's distinct arms and the first pivots), and
      a relative discrepancy above ``check_rtol`` triggers a refresh;
    - :meth:`reset` (embedding recomputed from the kernel, then a refresh) when
      the embedding's drift (:meth:`~botorch_sketch.incremental_nystrom.
      IncrementalNystrom.drift`, checked at the same times) exceeds
      ``drift_tol``, and every ``reorthonormalize_every`` dictionary changes
      (insertions + removals) as a periodic re-orthonormalisation.

    The loop (:func:`~botorch_sketch.loops.bbkb.run_bbkb`) uses
    :func:`rebuild` instead when ``A m`` floats exceed its memory budget.
    Counters of the paths taken are in :attr:`stats`.

    Args:
        arms: ``A x d`` candidate set.
        kernel: A gpytorch kernel (see :func:`rebuild`) or a :class:`DenseKernel`.
        S_idx: Initial dictionary indices.
        counts: ``A`` pull counts.
        reward_sums: ``A`` reward sums.
        lam: Ridge ``lam > 0``.
        kdiag: Optional cached ``kernel.diag(arms)``.
        chunk_size: Columns processed at once by full sweeps.
        rtol: Rank rule of the embedding (default
            :data:`~botorch_sketch.incremental_nystrom.DEFAULT_RTOL` in float64).
        check_rtol: Tolerance of the accuracy check (relative to ``s2_0 + 1`` and
            ``|mu| + 1``; default ``max(1e-7, 1e4 eps)``).
        drift_tol: Tolerance of the embedding drift (default ``1e5 eps``).
        reorthonormalize_every: Dictionary changes between periodic resets
            (default ``max(1024, 16 m)`` with the current ``m``).
        refresh_fraction: See "when each path runs" (``math.inf``: never refresh
            for cost reasons, e.g. in tests).
    """

    def __init__(
        self,
        arms: Tensor,
        kernel: Kernel | DenseKernel,
        S_idx: Tensor,
        counts: Tensor,
        reward_sums: Tensor,
        lam: float,
        *,
        kdiag: Tensor | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        rtol: float | None = None,
        check_rtol: float | None = None,
        drift_tol: float | None = None,
        reorthonormalize_every: int | None = None,
        refresh_fraction: float = 0.5,
    ) -> None:
        S_idx = _validate_state_inputs(arms, S_idx, counts, reward_sums, lam)
        self.arms, self.kernel = arms, as_dense_kernel(kernel, arms)
        self.lam, self.chunk_size = float(lam), int(chunk_size)
        self.kdiag = self.kernel.diag(arms) if kdiag is None else kdiag
        eps = torch.finfo(arms.dtype).eps
        self.check_rtol = max(1e-7, 1e4 * eps) if check_rtol is None else check_rtol
        self.drift_tol = 1e5 * eps if drift_tol is None else drift_tol
        self.reorthonormalize_every = reorthonormalize_every
        self.refresh_fraction = float(refresh_fraction)
        self.emb = IncrementalNystrom(
            arms,
            self.kernel,
            self.kdiag,
            rtol=rtol,
            capacity=max(64, 2 * S_idx.numel()),
        )
        self.stats = {"incremental": 0, "refresh": 0, "reset": 0, "checks": 0}
        self._reset(S_idx, counts.to(arms), reward_sums.to(arms))

    # ------------------------------------------------------------ interface

    @property
    def rank(self) -> int:
        """Embedding dimension ``r <= m``."""
        return self.emb.rank

    @property
    def Z(self) -> Tensor:
        r"""``A x r`` embeddings (a transposed view of the embedding's rows)."""
        return self.emb.Z

    @property
    def resid(self) -> Tensor:
        r"""``A`` Nyström residuals ``max(k(a, a) - ||z(a)||^2, 0) / lam``."""
        return self.emb.residual.clamp_min(0.0) / self.lam

    @property
    def V(self) -> Tensor:
        r"""``r x r`` matrix ``V_fb`` (a view, updated in place; do not modify)."""
        return self._V.view

    @property
    def Vinv(self) -> Tensor:
        r"""``r x r`` inverse ``V_fb^{-1}`` (a view, updated in place)."""
        return self._Vinv.view

    @property
    def L(self) -> Tensor:
        r"""``r x r`` lower Cholesky factor of ``V_fb`` (computed on demand)."""
        if self._L is None:
            self._L = torch.linalg.cholesky(_sym(self.V))
        return self._L

    def embed(self, idx: Tensor | None = None) -> Tensor:
        r"""``n x r`` embeddings of the arms ``idx`` (all if ``None``), ``O(n r)``."""
        return self.emb.Z if idx is None else self.emb.coordinates(idx).mT

    def resid_at(self, idx: Tensor, Z_idx: Tensor | None = None) -> Tensor:
        r"""Residuals :attr:`resid` of the arms ``idx`` only, ``O(n)``."""
        return self.emb.residual[idx].clamp_min(0.0) / self.lam

    # ------------------------------------------------------------- updates

    def resparsify(
        self, S_idx: Tensor, counts: Tensor, reward_sums: Tensor
    ) -> IncrementalState:
        r"""Move to the dictionary ``S_idx`` and the new ``counts`` / ``reward_sums``.

        Arguments as :func:`rebuild`; counts may only grow. The state is changed in
        place (and returned); :attr:`mu` and :attr:`s2_0` are new tensors.

        Returns:
            ``self``.
        """
        S_idx = _validate_state_inputs(self.arms, S_idx, counts, reward_sums, self.lam)
        counts, reward_sums = counts.to(self.arms), reward_sums.to(self.arms)
        dn = counts - self.counts
        pulled = (dn != 0).nonzero().squeeze(-1)
        if bool((dn[pulled] < 0).any()):
            raise ValueError("counts can only grow between resparsifications.")
        emb = self.emb
        members = emb.members
        gone = members[~torch.isin(members, S_idx)]
        new = S_idx[~torch.isin(S_idx, members)]
        k_out = int(torch.isin(emb.pivots, gone).sum())
        self._since_reset += gone.numel() + new.numel()
        every = self.reorthonormalize_every
        if every is None:  # a reset costs about 16 m changes' worth of updates
            every = max(1024, 16 * max(S_idx.numel(), members.numel()))
        if self._since_reset > every:
            self._reset(S_idx, counts, reward_sums)
            return self
        r_new = self.rank - k_out + new.numel()
        changes = pulled.numel() + k_out + new.numel()
        if changes > self.refresh_fraction * max(r_new, 1):
            emb.update(add=new, remove=gone)
            self._refresh(counts, reward_sums)
        else:
            self._incremental(pulled, dn[pulled], gone, new, counts, reward_sums)
            self.stats["incremental"] += 1
        self._work += (
            2.0
            * self.num_arms
            * max(self.rank, 1)
            * (pulled.numel() + 3 * k_out + 2 * new.numel() + 1)
        )
        self._maybe_check(pulled)
        return self

    def _incremental(
        self,
        pulled: Tensor,
        dn: Tensor,
        gone: Tensor,
        new: Tensor,
        counts: Tensor,
        reward_sums: Tensor,
    ) -> None:
        emb, lam = self.emb, self.lam
        dy = reward_sums[pulled] - self.reward_sums[pulled]
        r = emb.rank
        # Every correction of q and mu is (a coefficient times) a projection
        # p^T z(a) of the OLD coordinates: collect the probes p, then one pass.
        probes: list[Tensor] = []
        coefs: list[Tensor] = []  # mu(a) += coef^T (probe^T z(a))
        # 1. New pulls (Woodbury), in the old basis. With x = V^{-1} b (mu = Z x):
        #    x' = x + E (L_s^T Dy - E^T b').
        if r and pulled.numel():
            Zb = emb.coordinates(pulled)
            self._b = self._b + Zb @ dy
            self._V.add(Zb * dn, Zb)
            C = self._Vinv.matmul(Zb)
            Ls = torch.linalg.cholesky(_sym(Zb.mT @ C + torch.diag(dn.reciprocal())))
            E = _solve_lower(Ls, C.mT).mT
            self._Vinv.add(-E, E)
            probes.append(E)
            coefs.append(Ls.mT @ dy - E.mT @ self._b)
        self.counts, self.reward_sums = counts.clone(), reward_sums.clone()
        fresh = pulled[~torch.isin(pulled, self._P)]
        if fresh.numel():  # first pulls of these arms: extend the cache
            n_old = self._P.numel()
            self._P = torch.cat([self._P, fresh])
            ZP = self._ZP.resize(r, self._P.numel())
            ZP[:, n_old:] = emb.coordinates(fresh)
        # 2. Removals: marginalise the dropped coordinates out of V^{-1}. Since
        #    (V^{-1} - E E^T) Q_d = 0, mu loses exactly (E^T z)^T (E^T b).
        rplan = emb.plan_removal(gone)
        k_out = rplan.num_dropped
        keep = r - k_out
        Qk = None
        if k_out:
            Qd = rplan.dropped_basis()
            VQd = self._Vinv.matmul(Qd)
            L22 = torch.linalg.cholesky(_sym(Qd.mT @ VQd))
            E = _solve_lower(L22, VQd.mT).mT
            probes.append(E)
            coefs.append(-(E.mT @ self._b))
            Vi = rplan.rotate(rplan.rotate(self.Vinv - E @ E.mT).mT)
            self._Vinv.set(_sym(Vi[:keep, :keep]))
            self._V.set(_sym(rplan.rotate(rplan.rotate(self.V).mT)[:keep, :keep]))
            self._b = rplan.rotate(self._b.unsqueeze(-1)).squeeze(-1)[:keep]
            self._ZP.set(rplan.rotate(self._ZP.view)[:keep])
            Qk = rplan.kept_basis()
        width = sum(p.shape[-1] for p in probes)
        # 3. Insertions: Schur complement of the new coordinates in V; the first
        #    block of V^{-1} b gains U g, the new block is -g,
        #    g = s^{-1} (U^T b - b_w).
        iplan = emb.plan_insertion(new, after=rplan)
        k_in = iplan.num_new
        if k_in:
            P, ZP = self._P, self._ZP.view
            nP = counts[P]
            WP = emb.new_coordinates(iplan, P, after=rplan, coords=ZP)
            B = (ZP * nP) @ WP.mT
            eye = torch.eye(k_in, dtype=B.dtype, device=B.device)
            Cc = (WP * nP) @ WP.mT + lam * eye
            U = self._Vinv.matmul(B)
            Ls = torch.linalg.cholesky(_sym(Cc - B.mT @ U))
            s_inv = torch.cholesky_inverse(Ls)
            Us = U @ s_inv
            b_w = WP @ reward_sums[P]
            g = s_inv @ (U.mT @ self._b - b_w)
            # The rank-k update of V^{-1} is deferred (_Deferred), the new rows
            # and columns are written in place: no O(r^2) work here.
            self._Vinv.add(Us, U)
            Vi = self._Vinv.resize(keep + k_in)
            Vi[:keep, keep:] = -Us
            Vi[keep:, :keep] = -Us.mT
            Vi[keep:, keep:] = s_inv
            V = self._V.resize(keep + k_in)
            V[:keep, keep:], V[keep:, :keep], V[keep:, keep:] = B, B.mT, Cc
            self._b = torch.cat([self._b, b_w])
            self._ZP.resize(keep + k_in, P.numel())[keep:] = WP
            if keep:
                probes.append(U if Qk is None else Qk @ U)
                coefs.append(g)
        # 4. One pass over Z for every projection; then q and mu.
        out = emb.apply(rplan, iplan, torch.cat(probes, 1) if probes else None)
        q, mu = self._q, self.mu
        if probes:
            mu = mu + torch.cat(coefs) @ out
        if width:
            q = q - out[:width].square().sum(0)
        if keep == 0:
            mu = self._zeros()
        if k_in:
            W = emb.Zt[keep:]
            D = W - out[width:] if keep else W
            q = q + _solve_lower(Ls, D).square().sum(0)
            mu = mu - g @ W
        self._q = q
        self._finish(mu)

    def _zeros(self) -> Tensor:
        return self.kdiag.new_zeros(self.num_arms)

    def _finish(self, mu: Tensor) -> None:
        self._L = None
        self.S_idx = self.emb.members
        self.mu = mu
        self.s2_0 = torch.add(self.resid, self._q.clamp_min(0.0))

    def refresh(self) -> None:
        r"""Recompute ``V`` (from ``Z``), ``V^{-1}``, ``q``, ``mu`` and ``s2_0`` of all
        arms for the current embedding, ``O(A r^2 + |P| r^2 + r^3)``."""
        self._refresh(self.counts, self.reward_sums)

    def _refresh(self, counts: Tensor, reward_sums: Tensor) -> None:
        self.counts, self.reward_sums = counts.clone(), reward_sums.clone()
        r, Zt = self.rank, self.emb.Zt
        P = (counts > 0).nonzero().squeeze(-1)
        ZP = Zt[:, P]
        self._P, self._ZP = P, _Grown(ZP)  # pulled arms' coordinates, kept updated
        eye = torch.eye(r, dtype=Zt.dtype, device=Zt.device)
        V = _sym((ZP * counts[P]) @ ZP.mT) + self.lam * eye
        L = torch.linalg.cholesky(V)
        self._V, self._Vinv = _Deferred(V), _Deferred(torch.cholesky_inverse(L))
        self._b = ZP @ reward_sums[P]
        q = self._zeros()
        if r:
            for lo, hi in _chunks(self.num_arms, self.chunk_size):
                q[lo:hi] = _solve_lower(L, Zt[:, lo:hi]).square().sum(0)
            mu = (self._Vinv.matmul(self._b)) @ Zt
        else:
            mu = self._zeros()
        self._q = q
        self._finish(mu)
        self._L = L
        self.stats["refresh"] += 1

    def reset(self) -> None:
        r"""Recompute the embedding from the kernel and then :meth:`refresh`,
        ``O(A m (d + r) + A r^2)``."""
        self._reset(self.S_idx, self.counts, self.reward_sums)

    def _reset(self, S_idx: Tensor, counts: Tensor, reward_sums: Tensor) -> None:
        self.emb.reset(S_idx)
        self._refresh(counts, reward_sums)
        self._since_reset = 0
        self._work = 0.0
        self.stats["reset"] += 1

    def check(self, probe: Tensor | None = None) -> tuple[float, float]:
        r"""Accuracy of the maintained state against a recomputation.

        ``V`` is recomputed from ``Z`` and ``s2_0`` and ``mu`` of the ``probe`` arms
        (default: the first 32 pivots) by Cholesky solves, ``O(|P| r^2 + r^3)``.

        Returns:
            ``(state_error, drift)``: the largest of ``|s2_0 - s2| / (1 + s2)``,
            ``|mu - mu'| / (1 + |mu'|)``, ``|V - V'| / max|V'|`` and the error of the
            cached coordinates of the pulled arms, and the embedding's drift.
        """
        r = self.rank
        if r == 0:
            return 0.0, 0.0
        idx = self.emb.pivots[:32]
        if probe is not None:
            idx = torch.unique(torch.cat([idx, probe]))
        Zt = self.emb.Zt
        P = (self.counts > 0).nonzero().squeeze(-1)
        ZP = Zt[:, P]
        eye = torch.eye(r, dtype=Zt.dtype, device=Zt.device)
        V = _sym((ZP * self.counts[P]) @ ZP.mT) + self.lam * eye
        L = torch.linalg.cholesky(V)
        Zi = Zt[:, idx]
        s2 = self.resid[idx] + _solve_lower(L, Zi).square().sum(0)
        w = torch.cholesky_solve((ZP @ self.reward_sums[P]).unsqueeze(-1), L)
        mu = (Zi.mT @ w).squeeze(-1)
        err = torch.stack(
            [
                ((self.s2_0[idx] - s2).abs() / (1 + s2)).max(),
                ((self.mu[idx] - mu).abs() / (1 + mu.abs())).max(),
                (self.V - V).abs().max() / V.abs().max(),
                (self._ZP.view - Zt[:, self._P]).abs().max()
                if P.numel()
                else V[0, 0] * 0,
            ]
        )
        return float(err.max()), self.emb.drift()

    def _maybe_check(self, pulled: Tensor) -> None:
        r = self.rank
        P = int((self.counts > 0).sum())
        if self._work < CHECK_WORK_RATIO * (r**3 + 2.0 * P * r**2 + CHECK_OVERHEAD):
            return
        self._work = 0.0
        self.stats["checks"] += 1
        err, drift = self.check(pulled)
        if drift > self.drift_tol:
            logger.info("embedding drift %.2e: reset", drift)
            self._reset(self.S_idx, self.counts, self.reward_sums)
        elif err > self.check_rtol:
            logger.info("state error %.2e: refresh", err)
            self._refresh(self.counts, self.reward_sums)


def _validate_state_inputs(
    arms: Tensor, S_idx: Tensor, counts: Tensor, reward_sums: Tensor, lam: float
) -> Tensor:
    """Shared checks of :func:`rebuild` and :class:`IncrementalState`; returns the
    sorted unique dictionary."""
    if arms.dim() != 2 or arms.shape[0] == 0:
        raise ValueError(
            f"arms must be a non-empty A x d tensor, got shape {tuple(arms.shape)}."
        )
    A = arms.shape[0]
    if counts.shape != (A,) or reward_sums.shape != (A,):
        raise ValueError(
            f"counts and reward_sums must have shape ({A},), got "
            f"{tuple(counts.shape)} and {tuple(reward_sums.shape)}."
        )
    if not lam > 0:
        raise ValueError(f"lam must be positive, got {lam}.")
    S_idx = torch.unique(S_idx.to(device=arms.device, dtype=torch.long))
    if S_idx.numel() and (S_idx[0] < 0 or S_idx[-1] >= A):
        raise ValueError(f"dictionary indices must lie in [0, {A}).")
    return S_idx
