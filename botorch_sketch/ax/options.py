r"""Validation of the named strategies' options, before any trial exists.

Every option a strategy takes is checked here, in ``get_generation_strategy``: a
wrong type or value raises a ``ValueError`` that names the option, what it must
be and what was given. What depends on the experiment (the search space's
dimension, the optimization config) is checked at every generation call by
:class:`~botorch_sketch.ax.checks.ExperimentCheck` and
:class:`~botorch_sketch.ax.checks.ExperimentGuard`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from botorch_sketch.ax.turbo import (
    INCUMBENTS,
    ONE_HOT_LENGTHSCALES,
    REGION_FITS,
    RESTARTS,
    multi_region_options,
)
from botorch_sketch.bbkb.config import RESAMPLING_MODES
from botorch_sketch.models.budget import EXACT_WINDOWS
from botorch_sketch.models.validation import check_seed
from botorch_sketch.trust_region.candidates import THOMPSON_SAMPLERS

__all__ = ["validate_options"]

Validator = Callable[[Any, str], None]


def _positive_int(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a positive int, got {value!r}.")


def _non_negative_int(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a non-negative int, got {value!r}.")


def _seed(value: Any, key: str) -> None:
    # The package's one seed rule (models.validation.check_seed); an option's
    # errors are all ValueErrors.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an int, got {value!r}.")
    check_seed(value, key)


def _finite(low: float, strict: bool) -> Validator:
    def check(value: Any, key: str) -> None:
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and (value > low if strict else value >= low)
        )
        if not ok:
            sign = ">" if strict else ">="
            raise ValueError(
                f"{key} must be a finite number {sign} {low}, got {value!r}."
            )

    return check


def _fraction(value: Any, key: str) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0.0 <= value <= 1.0
    )
    if not ok:
        raise ValueError(f"{key} must be a number in [0, 1], got {value!r}.")


def _boolean(value: Any, key: str) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be True or False, got {value!r}.")


def _candidate_set(value: Any, key: str) -> None:
    try:
        rows = torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"{key} must be a numeric A x d table (a tensor or equal-length rows), "
            f"got {type(value).__name__}: {err}"
        ) from err
    if rows.dim() != 2 or rows.shape[0] == 0 or rows.shape[1] == 0:
        raise ValueError(
            f"{key} must be a non-empty A x d table, got shape {tuple(rows.shape)}."
        )
    if not bool(torch.isfinite(rows).all()):
        raise ValueError(f"{key} contains NaN or Inf.")


def _one_of(*choices: str) -> Validator:
    def check(value: Any, key: str) -> None:
        if value not in choices:
            raise ValueError(f"{key} must be one of {choices}, got {value!r}.")

    return check


def _word_or(word: str, check: Validator) -> Validator:
    def word_or(value: Any, key: str) -> None:
        if value != word:
            check(value, key)

    return word_or


def _device_or(check: Validator) -> Validator:
    return _word_or("device", check)


def _optional(check: Validator) -> Validator:
    def optional(value: Any, key: str) -> None:
        if value is not None:
            check(value, key)

    return optional


#: How each option is checked (the options of every strategy are listed here).
VALIDATORS: dict[str, Validator] = {
    "initialization_budget": _positive_int,
    "num_restarts": _positive_int,
    "raw_samples": _positive_int,
    "seed": _seed,
    "beta": _optional(_finite(0.0, strict=False)),
    "alpha": _optional(_finite(0.0, strict=False)),
    "C": _finite(1.0, strict=False),
    "q_bar": _finite(0.0, strict=True),
    "max_dictionary_size": _optional(_device_or(_positive_int)),
    "fit_subset_size": _optional(_device_or(_positive_int)),
    "exact_max_n": _non_negative_int,
    "exact_window": _one_of(*EXACT_WINDOWS),
    "refit_growth": _finite(0.0, strict=False),
    "refit_tolerance": _finite(0.0, strict=False),
    "refit_max_iterations": _positive_int,
    "fit_max_iterations": _optional(_positive_int),
    "fit_tolerance": _optional(_finite(0.0, strict=True)),
    "refine_iterations": _device_or(_non_negative_int),
    "max_batch_size": _optional(_positive_int),
    "min_batch_size": _positive_int,
    "candidate_set": _optional(_candidate_set),
    "allow_repeats": _boolean,
    "reuse_restarts": _boolean,
    "restart_maxiter": _optional(_positive_int),
    "gradient_tolerance": _optional(_finite(0.0, strict=True)),
    "thompson_fill": _fraction,
    "basin_share": _fraction,
    "stall_basin_share": _optional(_fraction),
    "paper_phases": _boolean,
    "subset_size": _positive_int,
    "lambda_": _finite(0.0, strict=True),
    "oracle_steps": _positive_int,
    "lam": _finite(0.0, strict=True),
    "learn": _boolean,
    "lengthscale": _finite(0.0, strict=True),
    "standardize": _boolean,
    "schedule": _one_of("paper", "reference_code"),
    "resampling": _one_of(*RESAMPLING_MODES),
    # turbo-bkb (botorch_sketch.ax.turbo; their order is checked there)
    "batch_size": _optional(_positive_int),
    "length_init": _finite(0.0, strict=True),
    "length_min": _finite(0.0, strict=True),
    "length_max": _finite(0.0, strict=True),
    "success_tolerance": _positive_int,
    "failure_tolerance": _optional(_positive_int),
    "improvement_tolerance": _fraction,
    "noise_tolerance": _finite(0.0, strict=False),
    "num_candidates": _optional(_positive_int),
    "thompson": _one_of(*THOMPSON_SAMPLERS),
    "incumbent": _one_of(*INCUMBENTS),
    "region_fit": _one_of(*REGION_FITS),
    "restart": _one_of(*RESTARTS),
    "one_hot_lengthscales": _one_of(*ONE_HOT_LENGTHSCALES),
    "num_regions": _positive_int,
    "region_max_points": _optional(_word_or("auto", _positive_int)),
}


def validate_options(options: Mapping[str, Any]) -> None:
    r"""Check every option and the ones that constrain each other.

    Raises:
        ValueError: Naming the option and the problem.
    """
    for key, value in options.items():
        VALIDATORS[key](value, key)
    if options.get("alpha") is not None and options.get("beta") is not None:
        raise ValueError(
            "give either alpha (BBKB's width, RLS units) or beta (BoTorch's UCB "
            f"beta), not both; got alpha={options['alpha']!r}, "
            f"beta={options['beta']!r}."
        )
    cap = options.get("max_batch_size")
    if cap is not None and options["min_batch_size"] > cap:
        raise ValueError(
            f"min_batch_size={options['min_batch_size']!r} exceeds "
            f"max_batch_size={cap!r}."
        )
    if options.get("num_regions", 1) > 1:
        multi_region_options(options)
    if "subset_size" in options:
        size, n0 = options["subset_size"], options["initialization_budget"]
        if size <= n0 + 1:
            raise ValueError(
                f"subset_size must be an int > initialization_budget + 1 = {n0 + 1} "
                f"(the Sobol points and the newest point are always in), got {size!r}."
            )
