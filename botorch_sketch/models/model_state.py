r"""What a sketched GP saves and restores: its state dict and its warm start.

:class:`SketchModelStateMixin` gives a :class:`~botorch_sketch.models.NystromGP`

- ``load_state_dict`` as ``SingleTaskGP``'s (a state whose outcome-transform
  statistics differ re-expresses the stored targets in the loaded units);
- the dictionary as the module's extra state (its transformed inputs, located
  among the training inputs on loading, :mod:`~botorch_sketch.models.extra_state`);
- :meth:`~SketchModelStateMixin.sketch_state`, what the next model of a loop
  starts from (:class:`~botorch_sketch.models.sketch_state.SketchState`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from torch import Tensor

from botorch_sketch.models.extra_state import with_extra_state
from botorch_sketch.models.nystrom_dictionary import input_rows, locate_rows
from botorch_sketch.models.sketch_state import (
    SketchState,
    hyperparameter_state,
    row_keys,
)

logger = logging.getLogger(__name__)

__all__ = [
    "SketchModelStateMixin",
    "changes_transform",
    "set_targets_and_noise",
    "targets_and_noise",
]


def changes_transform(model: torch.nn.Module, state_dict: Any) -> bool:
    r"""Whether ``state_dict`` holds outcome-transform values unlike the model's."""
    if getattr(model, "outcome_transform", None) is None:
        return False
    current = model.state_dict()
    return any(
        key.startswith("outcome_transform.")
        and torch.is_tensor(value)
        and key in current
        and not torch.equal(value.to(current[key]), current[key])
        for key, value in state_dict.items()
    )


def targets_and_noise(model: Any) -> tuple[Tensor, Tensor | None]:
    r"""Transformed targets (and fixed noises) as ``batch_shape x n x m``."""

    def io_layout(T: Tensor) -> Tensor:
        return T.unsqueeze(-1) if model.num_outputs == 1 else T.transpose(-1, -2)

    fixed = isinstance(model.likelihood, FixedNoiseGaussianLikelihood)
    Yvar = io_layout(model.likelihood.noise) if fixed else None
    return io_layout(model.compute_targets), Yvar


def set_targets_and_noise(model: Any, Y: Tensor, Yvar: Tensor | None) -> None:
    r"""Store untransformed ``batch_shape x n x m`` targets (and fixed noises)
    transformed by the model's outcome transform, in evaluation mode."""

    def aug_layout(T: Tensor) -> Tensor:
        return T.squeeze(-1) if model.num_outputs == 1 else T.transpose(-1, -2)

    model.outcome_transform.eval()
    with torch.no_grad():
        Y, Yvar = model.outcome_transform(Y, Yvar)
    model.train_targets = aug_layout(Y)
    if Yvar is not None:
        model.likelihood.noise = aug_layout(Yvar)


class SketchModelStateMixin:
    r"""``load_state_dict``, the dictionary as extra state, and ``sketch_state``.

    The model provides its data (``_train_X``), its dictionary
    (``dictionary_indices``, ``inducing_points``; ``_dictionary_indices`` is
    ``None`` until drawn), ``num_draws``, ``sketch_ridge`` and ``fit_record``.
    """

    _train_X: Tensor
    _dictionary_indices: Tensor | None
    _cache: dict[str, Any] | None

    def load_state_dict(
        self,
        state_dict: Any,
        strict: bool = True,
        keep_transforms: bool = True,
        assign: bool = False,
    ) -> Any:
        r"""Load hyperparameters and the dictionary; the training data stay.

        As ``SingleTaskGP``'s: with ``keep_transforms=True`` and an outcome
        transform whose statistics the state changes (a model built on new data
        loading an old model's state), the stored targets (and fixed noises) are
        untransformed with the current statistics and re-transformed with the
        loaded ones, so predictions stay in the data's units. The dictionary
        travels as extra state (:meth:`get_extra_state`); a state without it
        keeps the current dictionary.
        """
        self._cache = None
        state_dict = with_extra_state(self, state_dict)
        if not (keep_transforms and changes_transform(self, state_dict)):
            return torch.nn.Module.load_state_dict(
                self, state_dict, strict=strict, assign=assign
            )
        with torch.no_grad():
            Y, Yvar = self.outcome_transform.untransform(*targets_and_noise(self))
        out = torch.nn.Module.load_state_dict(
            self, state_dict, strict=strict, assign=assign
        )
        set_targets_and_noise(self, Y, Yvar)
        return out

    def get_extra_state(self) -> Tensor:
        r"""The dictionary, as its transformed training inputs.

        ``batch_shape x (m) x |S| x d``, stored by ``state_dict()`` under
        ``"_extra_state"``. A tensor (not indices into data the state dict does
        not hold), so that BoTorch's fit checkpoints handle it like any buffer.
        """
        if self._dictionary_indices is None:  # not drawn yet: nothing to carry
            return self._train_X[..., :0, :].detach().clone()
        return self.inducing_points.detach().clone()

    def set_extra_state(self, state: Tensor) -> None:
        r"""Restore the dictionary saved by :meth:`get_extra_state`.

        The saved inputs are located among this model's training inputs (exact
        row match), so the state also loads into a model whose data were
        reordered, extended or subsampled (Ax's cross-validation does this).
        Dictionary points that are not training inputs of this model are dropped
        (with a logged warning); if none is, the current dictionary is kept.
        """
        if not torch.is_tensor(state) or state.shape[-1] != self._train_X.shape[-1]:
            raise ValueError(
                "NystromGP's extra state must be a tensor of dictionary inputs with "
                f"d = {self._train_X.shape[-1]} columns."
            )
        state = state.to(self._train_X)
        if state.shape[-2] == 0:
            self.dictionary_indices = None
            return
        if self._dictionary_indices is not None and torch.equal(
            self.inducing_points, state
        ):
            return
        found = locate_rows(input_rows(self._train_X), input_rows(state))
        num_saved = state.shape[-2]
        if found.numel() < num_saved:
            logger.warning(
                "Loaded dictionary: %d of %d points are not training inputs of this "
                "model and were dropped.",
                num_saved - found.numel(),
                num_saved,
            )
        if found.numel() > 0:
            self.dictionary_indices = torch.unique(found)

    def sketch_state(self) -> SketchState:
        r"""What the next model of a loop needs to start from this one.

        Pass it (or its ``to_dict()``, e.g. through Ax's generator state) as
        ``warm_start`` of the next model.
        """
        num_fit_points, fit_loss, drift_refits = self.fit_record or (
            self.num_training_points,
            math.nan,
            0,
        )
        rows = self.dictionary_indices
        at_rows = self._train_X[..., rows, :]  # = self.inducing_points
        return SketchState(
            hyperparameters=hyperparameter_state(self),
            dictionary_rows=rows.detach().clone(),
            rows_checksum=float(at_rows.sum()),
            dictionary_inputs=at_rows.detach().clone(),
            dictionary_keys=row_keys(input_rows(at_rows)),
            num_fit_points=num_fit_points,
            fit_loss=fit_loss,
            num_draws=self.num_draws,
            sketch_ridge=math.nan if self.sketch_ridge is None else self.sketch_ridge,
            drift_refits=drift_refits,
        )
