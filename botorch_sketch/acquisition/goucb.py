r"""GO-UCB's exact acquisition ``alpha_t(x) = max_{w in Ball_t} f(x; w)`` (Algorithm 1).

The inner maximum over the confidence ellipsoid is
:func:`~botorch_sketch.goucb.exact.ellipsoid_inner_max` (its module docstring gives
the parametrization and the start at the linearized maximizer). The outer
maximization over ``x`` is BoTorch's ``optimize_acqf``: by Danskin's theorem
``d/dx max_w f(x; w) = d/dx f(x; w_opt)`` with ``w_opt`` held fixed, which is what
:class:`GOUCBExactUCB` differentiates.
"""

from __future__ import annotations

import math

from botorch.acquisition.analytic import AnalyticAcquisitionFunction
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from botorch_sketch.goucb.exact import ellipsoid_inner_max
from botorch_sketch.goucb.network import rowwise_values_and_jacobian
from botorch_sketch.models.goucb import GOUCBModel


class GOUCBExactUCB(AnalyticAcquisitionFunction):
    r"""GO-UCB's exact acquisition ``alpha_t(x) = max_{w in Ball_t} f(x; w)``.

    For a :class:`~botorch_sketch.models.goucb.GOUCBModel`; values are returned in
    original outcome units (through the model's outcome transform). Differentiable
    in ``X`` by Danskin's theorem (see the module docstring). q = 1 only.

    Example:
        >>> acqf = GOUCBExactUCB(model, beta=model.beta_t())
        >>> x, _ = optimize_acqf(acqf, bounds, q=1, num_restarts=4, raw_samples=256)
    """

    def __init__(self, model, beta: float, steps: int = 20, step_size: float = 0.2):
        if not isinstance(model, GOUCBModel):
            raise TypeError(
                f"GOUCBExactUCB needs a GOUCBModel, got {type(model).__name__}."
            )
        super().__init__(model=model)
        self.beta = float(beta)
        self.steps = steps
        self.step_size = step_size
        if not (self.beta >= 0 and math.isfinite(self.beta)):
            raise ValueError(f"beta must be a finite number >= 0, got {beta!r}.")

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        r"""Evaluate on ``batch x 1 x d`` inputs; returns ``batch`` values."""
        model = self.model
        model.eval()
        X_tf = model.transform_inputs(X)
        batch = X_tf.shape[:-2]
        flat = X_tf.reshape(-1, X_tf.shape[-1])
        _, W = ellipsoid_inner_max(
            model.network,
            model.layout,
            model.confidence_set,
            self.beta,
            flat,
            steps=self.steps,
            step_size=self.step_size,
        )
        values, _ = rowwise_values_and_jacobian(model.network, model.layout, W, flat)
        values = values.unsqueeze(-1)
        if hasattr(model, "outcome_transform"):
            values, _ = model.outcome_transform.untransform(values)
        return values.squeeze(-1).reshape(batch)
