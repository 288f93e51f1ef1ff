r"""New points first: a greedy step that re-proposes a point only when it pays.

On a discrete or mixed domain the batch UCB's maximiser is often a point already
evaluated, pending, or earlier in the same batch: hallucinating one more noisy
evaluation there lowers its width only a little, and its mean keeps it on top.
A user pays for every evaluation, so in one step of the greedy batch
(:func:`new_point_step`) a taken point ``x_r in T`` is worth its lower bound
``l_t(x_r) = mu(x_r) - alpha sigma~_t(x_r)`` instead of its UCB
(:meth:`~botorch_sketch.acquisition.BatchUpperConfidenceBound.set_X_avoid`), and
the caller's step optimiser maximises that. A repeat then wins only when the
model is sure it is better than the best new point found, ``l_t(x_r) >
u_t(x_new)`` (the elimination test of confidence-bound methods: no new point can
then be the maximiser, and the repeat narrows the width where the maximiser is);
otherwise the step takes the best new point.

A step optimiser that works on a continuous relaxation and rounds at the end
(Ax's mixed optimiser over one-hot encoded categories) never sees the lower
bound: the relaxed maximiser is no taken point, its rounding often is. The
step's point is therefore checked after rounding, and when it is a taken point
a :class:`NeighborhoodSearch` over valid points of the domain looks for the
best new point ``x_new``; the step keeps the repeat only when ``l_t(x_r) >
u_t(x_new)``.

``T`` is the model's training inputs and the caller's pending points. A point
earlier in the same batch is not proposed again while a new point is found: the
lower bound of a point hallucinated into the batch rises with every copy of
itself there, so the elimination test would let one sure point fill the whole
batch with copies that return no information the first one does not. A point
is in a set when it equals a row to :data:`SAME_POINT_ATOL` in every
coordinate, ``O(|T| d)`` per point.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound
from botorch_sketch.models.nystrom import NystromGP

logger = logging.getLogger(__name__)

__all__ = [
    "SAME_POINT_ATOL",
    "NeighborhoodSearch",
    "matches_any",
    "new_point_step",
    "observed_inputs",
]

#: Points whose coordinates all differ by at most this are the same point.
SAME_POINT_ATOL = 1e-9


def observed_inputs(model: NystromGP) -> Tensor:
    r"""The model's training inputs in its input space (``n x d``).

    Taken back through the model's input transform; an input transform without
    ``untransform`` gives the stored inputs unchanged.
    """
    X = model.train_inputs[0]
    transform_in = getattr(model, "input_transform", None)
    if transform_in is not None:
        try:
            X = transform_in.untransform(X)
        except NotImplementedError:
            pass
    return X.detach()


def matches_any(X: Tensor, taken: Tensor, block: int = 1 << 20) -> Tensor:
    r"""``n``-long mask: row ``i`` of ``X`` (``n x d``) is a row of ``taken``.

    Equal means ``max_j |X_ij - T_kj| <= SAME_POINT_ATOL`` (no distance through
    a matrix product, whose rounding can exceed the tolerance). Compared in
    blocks of at most about ``block`` row pairs, so the temporary is
    ``O(block d)`` whatever ``n`` and the number of taken rows.
    """
    out = torch.zeros(X.shape[0], dtype=torch.bool, device=X.device)
    taken = taken.to(X)
    if X.shape[0] == 0 or taken.shape[0] == 0:
        return out
    cols = max(1, min(taken.shape[0], block // max(X.shape[0], 1)))
    rows = max(1, block // cols)
    for t in range(0, taken.shape[0], cols):
        T = taken[t : t + cols].unsqueeze(0)
        for r in range(0, X.shape[0], rows):
            diff = (X[r : r + rows].unsqueeze(1) - T).abs().amax(dim=-1)
            out[r : r + rows] |= (diff <= SAME_POINT_ATOL).any(dim=-1)
    return out


def _unique_rows(X: Tensor) -> Tensor:
    r"""The rows of ``X`` without exact duplicates (sorted)."""
    return torch.unique(X, dim=0) if X.shape[0] > 0 else X


@dataclass
class NeighborhoodSearch:
    r"""The best new point of a discrete or mixed domain, by local search.

    Moves change one coordinate: a discrete coordinate ``j`` to each of its
    other ``choices[j]``; any other coordinate to just below its lower or just
    above its upper bound, which after ``project`` (Ax's rounding: a one-hot
    column above the others selects its category) and clipping to ``bounds`` is
    a valid point. From the ``num_starts`` best new points among ``pool``, the
    starting point and their moves, each search climbs to the best new
    neighbour while the UCB increases (at most ``max_moves`` times). Cost per
    step: ``O(num_starts max_moves d K)`` UCB evaluations and projections for
    ``K`` choices per coordinate.

    Attributes:
        bounds: ``2 x d`` box of the domain.
        choices: Coordinate index -> its allowed values (discrete coordinates).
        pool: ``n x d`` valid points of the domain (``n >= 0``) that start the
            search besides the rejected point.
        project: Maps one point (``d``) onto the domain (e.g. Ax's
            ``rounding_func``); ``None``: the identity.
        num_starts: Local searches per call (``>= 1``).
        max_moves: Moves per local search (``>= 0``).
    """

    bounds: Tensor
    choices: Mapping[int, Sequence[float]] = field(default_factory=dict)
    pool: Tensor | None = None
    project: Callable[[Tensor], Tensor] | None = None
    num_starts: int = 4
    max_moves: int = 10

    def __post_init__(self) -> None:
        r"""Check every field; store ``pool`` as ``n x d`` (empty when ``None``)."""
        if not isinstance(self.bounds, Tensor) or self.bounds.dim() != 2:
            raise ValueError("bounds must be a 2 x d tensor.")
        if self.bounds.shape[0] != 2 or bool((self.bounds[0] > self.bounds[1]).any()):
            raise ValueError("bounds must be 2 x d with lower <= upper.")
        d = self.bounds.shape[-1]
        for j, values in self.choices.items():
            if not (isinstance(j, int) and 0 <= j < d) or len(values) == 0:
                raise ValueError(
                    f"choices must map coordinates in [0, {d}) to non-empty value "
                    f"lists, got {j!r}: {values!r}."
                )
        if self.pool is None:
            self.pool = self.bounds.new_zeros(0, d)
        if self.pool.dim() != 2 or self.pool.shape[-1] != d:
            raise ValueError(f"pool must be n x {d}, got {tuple(self.pool.shape)}.")
        if self.project is not None and not callable(self.project):
            raise TypeError("project must be a callable (one point -> one point).")
        for name, low in (("num_starts", 1), ("max_moves", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int) and value >= low):
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}.")

    def neighbors(self, x: Tensor) -> Tensor:
        r"""The valid points one move away from ``x`` (``d``), ``k x d``.

        A move of a discrete coordinate to one of its choices is valid as it
        is; only the other moves go through ``project``.
        """
        bounds = self.bounds.to(x)
        span = (bounds[1] - bounds[0]).clamp_min(1.0)
        moved, relaxed = [], []
        for j in range(x.shape[-1]):
            if j in self.choices:
                values = [float(v) for v in self.choices[j]]
            else:
                values = [float(bounds[0, j] - span[j]), float(bounds[1, j] + span[j])]
            for v in values:
                if abs(v - float(x[j])) > SAME_POINT_ATOL:
                    y = x.clone()
                    y[j] = v
                    (moved if j in self.choices else relaxed).append(y)
        if relaxed:
            moved.extend(self._valid(torch.stack(relaxed)).unbind(0))
        if not moved:
            return x.new_zeros(0, x.shape[-1])
        return torch.stack(moved)

    def _valid(self, X: Tensor) -> Tensor:
        if self.project is not None:
            X = torch.stack([self.project(x).reshape(-1).to(x) for x in X])
        bounds = self.bounds.to(X)
        return torch.minimum(torch.maximum(X, bounds[0]), bounds[1])

    def best_new(
        self, acqf: BatchUpperConfidenceBound, start: Tensor, taken: Tensor
    ) -> tuple[Tensor, Tensor] | None:
        r"""The best point found outside ``taken`` and its UCB.

        Args:
            acqf: The batch UCB (its pending points set).
            start: ``d`` point to search around (the rejected step point).
            taken: ``t x d`` points evaluated, pending or in the batch.

        Returns:
            ``(x, value)`` (``d``, scalar), or ``None`` if every point reached
            is taken.
        """
        start = start.reshape(-1).to(taken)
        X = torch.cat([self.pool.to(taken), start.unsqueeze(0)])
        X = _unique_rows(torch.cat([X, self.neighbors(start)]))
        X = X[~matches_any(X, taken)]
        if X.shape[0] == 0:
            return None
        values = _ucb(acqf, X)
        top = torch.topk(values, min(self.num_starts, X.shape[0])).indices
        best_x, best_v = X[top[0]], values[top[0]]
        for i in top.tolist():
            x, v = self._climb(acqf, X[i], values[i], taken)
            if v > best_v:
                best_x, best_v = x, v
        return best_x, best_v

    def _climb(
        self, acqf: BatchUpperConfidenceBound, x: Tensor, v: Tensor, taken: Tensor
    ) -> tuple[Tensor, Tensor]:
        for _ in range(self.max_moves):
            X = self.neighbors(x)
            X = X[~matches_any(X, taken)] if X.shape[0] > 0 else X
            if X.shape[0] == 0:
                break
            values = _ucb(acqf, X)
            i = int(values.argmax())
            if values[i] <= v:
                break
            x, v = X[i], values[i]
        return x, v


def _ucb(acqf: BatchUpperConfidenceBound, X: Tensor) -> Tensor:
    r"""``acqf`` at the rows of ``X`` (``n x d``), ``n`` values."""
    with torch.no_grad():
        return acqf(X.unsqueeze(-2)).reshape(-1).to(X)


def new_point_step(
    acqf: BatchUpperConfidenceBound,
    step_optimizer,
    step: int,
    taken: Tensor,
    search: NeighborhoodSearch | None = None,
    batch: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    r"""One greedy step that prefers a point outside ``taken`` (module docstring).

    Args:
        acqf: The batch UCB with the batch so far as pending points.
        step_optimizer: ``step_optimizer(acqf, step) -> (x, value)``.
        step: Index of the step in the batch.
        taken: ``t x d`` points evaluated or pending (before this batch).
        search: When the step optimiser returns a taken point, the search for
            the best new point that replaces it unless the taken point's lower
            bound is higher; ``None``: no such search.
        batch: ``b x d`` points earlier in this batch: they are never proposed
            again while ``search`` finds a new point (module docstring).

    Returns:
        ``(x, value)``: the point (``d``) and its value (the UCB of a new point,
        the lower bound of a taken one), both in ``taken``'s dtype.
    """
    if batch is None:
        batch = taken.new_zeros(0, taken.shape[-1])
    avoid = torch.cat([taken, batch.to(taken)])
    acqf.set_X_avoid(avoid)
    try:
        x, _ = step_optimizer(acqf, step)
    finally:
        acqf.set_X_avoid(None)
    # Valued where the point landed (a rounding step may have moved it).
    x = x.detach().reshape(-1).to(taken)
    if avoid.shape[0] == 0 or not bool(matches_any(x.unsqueeze(0), avoid)[0]):
        return x, _ucb(acqf, x.unsqueeze(0)).reshape(())
    with torch.no_grad():
        value = acqf.lower_bound(x.reshape(1, 1, -1)).reshape(()).to(taken)
    in_batch = batch.shape[0] > 0 and bool(matches_any(x.unsqueeze(0), batch)[0])
    found = None if search is None else search.best_new(acqf, x, avoid)
    if found is not None and (in_batch or found[1] >= value):
        return found
    logger.debug(
        "BBKB step %d: a taken point again (lower bound %.4g).", step, float(value)
    )
    return x, value
