r"""The trust region's state machine (TuRBO-1, Eriksson et al., NeurIPS 2019, Sec. 3).

One hyper-rectangle of base side length ``L`` in the unit cube, centred at the
incumbent. After each batch of ``q`` evaluations:

- a *success* is a batch whose best value ``v`` improves the incumbent ``b`` by
  more than ``improvement_tolerance * |b|`` (maximisation), and by more than an
  absolute ``floor`` where the caller gives one (below), else a *failure*;
- ``success_tolerance`` (``tau_succ``, 3) consecutive successes double ``L``
  (at most ``length_max``), ``failure_tolerance`` (``tau_fail``, default
  ``ceil(max(4 / q, d / q))``) consecutive failures halve it;
- once ``L < length_min`` the region restarts (:func:`restart_state`): a fresh
  space-filling design and a fresh state.

The functions here are pure: each returns a new :class:`TrustRegionState`.

Noisy evaluations: with the raw best observed value as the incumbent, one lucky
noisy draw counts as a success and then blocks every later success (the
incumbent sits above the function's true best). Callers with noise should pass
posterior means at the observed points (``best_value`` and ``batch_best`` of the
same model), as :mod:`botorch_sketch.ax.turbo` does with ``incumbent="mean"``.
Posterior means have their own cost: on a rugged function they smooth real
improvements away (more failures, faster shrinking) and centre the region off
the best point, so with noise small against the function's differences the
published rule (observed values) is the default there. The relative tolerance
``1e-3 |b|`` depends on the units (and vanishes near ``b = 0``), as published.

The ``floor`` of :func:`is_improvement` and :func:`update_state` (not part of
the published rule, default 0) is an absolute improvement a success needs in
the objective's units, e.g. a multiple of the noise's standard deviation: the
best of ``q`` noisy draws near a converged incumbent beats the incumbent's own
noisy record by a noise-sized margin often enough to count successes that
keep a collapsed region from shrinking (:mod:`botorch_sketch.ax.turbo`'s
``noise_tolerance``). It is an argument, not state: the caller measures it
anew at each batch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["TrustRegionState", "is_improvement", "restart_state", "update_state"]


@dataclass(frozen=True)
class TrustRegionState:
    r"""The state of one trust region.

    Attributes:
        dim: Input dimension ``d``.
        batch_size: Points per batch ``q`` (sets the default ``tau_fail``).
        length: Current base side length ``L`` (unit cube; ``None``:
            ``length_init``, a fresh region).
        length_init: ``L`` of a fresh region.
        length_min: Restart once ``L`` falls below this.
        length_max: Cap on ``L`` when expanding.
        success_tolerance: ``tau_succ``, consecutive successes to expand.
        failure_tolerance: ``tau_fail``, consecutive failures to shrink
            (``None``: ``ceil(max(4 / q, d / q))``).
        improvement_tolerance: Relative improvement a success needs, in ``[0, 1)``.
        success_counter: Consecutive successes so far.
        failure_counter: Consecutive failures so far.
        best_value: The incumbent's value (``-inf`` before any batch).
        restarts: Restarts so far.
    """

    dim: int
    batch_size: int
    length: float | None = None
    length_init: float = 0.8
    length_min: float = 0.5**7
    length_max: float = 1.6
    success_tolerance: int = 3
    failure_tolerance: int | None = None
    improvement_tolerance: float = 1e-3
    success_counter: int = 0
    failure_counter: int = 0
    best_value: float = -math.inf
    restarts: int = 0

    def __post_init__(self) -> None:
        if self.length is None:
            object.__setattr__(self, "length", self.length_init)
        for key in ("dim", "batch_size", "success_tolerance"):
            _positive_int(getattr(self, key), key)
        if self.failure_tolerance is None:
            q, d = self.batch_size, self.dim
            object.__setattr__(
                self, "failure_tolerance", math.ceil(max(4.0 / q, d / q))
            )
        _positive_int(self.failure_tolerance, "failure_tolerance")
        for key in ("success_counter", "failure_counter", "restarts"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} must be a non-negative int, got {value!r}.")
        for key in ("length_init", "length", "length_min", "length_max"):
            value = getattr(self, key)
            if not _is_number(value) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{key} must be a finite number > 0, got {value!r}.")
        if not self.length_min <= self.length_init <= self.length_max:
            raise ValueError(
                "need 0 < length_min <= length_init <= length_max, got "
                f"length_min={self.length_min!r}, length_init={self.length_init!r}, "
                f"length_max={self.length_max!r}."
            )
        if self.length > self.length_max:
            raise ValueError(
                f"length={self.length!r} exceeds length_max={self.length_max!r}."
            )
        tol = self.improvement_tolerance
        if not _is_number(tol) or not 0.0 <= tol < 1.0:
            raise ValueError(f"improvement_tolerance must be in [0, 1), got {tol!r}.")
        if not _is_number(self.best_value) or math.isnan(self.best_value):
            raise ValueError(f"best_value must be a number, got {self.best_value!r}.")

    @property
    def restart_triggered(self) -> bool:
        r"""Whether the region has shrunk below ``length_min``."""
        return self.length < self.length_min

    def to_dict(self) -> dict[str, Any]:
        r"""A JSON-serialisable dict (``best_value = -inf`` as ``None``)."""
        out = asdict(self)
        if math.isinf(out["best_value"]):
            out["best_value"] = None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrustRegionState:
        r"""The inverse of :meth:`to_dict`."""
        data = dict(data)
        if data.get("best_value") is None:
            data["best_value"] = -math.inf
        return cls(**data)


def is_improvement(state: TrustRegionState, value: float, floor: float = 0.0) -> bool:
    r"""Whether ``value > b + max(improvement_tolerance * |b|, floor)``
    (``b = best_value``; ``floor >= 0`` in the objective's units)."""
    best = state.best_value
    if math.isinf(best):
        return True
    return value > best + max(state.improvement_tolerance * abs(best), floor)


def update_state(
    state: TrustRegionState, batch_best: float, floor: float = 0.0
) -> TrustRegionState:
    r"""The state after a batch whose best value is ``batch_best``.

    Counts a success or a failure, doubles ``L`` (capped at ``length_max``) after
    ``tau_succ`` consecutive successes, halves it after ``tau_fail`` consecutive
    failures (each resets its counter), and keeps the larger incumbent.
    :attr:`TrustRegionState.restart_triggered` tells whether to restart.
    ``floor`` is the absolute improvement a success needs besides the relative
    one (:func:`is_improvement`; module docstring).
    """
    if not _is_number(batch_best) or math.isnan(batch_best):
        raise ValueError(f"batch_best must be a number, got {batch_best!r}.")
    if not _is_number(floor) or not math.isfinite(floor) or floor < 0:
        raise ValueError(f"floor must be a finite number >= 0, got {floor!r}.")
    if is_improvement(state, batch_best, floor):
        success, failure = state.success_counter + 1, 0
    else:
        success, failure = 0, state.failure_counter + 1
    length = state.length
    if success == state.success_tolerance:
        length, success = min(2.0 * length, state.length_max), 0
    elif failure == state.failure_tolerance:
        length, failure = length / 2.0, 0
    return replace(
        state,
        length=length,
        success_counter=success,
        failure_counter=failure,
        best_value=max(state.best_value, float(batch_best)),
    )


def restart_state(state: TrustRegionState) -> TrustRegionState:
    r"""A fresh region (``L = length_init``, counters and incumbent reset), with
    the same settings and one more restart counted."""
    return replace(
        state,
        length=state.length_init,
        success_counter=0,
        failure_counter=0,
        best_value=-math.inf,
        restarts=state.restarts + 1,
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _positive_int(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a positive int, got {value!r}.")
