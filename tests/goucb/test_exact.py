"""Tests for the exact inner maximum over GO-UCB's ellipsoid."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.models.transforms import Standardize
from botorch.optim import optimize_acqf
from torch import nn

from botorch_sketch.acquisition.goucb import GOUCBExactUCB
from botorch_sketch.goucb.confidence import ellipsoid_argmax
from botorch_sketch.goucb.exact import ellipsoid_inner_max
from botorch_sketch.goucb.network import paper_network, values_and_jacobian
from botorch_sketch.goucb.oracle import OracleOptions
from botorch_sketch.models.goucb import GOUCBModel

DT = torch.float64
FAST = OracleOptions(steps=200, lr=3e-2)


def make_model(network, outcome_transform=None, n=10, d=2):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, d, generator=g, dtype=DT)
    Y = torch.cos(3 * X).sum(-1, keepdim=True)
    return GOUCBModel(
        X,
        Y,
        network=network,
        n_init=4,
        lambda_=0.5,
        oracle=FAST,
        outcome_transform=outcome_transform,
    )


def test_linear_in_w_exact_equals_closed_form():
    # f(x; w) = w^T [x, 1] is linear in w, so the exact maximum is the closed form.
    model = make_model(nn.Linear(2, 1).double(), outcome_transform=Standardize(1))
    beta = 3.0
    X = torch.rand(6, 1, 2, dtype=DT)
    exact = GOUCBExactUCB(model, beta=beta, steps=5)(X)
    ucb = UpperConfidenceBound(model, beta=beta)(X)
    torch.testing.assert_close(exact, ucb)
    state = model.confidence_set
    _, W = ellipsoid_inner_max(model.network, model._layout, state, beta, X.squeeze(1))
    _, J = values_and_jacobian(model.network, model._layout, state.w_hat, X.squeeze(1))
    _, v = ellipsoid_argmax(J, state.sigma_inv, beta)
    torch.testing.assert_close(W, state.w_hat + v)


def test_nonlinear_refinement_stays_in_ball_and_improves():
    model = make_model(paper_network(2, width=6, seed=0))
    state = model.confidence_set
    beta = 0.5
    X = torch.rand(8, 2, dtype=DT, generator=torch.Generator().manual_seed(3))
    start, W0 = ellipsoid_inner_max(
        model.network, model._layout, state, beta, X, steps=0
    )
    best, W = ellipsoid_inner_max(
        model.network, model._layout, state, beta, X, steps=30
    )
    assert bool((best >= start).all()) and bool((best > start + 1e-9).any())
    D = W - state.w_hat
    assert bool(((D @ state.sigma * D).sum(-1) <= beta * (1 + 1e-9)).all())
    # steps=0 is the linearized maximizer w*(x) (spec Sec. 3.2)
    _, J = values_and_jacobian(model.network, model._layout, state.w_hat, X)
    _, v = ellipsoid_argmax(J, state.sigma_inv, beta)
    torch.testing.assert_close(W0, state.w_hat + v)
    # up to the Taylor term, the exact value is close to the linearized UCB
    ucb = UpperConfidenceBound(model, beta=beta)(X.unsqueeze(1))
    assert float((best - ucb).abs().max()) < 0.5 * math.sqrt(beta)


def test_exact_acquisition_optimizes_and_validates():
    model = make_model(paper_network(2, width=6, seed=0))
    acqf = GOUCBExactUCB(model, beta=1.0, steps=5)
    X = torch.rand(4, 1, 2, dtype=DT, requires_grad=True)
    acqf(X).sum().backward()
    assert X.grad is not None and bool(torch.isfinite(X.grad).all())
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    x, v = optimize_acqf(
        acqf,
        bounds,
        q=1,
        num_restarts=2,
        raw_samples=16,
        options={"seed": 0, "maxiter": 20},
    )
    assert x.shape == (1, 2) and bool(torch.isfinite(v))
    with pytest.raises(ValueError, match="beta"):
        GOUCBExactUCB(model, beta=-1.0)
    with pytest.raises(TypeError, match="GOUCBModel"):
        GOUCBExactUCB(object(), beta=1.0)
