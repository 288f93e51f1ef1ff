r"""Dictionary policies of :class:`~botorch_sketch.models.NystromGP`: which points.

The object that decides the DTC dictionary ``S``, in the spirit of BoTorch's
``InducingPointAllocator`` (``botorch/models/utils/inducing_point_allocators.py``):
a model holds one and asks it for a draw; a different policy is a different
object. :class:`LeverageScorePolicy` is the default, BKB's posterior-variance
sampling (Calandriello et al., COLT 2019, Sec. 3.1):

* Row ``i`` is kept with probability ``min(1, s q_bar c_i sigma~^2(x_i))``, with
  ``sigma~^2 = var / ridge`` the ridge leverage score and ``c_i`` the copies of a
  duplicated input; a fresh dictionary is drawn by BLESS
  (:func:`~botorch_sketch.linalg.bless`, ``O(n m^2)``), a warm one by resampling
  the previous dictionary's scores.
* Within the budget ``m_max`` (``max_dictionary_size``, and the cap of
  ``memory_budget_gb``): ``s < 1`` where ``q_bar d_eff`` exceeds it, i.e. the
  leverage scores of the larger ridge ``ridge / s``.
* The regime guard: ``n <= exact_max_n``, or a draw keeping at least
  ``EXACT_FRACTION`` of the points within the budget, uses every point (the
  exact GP, at about the same cost).
* Every random choice derives from ``seed`` (numbered draws, fixed per-row
  uniforms for coupled redraws).

The pure functions it uses are in :mod:`~botorch_sketch.models.nystrom_dictionary`.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from gpytorch.likelihoods import Likelihood
from gpytorch.module import Module
from torch import Tensor

from botorch_sketch.models.nystrom_dictionary import (
    SketchDraw,
    dictionary_cap,
    draw_bless,
    draw_dictionary,
    input_rows,
    keeps_most,
    mean_nystrom_residual,
    resampling_ridge,
    row_uniforms,
    union_scores,
    uses_every_point,
    warm_dictionary,
)
from botorch_sketch.models.sketch_state import SketchState
from botorch_sketch.models.validation import (
    check_bool_free_int,
    check_seed,
    optional_positive_int,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_EXACT_MAX_N",
    "DEFAULT_MAX_DICTIONARY_SIZE",
    "DictionaryPolicy",
    "LeverageScorePolicy",
    "ResidualTargetPolicy",
    "SketchModel",
]

#: Default sketch budget ``m_max``: an ``O(n m^2)`` pass and an ``m x m``
#: eigendecomposition stay within seconds on a CPU at ``n = 10^5``.
DEFAULT_MAX_DICTIONARY_SIZE = 1000

#: Up to this many training points the model is the exact GP (every point).
DEFAULT_EXACT_MAX_N = 500


class SketchModel(Protocol):
    r"""What a dictionary policy reads from and does to a model (public names)."""

    covar_module: Module
    likelihood: Likelihood
    warm_start: SketchState | None
    dictionary_indices: Tensor

    @property
    def compute_inputs(self) -> Tensor:
        """The model's transformed training inputs in its compute dtype."""

    @property
    def num_training_points(self) -> int:
        """The model's ``num_training_points``."""

    def leverage_scores(self, ridge: float | None = None) -> Tensor:
        """The model's ``leverage_scores``."""

    def next_generator(
        self, generator: torch.Generator | None = None
    ) -> torch.Generator | None:
        """The model's ``next_generator``."""

    def row_uniforms(self, stream: int = 0) -> Tensor:
        """The model's ``row_uniforms``."""


class DictionaryPolicy(ABC):
    r"""Chooses the dictionary of a sketched GP.

    Attributes:
        seed: Seed of the policy's random choices (``None``: torch's generator).
    """

    seed: int | None = None

    @abstractmethod
    def initial(self, model: SketchModel, every_point: bool = False) -> SketchDraw:
        r"""The dictionary at the model's current hyperparameters.

        Args:
            model: The model (its data, kernel, noise and warm start).
            every_point: The user asked for every point (the exact GP).
        """

    @abstractmethod
    def fresh(self, model: SketchModel) -> SketchDraw:
        r"""A dictionary drawn from scratch (no warm start, no regime guard)."""

    @abstractmethod
    def redraw(
        self,
        model: SketchModel,
        scores: Tensor,
        ridge: float | None = None,
        generator: torch.Generator | None = None,
        uniforms: Tensor | None = None,
    ) -> SketchDraw:
        r"""Redraw from leverage ``scores`` (``... x n``) at ``ridge``."""

    def cap(self, n: int, itemsize: int) -> int | None:
        r"""The largest dictionary for ``n`` points of ``itemsize`` bytes."""
        return None

    def resampling_ridge(self, ridge: float | None, noise: float) -> float | None:
        r"""The ridge a redraw scores at, given the last draw's (``None``: noise)."""
        return None

    def with_cap(self, cap: int | None) -> DictionaryPolicy:
        r"""The same policy with the fixed budget ``cap`` (for a data subset)."""
        return self


