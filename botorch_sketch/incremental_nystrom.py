r"""Nyström coordinates of a fixed point set, updated as the dictionary changes.

Pure torch, no BoTorch imports (the layer of :mod:`botorch_sketch.linalg`).

**Setting.** ``X = {x_1, ..., x_n}`` is a fixed set of points (BBKB's arms, or a
GP's training inputs), ``S`` a dictionary of some of them that changes by small
amounts (BKB / BBKB resparsification, Calandriello et al., COLT 2019 Alg. 1 and
ICML 2020 Alg. 1 L11-L18), and ``E_S = span{phi(s) : s in S}`` its span in the
kernel's feature space. Every DTC / Nyström quantity depends on the embedding only
through inner products ``z(x)^T z(x') = <P_E phi(x), P_E phi(x')> = k_S(x)^T K_S^+
k_S(x')`` (BBKB Eqs. 1-3; :mod:`botorch_sketch.linalg`), so the coordinates of the
projection of ``phi(x)`` onto ``E_S`` in ANY orthonormal basis of ``E_S`` are a
valid embedding. :class:`IncrementalNystrom` keeps, for ``r = dim E_S``:

- ``Zt`` (``r x n``): column ``i`` is ``z(x_i)``;
- pivots ``p_1, ..., p_r`` among the members of ``S`` with ``E_S = span{phi(p_j)}``;
  the other members lie in that span numerically (their Schur residual is at most
  ``rtol k(s, s)`` when they are inserted);
- ``N = M^{-1}`` where ``M = Zt[:, pivots]^T`` (``r x r``, row ``j`` is ``z(p_j)``,
  ``M M^T = K_PP``), updated by removals and extended lazily after insertions
  (:attr:`IncrementalNystrom.N`);
- ``residual(x) = k(x, x) - ||z(x)||^2`` (kernel units, the Nyström residual).

**Insertion** of candidates ``C`` (block classical Gram-Schmidt in feature space):
with ``L_C = Zt[:, C]`` (``r x c``) the Schur complement ``K_CC - L_C^T L_C`` is
factorised by a greedy pivoted Cholesky ``R R^T`` that stops when the largest
relative residual is at most ``rtol`` (candidates already in the span, e.g.
duplicated points, become non-pivot members). The ``k`` new orthonormal directions
``(Phi_C - E L_C) R^{-T}`` give every point ``k`` new coordinates

    w(x) = R^{-1} (k_C(x) - L_C^T z(x)),                  O(n k (d + r)),

``M`` gains the block row ``[L_C^T, R]`` (block lower triangular), so ``N``
becomes ``[[N, 0], [-R^{-1} L_C^T N, R^{-1}]]``; that extension is deferred until
``N`` is needed (``O(r^2 k)`` then), so insertions cost no ``O(r^2)`` work.

**Removal** of pivots ``J`` (``k`` of them): since ``M N = I``, the columns
``G = N[:, J]`` span the coordinate directions orthogonal to the remaining pivots'
coordinates. The ``k`` Householder reflections of the QR factorisation of ``G``
with its rows reversed, in compact WY form ``Q = I - Y T Y^T`` (``Y``: ``r x k``,
``T``: ``k x k`` upper triangular, LAPACK's ``larft``), map ``span(G)`` onto the LAST
``k`` axes; then ``Zt <- (Q^T Zt)[:r-k]``, two products of width ``k`` (``O(n r k)``),
the dropped coordinates go back into ``residual``, and ``N <- (Q^T N)[:r-k, kept]``
(``M Q`` is block triangular: the kept pivots have no component along ``span(G)``).
Removing a non-pivot member changes only the bookkeeping; after a pivot removal
the remaining non-pivot members are re-tried at the next insertion.

**Probes.** :meth:`IncrementalNystrom.apply` performs a removal and an insertion
planned after it in one pass over ``Zt``, and takes an optional ``r x w`` matrix
``P``: it returns ``P^T Zt`` for the coordinates BEFORE the change, computed in the
same matrix product as the update. A caller that keeps quantities quadratic in
``z`` for all points (e.g. the DTC variances ``z(x)^T V^{-1} z(x)``,
:mod:`botorch_sketch.bbkb.state`) updates them from these projections in
``O(n w)``; the two-phase API (``plan_removal`` / ``plan_insertion`` decide,
``apply`` changes ``Zt``) lets it compute ``P`` from the plans first.

**Accuracy.** Every step is backward stable (orthogonal transformations,
triangular solves with ``R`` whose diagonal is at least ``sqrt(rtol k(c, c))``), but
rounding accumulates over many steps: :meth:`IncrementalNystrom.drift` measures it
(``||M N x - x||`` for a fixed probe ``x`` and the pivots' residuals, all zero in
exact arithmetic) and :meth:`IncrementalNystrom.reset` recomputes everything from
the kernel, ``O(n m (d + r))``. Memory: ``O(n r)`` for ``Zt`` (over-allocated by at
most 50 %), ``O(r^2)`` for ``N``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from scipy.linalg import blas as _scipy_blas
from torch import Tensor

__all__ = [
    "DEFAULT_RTOL",
    "IncrementalNystrom",
    "InsertionPlan",
    "RemovalPlan",
    "compact_wy",
    "pivoted_cholesky",
]

KernelFn = Callable[[Tensor, Tensor], Tensor]

#: Relative Schur residual ``d^2 / k(c, c)`` at or below which a candidate counts
#: as already in the span. Comparable to the pseudo-inverse cut-off ``m eps
#: max(eig K_S)`` of :func:`~botorch_sketch.linalg.nystrom_embedding_map` for
#: dictionaries of ~100 points; it bounds the amplification of rounding errors by
#: ``1 / d`` to ``1e6``.
DEFAULT_RTOL = 1e-12


#: Backend of the narrow products ``P^T Zt`` on the CPU: ``"numpy"`` (NumPy's
#: BLAS, OpenBLAS in NumPy's wheels) or ``"torch"``. Measured on this project's AMD
#: EPYC machine, one thread, float64, ``Zt`` of ``91 x 20,640`` / ``2,000 x
#: 15,625``: torch's MKL runs products of width 4-21 at 5-14 GFLOP/s (width 4
#: costs as much as four matrix-vector products), OpenBLAS at 11-28 GFLOP/s
#: (width 4 at about one pass over ``Zt``); whole BBKB runs were 20-30 % faster.
#: Results agree to rounding.
CPU_PRODUCT_BACKEND = "numpy"


def _project(P: Tensor, Zt: Tensor) -> Tensor:
    """``P^T Zt`` (``w x n``) for ``P``: ``r x w`` and ``Zt``: ``r x n``."""
    if (
        CPU_PRODUCT_BACKEND == "numpy"
        and Zt.device.type == "cpu"
        and Zt.dtype in (torch.float32, torch.float64)
        and not (P.requires_grad or Zt.requires_grad)
        and Zt.is_contiguous()
    ):
        Pt = P.mT.contiguous().to(Zt.dtype)
        return torch.from_numpy(Pt.numpy() @ Zt.numpy())
    return P.mT @ Zt


def _sub_product(Z: Tensor, Y: Tensor, M: Tensor) -> None:
    """``Z -= Y M`` in place (``Z``: ``r x n``, ``Y``: ``r x k``, ``M``: ``k x n``).

    On the CPU (with :data:`CPU_PRODUCT_BACKEND` ``"numpy"``) through SciPy's BLAS
    ``gemm`` writing over ``Z``'s memory, like the narrow products of
    :func:`_project`; the results agree with ``Tensor.addmm_`` to rounding.
    """
    if (
        CPU_PRODUCT_BACKEND == "numpy"
        and Z.device.type == "cpu"
        and Z.dtype in (torch.float32, torch.float64)
        and Z.is_contiguous()
        and not (Z.requires_grad or Y.requires_grad or M.requires_grad)
    ):
        gemm = _scipy_blas.dgemm if Z.dtype == torch.float64 else _scipy_blas.sgemm
        Zn = Z.numpy()
        Yn, Mn = Y.to(Z.dtype).numpy(), M.to(Z.dtype).numpy()
        # Z^T (Fortran order) = Z^T - M^T Y^T, written over Z's memory.
        out = gemm(-1.0, Mn.T, Yn.T, beta=1.0, c=Zn.T, overwrite_c=1)
        if not np.shares_memory(out, Zn):
            Zn[...] = out.T
        return
    Z.addmm_(Y, M, alpha=-1.0)


def pivoted_cholesky(A: Tensor, threshold: Tensor) -> tuple[Tensor, Tensor]:
    r"""Greedy pivoted Cholesky factorisation of a PSD matrix with rank detection.

    At each step the index with the largest relative Schur residual
    ``d_i / threshold_i`` is chosen, and the factorisation stops when no residual
    exceeds its threshold. ``A[p][:, p] = L[p] L[p]^T`` for the chosen order ``p``,
    and ``L[p]`` is lower triangular with diagonal ``> sqrt(threshold[p])``.
    ``O(c r^2)`` time for ``r`` chosen pivots (one Python step per pivot).

    Args:
        A: ``c x c`` symmetric positive semi-definite matrix.
        threshold: ``c`` positive absolute residual thresholds.

    Returns:
        ``(order, L)``: the ``r`` chosen indices in pivot order and the ``c x r``
        factor whose rows are in the original order.
    """
    c = A.shape[-1]
    if A.shape != (c, c) or threshold.shape != (c,):
        raise ValueError(
            f"need a c x c matrix and c thresholds, got {tuple(A.shape)} and "
            f"{tuple(threshold.shape)}."
        )
    d = A.diagonal().clone()
    thr = threshold.clamp_min(torch.finfo(A.dtype).tiny)
    L = A.new_zeros(c, c)
    chosen = torch.zeros(c, dtype=torch.bool, device=A.device)
    order: list[int] = []
    for j in range(c):
        score = (d / thr).masked_fill(chosen, -math.inf)
        i = int(torch.argmax(score))
        if not bool(d[i] > thr[i]):
            break
        col = A[:, i] - L[:, :j] @ L[i, :j]
        col = col / d[i].sqrt()
        col = col.masked_fill(chosen, 0.0)
        L[:, j] = col
        d = d - col.square()
        chosen[i] = True
        order.append(i)
    idx = torch.tensor(order, dtype=torch.long, device=A.device)
    return idx, L[:, : len(order)]


def compact_wy(reflectors: Tensor, tau: Tensor) -> tuple[Tensor, Tensor]:
    r"""Compact WY form ``H_1 ... H_k = I - Y T Y^T`` of Householder reflections.

    ``H_i = I - tau_i y_i y_i^T`` with ``y_i`` the unit lower-trapezoidal columns of
    ``torch.geqrf``'s output; ``T`` is the ``k x k`` upper-triangular factor of
    LAPACK's ``larft`` (forward, column-wise): ``T_ii = tau_i``, ``T[:i, i] = -tau_i
    T[:i, :i] Y[:, :i]^T y_i``. ``O(r k^2)``.

    Args:
        reflectors: ``r x k`` output of ``torch.geqrf`` (``k <= r``).
        tau: ``k`` scalar factors of ``torch.geqrf``.

    Returns:
        ``(Y, T)`` of shapes ``r x k`` and ``k x k``.
    """
    r, k = reflectors.shape
    Y = reflectors.tril(-1) + torch.eye(
        r, k, dtype=reflectors.dtype, device=reflectors.device
    )
    T = reflectors.new_zeros(k, k)
    G = Y.mT @ Y
    for i in range(k):
        T[i, i] = tau[i]
        if i:
            T[:i, i] = -tau[i] * (T[:i, :i] @ G[:i, i])
    return Y, T


class InsertionPlan(NamedTuple):
    r"""What :meth:`IncrementalNystrom.apply_insertion` will do.

    Attributes:
        points: ``k`` point indices that become pivots, in pivot order.
        coords: ``r x k`` their current coordinates ``L_C`` (``Zt[:, points]``).
        chol: ``k x k`` lower-triangular ``R``, ``R R^T = K_CC - L_C^T L_C``.
        chol_inv: ``k x k`` its inverse ``R^{-1}``.
        in_span: Point indices that become non-pivot members (numerically in the
            span: duplicates, collinear points).
    """

    points: Tensor
    coords: Tensor
    chol: Tensor
    chol_inv: Tensor
    in_span: Tensor

    @property
    def num_new(self) -> int:
        """Number ``k`` of new coordinates."""
        return self.points.numel()


class RemovalPlan(NamedTuple):
    r"""What :meth:`IncrementalNystrom.apply_removal` will do.

    Attributes:
        members: All member indices to remove (pivots and non-pivots).
        positions: ``k`` positions, in the pivot order, of the pivots removed.
        reflectors: ``r x k`` matrix ``Y`` of ``Q = I - Y T Y^T``.
        factor: ``k x k`` upper-triangular ``T``.
    """

    members: Tensor
    positions: Tensor
    reflectors: Tensor
    factor: Tensor

    @property
    def num_dropped(self) -> int:
        """Number ``k`` of coordinates removed."""
        return self.positions.numel()

    def rotate(self, A: Tensor) -> Tensor:
        r"""``Q^T A`` for an ``r x w`` matrix ``A`` (new coordinates, last ``k`` rows
        are the dropped directions), ``O(r k w)``."""
        Y, T = self.reflectors, self.factor
        if Y.shape[-1] == 0:
            return A
        return A - Y @ (T.mT @ (Y.mT @ A))

    def dropped_basis(self) -> Tensor:
        r"""``Q[:, r-k:]`` (``r x k``): orthonormal basis, in the OLD coordinates, of
        the directions that are removed."""
        Y, T = self.reflectors, self.factor
        r, k = Y.shape
        eye = torch.eye(r, dtype=Y.dtype, device=Y.device)[:, r - k :]
        return eye - Y @ (T @ Y[r - k :].mT)

    def kept_basis(self) -> Tensor:
        r"""``Q[:, :r-k]`` (``r x (r-k)``): orthonormal basis, in the OLD coordinates,
        of the kept directions; ``z_new(x) = Q[:, :r-k]^T z_old(x)``."""
        Y, T = self.reflectors, self.factor
        r, k = Y.shape
        eye = torch.eye(r, dtype=Y.dtype, device=Y.device)[:, : r - k]
        return eye - Y @ (T @ Y[: r - k].mT)


class IncrementalNystrom:
    r"""Nyström coordinates ``Zt`` (``r x n``) of ``n`` fixed points, kept up to date
    while dictionary points are inserted and removed (see the module docstring).

    Typical use, for a caller without dependent state::

        emb = IncrementalNystrom(X, kernel, kdiag)
        emb.reset(S)                       # O(n m (d + r))
        emb.update(add=new, remove=gone)   # O(n r (k_add + k_removed) + n d k_add)
        Z = emb.Z                          # n x r view

    A caller that keeps quantities of all ``n`` points (variances, means) plans
    first (``plan_removal``, ``plan_insertion(after=removal)``,
    ``new_coordinates``), computes its probes, then calls ``apply(removal,
    insertion, probes)``.

    Args:
        X: ``n x d`` points (the rows whose coordinates are kept).
        kernel: ``k(X1, X2)`` returning a dense ``n1 x n2`` tensor; it is called with
            at most ``n x k`` (new columns) or ``m x m`` (a reset) blocks.
        kdiag: ``n`` prior variances ``k(x, x)``.
        rtol: Relative Schur residual below which a point counts as in the span
            (default :data:`DEFAULT_RTOL` in float64, ``1e3 eps`` in lower
            precision).
        capacity: Initial number of coordinate rows allocated (grows by 50 %).
    """

    def __init__(
        self,
        X: Tensor,
        kernel: KernelFn,
        kdiag: Tensor,
        *,
        rtol: float | None = None,
        capacity: int = 64,
    ) -> None:
        if X.dim() != 2 or X.shape[0] == 0:
            raise ValueError(
                f"X must be a non-empty n x d tensor, got shape {tuple(X.shape)}."
            )
        if not X.is_floating_point():
            raise ValueError(f"X must be floating point, got {X.dtype}.")
        if rtol is None:
            rtol = max(DEFAULT_RTOL, 1e3 * torch.finfo(X.dtype).eps)
        if not 0 < rtol < 1:
            raise ValueError(f"rtol must lie in (0, 1), got {rtol}.")
        n = X.shape[0]
        if kdiag.shape != (n,):
            raise ValueError(f"kdiag must have shape ({n},), got {tuple(kdiag.shape)}.")
        self.X, self.kernel, self.rtol = X, kernel, float(rtol)
        self.kdiag = kdiag.to(X)
        self._Zt = X.new_empty(max(int(capacity), 1), n)
        self._rank = 0
        self._N = X.new_empty(0, 0)
        self._pivots = torch.empty(0, dtype=torch.long, device=X.device)
        self._members = torch.empty(0, dtype=torch.long, device=X.device)
        self._residual = self.kdiag.clone()
        self.num_insertions = 0
        self.num_removals = 0

    # ----------------------------------------------------------------- accessors

    @property
    def num_points(self) -> int:
        """Number ``n`` of points."""
        return self.X.shape[0]

    @property
    def rank(self) -> int:
        """Embedding dimension ``r`` (number of pivots)."""
        return self._rank

    @property
    def Zt(self) -> Tensor:
        r"""``r x n`` coordinates (a contiguous view of the internal buffer)."""
        return self._Zt[: self._rank]

    @property
    def Z(self) -> Tensor:
        r"""``n x r`` embeddings ``z(x_i)`` (a transposed view of :attr:`Zt`)."""
        return self.Zt.mT

    @property
    def residual(self) -> Tensor:
        r"""``n`` Nyström residuals ``k(x, x) - ||z(x)||^2`` (not clamped)."""
        return self._residual

    @property
    def pivots(self) -> Tensor:
        """``r`` pivot point indices, in the order of the columns of :attr:`N`."""
        return self._pivots

    @property
    def members(self) -> Tensor:
        """Sorted indices of all dictionary members (pivots and non-pivots)."""
        return self._members

    @property
    def nonpivots(self) -> Tensor:
        """Sorted indices of the members that are not pivots."""
        return self._members[~torch.isin(self._members, self._pivots)]

    @property
    def N(self) -> Tensor:
        r"""``r x r`` inverse of ``M = Zt[:, pivots]^T`` (materialised on demand).

        Insertions only append pivots, and the block of ``M`` of the ``p`` pivots
        appended since the last materialisation, on their own ``p`` coordinates,
        is lower triangular (a pivot has no component along later directions).
        So ``N = [[N_0, 0], [-T^{-1} L^T N_0, T^{-1}]]`` with ``T`` that block and
        ``L^T`` their coordinates on the first ``r_0``: one triangular solve and
        one product, ``O(p r^2)``, done only when a removal or :meth:`drift`
        needs ``N`` (never, in a run without removals).
        """
        r0, r = self._N.shape[0], self._rank
        if r0 < r:
            Mp = self._Zt[:r, self._pivots[r0:]].mT  # p x r
            T_inv = torch.linalg.solve_triangular(
                Mp[:, r0:].tril(),
                torch.eye(r - r0, dtype=Mp.dtype, device=Mp.device),
                upper=False,
            )
            N = Mp.new_zeros(r, r)
            N[:r0, :r0] = self._N
            N[r0:, r0:] = T_inv
            N[r0:, :r0] = -T_inv @ (Mp[:, :r0] @ self._N)
            self._N = N
        return self._N

    def coordinates(self, idx: Tensor, after: RemovalPlan | None = None) -> Tensor:
        r"""Coordinates of the points ``idx``: ``Zt[:, idx]`` (``r x len(idx)``), or,
        with ``after``, what they will be once that removal is applied."""
        Z_idx = self._Zt[: self._rank].index_select(1, idx)  # faster than [:, idx]
        if after is None or after.num_dropped == 0:
            return Z_idx
        return after.rotate(Z_idx)[: self._rank - after.num_dropped]

    def project(self, probes: Tensor) -> Tensor:
        r"""``P^T Zt`` (``w x n``) for an ``r x w`` matrix ``P``, ``O(n r w)``."""
        return _project(probes, self.Zt)

    # ------------------------------------------------------------------ removal

    def plan_removal(self, points: Tensor) -> RemovalPlan:
        r"""Plan the removal of dictionary members ``points`` (no state change).

        ``O(r^2 k)`` for ``k`` removed pivots.

        Args:
            points: Member indices (repetitions ignored).

        Returns:
            A :class:`RemovalPlan`.
        """
        points = torch.unique(points.to(device=self.X.device, dtype=torch.long))
        if not bool(torch.isin(points, self._members).all()):
            raise ValueError("can only remove current dictionary members.")
        positions = torch.isin(self._pivots, points).nonzero().squeeze(-1)
        r, k = self._rank, positions.numel()
        if k == 0:
            empty = self.X.new_empty(r, 0)
            return RemovalPlan(points, positions, empty, self.X.new_empty(0, 0))
        G = self.N[:, positions].flip(0)
        a, tau = torch.geqrf(G)
        Y, T = compact_wy(a, tau)
        return RemovalPlan(points, positions, Y.flip(0), T)

    # ---------------------------------------------------------------- insertion

    def plan_insertion(
        self, points: Tensor | None = None, after: RemovalPlan | None = None
    ) -> InsertionPlan:
        r"""Plan the insertion of ``points`` (no state change).

        The candidates are ``points`` that are not pivots yet plus the current
        non-pivot members (re-tried, since a pivot removal may have taken them out
        of the span). With ``after``, the plan is for the state once that removal
        is applied (both are then applied together by :meth:`apply`).
        ``O(c^2 (d + r) + c r^2)`` for ``c`` candidates.

        Args:
            points: Point indices to insert (repetitions and members allowed).
            after: Optional removal planned on the current state.

        Returns:
            An :class:`InsertionPlan`.
        """
        dev = self.X.device
        if points is None:
            points = torch.empty(0, dtype=torch.long, device=dev)
        points = points.to(device=dev, dtype=torch.long).reshape(-1)
        if points.numel() and (points.min() < 0 or points.max() >= self.num_points):
            raise ValueError(f"point indices must lie in [0, {self.num_points}).")
        pivots, nonpivots = self._pivots, self.nonpivots
        if after is not None:
            keep = torch.ones(pivots.numel(), dtype=torch.bool, device=dev)
            keep[after.positions] = False
            pivots = pivots[keep]
            nonpivots = nonpivots[~torch.isin(nonpivots, after.members)]
        cand = torch.unique(torch.cat([points, nonpivots]))
        cand = cand[~torch.isin(cand, pivots)]
        r = pivots.numel()
        if cand.numel() == 0:
            e = self.X.new_empty(0, 0)
            return InsertionPlan(cand, self.X.new_empty(r, 0), e, e, cand)
        Lc = self.coordinates(cand, after)
        Xc = self.X[cand]
        S = self.kernel(Xc, Xc) - Lc.mT @ Lc
        S = 0.5 * (S + S.mT)
        order, L = pivoted_cholesky(S, self.rtol * self.kdiag[cand])
        R = L[order]
        eye = torch.eye(R.shape[0], dtype=R.dtype, device=dev)
        R_inv = torch.linalg.solve_triangular(R, eye, upper=False)
        in_span = torch.ones(cand.numel(), dtype=torch.bool, device=dev)
        in_span[order] = False
        return InsertionPlan(cand[order], Lc[:, order], R, R_inv, cand[in_span])

    def new_coordinates(
        self,
        plan: InsertionPlan,
        idx: Tensor,
        after: RemovalPlan | None = None,
        coords: Tensor | None = None,
    ) -> Tensor:
        r"""``k x len(idx)`` coordinates that ``plan`` will give the points ``idx``,
        ``w(x) = R^{-1} (k_C(x) - L_C^T z(x))``, ``O(len(idx) k (d + r))``.

        ``coords``, if given, must be ``self.coordinates(idx, after)``."""
        if plan.num_new == 0:
            return self.X.new_empty(0, idx.numel())
        if coords is None:
            coords = self.coordinates(idx, after)
        K = self.kernel(self.X[plan.points], self.X[idx])
        return plan.chol_inv @ (K - plan.coords.mT @ coords)

    # ------------------------------------------------------------------ applying

    def apply(
        self,
        removal: RemovalPlan | None = None,
        insertion: InsertionPlan | None = None,
        probes: Tensor | None = None,
    ) -> Tensor | None:
        r"""Apply a removal, then an insertion planned after it, in one pass.

        One product of ``[Y, Q_k L_C, P]^T`` (width ``k_out + k_in + w``) with the
        old ``Zt``, then the rank-``k_out`` rotation ``Zt <- (Q^T Zt)[:r-k_out]`` and
        the ``k_in`` new rows ``R^{-1} (K_{C X} - L_C^T Zt)``:
        ``O(n r (k_out + k_in + w) + n d k_in)``.

        Args:
            removal: From :meth:`plan_removal` on the current state, or ``None``.
            insertion: From :meth:`plan_insertion` on the current state (with
                ``after=removal``), or ``None``.
            probes: Optional ``r x w`` matrix ``P`` in the CURRENT coordinates.

        Returns:
            ``P^T Zt`` (``w x n``) with the coordinates before the change, or
            ``None`` without probes.
        """
        r = self._rank
        k_out = 0 if removal is None else removal.num_dropped
        k_in = 0 if insertion is None else insertion.num_new
        if removal is not None and removal.reflectors.shape[0] != r:
            raise ValueError("the removal plan does not match the current rank.")
        if insertion is not None and insertion.coords.shape[0] != r - k_out:
            raise ValueError("the insertion plan does not match the rank after it.")
        cols = []
        if k_out:
            cols.append(removal.reflectors)
        if k_in:
            Lc = insertion.coords
            cols.append(removal.kept_basis() @ Lc if k_out else Lc)
        if probes is not None:
            cols.append(probes)
        P = _project(torch.cat(cols, dim=1), self._Zt[:r]) if cols and r else None
        if P is None and cols:
            P = self.X.new_zeros(sum(c.shape[-1] for c in cols), self.num_points)
        if k_out:
            self._drop(removal, P[:k_out])
        if removal is not None:
            self._members = self._members[~torch.isin(self._members, removal.members)]
            self.num_removals += removal.members.numel()
        if insertion is not None:
            if k_in:
                self._add(insertion, P[k_out : k_out + k_in])
            new = torch.cat([insertion.points, insertion.in_span])
            self._members = torch.unique(torch.cat([self._members, new]))
            self.num_insertions += k_in
        return None if probes is None else P[k_out + k_in :]

    def _drop(self, plan: RemovalPlan, YZ: Tensor) -> None:
        r, k = self._rank, plan.num_dropped
        Z = self._Zt[:r]
        _sub_product(Z, plan.reflectors, plan.factor.mT @ YZ)
        self._residual += Z[r - k :].square().sum(0)
        keep = torch.ones(r, dtype=torch.bool, device=self.X.device)
        keep[plan.positions] = False
        self._N = plan.rotate(self.N)[: r - k][:, keep]
        self._pivots = self._pivots[keep]
        self._rank = r - k

    def _add(self, plan: InsertionPlan, LZ: Tensor) -> None:
        r, k = self._rank, plan.num_new
        self._reserve(r + k)
        K = self.kernel(self.X[plan.points], self.X)
        W = self._Zt[r : r + k]
        torch.matmul(plan.chol_inv, K - LZ, out=W)
        self._residual -= W.square().sum(0)
        self._pivots = torch.cat([self._pivots, plan.points])
        self._rank = r + k

    def apply_removal(
        self, plan: RemovalPlan, probes: Tensor | None = None
    ) -> Tensor | None:
        r""":meth:`apply` with a removal only."""
        return self.apply(plan, None, probes)

    def apply_insertion(
        self, plan: InsertionPlan, probes: Tensor | None = None
    ) -> Tensor | None:
        r""":meth:`apply` with an insertion only (planned without ``after``)."""
        return self.apply(None, plan, probes)

    def _reserve(self, rows: int) -> None:
        cap = self._Zt.shape[0]
        if rows <= cap:
            return
        new_cap = max(rows, cap + cap // 2)
        buf = self._Zt.new_empty(new_cap, self.num_points)
        buf[: self._rank] = self._Zt[: self._rank]
        self._Zt = buf

    # ------------------------------------------------------------- convenience

    def update(self, add: Tensor | None = None, remove: Tensor | None = None) -> None:
        r"""Remove the members ``remove``, then insert ``add`` (one :meth:`apply`)."""
        removal = None
        if remove is not None and remove.numel():
            removal = self.plan_removal(remove)
        self.apply(removal, self.plan_insertion(add, after=removal))

    def reset(self, members: Tensor) -> None:
        r"""Recompute everything for the dictionary ``members`` from the kernel.

        A pivoted Cholesky factorisation of ``K_SS`` (the same rank rule as an
        insertion) and ``Zt = R^{-1} K_{P X}``: ``O(m^2 d + m r^2 + n r (d + r))``.
        Also re-orthonormalises after rounding drift.
        """
        self._rank = 0
        self._N = self.X.new_empty(0, 0)
        self._pivots = self._pivots[:0]
        self._members = self._members[:0]
        self._residual = self.kdiag.clone()
        self.apply(None, self.plan_insertion(members))

    def drift(self, kernel_check: bool = True) -> float:
        r"""Rounding drift of the state; of order ``eps`` right after :meth:`reset`.

        The largest of: ``||M N x - x||_inf / (||M||_inf ||N||_inf)`` for a fixed
        probe ``x`` (``||x||_inf = 1``; the normalisation by the condition number
        makes a freshly computed inverse score ``O(eps)``), the pivots' relative
        residuals ``|residual(p)| / k(p, p)``, and, with ``kernel_check``,
        ``||(K_PP - M M^T) x||_inf / (r max k(p, p))`` (orthonormality of the basis
        against the kernel; evaluates ``K_PP``). ``O(r^2)``, plus ``O(r^2 d)`` for
        the kernel check.
        """
        r = self._rank
        if r == 0:
            return 0.0
        x = torch.cos(torch.arange(r, dtype=self.X.dtype, device=self.X.device))
        piv = self._pivots
        M = self._Zt[:r, piv].mT
        N = self.N
        cond = M.abs().sum(1).max() * N.abs().sum(1).max()
        errs = [
            (M @ (N @ x) - x).abs().max() / cond,
            (self._residual[piv].abs() / self.kdiag[piv]).max(),
        ]
        if kernel_check:
            Xp = self.X[piv]
            K = self.kernel(Xp, Xp)
            scale = r * self.kdiag[piv].max()
            errs.append((K @ x - M @ (M.mT @ x)).abs().max() / scale)
        return float(torch.stack(errs).max())
