"""The trust region's model: kernel, fit subsample, exact posterior, tolerance."""

from __future__ import annotations

import pytest
import torch
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
)
from gpytorch.kernels import RBFKernel

from botorch_sketch.models.kernels import GroupedRBFKernel
from botorch_sketch.trust_region import fit_region_model
from botorch_sketch.trust_region.model import (
    LENGTHSCALE_LOWER_BOUND,
    REGION_FIT_TOLERANCE,
    REGION_MIN_FIT_SUBSET_SIZE,
    lengthscales,
    noise_sd,
    region_covar_module,
)


def test_region_fit_subset_follows_the_device_without_the_global_floor(monkeypatch):
    """Under fit_subset_size="device" a region model is fitted on the subsample
    the device's fit budget affords (no 1,000-point floor; at least
    REGION_MIN_FIT_SUBSET_SIZE or every point); a given size is kept."""
    from botorch_sketch.models import budget
    from botorch_sketch.trust_region import model as region

    g = torch.Generator().manual_seed(0)
    X = torch.rand(400, 2, generator=g, dtype=torch.float64)
    Y = -((X - 0.5) ** 2).sum(-1, keepdim=True)
    cpu = budget.DeviceFacts(budget.CPU_FLOP_RATE, 2**34, 8)
    assert budget.device_fit_subset_size(cpu, 10**6, minimum=1) == 572
    # A slower device: its budget affords 150 points; the floor lifts it to 300.
    rate = {"flops": budget.CPU_FLOP_RATE * (150 / 572) ** 3}
    monkeypatch.setattr(
        region,
        "device_facts",
        lambda device, dtype: budget.DeviceFacts(rate["flops"], 2**34, 8),
    )
    assert region.region_fit_subset_size(X) == REGION_MIN_FIT_SUBSET_SIZE == 300
    model = fit_region_model(X, Y, seed=0)
    assert model.dictionary_report["fit_subset_size"] == 300
    rate["flops"] = budget.CPU_FLOP_RATE * (350 / 572) ** 3
    assert 340 <= region.region_fit_subset_size(X) <= 350
    assert region.region_fit_subset_size(X[:200]) == 200  # every point
    given = fit_region_model(X, Y, seed=0, fit_subset_size=100)
    assert given.dictionary_report["fit_subset_size"] == 100


def test_region_kernel_is_botorchs_kernel_with_log_lengthscales():
    """Same kernel, prior and initial lengthscales as BoTorch's dimension-scaled
    RBF; only the optimised coordinate differs: l = 0.025 + exp(raw)."""
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
    from botorch_sketch.trust_region import model as region

    g = torch.Generator().manual_seed(2)
    X = torch.rand(120, 2, generator=g, dtype=torch.float64)
    Y = torch.sin(12 * X).sum(-1, keepdim=True)
    options = {"seed": 0, "exact_max_n": 20, "q_bar": 1.0}
    assert region.region_is_exact(X)
    model = fit_region_model(X, Y, **options)
    assert model.dictionary_size == 120
    assert model.dictionary_policy.exact_when_affordable
    reason = model.dictionary_report["exact_reason"]
    assert reason == "the device affords the exact posterior"
    sketch = fit_region_model(X, Y, max_dictionary_size=60, **options)
    assert sketch.dictionary_size <= 60
    slow = budget.DeviceFacts(1e5, 2**34, 8)
    monkeypatch.setattr(dictionary_policy, "device_facts", lambda device, dtype: slow)
    assert not region.region_is_exact(X)
    assert fit_region_model(X, Y, **options).dictionary_size < 120
    assert not budget.device_affords_exact(
        slow, 120, 2, budget.device_dictionary_cap(slow, 120, 2)
    )


def test_noise_sd_is_the_fitted_noise_in_the_values_units():
    # The likelihood's noise lives in standardized units; noise_sd undoes the
    # outcome transform: sqrt(noise) * the training values' sd, and values
    # scaled by 10 (the same standardized fit) give 10 times the noise sd.
    g = torch.Generator().manual_seed(3)
    X = torch.rand(40, 2, generator=g, dtype=torch.float64)
    noise = 0.3 * torch.randn(40, 1, generator=g, dtype=torch.float64)
    Y = 100.0 + 5.0 * torch.sin(6 * X).sum(-1, keepdim=True) + noise
    model = fit_region_model(X, Y, seed=0)
    scale = model.outcome_transform.stdvs.reshape(-1)[0]
    expected = float(model.likelihood.noise.detach().mean().sqrt() * scale)
    assert noise_sd(model, X) == pytest.approx(expected, rel=1e-6)
    assert 0.1 < noise_sd(model, X) < 1.0  # near the 0.3 drawn
    scaled = fit_region_model(X, 10.0 * Y, seed=0)
    assert noise_sd(scaled, X) == pytest.approx(10.0 * noise_sd(model, X), rel=1e-3)
    with pytest.raises(ValueError, match="non-empty n x d"):
        noise_sd(model, X[:0])


