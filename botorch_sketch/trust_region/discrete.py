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
chosen among the points that will run, duplicates removed. The columns of an
Ax search space are read from its digest by
:func:`botorch_sketch.ax.encoding.discrete_columns`.

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

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["DiscreteColumns"]


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
        for column in self.columns():
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

    def columns(self) -> list[int]:
        r"""Every column listed: the grids' then the one-hot groups'."""
        return [*self.grids, *(c for group in self.one_hot for c in group)]

    def max_column(self) -> int:
        r"""The largest column index listed (-1 when none is)."""
        return max(self.columns(), default=-1)

    def num_columns(self) -> int:
        r"""How many columns are discrete."""
        return len(self.columns())

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
