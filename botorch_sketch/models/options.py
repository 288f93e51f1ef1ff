r"""Passing model options through Ax's model construction.

Ax builds a model as ``cls(**cls.construct_inputs(training_data=dataset,
**model_options))`` (``ModelConfig.model_options``), and BoTorch's
``Model.construct_inputs`` accepts no extra keyword arguments, so a model with its
own options (``q_bar``, ``subset_size``, ``n_init``, ...) forwards them itself.
"""

from __future__ import annotations

from typing import Any

from botorch.utils.datasets import SupervisedDataset

__all__ = ["ModelOptionsMixin"]


class ModelOptionsMixin:
    r"""``construct_inputs`` = the parent's inputs from the data plus the options.

    List it before the BoTorch model class in the bases, e.g.
    ``class NystromGP(ModelOptionsMixin, BatchedMultiOutputGPyTorchModel, ...)``.
    """

    @classmethod
    def construct_inputs(
        cls, training_data: SupervisedDataset, **kwargs: Any
    ) -> dict[str, Any]:
        r"""Model inputs from a ``SupervisedDataset`` plus model options (for Ax).

        Args:
            training_data: The data (``X``, ``Y`` and optionally ``Yvar``).
            **kwargs: Constructor options, passed through unchanged.

        Returns:
            Keyword arguments for the model's constructor.
        """
        return {**super().construct_inputs(training_data=training_data), **kwargs}
