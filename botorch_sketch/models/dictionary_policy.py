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
* The accuracy criterion: a fresh draw is checked against the mean Nyström
  residual over the noise, ``rho = mean_i (k_ii - Q_ii) / sigma^2``
  (:func:`~botorch_sketch.models.nystrom_dictionary.mean_nystrom_residual`,
  the prior variance the sketch leaves unexplained, in noise variances), on a
  seeded subsample; while ``rho > residual_tolerance`` the oversampling factor
  doubles and the dictionary is redrawn, until the criterion is met, the budget
  binds or ``max_growth_rounds`` redraws were made. The dictionary size is thus
  the one the accuracy needs, not a fixed multiple of ``q_bar``. Redraws (a warm
  start, BKB's resampling in a loop, conditioning) resample at ``q_bar`` within
  the budget, without the check.
* Within the budget ``m_max`` (``max_dictionary_size``; by default ``"device"``,
  the cap the device holding the data affords in time and memory,
  :func:`~botorch_sketch.models.budget.device_dictionary_cap` of
  :func:`~botorch_sketch.models.budget.device_facts`; and the cap of
  ``memory_budget_gb``): ``s < 1`` where ``q_bar d_eff`` exceeds it, i.e. the
  leverage scores of the larger ridge ``ridge / s``.
* The regime guard: ``n <= exact_max_n``, or a draw keeping at least
  ``EXACT_FRACTION`` of the points within the budget, uses every point (the
  exact GP, at about the same cost); so does a draw that the device budget
  stopped short of the criterion when the device affords the exact posterior
  (:meth:`LeverageScorePolicy.exact_is_cheaper`) within ``exact_window``: by
  default (``"build"``) where its caches fit the time of a whole model build,
  for a model predicted a few times per fit (the cost of every later
  evaluation is then ``O(n^2)`` per point, as ``SingleTaskGP``'s); with
  ``"posterior"`` only where they cost no more than the sketch at the cap, for
  a model whose posterior an acquisition function evaluates thousands of times
  (the Ax strategies; :mod:`~botorch_sketch.models.budget`). With
  ``exact_when_affordable`` every point is used wherever the device budget
  affords the exact posterior, before any draw (a model rebuilt at every call
  and sampled jointly once, such as a trust region's).
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

from botorch_sketch.models.budget import (
    EXACT_WINDOWS,
    device_affords_exact,
    device_dictionary_cap,
    device_facts,
    exact_fits_memory,
)
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
    "DEFAULT_EXACT_WINDOW",
    "DEFAULT_MAX_DICTIONARY_SIZE",
    "DEFAULT_RESIDUAL_TOLERANCE",
    "DEVICE_BUDGET",
    "DictionaryPolicy",
    "LeverageScorePolicy",
    "ResidualTargetPolicy",
    "SketchModel",
]

#: ``max_dictionary_size`` that asks for the device-derived cap
#: (:func:`~botorch_sketch.models.budget.device_dictionary_cap`).
DEVICE_BUDGET = "device"

#: Default sketch budget ``m_max``: the device-derived cap.
DEFAULT_MAX_DICTIONARY_SIZE = DEVICE_BUDGET

#: Default ``exact_window`` of :class:`LeverageScorePolicy` (``NystromGP``'s;
#: the Ax strategies pass ``"posterior"``).
DEFAULT_EXACT_WINDOW = "build"

#: Default target of the mean Nyström residual over the noise.
DEFAULT_RESIDUAL_TOLERANCE = 0.05

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

    def cap(
        self,
        n: int,
        itemsize: int,
        d: int = 1,
        device: torch.device | str | None = None,
    ) -> int | None:
        r"""The largest dictionary for ``n`` points of ``itemsize`` bytes in ``d``
        dimensions on ``device`` (``None``: the CPU)."""
        return None

    def cap_for(self, X: Tensor) -> int | None:
        r"""The largest dictionary for the inputs ``X`` (``... x n x d``)."""
        return self.cap(X.shape[-2], X.element_size(), X.shape[-1], X.device)

    def resampling_ridge(self, ridge: float | None, noise: float) -> float | None:
        r"""The ridge a redraw scores at, given the last draw's (``None``: noise)."""
        return None

    def with_cap(self, cap: int | None) -> DictionaryPolicy:
        r"""The same policy with the fixed budget ``cap`` (for a data subset)."""
        return self


@dataclass(frozen=True)
class LeverageScorePolicy(DictionaryPolicy):
    r"""BKB's ridge-leverage-score dictionary, sized by an accuracy criterion
    within a budget (module docstring).

    Attributes:
        q_bar: Oversampling factor (``> 0``; the authors suggest 2 to 10), the
            start of the growth.
        max_dictionary_size: The budget ``m_max``: a positive int, ``"device"``
            (the device-derived cap) or ``None`` (none).
        memory_budget_gb: Optional memory budget of the ``n x m`` blocks (about
            four arrays): also caps ``m`` at ``budget / (4 n itemsize)``.
        exact_max_n: Up to this many points every point is in the dictionary.
        seed: Seed of every draw (``0 <= seed < 2^63``; ``None``: torch's
            generator).
        residual_tolerance: The target of ``rho``, the mean Nyström residual
            over the noise (``> 0``; ``None``: no criterion, one draw at
            ``q_bar``).
        evaluation_size: Points ``rho`` is measured on (``None``: all).
        max_growth_rounds: Largest number of growth redraws.
        exact_when_affordable: Use every point, without drawing, wherever the
            ``"device"`` budget affords the exact posterior
            (:meth:`affords_exact`).
        exact_window: Where the ``"device"`` budget affords the exact
            posterior (:data:`~botorch_sketch.models.budget.EXACT_WINDOWS`):
            ``"build"`` (its caches fit a model build's time; a model fitted
            and then predicted) or ``"posterior"`` (they cost no more than the
            capped sketch's; a model an acquisition function evaluates
            thousands of times per fit).
    """

    q_bar: float = 2.0
    max_dictionary_size: int | str | None = DEFAULT_MAX_DICTIONARY_SIZE
    memory_budget_gb: float | None = None
    exact_max_n: int = DEFAULT_EXACT_MAX_N
    seed: int | None = None
    residual_tolerance: float | None = DEFAULT_RESIDUAL_TOLERANCE
    evaluation_size: int | None = 2000
    max_growth_rounds: int = 6
    exact_when_affordable: bool = False
    exact_window: str = DEFAULT_EXACT_WINDOW

    def __post_init__(self) -> None:
        q_bar = self.q_bar
        if isinstance(q_bar, bool) or not (
            isinstance(q_bar, int | float) and q_bar > 0 and math.isfinite(q_bar)
        ):
            raise ValueError(f"q_bar must be a positive finite number, got {q_bar!r}.")
        object.__setattr__(self, "q_bar", float(q_bar))
        if self.max_dictionary_size != DEVICE_BUDGET:
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
        tol = self.residual_tolerance
        if tol is not None and (
            isinstance(tol, bool)
            or not (isinstance(tol, int | float) and tol > 0 and math.isfinite(tol))
        ):
            raise ValueError(
                "residual_tolerance must be a positive finite number or None, "
                f"got {tol!r}."
            )
        optional_positive_int(self.evaluation_size, "evaluation_size")
        check_bool_free_int(self.max_growth_rounds, "max_growth_rounds", minimum=0)
        if not isinstance(self.exact_when_affordable, bool):
            raise TypeError(
                "exact_when_affordable must be a bool, got "
                f"{self.exact_when_affordable!r}."
            )
        if self.exact_window not in EXACT_WINDOWS:
            raise ValueError(
                f"exact_window must be one of {EXACT_WINDOWS}, got "
                f"{self.exact_window!r}."
            )

    def cap(
        self,
        n: int,
        itemsize: int,
        d: int = 1,
        device: torch.device | str | None = None,
    ) -> int | None:
        r"""``max_dictionary_size`` (the device's cap for ``"device"``) combined
        with the memory budget's cap."""
        size = self.max_dictionary_size
        if size == DEVICE_BUDGET:
            dtype = torch.float64 if itemsize >= 8 else torch.float32
            facts = device_facts("cpu" if device is None else device, dtype)
            size = device_dictionary_cap(facts, n, d)
        return dictionary_cap(size, self.memory_budget_gb, n, itemsize)

    def with_cap(self, cap: int | None) -> LeverageScorePolicy:
        r"""This policy with budget ``cap`` and no memory budget."""
        return replace(self, max_dictionary_size=cap, memory_budget_gb=None)

    def resampling_ridge(self, ridge: float | None, noise: float) -> float | None:
        r""":func:`~botorch_sketch.models.nystrom_dictionary.resampling_ridge`."""
        return resampling_ridge(ridge, noise)

    def initial(self, model: SketchModel, every_point: bool = False) -> SketchDraw:
        r"""Every point (guard), BKB's resampling of a warm start, else BLESS.

        Every point also when the draw keeps at least ``EXACT_FRACTION`` of them
        within the budget and their exact posterior fits the memory rule
        (:meth:`exact_fits`).
        """
        X = model.compute_inputs
        n = model.num_training_points
        cap = self.cap_for(X)
        every = SketchDraw(torch.arange(n, device=X.device), None, False, cap=cap)
        if every_point:
            return every._replace(reason="dictionary='all'")
        if uses_every_point("auto", n, self.exact_max_n, cap):
            return every._replace(reason=f"n <= exact_max_n = {self.exact_max_n}")
        if self.exact_when_affordable and self.affords_exact(X):
            return every._replace(reason="the device affords the exact posterior")
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
        if keeps_most(draw.indices.numel(), n, cap) and self.exact_fits(X):
            return every._replace(reason="the draw kept most points")
        if self.exact_is_cheaper(draw, X):
            rho = "unchecked" if draw.residual is None else f"{draw.residual:.3g}"
            afford = (
                "its caches fit a model build's time"
                if self.exact_window == "build"
                else "it costs no more than the sketch at the cap"
            )
            return every._replace(
                reason=f"the capped sketch's mean Nystrom residual ({rho} noise "
                f"variances) misses residual_tolerance; the exact posterior: {afford}"
            )
        return draw

    @property
    def device_budgeted(self) -> bool:
        r"""Whether the budget is the device's: ``max_dictionary_size="device"``
        and no ``memory_budget_gb``."""
        budget = self.max_dictionary_size
        return budget == DEVICE_BUDGET and self.memory_budget_gb is None

    def affords_exact(self, X: Tensor) -> bool:
        r"""Whether the ``"device"`` budget (no memory budget) affords every
        point's exact posterior on ``X`` (``n x d``): its cost ``E(n)`` at most
        the sketch's at the device cap and its ``n x n`` blocks fitting
        (:func:`~botorch_sketch.models.budget.device_affords_exact`; one CPU
        thread: about 2,900 points at ``d = 10`` in the ``"posterior"``
        window, 5,100 in the ``"build"`` one). Never under a user's budget."""
        if not self.device_budgeted:
            return False
        n, d = X.shape[-2], X.shape[-1]
        facts = device_facts(X.device, X.dtype)
        cap = device_dictionary_cap(facts, n, d)
        return device_affords_exact(facts, n, d, cap, window=self.exact_window)

    def exact_fits(self, X: Tensor) -> bool:
        r"""Whether every point's exact posterior fits the device's memory rule
        (:func:`~botorch_sketch.models.budget.exact_fits_memory`) under the
        ``"device"`` budget; always under a given budget, which bounds ``n``
        already (the shortcut needs ``n <= cap``)."""
        if not self.device_budgeted:
            return True
        return exact_fits_memory(device_facts(X.device, X.dtype), X.shape[-2])

    def exact_is_cheaper(self, draw: SketchDraw, X: Tensor) -> bool:
        r"""Whether every point replaces a draw the device budget stopped short.

        So it does when the budget is ``"device"`` (no memory budget), the budget
        bound the draw, the draw misses ``residual_tolerance`` (or was not
        checked: a redraw) and the device affords the exact posterior in
        ``exact_window`` (:func:`~botorch_sketch.models.budget.
        device_affords_exact`).
        """
        if not self.device_budgeted or not draw.capped or draw.cap is None:
            return False
        tol, rho = self.residual_tolerance, draw.residual
        if tol is not None and rho is not None and rho <= tol:
            return False
        n, d = X.shape[-2], X.shape[-1]
        facts = device_facts(X.device, X.dtype)
        if not device_affords_exact(facts, n, d, draw.cap, window=self.exact_window):
            return False
        logger.info(
            "NystromGP dictionary: every point (the exact GP) instead of %d of %d "
            "(the budget bound the draw; mean Nystrom residual %s noise "
            "variances): the device affords its posterior (exact_window=%r).",
            draw.indices.numel(),
            n,
            "unchecked" if rho is None else f"{rho:.3g}",
            self.exact_window,
        )
        return True

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
        r"""BLESS at ``q_bar``, redrawn at doubled ``q_bar`` until ``rho`` is met.

        Without ``residual_tolerance``: one BLESS draw at ``q_bar``. Each check
        costs ``O(k m^2 + m^3)`` for ``k <= evaluation_size`` points.
        """
        X = model.compute_inputs
        cap = self.cap_for(X)
        if self.residual_tolerance is None:
            return self.bless(model, self.q_bar, cap)
        n = model.num_training_points
        eval_X = X
        if self.evaluation_size is not None and n > self.evaluation_size:
            order = torch.argsort(row_uniforms(n, self.seed, stream=2), stable=True)
            rows = torch.sort(order[: self.evaluation_size]).values.to(X.device)
            eval_X = X[..., rows, :]
        q_bar, rounds = self.q_bar, 0
        while True:
            draw = self.bless(model, q_bar, cap)
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
        if rho > self.residual_tolerance and not draw.capped:
            logger.warning(
                "NystromGP: the dictionary of %d points leaves a mean Nystrom "
                "residual of %.3g noise variances (target %.3g) after %d growth "
                "rounds.",
                size,
                rho,
                self.residual_tolerance,
                rounds,
            )
        logger.info(
            "NystromGP dictionary: %d of %d points (cap %s, q_bar %.3g), mean "
            "Nystrom residual %.3g noise variances (target %.3g).",
            size,
            n,
            cap,
            q_bar,
            rho,
            self.residual_tolerance,
        )
        return draw

    def bless(self, model: SketchModel, q_bar: float, cap: int | None) -> SketchDraw:
        r"""BLESS at the current hyperparameters and ``q_bar``, within ``cap``."""
        draw = draw_bless(
            model.compute_inputs,
            model.covar_module,
            model.likelihood.noise,
            q_bar,
            cap,
            model.next_generator,
        )
        return draw._replace(cap=cap)

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
        cap = self.cap_for(X)
        draw = draw_dictionary(
            union_scores(scores, input_rows(X), self.q_bar),
            cap,
            _mean_noise(model),
            ridge,
            generator=generator,
            uniforms=uniforms,
        )
        if draw.fallback:
            logger.warning("Dictionary draw was empty; kept the most uncertain point.")
        return draw._replace(cap=cap)


@dataclass(frozen=True)
class ResidualTargetPolicy(LeverageScorePolicy):
    r"""A :class:`LeverageScorePolicy` whose accuracy criterion is required.

    The default policy already grows its dictionary until the mean Nyström
    residual over the noise is at most ``residual_tolerance``; this one rejects
    ``residual_tolerance=None``.
    """

    def __post_init__(self) -> None:
        if self.residual_tolerance is None:
            raise ValueError("residual_tolerance must be a positive finite number.")
        super().__post_init__()


def _mean_noise(model: SketchModel) -> float:
    return float(model.likelihood.noise.mean())
