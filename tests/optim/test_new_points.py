"""Tests of the new-points step: repeats only when the model is sure they pay."""

from __future__ import annotations

import itertools

import pytest
import torch

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound
from botorch_sketch.models import NystromGP
from botorch_sketch.optim import optimize_acqf_adaptive_batch
from botorch_sketch.optim.new_points import (
    NeighborhoodSearch,
    matches_any,
    observed_inputs,
)

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


def rounding_scan(acqf, step):
    """A step optimizer that, like a relaxed optimiser followed by rounding, never
    sees the lower bound at taken points: the argmax of the plain batch UCB."""
    avoid, acqf.X_avoid = acqf.X_avoid, None
    try:
        return scan(acqf, step)
    finally:
        acqf.X_avoid = avoid


def search_batch(model, alpha, search, size=20):
    bounds = torch.stack([GRID.min(0).values, GRID.max(0).values])
    cand, values = optimize_acqf_adaptive_batch(
        model,
        bounds,
        "global",
        alpha,
        max_batch_size=size,
        min_batch_size=size,
        step_optimizer=rounding_scan,
        reference_points=GRID,
        new_point_search=search,
        seed=0,
    )
    return cand, values


def grid_search(**kwargs):
    levels = [i / 5.0 for i in range(6)]
    return NeighborhoodSearch(
        bounds=torch.tensor([[0.0] * 3, [1.0] * 3], dtype=DT),
        choices={j: levels for j in range(3)},
        **kwargs,
    )


def test_rounded_steps_give_new_points_with_a_search(model):
    """A step optimiser blind to the lower bound repeats points; the search
    replaces each repeat by a new point, and the batch has none."""
    observed = observed_inputs(model)
    blind, _ = search_batch(model, 0.1, None)
    assert count_repeats(blind, observed) >= 2
    cand, values = search_batch(model, 0.1, grid_search())
    assert count_repeats(cand, observed) == 0
    # Each point's value is the UCB where it landed, with the batch before it.
    acqf = BatchUpperConfidenceBound(model, alpha=0.1)
    acqf.set_X_pending(cand[:3])
    torch.testing.assert_close(values[3], acqf(cand[3].view(1, 1, -1)).reshape(()))


def test_no_copy_within_a_batch_even_when_a_repeat_is_sure():
    """Data on all but the 30 grid rows farthest from the optimum: the best
    observed point's lower bound beats every new point's UCB, so it is proposed
    again, but once per batch; the rest of the batch is new points."""
    far = ((GRID - 0.4) ** 2).sum(-1).argsort()
    X = GRID[far[:-30]]
    g = torch.Generator().manual_seed(4)
    Y = -((X - 0.4) ** 2).sum(-1, keepdim=True)
    Y = Y + 0.01 * torch.randn(Y.shape, generator=g, dtype=DT)
    model = NystromGP(X, Y, seed=0).eval()
    cand, _ = search_batch(model, 0.05, grid_search(pool=GRID))
    assert int(matches_any(cand, X).sum()) == 1
    assert matches_any(cand[:1], X).all()  # the sure repeat comes first
    for i in range(1, cand.shape[0]):
        assert not matches_any(cand[i : i + 1], cand[:i]).any()


def test_search_finds_the_best_new_point_of_a_small_grid(model):
    """Search from the pool of the whole grid: the best untaken row's UCB."""
    acqf = BatchUpperConfidenceBound(model, alpha=0.5)
    taken = observed_inputs(model)
    x, value = grid_search(pool=GRID).best_new(acqf, taken[0], taken)
    with torch.no_grad():
        values = acqf(GRID.unsqueeze(-2))
    values[matches_any(GRID, taken)] = -float("inf")
    torch.testing.assert_close(value, values.max())
    assert not matches_any(x.unsqueeze(0), taken).any()
    assert grid_search(pool=GRID).best_new(acqf, GRID[0], GRID) is None


