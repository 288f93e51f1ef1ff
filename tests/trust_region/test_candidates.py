"""Trust-region candidates: inside the region and the unit cube."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.trust_region import (
    THOMPSON_SAMPLERS,
    TrustRegionState,
    allocate_across_regions,
    batch_candidates,
    fit_region_model,
    generate_batch,
    incumbent,
    perturbed_candidates,
    region_bounds,
    thompson_samples,
)
from botorch_sketch.trust_region.model import lengthscales


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


def test_pathwise_is_the_joint_sample_where_the_model_is_sketched():
    # Matheron's rule needs the exact GP: on a sketched region model
    # thompson="pathwise" draws the same seeded batch as "joint".
    from botorch_sketch.models import NystromGP

    g = torch.Generator().manual_seed(2)
    X = torch.rand(40, 3, generator=g, dtype=torch.float64)
    Y = -((X - 0.5) ** 2).sum(-1, keepdim=True)
    model = NystromGP(X, Y, dictionary=torch.arange(0, 40, 2))
    assert not model.is_exact
    state = TrustRegionState(dim=3, batch_size=4, length=0.4)
    batches = [
        generate_batch(model, state, X, 4, num_candidates=300, seed=1, thompson=t)
        for t in ("pathwise", "joint")
    ]
    torch.testing.assert_close(*batches)


def test_auto_samples_pathwise_where_the_joint_factor_is_costly(monkeypatch):
    # "auto" is "joint" while the device forms and factors the A x A matrix
    # within JOINT_AUTO_SECONDS (A^3 / 3 + A^2 m / 2 + A m^2 flops at its rate
    # for a model of m dictionary points), "pathwise" beyond.
    from botorch_sketch.models import budget
    from botorch_sketch.trust_region import candidates as module

    cand = torch.rand(300, 3, dtype=torch.float64)
    assert not module.joint_is_costly(cand)  # 9e6 flops at 5e10 flop/s
    assert module.joint_is_costly(torch.rand(3200, 3, dtype=torch.float64))
    # 2,000 candidates: 2.7e9 flops alone, 8.7e9 with 1,000 points, 1.02e10
    # (above the 1e10 of 0.2 s at 5e10 flop/s) with 1,500.
    two_k = torch.rand(2000, 3, dtype=torch.float64)
    assert not module.joint_is_costly(two_k)
    assert not module.joint_is_costly(two_k, rank=1000)
    assert module.joint_is_costly(two_k, rank=1500)
    slow = budget.DeviceFacts(1e6, 2**34, 8)
    monkeypatch.setattr(module, "device_facts", lambda device, dtype: slow)
    assert module.joint_is_costly(cand)
    g = torch.Generator().manual_seed(4)
    X = torch.rand(40, 3, generator=g, dtype=torch.float64)
    Y = -((X - 0.3) ** 2).sum(-1, keepdim=True)
    model = fit_region_model(X, Y, seed=0)
    state = TrustRegionState(dim=3, batch_size=4, length=0.8)

    def batch(thompson):
        return generate_batch(
            model, state, X, 4, num_candidates=300, seed=2, thompson=thompson
        )

    torch.testing.assert_close(batch("auto"), batch("pathwise"))
    monkeypatch.setattr(
        module, "device_facts", lambda device, dtype: budget.DeviceFacts(1e15, 2**34, 8)
    )
    torch.testing.assert_close(batch("auto"), batch("joint"))
    assert not torch.equal(batch("joint"), batch("pathwise"))
    # At 5e7 flop/s the 300 x 300 factor alone (9e6 flops) fits the 1e7 of
    # 0.2 s, with the 40-point model's products (1.13e7 in all) it does not.
    rate = budget.DeviceFacts(5e7, 2**34, 8)
    monkeypatch.setattr(module, "device_facts", lambda device, dtype: rate)
    assert model.dictionary_size == 40 and model.is_exact
    assert not module.joint_is_costly(cand)
    assert module.resolve_sampler(model, cand, "auto") == "pathwise"


def test_allocation_takes_each_samples_best_point_over_every_region():
    # Region 0 has the larger value in samples 0 and 2, region 1 in sample 1;
    # region 0's best point of sample 2 was taken by sample 0, so sample 2
    # takes its next best.
    C0 = torch.tensor([[0.1], [0.2], [0.3]], dtype=torch.float64)
    C1 = torch.tensor([[0.7], [0.8]], dtype=torch.float64)
    S0 = torch.tensor([[5.0, 1.0, 0.0], [0.0, 0.0, 1.0], [4.0, 3.0, 0.0]])
    S1 = torch.tensor([[2.0, 0.0], [0.0, 9.0], [0.0, 2.0]])
    assert allocate_across_regions([C0, C1], [S0, S1], 3) == [(0, 0), (1, 1), (0, 1)]
    # Fewer samples than points asked: as many points as samples.
    assert len(allocate_across_regions([C0, C1], [S0[:2], S1[:2]], 3)) == 2
    with pytest.raises(ValueError, match="one entry per region"):
        allocate_across_regions([C0], [S0, S1], 2)


def test_allocation_never_takes_the_same_point_from_two_regions():
    # A discrete space: both regions propose the configuration (1, 0).
    C0 = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    C1 = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    S0 = torch.tensor([[3.0, 0.0], [3.0, 0.0]])
    S1 = torch.tensor([[0.0, 1.0], [0.0, 4.0]])
    picks = allocate_across_regions([C0, C1], [S0, S1], 2)
    points = [tuple(([C0, C1][r][row]).tolist()) for r, row in picks]
    # Sample 1 prefers region 1's copy of the point sample 0 took: not again.
    assert picks[0] == (0, 0) and (1, 1) not in picks and len(set(points)) == 2


@pytest.mark.parametrize("thompson", ["joint", "embedding", "pathwise"])
def test_samples_of_the_batch_candidates_are_in_the_models_units(thompson):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(30, 2, generator=g, dtype=torch.float64)
    Y = 100.0 - ((X - 0.3) ** 2).sum(-1, keepdim=True)
    model = fit_region_model(X, Y, seed=0)
    state = TrustRegionState(dim=2, batch_size=4)
    C = batch_candidates(model, state, X, 4, num_candidates=300, seed=2)
    S = thompson_samples(model, C, 4, seed=3, thompson=thompson)
    assert S.shape == (4, C.shape[0])
    assert 99.0 < float(S.mean()) < 101.0  # the outcome transform undone
    torch.testing.assert_close(
        S, thompson_samples(model, C, 4, seed=3, thompson=thompson)
    )
    # generate_batch chooses among the same candidates.
    batch = generate_batch(model, state, X, 4, num_candidates=300, seed=2)
    gap = (batch.unsqueeze(1) - C.unsqueeze(0)).abs().amax(-1).min(-1).values
    assert float(gap.max()) == 0.0
