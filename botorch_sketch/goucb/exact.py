r"""GO-UCB's exact optimistic value ``max_{w in Ball_t} f(x; w)`` (Algorithm 1, step 5).

The paper selects ``x_t = argmax_x max_{w in Ball_t} f(x; w)`` by joint gradient
ascent over ``(x, w)`` (2000 iterations, learning rate ``1e-4``, Appendix D.1; how
the ball constraint was enforced is not stated). The linearized value
``f(x; w_hat) + sqrt(beta) ||g(x)||_{Sigma^{-1}}`` (BoTorch's UCB on
:class:`~botorch_sketch.models.goucb.GOUCBModel`) differs from it by at most
``C_h beta / (2 lambda)`` (spec Sec. 3.2). For replication we provide the exact inner
maximum (spec Sec. 3.3, option A, "refine"):

* parametrize the ellipsoid as ``w = w_hat + sqrt(beta) C u`` with
  ``C C^T = Sigma^{-1}`` (Cholesky) and ``||u||_2 <= 1``, so that
  ``||w - w_hat||^2_Sigma = beta ||u||^2``;
* start at the linearized maximizer ``u_0 = C^T g / ||C^T g||`` (i.e.
  ``w*(x) = w_hat + sqrt(beta) Sigma^{-1} g / ||g||_{Sigma^{-1}}``);
* take ``steps`` normalized projected gradient-ascent steps in ``u`` and keep the
  best iterate, so the result is never below the linearized maximizer's value.

The outer maximization over ``x`` is BoTorch's ``optimize_acqf`` on
:class:`~botorch_sketch.acquisition.goucb.GOUCBExactUCB`. The inner ascent is a
local method: ``max_{Ball} f(x; .)`` is non-concave in general, so "exact" means "a
local maximum refined from the linearized maximizer", as in the paper's gradient
ascent.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from botorch_sketch.goucb.confidence import GradientConfidenceSet
from botorch_sketch.goucb.network import ParameterLayout, rowwise_values_and_jacobian


def ellipsoid_inner_max(
    module: nn.Module,
    layout: ParameterLayout,
    state: GradientConfidenceSet,
    beta: float,
    X: Tensor,
    steps: int = 20,
    step_size: float = 0.2,
) -> tuple[Tensor, Tensor]:
    r"""``max_{w in Ball} f(x; w)`` for each row of ``X`` (module docstring).

    Args:
        module: The regressor.
        layout: Its :class:`~botorch_sketch.goucb.network.ParameterLayout`.
        state: The confidence set (``w_hat``, ``Sigma^{-1}``).
        beta: Squared radius ``beta_t >= 0``.
        X: ``N x d`` inputs (as the network sees them).
        steps: Projected ascent steps after the linearized start (0: return the
            value at the linearized maximizer).
        step_size: Step length in ``u`` (the unit-ball coordinates).

    Returns:
        ``(values, W)``: ``N`` optimistic values and the ``N x d_w`` maximizers, both
        detached.
    """
    if not (beta >= 0 and math.isfinite(beta)):
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}.")
    if not (isinstance(steps, int) and steps >= 0):
        raise ValueError(f"steps must be a non-negative int, got {steps!r}.")

    def value_grad(W: Tensor, X: Tensor) -> tuple[Tensor, Tensor]:
        f, J = rowwise_values_and_jacobian(module, layout, W, X)
        return J, f

    with torch.no_grad():
        X = X.detach()
        C = torch.linalg.cholesky(state.sigma_inv)
        w_hat = state.w_hat.expand(X.shape[0], -1)
        radius = math.sqrt(beta)

        def to_w(u: Tensor) -> Tensor:
            return w_hat + radius * u @ C.T

        g, _ = value_grad(w_hat, X)
        u = g @ C
        u = u / u.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(u.dtype).tiny)
        best_w = to_w(u)
        g, best = value_grad(best_w, X)
        for _ in range(steps):
            gu = radius * g @ C
            u = u + step_size * gu / gu.norm(dim=-1, keepdim=True).clamp_min(
                torch.finfo(u.dtype).tiny
            )
            u = u / u.norm(dim=-1, keepdim=True).clamp_min(1.0)
            w = to_w(u)
            g, value = value_grad(w, X)
            better = value > best
            best = torch.where(better, value, best)
            best_w = torch.where(better.unsqueeze(-1), w, best_w)
    return best, best_w
