"""Tests for GOUCBModel: hand-computed posteriors, the BoTorch contract, bad input."""

from __future__ import annotations

import math
from copy import deepcopy

import pytest
import torch
from botorch.acquisition import (
    UpperConfidenceBound,
)
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms import Standardize
from torch import nn

from botorch_sketch.goucb.confidence import OFULBeta, ellipsoid_argmax
from botorch_sketch.goucb.network import ParameterLayout, paper_network
from botorch_sketch.goucb.oracle import OracleOptions, fit_regression_oracle
from botorch_sketch.models.goucb import GOUCBModel, fit_goucb_model

DT = torch.float64
FAST = OracleOptions(steps=200, lr=3e-2)
D = 3


def make_data(n=10, d=D, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=DT)
    Y = torch.sin(3 * X).sum(-1, keepdim=True) + 0.01 * torch.randn(
        n, 1, generator=g, dtype=DT
    )
    return X, Y


def small_net(seed=0):
    return paper_network(D, width=5, seed=seed)


def make_model(X=None, Y=None, **kwargs):
    if X is None:
        X, Y = make_data()
    opts = dict(network=small_net(), n_init=4, lambda_=0.5, oracle=FAST, seed=0)
    opts.update(kwargs)
    return GOUCBModel(X, Y, **opts)


def flat_grad(net, x):
    """Parameter gradient of net at one input, by plain autograd."""
    net.zero_grad()
    out = net(x.unsqueeze(0)).sum()
    out.backward()
    return out.detach(), torch.cat([p.grad.reshape(-1) for p in net.parameters()])


def hand_state(X, y, n0, lam, w0, net):
    """Replay Algorithm 1's Phase II with autograd (no library confidence code)."""
    net = deepcopy(net)
    layout = ParameterLayout.from_module(net)
    w = w0.clone()
    G, Z = [], []
    for i in range(n0, X.shape[0]):
        layout.load(net, w)
        f, g = flat_grad(net, X[i])
        G.append(g)
        Z.append(g @ w + y[i] - f)  # Eq. (5) pseudo-target
        Gm = torch.stack(G)
        sigma = lam * torch.eye(w.shape[0], dtype=DT) + Gm.T @ Gm
        w = torch.linalg.solve(sigma, Gm.T @ torch.stack(Z) + lam * w0)
    return w, sigma


def test_posterior_equals_hand_computation():
    X, Y = make_data()
    model = make_model(X, Y, outcome_transform=None)
    w0 = fit_regression_oracle(small_net(), X[:4], Y[:4], options=FAST, seed=0)
    w, sigma = hand_state(X, Y.squeeze(-1), 4, 0.5, w0, small_net())
    torch.testing.assert_close(model.w_hat, w)
    torch.testing.assert_close(model.confidence_set.sigma, sigma)
    Xt = torch.rand(2, 3, D, dtype=DT)
    post = model.posterior(Xt)
    assert post.mean.shape == (2, 3, 1)
    net = deepcopy(small_net())
    ParameterLayout.from_module(net).load(net, w)
    sigma_inv = torch.linalg.inv(sigma)
    for b in range(2):
        J = torch.stack([flat_grad(net, Xt[b, j])[1] for j in range(3)])
        torch.testing.assert_close(post.mean[b, :, 0], net(Xt[b]).squeeze(-1).detach())
        torch.testing.assert_close(
            post.distribution.covariance_matrix[b], J @ sigma_inv @ J.T
        )


def test_ucb_is_the_max_of_the_linearized_model_over_the_ellipsoid():
    model = make_model()
    beta = 2.0
    x = torch.rand(5, 1, D, dtype=DT)
    ucb = UpperConfidenceBound(model, beta=beta)(x)
    # w*(x) = w_hat + sqrt(beta) Sigma^{-1} g / ||g||_{Sigma^{-1}} (spec Sec. 3.2)
    state = model.confidence_set
    std = model.outcome_transform.stdvs.squeeze()
    mu = model.outcome_transform.means.squeeze()
    net = deepcopy(model.network)
    for i in range(5):
        f, g = flat_grad(net, x[i, 0])
        _, v = ellipsoid_argmax(g, state.sigma_inv, beta)
        assert float(v @ state.sigma @ v) == pytest.approx(beta)
        f_lin = f + g @ v  # linearized model at w*, model units
        assert float(mu + std * f_lin) == pytest.approx(float(ucb[i]), rel=1e-10)
        # no point of the ellipsoid does better on the linearized model
        u = torch.randn(
            500, g.shape[0], dtype=DT, generator=torch.Generator().manual_seed(i)
        )
        u = u / u.norm(dim=-1, keepdim=True)
        V = math.sqrt(beta) * u @ torch.linalg.cholesky(state.sigma_inv).T
        assert float((f + V @ g).max()) <= float(f_lin) + 1e-10


