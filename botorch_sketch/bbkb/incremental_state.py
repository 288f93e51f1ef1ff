r"""BBKB's batch-start state updated in place at a resparsification.

:class:`IncrementalState` keeps the embeddings ``Z`` (``A x r``), ``V_fb``, its
inverse, the quadratic forms ``z(a)^T V_fb^{-1} z(a)`` and the residuals of all
arms, and brings them to the next dictionary and pull counts by the changes
only (new pulls, points leaving and entering the dictionary,
:mod:`botorch_sketch.incremental_nystrom`): ``O(A r (p + k_out + k_in))``
instead of the ``O(A m r)`` of
:func:`~botorch_sketch.bbkb.rebuilt_state.rebuild`; its docstring says when it
falls back to a full recomputation. The quantities and units are those of
:class:`~botorch_sketch.bbkb.batch_state.BatchState`.
"""

from __future__ import annotations

import logging

import torch
from gpytorch.kernels import Kernel
from torch import Tensor

from botorch_sketch.bbkb.batch_state import (
    DEFAULT_CHUNK_SIZE,
    BatchState,
    checked_cholesky,
    row_chunks,
    solve_lower,
    symmetrize,
    validate_state_inputs,
)
from botorch_sketch.bbkb.dense_kernel import DenseKernel, as_dense_kernel
from botorch_sketch.incremental_nystrom import IncrementalNystrom

logger = logging.getLogger(__name__)

__all__ = ["CHECK_OVERHEAD", "CHECK_WORK_RATIO", "IncrementalState"]

#: :class:`IncrementalState` checks its accuracy once its incremental work since
#: the last check exceeds this multiple of the check's cost, ``r^3 + 2 |P| r^2``
#: flops plus :data:`CHECK_OVERHEAD` for its fixed cost.
CHECK_WORK_RATIO = 64

#: Fixed cost of a check in flop equivalents (about a millisecond of small ops).
CHECK_OVERHEAD = 2e7


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
      ``drift_tol``, every ``reorthonormalize_every`` dictionary changes
      (insertions + removals) as a periodic re-orthonormalisation, and when a
      factorisation of the incremental path fails: its Schur complements are
      positive definite in exact arithmetic, but rounding can make one
      indefinite (float32 with a small ``lam``); the half-applied update is
      then dropped (``stats["fallback"]``).

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
        S_idx = validate_state_inputs(arms, S_idx, counts, reward_sums, lam)
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
        self.stats = {
            "incremental": 0, "refresh": 0, "reset": 0, "checks": 0, "fallback": 0
        }  # fmt: skip
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
            self._L = torch.linalg.cholesky(symmetrize(self.V))
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
        S_idx = validate_state_inputs(self.arms, S_idx, counts, reward_sums, self.lam)
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
            try:
                self._incremental(pulled, dn[pulled], gone, new, counts, reward_sums)
            except torch.linalg.LinAlgError:
                # A Schur complement (positive definite in exact arithmetic) lost
                # definiteness to rounding: the half-applied update is dropped and
                # everything recomputed from the kernel.
                logger.info(
                    "incremental resparsification not positive definite in %s "
                    "(lam %.3g): state recomputed.",
                    self.arms.dtype,
                    self.lam,
                )
                self.stats["fallback"] += 1
                self._reset(S_idx, counts, reward_sums)
                return self
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
            Ls = torch.linalg.cholesky(
                symmetrize(Zb.mT @ C + torch.diag(dn.reciprocal()))
            )
            E = solve_lower(Ls, C.mT).mT
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
            L22 = torch.linalg.cholesky(symmetrize(Qd.mT @ VQd))
            E = solve_lower(L22, VQd.mT).mT
            probes.append(E)
            coefs.append(-(E.mT @ self._b))
            Vi = rplan.rotate(rplan.rotate(self.Vinv - E @ E.mT).mT)
            self._Vinv.set(symmetrize(Vi[:keep, :keep]))
            self._V.set(symmetrize(rplan.rotate(rplan.rotate(self.V).mT)[:keep, :keep]))
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
            Ls = torch.linalg.cholesky(symmetrize(Cc - B.mT @ U))
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
            q = q + solve_lower(Ls, D).square().sum(0)
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
        V = symmetrize((ZP * counts[P]) @ ZP.mT) + self.lam * eye
        L = checked_cholesky(V, self.lam)
        self._V, self._Vinv = _Deferred(V), _Deferred(torch.cholesky_inverse(L))
        self._b = ZP @ reward_sums[P]
        q = self._zeros()
        if r:
            for lo, hi in row_chunks(self.num_arms, self.chunk_size):
                q[lo:hi] = solve_lower(L, Zt[:, lo:hi]).square().sum(0)
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
        V = symmetrize((ZP * self.counts[P]) @ ZP.mT) + self.lam * eye
        L = torch.linalg.cholesky(V)
        Zi = Zt[:, idx]
        s2 = self.resid[idx] + solve_lower(L, Zi).square().sum(0)
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
