r"""The interface of BBKB's frozen batch-start state and its shared helpers.

:class:`BatchState` is what batch selection, stopping rules and schedules read
(BBKB, Calandriello et al., ICML 2020, Sec. 3.1): for all ``A`` arms the frozen
means ``mu~(a) = z(a)^T V_fb^{-1} sum_b z(b) Ysum_b`` (Eq. 1) and batch-start
variances ``s2_0(a) = (k(a, a) - ||z(a)||^2) / lam + z(a)^T V_fb^{-1} z(a)``
(Eqs. 2-3, RLS units), with the Nystrom embeddings ``z(a)`` (``A x r``) and
``V_fb = sum_a n_a z(a) z(a)^T + lam I_r``. :class:`FactoredState` keeps the
embedding map ``W`` and the Cholesky factor of ``V_fb``; the implementations are
in :mod:`~botorch_sketch.bbkb.rebuilt_state` and
:mod:`~botorch_sketch.bbkb.incremental_state`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from botorch_sketch.bbkb.dense_kernel import DenseKernel
from botorch_sketch.linalg import row_chunks

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "BatchState",
    "FactoredState",
    "checked_cholesky",
    "row_chunks",
    "solve_lower",
    "symmetrize",
    "validate_state_inputs",
]

#: Rows of the arm set embedded at once (``chunk x m`` kernel blocks).
DEFAULT_CHUNK_SIZE = 65_536


def symmetrize(A: Tensor) -> Tensor:
    """``(A + A^T) / 2``: the symmetric part of a square matrix (rounding guard)."""
    return 0.5 * (A + A.mT)


def checked_cholesky(V: Tensor, lam: float) -> Tensor:
    r"""Lower Cholesky factor of ``V_fb = sum_a n_a z(a) z(a)^T + lam I`` (``r x r``).

    ``V_fb`` is positive definite in exact arithmetic (its eigenvalues are at
    least ``lam``); a factorisation that fails anyway means that the embedding's
    rounding errors exceed ``lam``, which happens in float32 with a small ridge.

    Raises:
        ValueError: naming the dtype and ``lam``, instead of ``LinAlgError``.
    """
    L, info = torch.linalg.cholesky_ex(V)
    if bool(info != 0):
        raise ValueError(
            f"BBKB's V = Z^T diag(n) Z + lam I is not positive definite in {V.dtype} "
            f"(lam = {lam:.3g}, r = {V.shape[-1]}): the embedding's rounding errors "
            "exceed the ridge. Use dtype=torch.float64 or a larger lam."
        )
    return L


#: Above this many right-hand sides, off the CPU, :func:`solve_lower` multiplies
#: by ``L^{-1}`` instead of solving: on an H200 (float64) a CUDA triangular solve
#: of an ``m x m`` factor (``m <= 100``) against ``10^6`` columns took 0.27 s per
#: call, 80 s of an 82 s engine run; at ``2 x 10^4`` columns it was fast.
SOLVE_AS_PRODUCT_MIN_RHS = 65_536


def solve_lower(L: Tensor, B: Tensor, as_product: bool | None = None) -> Tensor:
    """``L^{-1} B`` for a lower triangular ``L`` (``m x m``) and ``B`` (``m x k``).

    ``as_product``: form ``L^{-1}`` (``O(m^3)``) and multiply, a matrix product
    instead of a triangular solve with ``k`` right-hand sides (``None``: off the
    CPU when ``k > SOLVE_AS_PRODUCT_MIN_RHS``). ``L`` is the Cholesky factor of a
    ridge-regularised Gram matrix, so ``L^{-1}`` is well conditioned enough for
    the same result to rounding.
    """
    if as_product is None:
        as_product = L.device.type != "cpu" and B.shape[-1] > SOLVE_AS_PRODUCT_MIN_RHS
    if as_product:
        eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device)
        return torch.linalg.solve_triangular(L, eye, upper=False) @ B
    return torch.linalg.solve_triangular(L, B, upper=False)


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
        for lo, hi in row_chunks(self.num_arms, self.chunk_size):
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
        for lo, hi in row_chunks(self.num_arms, self.chunk_size):
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
            for lo, hi in row_chunks(X.shape[0], self.chunk_size):
                out[lo:hi] = self.kernel(X[lo:hi], X_S) @ self.W
        return out


def validate_state_inputs(
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