def test_standardize_and_observation_noise():
    X, Y = make_data()
    plain = make_model(X, (Y - Y.mean()) / Y.std(), outcome_transform=None)
    model = make_model(X, Y, outcome_transform=Standardize(1), noise_variance=0.3)
    Xt = torch.rand(4, 2, D, dtype=DT)
    p0, p1 = plain.posterior(Xt), model.posterior(Xt)
    s = Y.std()
    torch.testing.assert_close(p1.mean, Y.mean() + s * p0.mean)
    cov0 = p0.distribution.covariance_matrix
    torch.testing.assert_close(p1.distribution.covariance_matrix, 0.3 * s**2 * cov0)
    noisy = model.posterior(Xt, observation_noise=True).distribution.covariance_matrix
    torch.testing.assert_close(noisy, 0.3 * s**2 * (cov0 + torch.eye(2, dtype=DT)))
    extra = torch.full((4, 2, 1), 0.2, dtype=DT)
    tensor_noise = model.posterior(Xt, observation_noise=extra).distribution
    torch.testing.assert_close(
        tensor_noise.covariance_matrix,
        s**2 * (0.3 * cov0 + 0.2 * torch.eye(2, dtype=DT)),
    )


def test_seeded_fits_reproduce():
    X, Y = make_data()
    a = make_model(X, Y, seed=3, oracle=OracleOptions(steps=150, lr=3e-2, restarts=2))
    b = make_model(X, Y, seed=3, oracle=OracleOptions(steps=150, lr=3e-2, restarts=2))
    c = make_model(X, Y, seed=4, oracle=OracleOptions(steps=150, lr=3e-2, restarts=2))
    torch.testing.assert_close(a.w_hat, b.w_hat, rtol=0, atol=0)
    assert not torch.equal(a.w_hat, c.w_hat)
    default = GOUCBModel(X, Y, n_init=4, oracle=FAST, seed=1)
    again = GOUCBModel(X, Y, n_init=4, oracle=FAST, seed=1)
    assert default._layout.numel == 25 * D + 51
    torch.testing.assert_close(default.w_hat, again.w_hat, rtol=0, atol=0)


def test_condition_on_observations_equals_rebuild():
    X, Y = make_data(n=12)
    model = make_model(X[:8], Y[:8], outcome_transform=None)
    cond = model.condition_on_observations(X[8:], Y[8:])
    rebuilt = make_model(X, Y, outcome_transform=None)
    torch.testing.assert_close(cond.w_hat, rebuilt.w_hat)
    torch.testing.assert_close(
        cond.confidence_set.sigma_inv, rebuilt.confidence_set.sigma_inv
    )
    assert cond.round == rebuilt.round == 12 - 4 + 1
    assert model.round == 5  # the original is untouched
    with pytest.raises(UnsupportedError, match="batched"):
        model.condition_on_observations(X[None, 8:], Y[None, 8:])


def test_linearization_modes_and_default_phase1():
    X, Y = make_data(n=12)
    perm = torch.cat(
        [
            torch.arange(4),
            4 + torch.randperm(8, generator=torch.Generator().manual_seed(0)),
        ]
    )
    anchor = make_model(X, Y, linearization="anchor")
    anchor_perm = make_model(X[perm], Y[perm], linearization="anchor")
    Xt = torch.rand(5, 1, D, dtype=DT)
    torch.testing.assert_close(
        anchor.posterior(Xt).variance, anchor_perm.posterior(Xt).variance
    )
    torch.testing.assert_close(anchor.w_hat, anchor_perm.w_hat)
    replay = make_model(X, Y)
    assert not torch.allclose(replay.w_hat, anchor.w_hat)
    # n_init=None: every row is Phase I and enters Sigma at w_hat_0
    full = make_model(X, Y, n_init=None)
    assert full.phase1_in_sigma and full.confidence_set.num_updates == 12
    prior_like = make_model(X, Y, n_init=None, phase1_in_sigma=False)
    at_train = X[:3].unsqueeze(1)
    assert bool(
        (
            full.posterior(at_train).variance < prior_like.posterior(at_train).variance
        ).all()
    )


