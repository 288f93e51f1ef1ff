"""Trust-region candidates: inside the region and the unit cube."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.trust_region import (
    THOMPSON_SAMPLERS,
    TrustRegionState,
    fit_region_model,
    generate_batch,
    incumbent,
    perturbed_candidates,
    region_bounds,
)
from botorch_sketch.trust_region.candidates import (
    LENGTHSCALE_LOWER_BOUND,
    REGION_MIN_FIT_SUBSET_SIZE,
    lengthscales,
    region_covar_module,
)


def test_region_sides_follow_the_lengthscales_and_stay_in_the_cube():
    center = torch.tensor([0.5, 0.5, 0.95], dtype=torch.float64)
    ls = torch.tensor([1.0, 4.0, 0.25], dtype=torch.float64)  # geometric mean 1
    bounds = region_bounds(center, ls, 0.2)
    torch.testing.assert_close(bounds[1, :2] - bounds[0, :2], torch.tensor(
        [0.2, 0.8], dtype=torch.float64))  # fmt: skip
    assert float(bounds[0, 2]) == pytest.approx(0.925)
    clipped = region_bounds(center, ls, 0.8)  # third side 0.2 around 0.95
    assert float(clipped[1, 2]) == 1.0
    assert float(clipped[0, 2]) == pytest.approx(0.85)
    wide = region_bounds(center, ls, 1.6)
    assert bool((wide >= 0).all()) and bool((wide <= 1).all())
    with pytest.raises(ValueError, match="positive"):
        region_bounds(center, -ls, 0.2)


def test_candidates_perturb_a_subset_of_coordinates_inside_the_bounds():
    d = 40
    center = torch.full((d,), 0.5, dtype=torch.float64)
    bounds = region_bounds(center, torch.ones(d, dtype=torch.float64), 0.4)
    X = perturbed_candidates(center, bounds, 2000, seed=0)
    assert X.shape == (2000, d)
    assert bool((X >= bounds[0]).all()) and bool((X <= bounds[1]).all())
    moved = (X != center).sum(-1)
    assert int(moved.min()) >= 1
    assert abs(float(moved.double().mean()) - 20.0) < 1.0  # 20 / d of 40 coordinates
    torch.testing.assert_close(X, perturbed_candidates(center, bounds, 2000, seed=0))


@pytest.mark.parametrize("thompson", THOMPSON_SAMPLERS)
@pytest.mark.parametrize("length", [0.05, 0.8, 1.6])
def test_batch_is_inside_the_region_and_the_cube(length, thompson):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(40, 3, generator=g, dtype=torch.float64)
    Y = -((X - 0.8) ** 2).sum(-1, keepdim=True)
    model = fit_region_model(X, Y, seed=0)
    state = TrustRegionState(dim=3, batch_size=5, length=length, length_max=1.6)
    batch = generate_batch(
        model, state, X, 5, num_candidates=500, seed=1, thompson=thompson
    )
    again = generate_batch(
        model, state, X, 5, num_candidates=500, seed=1, thompson=thompson
    )
    torch.testing.assert_close(batch, again)  # seeded
    index, value = incumbent(model, X)
    bounds = region_bounds(X[index], lengthscales(model), length)
    assert batch.shape == (5, 3) and torch.unique(batch, dim=0).shape[0] == 5
    assert bool((batch >= bounds[0] - 1e-12).all())
    assert bool((batch <= bounds[1] + 1e-12).all())
    assert bool((batch >= 0).all()) and bool((batch <= 1).all())
    with torch.no_grad():
        mean = float(model.posterior(X[index : index + 1]).mean)
    assert value == pytest.approx(mean)


def test_center_picks_the_row_the_region_is_centred_on():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(30, 2, generator=g, dtype=torch.float64)
    model = fit_region_model(X, -((X - 0.3) ** 2).sum(-1, keepdim=True), seed=0)
    state = TrustRegionState(dim=2, batch_size=4, length=0.1)
    far = int(((X - 0.3) ** 2).sum(-1).argmax())  # not the incumbent
    batch = generate_batch(model, state, X, 4, num_candidates=200, seed=0, center=far)
    bounds = region_bounds(X[far], lengthscales(model), 0.1)
    assert bool((batch >= bounds[0] - 1e-12).all())
    assert bool((batch <= bounds[1] + 1e-12).all())
    with pytest.raises(ValueError, match="center=30"):
        generate_batch(model, state, X, 4, center=30)
    with pytest.raises(TypeError, match="center must be an int"):
        generate_batch(model, state, X, 4, center=1.0)


def test_generate_batch_rejects_bad_q():
    X = torch.rand(10, 2, dtype=torch.float64)
    model = fit_region_model(X, X.sum(-1, keepdim=True), seed=0)
    with pytest.raises(ValueError, match="q must"):
        generate_batch(model, TrustRegionState(dim=2, batch_size=1), X, 0)
    with pytest.raises(ValueError, match="thompson must be one of"):
        generate_batch(
            model, TrustRegionState(dim=2, batch_size=1), X, 1, thompson="exact"
        )


def test_cold_region_model_is_turbos_exact_gp_and_picks_its_batch():
    # Below exact_max_n the region's NystromGP, fitted cold, is SingleTaskGP
    # (same defaults and fit): same hyperparameters, same joint posterior over
    # the candidates, so the same seeded joint Thompson batch.
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from botorch_sketch.trust_region.candidates import joint_thompson

    g = torch.Generator().manual_seed(3)
    X = torch.rand(60, 3, generator=g, dtype=torch.float64)
    Y = -((X - 0.6) ** 2).sum(-1, keepdim=True) + 0.01 * torch.randn(
        60, 1, generator=g, dtype=torch.float64
    )
    model = fit_region_model(X, Y, seed=0)
    exact = SingleTaskGP(X, Y)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(exact.likelihood, exact))
    torch.testing.assert_close(
        lengthscales(model), lengthscales(exact), rtol=1e-3, atol=1e-4
    )
    center = X[int(Y.argmax())]
    bounds = region_bounds(center, lengthscales(model), 0.4)
    candidates = perturbed_candidates(center, bounds, 300, seed=0)
    with torch.no_grad():
        ours, theirs = model.posterior(candidates), exact.posterior(candidates)
        torch.testing.assert_close(ours.mean, theirs.mean, rtol=0, atol=1e-4)
        torch.testing.assert_close(
            ours.distribution.covariance_matrix,
            theirs.distribution.covariance_matrix,
            rtol=0,
            atol=1e-4,
        )
    # The seeded joint Thompson batch is MaxPosteriorSampling's maximisers of
    # mean + L eps, L the exact GP's joint Cholesky factor, eps from the seed.
    from botorch.generation import MaxPosteriorSampling
    from linear_operator.utils.cholesky import psd_safe_cholesky

    with torch.no_grad():
        chol = psd_safe_cholesky(theirs.distribution.covariance_matrix)
    g7 = torch.Generator().manual_seed(7)
    eps = torch.randn(300, 5, generator=g7, dtype=torch.float64)
    samples = (theirs.mean.squeeze(-1) + (chol @ eps).mT).unsqueeze(-1)
    sampler = MaxPosteriorSampling(exact, replacement=False)
    torch.testing.assert_close(
        joint_thompson(model, candidates, 5, seed=7),
        sampler.maximize_samples(candidates, samples, 5),
    )


def test_region_fit_subset_follows_the_device_without_the_global_floor(monkeypatch):
    """Under fit_subset_size="device" a region model is fitted on the subsample
    the device's fit budget affords (no 1,000-point floor; at least
    REGION_MIN_FIT_SUBSET_SIZE or every point); a given size is kept."""
    from botorch_sketch.models import budget
    from botorch_sketch.trust_region import candidates

    g = torch.Generator().manual_seed(0)
    X = torch.rand(400, 2, generator=g, dtype=torch.float64)
    Y = -((X - 0.5) ** 2).sum(-1, keepdim=True)
    cpu = budget.DeviceFacts(budget.CPU_FLOP_RATE, 2**34, 8)
    assert budget.device_fit_subset_size(cpu, 10**6, minimum=1) == 572
    # A slower device: its budget affords 150 points; the floor lifts it to 300.
    rate = {"flops": budget.CPU_FLOP_RATE * (150 / 572) ** 3}
    monkeypatch.setattr(
        candidates,
        "device_facts",
        lambda device, dtype: budget.DeviceFacts(rate["flops"], 2**34, 8),
    )
    assert candidates.region_fit_subset_size(X) == REGION_MIN_FIT_SUBSET_SIZE == 300
    model = fit_region_model(X, Y, seed=0)
    assert model.dictionary_report["fit_subset_size"] == 300
    rate["flops"] = budget.CPU_FLOP_RATE * (350 / 572) ** 3
    assert 340 <= candidates.region_fit_subset_size(X) <= 350
    assert candidates.region_fit_subset_size(X[:200]) == 200  # every point
    given = fit_region_model(X, Y, seed=0, fit_subset_size=100)
    assert given.dictionary_report["fit_subset_size"] == 100


def test_region_kernel_is_botorchs_kernel_with_log_lengthscales():
    """Same kernel, prior and initial lengthscales as BoTorch's dimension-scaled
    RBF; only the optimised coordinate differs: l = 0.025 + exp(raw)."""
    from botorch.models.utils.gpytorch_modules import (
        get_covar_module_with_dim_scaled_prior,
    )

    ours, theirs = region_covar_module(7), get_covar_module_with_dim_scaled_prior(7)
    torch.testing.assert_close(ours.lengthscale, theirs.lengthscale)
    prior, reference = ours.lengthscale_prior, theirs.lengthscale_prior
    assert type(prior) is type(reference)
    torch.testing.assert_close(prior.loc, reference.loc)
    torch.testing.assert_close(prior.scale, reference.scale)
    raw = ours.raw_lengthscale.detach()
    torch.testing.assert_close(raw.exp() + LENGTHSCALE_LOWER_BOUND, ours.lengthscale)
    ours.raw_lengthscale.data.fill_(-50.0)  # any raw value is a valid lengthscale
    assert bool((ours.lengthscale >= LENGTHSCALE_LOWER_BOUND).all())
    x = torch.rand(5, 7, dtype=torch.float64)
    theirs.lengthscale = ours.lengthscale.detach()
    torch.testing.assert_close(ours(x).to_dense(), theirs.double()(x).to_dense())


def test_region_model_takes_the_region_kernel_unless_given_one():
    from gpytorch.kernels import MaternKernel

    g = torch.Generator().manual_seed(1)
    X = torch.rand(40, 3, generator=g, dtype=torch.float64)
    Y = -((X - 0.4) ** 2).sum(-1, keepdim=True)
    model = fit_region_model(X, Y, seed=0)
    constraint = model.covar_module.raw_lengthscale_constraint
    assert constraint.enforced
    assert float(constraint.lower_bound) == pytest.approx(LENGTHSCALE_LOWER_BOUND)
    assert model.covar_module.lengthscale.dtype == torch.float64
    given = MaternKernel(ard_num_dims=3)
    assert fit_region_model(X, Y, seed=0, covar_module=given).covar_module is given


def test_region_model_is_exact_where_the_device_affords_it(monkeypatch):
    """Above exact_max_n the region model uses every point while the device
    affords the exact posterior; past that (a slow fake device), or under a
    user's fixed budget, the leverage-score sketch."""
    from botorch_sketch.models import budget, dictionary_policy
    from botorch_sketch.trust_region import candidates

    g = torch.Generator().manual_seed(2)
    X = torch.rand(120, 2, generator=g, dtype=torch.float64)
    Y = torch.sin(12 * X).sum(-1, keepdim=True)
    options = {"seed": 0, "exact_max_n": 20, "q_bar": 1.0}
    assert candidates.region_is_exact(X)
    model = fit_region_model(X, Y, **options)
    assert model.dictionary_size == 120
    assert model.dictionary_policy.exact_when_affordable
    reason = model.dictionary_report["exact_reason"]
    assert reason == "the device affords the exact posterior"
    sketch = fit_region_model(X, Y, max_dictionary_size=60, **options)
    assert sketch.dictionary_size <= 60
    slow = budget.DeviceFacts(1e5, 2**34, 8)
    monkeypatch.setattr(dictionary_policy, "device_facts", lambda device, dtype: slow)
    assert not candidates.region_is_exact(X)
    assert fit_region_model(X, Y, **options).dictionary_size < 120
    assert not budget.device_affords_exact(
        slow, 120, 2, budget.device_dictionary_cap(slow, 120, 2)
    )


def test_region_fits_stop_at_the_region_fit_tolerance():
    # A region model's L-BFGS-B stops at REGION_FIT_TOLERANCE unless the caller
    # says otherwise (None: SciPy's default ftol).
    from botorch_sketch.trust_region.candidates import REGION_FIT_TOLERANCE

    g = torch.Generator().manual_seed(5)
    X = torch.rand(30, 2, generator=g, dtype=torch.float64)
    Y = torch.sin(5 * X).sum(-1, keepdim=True)
    assert fit_region_model(X, Y, seed=0).fit_tolerance == REGION_FIT_TOLERANCE
    assert fit_region_model(X, Y, seed=0, fit_tolerance=None).fit_tolerance is None
