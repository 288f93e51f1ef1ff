r"""The training Gram matrix of an RBF kernel, with its lengthscale gradient in
closed form.

A hyperparameter fit evaluates the marginal likelihood of the ``n`` training
inputs many times, and on the small data of a trust region (tens to hundreds of
points) each evaluation's cost is mostly per-operation overhead: gpytorch's lazy
kernel and autograd through its squared distances, not the Cholesky factor. For
the kernels a :class:`~botorch_sketch.models.NystromGP` fits by default
(gpytorch's ``RBFKernel``,
:class:`~botorch_sketch.models.kernels.GroupedRBFKernel`, either under a
``ScaleKernel``), :func:`training_gram` forms

    K_ab = exp(-1/2 sum_j (x_aj - x_bj)^2 / l_j^2)            (n x n)

directly, and its backward returns the gradient in the ``d`` column
lengthscales from the incoming ``G = dL/dK`` by two products,

    dL/dl_j = sum_ab G_ab K_ab (x_aj - x_bj)^2 / l_j^3
            = [r^T x_j^2 + c^T x_j^2 - 2 x_j^T (G o K) x_j] / l_j^3,

(``r``, ``c`` the row and column sums of ``G o K``, ``x_j`` the centred column
``j``; ``O(n^2 d)``, no ``n x n x d`` tensor). The lengthscales' constraint,
their grouping, the outputscale and the priors stay with autograd (small
tensors). Any other kernel, batched kernels, ``active_dims`` and inputs that
need a gradient (learned input transforms) take ``kernel(X).to_dense()``.
"""

from __future__ import annotations

from typing import Any

import torch
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from torch import Tensor

from botorch_sketch.models.kernels import GroupedRBFKernel

__all__ = ["rbf_gram", "training_gram"]


def training_gram(kernel: Kernel, X: Tensor) -> Tensor:
    r"""``kernel(X).to_dense()`` (``n x n``) for ``n x d`` inputs ``X``, by
    :func:`rbf_gram` where the kernel is an unbatched ``RBFKernel`` or
    ``GroupedRBFKernel`` (optionally under an unbatched ``ScaleKernel``) without
    ``active_dims`` and ``X`` needs no gradient; the same values, and the same
    gradients in the kernel's parameters."""
    if X.dim() != 2 or X.requires_grad:
        return kernel(X).to_dense()
    base, scale = kernel, None
    if type(kernel) is ScaleKernel:
        base, scale = kernel.base_kernel, kernel.outputscale
        if kernel.batch_shape != torch.Size([]) or scale.dim() != 0:
            return kernel(X).to_dense()
    if not _plain_rbf(base):
        return kernel(X).to_dense()
    if isinstance(base, GroupedRBFKernel):
        ls = base.column_lengthscale
    else:
        ls = base.lengthscale
    K = rbf_gram(X, ls.reshape(-1).expand(X.shape[-1]))
    return K if scale is None else scale * K


def _plain_rbf(kernel: Kernel) -> bool:
    r"""Whether ``kernel`` is exactly gpytorch's ``RBFKernel`` or our
    ``GroupedRBFKernel`` (not a subclass that may change ``forward``), unbatched,
    on every column."""
    return (
        type(kernel) in (RBFKernel, GroupedRBFKernel)
        and kernel.active_dims is None
        and kernel.batch_shape == torch.Size([])
    )


def rbf_gram(X: Tensor, lengthscale: Tensor) -> Tensor:
    r"""``exp(-||(x_a - x_b) / l||^2 / 2)`` for the ``n x d`` rows of ``X`` and
    ``d`` lengthscales ``l``: an ``n x n`` matrix with a unit diagonal,
    differentiable in ``l`` (closed form, module docstring), not in ``X``."""
    if X.dim() != 2 or lengthscale.shape != X.shape[-1:]:
        raise ValueError(
            f"X must be n x d and lengthscale d, got {tuple(X.shape)} and "
            f"{tuple(lengthscale.shape)}."
        )
    return _RBFGram.apply(X, lengthscale)


def _centred(X: Tensor) -> Tensor:
    r"""``X`` minus its column means (the differences, less cancellation)."""
    return X - X.mean(-2, keepdim=True)


class _RBFGram(torch.autograd.Function):
    r"""Autograd function of :func:`rbf_gram`."""

    @staticmethod
    def forward(ctx: Any, X: Tensor, lengthscale: Tensor) -> Tensor:
        Xc = _centred(X)
        Z = Xc / lengthscale
        norms = Z.pow(2).sum(-1)
        sq = (norms.unsqueeze(-1) + norms.unsqueeze(-2)).addmm_(Z, Z.mT, alpha=-2.0)
        sq.clamp_min_(0.0).diagonal().zero_()
        K = sq.mul_(-0.5).exp_()
        ctx.save_for_backward(Xc, lengthscale, K)
        return K

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor | None]:
        Xc, lengthscale, K = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            raise RuntimeError("rbf_gram is not differentiable in X.")
        if not ctx.needs_input_grad[1]:
            return None, None
        M = grad * K
        squares = Xc.pow(2)
        weighted = (M.sum(-1) + M.sum(-2)) @ squares - 2.0 * (Xc * (M @ Xc)).sum(-2)
        return None, weighted / lengthscale.pow(3)
