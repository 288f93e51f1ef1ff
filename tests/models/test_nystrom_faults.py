"""``NystromGP`` under misuse and bad state: clear errors, no silent wrong answers.

Options are checked where they enter (bools are not ints; seeds are ints in
NumPy's range), a warm start that cannot be used is discarded with a warning,
and ``load_state_dict(..., keep_transforms=True)`` on new data behaves as it
does for ``SingleTaskGP``.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.models import NystromGP
from botorch_sketch.models.dictionary_policy import LeverageScorePolicy
from botorch_sketch.models.fit_options import NystromFitOptions
from botorch_sketch.models.sketch_state import SketchState

DT = torch.float64


def data(n=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=DT)
    return X, torch.sin(4 * X).sum(-1, keepdim=True)


def fitted(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


@pytest.mark.parametrize("cls", [SingleTaskGP, NystromGP])
def test_load_state_dict_keep_transforms_on_shifted_data(cls):
    X, Y = data()
    kwargs = {"dictionary": "all"} if cls is NystromGP else {}
    old = cls(X, Y, **kwargs)
    state = old.state_dict()
    new = cls(X, Y + 5.0, **kwargs)
    new.load_state_dict(state, keep_transforms=True)
    new.eval()
    # The loaded standardization is applied to the new targets consistently:
    # the posterior follows the shifted data.
    mean = new.posterior(X).mean
    rms = float((mean - (Y + 5.0)).pow(2).mean().sqrt())
    assert rms < 0.2


def test_load_state_dict_keep_transforms_matches_single_task_gp():
    X, Y = data()
    Xt = torch.rand(7, 2, dtype=DT)
    means = []
    for cls, kwargs in ((SingleTaskGP, {}), (NystromGP, {"dictionary": "all"})):
        state = cls(X, Y, **kwargs).state_dict()
        new = cls(X, 3.0 * Y + 5.0, **kwargs)
        new.load_state_dict(state, keep_transforms=True)
        means.append(new.eval().posterior(Xt).mean)
    torch.testing.assert_close(means[1], means[0], rtol=1e-6, atol=1e-6)


def test_load_state_dict_of_the_same_data_changes_nothing():
    X, Y = data(n=80)
    model = fitted(NystromGP(X, Y, seed=0, exact_max_n=0, max_dictionary_size=20))
    Xt = torch.rand(5, 2, dtype=DT)
    before = model.posterior(Xt).mean
    targets = model.compute_targets.clone()
    model.load_state_dict(model.state_dict(), keep_transforms=True)
    assert torch.equal(model.compute_targets, targets)
    assert torch.equal(model.posterior(Xt).mean, before)


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"max_dictionary_size": True}, TypeError, "max_dictionary_size"),
        ({"fit_subset_size": False}, TypeError, "fit_subset_size"),
        ({"exact_max_n": True}, TypeError, "exact_max_n"),
        ({"refit_max_iterations": True}, TypeError, "refit_max_iterations"),
        ({"refine_iterations": True}, TypeError, "refine_iterations"),
        ({"refine_iterations": -1}, ValueError, "refine_iterations"),
        ({"refine_iterations": "gpu"}, ValueError, "'device' or an int"),
        ({"q_bar": True}, ValueError, "q_bar"),
        ({"seed": "a"}, TypeError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"seed": True}, TypeError, "seed"),
        ({"seed": 2**70}, ValueError, "seed"),
        ({"seed": -1}, ValueError, "seed"),
        ({"dictionary_policy": "bless"}, TypeError, "dictionary_policy"),
        ({"fit_options": {"objective": "vfe"}}, TypeError, "fit_options"),
        (
            {"dictionary_policy": LeverageScorePolicy(), "q_bar": 3.0},
            ValueError,
            "q_bar",
        ),
    ],
)
def test_bad_options_name_the_argument(kwargs, error, name):
    X, Y = data()
    with pytest.raises(error, match=name):
        NystromGP(X, Y, **kwargs)


def test_seed_range_edges_are_accepted():
    X, Y = data()
    for seed in (0, 2**32 - 1):
        model = NystromGP(X, Y, seed=seed, exact_max_n=0, max_dictionary_size=10)
        assert model.dictionary_size <= 10


def test_option_objects_equal_flat_keywords():
    X, Y = data(n=60)
    flat = NystromGP(X, Y, seed=3, q_bar=3.0, exact_max_n=0, objective="vfe")
    objects = NystromGP(
        X,
        Y,
        dictionary_policy=LeverageScorePolicy(q_bar=3.0, exact_max_n=0, seed=3),
        fit_options=NystromFitOptions(objective="vfe"),
    )
    assert flat.dictionary_policy == objects.dictionary_policy
    assert flat.fit_options == objects.fit_options
    assert (flat.q_bar, flat.seed, flat.objective) == (3.0, 3, "vfe")
    assert torch.equal(flat.dictionary_indices, objects.dictionary_indices)


def _state(model):
    return model.sketch_state()


@pytest.mark.parametrize(
    "fault", ["nan", "inf", "negative_row", "row_past_end", "key_out_of_range"]
)
def test_unusable_warm_start_is_discarded_and_fits_from_scratch(fault):
    X, Y = data(n=80)
    kwargs = {"seed": 0, "exact_max_n": 0, "max_dictionary_size": 20}
    state = _state(fitted(NystromGP(X[:60], Y[:60], **kwargs)))
    hyper = dict(state.hyperparameters)
    rows = state.dictionary_rows.clone()
    if fault in ("nan", "inf"):
        key = next(k for k in hyper if "lengthscale" in k)
        hyper[key] = torch.full_like(hyper[key], math.nan if fault == "nan" else 1e400)
    elif fault == "negative_row":
        rows[0] = -3
    elif fault == "row_past_end":
        rows[-1] = 10_000
    keys = state.dictionary_keys.clone()
    if fault == "key_out_of_range":
        keys[0] = 2**40
    bad = SketchState(
        hyperparameters=hyper,
        dictionary_rows=rows,
        rows_checksum=state.rows_checksum,
        num_fit_points=state.num_fit_points,
        fit_loss=state.fit_loss,
        num_draws=state.num_draws,
        sketch_ridge=state.sketch_ridge,
        dictionary_inputs=None,
        dictionary_keys=keys,
    )
    for warm in (bad, bad.to_dict(compact=False)):
        with pytest.warns(RuntimeWarning, match="warm_start discarded"):
            model = NystromGP(X, Y, warm_start=warm, **kwargs)
        assert model.warm_start is None
        fitted(model)
        cold = fitted(NystromGP(X, Y, **kwargs))
        Xt = torch.rand(5, 2, dtype=DT)
        mean = model.posterior(Xt).mean
        assert torch.isfinite(mean).all()
        torch.testing.assert_close(mean, cold.posterior(Xt).mean)


def test_usable_warm_start_is_kept_without_warning():
    X, Y = data(n=80)
    kwargs = {"seed": 0, "exact_max_n": 0, "max_dictionary_size": 20}
    state = _state(fitted(NystromGP(X[:60], Y[:60], **kwargs)))
    assert state.problems(80) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model = NystromGP(X, Y, warm_start=state.to_dict(), **kwargs)
    assert model.warm_start is not None
