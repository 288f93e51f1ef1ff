r"""L-BFGS-B's gradient tolerance for the batch UCB's greedy steps, in model units.

Each greedy step of a BBKB batch on a box maximises the batch UCB with BoTorch's
``optimize_acqf`` (batched L-BFGS-B). SciPy's default stopping rule there is an
absolute projected-gradient tolerance ``pgtol = 1e-5`` (with ``ftol ~ 2.2e-9``),
whatever the units of ``x`` and of the acquisition value. A batch of ``k`` points
is ``k`` such optimisations, and near a local maximum of a
``sqrt``-of-variance surface the last decades of that tolerance cost most of the
iterations without moving the point in any way that matters.

Here the tolerance is relative. For the UCB ``u(x)`` in outcome units, with the
prior standard deviation ``sigma_0`` of the outcome (the kernel's diagonal after
undoing an outcome transform) and the widest side ``w`` of the box,

    pgtol = rho * sigma_0 / w.                                           (1)

Near a maximum with lengthscale ``l`` (as a fraction of the box), the curvature
of ``u`` is about ``sigma_0 / (l w)^2``; a projected gradient below (1) then puts
the point within about ``rho l^2`` of the box's width of the maximum, at a value
about ``rho^2 l^2 sigma_0 / 2`` below it. ``rho = 1e-2`` (the default) keeps the
point to a hundredth of the box and the value to ``5e-5 sigma_0`` in that
regime. Measurements (batches from saved states, whole runs) are in
``benchmarks/results/bbkb_step_tolerance.md`` and ``large_budget.md``.

(1) does not depend on how the user scales ``x`` or ``y``: scaling the outcome by
``c`` scales ``u``, its gradient and ``sigma_0`` by ``c``; stretching the box by
``c`` divides the gradient and (1) by ``c``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from botorch.generation.gen import get_reasons_against_fast_path
from botorch.models.model import Model
from botorch.optim.optimize import INIT_OPTION_KEYS
from torch import Tensor

from botorch_sketch.models.validation import check_positive_number

__all__ = [
    "DEFAULT_GRADIENT_TOLERANCE",
    "outcome_prior_sd",
    "step_gradient_tolerance",
    "with_gradient_tolerance",
]

#: Default relative tolerance ``rho`` of Eq. (1) in the module docstring.
DEFAULT_GRADIENT_TOLERANCE = 1e-2
#: L-BFGS-B option names that already fix the gradient tolerance (a caller's
#: choice is kept).
_GRADIENT_KEYS = ("pgtol", "gtol")
#: Options BoTorch's ``gen_candidates_scipy`` keeps from SciPy (besides the
#: initialisation's ``INIT_OPTION_KEYS``, which ``optimize_acqf`` keeps itself).
_NOT_MINIMIZE_OPTIONS = (
    "method",
    "callback",
    "with_grad",
    "max_optimization_problem_aggregation_size",
)


def outcome_prior_sd(model: Model, x: Tensor) -> float:
    r"""The prior standard deviation of the outcome at ``x``, in outcome units.

    ``sqrt(k(x, x))`` of the model's kernel at the transformed point, scaled back
    through the model's outcome transform when it has one that maps variances
    (e.g. ``Standardize``); in the model's units when it has none, or one that
    cannot (e.g. ``Log``).

    Args:
        model: A single-output GP with ``covar_module`` (e.g. ``NystromGP``).
        x: A ``d`` point in the model's input space (before its input transform).

    Returns:
        ``sigma_0 > 0``, a Python float (1.0 if the kernel's diagonal is not
        positive and finite).
    """
    with torch.no_grad():
        dtype = getattr(model, "compute_dtype", x.dtype)
        Xt = model.transform_inputs(x.reshape(1, -1).to(dtype))
        var = model.covar_module(Xt, diag=True).reshape(1, 1)
        transform = getattr(model, "outcome_transform", None)
        if transform is not None:
            transform.eval()
            try:
                _, var = transform.untransform(Y=torch.zeros_like(var), Yvar=var)
            except NotImplementedError:
                pass
    value = float(var.reshape(-1)[0])
    return math.sqrt(value) if math.isfinite(value) and value > 0 else 1.0


def step_gradient_tolerance(model: Model, bounds: Tensor, relative: float) -> float:
    r"""``pgtol`` of Eq. (1): ``relative * sigma_0 / w`` on the ``2 x d`` box.

    ``sigma_0`` is :func:`outcome_prior_sd` at the box's centre, ``w`` the widest
    side of ``bounds`` (in the model's input units).

    Args:
        model: The batch UCB's model.
        bounds: ``2 x d`` box bounds.
        relative: ``rho > 0``.

    Returns:
        The absolute projected-gradient tolerance, a positive float.
    """
    check_positive_number(relative, "gradient_tolerance")
    width = float((bounds[1] - bounds[0]).max())
    sd = outcome_prior_sd(model, bounds.mean(dim=0))
    return relative * sd / (width if width > 0 else 1.0)


def with_gradient_tolerance(
    options: dict[str, Any] | None,
    model: Model,
    bounds: Tensor,
    relative: float | None,
) -> dict[str, Any] | None:
    r"""``optimize_acqf`` options with ``pgtol`` from Eq. (1) added.

    ``options`` are returned unchanged when ``relative`` is ``None`` (SciPy's
    absolute default) or when they already set ``pgtol`` / ``gtol``.

    Args:
        options: The caller's ``optimize_acqf`` options (not modified).
        model: The batch UCB's model.
        bounds: ``2 x d`` box bounds.
        relative: ``rho``, or ``None``.

    Returns:
        A new options dict, or ``options`` itself.
    """
    if relative is None or any(key in (options or {}) for key in _GRADIENT_KEYS):
        return options
    tolerance = step_gradient_tolerance(model, bounds, relative)
    return {**(options or {}), _gradient_key(options or {}): tolerance}


def _gradient_key(options: dict[str, Any]) -> str:
    r"""``"pgtol"`` where BoTorch will run its batched L-BFGS-B (its name there),
    ``"gtol"`` where it falls back to ``scipy.optimize.minimize`` (e.g. a SciPy
    outside the batched port's range, or options the port does not take)."""
    minimize_options = {
        key: value
        for key, value in options.items()
        if key not in INIT_OPTION_KEYS and key not in _NOT_MINIMIZE_OPTIONS
    }
    reasons = get_reasons_against_fast_path(
        method=options.get("method", "L-BFGS-B"),
        with_grad=options.get("with_grad", True),
        minimize_options={**minimize_options, "pgtol": 0.0},
        timeout_sec=None,
    )
    return "gtol" if reasons else "pgtol"
