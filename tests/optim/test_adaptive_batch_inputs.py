"""Tests of AdaptiveBatchInputs: validation before any model evaluation."""

from __future__ import annotations

import pytest
import torch
from botorch.models import SingleTaskGP

from botorch_sketch.acquisition.bbkb import DEFAULT_HALLUCINATION
from botorch_sketch.bbkb.stopping import GlobalRule
from botorch_sketch.models import NystromGP
from botorch_sketch.optim import optimize_acqf_adaptive_batch
from botorch_sketch.optim.adaptive_batch_inputs import DEFAULT_C, AdaptiveBatchInputs

DT = torch.float64
BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(20, 2, generator=g, dtype=DT)
    return X, torch.sin(5 * X).sum(-1, keepdim=True)


@pytest.fixture(scope="module")
def model(data):
    return NystromGP(*data, seed=0, outcome_transform=None).eval()


def test_a_model_that_is_not_a_nystrom_gp_is_a_type_error(data):
    stgp = SingleTaskGP(*data)
    with pytest.raises(TypeError, match="model must be a NystromGP.*SingleTaskGP"):
        optimize_acqf_adaptive_batch(stgp, BOUNDS, "global", 0.5, 4)


def test_defaults_are_resolved_once(model):
    inputs = AdaptiveBatchInputs(model, BOUNDS, "global", 0.5, 4)
    assert isinstance(inputs.rule, GlobalRule) and inputs.rule.C == DEFAULT_C
    assert inputs.hallucination == DEFAULT_HALLUCINATION == "full"
    assert isinstance(inputs.seed, int)
    assert inputs.d == 2 and inputs.greedy_min == 1
    filled = AdaptiveBatchInputs(
        model, BOUNDS, "global", 0.5, 50, min_batch_size=50, thompson_fill=0.5
    )
    assert filled.greedy_min == 50 - 24


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_batch_size": 0}, "max_batch_size must be an int >= 1"),
        ({"min_batch_size": 5}, r"min_batch_size must be an int in \[1, 4\]"),
        ({"seed": "a"}, "seed must be an int"),
        ({"seed": 1.5}, "seed must be an int"),
        ({"hallucination": "ful"}, "hallucination must be one of"),
        ({"thompson_fill": 2.0}, "thompson_fill must be a number"),
        ({"reuse_restarts": "False"}, "reuse_restarts must be a bool"),
        ({"prefer_new_points": 1}, "prefer_new_points must be a bool"),
        ({"bounds": None}, "give either `bounds`"),
        ({"bounds": BOUNDS[:, :1]}, "bounds has dimension 1"),
        ({"allow_repeats": False}, "allow_repeats=False needs a finite"),
        ({"num_restarts": 0}, "num_restarts must be an int >= 1"),
        ({"X_pending": torch.zeros(2, 3, dtype=DT)}, "X_pending must be p x d"),
        ({"rule": GlobalRule(2.0), "C": 3.0}, "conflicts with the threshold"),
        ({"rule": 3}, "rule must be a StoppingRule"),
    ],
)
def test_bad_inputs_name_the_argument(model, kwargs, match):
    args = {
        "model": model,
        "bounds": BOUNDS,
        "rule": "global",
        "alpha": 0.5,
        "max_batch_size": 4,
    }
    with pytest.raises((ValueError, TypeError), match=match):
        AdaptiveBatchInputs(**{**args, **kwargs})
