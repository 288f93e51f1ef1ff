"""Tests of the projection onto integer and one-hot columns."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.trust_region import (
    DiscreteColumns,
    TrustRegionState,
    fit_region_model,
    generate_batch,
    region_bounds,
)
from botorch_sketch.trust_region.candidates import lengthscales, region_candidates


def columns() -> DiscreteColumns:
    # A float column, an integer with 5 values and a 3-level one-hot group.
    return DiscreteColumns(grids={1: torch.linspace(0, 1, 5)}, one_hot=((2, 3, 4),))


def test_columns_and_parameters_are_counted():
    dc = columns()
    assert dc.columns() == [1, 2, 3, 4]
    assert dc.max_column() == 4 and dc.num_columns() == 4
    assert dc.num_parameters(5) == 3
    assert not dc.is_empty and DiscreteColumns().is_empty
    assert DiscreteColumns().max_column() == -1


def test_project_closed_cases():
    X = torch.tensor(
        [
            [0.3, 0.12, 0.2, 0.9, 0.1],  # k -> 0.0 (0.12 < 0.125), level 1
            [0.3, 0.13, 0.5, 0.5, 0.1],  # k -> 0.25, tie -> the first column
            [0.7, 0.99, 0.0, 0.1, 0.8],  # k -> 1.0, level 2
        ],
        dtype=torch.float64,
    )
    P = columns().project(X)
    expected = torch.tensor(
        [
            [0.3, 0.0, 0.0, 1.0, 0.0],
            [0.3, 0.25, 1.0, 0.0, 0.0],
            [0.7, 1.0, 0.0, 0.0, 1.0],
        ],
        dtype=torch.float64,
    )
    assert torch.equal(P, expected)
    assert torch.equal(X[:, 0], P[:, 0])  # the input is not modified
    assert X[0, 1] == 0.12


def test_unique_projection_keeps_first_occurrences_in_order():
    X = torch.tensor(
        [
            [0.5, 0.6, 0.9, 0.0, 0.0],
            [0.1, 0.0, 0.0, 0.0, 0.9],
            [0.5, 0.55, 0.8, 0.1, 0.1],  # the same point as row 0
            [0.2, 1.0, 0.0, 0.7, 0.0],
        ],
        dtype=torch.float64,
    )
    dc = columns()
    U = dc.unique_projection(X)
    assert torch.equal(U, dc.project(X)[[0, 1, 3]])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"grids": {0: [0.0]}, "one_hot": ((0, 1),)}, "listed twice"),
        ({"grids": {-1: [0.0]}}, "non-negative ints"),
        ({"grids": {0: []}}, "non-empty 1-d"),
        ({"grids": {0: [0.0, float("nan")]}}, "NaN or inf"),
        ({"one_hot": ((),)}, "at least one column"),
    ],
)
def test_bad_columns_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DiscreteColumns(**kwargs)


def test_too_few_columns_are_rejected():
    dc = columns()
    with pytest.raises(ValueError, match="column 4 is discrete"):
        dc.project(torch.rand(3, 4))
    with pytest.raises(ValueError, match="do not hold column 4"):
        dc.num_parameters(4)


def test_region_batch_is_on_the_grid_and_in_the_region():
    generator = torch.Generator().manual_seed(0)
    X = torch.rand(30, 5, generator=generator, dtype=torch.float64)
    dc = columns()
    X = dc.project(X)
    Y = -((X[:, :1] - 0.4) ** 2) + X[:, 3:4]
    model = fit_region_model(X, Y, seed=0)
    state = TrustRegionState(dim=5, batch_size=6, length=0.4)
    points = generate_batch(
        model, state, X, 6, num_candidates=300, seed=1, discrete=dc, center=0
    )
    assert points.shape == (6, 5)
    assert torch.equal(points, dc.project(points))
    assert torch.unique(points, dim=0).shape[0] == 6
    # The continuous column stays in the region around the centre (row 0).
    bounds = region_bounds(X[0], lengthscales(model), state.length)
    assert bool((points[:, 0] >= bounds[0, 0]).all())
    assert bool((points[:, 0] <= bounds[1, 0]).all())


def test_small_region_on_a_discrete_space_grows_until_it_has_q_configurations():
    # One integer column with 5 values, the centre at 0.5: a region of side
    # 0.01 rounds every candidate to the centre; the draws double the side
    # until q = 3 configurations other than the (taken) centre are allowed.
    dc = DiscreteColumns(grids={0: torch.linspace(0, 1, 5)})
    center = torch.tensor([0.5], dtype=torch.float64)
    ones = torch.ones(1, dtype=torch.float64)

    def not_center(Z):
        return (Z[:, 0] - 0.5).abs() > 1e-9

    small = region_candidates(center, ones, 0.01, 64, 1, seed=0, discrete=dc)
    assert torch.equal(small, center.unsqueeze(0))  # q = 1 is there: no growth
    grown = region_candidates(
        center, ones, 0.01, 64, 3, seed=0, discrete=dc, feasible=not_center
    )
    assert grown.shape[0] >= 3 and bool(not_center(grown).all())
    assert torch.equal(grown, dc.project(grown))
    # Without discrete columns there is one draw, whatever q is.
    once = region_candidates(center, ones, 0.01, 64, 100, seed=0)
    assert once.shape[0] == 64 and bool(((once - 0.5).abs() <= 0.005 + 1e-12).all())