def test_neighbors_of_one_hot_columns_go_through_the_projection():
    """A column without choices moves past its bounds; the projection (one-hot
    rounding to the largest column here) turns that into a change of category."""

    def one_hot(x):
        y = x.clone()
        y[1:] = 0.0
        y[1 + int(x[1:].argmax())] = 1.0
        return y

    search = NeighborhoodSearch(
        bounds=torch.tensor([[0.0] * 4, [2.0, 1.0, 1.0, 1.0]], dtype=DT),
        choices={0: [0.0, 1.0, 2.0]},
        project=one_hot,
    )
    x = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=DT)
    found = {tuple(r.tolist()) for r in search.neighbors(x)}
    assert {(0.0, 1.0, 0.0, 0.0), (2.0, 1.0, 0.0, 0.0)} <= found
    assert {(1.0, 0.0, 1.0, 0.0), (1.0, 0.0, 0.0, 1.0)} <= found
    assert all(sum(r[1:]) == 1.0 for r in found)


def test_matches_any_is_exact_where_cdist_rounds():
    """Equal rows of large norm match (a distance through a matrix product can
    round to more than the tolerance)."""
    X = torch.rand(40, 5, dtype=DT, generator=torch.Generator().manual_seed(0)) * 1e3
    X = X / 3.0
    assert matches_any(X, X.flip(0)).all()
    assert not matches_any(X + 1e-6, X).any()


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 20])
def test_matches_any_in_blocks_equals_all_pairs(block):
    """Any block size gives the all-pairs answer (repeats, near misses, the
    float32 side cast to the data's dtype), and empty sides give no match."""
    g = torch.Generator().manual_seed(1)
    taken = torch.randint(0, 3, (23, 4), generator=g).to(DT) / 2
    X = torch.cat(
        [taken[::3], taken[:5] + 2e-9, torch.rand(9, 4, generator=g, dtype=DT)]
    )
    expected = ((X[:, None] - taken[None]).abs().amax(-1) <= 1e-9).any(-1)
    assert expected.sum() == 8  # the repeats only, not the near misses
    assert torch.equal(matches_any(X, taken.float(), block=block), expected)
    assert not matches_any(X, taken[:0], block=block).any()
    assert matches_any(X[:0], taken, block=block).shape == (0,)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"bounds": torch.zeros(3, 2, dtype=DT)}, "bounds must be 2 x d"),
        ({"bounds": torch.tensor([[1.0], [0.0]], dtype=DT)}, "lower <= upper"),
        ({"choices": {5: [0.0]}}, "choices must map"),
        ({"choices": {0: []}}, "choices must map"),
        ({"pool": torch.zeros(2, 3, dtype=DT)}, "pool must be n x 1"),
        ({"project": 3}, "project must be a callable"),
        ({"num_starts": 0}, "num_starts must be an int >= 1"),
        ({"max_moves": True}, "max_moves must be an int >= 0"),
    ],
)
def test_search_options_are_validated(kwargs, match):
    kwargs = {"bounds": torch.tensor([[0.0], [1.0]], dtype=DT), **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        NeighborhoodSearch(**kwargs)


def test_search_needs_a_step_optimizer_of_the_model_dimension(model):
    bounds = torch.tensor([[0.0] * 3, [1.0] * 3], dtype=DT)
    common = dict(bounds=bounds, rule="global", alpha=0.1, max_batch_size=2)
    with pytest.raises(ValueError, match="needs a step_optimizer"):
        optimize_acqf_adaptive_batch(model, new_point_search=grid_search(), **common)
    with pytest.raises(TypeError, match="must be a NeighborhoodSearch"):
        optimize_acqf_adaptive_batch(
            model, step_optimizer=scan, new_point_search="grid", **common
        )
    other = NeighborhoodSearch(bounds=torch.tensor([[0.0], [1.0]], dtype=DT))
    with pytest.raises(ValueError, match="has dimension 1"):
        optimize_acqf_adaptive_batch(
            model, step_optimizer=scan, new_point_search=other, **common
        )
