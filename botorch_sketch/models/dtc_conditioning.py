r"""Copies of a sketched GP on other data: conditioning, fantasies, subsets.

:class:`DTCConditioningMixin` gives a model with a DTC posterior
(:mod:`~botorch_sketch.models.dtc_posterior`) BoTorch's conditioning:
``condition_on_observations`` and ``fantasize`` append observations and keep the
hyperparameters and the dictionary, which is the exact DTC update (the posterior
of the same sketch on more data). ``data_subset`` restricts the data instead,
with a dictionary drawn afresh when first needed.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import torch
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from gpytorch.settings import min_fixed_noise
from torch import Tensor

from botorch_sketch.models.nystrom_posterior import append_rows
from botorch_sketch.models.validation import (
    check_batch_shape,
    validate_new_observations,
)

__all__ = ["DTCConditioningMixin"]


class DTCConditioningMixin:
    r"""``condition_on_observations``, ``get_fantasy_model`` and ``data_subset``.

    List it before the BoTorch/GPyTorch bases. The model keeps its data in
    ``_train_X`` / ``_train_Y`` (:class:`~botorch_sketch.models.sketch_data.
    SketchDataMixin`) and its dictionary in ``dictionary_indices``
    (:class:`~botorch_sketch.models.sketch_dictionary.SketchDictionaryMixin`).
    """

    _train_X: Tensor
    _train_Y: Tensor
    _input_batch_shape: torch.Size

    def _replace_data(self, X: Tensor, Y: Tensor, redraw: bool = False) -> None:
        r"""Install ``X`` / ``Y`` (stored layout) and drop the caches; with
        ``redraw``, also the dictionary (drawn again when first needed)."""
        self._train_X, self._train_Y = X, Y
        self._cache = None
        self._embedding_memo = None
        if redraw:
            self._dictionary_spec = "auto"
            self._dictionary_indices = None

    def condition_on_observations(
        self, X: Tensor, Y: Tensor, noise: Tensor | None = None, **kwargs: Any
    ) -> Any:
        r"""A new model with ``(X, Y)`` appended (exact DTC update, same dictionary).

        As ``SingleTaskGP``'s, with the inputs checked here, so that bad data fail
        now with a message naming the problem rather than later in ``posterior``.

        Args:
            X: ``batch_shape x n' x d`` inputs (original space).
            Y: ``(sample_shape x) batch_shape x n' x m`` targets in the original
                outcome space (``fantasize`` adds leading sample dimensions).
            noise: Observed noise variances of the shape of ``Y`` (required for a
                fixed-noise model, ``>= 0``).

        Returns:
            The conditioned model (this one is not changed).
        """
        validate_new_observations(X, Y, noise, d=self.input_dim, m=self.num_outputs)
        check_batch_shape(X, self._input_batch_shape)
        dtype = self.compute_dtype
        noise = None if noise is None else noise.to(dtype)
        return super().condition_on_observations(
            X.to(dtype), Y.to(dtype), noise=noise, **kwargs
        )

    def get_fantasy_model(
        self,
        inputs: Tensor,
        targets: Tensor,
        noise: Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        r"""Exact DTC update: same hyperparameters and dictionary, data appended.

        Called by ``condition_on_observations`` with transformed ``inputs``
        (``batch_shape x (m) x n' x d``) and ``targets`` (``batch_shape x (m) x n'``).
        Leading fantasy dimensions broadcast against the model's batch shape.
        """
        old_X, old_Y = self._train_X, self._train_Y
        _ = self.dictionary_indices  # drawn now, on the old data, if still pending
        inputs = inputs.to(old_X)
        targets = targets.to(old_Y)
        batch = torch.broadcast_shapes(
            old_X.shape[:-2], inputs.shape[:-2], targets.shape[:-1]
        )
        new = deepcopy(self)
        new._replace_data(
            append_rows(old_X, inputs, batch, dims=2),
            append_rows(old_Y, targets, batch, dims=1),
        )
        if isinstance(self.likelihood, FixedNoiseGaussianLikelihood):
            if noise is None:
                raise ValueError("A fixed-noise NystromGP needs `noise` for new data.")
            old_noise = self.likelihood.noise
            # The floor gpytorch's FixedNoiseGaussianLikelihood applies to the
            # training noise (e.g. observations reported without noise).
            noise = noise.to(old_noise).clamp_min(
                min_fixed_noise.value(old_noise.dtype)
            )
            new.likelihood.noise = append_rows(old_noise, noise, batch, dims=1)
        return new

    def data_subset(self, idx: Tensor) -> Any:
        r"""A copy restricted to training points ``idx`` (dictionary drawn lazily).

        It keeps this model's budget (the policy's :meth:`~botorch_sketch.models.
        dictionary_policy.DictionaryPolicy.with_cap`), so a sketch objective on
        the subset sees a dictionary of the size the full model will use.
        """
        return self._data_subset(idx)

    def _data_subset(self, idx: Tensor) -> Any:
        sub = deepcopy(self)
        sub.dictionary_policy = self.dictionary_policy.with_cap(self._dictionary_cap())
        sub.warm_start = None
        sub._replace_data(
            self._train_X[..., idx, :], self._train_Y[..., idx], redraw=True
        )
        if isinstance(self.likelihood, FixedNoiseGaussianLikelihood):
            sub.likelihood.noise = self.likelihood.noise[..., idx]
        return sub
