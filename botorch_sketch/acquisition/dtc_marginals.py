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

**Gram form.** With the folded predictor (``N`` empty: the batch-start posterior
with every pending point in the full hallucination's block) the variance's
quadratic form can use ``G = P P^T`` (``m x m``, formed once per batch):
``||F_P||^2 = k^T G k`` and ``P_p F_P = H^T k`` with ``H = P P_p^T``
(``m x p``, one column per pending point), so the backward needs no second
product (``c = g_a a - 2 g_var 1[.] G k + ...``): one ``q x m x m`` product per
evaluation instead of two. ``G`` rounds worse than ``P`` where ``P`` has large
entries (an ill-conditioned dictionary: low noise, long lengthscales), so
:func:`gram_form` forms it only where the two agree on the dictionary's own rows
to :data:`GRAM_TOLERANCE` times the noise variance.

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

__all__ = ["GramForm", "PendingRows", "dtc_marginals", "extend_gram_form", "gram_form"]

#: :func:`gram_form` is used where its variances on the dictionary's rows agree with
#: the two-product form's to this fraction of the noise variance (RLS units).
GRAM_TOLERANCE = 1e-6
#: Dictionary rows on which :func:`gram_form` checks its rounding (strided).
GRAM_CHECK_ROWS = 256


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


class GramForm(NamedTuple):
    r"""The folded predictor's quadratic form (module docstring, "Gram form").

    Attributes:
        a: ``m`` mean weights (the predictor's first column).
        gram: ``m x m`` matrix ``G = P P^T``.
        H: ``m x p`` matrix ``P P_p^T`` (one column per pending point, in order).
    """

    a: Tensor
    gram: Tensor
    H: Tensor


def gram_form(
    kernel: SquaredExponential,
    S: Tensor,
    predictor: DTCPredictor,
    lam: Tensor | float,
    tolerance: float = GRAM_TOLERANCE,
) -> GramForm | None:
    r"""``G = P P^T`` of a folded predictor, if it rounds well enough here.

    ``O(m^2 r)`` once, plus a check on up to :data:`GRAM_CHECK_ROWS` strided
    dictionary rows (where ``k(x, S)`` is largest and the cancellation worst):
    ``k^T G k`` against ``||P^T k||^2`` to ``tolerance * lam``.

    Args:
        kernel: The Gaussian kernel's evaluator.
        S: ``m x d`` dictionary (transformed inputs).
        predictor: The batch-start predictor (unbatched).
        lam: The noise variance, in the variance's units.
        tolerance: Largest disagreement, as a fraction of ``lam``.

    Returns:
        The :class:`GramForm` with no pending column, or ``None`` (an unfolded
        predictor, batched parameters, or a disagreement above the tolerance).
    """
    basis = predictor.basis
    if kernel.parameters() is None or basis.dim() != 2:
        return None
    if basis.shape[-1] != 1 + predictor.num_explained:  # N has columns
        return None
    P = basis[:, 1:]
    gram = P @ P.mT
    step = max(1, S.shape[0] // GRAM_CHECK_ROWS)
    K = kernel(S[::step], S)
    error = ((K @ gram) * K).sum(-1) - (K @ P).pow(2).sum(-1)
    if not bool(error.abs().max() <= tolerance * lam):
        return None
    return GramForm(a=basis[:, 0], gram=gram, H=basis.new_zeros(basis.shape[0], 0))


def extend_gram_form(
    form: GramForm, predictor: DTCPredictor, P_new: Tensor
) -> GramForm:
    r"""``form`` with the columns ``P P_new^T`` of new pending points appended.

    Args:
        form: The form so far.
        predictor: The batch-start predictor ``form`` was built from.
        P_new: ``q x r_p`` explained parts of the new pending points.
    """
    H_new = predictor.basis[:, 1 : 1 + predictor.num_explained] @ P_new.mT
    return form._replace(H=torch.cat([form.H, H_new], dim=-1))


def dtc_marginals(
    kernel: SquaredExponential,
    Xt: Tensor,
    S: Tensor,
    predictor: DTCPredictor,
    pending: PendingRows | None = None,
    gram: GramForm | None = None,
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
        gram: The predictor's :class:`GramForm` with one ``H`` column per pending
            point, or ``None`` (the two-product form).

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
    if gram is not None:
        offset, var = _GramMarginals.apply(flat, kernel, ls, prior, S, gram, pending)
    else:
        offset, var = _DTCMarginals.apply(
            flat, kernel, ls, prior, S, predictor, pending
        )
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


class _GramMarginals(torch.autograd.Function):
    r""":class:`_DTCMarginals` in the Gram form: one ``R x m x m`` product."""

    @staticmethod
    def forward(
        ctx: Any,
        X: Tensor,
        kernel: SquaredExponential,
        ls: Tensor,
        prior: float | Tensor,
        S: Tensor,
        form: GramForm,
        pending: PendingRows | None,
    ) -> tuple[Tensor, Tensor]:
        K = kernel(X, S)  # R x m
        KG = K @ form.gram
        residual = prior - (KG * K).sum(-1)
        var = residual.clamp_min(0.0)
        K_p = U = None
        if pending is not None:
            K_p = kernel(X, pending.Xt)  # R x p
            v = K_p - K @ form.H
            U = torch.linalg.solve_triangular(pending.chol, v.mT, upper=False)
            var = var - U.pow(2).sum(-2)
        ctx.save_for_backward(X, K, KG, residual > 0)
        ctx.extras = (ls, S, form, pending, K_p, U)
        return K @ form.a, var

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_offset: Tensor, g_var: Tensor) -> tuple[Any, ...]:
        X, K, KG, explained = ctx.saved_tensors
        ls, S, form, pending, K_p, U = ctx.extras
        g = g_var.unsqueeze(-1)
        c = g_offset.unsqueeze(-1) * form.a - 2.0 * g * KG * explained.unsqueeze(-1)
        grad = None
        if pending is not None:
            Z = torch.linalg.solve_triangular(pending.chol.mT, U, upper=True).mT
            dv = -2.0 * g * Z  # d(-||C^-1 v||^2)/dv, v = K_p - K H
            c = c - dv @ form.H.mT
            grad = _kernel_row_gradient(X, dv, K_p, pending.Xt, ls)
        grad_S = _kernel_row_gradient(X, c, K, S, ls)
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
