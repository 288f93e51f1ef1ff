r"""Batch stopping rules of BBKB and GP-BUCB.

A rule watches the points of the batch being built and decides when it ends. All
ratios are **variance** ratios ``sigma~^2_fb(x) / sigma~^2_t(x)`` in RLS units (BBKB
spec Sec. 0). Common protocol, one call per selected point:

    rule.start(state)            # at the start of every batch
    stop = rule.update(i, s2)    # i = arm just selected, s2 = its current
                                 # (hallucinated) variance at selection

Semantics (BBKB Alg. 1 L4-L5, spec Sec. 3 item 1): the point is selected first and
tested afterwards, so **the point that crosses the threshold belongs to the ending
batch**. Every proper prefix of a batch satisfies ``bound <= C``, and every batch
has at least one point. ``C >= 1`` is required; ``C = 1`` always gives batches of
one point (BKB), even in the degenerate case of a zero variance.

Rules:

- :class:`GlobalRule` (Lemma 1, "Global-BBKB"): ``1 + sum_{s in batch} s2_0(x_s)``,
  ``O(1)`` per step.
- :class:`GlobalLocalRule` (Lemma 3 hybrid, "GlobalLocal-BBKB"): global until that
  bound exceeds ``C``, then ``max_a 1 + sum_j k~_fb(a, x_j)^2 / s2_0(a)``,
  ``O(A (d + r) + r^2)`` per step after the switch.
- :class:`LocalRule`: the Lemma 3 bound from the first point.
- :class:`ProductRule` (GP-BUCB, Desautels et al. 2014 Prop. 1; BBKB Prop. 1/2):
  ``prod_{s in batch} (1 + sigma^2_{s-1}(x_s))`` with the current hallucinated
  variances.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np
import torch
from torch import Tensor

from botorch_sketch.bbkb.state import BatchState

__all__ = [
    "GlobalLocalRule",
    "GlobalRule",
    "LocalRule",
    "ProductRule",
    "StoppingRule",
    "make_rule",
]


class StoppingRule(ABC):
    r"""Base class of the batch stopping rules.

    Args:
        C: Ratio threshold ``C~ >= 1``.
    """

    def __init__(self, C: float) -> None:
        C = float(C)
        if not C >= 1.0 or not math.isfinite(C):
            raise ValueError(
                f"the batch threshold C must be a finite number >= 1, got {C}."
            )
        self.C = C
        self._bound = 1.0
        self._size = 0

    @property
    def bound(self) -> float:
        """Current bound on the variance ratio, batch points so far included."""
        return self._bound

    @property
    def size(self) -> int:
        """Number of points of the current batch seen by :meth:`update`."""
        return self._size

    def start(self, state: BatchState | None = None) -> None:
        """Reset for a new batch with the frozen batch-start ``state``."""
        self._bound = 1.0
        self._size = 0

    def update(self, arm: int, variance: float) -> bool:
        r"""Register the newly selected ``arm``; return ``True`` to end the batch.

        Args:
            arm: Index of the selected arm.
            variance: Its current (hallucinated) variance ``sigma~^2_{t}(x_{t+1})``
                at selection time, RLS units (used by :class:`ProductRule`).

        Returns:
            Whether the batch ends with this point (included).
        """
        self._size += 1
        self._bound = self._update(arm, variance)
        return self._bound > self.C or self.C == 1.0

    @abstractmethod
    def _update(self, arm: int, variance: float) -> float:
        """Return the new bound after adding ``arm``."""


class GlobalRule(StoppingRule):
    r"""Global rule of Lemma 1: ``G = 1 + sum_{s in batch} s2_0(x_s)``.

    Uses the cached batch-START variances ``sigma~^2_fb(t)(x_s, S_fb(t))`` (not the
    hallucinated ones, spec Sec. 3 item 2). By Lemma 1, while ``G <= C`` the
    approximate variance ratio is ``<= C`` for every arm (and the exact one
    ``<= 3 C`` w.h.p., Lemma 6). ``O(1)`` per step.
    """

    def start(self, state: BatchState | None = None) -> None:
        if state is None:
            raise ValueError("GlobalRule.start needs the batch-start state.")
        super().start(state)
        self._s2_0 = _host_values(state.s2_0)

    def _update(self, arm: int, variance: float) -> float:
        return self._bound + float(self._s2_0[arm])


def _host_values(s2_0: Tensor) -> np.ndarray | Tensor:
    r"""The batch-start variances as a NumPy array on the host (a view on the
    CPU, one copy per batch from a GPU), for one scalar read per step without
    dispatch or device round trip; the tensor itself when it carries gradients."""
    return s2_0 if s2_0.requires_grad else s2_0.cpu().numpy()


class GlobalLocalRule(StoppingRule):
    r"""Global-then-local hybrid of the paper's experiments (Lemma 3, Sec. 4 end).

    Runs :class:`GlobalRule` until ``G > C``. From that point on it tracks, for
    every arm, the local bound of Lemma 3

        r(a) = 1 + sum_{j in batch} k~_fb(a, x_j)^2 / s2_0(a),
        k~_fb(a, x_j) = (k(a, x_j) - z(a)^T z_j) / lam + z(a)^T V_fb^{-1} z_j,

    with the FULL batch-start covariance (Nyström residual included, spec
    Sec. 5.2), and ends the batch when ``max_a r(a) > C``. The accumulator is built
    from all batch points at the switch (``O(A b (d + r))`` once), then updated in
    ``O(A (d + r) + r^2)`` per point.

    Deviation from the authors' code (documented): the switch step is tested too,
    so every proper prefix satisfies ``min(global, local) <= C``; [CODE] skips the
    test at the switch step. Guard for ``s2_0(a) ~ 0`` (spec Sec. 11.1): per arm
    the ratio is capped at the global one, ``min(acc(a) / s2_0(a), G - 1)``, which
    is valid because ``k~^2(a, x_j) <= s2_0(a) s2_0(x_j)`` (Cauchy-Schwarz), so the
    local bound never exceeds the global bound.

    Args:
        C: Ratio threshold ``C~ >= 1``.
        switch_immediately: Use the local bound from the first point
            (:class:`LocalRule`).
    """

    def __init__(self, C: float, switch_immediately: bool = False) -> None:
        super().__init__(C)
        self.switch_immediately = switch_immediately

    @property
    def local(self) -> bool:
        """Whether the current batch has switched to the local bound."""
        return self._acc is not None

    def start(self, state: BatchState | None = None) -> None:
        if state is None:
            raise ValueError("GlobalLocalRule.start needs the batch-start state.")
        super().start(state)
        self._state = state
        self._global = 1.0
        self._batch: list[int] = []
        self._acc: Tensor | None = None
        tiny = torch.finfo(state.s2_0.dtype).tiny
        self._inv_s2 = state.s2_0.clamp_min(tiny).reciprocal()
        self._s2_0 = _host_values(state.s2_0)

    def _add(self, arm: int) -> None:
        k = self._state.covariance_with(arm)
        self._acc.add_(k.pow(2))

    def local_ratios(self) -> Tensor:
        r"""Per-arm local bounds ``r(a)`` (``A``), capped at the global bound."""
        if self._acc is None:
            return torch.full_like(self._inv_s2, self._global)
        return 1.0 + torch.minimum(
            self._acc * self._inv_s2, self._acc.new_tensor(self._global - 1.0)
        )

    def _update(self, arm: int, variance: float) -> float:
        self._batch.append(arm)
        self._global += float(self._s2_0[arm])
        if self._acc is None:
            if self._global <= self.C and not self.switch_immediately:
                return self._global
            self._acc = torch.zeros_like(self._inv_s2)
            for j in self._batch:
                self._add(j)
        else:
            self._add(arm)
        return float(self.local_ratios().max())


class LocalRule(GlobalLocalRule):
    r"""Lemma 3 local rule from the first batch point (see :class:`GlobalLocalRule`)."""

    def __init__(self, C: float) -> None:
        super().__init__(C, switch_immediately=True)


class ProductRule(StoppingRule):
    r"""GP-BUCB's rule (Desautels et al. 2014 Prop. 1; BBKB Prop. 1/2, Alg. 2).

    ``P = prod_{s in batch} (1 + sigma^2_{s-1}(x_s))`` with the CURRENT
    (hallucinated) variance of each point at its selection, as printed in Alg. 2
    (spec Sec. 8.1). Bounds the std ratio ``sigma_fb / sigma_t <= P``. ``O(1)``.
    """

    def _update(self, arm: int, variance: float) -> float:
        return self._bound * (1.0 + max(float(variance), 0.0))


def make_rule(name: str | StoppingRule, C: float) -> StoppingRule:
    """Build a rule from ``"global" | "global_local" | "local" | "product" | "bkb"``.

    ``"bkb"`` is :class:`GlobalRule` with ``C = 1`` (one point per batch). A
    :class:`StoppingRule` instance is returned unchanged.
    """
    if isinstance(name, StoppingRule):
        return name
    rules = {
        "global": lambda: GlobalRule(C),
        "global_local": lambda: GlobalLocalRule(C),
        "local": lambda: LocalRule(C),
        "product": lambda: ProductRule(C),
        "bkb": lambda: GlobalRule(1.0),
    }
    if name not in rules:
        raise ValueError(
            f"unknown stopping rule {name!r}; expected one of {sorted(rules)}."
        )
    return rules[name]()
