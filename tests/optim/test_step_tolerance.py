"""Tests of the greedy steps' relative L-BFGS-B gradient tolerance."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.models.transforms.outcome import Log, Standardize

from botorch_sketch.ax import get_generation_strategy
from botorch_sketch.models import NystromGP
from botorch_sketch.optim import adaptive_batch, optimize_acqf_adaptive_batch
from botorch_sketch.optim.step_tolerance import (
    DEFAULT_GRADIENT_TOLERANCE,
    outcome_prior_sd,
    step_gradient_tolerance,
    with_gradient_tolerance,
)

DT = torch.float64


def make_model(scale: float = 1.0, width: float = 1.0, transform=None) -> NystromGP:
    r"""Data ``y = scale * sum sin(5 x / width)`` on ``[0, width]^2``, fixed
    hyperparameters (``lengthscale 0.3 width``), ``Standardize`` unless told."""
    g = torch.Generator().manual_seed(0)
    X = width * torch.rand(40, 2, generator=g, dtype=DT)
    Y = scale * torch.sin(5 * X / width).sum(-1, keepdim=True)
    Y = Y + 0.05 * scale * torch.randn(Y.shape, generator=g, dtype=DT)
    ot = Standardize(m=1) if transform is None else transform
    m = NystromGP(X, Y, seed=0, outcome_transform=ot, exact_max_n=0)
    m.covar_module.lengthscale = 0.3 * width
    m.likelihood.noise = 0.05
    m.eval()
    return m


def test_prior_sd_is_the_kernel_diagonal_in_outcome_units():
    model = make_model(scale=3.0)
    x = torch.tensor([0.2, 0.7], dtype=DT)
    prior = float(model.covar_module(x.reshape(1, 2), diag=True).reshape(()))
    stdv = float(model.outcome_transform.stdvs.reshape(()))
    assert outcome_prior_sd(model, x) == pytest.approx(math.sqrt(prior) * stdv)
    # a transform that cannot map variances: the model's units
    g = torch.Generator().manual_seed(1)
    X = torch.rand(20, 2, generator=g, dtype=DT)
    logged = NystromGP(X, torch.rand(20, 1, generator=g, dtype=DT) + 1.0, seed=0)
    logged.outcome_transform = Log()
    logged.eval()
    expected = math.sqrt(float(logged.covar_module(X[:1], diag=True).reshape(())))
    assert outcome_prior_sd(logged, X[0]) == pytest.approx(expected)


def test_tolerance_follows_the_outcome_scale_and_the_widest_side():
    base = make_model()
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    sd = outcome_prior_sd(base, bounds.mean(0))
    assert step_gradient_tolerance(base, bounds, 1e-2) == pytest.approx(1e-2 * sd)
    wide = torch.tensor([[0.0, -1.0], [2.0, 4.0]], dtype=DT)  # widest side 5
    assert step_gradient_tolerance(base, wide, 1e-2) == pytest.approx(1e-2 * sd / 5)
    # y scaled by 7: the UCB, its gradient and the tolerance scale by 7
    scaled = make_model(scale=7.0)
    assert step_gradient_tolerance(scaled, bounds, 1e-2) == pytest.approx(
        7.0 * step_gradient_tolerance(base, bounds, 1e-2), rel=1e-6
    )
    # x stretched by 4: the gradient and the tolerance shrink by 4
    stretched = make_model(width=4.0)
    assert step_gradient_tolerance(stretched, 4 * bounds, 1e-2) == pytest.approx(
        step_gradient_tolerance(base, bounds, 1e-2) / 4, rel=1e-6
    )
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="gradient_tolerance"):
            step_gradient_tolerance(base, bounds, bad)


def test_options_get_the_tolerance_unless_the_caller_set_one():
    model = make_model()
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    tol = step_gradient_tolerance(model, bounds, 1e-2)
    given = {"maxiter": 20, "seed": 3}
    out = with_gradient_tolerance(given, model, bounds, 1e-2)
    assert out == {"maxiter": 20, "seed": 3, "pgtol": pytest.approx(tol)}
    assert given == {"maxiter": 20, "seed": 3}  # not modified
    assert with_gradient_tolerance(None, model, bounds, 1e-2) == {
        "pgtol": pytest.approx(tol)
    }
    assert with_gradient_tolerance(given, model, bounds, None) is given
    own = {"pgtol": 1e-7}
    assert with_gradient_tolerance(own, model, bounds, 1e-2) is own
    own = {"gtol": 1e-7}
    assert with_gradient_tolerance(own, model, bounds, 1e-2) is own
    # an option BoTorch's batched L-BFGS-B does not take: SciPy's name
    slow = with_gradient_tolerance({"maxfun": 50}, model, bounds, 1e-2)
    assert slow == {"maxfun": 50, "gtol": pytest.approx(tol)}


@pytest.mark.parametrize("tolerance", [None, 1e-2, 0.5])
def test_every_greedy_step_gets_the_tolerance(monkeypatch, tolerance):
    model = make_model()
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    seen = []
    original = adaptive_batch.optimize_acqf

    def spy(*args, **kwargs):
        seen.append((kwargs["options"] or {}).get("pgtol"))
        return original(*args, **kwargs)

    monkeypatch.setattr(adaptive_batch, "optimize_acqf", spy)
    optimize_acqf_adaptive_batch(
        model,
        bounds,
        "global",
        alpha=1.0,
        max_batch_size=3,
        min_batch_size=3,
        num_restarts=2,
        raw_samples=16,
        seed=0,
        gradient_tolerance=tolerance,
    )
    expected = (
        None if tolerance is None else step_gradient_tolerance(model, bounds, tolerance)
    )
    assert seen == [expected] * 3


def test_a_looser_tolerance_stops_earlier_on_the_same_path():
    r"""L-BFGS-B's iterates do not depend on ``pgtol``, and its line search only
    accepts ascent: the first step (same raw samples) ends at a UCB value no
    higher than SciPy's default tolerance reaches, and close to it."""
    model = make_model()
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    values = {}
    for tolerance in (None, DEFAULT_GRADIENT_TOLERANCE, 0.3):
        _, v = optimize_acqf_adaptive_batch(
            model,
            bounds,
            "global",
            alpha=1.0,
            max_batch_size=1,
            num_restarts=4,
            raw_samples=64,
            seed=0,
            gradient_tolerance=tolerance,
        )
        values[tolerance] = float(v[0])
    strict = values[None]
    assert values[DEFAULT_GRADIENT_TOLERANCE] <= strict + 1e-12
    assert values[DEFAULT_GRADIENT_TOLERANCE] >= strict - 1e-3 * abs(strict)
    assert values[0.3] <= values[DEFAULT_GRADIENT_TOLERANCE] + 1e-12