def test_linear_network_is_ridge_regression_centred_at_w0():
    # f(x; w) = w^T [x, 1]: GO-UCB is OFUL with the ridge centred at w_hat_0.
    X, Y = make_data(n=12)
    model = make_model(X, Y, network=nn.Linear(D, 1).double(), outcome_transform=None)
    w0 = model.confidence_set.w0
    Phi = torch.cat([X[4:], torch.ones(8, 1, dtype=DT)], -1)
    A = Phi.T @ Phi + 0.5 * torch.eye(D + 1, dtype=DT)
    ridge = w0 + torch.linalg.solve(A, Phi.T @ (Y[4:, 0] - Phi @ w0))
    torch.testing.assert_close(model.w_hat, ridge)


def test_beta_schedule_and_refit():
    X, Y = make_data()
    model = make_model(X, Y, beta=OFULBeta(sigma=1.0, S=1.0))
    cs = model.confidence_set
    assert model.beta_t() == pytest.approx(
        (math.sqrt(cs.log_det_ratio + 2 * math.log(10)) + math.sqrt(0.5)) ** 2
    )
    before = model.w_hat.clone()
    with pytest.raises(ValueError, match="diverged"):
        fit_goucb_model(model, oracle=OracleOptions(optimizer="sgd", steps=30, lr=1e8))
    torch.testing.assert_close(model.w_hat, before, rtol=0, atol=0)  # unchanged
    assert model.oracle == FAST
    fit_goucb_model(model, seed=7)
    assert model.seed == 7 and not torch.equal(model.w_hat, before)
    lazy = make_model(X, Y, fit=False)
    with pytest.raises(RuntimeError, match="not fitted"):
        lazy.posterior(X[:1])
    assert fit_goucb_model(lazy).is_fitted


class _NoParams(nn.Module):
    def forward(self, x):
        return x.sum(-1, keepdim=True)


class _Detached(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, 1).double()

    def forward(self, x):
        return self.lin(x).detach()


class _TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, 2).double()

    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(network=_NoParams()), ValueError, "no trainable parameters"),
        (dict(network=_Detached()), ValueError, "differentiably"),
        (dict(network=_TwoOutputs()), ValueError, "N x 1"),
        (dict(network="mlp"), TypeError, "torch.nn.Module"),
        (dict(n_init=0), ValueError, "n_init"),
        (dict(n_init=11), ValueError, "n_init"),
        (dict(linearization="exact"), ValueError, "linearization"),
        (dict(lambda_=0.0), ValueError, "lambda_"),
        (dict(noise_variance=-1.0), ValueError, "noise_variance"),
        (dict(beta="big"), TypeError, "beta"),
        (dict(seed=1.5), TypeError, "seed"),
    ],
)
def test_bad_options(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_model(**kwargs)


def test_bad_data():
    X, Y = make_data()
    cases = [
        (X[:0], Y[:0], "empty"),
        (X.clone().fill_(float("nan")), Y, "train_X contains NaN"),
        (X, torch.full_like(Y, float("nan")), "train_Y contains NaN"),
        (X.unsqueeze(0), Y.unsqueeze(0), "n x d"),
        (X, Y.repeat(1, 2), "n x 1"),
        (X, Y[:-1], "rows"),
        (X, Y.float(), "float"),
    ]
    for Xb, Yb, match in cases:
        with pytest.raises(ValueError, match=match):
            make_model(Xb, Yb, n_init=None)
    with pytest.raises(TypeError, match="floating"):
        make_model(X.long(), Y.long(), n_init=None)
    model = make_model(X, Y)
    with pytest.raises(ValueError, match="batch_shape x q x 3"):
        model.posterior(torch.rand(2, 4, dtype=DT))
    with pytest.raises(TypeError, match="float32"):
        model.posterior(X[:1].float())
    with pytest.raises(ValueError, match="one output"):
        model.posterior(X[:1], output_indices=[1])
