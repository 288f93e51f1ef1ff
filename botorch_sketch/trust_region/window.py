r"""The region model's data: the region's points nearest its best observation.

TuRBO-1 (Eriksson et al., NeurIPS 2019, Sec. 2) fits its GP on every point
collected since the last restart. A stationary kernel fitted on all of them
describes the region at the scale where most of them lie: once the region has
shrunk around a basin, the earlier, far points carry the large-scale variation,
the likelihood explains the small-scale variation around the incumbent as noise,
and the fitted noise ends up many times the real one. The Thompson samples then
no longer resolve the differences the region is refining (Levy's oscillations,
a basin's floor), the batches stop improving, and the region collapses above
the floor of its basin. The remedy here is local: the model takes only the
``w`` points nearest the best observation (:func:`nearest_rows`), so that its
hyperparameters, its fitted noise and its outcome standardisation describe the
neighbourhood the region samples; the state machine still counts every point.
A fixed window also bounds the fit's cost: the model never grows past ``w``
points, whatever the region's data.

The window is ``"turbo-bkb"``'s ``region_max_points``, on by default with one
region, where it comes with the posterior-mean incumbent: with the observed
incumbent it measured better in batches of 50 and worse in batches of 8, with
the mean incumbent better in both (``benchmarks/results/which_strategy_notes.md``).
Its ``"auto"`` size (:func:`default_window_size`) grows with the dimension, since
the window must hold enough points to fit ``d`` lengthscales around the
incumbent: ``max(WINDOW_MIN_POINTS, WINDOW_POINTS_PER_DIM * d)``.
``benchmarks/results/region_window.md`` measures the fitted noise with and
without a window, ``benchmarks/results/large_budget.md`` what the windows of 150,
300 and 600 points and ``"auto"`` do to the optimum.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "WINDOW_MIN_POINTS",
    "WINDOW_POINTS_PER_DIM",
    "default_window_size",
    "nearest_rows",
]

#: Fewest points of an ``"auto"`` window (:func:`default_window_size`).
WINDOW_MIN_POINTS = 300

#: Points per input dimension of an ``"auto"`` window (:func:`default_window_size`).
WINDOW_POINTS_PER_DIM = 30


def default_window_size(dim: int) -> int:
    r"""``max(WINDOW_MIN_POINTS, WINDOW_POINTS_PER_DIM * dim)``: the region
    model's number of points under ``region_max_points="auto"`` in ``dim``
    dimensions (the model-space columns, one-hot columns included).

    Raises:
        ValueError: If ``dim`` is not a positive int.
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be a positive int, got {dim!r}.")
    return max(WINDOW_MIN_POINTS, WINDOW_POINTS_PER_DIM * dim)


def nearest_rows(X: Tensor, Y: Tensor, limit: int | None) -> Tensor:
    r"""Sorted row indices of the ``limit`` points of ``X`` nearest the best one.

    Args:
        X: ``n x d`` inputs (the unit cube: Euclidean distances there).
        Y: ``n x 1`` (or ``n``) values, larger is better; the best row is the
            centre and always kept.
        limit: Number of rows kept (``None``: all).

    Returns:
        A ``k`` long tensor of row indices in increasing order, ``k = min(n,
        limit)``; ties in distance go to the earlier row.

    Raises:
        ValueError: On a bad ``limit`` or shapes that do not match.
    """
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
    ):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}.")
    if X.dim() != 2 or Y.reshape(-1).shape[0] != X.shape[0]:
        raise ValueError(
            f"X must be n x d and Y hold n values, got {tuple(X.shape)} and "
            f"{tuple(Y.shape)}."
        )
    n = X.shape[0]
    if limit is None or n <= limit:
        return torch.arange(n, device=X.device)
    best = X[int(Y.reshape(-1).argmax())]
    distance = (X - best).square().sum(-1)
    order = torch.argsort(distance, stable=True)[:limit]
    return torch.sort(order).values
