r"""The DTC mean offset and variance of a batch UCB, with a closed-form gradient.

:class:`~botorch_sketch.acquisition.BatchUpperConfidenceBound` is maximised by
L-BFGS-B thousands of times per batch, so its value and gradient with respect to
the query points are the inner loop of every BBKB strategy on a box. With the
frozen predictor ``[a | P | N]`` (:class:`~botorch_sketch.linalg.DTCPredictor`,
``m x (1 + r_p + r_n)``) and a Gaussian kernel
``k(x, s) = o exp(-||(x - s) / l||^2 / 2)``, for one row ``x`` (``d``) with
``k = k(x, S)`` (``m``) and ``F = k^T [a | P | N]``:

    mean(x) = F_a                                   (the offset a^T k_S(x))
    var(x)  = max(o - ||F_P||^2, 0) + ||F_N||^2 - ||C^{-1} v(X_p, x)||^2,

where the last term is the full hallucination's (BBKB Sec. 3.1 with GP-BUCB's
update): ``v(X_p, x) = k(X_p, x) - P_p F_P`` for the ``p`` pending points ``X_p``
with explained parts ``P_p`` (``p x r_p``) and ``C C^T = V_pp + lam I``.

The gradient needs no autograd graph. For any scalar ``L`` with ``c = dL/dk``
(``m``), ``dk_i/dx = -k_i (x - s_i) / l^2``, so

    dL/dx = -((sum_i c_i k_i) x - (c * k)^T S) / l^2,                      (d)

and ``c = [dL/dF_a | dL/dF_P | dL/dF_N] [a | P | N]^T`` with
``dL/dF_P = g_var (-2 F_P 1[o > ||F_P||^2] + 2 Z P_p)``, ``dL/dF_N = 2 g_var F_N``,
``Z = C^{-T} C^{-1} v`` (``p``), and the pending kernel row contributing
``c_p = -2 g_var Z`` through the same formula with ``X_p`` in place of ``S``. One
``q x m x (1 + r)`` product forward and one backward, against the four products,
the kernel's distance graph and its elementwise backward that autograd records
(:func:`dtc_marginals` gives the same numbers; tests compare both).

Not the Gram form ``G = P P^T`` (one ``q x m x m`` product instead of two):
``k^T G k`` rounds far worse than ``||P^T k||^2`` where ``G`` has large entries,
enough for L-BFGS-B's line search to fail near a maximum and to take more
evaluations than the second product saves
(``benchmarks/results/batch_ucb_notes.md``).

Only a Gaussian kernel (``RBFKernel``, optionally in a ``ScaleKernel``) without
batch dimensions has this path
(:class:`~botorch_sketch.bbkb.dense_kernel.SquaredExponential`); callers fall back
to autograd for any other kernel.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from botorch_sketch.bbkb.dense_kernel import SquaredExponential
from botorch_sketch.linalg import DTCPredictor

__all__ = ["PendingRows", "dtc_marginals"]


class PendingRows(NamedTuple):
    r"""Pending points of the full hallucination, as :func:`dtc_marginals` needs them.

    Attributes:
        Xt: ``p x d`` transformed pending points.
        P: ``p x r_p`` their explained parts at the batch start.
        chol: ``p x p`` lower Cholesky factor ``C`` of ``V_pp + lam I``.
    """

    Xt: Tensor
    P: Tensor
    chol: Tensor


def dtc_marginals(
    kernel: SquaredExponential,
    Xt: Tensor,
    S: Tensor,
    predictor: DTCPredictor,
    pending: PendingRows | None = None,
) -> tuple[Tensor, Tensor] | None:
    r"""``(mean offset, variance)`` of the frozen DTC posterior at each row of ``Xt``.

    Differentiable in ``Xt`` (once) by the closed form of the module docstring;
    the kernel's parameters, ``S``, the predictor and the pending block are
    constants.

    Args:
        kernel: The Gaussian kernel's evaluator (its current parameters are used).
        Xt: ``batch_shape x q x d`` transformed inputs.
        S: ``m x d`` dictionary (transformed inputs).
        predictor: The frozen ``[a | P | N]`` predictor (an unbatched basis).
        pending: The full hallucination's pending block, or ``None``.

    Returns:
        ``(offset, var)``, each ``batch_shape x q``: ``a^T k_S(x)`` and the
        variance above (latent units, before dividing by ``lam``); ``None`` when
        the kernel's parameters have batch dimensions (use the autograd path).
    """
    params = kernel.parameters()
    if params is None or predictor.basis.dim() != 2:
        return None
    ls, scale = (None if p is None else p.detach() for p in params)
    prior = 1.0 if scale is None else scale  # a tensor: no host sync on a GPU
    flat = Xt.reshape(-1, Xt.shape[-1])
    offset, var = _DTCMarginals.apply(flat, kernel, ls, prior, S, predictor, pending)
    return offset.reshape(Xt.shape[:-1]), var.reshape(Xt.shape[:-1])


class _DTCMarginals(torch.autograd.Function):
    r"""Rows ``R x d`` -> ``(offset R, var R)`` with the closed-form backward."""

    @staticmethod
    def forward(
        ctx: Any,
        X: Tensor,
        kernel: SquaredExponential,
        ls: Tensor,
        prior: float | Tensor,
        S: Tensor,
        predictor: DTCPredictor,
        pending: PendingRows | None,
    ) -> tuple[Tensor, Tensor]:
        basis, r_p = predictor.basis, 1 + predictor.num_explained
        K = kernel(X, S)  # R x m
        F = K @ basis
        P, N = F[:, 1:r_p], F[:, r_p:]
        residual = prior - P.pow(2).sum(-1)
        var = residual.clamp_min(0.0) + N.pow(2).sum(-1)
        K_p = U = None
        if pending is not None:
            K_p = kernel(X, pending.Xt)  # R x p
            v = K_p - P @ pending.P.mT
            U = torch.linalg.solve_triangular(pending.chol, v.mT, upper=False)
            var = var - U.pow(2).sum(-2)
        ctx.save_for_backward(X, K, P, N, residual > 0)
        ctx.extras = (ls, S, basis, pending, K_p, U)
        return F[:, 0].clone(), var

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_offset: Tensor, g_var: Tensor) -> tuple[Any, ...]:
        X, K, P, N, explained = ctx.saved_tensors
        ls, S, basis, pending, K_p, U = ctx.extras
        g = g_var.unsqueeze(-1)
        dP = -2.0 * g * P * explained.unsqueeze(-1).to(P)
        grad = None
        if pending is not None:
            Z = torch.linalg.solve_triangular(pending.chol.mT, U, upper=True).mT
            # d(-||C^-1 v||^2)/dP with v = K_p - P P_p^T
            dP = dP + 2.0 * g * (Z @ pending.P)
            grad = _kernel_row_gradient(X, -2.0 * g * Z, K_p, pending.Xt, ls)
        dF = torch.cat([g_offset.unsqueeze(-1), dP, 2.0 * g * N], dim=-1)
        grad_S = _kernel_row_gradient(X, dF @ basis.mT, K, S, ls)
        grad = grad_S if grad is None else grad + grad_S
        return grad, None, None, None, None, None, None


def _kernel_row_gradient(
    X: Tensor, c: Tensor, K: Tensor, S: Tensor, ls: Tensor
) -> Tensor:
    r"""``sum_i c_i dk(x, s_i)/dx`` for a Gaussian kernel, every row of ``X`` at once.

    ``X``: ``R x d``, ``c`` and ``K = k(X, S)``: ``R x m``, ``S``: ``m x d``,
    ``ls``: ``1 x d`` (or ``1 x 1``) lengthscales. ``O(R m d)`` in one product.
    """
    w = c * K
    return (w @ S - w.sum(-1, keepdim=True) * X) / ls.pow(2)
