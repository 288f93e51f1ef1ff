"""Tests of the new-points step: repeats only when the model is sure they pay."""

from __future__ import annotations

import itertools

import pytest
import torch

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound
from botorch_sketch.models import NystromGP
from botorch_sketch.optim import optimize_acqf_adaptive_batch
from botorch_sketch.optim.new_points import observed_inputs

DT = torch.float64
GRID = torch.tensor(list(itertools.product(range(6), repeat=3)), dtype=DT) / 5.0


@pytest.fixture(scope="module")
def model():
    """A model whose data are 60 rows of a 216-point grid."""
    g = torch.Generator().manual_seed(3)
    X = GRID[torch.randperm(GRID.shape[0], generator=g)[:60]]
    Y = -((X - 0.4) ** 2).sum(-1, keepdim=True)
    Y = Y + 0.05 * torch.randn(Y.shape, generator=g, dtype=DT)
    return NystromGP(X, Y, seed=0).eval()


def scan(acqf, step):
    """A step optimizer over the grid (what Ax's discrete optimizers do)."""
    with torch.no_grad():
        values = acqf(GRID.unsqueeze(-2))
    i = int(values.argmax())
    return GRID[i], values[i]


def batch(model, alpha, prefer_new_points=True):
    bounds = torch.stack([GRID.min(0).values, GRID.max(0).values])
    cand, _ = optimize_acqf_adaptive_batch(
        model,
        bounds,
        "global",
        alpha,
        max_batch_size=20,
        min_batch_size=20,
        step_optimizer=scan,
        reference_points=GRID,
        prefer_new_points=prefer_new_points,
        seed=0,
    )
    return cand


def count_repeats(cand, observed):
    taken = observed.clone()
    repeats = 0
    for x in cand:
        repeats += bool((torch.cdist(x.unsqueeze(0), taken) < 1e-9).any())
        taken = torch.cat([taken, x.unsqueeze(0)])
    return repeats


def test_x_avoid_masks_the_points(model):
    acqf = BatchUpperConfidenceBound(model, alpha=1.0)
    X = GRID[:5].unsqueeze(-2)
    plain = acqf(X)
    acqf.set_X_avoid(GRID[1:3])
    masked = acqf(X)
    torch.testing.assert_close(masked[1:3], acqf.lower_bound(X[1:3]))
    assert (masked[1:3] < plain[1:3]).all()
    torch.testing.assert_close(masked[[0, 3, 4]], plain[[0, 3, 4]])
    with pytest.raises(ValueError, match="X_avoid must be a x d"):
        acqf.set_X_avoid(torch.zeros(2, 2, dtype=DT))


def test_filled_batch_is_new_points_where_new_points_are_uncertain(model):
    """Where no taken point is surely better than the best new one, all 20 points
    are new; the plain argmax of the same batch UCB repeats points."""
    observed = observed_inputs(model)
    assert observed.shape == (60, 3)
    assert count_repeats(batch(model, alpha=0.1), observed) == 0
    assert count_repeats(batch(model, 0.1, prefer_new_points=False), observed) >= 2


def test_a_repeat_is_taken_when_the_model_is_sure_it_is_better(model):
    """With alpha = 0 the lower bound is the mean: a repeat is taken whenever a
    taken point's mean beats every new point's, i.e. the plain argmax."""
    assert torch.equal(batch(model, 0.0), batch(model, 0.0, prefer_new_points=False))