def test_region_fits_stop_at_the_region_fit_tolerance():
    # A region model's L-BFGS-B stops at REGION_FIT_TOLERANCE unless the caller
    # says otherwise (None: SciPy's default ftol).
    g = torch.Generator().manual_seed(5)
    X = torch.rand(30, 2, generator=g, dtype=torch.float64)
    Y = torch.sin(5 * X).sum(-1, keepdim=True)
    assert fit_region_model(X, Y, seed=0).fit_tolerance == REGION_FIT_TOLERANCE
    assert fit_region_model(X, Y, seed=0, fit_tolerance=None).fit_tolerance is None


def test_one_hot_groups_share_a_lengthscale_and_match_the_ard_kernel():
    """With one-hot groups the kernel is BoTorch's ARD RBF whose lengthscales
    are equal within each group: the same matrix, with d - sum(k - 1)
    lengthscales; without groups (or groups of one column) it is the plain one."""
    d, groups = 7, [(1, 2, 3), (5, 6)]
    kernel = region_covar_module(d, groups).double()
    assert isinstance(kernel, GroupedRBFKernel)
    assert sum(p.numel() for p in kernel.parameters()) == d - 3
    kernel.lengthscale = torch.tensor([[0.3, 0.4, 0.9, 1.7]])
    column = torch.tensor([0.3, 0.4, 0.4, 0.4, 0.9, 1.7, 1.7], dtype=torch.float64)
    torch.testing.assert_close(lengthscales_of(kernel, d), column)
    ard = RBFKernel(ard_num_dims=d).double()
    ard.lengthscale = column
    x = torch.rand(6, d, dtype=torch.float64)
    y = torch.rand(4, d, dtype=torch.float64)
    torch.testing.assert_close(kernel(x, y).to_dense(), ard(x, y).to_dense())
    # The prior is the d-column kernel's, once per lengthscale.
    loc = get_covar_module_with_dim_scaled_prior(d).lengthscale_prior.loc
    torch.testing.assert_close(kernel.lengthscale_prior.loc, loc)
    assert isinstance(region_covar_module(d, [(4,)]), RBFKernel)
    assert not isinstance(region_covar_module(d, [(4,)]), GroupedRBFKernel)
    only = region_covar_module(3, [(0, 1, 2)])
    assert sum(p.numel() for p in only.parameters()) == 1


def test_grouped_kernel_starts_at_the_prior_mode():
    kernel = region_covar_module(5, [(2, 3, 4)])
    mode = kernel.lengthscale_prior.mode
    torch.testing.assert_close(kernel.column_lengthscale, mode.expand(1, 5))


@pytest.mark.parametrize("groups", [[(0, 1), (1, 2)], [(2, 3)], [(-1, 0)]])
def test_one_hot_groups_must_be_disjoint_columns(groups):
    with pytest.raises(ValueError, match="disjoint columns"):
        region_covar_module(3, groups)


def test_region_model_with_one_hot_groups_reports_one_side_per_group():
    g = torch.Generator().manual_seed(3)
    X = torch.rand(60, 5, generator=g, dtype=torch.float64)
    hot = torch.randint(3, (60,), generator=g)
    X[:, 2:] = torch.nn.functional.one_hot(hot, 3).double()
    Y = (
        -((X[:, :2] - 0.3) ** 2).sum(-1, keepdim=True)
        + 0.5 * (hot == 1).double()[:, None]
    )
    model = fit_region_model(X, Y, seed=0, one_hot=[(2, 3, 4)])
    sides = lengthscales(model)
    assert sides.shape == (5,)
    assert bool((sides[2:] == sides[2]).all())
    assert bool((sides >= LENGTHSCALE_LOWER_BOUND).all())


def lengthscales_of(kernel, d):
    """:func:`lengthscales` of a model holding ``kernel`` (``d`` inputs)."""

    class Holder:
        covar_module = kernel
        input_dim = d

    return lengthscales(Holder())
