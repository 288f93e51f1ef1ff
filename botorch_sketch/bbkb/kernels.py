r"""Dense kernel callables for the finite-arm BBKB algorithms.

The algorithms of :mod:`botorch_sketch.bbkb` only need two callables, the same
interface as :func:`botorch_sketch.linalg.bless_dictionary`:

- ``kernel(X1, X2) -> Tensor`` of shape ``n1 x n2`` (dense), and
- ``kernel_diag(X) -> Tensor`` of shape ``n`` (``k(x, x)``).

They are never called with both arguments of size ``A`` (no ``A x A`` matrix is
ever formed); at most ``chunk x m`` blocks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["KernelFn", "KernelDiagFn", "rbf_kernel"]

KernelFn = Callable[[Tensor, Tensor], Tensor]
KernelDiagFn = Callable[[Tensor], Tensor]


def rbf_kernel(
    lengthscale: float, outputscale: float = 1.0
) -> tuple[KernelFn, KernelDiagFn]:
    r"""Gaussian kernel ``k(x, x') = s exp(-||x - x'||^2 / (2 l^2))``.

    This is scikit-learn's ``RBF(length_scale=l)`` convention, the one of the
    BBKB authors' reference code; the paper's "bandwidth sigma" is ``l`` (BBKB spec
    Sec. 11.2). Squared distances use ``||x||^2 + ||x'||^2 - 2 x.x'`` (one matmul)
    clamped at zero.

    Args:
        lengthscale: ``l > 0``.
        outputscale: ``s > 0`` (``kappa^2``).

    Returns:
        ``(kernel, kernel_diag)``.
    """
    if not lengthscale > 0 or not outputscale > 0:
        raise ValueError(
            f"lengthscale and outputscale must be positive, got {lengthscale}, "
            f"{outputscale}."
        )
    scale = -0.5 / lengthscale**2

    def kernel(X1: Tensor, X2: Tensor) -> Tensor:
        sq = (
            X1.pow(2).sum(-1).unsqueeze(-1)
            + X2.pow(2).sum(-1).unsqueeze(-2)
            - 2.0 * X1 @ X2.mT
        ).clamp_min(0.0)
        return outputscale * torch.exp(scale * sq)

    def kernel_diag(X: Tensor) -> Tensor:
        return torch.full(X.shape[:-1], outputscale, dtype=X.dtype, device=X.device)

    return kernel, kernel_diag
