"""Tests of BatchUpperConfidenceBound against NystromGP's own posterior."""

from __future__ import annotations

import pytest
import torch
from botorch.acquisition import UpperConfidenceBound
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.optim import optimize_acqf
from botorch.utils.sampling import manual_seed

from botorch_sketch.acquisition import BatchUpperConfidenceBound, pending_cholesky
from botorch_sketch.models import NystromGP
from tests.threads import one_torch_thread

DT = torch.float64


@pytest.fixture(autouse=True)
def _single_thread():
    with one_torch_thread():
        yield


def make_model(n=40, d=2, m=1, standardize=False, dictionary=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=DT)
    f = torch.sin(5 * X).sum(-1, keepdim=True)
    Y = torch.cat([f * (j + 1) for j in range(m)], -1)
    Y = Y + 0.05 * torch.randn(Y.shape, generator=g, dtype=DT)
    kw = {} if standardize else {"outcome_transform": None}
    if dictionary is None:
        # A strict subset: at these settings a leverage-score draw keeps more
        # than half the points, which the model would replace by every point.
        dictionary = torch.arange(0, n, 2)
    model = NystromGP(X, Y, dictionary=dictionary, seed=0, **kw)
    model.covar_module.lengthscale = 0.3
    model.likelihood.noise = 0.02
    model.eval()
    return model


def lam_of(model):
    lam = model.likelihood.noise.detach().reshape(-1)[0]
    if hasattr(model, "outcome_transform"):
        lam = lam * model.outcome_transform.stdvs.reshape(-1)[0] ** 2
    return lam


def test_sparse_dictionary_is_used():
    # The DTC tests below are only meaningful if the dictionary is a strict subset.
    model = make_model()
    assert 0 < model.dictionary_size < 40


@pytest.mark.parametrize("standardize", [False, True])
def test_value_matches_hand_computation(standardize):
    model = make_model(standardize=standardize)
    alpha = 0.7
    acqf = BatchUpperConfidenceBound(model, alpha=alpha)
    X = torch.rand(6, 1, 2, dtype=DT)
    post = model.posterior(X)
    mu = post.mean.reshape(-1)
    var = post.variance.reshape(-1)
    lam = lam_of(model)
    expected = mu + alpha * (var / lam).sqrt()
    val = acqf(X)
    assert val.shape == (6,)
    torch.testing.assert_close(val, expected.detach(), rtol=1e-9, atol=1e-9)
    assert acqf.lam == pytest.approx(float(lam), rel=1e-9)


