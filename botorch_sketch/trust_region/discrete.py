r"""Discrete columns of a trust region's unit cube: integers and one-hot groups.

Ax's modular BoTorch generator hands a mixed search space to the model as the
cube ``[0, 1]^d`` after its transforms: an integer (or ordered choice) parameter
is one column whose allowed values form a grid, an unordered choice parameter
with ``k`` values is ``k`` one-hot columns (Ax's ``OneHot`` transform, columns
``<name>_OH_PARAM_<i>``). A trust region's Sobol candidates are continuous in
every column, so without projection the Thompson sample is maximised over points
that are never evaluated (a one-hot vector such as ``(0.3, 0.7, 0.1, ...)``)
and Ax's rounding then moves the chosen point to another configuration, one the
sample did not rank. :meth:`DiscreteColumns.project` maps each candidate to the
nearest configuration (the nearest grid value of each integer column; the
largest column of each one-hot group set to 1, the others to 0), so the batch is
chosen among the points that will run, duplicates removed.

A one-hot group of ``k`` columns is one parameter
(:meth:`DiscreteColumns.num_parameters`). The candidate count stays TuRBO's
``min(5000, max(2000, 200 d))`` (Eriksson et al., NeurIPS 2019, Sec. 3) of the
model space's width ``d``: counting a group once measured worse on a mixed space
(:class:`~botorch_sketch.ax.turbo.TurboGenerator`).

:class:`~botorch_sketch.ax.turbo.TurboGenerator` projects only where every column
is discrete; on spaces with a continuous column the relaxed candidates found
better optima.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["ONE_HOT_INFIX", "DiscreteColumns", "discrete_columns"]

#: Infix of the columns Ax's ``OneHot`` transform makes (``<name>_OH_PARAM_<i>``;
#: ``ax.adapter.transforms.one_hot.OH_PARAM_INFIX``).
ONE_HOT_INFIX = "_OH_PARAM_"


@dataclass(frozen=True)
class DiscreteColumns:
    r"""Columns of ``[0, 1]^d`` that take only some values.

    Attributes:
        grids: Column index -> its allowed values in the unit cube (a non-empty
            1-d tensor; sorted on construction).
        one_hot: Groups of column indices, each the one-hot encoding of one
            unordered choice parameter (exactly one column is 1).
    """

    grids: Mapping[int, Tensor] = field(default_factory=dict)
    one_hot: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        seen: set[int] = set()
        columns = [*self.grids, *(c for group in self.one_hot for c in group)]
        for column in columns:
            if isinstance(column, bool) or not isinstance(column, int) or column < 0:
                raise ValueError(
                    f"discrete column indices must be non-negative ints, got "
                    f"{column!r}."
                )
            if column in seen:
                raise ValueError(f"column {column} is listed twice.")
            seen.add(column)
        grids = {}
        for column, values in self.grids.items():
            values = torch.as_tensor(values, dtype=torch.float64)
            if values.dim() != 1 or values.numel() == 0:
                raise ValueError(
                    f"the grid of column {column} must be a non-empty 1-d tensor, "
                    f"got shape {tuple(values.shape)}."
                )
            if not bool(torch.isfinite(values).all()):
                raise ValueError(f"the grid of column {column} has NaN or inf.")
            grids[column] = values.sort().values
        if any(len(group) == 0 for group in self.one_hot):
            raise ValueError("a one-hot group must have at least one column.")
        object.__setattr__(self, "grids", grids)
        object.__setattr__(self, "one_hot", tuple(tuple(g) for g in self.one_hot))

    @property
    def is_empty(self) -> bool:
        r"""Whether no column is discrete."""
        return not self.grids and not self.one_hot

    def max_column(self) -> int:
        r"""The largest column index listed (-1 when none is)."""
        columns = [*self.grids, *(c for group in self.one_hot for c in group)]
        return max(columns, default=-1)

    def num_columns(self) -> int:
        r"""How many columns are discrete."""
        return len(self.grids) + sum(len(group) for group in self.one_hot)

    def num_parameters(self, dim: int) -> int:
        r"""Parameters behind ``dim`` columns: a one-hot group counts once."""
        if dim <= self.max_column():
            raise ValueError(
                f"dim={dim} columns do not hold column {self.max_column()}."
            )
        return dim - sum(len(group) - 1 for group in self.one_hot)

    def project(self, X: Tensor) -> Tensor:
        r"""The nearest allowed points to ``X`` (``... x d``, unit cube).

        Integer columns go to their nearest grid value (ties to the lower one);
        in each one-hot group the largest column becomes 1 and the rest 0 (ties
        to the first). Other columns are unchanged.

        Returns:
            A new ``... x d`` tensor.
        """
        if X.shape[-1] <= self.max_column():
            raise ValueError(
                f"X has {X.shape[-1]} columns; column {self.max_column()} is discrete."
            )
        out = X.clone()
        for column, grid in self.grids.items():
            grid = grid.to(X)
            if grid.numel() == 1:
                out[..., column] = grid[0]
                continue
            midpoints = (grid[1:] + grid[:-1]) / 2
            index = torch.bucketize(X[..., column].contiguous(), midpoints)
            out[..., column] = grid[index]
        for group in self.one_hot:
            columns = list(group)
            block = X[..., columns]
            hot = torch.zeros_like(block)
            hot.scatter_(-1, block.argmax(-1, keepdim=True), 1.0)
            out[..., columns] = hot
        return out

    def unique_projection(self, X: Tensor) -> Tensor:
        r"""The distinct rows of :meth:`project` of an ``A x d`` ``X``, in the
        order of their first occurrence."""
        projected = self.project(X)
        if self.is_empty or projected.shape[0] < 2:
            return projected
        _, inverse = torch.unique(projected, dim=0, return_inverse=True)
        first = torch.full(
            (int(inverse.max()) + 1,), projected.shape[0], device=X.device
        )
        first = first.scatter_reduce(
            0, inverse, torch.arange(projected.shape[0], device=X.device), "amin"
        )
        return projected[first.sort().values]


def discrete_columns(
    feature_names: Sequence[str],
    bounds: Sequence[tuple[float, float]],
    discrete_choices: Mapping[int, Sequence[float]],
) -> DiscreteColumns:
    r"""The discrete columns of Ax's model space (a ``SearchSpaceDigest``'s
    ``feature_names``, ``bounds`` and ``discrete_choices``) in the unit cube.

    Columns in ``discrete_choices`` get their values scaled by ``bounds``; columns
    named ``<name>_OH_PARAM_<i>`` are grouped by ``<name>`` (a group of one
    column, a choice narrowed to one value, always projects to 1).
    """
    if len(feature_names) != len(bounds):
        raise ValueError(
            f"{len(feature_names)} feature names but {len(bounds)} bounds."
        )
    grids = {}
    for column, values in discrete_choices.items():
        lower, upper = (float(b) for b in bounds[column])
        width = upper - lower
        values = torch.as_tensor(values, dtype=torch.float64)
        grids[int(column)] = (
            (values - lower) / width if width > 0 else torch.zeros_like(values)
        )
    groups: dict[str, list[int]] = {}
    for column, name in enumerate(feature_names):
        prefix, infix, suffix = name.rpartition(ONE_HOT_INFIX)
        if infix and prefix and suffix.isdigit() and column not in grids:
            groups.setdefault(prefix, []).append(column)
    return DiscreteColumns(grids=grids, one_hot=tuple(map(tuple, groups.values())))
