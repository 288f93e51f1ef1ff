import pytest
import torch

from botorch_sketch.trust_region.window import (
    WINDOW_MIN_POINTS,
    WINDOW_POINTS_PER_DIM,
    default_window_size,
    nearest_rows,
)


def test_nearest_rows_keeps_the_best_and_its_neighbours_in_row_order():
    X = torch.tensor([[0.0], [0.9], [0.5], [0.45], [0.1], [0.55]], dtype=torch.float64)
    Y = torch.tensor([[0.0], [1.0], [3.0], [2.0], [0.5], [1.5]], dtype=torch.float64)
    assert nearest_rows(X, Y, 3).tolist() == [2, 3, 5]  # row 2 is the best
    assert nearest_rows(X, Y, 1).tolist() == [2]
    assert nearest_rows(X, Y.reshape(-1), 3).tolist() == [2, 3, 5]
    assert nearest_rows(X[:3], Y[:3], 3).tolist() == [0, 1, 2]  # not more than n
    assert nearest_rows(X, Y, None).tolist() == list(range(6))


def test_nearest_rows_is_euclidean_and_breaks_ties_by_row():
    X = torch.tensor([[0.5, 0.5], [0.7, 0.5], [0.5, 0.3], [0.6, 0.6], [0.0, 0.0]])
    Y = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    # Rows 1 and 2 are both 0.2 away, row 3 is 0.141 away.
    assert nearest_rows(X, Y, 3).tolist() == [0, 1, 3]
    assert nearest_rows(X, Y, 4).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "limit, message",
    [(0, "limit must be a positive int"), (2.5, "limit"), (True, "limit")],
)
def test_nearest_rows_rejects_a_bad_limit(limit, message):
    X = torch.rand(4, 2)
    with pytest.raises(ValueError, match=message):
        nearest_rows(X, X[:, :1], limit)


def test_nearest_rows_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="X must be n x d"):
        nearest_rows(torch.rand(4, 2), torch.rand(3, 1), 2)
    with pytest.raises(ValueError, match="X must be n x d"):
        nearest_rows(torch.rand(4), torch.rand(4), 2)


def test_default_window_grows_with_the_dimension_above_a_floor():
    assert default_window_size(1) == WINDOW_MIN_POINTS == 300
    assert default_window_size(10) == 300
    assert default_window_size(20) == 20 * WINDOW_POINTS_PER_DIM == 600
    assert default_window_size(60) == 1800
    for bad in (0, -3, 2.0, True):
        with pytest.raises(ValueError, match="dim must be a positive int"):
            default_window_size(bad)