@pytest.mark.parametrize("bad", [0, -1e-3, math.nan, math.inf, True, "1e-2"])
def test_bad_tolerances_are_rejected(bad):
    model = make_model()
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    with pytest.raises(ValueError, match="gradient_tolerance"):
        optimize_acqf_adaptive_batch(
            model, bounds, "global", alpha=1.0, max_batch_size=2, gradient_tolerance=bad
        )


def test_the_strategies_take_and_check_the_option():
    gs = get_generation_strategy("bbkb", gradient_tolerance=3e-3)
    spec = gs._nodes[-1].generator_specs[0]
    options = spec.generator_kwargs["acquisition_options"]
    assert options["gradient_tolerance"] == 3e-3
    spec = get_generation_strategy("bkb")._nodes[-1].generator_specs[0]
    assert (
        spec.generator_kwargs["acquisition_options"]["gradient_tolerance"]
        == DEFAULT_GRADIENT_TOLERANCE
    )
    for bad in (0.0, -1.0, "x"):
        with pytest.raises(ValueError, match="gradient_tolerance"):
            get_generation_strategy("bbkb", gradient_tolerance=bad)
    with pytest.raises(ValueError, match="gradient_tolerance"):
        get_generation_strategy(
            "bbkb", candidate_set=[[0.0, 0.0], [1.0, 1.0]], gradient_tolerance=1e-3
        )
