r"""An ARD RBF kernel whose lengthscales are shared within groups of columns.

An unordered choice parameter with ``k`` values enters a model as ``k`` one-hot
columns (Ax's ``OneHot`` transform). BoTorch's ARD kernel then learns a
lengthscale for every column, ``k - 1`` hyperparameters more per parameter, each
fitted from the few points that take that value. Sharing one lengthscale ``l_g``
within a group gives the exchangeable categorical kernel: the squared distance of
two distinct one-hot vectors is 2, so any two values of the parameter are
``exp(-1 / l_g^2)`` apart under ``exp(-r^2 / 2)``.

:class:`GroupedRBFKernel` is gpytorch's ``RBFKernel`` with ``p`` lengthscale
parameters (``batch_shape x 1 x p``) for ``d`` columns: column ``i`` is divided by
lengthscale ``column_index[i]``. It equals ``RBFKernel(ard_num_dims=d)`` whose
lengthscales are equal within each group, in one kernel matrix, where a
``ProductKernel`` of per-group kernels with ``active_dims`` builds and multiplies
one matrix per group. A prior on the lengthscale sees the ``p`` values, so each
shared lengthscale is counted once.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.kernels.rbf_kernel import postprocess_rbf
from torch import Tensor

__all__ = ["GroupedRBFKernel", "ard_equivalent", "column_groups_index"]


def column_groups_index(dim: int, groups: Sequence[Sequence[int]]) -> Tensor:
    r"""``d`` long tensor mapping each column to its lengthscale.

    Lengthscales are numbered by the first column they cover: a column outside
    every group gets its own, a group of columns shares one.

    Args:
        dim: Number of columns ``d``.
        groups: Disjoint groups of column indices in ``[0, d)``.

    Returns:
        ``index`` with ``index[i] = j`` when column ``i`` uses lengthscale ``j``;
        ``index.max() + 1`` lengthscales in all.
    """
    groups = [tuple(int(c) for c in group) for group in groups]
    flat = [c for group in groups for c in group]
    if dim < 1 or len(set(flat)) != len(flat) or any(not 0 <= c < dim for c in flat):
        raise ValueError(
            f"column groups must be disjoint columns of the {dim}, got {groups!r}."
        )
    owner = {c: min(group) for group in groups for c in group}
    firsts = sorted({owner.get(c, c) for c in range(dim)})
    number = {first: j for j, first in enumerate(firsts)}
    return torch.tensor([number[owner.get(c, c)] for c in range(dim)])


class GroupedRBFKernel(RBFKernel):
    r"""RBF kernel ``exp(-||(x - y) / l[index]||^2 / 2)`` on ``d`` columns with
    ``p <= d`` lengthscales, one per group of columns.

    ``lengthscale`` (and its prior, constraint and ``raw_lengthscale``) has the
    ``batch_shape x 1 x p`` shape of an ``RBFKernel(ard_num_dims=p)``;
    :attr:`column_lengthscale` expands it to the ``batch_shape x 1 x d`` columns.
    ``ard_num_dims`` is ``d`` (the input width gpytorch checks), ``active_dims``
    is not supported (the groups select the columns).

    Example:
        >>> # columns 1-3 one-hot encode one parameter, 4-5 another
        >>> kernel = GroupedRBFKernel(6, groups=[(1, 2, 3), (4, 5)])
        >>> kernel.lengthscale.shape, kernel.column_lengthscale.shape
        (torch.Size([1, 3]), torch.Size([1, 6]))
    """

    has_lengthscale = True

    def __init__(self, dim: int, groups: Sequence[Sequence[int]], **kwargs: Any):
        r"""
        Args:
            dim: Number of input columns ``d``.
            groups: Disjoint groups of column indices sharing a lengthscale
                (:func:`column_groups_index`); ``[]`` gives the ARD kernel.
            **kwargs: ``RBFKernel`` options (``batch_shape``,
                ``lengthscale_prior``, ``lengthscale_constraint``, ...), without
                ``ard_num_dims`` or ``active_dims``.
        """
        for name in ("ard_num_dims", "active_dims"):
            if kwargs.get(name) is not None:
                raise ValueError(
                    f"GroupedRBFKernel takes no {name}, got {kwargs[name]!r}: the "
                    "groups give the lengthscales and every column is used."
                )
            kwargs.pop(name, None)
        index = column_groups_index(dim, groups)
        self.num_lengthscales = int(index.max()) + 1
        super().__init__(ard_num_dims=self.num_lengthscales, **kwargs)
        self.ard_num_dims = dim
        self.register_buffer("column_index", index)

    @property
    def column_lengthscale(self) -> Tensor:
        r"""``batch_shape x 1 x d`` lengthscale of every column."""
        return self.lengthscale[..., self.column_index]

    def forward(
        self, x1: Tensor, x2: Tensor, diag: bool = False, **params: Any
    ) -> Tensor:
        ls = self.column_lengthscale
        return postprocess_rbf(
            self.covar_dist(
                x1.div(ls), x2.div(ls), square_dist=True, diag=diag, **params
            )
        )

    def extra_repr(self) -> str:
        return f"dim={self.ard_num_dims}, num_lengthscales={self.num_lengthscales}"


def ard_equivalent(kernel: Kernel) -> Kernel:
    r"""``kernel`` with every :class:`GroupedRBFKernel` in it (itself, or the
    base of a ``ScaleKernel``) replaced by the equal ``RBFKernel(ard_num_dims=d)``
    (a copy, lengthscales detached), e.g. for tools that read ``lengthscale``
    as one value per input column (BoTorch's random Fourier features); any
    other kernel is returned as is."""
    if isinstance(kernel, GroupedRBFKernel):
        ard = RBFKernel(
            ard_num_dims=kernel.ard_num_dims, batch_shape=kernel.batch_shape
        )
        ard = ard.to(kernel.raw_lengthscale)
        ard.lengthscale = kernel.column_lengthscale.detach()
        return ard
    if isinstance(kernel, ScaleKernel) and isinstance(
        kernel.base_kernel, GroupedRBFKernel
    ):
        scaled = copy.deepcopy(kernel)
        scaled.base_kernel = ard_equivalent(kernel.base_kernel)
        return scaled
    return kernel
