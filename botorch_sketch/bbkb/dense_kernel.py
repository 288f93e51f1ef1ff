r"""The kernel as the finite-arm engine sees it: dense blocks of a gpytorch kernel.

Every algorithm of :mod:`botorch_sketch.bbkb` takes its prior covariance as a
``gpytorch.kernels.Kernel`` (any kernel: ``RBFKernel``, ``MaternKernel``, ARD,
``ScaleKernel``, sums and products, e.g. a fitted
:class:`~botorch_sketch.models.NystromGP`'s ``covar_module``) and evaluates it in
one place, :class:`DenseKernel`:

- ``dense(X1, X2)`` (also ``dense_kernel(X1, X2)``), an ``n1 x n2`` tensor, and
- ``dense.diag(X)``, the ``n`` prior variances ``k(x, x)`` (``kernel(X, diag=True)``).

The engine only asks for ``chunk x m``, ``k x A`` and ``m x m`` blocks (``m`` the
dictionary size): no ``A x A`` matrix is ever formed.

:func:`fixed_rbf_kernel` builds the frozen Gaussian kernel of the paper
reproductions.
"""

from __future__ import annotations

import copy
import math

import gpytorch
import torch
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from torch import Tensor

__all__ = [
    "DenseKernel",
    "SquaredExponential",
    "as_dense_kernel",
    "fixed_rbf_kernel",
    "kernel_copy",
]


