r"""Batch selection of BBKB over a finite candidate set, with exact lazy UCBs.

Within a batch the dictionary, the embedding ``Z``, the mean ``mu~_fb`` and
``alpha~_fb`` are frozen; each selected point is "hallucinated" into
``V_t = V_fb + sum_{j in batch} z_j z_j^T`` (BBKB Alg. 1 L7). The variances
``sigma~^2_t(a) = resid(a) + z(a)^T V_t^{-1} z(a)`` can only decrease, so cached UCBs
``u(a) = mu(a) + alpha sqrt(s2(a))`` are upper bounds and lazy evaluation is exact
(App. A.3, BBKB spec Sec. 4.3).

Representation (our choice): a lower Cholesky factor ``L_t`` of ``V_t`` updated by
:func:`~botorch_sketch.linalg.cholesky_rank_one_update` (``O(r^2)`` per step), plus
the Sherman-Morrison history ``h_j = V_{j-1}^{-1} z_j / sqrt(1 + z_j^T V_{j-1}^{-1}
z_j)`` of the batch, so that ``V_t^{-1} = V_s^{-1} - sum_{s <= j < t} h_j h_j^T``.
Every arm remembers the step ``tau(a)`` at which its cached variance was exact.
Refreshing an arm that missed ``k = t - tau(a)`` steps costs

- ``O(k r)`` with the history, ``s2 -= sum_{tau(a) <= j < t} (h_j . z(a))^2``, if
  ``k <= r / 2``;
- ``O(r^2)`` with a triangular solve, ``s2 = resid + ||L_t^{-1} z(a)||^2``, otherwise;

so ``O(r min(k, r))`` per recomputed arm: ``O(r)`` for arms refreshed at every step
(the typical case near the top of the UCB), never an ``O(A r^2)`` sweep per step.

Lazy rule: after hallucinating ``x``, its UCB is recomputed, then every arm whose
cached UCB is ``>= u_new(x)`` (App. A.3, Alg. 1 L8). Arms left alone have cached,
hence exact, UCBs ``< u_new(x)``, so the next ``argmax`` (ties to the lowest index)
equals the brute-force argmax. With ``allow_repeats=False`` the selected arm is
masked out and the role of ``x`` is played by the argmax of the cached UCBs
(refreshed first), which keeps the same guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.bbkb.state import BatchState
from botorch_sketch.bbkb.stopping import StoppingRule

__all__ = ["LazyUCBSelector", "StepRecord", "select_batch"]


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
        self.tau = torch.zeros(state.num_arms, dtype=torch.long)
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
        return int(torch.argmax(self.u))

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
            seed_idx = torch.tensor([seed])
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
            P = P * (torch.arange(kk) >= (kk - k).unsqueeze(-1))
        s2 = self.s2[idx] - P.pow(2).sum(-1)
        self.s2[idx] = torch.maximum(s2, self._resid[idx])

    def _refresh_solve(self, idx: Tensor) -> None:
        if idx.numel() == 0:
            return
        Wt = torch.linalg.solve_triangular(self.L, self._Z[idx].mT, upper=False)
        self.s2[idx] = self._resid[idx] + Wt.pow(2).sum(0)


def select_batch(
    state: BatchState,
    alpha: float,
    rule: StoppingRule,
    *,
    max_batch_size: int | None = None,
    allow_repeats: bool = True,
    lazy: bool = True,
    recorder: Callable[[StepRecord], None] | None = None,
) -> list[int]:
    r"""Select one BBKB batch (Alg. 1 L4-L8) on the frozen ``state``.

    Repeats ``i = argmax_a u_t(a)`` (exact, lowest index on ties), ``stop =
    rule.update(i, s2_t(i))``, and, unless the batch ends, hallucinates ``i``. The
    point that makes the rule stop belongs to the batch. Also ends when
    ``max_batch_size`` points were chosen, or (without repeats) when no arm is
    left.

    Args:
        state: Frozen batch-start state (:func:`~botorch_sketch.bbkb.state.rebuild`).
        alpha: UCB multiplier ``alpha~`` (constant in the batch).
        rule: A stopping rule; :meth:`StoppingRule.start` is called here.
        max_batch_size: Optional cap (``>= 1``), e.g. the steps left to the horizon.
        allow_repeats: Allow an arm several times in one batch (paper default).
        lazy: Lazy UCB evaluation (default) or eager full downdates.
        recorder: Optional callback receiving a :class:`StepRecord` per step.

    Returns:
        The chosen arm indices, in selection order.
    """
    if max_batch_size is not None and (
        int(max_batch_size) != max_batch_size or max_batch_size < 1
    ):
        raise ValueError(
            f"max_batch_size must be an integer >= 1, got {max_batch_size}."
        )
    selector = LazyUCBSelector(state, alpha, allow_repeats=allow_repeats, lazy=lazy)
    rule.start(state)
    batch: list[int] = []
    while True:
        i = selector.argmax()
        var_i = float(selector.s2[i])
        batch.append(i)
        stop = rule.update(i, var_i)
        full = max_batch_size is not None and len(batch) >= max_batch_size
        if recorder is not None:
            recorder(
                StepRecord(
                    position=len(batch) - 1,
                    arm=i,
                    ucb=float(selector.u[i]),
                    variance=var_i,
                    bound=rule.bound,
                    stop=stop or full,
                    n_refreshed=selector.n_refreshed,
                )
            )
        if stop or full:
            return batch
        selector.hallucinate(i)
        if selector.exhausted:
            return batch
