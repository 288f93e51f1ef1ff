r"""Basins of a model's posterior mean, told apart by the hill-valley test.

Two points lie in the same basin of a score ``s`` (larger is better) when ``s``
does not dip along the straight segment between them: with interior points
``z_j = x + t_j (c - x)``, ``t_j = j / (r + 1)``, ``j = 1..r``, the pair is
separated by a valley when

.. math::

    \min_j s(z_j) < \min(s(x), s(c)) - \tau .

This is the hill-valley test of Ursem (CEC 1999), used by niching evolutionary
algorithms (e.g. HillVallEA, Maree et al., GECCO 2018) to cluster a population
by basin. Here it runs on the posterior mean of a fitted model, which is cheap
to evaluate and smooth, so that the good points of a basin the search has only
touched (a few points on its slope, far from the incumbent) are not merged with
the skirts of the incumbent's basin, as a clustering by distance would.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["DEFAULT_INTERIOR_POINTS", "hill_valley_centers"]

#: Interior points ``r`` of each tested segment.
DEFAULT_INTERIOR_POINTS = 5
#: Rows of one call to ``score_fn`` (bounds the memory of a model's kernel block).
SCORE_CHUNK = 4096


def hill_valley_centers(
    X: Tensor,
    score_fn: Callable[[Tensor], Tensor],
    num_centers: int,
    tolerance: float = 0.0,
    num_interior: int = DEFAULT_INTERIOR_POINTS,
    scores: Tensor | None = None,
) -> Tensor:
    r"""The best point of each of up to ``num_centers`` basins of ``score_fn``.

    Greedy, best first: the best-scoring point of ``X`` is the first centre;
    every point with no valley (module docstring) on its segment to that centre
    joins its basin and leaves the candidates; the best remaining point is the
    next centre, and so on until ``num_centers`` centres or no candidate is
    left. ``O(num_centers n r)`` evaluations of ``score_fn``, in chunks.

    Args:
        X: ``n x d`` points (e.g. the training inputs).
        score_fn: Maps ``k x d`` points to ``k`` scores, larger is better (e.g.
            a model's posterior mean with the objective's sign).
        num_centers: Largest number of centres ``>= 1``.
        tolerance: Depth ``tau >= 0`` a dip must exceed to separate two basins,
            in the units of the scores.
        num_interior: Interior points ``r >= 1`` per segment.
        scores: ``score_fn(X)`` (``n``) when the caller has it already.

    Returns:
        A ``k``-vector of row indices of ``X`` (``k <= num_centers``), best
        centre first.
    """
    for name, value in (("num_centers", num_centers), ("num_interior", num_interior)):
        if isinstance(value, bool) or not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    if X.dim() != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty n x d tensor, got {tuple(X.shape)}.")
    if not (isinstance(tolerance, (int, float)) and tolerance >= 0):
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}.")
    if scores is None:
        scores = _scores(score_fn, X)
    elif scores.shape != X.shape[:1]:
        raise ValueError(
            f"scores must have one value per row of X ({X.shape[0]}), got "
            f"{tuple(scores.shape)}."
        )
    order = torch.argsort(scores, descending=True)
    t = torch.arange(1, num_interior + 1, dtype=X.dtype, device=X.device) / (
        num_interior + 1
    )
    open_ = torch.ones(X.shape[0], dtype=torch.bool, device=X.device)
    chosen: list[int] = []
    while len(chosen) < num_centers and bool(open_.any()):
        best = int(order[open_[order]][0])
        chosen.append(best)
        open_[best] = False
        rows = torch.nonzero(open_).squeeze(-1)
        if rows.numel() == 0:
            break
        start = X[rows]
        segments = start.unsqueeze(0) + t.view(-1, 1, 1) * (X[best] - start)
        dips = _scores(score_fn, segments.reshape(-1, X.shape[-1]))
        lowest = dips.reshape(num_interior, -1).min(dim=0).values
        valley = lowest < torch.clamp(scores[rows], max=scores[best]) - tolerance
        open_[rows[~valley]] = False  # same basin as the new centre
    return torch.tensor(chosen, dtype=torch.long, device=X.device)


def _scores(score_fn: Callable[[Tensor], Tensor], Z: Tensor) -> Tensor:
    r"""``score_fn`` over ``Z`` (``k x d``) in chunks of ``SCORE_CHUNK`` rows."""
    with torch.no_grad():
        parts = [score_fn(chunk).reshape(-1) for chunk in Z.split(SCORE_CHUNK)]
    return torch.cat(parts)