@dataclass(frozen=True)
class LeverageScorePolicy(DictionaryPolicy):
    r"""BKB's ridge-leverage-score dictionary within a budget (module docstring).

    Attributes:
        q_bar: Oversampling factor (``> 0``; the authors suggest 2 to 10).
        max_dictionary_size: The budget ``m_max`` (``None``: none).
        memory_budget_gb: Optional memory budget of the ``n x m`` blocks (about
            four arrays): also caps ``m`` at ``budget / (4 n itemsize)``.
        exact_max_n: Up to this many points every point is in the dictionary.
        seed: Seed of every draw (``0 <= seed < 2^63``; ``None``: torch's
            generator).
    """

    q_bar: float = 2.0
    max_dictionary_size: int | None = DEFAULT_MAX_DICTIONARY_SIZE
    memory_budget_gb: float | None = None
    exact_max_n: int = DEFAULT_EXACT_MAX_N
    seed: int | None = None

    def __post_init__(self) -> None:
        q_bar = self.q_bar
        if isinstance(q_bar, bool) or not (
            isinstance(q_bar, int | float) and q_bar > 0 and math.isfinite(q_bar)
        ):
            raise ValueError(f"q_bar must be a positive finite number, got {q_bar!r}.")
        object.__setattr__(self, "q_bar", float(q_bar))
        optional_positive_int(self.max_dictionary_size, "max_dictionary_size")
        budget = self.memory_budget_gb
        if budget is not None and (
            isinstance(budget, bool)
            or not (isinstance(budget, int | float) and budget > 0)
        ):
            raise ValueError(
                f"memory_budget_gb must be a positive number, got {budget!r}."
            )
        check_bool_free_int(self.exact_max_n, "exact_max_n", minimum=0)
        check_seed(self.seed)

    def cap(self, n: int, itemsize: int) -> int | None:
        r"""``max_dictionary_size`` combined with the memory budget's cap."""
        return dictionary_cap(
            self.max_dictionary_size, self.memory_budget_gb, n, itemsize
        )

    def with_cap(self, cap: int | None) -> LeverageScorePolicy:
        r"""This policy with budget ``cap`` and no memory budget."""
        return replace(self, max_dictionary_size=cap, memory_budget_gb=None)

    def resampling_ridge(self, ridge: float | None, noise: float) -> float | None:
        r""":func:`~botorch_sketch.models.nystrom_dictionary.resampling_ridge`."""
        return resampling_ridge(ridge, noise)

    def initial(self, model: SketchModel, every_point: bool = False) -> SketchDraw:
        r"""Every point (guard), BKB's resampling of a warm start, else BLESS.

        Every point also when the draw keeps at least ``EXACT_FRACTION`` of them
        within the budget.
        """
        X = model.compute_inputs
        n = model.num_training_points
        cap = self.cap(n, X.element_size())
        every = SketchDraw(torch.arange(n, device=X.device), None, False)
        if uses_every_point("all" if every_point else "auto", n, self.exact_max_n, cap):
            return every
        draw = None
        if model.warm_start is not None:
            previous = self.warm_rows(model, model.warm_start)
            if previous.numel() > 0:
                model.dictionary_indices = torch.unique(previous)
                ridge = self.resampling_ridge(
                    model.warm_start.sketch_ridge, _mean_noise(model)
                )
                draw = self.redraw(
                    model,
                    model.leverage_scores(ridge),
                    ridge,
                    uniforms=model.row_uniforms(),
                )
        if draw is None:
            draw = self.fresh(model)
        return every if keeps_most(draw.indices.numel(), n, cap) else draw

    def warm_rows(self, model: SketchModel, state: SketchState) -> Tensor:
        r"""A warm start's dictionary among the model's rows (empty if absent)."""
        X = model.compute_inputs
        rows = warm_dictionary(X, state)
        if rows is None:
            logger.info(
                "NystromGP warm start: the previous dictionary is not in the data."
            )
            return state.dictionary_rows[:0].to(X.device)
        return rows

    def fresh(self, model: SketchModel) -> SketchDraw:
        r"""BLESS at the current hyperparameters, within the budget."""
        X = model.compute_inputs
        return draw_bless(
            X,
            model.covar_module,
            model.likelihood.noise,
            self.q_bar,
            self.cap(model.num_training_points, X.element_size()),
            model.next_generator,
        )

    def redraw(
        self,
        model: SketchModel,
        scores: Tensor,
        ridge: float | None = None,
        generator: torch.Generator | None = None,
        uniforms: Tensor | None = None,
    ) -> SketchDraw:
        r"""BKB's posterior-variance sampling of the deduplicated rows, in budget."""
        X = model.compute_inputs
        draw = draw_dictionary(
            union_scores(scores, input_rows(X), self.q_bar),
            self.cap(model.num_training_points, X.element_size()),
            _mean_noise(model),
            ridge,
            generator=generator,
            uniforms=uniforms,
        )
        if draw.fallback:
            logger.warning("Dictionary draw was empty; kept the most uncertain point.")
        return draw