def test_model_cache_built_with_data_gradients_gives_the_same_ucb():
    """A model whose posterior cache was built for data with gradients (the
    unfolded predictor of a fantasy model) gives the same UCB: the acquisition
    folds the predictor itself."""
    from botorch_sketch import linalg

    model = make_model()
    X = torch.rand(6, 1, 2, dtype=DT)
    expected = BatchUpperConfidenceBound(model, alpha=0.7)(X)
    cache = model._posterior_cache()
    cache["predictor"] = linalg.dtc_predictor(cache["W"], cache["factor"], fold=False)
    assert not model.dtc_predictor().folded
    val = BatchUpperConfidenceBound(model, alpha=0.7)(X)
    torch.testing.assert_close(val, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("standardize", [False, True])
def test_pending_variance_equals_conditioned_model(standardize):
    model = make_model(standardize=standardize)
    alpha = 1.3
    Xp = torch.rand(5, 2, dtype=DT)
    acqf = BatchUpperConfidenceBound(
        model, alpha=alpha, X_pending=Xp, hallucination="dictionary"
    )
    X = torch.rand(7, 1, 2, dtype=DT)
    cond = model.condition_on_observations(Xp, model.posterior(Xp).mean.detach())
    var_c = cond.posterior(X).variance.reshape(-1).detach()
    lam = lam_of(model)
    torch.testing.assert_close(
        acqf.rls_variance(X.squeeze(-2)).detach(), var_c / lam, rtol=1e-8, atol=1e-10
    )
    # Mean frozen at the batch start: the model's mean, not the conditioned one.
    mu = model.posterior(X).mean.reshape(-1).detach()
    expected = mu + alpha * (var_c / lam).sqrt()
    torch.testing.assert_close(acqf(X).detach(), expected, rtol=1e-8, atol=1e-9)
    # Pending points strictly reduce the variance near them.
    no_pending = BatchUpperConfidenceBound(model, alpha=alpha)
    at_p = Xp.unsqueeze(-2)
    assert (acqf.rls_variance(Xp) < no_pending.rls_variance(Xp) - 1e-6).all()
    assert (acqf(at_p) < no_pending(at_p)).all()


def conditioned_variance(model, X, Xp):
    """Variance at ``X`` of the model's posterior conditioned on noisy observations
    at ``Xp`` (Gaussian conditioning of the joint posterior, outcome units)."""
    q = X.shape[0]
    cov = model.posterior(torch.cat([X, Xp])).covariance_matrix.detach()
    cov = cov.reshape(cov.shape[-2:])
    K_pp = cov[q:, q:] + lam_of(model) * torch.eye(Xp.shape[0], dtype=DT)
    K_xp = cov[:q, q:]
    return cov.diagonal()[:q] - (K_xp @ torch.linalg.solve(K_pp, K_xp.mT)).diagonal()


@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("dictionary", [None, "all"])
def test_full_hallucination_conditions_the_posterior(standardize, dictionary):
    """``hallucination="full"``: the batch-start posterior (DTC, or the exact GP with
    every point in the dictionary) conditioned on noisy fantasies at the pending
    points, the Nyström residual included; the dictionary update misses it."""
    model = make_model(standardize=standardize, dictionary=dictionary)
    g = torch.Generator().manual_seed(7)
    Xp = torch.rand(5, 2, generator=g, dtype=DT) * 2.0  # mostly outside the data
    X = torch.cat([Xp + 0.01, torch.rand(6, 2, generator=g, dtype=DT)])
    full = BatchUpperConfidenceBound(model, 1.0, X_pending=Xp, hallucination="full")
    expected = conditioned_variance(model, X, Xp) / lam_of(model)
    torch.testing.assert_close(
        full.rls_variance(X).detach(), expected, rtol=1e-7, atol=1e-9
    )
    # At a pending point the variance falls below the noise (RLS < 1), while the
    # frozen embedding leaves points outside its span far above it.
    assert (full.rls_variance(Xp) < 1.0).all()
    assert (full.rls_variance(Xp + 0.01) < 1.5).all()
    if dictionary is None:
        dict_only = BatchUpperConfidenceBound(
            model, 1.0, X_pending=Xp, hallucination="dictionary"
        )
        assert dict_only.rls_variance(Xp).max() > 10.0
    # Covariances follow the same conditioning; the mean stays frozen.
    cov = full.rls_covariance(X, X).detach()
    torch.testing.assert_close(cov.diagonal(), expected, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(
        full.posterior_mean(X.unsqueeze(-2)).detach().reshape(-1),
        model.posterior(X).mean.reshape(-1).detach(),
    )


def test_full_hallucination_incremental_matches_rebuild():
    model = make_model()
    Xp = torch.rand(7, 2, dtype=DT) * 1.5
    X = torch.rand(5, 2, dtype=DT)
    inc = BatchUpperConfidenceBound(model, alpha=1.0, hallucination="full")
    for k in (1, 2, 5, 7):  # appended one or several rows at a time
        inc.set_X_pending(Xp[:k])
        inc.rls_variance(X)
    scratch = BatchUpperConfidenceBound(
        model, alpha=1.0, X_pending=Xp, hallucination="full"
    )
    torch.testing.assert_close(inc.rls_variance(X), scratch.rls_variance(X))
    torch.testing.assert_close(inc._cache().pending.chol, scratch._cache().pending.chol)
    # The finite-set engine hallucinates through the embedding only.
    with pytest.raises(ValueError, match="hallucination='dictionary'"):
        scratch.batch_state(torch.rand(4, 2, dtype=DT))
    with pytest.raises(ValueError, match="hallucination must be"):
        BatchUpperConfidenceBound(model, alpha=1.0, hallucination="exact")


def test_mean_unchanged_by_pending_points():
    model = make_model()
    X = torch.rand(8, 1, 2, dtype=DT)
    acqf = BatchUpperConfidenceBound(model, alpha=1.0)
    mean0 = acqf.posterior_mean(X).detach()
    acqf.set_X_pending(torch.rand(6, 2, dtype=DT))
    torch.testing.assert_close(acqf.posterior_mean(X).detach(), mean0)
    torch.testing.assert_close(
        mean0.reshape(-1), model.posterior(X).mean.reshape(-1).detach()
    )
    # alpha = 0: the value is the frozen mean whatever the pending points.
    zero = BatchUpperConfidenceBound(model, alpha=0.0, X_pending=torch.rand(3, 2))
    torch.testing.assert_close(zero(X).detach(), mean0.reshape(-1))


def test_incremental_pending_update_matches_rebuild():
    model = make_model()
    Xp = torch.rand(9, 2, dtype=DT)
    X = torch.rand(5, 2, dtype=DT)
    inc = BatchUpperConfidenceBound(model, alpha=1.0)
    for k in range(1, 10):
        inc.set_X_pending(Xp[:k])
        inc.rls_variance(X)  # build the cache step by step
    scratch = BatchUpperConfidenceBound(model, alpha=1.0, X_pending=Xp)
    torch.testing.assert_close(inc.rls_variance(X), scratch.rls_variance(X))
    # Removing pending points (not a prefix extension) rebuilds from scratch.
    inc.set_X_pending(None)
    fresh = BatchUpperConfidenceBound(model, alpha=1.0)
    torch.testing.assert_close(inc.rls_variance(X), fresh.rls_variance(X))


@pytest.mark.parametrize("p", [2, 12])
def test_pending_cholesky_both_branches(p):
    g = torch.Generator().manual_seed(1)
    r = 6
    B = torch.randn(r, r, generator=g, dtype=DT)
    L = torch.linalg.cholesky(B @ B.mT + torch.eye(r, dtype=DT))
    V = torch.randn(p, r, generator=g, dtype=DT)
    L2 = pending_cholesky(L, V)
    torch.testing.assert_close(L2 @ L2.mT, L @ L.mT + V.mT @ V)
    assert torch.equal(L2, L2.tril())


def test_gradients_and_optimize_acqf_on_box():
    model = make_model()
    acqf = BatchUpperConfidenceBound(model, alpha=1.0, X_pending=torch.rand(3, 2))
    X = torch.rand(4, 1, 2, dtype=DT, requires_grad=True)
    acqf(X).sum().backward()
    assert torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    with manual_seed(0):  # Boltzmann sampling of the initial conditions
        cand, val = optimize_acqf(
            acqf, bounds, q=1, num_restarts=8, raw_samples=256, options={"seed": 0}
        )
    assert cand.shape == (1, 2)
    assert ((cand >= 0) & (cand <= 1)).all()
    grid = torch.rand(256, 1, 2, generator=torch.Generator().manual_seed(3), dtype=DT)
    with torch.no_grad():
        assert float(val) >= float(acqf(grid).max()) - 1e-6


def test_from_botorch_beta_matches_upper_confidence_bound():
    model = make_model(standardize=True)
    X = torch.rand(5, 1, 2, dtype=DT)
    acqf = BatchUpperConfidenceBound.from_botorch_beta(model, beta=2.5)
    ucb = UpperConfidenceBound(model, beta=2.5)
    torch.testing.assert_close(acqf(X).detach(), ucb(X).detach())
    assert float(acqf.alpha) == pytest.approx((2.5 * acqf.lam) ** 0.5)


def test_minimization_via_posterior_transform():
    model = make_model()
    X = torch.rand(5, 1, 2, dtype=DT)
    alpha = 0.9
    tf = ScalarizedPosteriorTransform(weights=torch.tensor([-1.0], dtype=DT))
    acqf = BatchUpperConfidenceBound(model, alpha=alpha, posterior_transform=tf)
    post = model.posterior(X)
    mu = post.mean.reshape(-1).detach()
    sig = (post.variance.reshape(-1).detach() / lam_of(model)).sqrt()
    torch.testing.assert_close(acqf(X).detach(), -mu + alpha * sig)
    flipped = BatchUpperConfidenceBound(model, alpha=alpha, maximize=False)
    torch.testing.assert_close(flipped(X).detach(), -mu + alpha * sig)
    offset = ScalarizedPosteriorTransform(torch.tensor([1.0], dtype=DT), offset=2.0)
    shifted = BatchUpperConfidenceBound(model, alpha=alpha, posterior_transform=offset)
    torch.testing.assert_close(shifted(X).detach(), mu + 2.0 + alpha * sig)


def test_multi_output_and_bad_arguments_raise():
    model2 = make_model(m=2)
    with pytest.raises(UnsupportedError, match="posterior transform"):
        BatchUpperConfidenceBound(model2, alpha=1.0)
    tf2 = ScalarizedPosteriorTransform(weights=torch.tensor([1.0, 0.0], dtype=DT))
    with pytest.raises(UnsupportedError, match="single-output"):
        BatchUpperConfidenceBound(model2, alpha=1.0, posterior_transform=tf2)
    model = make_model()
    bad_w = ScalarizedPosteriorTransform(weights=torch.tensor([2.0], dtype=DT))
    with pytest.raises(UnsupportedError, match=r"\+1 or -1"):
        BatchUpperConfidenceBound(model, alpha=1.0, posterior_transform=bad_w)
    with pytest.raises(ValueError, match="alpha"):
        BatchUpperConfidenceBound(model, alpha=-1.0)
    with pytest.raises(ValueError, match="beta"):
        BatchUpperConfidenceBound.from_botorch_beta(model, beta=float("nan"))
    with pytest.raises(ValueError, match="columns"):
        BatchUpperConfidenceBound(model, alpha=1.0, X_pending=torch.rand(2, 3))


@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("maximize", [True, False])
def test_batch_state_is_the_ucb_over_the_rows(standardize, maximize):
    """The engine state of the rows: its UCB, hallucinated variances and
    batch-start covariances are the acquisition function's."""
    model = make_model(standardize=standardize)
    g = torch.Generator().manual_seed(3)
    choices = torch.rand(50, 2, generator=g, dtype=DT)
    Xp = torch.rand(3, 2, generator=g, dtype=DT)  # pending: not rows of choices
    alpha = 0.7
    acqf = BatchUpperConfidenceBound(
        model, alpha, maximize=maximize, X_pending=Xp, hallucination="dictionary"
    )
    state = acqf.batch_state(choices, chunk_size=16)  # several chunks
    with torch.no_grad():
        torch.testing.assert_close(
            state.mu + alpha * state.s2_0.sqrt(), acqf(choices.unsqueeze(-2))
        )
        # Hallucinating arms in the engine = appending them to X_pending.
        arms = torch.tensor([4, 17, 4])
        acqf.set_X_pending(torch.cat([Xp, choices[arms]]))
        torch.testing.assert_close(
            state.variances(hallucinated=arms), acqf.rls_variance(choices)
        )
        acqf.set_X_pending(Xp)
        torch.testing.assert_close(
            state.covariance_with(9), acqf.rls_covariance(choices, choices[9:10])[:, 0]
        )
    assert state.dict_size == model.dictionary_size
    assert state.arms.shape == choices.shape


def test_batch_state_rejects_wrong_shapes():
    acqf = BatchUpperConfidenceBound(make_model(), alpha=0.5)
    with pytest.raises(ValueError, match="choices must be A x d"):
        acqf.batch_state(torch.rand(5, 3, dtype=DT))
