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
:func:`rebuild`: ``O(A m d + A m^2 + m^3)`` time, ``O(A r)`` memory; the kernel is
evaluated in row chunks of ``A x m`` blocks, never ``A x A``.

Units: ``s2_0`` is in RLS units, ``sigma~^2 = sigma^2_DTC / lam`` (BBKB App. A.1;
:func:`~botorch_sketch.linalg.rls_units`). With ``lam`` equal to the noise variance
``xi^2``, ``lam * s2_0`` is the DTC (projected-process) posterior variance and
``mu`` the DTC posterior mean of a zero-mean GP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.bbkb.kernels import KernelDiagFn, KernelFn

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "BatchState",
    "KernelColumnCache",
    "embed_arms",
    "rebuild",
]

#: Rows of the arm set embedded at once (``chunk x m`` kernel blocks).
DEFAULT_CHUNK_SIZE = 65_536


@dataclass
class BatchState:
    r"""Batch-start state of BBKB over ``A`` arms (BBKB spec Sec. 3.1).

    Attributes:
        arms: ``A x d`` candidate set.
        kernel: ``k(X1, X2)`` returning a dense ``n1 x n2`` tensor.
        kernel_diag: ``k(X, X)`` diagonal, an ``n`` tensor.
        lam: Ridge ``lam > 0``.
        S_idx: ``m`` sorted, unique arm indices of the dictionary ``S``.
        W: ``m x r`` embedding map, ``z(a) = W^T k_S(a)``.
        Z: ``A x r`` embeddings of all arms.
        kdiag: ``A`` prior variances ``k(a, a)``.
        resid: ``A`` Nyström residuals ``max(k(a, a) - ||z(a)||^2, 0) / lam``
            (RLS units); constant within a batch.
        counts: ``A`` pull counts ``n_a`` (float64, integer valued).
        reward_sums: ``A`` sums of the observed rewards per arm.
        L: ``r x r`` lower Cholesky factor of ``V_fb``.
        weights: ``r`` vector ``V_fb^{-1} Z^T y``, so that ``mu = Z @ weights``.
        mu: ``A`` frozen means ``mu~_fb(a)`` (Eq. 1).
        s2_0: ``A`` batch-start variances ``sigma~^2_fb(a)`` (Eq. 3, RLS units).
    """

    arms: Tensor
    kernel: KernelFn
    kernel_diag: KernelDiagFn
    lam: float
    S_idx: Tensor
    W: Tensor
    Z: Tensor
    kdiag: Tensor
    resid: Tensor
    counts: Tensor
    reward_sums: Tensor
    L: Tensor
    weights: Tensor
    mu: Tensor
    s2_0: Tensor

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
        return self.Z.shape[-1]

    def solve(self, v: Tensor) -> Tensor:
        r"""``V_fb^{-1} v`` for an ``r`` vector or an ``r x k`` matrix, ``O(r^2 k)``."""
        return torch.cholesky_solve(v.reshape(self.rank, -1), self.L).reshape(v.shape)

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
        idx = torch.arange(self.num_arms) if idx is None else idx
        V = self.L @ self.L.mT
        if hallucinated is not None and hallucinated.numel() > 0:
            Zh = self.Z[hallucinated]
            V = V + Zh.mT @ Zh
        Lh = torch.linalg.cholesky(V)
        Wt = torch.linalg.solve_triangular(Lh, self.Z[idx].mT, upper=False)
        return self.resid[idx] + Wt.pow(2).sum(0)

    def covariance_with(self, j: int, c_j: Tensor | None = None) -> Tensor:
        r"""Batch-start covariances ``k~_fb(a, x_j)`` for all arms ``a`` (Eq. 2).

        ``k~_fb(a, x_j) = (k(a, x_j) - z(a)^T z_j) / lam + z(a)^T V_fb^{-1} z_j``,
        the full approximate covariance including the Nyström residual (what the
        local rule of Lemma 3 needs, BBKB spec Sec. 5.2). ``O(A (d + r) + r^2)``.

        Args:
            j: Arm index ``x_j``.
            c_j: Optional precomputed ``V_fb^{-1} z_j``.

        Returns:
            An ``A`` tensor.
        """
        z_j = self.Z[j]
        if c_j is None:
            c_j = self.solve(z_j)
        x_j = self.arms[j : j + 1]
        out = torch.empty(self.num_arms, dtype=self.Z.dtype, device=self.Z.device)
        for lo, hi in _chunks(self.num_arms, DEFAULT_CHUNK_SIZE):
            Zc = self.Z[lo:hi]
            k = self.kernel(self.arms[lo:hi], x_j).squeeze(-1)
            out[lo:hi] = (k - Zc @ z_j) / self.lam + Zc @ c_j
        return out


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
        kernel: Dense kernel callable.
        max_bytes: Memory cap of the cached block.
    """

    def __init__(self, arms: Tensor, kernel: KernelFn, max_bytes: int = 2**30) -> None:
        self.arms, self.kernel, self.max_bytes = arms, kernel, max_bytes
        self._ids = torch.empty(0, dtype=torch.long)
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
            pos = hit = torch.zeros(m, dtype=torch.bool)
        K_T = self._K_T.new_empty(m, A)
        if hit.any():
            K_T[hit] = self._K_T[pos[hit]]
        miss = ~hit
        if miss.any():
            K_T[miss] = self.kernel(self.arms[S_idx[miss]], self.arms)
        self._ids, self._K_T = S_idx.clone(), K_T
        return K_T


def embed_arms(
    arms: Tensor,
    kernel: KernelFn,
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
        kernel: Dense kernel callable.
        S_idx: ``m`` dictionary indices into ``arms`` (``m = 0`` allowed).
        chunk_size: Rows embedded at once.
        cache: Optional :class:`KernelColumnCache` (``S_idx`` sorted, unique).

    Returns:
        ``(W, Z)`` of shapes ``m x r`` and ``A x r``.
    """
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
    kernel: KernelFn,
    kernel_diag: KernelDiagFn,
    S_idx: Tensor,
    counts: Tensor,
    reward_sums: Tensor,
    lam: float,
    *,
    kdiag: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    cache: KernelColumnCache | None = None,
) -> BatchState:
    r"""Recompute the frozen state at a resparsification (BBKB Alg. 1 L18).

    With ``Z = embed(A, S)``, pulled arms ``P = {a : n_a > 0}``:

        V_fb = Z_P^T diag(n_P) Z_P + lam I = L L^T
        weights = V_fb^{-1} Z_P^T Ysum_P,        mu = Z weights             (Eq. 1)
        s2_0 = (kdiag - ||z||^2)_+ / lam + ||L^{-1} z||^2                    (Eq. 3)

    Cost ``O(A m (d + r) + m^3 + |P| r^2 + A r^2)``. An empty dictionary gives
    ``r = 0``, ``mu = 0`` and ``s2_0 = k(a, a) / lam`` (BBKB spec Sec. 11.3).

    Args:
        arms: ``A x d`` candidate set (float64 recommended).
        kernel: Dense kernel callable ``k(X1, X2)``.
        kernel_diag: Kernel diagonal callable.
        S_idx: Dictionary arm indices (deduplicated and sorted here).
        counts: ``A`` pull counts (non-negative).
        reward_sums: ``A`` sums of observed rewards per arm.
        lam: Ridge ``lam > 0``.
        kdiag: Optional cached ``kernel_diag(arms)``.
        chunk_size: Rows embedded at once.
        cache: Optional :class:`KernelColumnCache` reused across rebuilds.

    Returns:
        The :class:`BatchState`.
    """
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
    S_idx = torch.unique(S_idx.to(torch.long))  # sorted, deduplicated
    if S_idx.numel() and (S_idx[0] < 0 or S_idx[-1] >= A):
        raise ValueError(f"dictionary indices must lie in [0, {A}).")
    if kdiag is None:
        kdiag = kernel_diag(arms)
    W, Z = embed_arms(arms, kernel, S_idx, chunk_size, cache)
    r = Z.shape[-1]
    counts = counts.to(Z)
    reward_sums = reward_sums.to(Z)
    pulled = (counts > 0).nonzero().squeeze(-1)
    Zp = Z[pulled]
    V = Zp.mT @ (Zp * counts[pulled].unsqueeze(-1))
    V = 0.5 * (V + V.mT) + lam * torch.eye(r, dtype=Z.dtype, device=Z.device)
    L = torch.linalg.cholesky(V)
    b = Zp.mT @ reward_sums[pulled]
    weights = torch.cholesky_solve(b.unsqueeze(-1), L).squeeze(-1)
    resid = linalg.embedding_residual(kdiag, Z) / lam
    mu = Z @ weights
    # ||L^{-1} z||^2 with an explicit triangular inverse: a plain matmul is faster
    # than a triangular solve with A right-hand sides, and L is well conditioned
    # (eigenvalues of V in [lam, lam + t kappa^2]).
    eye = torch.eye(r, dtype=Z.dtype, device=Z.device)
    L_inv_T = torch.linalg.solve_triangular(L, eye, upper=False).mT
    s2_0 = torch.empty_like(resid)
    for lo, hi in _chunks(A, chunk_size):
        s2_0[lo:hi] = resid[lo:hi] + (Z[lo:hi] @ L_inv_T).pow(2).sum(-1)
    logger.debug("rebuild: m=%d, r=%d, pulled=%d", S_idx.numel(), r, pulled.numel())
    return BatchState(
        arms=arms,
        kernel=kernel,
        kernel_diag=kernel_diag,
        lam=float(lam),
        S_idx=S_idx,
        W=W,
        Z=Z,
        kdiag=kdiag,
        resid=resid,
        counts=counts,
        reward_sums=reward_sums,
        L=L,
        weights=weights,
        mu=mu,
        s2_0=s2_0,
    )
