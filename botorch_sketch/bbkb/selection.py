r"""Batch selection of BBKB over a finite candidate set, with exact lazy UCBs.

Within a batch the dictionary, the embedding ``Z``, the mean ``mu~_fb`` and
``alpha~_fb`` are frozen; each selected point is "hallucinated" into
``V_t = V_fb + sum_{j in batch} z_j z_j^T`` (BBKB Alg. 1 L7). The variances
``sigma~^2_t(a) = resid(a) + z(a)^T V_t^{-1} z(a)`` can only decrease, so cached UCBs
``u(a) = mu(a) + alpha sqrt(s2(a))`` are upper bounds and lazy evaluation is exact
(App. A.3, BBKB spec Sec. 4.3).

Two exact selectors (same choices up to rounding; :func:`select_batch` picks):

- :class:`PooledUCBSelector` (default, fastest): exact variances for a pool of the
  arms with the largest batch-start UCBs, all downdated at every step by one
  vectorised Sherman-Morrison product; the pool grows when an arm outside it
  could win. ``O(K r + r^2)`` per step in about a dozen tensor operations.
- :class:`LazyUCBSelector` (the paper's lazy rule, App. A.3, Alg. 1 L8): a
  Cholesky factor ``L_t`` of ``V_t`` updated by
  :func:`~botorch_sketch.linalg.cholesky_rank_one_update` (``O(r^2)`` per step),
  plus the Sherman-Morrison history ``h_j = V_{j-1}^{-1} z_j / sqrt(1 + z_j^T
  V_{j-1}^{-1} z_j)`` of the batch, so that ``V_t^{-1} = V_s^{-1} - sum_{s <= j < t}
  h_j h_j^T``. Every arm remembers the step ``tau(a)`` at which its cached
  variance was exact; refreshing an arm that missed ``k = t - tau(a)`` steps costs
  ``O(r min(k, r))`` (history if ``k <= r / 2``, else a triangular solve).
  After hallucinating ``x``, its UCB is recomputed, then every arm whose cached
  UCB is ``>= u_new(x)``; arms left alone have cached, hence exact, UCBs
  ``< u_new(x)``, so the next ``argmax`` (ties to the lowest index) equals the
  brute-force argmax. With ``allow_repeats=False`` the selected arm is masked out
  and the role of ``x`` is played by the argmax of the cached UCBs (refreshed
  first), which keeps the same guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from scipy.linalg import blas as _scipy_blas
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.bbkb.batch_state import checked_cholesky
from botorch_sketch.bbkb.state import BatchState
from botorch_sketch.bbkb.stopping import StoppingRule

__all__ = [
    "DEFAULT_POOL_SIZE",
    "LazyUCBSelector",
    "PooledUCBSelector",
    "StepRecord",
    "select_batch",
]

#: Initial pool of :class:`PooledUCBSelector` (doubled on demand).
DEFAULT_POOL_SIZE = 256

#: Memory cap of the pool's ``K x r`` embeddings in :class:`PooledUCBSelector`
#: (256 MB: every pool of the Cadata library, ``A = 20,640``, fits below it).
DEFAULT_MAX_POOL_BYTES = 2**28


class StepRecord(NamedTuple):
    r"""What happened at one selection step (for a recorder callback).

    Attributes:
        position: 0-based position in the batch.
        arm: Selected arm.
        ucb: Its UCB ``mu + alpha sigma~_t`` at selection (exact).
        variance: Its hallucinated variance ``sigma~^2_t`` at selection.
        bound: The stopping rule's bound after adding the arm.
        stop: Whether the batch ends with this arm.
        n_refreshed: Arms recomputed after the previous step (lazy set size).
    """

    position: int
    arm: int
    ucb: float
    variance: float
    bound: float
    stop: bool
    n_refreshed: int


class LazyUCBSelector:
    r"""Maintains exact-on-demand UCBs while points are hallucinated in one batch.

    Args:
        state: Frozen batch-start state.
        alpha: UCB multiplier ``alpha~ >= 0`` (RLS units, see
            :mod:`botorch_sketch.bbkb.schedules`).
        allow_repeats: If ``False``, selected arms are masked out for the rest of
            the batch (the paper allows repeats).
        lazy: If ``False``, every arm is refreshed at every step (eager
            Sherman-Morrison downdate, ``O(A r)`` per step); same selections.
    """

    def __init__(
        self,
        state: BatchState,
        alpha: float,
        *,
        allow_repeats: bool = True,
        lazy: bool = True,
    ) -> None:
        if state.num_arms == 0:
            raise ValueError("the candidate set is empty.")
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha must be finite and non-negative, got {alpha}.")
        self.state = state
        self.alpha = float(alpha)
        self.allow_repeats = allow_repeats
        self.lazy = lazy
        self._Z, self._mu, self._resid = state.Z, state.mu, state.resid
        r = state.rank
        self.s2 = state.s2_0.clone()
        self.u = self._mu + self.alpha * self.s2.sqrt()
        self.tau = torch.zeros(state.num_arms, dtype=torch.long, device=self.s2.device)
        self.t = 0
        self.L = state.L.clone()
        self._H = self._Z.new_empty(64, r)
        self._hist_max = max(1, r // 2)
        self._available = state.num_arms
        self.n_refreshed = 0
        self.total_refreshed = 0

    @property
    def exhausted(self) -> bool:
        """Whether every arm is masked out (only with ``allow_repeats=False``)."""
        return self._available == 0

    def argmax(self) -> int:
        """Exact UCB maximiser (lowest index on ties) among the available arms."""
        if self.exhausted:
            raise RuntimeError("no available arm left in this batch.")
        self._last = int(torch.argmax(self.u))
        return self._last

    def current(self) -> tuple[float, float]:
        """``(ucb, variance)`` of the arm returned by the last :meth:`argmax`."""
        return float(self.u[self._last]), float(self.s2[self._last])

    def variances(self) -> Tensor:
        r"""Exact current variances ``sigma~^2_t`` of all arms (refreshes stale ones).

        Masked arms are refreshed too (their UCB stays ``-inf``). ``O(A r min(k, r))``;
        for diagnostics and tests, not needed by the selection.
        """
        stale = (self.tau < self.t).nonzero().squeeze(-1)
        if stale.numel():
            keep = ~torch.isfinite(self.u[stale])
            self._refresh(stale)
            self.u[stale[keep]] = -math.inf
        return self.s2

    def ucbs(self) -> Tensor:
        """Cached UCBs (upper bounds; exact for arms refreshed at the current step)."""
        return self.u

    def hallucinate(self, i: int) -> None:
        r"""Add arm ``i`` to ``V_t`` without feedback and restore the lazy invariant.

        ``O(r^2)`` for the factor plus ``O(r min(k, r))`` per refreshed arm.
        """
        z = self._Z[i]
        c = torch.cholesky_solve(z.unsqueeze(-1), self.L).squeeze(-1)
        den = 1.0 + torch.dot(z, c)
        if self.t >= self._H.shape[0]:
            self._H = torch.cat([self._H, torch.empty_like(self._H)])
        self._H[self.t] = c / den.sqrt()
        self.L = linalg.cholesky_rank_one_update(self.L, z)
        self.t += 1
        if not self.allow_repeats:
            self.u[i] = -math.inf
            self._available -= 1
            if self.exhausted:
                self.n_refreshed = 0
                return
        if not self.lazy:
            idx = torch.isfinite(self.u).nonzero().squeeze(-1)
            self._refresh(idx)
            self.n_refreshed = idx.numel()
        else:
            seed = i if self.allow_repeats else int(torch.argmax(self.u))
            seed_idx = torch.tensor([seed], device=self.u.device)
            self._refresh(seed_idx)
            idx = (self.u >= self.u[seed]).nonzero().squeeze(-1)
            idx = idx[self.tau[idx] < self.t]
            if idx.numel():
                self._refresh(idx)
            self.n_refreshed = idx.numel() + 1
        self.total_refreshed += self.n_refreshed

    def _refresh(self, idx: Tensor) -> None:
        k = self.t - self.tau[idx]
        use_hist = k <= self._hist_max
        if bool(use_hist.all()):
            self._refresh_hist(idx, k)
        else:
            self._refresh_hist(idx[use_hist], k[use_hist])
            self._refresh_solve(idx[~use_hist])
        self.tau[idx] = self.t
        self.u[idx] = self._mu[idx] + self.alpha * self.s2[idx].sqrt()

    def _refresh_hist(self, idx: Tensor, k: Tensor) -> None:
        if idx.numel() == 0:
            return
        kk = int(k.max())
        if kk == 0:
            return
        P = self._Z[idx] @ self._H[self.t - kk : self.t].mT  # n x kk
        if kk > 1:
            P = P * (torch.arange(kk, device=P.device) >= (kk - k).unsqueeze(-1))
        s2 = self.s2[idx] - P.pow(2).sum(-1)
        self.s2[idx] = torch.maximum(s2, self._resid[idx])

    def _refresh_solve(self, idx: Tensor) -> None:
        if idx.numel() == 0:
            return
        Wt = torch.linalg.solve_triangular(self.L, self._Z[idx].mT, upper=False)
        self.s2[idx] = self._resid[idx] + Wt.pow(2).sum(0)


class PooledUCBSelector:
    r"""Exact UCB argmax within a batch, on a pool of the best batch-start UCBs.

    Within a batch every UCB can only decrease (frozen mean, non-increasing
    variances; BBKB App. A.3), so the batch-start UCBs ``u_0(a) = mu(a) + alpha
    sqrt(s2_0(a))`` bound every later UCB. The selector keeps exact current
    variances for a pool ``P`` (the ``K`` arms with the largest ``u_0``, kept in
    increasing index order) and updates all of them eagerly after each
    hallucinated point with one vectorised Sherman-Morrison downdate (BBKB spec
    Sec. 4.2),

        s2(a) <- max(s2(a) - (z(a)^T c)^2 / (1 + z^T c), resid(a)),    c = V_t^{-1} z,

    ``O(K r)`` per step in a handful of tensor operations. The argmax over ``P``
    is the exact argmax over all arms as long as it is strictly larger than the
    largest ``u_0`` outside ``P`` (ties go to the lowest index, as in the lazy
    rule); otherwise the pool is doubled, and the new members get their exact
    current variances from the batch's Sherman-Morrison history, ``s2_t(a) =
    s2_0(a) - sum_j (h_j^T z(a))^2``. Unlike the lazy rule of
    :class:`LazyUCBSelector`, nothing is decided per arm in Python, which is what
    costs time when batches hold thousands of points.

    ``c = V_t^{-1} z`` is one matrix-vector product with ``V_t^{-1}``, kept by
    rank-one downdates ``V_{t+1}^{-1} = V_t^{-1} - h_t h_t^T``, ``h_t = c /
    sqrt(1 + z^T c)``. To stop rounding errors from accumulating over long
    batches (BBKB spec Sec. 4.2), ``V_t = V_s + sum_{s <= j < t} z_j z_j^T`` is
    refactorised (Cholesky, then its inverse) every ``r`` steps, so a step costs
    ``O(r^2 + K r)`` amortised.

    **Bounded memory.** The pool holds ``K x r`` embeddings. A pool that would
    outgrow ``max_pool_bytes`` (``A = 10^6`` candidates, say) is instead re-made
    from the *current* UCBs: one chunked sweep over all arms computes ``u_t(a)``
    from the history (``O(A r t)`` time, ``O(chunk r)`` memory), the pool becomes
    the ``K_max`` arms with the largest ``u_t`` and the bound the next largest,
    which is valid because every later UCB is at most ``u_t`` (same argument as
    for ``u_0``). Right after such a sweep the pool's argmax is the argmax over
    all arms up to rounding (ties at the bound are broken within the pool).

    Args:
        state: Frozen batch-start state.
        alpha: UCB multiplier ``alpha~ >= 0``.
        allow_repeats: If ``False``, selected arms are masked out for the rest of
            the batch.
        pool_size: Initial pool size ``K`` (``None``: all arms, i.e. eager
            downdates of every arm, within ``max_pool_bytes``).
        max_pool_bytes: Memory cap of the pool's embeddings; the pool never
            exceeds ``max(pool_size, max_pool_bytes / (itemsize r))`` arms.
        excluded: Optional ``A`` boolean mask of arms that are never selected
            (e.g. rows already observed when repeats are not wanted, or points
            that are not in a user's library).
    """

    def __init__(
        self,
        state: BatchState,
        alpha: float,
        *,
        allow_repeats: bool = True,
        pool_size: int | None = DEFAULT_POOL_SIZE,
        max_pool_bytes: int = DEFAULT_MAX_POOL_BYTES,
        excluded: Tensor | None = None,
    ) -> None:
        if state.num_arms == 0:
            raise ValueError("the candidate set is empty.")
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha must be finite and non-negative, got {alpha}.")
        if pool_size is not None and not (int(pool_size) == pool_size >= 1):
            raise ValueError(f"pool_size must be an integer >= 1, got {pool_size}.")
        if not (int(max_pool_bytes) == max_pool_bytes >= 1):
            raise ValueError(
                f"max_pool_bytes must be an integer >= 1, got {max_pool_bytes}."
            )
        self.state = state
        self.alpha = float(alpha)
        self.allow_repeats = allow_repeats
        A, r = state.num_arms, state.rank
        self._u0 = state.mu + self.alpha * state.s2_0.sqrt()
        self._masked = torch.zeros(A, dtype=torch.bool, device=self._u0.device)
        if excluded is not None:
            if excluded.shape != (A,) or excluded.dtype != torch.bool:
                raise ValueError(
                    f"excluded must be a boolean mask of shape ({A},), got "
                    f"{excluded.dtype} of shape {tuple(excluded.shape)}."
                )
            self._masked |= excluded.to(self._masked.device)
            self._u0 = self._u0.masked_fill(self._masked, -math.inf)
        self._order: Tensor | None = None  # arms by decreasing u_0 (lazily)
        self._K = 0
        self._P = self._u0.new_empty(0, dtype=torch.long)
        self._Z: Tensor | None = self._u0.new_empty(0, r)
        self._s2 = self._u0.new_empty(0)
        self._u = self._u0.new_empty(0)
        self._resid = self._u0.new_empty(0)
        self._mu = self._u0.new_empty(0)
        self._bound = math.inf
        self._H = self._u0.new_empty(16, r)  # Sherman-Morrison history
        self._Zb = self._u0.new_empty(16, r)  # hallucinated embeddings
        self.t = 0
        # V_s and V_t^{-1} are copied on the first hallucination only: a batch of
        # one point (BKB, large effective dimension) costs no O(r^2) work here.
        self._Vs: Tensor | None = None
        self._Vinv: Tensor | None = None
        self._s = 0  # step of the last refactorisation of V
        self._mask_P = torch.zeros(0, dtype=torch.bool, device=self._u0.device)
        self._available = A - int(self._masked.sum())
        self._j: int | None = None  # pool position of the last argmax
        self._current = (math.nan, math.nan)  # its (ucb, variance), off the CPU
        itemsize = self._u0.element_size() * max(r, 1)
        self._max_pool = max(int(max_pool_bytes) // itemsize, int(pool_size or 1))
        self._swept = False  # the pool was just re-made from the current UCBs
        # On the CPU the per-step work (a few ``r``- and ``K``-vectors) runs on
        # NumPy views of the same memory: same arithmetic, far less dispatch.
        self._np = _numpy_views_ok(self._u0)
        self._grow(A if pool_size is None else min(int(pool_size), A))
        self.n_refreshed = 0
        self.total_refreshed = 0

    @property
    def pool_size(self) -> int:
        """Current pool size ``K``."""
        return self._K

    @property
    def exhausted(self) -> bool:
        """Whether every arm is masked out (only with ``allow_repeats=False``)."""
        return self._available == 0

    def _downdated(self, idx: Tensor, Z: Tensor | None) -> Tensor:
        r"""``s2_0(a) - sum_j (h_j^T z(a))^2`` for the arms ``idx`` with embeddings
        ``Z`` (``None`` before the first hallucination), before the residual floor."""
        s2 = self.state.s2_0[idx]
        if Z is None or self.t == 0:
            return s2
        Hz = Z @ self._H[: self.t].mT
        return s2 - torch.linalg.vecdot(Hz, Hz)

    def _current_ucbs(self) -> Tensor:
        r"""``u_t(a)`` of every arm (masked arms ``-inf``), chunked, ``O(A r t)``."""
        u = self.state.mu + self.alpha * self.variances().sqrt()
        return u.masked_fill_(self._masked, -math.inf)

    def _grow(self, K: int) -> None:
        """Make the pool the ``K`` arms of largest ``u_0`` and set the bound.

        Above the memory cap, the ``K_max`` arms of largest current ``u_t``.
        """
        st, A = self.state, self.state.num_arms
        scores, self._swept = self._u0, False
        if K > self._max_pool and self._max_pool < A:
            K, scores, self._swept = self._max_pool, self._current_ucbs(), True
        if K >= A:
            K, new_P, self._bound = A, None, -math.inf
        else:
            top = torch.topk(scores, K + 1)
            new_P = top.indices[:K]
            self._bound = float(top.values[K])
        P = (
            torch.arange(A, device=self._u0.device)
            if new_P is None
            else torch.sort(new_P).values
        )
        # The pool's embeddings are gathered on the first hallucination only: a
        # batch of one point never needs them.
        Z = st.embed(P) if self.t > 0 else None
        resid = st.resid_at(P, Z)
        s2 = torch.maximum(self._downdated(P, Z), resid)
        mu = st.mu[P]
        u = mu + self.alpha * s2.sqrt()
        mask = self._masked[P]
        u.masked_fill_(mask, -math.inf)
        self._P, self._Z, self._s2, self._u, self._mask_P = P, Z, s2, u, mask
        self._resid, self._mu, self._K = resid, mu, K
        self._P_list: list[int] | None = None
        self._views()

    def _views(self) -> None:
        """NumPy views of the per-step tensors (CPU only; same memory)."""
        if not self._np:
            return
        self._u_np, self._s2_np = self._u.numpy(), self._s2.numpy()
        self._mu_np, self._resid_np = self._mu.numpy(), self._resid.numpy()
        self._mask_np = self._mask_P.numpy()
        self._Z_np = None if self._Z is None else self._Z.numpy()
        self._Vinv_np = None if self._Vinv is None else self._Vinv.numpy()
        self._H_np, self._Zb_np = self._H.numpy(), self._Zb.numpy()

    def _refactor(self) -> None:
        """``L_t`` from ``V_s + sum_{s <= j < t} z_j z_j^T``; ``V_t^{-1}`` from it."""
        Zs = self._Zb[self._s : self.t]
        V = torch.addmm(self._Vs, Zs.mT, Zs)
        self._Vs = 0.5 * (V + V.mT)
        self._Vinv = torch.cholesky_inverse(checked_cholesky(self._Vs, self.state.lam))
        self._s = self.t
        if self._np:
            self._Vinv_np = self._Vinv.numpy()

    def argmax(self) -> int:
        """Exact UCB maximiser (lowest index on ties) among the available arms."""
        if self.exhausted:
            raise RuntimeError("no available arm left in this batch.")
        while True:
            if self._np:
                j = int(self._u_np.argmax())
                uj = float(self._u_np[j])
            else:
                j, uj, s2j = _argmax_read(self._u, self._s2)
                self._current = (uj, s2j)
            if uj > self._bound or self._swept:
                self._j = j
                return self._arm(j)
            self._grow(2 * self._K)

    def _arm(self, j: int) -> int:
        if self._P_list is None:
            self._P_list = self._P.tolist()
        return self._P_list[j]

    def current(self) -> tuple[float, float]:
        """``(ucb, variance)`` of the arm returned by the last :meth:`argmax`."""
        if self._np:
            return float(self._u_np[self._j]), float(self._s2_np[self._j])
        return self._current

    def variances(self) -> Tensor:
        r"""Exact current variances ``sigma~^2_t`` of all arms, ``O(A r t)``.

        In row chunks of ``state.chunk_size`` (``O(chunk r)`` memory). The pool
        needs them when it outgrows its memory cap, tests and diagnostics always.
        """
        st = self.state
        s2 = torch.empty_like(st.s2_0)
        for idx in torch.arange(st.num_arms, device=s2.device).split(st.chunk_size):
            Z = st.embed(idx)
            s2[idx] = torch.maximum(self._downdated(idx, Z), st.resid_at(idx, Z))
        return s2

    def hallucinate(self, i: int) -> None:
        r"""Add arm ``i`` to ``V_t`` without feedback.

        ``i`` is usually the last :meth:`argmax` (and is then masked without
        repeats); any other arm (a pending evaluation, say) is hallucinated the
        same way but not masked. ``O(r^2 + K r)`` amortised.
        """
        j, self._j = self._j, None
        if j is not None and self._arm(j) != i:
            j = None
        if not 0 <= i < self.state.num_arms:
            raise ValueError(f"arm {i} is out of range [0, {self.state.num_arms}).")
        self._swept = False
        if self._Z is None:
            self._Z = self.state.embed(self._P)
            self._views()
        t = self.t
        if t >= self._H.shape[0]:
            self._H = torch.cat([self._H, torch.empty_like(self._H)])
            self._Zb = torch.cat([self._Zb, torch.empty_like(self._Zb)])
            self._views()
        if self._Vinv is None:
            self._Vs, self._Vinv = self.state.V, self.state.Vinv.clone()
            self._views()
        if j is not None:
            z = self._Z[j]
        else:
            z = self.state.embed(torch.tensor([i], device=self._P.device))[0]
        if self._np:
            self._downdate_numpy(self._Z_np[j] if j is not None else z.numpy(), t)
        else:
            self._downdate_torch(z, t)
        if not self.allow_repeats and j is not None:
            self._masked[i] = True
            self._available -= 1
            self._mask_P[j] = True
        u = self._u
        if self._np:
            if self._mask_np.any():
                u.masked_fill_(self._mask_P, -math.inf)
        else:
            u.masked_fill_(self._mask_P, -math.inf)
        self.n_refreshed = self._K
        self.total_refreshed += self._K

    def _downdate_torch(self, z: Tensor, t: int) -> None:
        """One Sherman-Morrison step with hallucinated embedding ``z`` (torch)."""
        c = self._Vinv @ z
        h = c.mul_(torch.dot(z, c).add_(1.0).rsqrt_())
        self._H[t] = h
        self._Zb[t] = z
        self.t = t + 1
        if self.t - self._s >= max(self.state.rank, 1):
            self._refactor()
        else:
            self._Vinv.addr_(h, h, alpha=-1.0)
        proj = self._Z @ h
        s2 = self._s2.sub_(proj.square_())
        torch.maximum(s2, self._resid, out=s2)
        self._u = torch.add(self._mu, s2.sqrt(), alpha=self.alpha)

    def _downdate_numpy(self, z: np.ndarray, t: int) -> None:
        """:meth:`_downdate_torch` on NumPy views of the same tensors."""
        c = self._Vinv_np @ z
        h = c * (1.0 / math.sqrt(1.0 + float(z @ c)))
        self._H_np[t] = h
        self._Zb_np[t] = z
        self.t = t + 1
        if self.t - self._s >= max(self.state.rank, 1):
            self._refactor()
        else:
            _sub_outer(self._Vinv_np, h)
        proj = self._Z_np @ h
        s2 = self._s2_np
        s2 -= proj * proj
        np.maximum(s2, self._resid_np, out=s2)
        u = self._u_np
        np.sqrt(s2, out=u)
        u *= self.alpha
        u += self._mu_np


def _sub_outer(V: np.ndarray, h: np.ndarray) -> None:
    """``V -= h h^T`` in place for a symmetric ``V`` (BLAS ``ger``, no temporary)."""
    ger = {np.float64: _scipy_blas.dger, np.float32: _scipy_blas.sger}.get(V.dtype.type)
    # ``ger`` updates a Fortran-ordered matrix in place: ``V`` or ``V^T``.
    a = V if V.flags.f_contiguous else V.T
    if ger is None or not a.flags.f_contiguous:
        V -= np.multiply.outer(h, h)
        return
    out = ger(-1.0, h, h, a=a, overwrite_a=1)
    if not np.shares_memory(out, V):
        a[...] = out


def _argmax_read(u: Tensor, s2: Tensor) -> tuple[int, float, float]:
    r"""``(j, u[j], s2[j])`` for ``j = argmax u`` (lowest index on ties) in one
    read from the device (one host synchronisation instead of three)."""
    j = torch.argmax(u)
    if u.dtype == torch.float64 or u.numel() <= 2**24:  # j exact in u's dtype
        packed = torch.stack((j.to(u.dtype), u[j], s2[j])).tolist()
        return int(packed[0]), packed[1], packed[2]
    index = int(j)
    return index, float(u[index]), float(s2[index])


def _numpy_views_ok(x: Tensor) -> bool:
    """Whether the selector's per-step tensors can be worked on as NumPy views."""
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


def select_batch(
    state: BatchState,
    alpha: float,
    rule: StoppingRule,
    *,
    max_batch_size: int | None = None,
    min_batch_size: int = 1,
    allow_repeats: bool = True,
    lazy: bool = True,
    recorder: Callable[[StepRecord], None] | None = None,
    selector: str = "pool",
    pool_size: int | None = DEFAULT_POOL_SIZE,
    max_pool_bytes: int = DEFAULT_MAX_POOL_BYTES,
    excluded: Tensor | None = None,
    pending: Sequence[int] = (),
) -> list[int]:
    r"""Select one BBKB batch (Alg. 1 L4-L8) on the frozen ``state``.

    Repeats ``i = argmax_a u_t(a)`` (exact, lowest index on ties), ``stop =
    rule.update(i, s2_t(i))``, and, unless the batch ends, hallucinates ``i``. The
    point that makes the rule stop belongs to the batch. Also ends when
    ``max_batch_size`` points were chosen, or (without repeats) when no arm is
    left. With ``min_batch_size > 1`` a batch the rule ends early goes on with
    the same greedy sequence (the rule is no longer consulted) until it holds
    ``min_batch_size`` points: GP-BUCB's batch, to keep ``k`` workers busy at the
    price of the rule's guarantee for the extra points.

    Args:
        state: Frozen batch-start state (:func:`~botorch_sketch.bbkb.state.rebuild`).
        alpha: UCB multiplier ``alpha~`` (constant in the batch).
        rule: A stopping rule; :meth:`StoppingRule.start` is called here.
        max_batch_size: Optional cap (``>= 1``), e.g. the steps left to the horizon.
        min_batch_size: Smallest batch, ``1 <= min_batch_size <= max_batch_size``
            (fewer only when no arm is left without repeats).
        allow_repeats: Allow an arm several times in one batch (paper default).
        lazy: If ``False``, every arm's variance is downdated at every step
            (eager; the pool is the whole arm set).
        recorder: Optional callback receiving a :class:`StepRecord` per step.
        selector: ``"pool"`` (:class:`PooledUCBSelector`, default) or ``"lazy"``
            (:class:`LazyUCBSelector`, the paper's lazy rule). Both return the exact
            argmax; they differ only in rounding and speed.
        pool_size: Initial pool size of the ``"pool"`` selector.
        max_pool_bytes: Memory cap of the ``"pool"`` selector's embeddings.
        excluded: Optional ``A`` boolean mask of arms never selected (``"pool"``
            selector only).
        pending: Arms under evaluation from an earlier batch (asynchronous use):
            hallucinated into ``V_t`` before the first choice, as BBKB
            hallucinates its own batch, without feedback to the stopping rule
            (``"pool"`` selector only).

    Returns:
        The chosen arm indices, in selection order.
    """
    if max_batch_size is not None and (
        int(max_batch_size) != max_batch_size or max_batch_size < 1
    ):
        raise ValueError(
            f"max_batch_size must be an integer >= 1, got {max_batch_size}."
        )
    if int(min_batch_size) != min_batch_size or not (
        1 <= min_batch_size <= (max_batch_size or math.inf)
    ):
        raise ValueError(
            f"min_batch_size must be an integer in [1, max_batch_size], got "
            f"{min_batch_size} (max_batch_size={max_batch_size})."
        )
    if selector == "pool":
        sel: PooledUCBSelector | LazyUCBSelector = PooledUCBSelector(
            state,
            alpha,
            allow_repeats=allow_repeats,
            pool_size=pool_size if lazy else None,
            max_pool_bytes=max_pool_bytes,
            excluded=excluded,
        )
        for i in pending:
            sel.hallucinate(int(i))
        if sel.exhausted:
            raise ValueError("every arm is excluded; there is nothing to select.")
    elif excluded is not None or len(pending) > 0:
        raise ValueError("excluded and pending need selector='pool'.")
    elif selector == "lazy":
        sel = LazyUCBSelector(state, alpha, allow_repeats=allow_repeats, lazy=lazy)
    else:
        raise ValueError(f"selector must be 'pool' or 'lazy', got {selector!r}.")
    rule.start(state)
    batch: list[int] = []
    cap = math.inf if max_batch_size is None else max_batch_size
    stopped = False  # the rule's decision; the batch may go on to min_batch_size
    while True:
        i = sel.argmax()
        ucb_i, var_i = sel.current()
        batch.append(i)
        if not stopped:
            stopped = rule.update(i, var_i)
        stop = stopped and len(batch) >= min_batch_size
        full = len(batch) >= cap
        if recorder is not None:
            recorder(
                StepRecord(
                    position=len(batch) - 1,
                    arm=i,
                    ucb=ucb_i,
                    variance=var_i,
                    bound=rule.bound,
                    stop=stop or full,
                    n_refreshed=sel.n_refreshed,
                )
            )
        if stop or full:
            return batch
        sel.hallucinate(i)
        if sel.exhausted:
            return batch
