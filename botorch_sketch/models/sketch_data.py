r"""The training data of a sketched GP, stored once, transformed, as a base class.

:class:`SketchDataMixin` keeps a model's training data the way its DTC posterior
uses them: inputs ``_train_X`` (``batch_shape x (m) x n x d``, transformed once at
construction) and targets ``_train_Y`` (``batch_shape x (m) x n``, outcome-
transformed), in the dtype the model computes in (float64 unless ``.to()``
changed it), and shows them to BoTorch in the dtype of the data the model was
built on. Whenever the data change, the posterior caches are dropped.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["SketchDataMixin"]


class SketchDataMixin:
    r"""Training data, their dtypes and the cache resets of a sketched GP.

    List it before the BoTorch/GPyTorch bases. The model registers the buffers
    ``_train_X`` and ``_train_Y``, sets ``_original_train_inputs`` (the
    untransformed inputs) and ``_data_dtype``, and keeps its posterior caches in
    ``_cache`` and ``_embedding_memo``.
    """

    _train_X: Tensor
    _train_Y: Tensor
    _original_train_inputs: Tensor
    _data_dtype: torch.dtype
    _cache: dict[str, Any] | None
    _embedding_memo: Any

    @property
    def train_inputs(self) -> tuple[Tensor]:
        r"""``(X,)``, ``X`` of shape ``batch_shape x (m) x n x d``, transformed, in
        the data's dtype (:attr:`data_dtype`)."""
        return (self._train_X.to(self.data_dtype),)

    @train_inputs.setter
    def train_inputs(self, value: tuple[Tensor]) -> None:
        self._train_X = value[0].to(self._train_X.dtype)
        self._cache = None
        self._embedding_memo = None

    @property
    def train_targets(self) -> Tensor:
        r"""``batch_shape x (m) x n`` transformed training targets (data dtype)."""
        return self._train_Y.to(self.data_dtype)

    @train_targets.setter
    def train_targets(self, value: Tensor) -> None:
        self._train_Y = value.to(self._train_Y.dtype)
        self._cache = None

    @property
    def compute_targets(self) -> Tensor:
        r"""``batch_shape x (m) x n`` transformed training targets, compute dtype."""
        return self._train_Y

    @property
    def data_dtype(self) -> torch.dtype:
        r"""The dtype of the data the model was built on (or last ``.to()``): that
        of its outputs. It computes in :attr:`compute_dtype` (float64 unless
        ``.to()`` changed it)."""
        return getattr(self, "_data_dtype", self._train_X.dtype)

    def _set_transformed_inputs(self) -> None:
        # Training inputs are stored transformed once, at construction.
        pass

    def _revert_to_original_inputs(self) -> None:
        pass

    @property
    def num_training_points(self) -> int:
        r"""Number of training points ``n``."""
        return self._train_X.shape[-2]

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the model computes in (that of its training data)."""
        return self._train_X.dtype

    _compute_dtype = compute_dtype

    @property
    def compute_inputs(self) -> Tensor:
        r"""``batch_shape x (m) x n x d`` transformed training inputs, compute dtype."""
        return self._train_X

    @property
    def input_dim(self) -> int:
        r"""Number of input features ``d`` of the (untransformed) training inputs."""
        return self._original_train_inputs.shape[-1]

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # ``.to()`` / ``.double()`` / ``.cuda()`` convert every tensor of the model;
        # the posterior caches are rebuilt in the new dtype/device on next use.
        self._cache = None
        self._embedding_memo = None
        before = self._train_X.dtype if hasattr(self, "_train_X") else None
        out = super()._apply(fn, *args, **kwargs)
        if hasattr(self, "_original_train_inputs"):
            self._original_train_inputs = fn(self._original_train_inputs)
        if before is not None and self._train_X.dtype != before:
            self._data_dtype = self._train_X.dtype  # an explicit dtype change
        return out

    def train(self, mode: bool = True) -> Any:
        r"""Set the training mode; caches are dropped when leaving or entering it."""
        if mode or self.training:
            self._cache = None
        return super().train(mode)

    def training_noise(self) -> Tensor:
        r"""``batch_shape x (m) x n`` noise variances of the training points."""
        return self._noise()