@dataclass(frozen=True)
class ResidualTargetPolicy(LeverageScorePolicy):
    r"""A leverage-score dictionary grown until it buys a target accuracy.

    A fresh draw (BLESS at ``q_bar``) is followed by a check of the mean Nyström
    residual over the noise, ``rho = mean_i (k_ii - Q_ii) / sigma^2``
    (:func:`~botorch_sketch.models.nystrom_dictionary.mean_nystrom_residual`),
    on a seeded subsample of at most ``evaluation_size`` points. While
    ``rho > residual_tolerance``, the oversampling factor doubles and the
    dictionary is redrawn, until the criterion is met, the budget
    (``max_dictionary_size``, e.g. from :func:`~botorch_sketch.models.budget.
    device_dictionary_cap`) binds, or ``max_growth_rounds`` redraws were made.
    Each check costs ``O(k m^2 + m^3)`` for ``k`` evaluation points. The model
    reports ``rho`` (:attr:`~botorch_sketch.models.NystromGP.dictionary_report`).

    Attributes:
        residual_tolerance: The target of ``rho`` (``> 0``).
        evaluation_size: Points the criterion is measured on (``None``: all).
        max_growth_rounds: Largest number of redraws.
    """

    residual_tolerance: float = 0.05
    evaluation_size: int | None = 2000
    max_growth_rounds: int = 6

    def __post_init__(self) -> None:
        super().__post_init__()
        tol = self.residual_tolerance
        if isinstance(tol, bool) or not (
            isinstance(tol, int | float) and tol > 0 and math.isfinite(tol)
        ):
            raise ValueError(
                f"residual_tolerance must be a positive finite number, got {tol!r}."
            )
        optional_positive_int(self.evaluation_size, "evaluation_size")
        check_bool_free_int(self.max_growth_rounds, "max_growth_rounds", minimum=0)

    def fresh(self, model: SketchModel) -> SketchDraw:
        r"""BLESS at ``q_bar``, redrawn at doubled ``q_bar`` until ``rho`` is met."""
        X = model.compute_inputs
        n = model.num_training_points
        cap = self.cap(n, X.element_size())
        eval_X = X
        if self.evaluation_size is not None and n > self.evaluation_size:
            order = torch.argsort(row_uniforms(n, self.seed, stream=2), stable=True)
            rows = torch.sort(order[: self.evaluation_size]).values.to(X.device)
            eval_X = X[..., rows, :]
        q_bar, rounds = self.q_bar, 0
        while True:
            draw = LeverageScorePolicy.fresh(replace(self, q_bar=q_bar), model)
            rho = mean_nystrom_residual(
                eval_X,
                X[..., draw.indices, :],
                model.covar_module,
                model.likelihood.noise,
            )
            draw = draw._replace(residual=rho)
            size = draw.indices.numel()
            full = size >= n or (cap is not None and size >= cap) or draw.capped
            if rho <= self.residual_tolerance or full:
                break
            if rounds >= self.max_growth_rounds:
                break
            q_bar, rounds = 2.0 * q_bar, rounds + 1
        if rho > self.residual_tolerance:
            logger.warning(
                "NystromGP: the dictionary of %d points leaves a mean Nystrom "
                "residual of %.3g noise variances (target %.3g) after %d growth "
                "rounds.",
                draw.indices.numel(),
                rho,
                self.residual_tolerance,
                rounds,
            )
        return draw


def _mean_noise(model: SketchModel) -> float:
    return float(model.likelihood.noise.mean())
