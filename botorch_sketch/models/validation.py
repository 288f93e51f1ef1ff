r"""Input checks shared by the models: errors that name the problem.

Every model checks its data where they arrive (constructor, conditioning,
posterior), so that bad input fails at the call with a ``ValueError`` that names
the argument and the problem (shape, NaN/Inf, dtype, emptiness, sign), and never
later, deep inside a factorisation, with a message about something else.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "MAX_SEED",
    "check_bool_free_int",
    "check_batch_shape",
    "check_finite",
    "check_nonnegative_number",
    "check_positive_number",
    "check_seed",
    "optional_positive_int",
    "validate_candidates",
    "validate_new_observations",
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


def _reject_bool(value: object, name: str) -> None:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got the bool {value!r}.")


def optional_positive_int(value: int | None, name: str) -> int | None:
    r"""``value`` if it is ``None`` or a positive int, else an error naming ``name``.

    A bool is not an int here (``TypeError``); a non-positive or non-int value
    gives a ``ValueError``.
    """
    _reject_bool(value, name)
    if value is not None and not (isinstance(value, int) and value > 0):
        raise ValueError(f"{name} must be a positive int or None, got {value!r}.")
    return value


def check_bool_free_int(value: int, name: str, minimum: int = 0) -> int:
    r"""``value`` if it is an int (not a bool) ``>= minimum``, else an error."""
    _reject_bool(value, name)
    if not (isinstance(value, int) and value >= minimum):
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}.")
    return value


def check_nonnegative_number(value: float, name: str) -> float:
    r"""``value`` if it is a finite real number ``>= 0`` (not a bool), else an error."""
    _reject_bool(value, name)
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
    return value


def check_positive_number(value: float, name: str) -> float:
    r"""``value`` if it is a finite real number ``> 0``, else a ``ValueError``
    (a bool included: ``True`` is not a tolerance)."""
    if isinstance(value, bool) or not (
        isinstance(value, int | float) and math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}.")
    return value


def check_fraction(value: float, name: str) -> float:
    r"""``value`` if it is a real number in ``[0, 1]`` (not a bool), else an error."""
    if isinstance(value, bool) or not (
        isinstance(value, int | float) and 0.0 <= value <= 1.0
    ):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}.")
    return value


def check_choice(value: object, choices: tuple, name: str) -> object:
    r"""``value`` if it is one of ``choices``, else an error naming them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}.")
    return value


#: Seeds are ints in ``[0, MAX_SEED]``: the range NumPy's ``np.random.seed``
#: accepts (torch's generators and Sobol take a wider one), so that a seed that
#: works in one entry point works in every other.
MAX_SEED = 2**32 - 1


def check_seed(seed: int | None, name: str = "seed") -> int | None:
    r"""``seed`` if it is ``None`` or an int in ``[0, 2^32 - 1]``, else an error.

    ``TypeError`` for a non-int (bools, floats, strings), ``ValueError`` for an
    int out of NumPy's seed range.
    """
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"{name} must be an int or None, got {seed!r}.")
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(
            f"{name} must be in NumPy's seed range [0, {MAX_SEED}], got {seed!r}."
        )
    return seed


def check_batch_shape(X: Tensor, batch_shape: torch.Size) -> None:
    r"""``RuntimeError`` (BoTorch's message) unless ``X``'s batch shape broadcasts.

    ``X`` is ``batch_shape' x n x d``; ``batch_shape'`` must broadcast with the
    model's ``batch_shape`` (it may add leading dimensions), as BoTorch's
    ``add_output_dim`` requires.
    """
    if len(X.shape[:-2]) == 0 or len(batch_shape) == 0:
        return
    try:
        torch.broadcast_shapes(X.shape[:-2], batch_shape)
    except RuntimeError:
        raise RuntimeError(
            "The trailing batch dimensions of X must match the trailing "
            f"batch dimensions of the training inputs. Got {X.shape=} "
            f"and original_batch_shape={batch_shape}."
        ) from None


def validate_candidates(X: Tensor, d: int, num_samples: int) -> None:
    r"""Check ``A x d`` candidates and a positive ``num_samples`` (``ValueError``)."""
    check_finite(X, "X")
    if X.dim() != 2 or X.shape[-1] != d:
        raise ValueError(f"X must be A x d with d = {d}, got {tuple(X.shape)}.")
    if isinstance(num_samples, bool) or not (
        isinstance(num_samples, int) and num_samples > 0
    ):
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}.")
