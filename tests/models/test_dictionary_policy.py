"""Dictionary policies: the accuracy-sized dictionary meets its criterion."""

from __future__ import annotations

import warnings

import pytest
import torch

from botorch_sketch.models import NystromGP
from botorch_sketch.models.dictionary_policy import (
    DEFAULT_RESIDUAL_TOLERANCE,
    LeverageScorePolicy,
    ResidualTargetPolicy,
)
from botorch_sketch.models.nystrom_dictionary import mean_nystrom_residual

DT = torch.float64


def data(n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=DT)
    Y = torch.sin(5 * X).sum(-1, keepdim=True)
    return X, Y + 0.05 * torch.randn(n, 1, generator=g, dtype=DT)


def with_hyperparameters(model):
    """Fixed, known hyperparameters: lengthscale 0.2, noise 1e-2."""
    model.covar_module.lengthscale = 0.2
    model.likelihood.noise = 1e-2
    return model.eval()


def residual_of(model):
    X = model.compute_inputs
    return mean_nystrom_residual(
        X, model.inducing_points, model.covar_module, model.likelihood.noise
    )


@pytest.mark.parametrize("tolerance", [0.5, 0.05])
def test_chosen_dictionary_meets_the_residual_criterion(tolerance):
    X, Y = data()
    policy = ResidualTargetPolicy(
        q_bar=0.25,
        residual_tolerance=tolerance,
        exact_max_n=0,
        max_dictionary_size=None,
        seed=0,
    )
    model = with_hyperparameters(NystromGP(X, Y, dictionary_policy=policy))
    report = model.dictionary_report
    assert report["size"] < 400  # a sketch, not every point
    assert report["residual"] <= tolerance
    # The reported value is the criterion measured independently.
    assert report["residual"] == pytest.approx(residual_of(model), rel=1e-6)
    # The same start without growth misses it: the growth did the work.
    no_criterion = LeverageScorePolicy(
        q_bar=0.25,
        exact_max_n=0,
        max_dictionary_size=None,
        seed=0,
        residual_tolerance=None,
    )
    plain = with_hyperparameters(NystromGP(X, Y, dictionary_policy=no_criterion))
    assert residual_of(plain) > tolerance
    assert plain.dictionary_report["residual"] is None  # not measured


def test_accuracy_sized_posterior_is_close_to_the_exact_gp():
    X, Y = data()
    policy = ResidualTargetPolicy(
        q_bar=0.25,
        residual_tolerance=0.01,
        exact_max_n=0,
        max_dictionary_size=None,
        seed=0,
    )
    model = with_hyperparameters(NystromGP(X, Y, dictionary_policy=policy))
    exact = with_hyperparameters(NystromGP(X, Y, dictionary="all"))
    assert model.dictionary_size < 400
    Xt = torch.rand(50, 2, generator=torch.Generator().manual_seed(1), dtype=DT)
    p, q = model.posterior(Xt), exact.posterior(Xt)
    scale = float(Y.std())
    assert float((p.mean - q.mean).abs().max()) < 0.05 * scale
    assert float((p.variance - q.variance).abs().max()) < 0.05 * float(q.variance.max())


def test_default_model_meets_the_default_criterion_and_the_exact_gp():
    # The default policy grows its dictionary (from q_bar = 2) until the mean
    # Nystrom residual is within DEFAULT_RESIDUAL_TOLERANCE noise variances.
    X, Y = data(n=600)
    model = with_hyperparameters(NystromGP(X, Y, exact_max_n=0, seed=0))
    report = model.dictionary_report
    assert report["size"] < 600 and not report["capped"]
    assert report["residual"] <= DEFAULT_RESIDUAL_TOLERANCE
    assert report["residual"] == pytest.approx(residual_of(model), rel=1e-6)
    exact = with_hyperparameters(NystromGP(X, Y, dictionary="all"))
    Xt = torch.rand(50, 2, generator=torch.Generator().manual_seed(1), dtype=DT)
    p, q = model.posterior(Xt), exact.posterior(Xt)
    assert float((p.mean - q.mean).abs().max()) < 0.05 * float(Y.std())
    assert float((p.variance - q.variance).abs().max()) < 0.1 * float(q.variance.max())


def test_residual_target_policy_requires_a_tolerance():
    with pytest.raises(ValueError, match="residual_tolerance"):
        ResidualTargetPolicy(residual_tolerance=None)
    assert LeverageScorePolicy(residual_tolerance=None).residual_tolerance is None


def test_budget_bounds_the_growth():
    X, Y = data()
    policy = ResidualTargetPolicy(
        q_bar=0.25,
        residual_tolerance=1e-6,
        exact_max_n=0,
        max_dictionary_size=40,
        seed=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = with_hyperparameters(NystromGP(X, Y, dictionary_policy=policy))
        report = model.dictionary_report
    assert report["size"] <= 40 and report["cap"] == 40
    assert report["residual"] > 1e-6  # not met, and reported as such


def test_every_point_reports_zero_residual():
    X, Y = data(n=100)
    model = NystromGP(X, Y, dictionary_policy=LeverageScorePolicy(exact_max_n=200))
    assert model.dictionary_report["residual"] == 0.0
    assert model.dictionary_report["size"] == 100
    assert model.dictionary_report["exact_reason"] == "n <= exact_max_n = 200"
    every = NystromGP(X, Y, dictionary="all")
    assert every.dictionary_report["exact_reason"] == "dictionary='all'"


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"residual_tolerance": 0.0}, "residual_tolerance"),
        ({"residual_tolerance": True}, "residual_tolerance"),
        ({"evaluation_size": 0}, "evaluation_size"),
        ({"max_growth_rounds": -1}, "max_growth_rounds"),
        ({"seed": 1.5}, "seed"),
        ({"exact_when_affordable": 1}, "exact_when_affordable"),
    ],
)
def test_bad_policy_options_name_themselves(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=name):
        ResidualTargetPolicy(**kwargs)