class DenseKernel:
    r"""A frozen copy of a gpytorch kernel evaluated densely, without gradients.

    The copy (``copy.deepcopy``, cast to ``dtype`` and ``device``, parameters with
    ``requires_grad=False``) snapshots the hyperparameters: a state built from it
    stays consistent with itself if the caller later changes or refits the
    original module (build a new ``DenseKernel`` to use new values). Casting to the
    engine's dtype matters: BBKB's variances ``(k(a, a) - ||z(a)||^2) / lam`` lose
    ``eps / lam`` of absolute accuracy, so a float32 kernel would spoil a float64
    run at ``lam = 1e-4``.

    Args:
        kernel: A ``gpytorch.kernels.Kernel`` without batch dimensions.
        dtype: Dtype of the inputs and outputs (the engine's).
        device: Device of the inputs and outputs.
    """

    def __init__(
        self,
        kernel: Kernel,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> None:
        module = kernel_copy(kernel, dtype, device)
        module.requires_grad_(False)
        self.module = module
        self.dtype = dtype
        self.device = torch.device("cpu") if device is None else torch.device(device)
        self._fast = SquaredExponential.of(module)

    def __call__(self, X1: Tensor, X2: Tensor) -> Tensor:
        r"""``k(X1, X2)``, a dense ``n1 x n2`` tensor for ``n1 x d`` and ``n2 x d``."""
        fast = self._fast
        K = None if fast is None else fast(X1, X2)
        if K is not None:
            return K
        with torch.no_grad(), gpytorch.settings.lazily_evaluate_kernels(False):
            return self.module(X1, X2).to_dense()

    def diag(self, X: Tensor) -> Tensor:
        r"""``k(x, x)`` for the ``n`` rows of ``X``, an ``n`` tensor."""
        with torch.no_grad():
            out = self.module(X, diag=True)
        if out.shape != X.shape[:-1]:  # e.g. a kernel that ignores diag=True
            raise ValueError(
                f"{type(self.module).__name__}(X, diag=True) returned shape "
                f"{tuple(out.shape)} for {X.shape[0]} inputs."
            )
        return out

    def matches(self, X: Tensor) -> bool:
        """Whether ``X`` has this kernel's dtype and device."""
        return X.dtype == self.dtype and X.device == self.device

    def __repr__(self) -> str:
        return f"DenseKernel({self.module!r}, dtype={self.dtype})"


class SquaredExponential:
    r"""``k(x, y) = s exp(-||(x - y) / l||^2 / 2)`` of a gpytorch Gaussian kernel,
    evaluated without gpytorch's per-call machinery.

    The same arithmetic as gpytorch's ``RBFKernel`` (and ``ScaleKernel``), in the
    same order, so the values agree bit for bit: inputs divided by ``l`` (one
    lengthscale or one per dimension) and centred on the mean of the first block,
    ``||u - v||^2`` from one product of the blocks augmented with their squared
    norms and ones, clamped at zero, an exact zero diagonal when the two scaled
    blocks are equal, then ``exp(-d / 2)`` times ``s``. A ``k x A`` block costs
    one ``k x (d + 2) x A`` product and one exponential per entry.

    Built by :meth:`of` from a ``ScaleKernel(RBFKernel())`` or an
    ``RBFKernel()`` without ``active_dims``; its values follow the module's
    current parameters.
    """

    def __init__(self, rbf: RBFKernel, scale: ScaleKernel | None) -> None:
        self.rbf, self.scale = rbf, scale

    @staticmethod
    def of(module: Kernel) -> SquaredExponential | None:
        """The fast evaluator of ``module``, or ``None`` for other kernels."""
        scale = module if type(module) is ScaleKernel else None
        rbf = module.base_kernel if scale is not None else module
        if type(rbf) is not RBFKernel or any(
            k.active_dims is not None for k in (module, rbf)
        ):
            return None
        return SquaredExponential(rbf, scale)

    def parameters(self) -> tuple[Tensor, Tensor | None] | None:
        """``(lengthscale, outputscale)`` if usable here (no batch dimensions)."""
        ls = self.rbf.lengthscale
        if ls.dim() != 2 or ls.shape[0] != 1:
            return None
        if self.scale is None:
            return ls, None
        out = self.scale.outputscale
        return (ls, out) if out.dim() == 0 else None

    def __call__(self, X1: Tensor, X2: Tensor) -> Tensor | None:
        """``k(X1, X2)``, or ``None`` if the parameters do not fit this path."""
        params = self.parameters()
        if params is None:
            return None
        ls, out = params
        with torch.no_grad():
            x1, x2 = X1.div(ls), X2.div(ls)
            same = torch.equal(x1, x2)
            shift = x1.mean(-2, keepdim=True)
            x1 = x1 - shift
            n1 = x1.pow(2).sum(dim=-1, keepdim=True)
            p1 = torch.ones_like(n1)
            if same:
                x2, n2, p2 = x1, n1, p1
            else:
                x2 = x2 - shift
                n2 = x2.pow(2).sum(dim=-1, keepdim=True)
                p2 = torch.ones_like(n2)
            a1 = torch.cat([-2.0 * x1, n1, p1], dim=-1)
            a2 = torch.cat([x2, p2, n2], dim=-1)
            res = a1.matmul(a2.transpose(-2, -1))
            if same:
                res.diagonal(dim1=-2, dim2=-1).fill_(0)
            K = res.clamp_min_(0).div_(-2.0).exp_()
            return K if out is None else K.mul(out.view(1, 1))


def kernel_copy(
    kernel: Kernel, dtype: torch.dtype, device: torch.device | str | None = None
) -> Kernel:
    r"""A deep copy of ``kernel`` in ``dtype`` on ``device``, after checking that it
    is a gpytorch kernel without batch dimensions (what the engine can use)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(
            "kernel must be a gpytorch.kernels.Kernel (e.g. "
            f"fixed_rbf_kernel(lengthscale)), got {type(kernel).__name__}."
        )
    if kernel.batch_shape != torch.Size([]):
        raise ValueError(
            "the finite-arm engine needs a kernel without batch dimensions, got "
            f"batch_shape {tuple(kernel.batch_shape)}."
        )
    return copy.deepcopy(kernel).to(device=device, dtype=dtype)


def as_dense_kernel(kernel: Kernel | DenseKernel, like: Tensor) -> DenseKernel:
    r"""``kernel`` as a :class:`DenseKernel` in the dtype and device of ``like``.

    A :class:`DenseKernel` that already matches is returned as is (no copy), so the
    loops convert once and pass the result down.
    """
    if isinstance(kernel, DenseKernel):
        if kernel.matches(like):
            return kernel
        kernel = kernel.module
    return DenseKernel(kernel, dtype=like.dtype, device=like.device)


def fixed_rbf_kernel(
    lengthscale: float,
    outputscale: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> ScaleKernel:
    r"""Frozen Gaussian kernel ``k(x, x') = s exp(-||x - x'||^2 / (2 l^2))``.

    ``ScaleKernel(RBFKernel())`` with ``lengthscale = l`` and ``outputscale = s``,
    all parameters ``requires_grad=False``. gpytorch's ``RBFKernel`` is
    ``exp(-||x - x'||^2 / (2 l^2))``, the same convention as scikit-learn's
    ``RBF(length_scale=l)`` and the BBKB authors' reference code; the paper's
    "bandwidth sigma" is ``l`` (BBKB spec Sec. 11.2). The values are stored through
    gpytorch's softplus constraint, so they are ``l`` and ``s`` to about ``1e-15``
    relative in float64 (set from ``dtype`` tensors, not Python floats, which
    gpytorch would round to float32 first).

    Args:
        lengthscale: ``l > 0``.
        outputscale: ``s > 0`` (``kappa^2``).
        dtype: Dtype of the parameters.

    Returns:
        The frozen kernel (a fixed-hyperparameter kernel for paper reproductions).
    """
    for name, value in (("lengthscale", lengthscale), ("outputscale", outputscale)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive and finite, got {value}.")
    kernel = ScaleKernel(RBFKernel()).to(dtype)
    # Tensors in ``dtype``: gpytorch's setters turn a Python float into a tensor
    # of the default dtype first (float32: 0.3 would become 0.3 + 1.2e-8).
    kernel.base_kernel.lengthscale = torch.tensor(lengthscale, dtype=dtype)
    kernel.outputscale = torch.tensor(outputscale, dtype=dtype)
    kernel.requires_grad_(False)
    return kernel
