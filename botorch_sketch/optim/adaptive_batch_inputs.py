r"""Validated inputs of :func:`~botorch_sketch.optim.optimize_acqf_adaptive_batch`.

One dataclass, checked in ``__post_init__`` (as BoTorch's ``OptimizeAcqfInputs``
in ``botorch/optim/optimize.py``), so that every bad input is a ``TypeError`` or
``ValueError`` naming the argument before any model evaluation, and every default
is written once, here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from torch import Tensor

from botorch_sketch.acquisition.bbkb import (
    DEFAULT_HALLUCINATION,
    HALLUCINATIONS,
    BatchUpperConfidenceBound,
)
from botorch_sketch.bbkb.config import BBKBConfig
from botorch_sketch.bbkb.stopping import StoppingRule, make_rule
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.validation import (
    check_choice,
    check_fraction,
    check_nonnegative_number,
    check_positive_number,
    check_seed,
)
from botorch_sketch.optim.new_points import NeighborhoodSearch
from botorch_sketch.optim.stall import DEFAULT_STALL_BASIN_SHARE
from botorch_sketch.optim.step_tolerance import DEFAULT_GRADIENT_TOLERANCE

__all__ = [
    "DEFAULT_C",
    "DEFAULT_THOMPSON_FILL",
    "AdaptiveBatchInputs",
    "StepOptimizer",
]

#: ``step_optimizer(acqf, step) -> (x, value)``: one greedy step over the domain.
StepOptimizer = Callable[[BatchUpperConfidenceBound, int], tuple[Tensor, Tensor]]

#: Default threshold ``C~`` when ``rule`` is given by name (spec Sec. 5.4): the
#: BBKB engine's.
DEFAULT_C = BBKBConfig.C

#: Default share of a batch filled by Thompson sampling: none (the greedy
#: sequence alone; Ax's BBKB strategies set their own).
DEFAULT_THOMPSON_FILL = 0.0
#: Default share of the Thompson fill spent in other basins of the posterior mean
#: (:func:`~botorch_sketch.optim.adaptive_batch.thompson_fill_points`).
DEFAULT_BASIN_SHARE = 0.25


@dataclass
class AdaptiveBatchInputs:
    r"""Inputs of one adaptive batch; see
    :func:`~botorch_sketch.optim.optimize_acqf_adaptive_batch` for each field.

    After ``__post_init__``, ``rule`` is a :class:`StoppingRule` (a name is
    resolved with ``C``, default :data:`DEFAULT_C`) and ``seed`` an int (drawn
    from torch's global generator when ``None``).
    """

    model: NystromGP
    bounds: Tensor | None
    rule: StoppingRule | str
    alpha: float
    max_batch_size: int
    num_restarts: int = 10
    raw_samples: int = 512
    X_pending: Tensor | None = None
    choices: Tensor | None = None
    allow_repeats: bool = True
    options: dict[str, Any] | None = None
    posterior_transform: PosteriorTransform | None = None
    maximize: bool = True
    C: float | None = None
    num_reference_points: int = 1024
    seed: int | None = None
    min_batch_size: int = 1
    step_optimizer: StepOptimizer | None = None
    reference_points: Tensor | None = None
    hallucination: str = DEFAULT_HALLUCINATION
    reuse_restarts: bool = True
    restart_maxiter: int | None = None
    gradient_tolerance: float | None = DEFAULT_GRADIENT_TOLERANCE
    thompson_fill: float = DEFAULT_THOMPSON_FILL
    basin_share: float = DEFAULT_BASIN_SHARE
    prefer_new_points: bool = True
    new_point_search: NeighborhoodSearch | None = None
    stall_basin_share: float | None = DEFAULT_STALL_BASIN_SHARE

    def __post_init__(self) -> None:
        r"""Check every field; resolve ``rule`` and ``seed``."""
        if not isinstance(self.model, NystromGP):
            raise TypeError(
                "model must be a NystromGP (BBKB's batch UCB reads its Nystrom "
                f"embedding), got {type(self.model).__name__}."
            )
        for name in (
            "allow_repeats",
            "reuse_restarts",
            "maximize",
            "prefer_new_points",
        ):
            if not isinstance(getattr(self, name), bool):  # "False" is truthy
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}.")
        _check_int("max_batch_size", self.max_batch_size, 1)
        _check_int("min_batch_size", self.min_batch_size, 1, self.max_batch_size)
        _check_int("num_reference_points", self.num_reference_points, 1)
        if self.restart_maxiter is not None:
            _check_int("restart_maxiter", self.restart_maxiter, 1)
        if self.gradient_tolerance is not None:
            check_positive_number(self.gradient_tolerance, "gradient_tolerance")
        check_seed(self.seed)
        check_nonnegative_number(self.alpha, "alpha")
        check_choice(self.hallucination, HALLUCINATIONS, "hallucination")
        fill = self.thompson_fill
        check_fraction(fill, "thompson_fill")
        check_fraction(self.basin_share, "basin_share")
        if self.stall_basin_share is not None:
            check_fraction(self.stall_basin_share, "stall_basin_share")
        if fill > 0 and (self.choices is not None or self.step_optimizer is not None):
            raise ValueError(
                "thompson_fill > 0 needs a box domain (bounds) without choices or "
                "step_optimizer; got "
                + ("choices." if self.choices is not None else "a step_optimizer.")
            )
        self._check_domain()
        self._check_search()
        self.rule = _resolve_rule(self.rule, self.C)
        if self.seed is None:
            self.seed = int(torch.randint(2**31 - 1, (1,)))

    @property
    def d(self) -> int:
        r"""The input dimension of the model."""
        return self.model.input_dim

    @property
    def greedy_min(self) -> int:
        r"""The greedy sequence's own floor; Thompson samples fill the rest."""
        fill = math.floor(self.thompson_fill * (self.min_batch_size - 1))
        return self.min_batch_size - fill

    def _check_search(self) -> None:
        search = self.new_point_search
        if search is None:
            return
        if not isinstance(search, NeighborhoodSearch):
            raise TypeError(
                "new_point_search must be a NeighborhoodSearch, got "
                f"{type(search).__name__}."
            )
        if self.step_optimizer is None:
            raise ValueError("new_point_search needs a step_optimizer.")
        if search.bounds.shape[-1] != self.d:
            raise ValueError(
                f"new_point_search has dimension {search.bounds.shape[-1]} but the "
                f"model has d={self.d}."
            )

    def _check_domain(self) -> None:
        d = self.d
        bounds, choices, X_pending = self.bounds, self.choices, self.X_pending
        if bounds is None and choices is None:
            raise ValueError(
                "give either `bounds` (a box) or `choices` (a finite set)."
            )
        if bounds is not None:
            if bounds.dim() != 2 or bounds.shape[0] != 2:
                raise ValueError(f"bounds must be 2 x d, got {tuple(bounds.shape)}.")
            if bounds.shape[-1] != d:
                raise ValueError(
                    f"bounds has dimension {bounds.shape[-1]} but the model has d={d}."
                )
            if not bool(torch.isfinite(bounds).all()) or bool(
                (bounds[0] > bounds[1]).any()
            ):
                raise ValueError("bounds must be finite with lower <= upper.")
        if choices is not None:
            if choices.dim() != 2:
                raise ValueError(f"choices must be A x d, got {tuple(choices.shape)}.")
            if choices.shape[0] == 0:
                raise ValueError("choices is empty.")
            if choices.shape[-1] != d:
                raise ValueError(
                    f"choices has dimension {choices.shape[-1]} but the model has "
                    f"d={d}."
                )
            if not bool(torch.isfinite(choices).all()):
                raise ValueError("choices contains NaN or Inf.")
        elif not self.allow_repeats:
            raise ValueError(
                "allow_repeats=False needs a finite `choices` set; optimize_acqf on "
                "a box cannot exclude points."
            )
        else:
            _check_int("num_restarts", self.num_restarts, 1)
            _check_int("raw_samples", self.raw_samples, 1)
        if X_pending is not None and (X_pending.dim() != 2 or X_pending.shape[-1] != d):
            raise ValueError(
                f"X_pending must be p x d with d={d}, got {tuple(X_pending.shape)}."
            )


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    r"""``ValueError`` unless ``value`` is an int (not a bool) in ``[low, high]``."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an int {span}, got {value!r}.")


def _resolve_rule(rule: StoppingRule | str, C: float | None) -> StoppingRule:
    if isinstance(rule, StoppingRule):
        if C is not None and float(C) != rule.C:
            raise ValueError(
                f"C={C} conflicts with the threshold C={rule.C} of the given rule."
            )
        return rule
    if not isinstance(rule, str):
        raise ValueError(
            f"rule must be a StoppingRule or a rule name, got {type(rule).__name__}."
        )
    return make_rule(rule, DEFAULT_C if C is None else C)
