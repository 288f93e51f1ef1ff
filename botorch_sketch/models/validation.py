r"""Input checks shared by the models: errors that name the problem.

Every model checks its data where they arrive (constructor, conditioning,
posterior), so that bad input fails at the call with a ``ValueError`` that names
the argument and the problem (shape, NaN/Inf, dtype, emptiness, sign), and never
later, deep inside a factorisation, with a message about something else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "check_finite",
    "optional_positive_int",
    "validate_new_observations",
    "validate_sketch_options",
    "validate_training_data",
]


def check_finite(T: Tensor, name: str) -> None:
    r"""Raise ``ValueError`` unless ``T`` is a floating-point tensor without NaN/Inf."""
    if not torch.is_tensor(T):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(T).__name__}.")
    if not T.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {T.dtype}.")
    if torch.isnan(T).any():
        raise ValueError(f"{name} contains NaN.")
    if torch.isinf(T).any():
        raise ValueError(f"{name} contains Inf.")


def validate_training_data(
    X: Tensor, Y: Tensor, Yvar: Tensor | None, name: str = "train"
) -> None:
    r"""Raise ``ValueError`` naming the problem (shape, NaN/Inf, dtype, emptiness)."""
    check_finite(X, f"{name}_X")
    check_finite(Y, f"{name}_Y")
    if X.dim() < 2:
        raise ValueError(f"{name}_X must be batch_shape x n x d, got {tuple(X.shape)}.")
    if Y.dim() != X.dim():
        raise ValueError(
            f"{name}_Y must be batch_shape x n x m with the same number of dimensions "
            f"as {name}_X; got {name}_X {tuple(X.shape)} and {name}_Y {tuple(Y.shape)}."
        )
    if X.shape[-2] == 0 or X.shape[-1] == 0 or Y.shape[-1] == 0:
        raise ValueError(
            f"empty data: {name}_X {tuple(X.shape)}, {name}_Y {tuple(Y.shape)}."
        )
    if Y.shape[-2] != X.shape[-2]:
        raise ValueError(
            f"{name}_X has {X.shape[-2]} points but {name}_Y has {Y.shape[-2]}."
        )
    if X.dtype != Y.dtype:
        raise ValueError(f"{name}_X is {X.dtype} but {name}_Y is {Y.dtype}.")
    if Yvar is not None:
        check_finite(Yvar, f"{name}_Yvar")
        if Yvar.shape != Y.shape:
            raise ValueError(
                f"{name}_Yvar must have the shape of {name}_Y {tuple(Y.shape)}, "
                f"got {tuple(Yvar.shape)}."
            )
        if (Yvar < 0).any():
            raise ValueError(f"{name}_Yvar must be non-negative.")


def validate_new_observations(
    X: Tensor, Y: Tensor, noise: Tensor | None, d: int, m: int
) -> None:
    r"""Check data for ``condition_on_observations``; ``ValueError`` names the problem.

    ``Y`` may carry leading sample dimensions (``fantasize``), so only its last
    two dimensions are matched against ``X``.
    """
    check_finite(X, "X")
    check_finite(Y, "Y")
    if X.dim() < 2 or X.shape[-1] != d:
        raise ValueError(f"X must be batch_shape x n x {d}, got {tuple(X.shape)}.")
    if Y.dim() < 2 or Y.shape[-1] != m:
        raise ValueError(
            f"Y must be batch_shape x n x {m} (the model has {m} output(s)), got "
            f"{tuple(Y.shape)}."
        )
    if Y.shape[-2] != X.shape[-2]:
        raise ValueError(f"X has {X.shape[-2]} points but Y has {Y.shape[-2]}.")
    if X.shape[-2] == 0:
        raise ValueError("empty data: X and Y have no points.")
    if noise is not None:
        check_finite(noise, "noise")
        if noise.dim() < 2 or noise.shape[-2:] != Y.shape[-2:]:
            raise ValueError(
                f"noise must be batch_shape x n x m like Y {tuple(Y.shape)}, got "
                f"{tuple(noise.shape)}."
            )
        if (noise < 0).any():
            raise ValueError("noise must be non-negative.")


def optional_positive_int(value: int | None, name: str) -> int | None:
    r"""``value`` if it is ``None`` or a positive int, else ``ValueError``."""
    if value is not None and not (isinstance(value, int) and value > 0):
        raise ValueError(f"{name} must be a positive int or None, got {value!r}.")
    return value


def validate_sketch_options(
    *,
    q_bar: float,
    objective: str,
    objectives: Sequence[str],
    dictionary_refits: int,
    refit_growth: float,
    refit_tolerance: float,
    refit_max_iterations: int | None,
    exact_max_n: int,
    fit_subset_size: int | None,
    max_dictionary_size: int | None,
    memory_budget_gb: float | None,
) -> None:
    r"""Check ``NystromGP``'s sketch options; ``ValueError`` names the first bad one."""
    if not (isinstance(q_bar, int | float) and q_bar > 0 and math.isfinite(q_bar)):
        raise ValueError(f"q_bar must be a positive finite number, got {q_bar!r}.")
    if objective not in objectives:
        raise ValueError(f"objective must be one of {objectives}, got {objective!r}.")
    if not (isinstance(dictionary_refits, int) and dictionary_refits >= 0):
        raise ValueError(
            f"dictionary_refits must be a non-negative int, got {dictionary_refits!r}."
        )
    for name, value in (
        ("refit_growth", refit_growth),
        ("refit_tolerance", refit_tolerance),
    ):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
    optional_positive_int(refit_max_iterations, "refit_max_iterations")
    if not (isinstance(exact_max_n, int) and exact_max_n >= 0):
        raise ValueError(f"exact_max_n must be an int >= 0, got {exact_max_n!r}.")
    optional_positive_int(fit_subset_size, "fit_subset_size")
    optional_positive_int(max_dictionary_size, "max_dictionary_size")
    if memory_budget_gb is not None and not (
        isinstance(memory_budget_gb, int | float) and memory_budget_gb > 0
    ):
        raise ValueError(
            f"memory_budget_gb must be a positive number, got {memory_budget_gb!r}."
        )
