"""``ModelOptionsMixin``: Ax's ``model_options`` reach every model's constructor."""

from __future__ import annotations

import pytest
import torch
from botorch.utils.datasets import SupervisedDataset

from botorch_sketch.models import GOUCBModel, GradientSubsetGP, NystromGP


@pytest.mark.parametrize(
    "cls, options",
    [
        (NystromGP, {"q_bar": 3.0, "seed": 1}),
        (GradientSubsetGP, {"subset_size": 6, "n_initial": 2, "seed": 1}),
        (GOUCBModel, {"n_init": 4, "seed": 1}),
    ],
)
def test_construct_inputs_forwards_options(cls, options):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(12, 2, generator=g, dtype=torch.float64)
    Y = torch.rand(12, 1, generator=g, dtype=torch.float64)
    Yvar = torch.full_like(Y, 0.01)
    data = SupervisedDataset(
        X, Y, Yvar=Yvar, feature_names=["a", "b"], outcome_names=["y"]
    )
    inputs = cls.construct_inputs(data, **options)
    assert {k: inputs[k] for k in options} == options
    assert torch.equal(inputs["train_X"], X) and torch.equal(inputs["train_Y"], Y)
    if cls is GOUCBModel:  # no per-point noise model: observed variances dropped
        assert "train_Yvar" not in inputs
    else:
        assert torch.equal(inputs["train_Yvar"], Yvar)
    cls(**inputs)
