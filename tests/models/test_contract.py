"""The BoTorch model contract, checked the same way for every model we ship.

Each model (and ``SingleTaskGP``, the reference it must behave like) is described
by a :class:`ModelCase`: how to build and fit it and which optional capabilities it
has (several outputs, batched training data, batched fantasies, observed noise).
Every check below runs for every case; a capability a model lacks must be refused
with a clear error at the call, never by a crash somewhere later. A new model
gets the whole contract by adding one case to ``CASES``.
"""

from __future__ import annotations

import math
import pickle
import warnings
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass

import pytest
import torch
from botorch.acquisition import (
    LogExpectedImprovement,
    PosteriorMean,
    PosteriorStandardDeviation,
    ProbabilityOfImprovement,
    UpperConfidenceBound,
    qKnowledgeGradient,
    qLogExpectedImprovement,
    qLogNoisyExpectedImprovement,
    qMaxValueEntropy,
    qNegIntegratedPosteriorVariance,
    qProbabilityOfImprovement,
    qSimpleRegret,
    qUpperConfidenceBound,
)
from botorch.acquisition.multi_objective import (
    qLogNoisyExpectedHypervolumeImprovement,
)
from botorch.acquisition.objective import (
    GenericMCObjective,
    ScalarizedPosteriorTransform,
)
from botorch.exceptions.errors import InputDataError, UnsupportedError
from botorch.fit import fit_gpytorch_mll
from botorch.generation.sampling import MaxPosteriorSampling
from botorch.models import SingleTaskGP
from botorch.models.model import Model
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.goucb.network import paper_network
from botorch_sketch.goucb.oracle import OracleOptions
from botorch_sketch.models import GOUCBModel, GradientSubsetGP, NystromGP
from botorch_sketch.models.goucb import fit_goucb_model

DT = torch.float64
D = 2
N = 24
BOUNDS = torch.tensor([[-2.0, 0.0], [3.0, 10.0]], dtype=DT)


# ---------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelCase:
    """How to build and fit one model class, and what it supports.

    Attributes:
        name: Test id.
        build: ``build(X, Y, Yvar=None, seed=0, **transforms) -> Model``.
        fit: Fits a built model in place (the way a BoTorch loop or Ax does).
        multi_output: Accepts ``n x m`` targets with ``m > 1``.
        batched: Accepts ``batch x n x d`` training data.
        fantasize: Supports batched fantasy models (qKG, qNIPV, qMES with
            pending points).
        observed_noise: Accepts ``train_Yvar``.
        seed_in_state: Every random choice the predictions depend on travels in
            the ``state_dict``, so a model built with another seed predicts the
            same after loading it.
        outcome_stats_from_all_data: The outcome transform is fitted on all
            training targets (``GradientSubsetGP`` fits it on its subset).
        reference: BoTorch's own model: where it falls short of the contract
            (noted at each such place) the check is not applied to it.
    """

    name: str
    build: Callable[..., Model]
    fit: Callable[[Model], None]
    multi_output: bool
    batched: bool
    fantasize: bool
    observed_noise: bool
    seed_in_state: bool
    outcome_stats_from_all_data: bool = True
    reference: bool = False


def _fit_mll(model: Model) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(
            ExactMarginalLogLikelihood(model.likelihood, model),
            optimizer_kwargs={"options": {"maxiter": 30}},
        )


def _build_stgp(X, Y, Yvar=None, seed=0, **tf):
    return SingleTaskGP(X, Y, Yvar, **tf)


def _build_nystrom(X, Y, Yvar=None, seed=0, **tf):
    return NystromGP(X, Y, Yvar, seed=seed, **tf)


def _build_gssbo(X, Y, Yvar=None, seed=0, **tf):
    return GradientSubsetGP(X, Y, Yvar, subset_size=12, n_initial=4, seed=seed, **tf)


def _build_goucb(X, Y, Yvar=None, seed=0, **tf):
    if Yvar is not None:
        raise AssertionError("GOUCBModel takes no observed noise")
    return GOUCBModel(
        X,
        Y,
        network=paper_network(X.shape[-1], width=6, seed=seed),
        n_init=8,
        lambda_=0.5,
        oracle=OracleOptions(steps=150, lr=3e-2),
        seed=seed,
        **tf,
    )


CASES = [
    ModelCase("SingleTaskGP", _build_stgp, _fit_mll, *(True,) * 5, reference=True),
    ModelCase("NystromGP", _build_nystrom, _fit_mll, True, True, True, True, True),
    ModelCase(
        "GradientSubsetGP",
        _build_gssbo,
        _fit_mll,
        multi_output=False,
        batched=False,
        fantasize=True,
        observed_noise=True,
        seed_in_state=False,
        outcome_stats_from_all_data=False,
    ),
    ModelCase(
        "GOUCBModel", _build_goucb, fit_goucb_model, False, False, False, False, True
    ),
]
OURS = [case for case in CASES if not case.reference]


def ids(cases):
    return [case.name for case in cases]


def make_data(n=N, m=1, batch=(), seed=0):
    """Inputs in ``BOUNDS`` and smooth noisy targets (``m`` columns)."""
    g = torch.Generator().manual_seed(seed)
    U = torch.rand(*batch, n, D, generator=g, dtype=DT)
    X = BOUNDS[0] + (BOUNDS[1] - BOUNDS[0]) * U
    f = torch.sin(3 * U).sum(-1, keepdim=True)
    Y = torch.cat([f * (j + 1) + j for j in range(m)], -1)
    return X, Y + 0.05 * torch.randn(Y.shape, generator=g, dtype=DT)


def transforms(m=1):
    return {
        "input_transform": Normalize(D, bounds=BOUNDS),
        "outcome_transform": Standardize(m=m),
    }


def query_points(*batch, q=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    U = torch.rand(*batch, q, D, generator=g, dtype=DT)
    return BOUNDS[0] + (BOUNDS[1] - BOUNDS[0]) * U


def assert_same_posterior(p, q, atol=1e-9):
    torch.testing.assert_close(p.mean, q.mean, atol=atol, rtol=0)
    torch.testing.assert_close(p.variance, q.variance, atol=atol, rtol=0)


@pytest.fixture(params=CASES, ids=ids(CASES))
def case(request) -> ModelCase:
    return request.param


@pytest.fixture(params=OURS, ids=ids(OURS))
def our_case(request) -> ModelCase:
    return request.param


def built(case: ModelCase, m=1, batch=(), fit=False, **kwargs) -> Model:
    X, Y = make_data(m=m, batch=batch)
    model = case.build(X, Y, **{**transforms(m), **kwargs})
    if fit:
        case.fit(model)
    return model.eval()


# ---------------------------------------------------------------------------------
# Posterior: shapes, noise, output subsets
# ---------------------------------------------------------------------------------


def test_posterior_shapes_and_moments(case):
    model = built(case)
    for batch in [(), (4,), (2, 4)]:
        post = model.posterior(query_points(*batch))
        assert post.mean.shape == torch.Size([*batch, 3, 1])
        assert post.variance.shape == post.mean.shape
        assert (post.variance > 0).all()
        cov = post.distribution.covariance_matrix
        torch.testing.assert_close(cov, cov.mT)
    X = query_points()
    noisy = model.posterior(X, observation_noise=True)
    assert (noisy.variance > model.posterior(X).variance).all()
    sub = model.posterior(X, output_indices=[0])
    assert_same_posterior(sub, model.posterior(X))
    weights = torch.tensor([-2.0], dtype=DT)
    scal = model.posterior(X, posterior_transform=ScalarizedPosteriorTransform(weights))
    torch.testing.assert_close(scal.mean, -2.0 * model.posterior(X).mean)


def test_multi_output(case):
    X, Y = make_data(m=2)
    if not case.multi_output:
        with pytest.raises((ValueError, UnsupportedError), match="train_Y|output"):
            case.build(X, Y, **transforms(2))
        return
    model = case.build(X, Y, **transforms(2)).eval()
    assert model.num_outputs == 2
    Xt = query_points(4)
    post = model.posterior(Xt)
    assert post.mean.shape == torch.Size([4, 3, 2])
    second = model.subset_output([1])
    assert second.num_outputs == 1
    torch.testing.assert_close(
        second.posterior(Xt).mean[..., 0], post.mean[..., 1], atol=1e-8, rtol=0
    )


def test_batched_training_data(case):
    X, Y = make_data(batch=(3,))
    if not case.batched:
        with pytest.raises((ValueError, UnsupportedError), match="train_X"):
            case.build(X, Y)
        return
    model = case.build(X, Y, outcome_transform=Standardize(1, batch_shape=(3,)))
    model.eval()
    assert model.batch_shape == torch.Size([3])
    for shape, expected in [((), (3,)), ((3,), (3,)), ((2, 1), (2, 3))]:
        post = model.posterior(query_points(*shape))
        assert post.mean.shape == torch.Size([*expected, 3, 1])


# ---------------------------------------------------------------------------------
# Transforms, dtype and device moves
# ---------------------------------------------------------------------------------


def test_transforms_equal_transformed_data(case):
    """``Normalize`` (+ ``Standardize``) inside the model == the data pre-scaled."""
    X, Y = make_data()
    tf = transforms()
    Xt = query_points(2)
    model = case.build(X, Y, input_transform=tf["input_transform"]).eval()
    twin = case.build(tf["input_transform"](X), Y).eval()
    assert_same_posterior(
        model.posterior(Xt), twin.posterior(tf["input_transform"](Xt)), atol=1e-8
    )
    if not case.outcome_stats_from_all_data:
        return
    model = case.build(X, Y, **tf).eval()
    Y_std, _ = tf["outcome_transform"](Y)
    twin = case.build(tf["input_transform"](X), Y_std, outcome_transform=None)
    post, ref = model.posterior(Xt), twin.eval().posterior(tf["input_transform"](Xt))
    std = tf["outcome_transform"].stdvs
    mean = tf["outcome_transform"].means
    torch.testing.assert_close(post.mean, ref.mean * std + mean, atol=1e-8, rtol=0)
    torch.testing.assert_close(post.variance, ref.variance * std**2, atol=1e-8, rtol=0)


def test_to_float32_and_back(case):
    model = built(case)
    Xt = query_points(2)
    ref = model.posterior(Xt)  # prediction caches now exist, in float64
    m32 = deepcopy(model)
    if case.reference:
        m32.train()  # gpytorch's ExactGP keeps its caches across .to(); ours don't
    m32 = m32.to(torch.float32).eval()
    post = m32.posterior(Xt.float())
    assert post.mean.dtype == torch.float32
    torch.testing.assert_close(post.mean, ref.mean.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(
        post.variance, ref.variance.float(), atol=2e-3, rtol=2e-3
    )
    if case.reference:
        m32.train()
    m64 = m32.to(torch.float64).eval()
    assert m64.posterior(Xt).mean.dtype == torch.float64


# ---------------------------------------------------------------------------------
# State: state_dict, deepcopy, pickle
# ---------------------------------------------------------------------------------


def test_state_dict_restores_predictions(case):
    X, Y = make_data()
    fitted = case.build(X, Y, seed=0, **transforms())
    case.fit(fitted)
    fitted.eval()
    fresh = case.build(X, Y, seed=1 if case.seed_in_state else 0, **transforms())
    fresh.load_state_dict(fitted.state_dict())
    fresh.eval()
    Xt = query_points(3)
    assert_same_posterior(fresh.posterior(Xt), fitted.posterior(Xt), atol=1e-10)


def test_deepcopy_and_pickle_keep_predictions(case):
    model = built(case, fit=True)
    Xt = query_points(2)
    ref = model.posterior(Xt)
    assert_same_posterior(deepcopy(model).posterior(Xt), ref, atol=0)
    assert_same_posterior(pickle.loads(pickle.dumps(model)).posterior(Xt), ref, atol=0)


# ---------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------


LAYOUTS = [(1, ()), (2, ()), (1, (2,))]


@pytest.mark.parametrize(
    "case, m, batch",
    [
        (case, m, batch)
        for case in CASES
        for m, batch in LAYOUTS
        if (m == 1 or case.multi_output) and (not batch or case.batched)
    ],
    ids=lambda v: getattr(v, "name", str(v)),
)
def test_standard_fit_improves_the_model(case, m, batch):
    """The fit BoTorch/Ax would run works on every data layout the model takes
    (the layouts it refuses are checked in test_multi_output / _batched)."""
    X, Y = make_data(m=m, batch=batch)
    model = case.build(X, Y, outcome_transform=Standardize(m, batch_shape=batch))
    Xt, Yt = make_data(n=40, m=m, batch=batch, seed=5)
    before = _heldout_nll(model.eval(), Xt, Yt)
    case.fit(model)
    after = _heldout_nll(model.eval(), Xt, Yt)
    assert math.isfinite(after)
    if case.fit is _fit_mll:  # GO-UCB is fitted at construction already
        assert after < before


def _heldout_nll(model, X, Y):
    """Mean Gaussian negative log predictive density (marginals, up to a constant)."""
    post = model.posterior(X, observation_noise=True)
    mean, var = post.mean, post.variance
    return float((0.5 * (Y - mean) ** 2 / var + 0.5 * var.log()).mean())


# ---------------------------------------------------------------------------------
# Conditioning and fantasies
# ---------------------------------------------------------------------------------


def test_condition_on_observations(case):
    model = built(case, fit=True)
    model.posterior(query_points())  # builds prediction caches, as BoTorch does
    n_before = model.train_inputs[0].shape[-2]
    Xn, Yn = make_data(n=2, seed=7)
    cond = model.condition_on_observations(Xn, Yn)
    assert model.train_inputs[0].shape[-2] == n_before  # the model is not changed
    assert (cond.posterior(Xn).variance < model.posterior(Xn).variance).all()


def test_fantasize(case):
    model = built(case, fit=True)
    model.posterior(query_points())
    sampler = SobolQMCNormalSampler(torch.Size([3]), seed=0)
    Xf = query_points(q=2, seed=3)
    if not case.fantasize:
        with pytest.raises(UnsupportedError, match="fantas"):
            model.fantasize(Xf, sampler=sampler)
        return
    fant = model.fantasize(Xf, sampler=sampler)
    assert fant.batch_shape == torch.Size([3])
    post = fant.posterior(query_points(q=4))
    assert post.mean.shape == torch.Size([3, 4, 1])
    means = fant.posterior(Xf).mean
    assert not torch.allclose(means[0], means[1])  # fantasies differ


@pytest.mark.parametrize(
    "X, Y, message",
    [
        (None, torch.full((2, 1), float("nan"), dtype=DT), "NaN"),
        (None, torch.zeros(3, 1, dtype=DT), "2 points"),
        (None, torch.zeros(2, 2, dtype=DT), "output"),
        (torch.zeros(2, D + 1, dtype=DT), torch.zeros(2, 1, dtype=DT), "X"),
    ],
)
def test_bad_conditioning_data_raise_at_the_call(our_case, X, Y, message):
    model = built(our_case)
    model.posterior(query_points())
    X = query_points(q=2) if X is None else X
    with pytest.raises((ValueError, UnsupportedError), match=message):
        model.condition_on_observations(X, Y)


# ---------------------------------------------------------------------------------
# Training data: bad input, zero observed noise
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda X, Y: (X.clone().fill_(float("nan")), Y), "NaN"),
        (lambda X, Y: (X, Y.clone().fill_(float("inf"))), "Inf|NaN"),
        (lambda X, Y: (X, Y[:-1]), "rows|points"),
        (lambda X, Y: (X[:0], Y[:0]), "empty"),
        (lambda X, Y: (X.int(), Y), "floating"),
    ],
)
def test_bad_training_data_raise(our_case, mutate, message):
    X, Y = mutate(*make_data())
    with pytest.raises((ValueError, TypeError), match=message):
        our_case.build(X, Y)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.observed_noise], ids=lambda c: c.name
)
def test_zero_observed_noise_is_accepted(case):
    X, Y = make_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gpytorch warns that it floors the noise
        model = case.build(X, Y, torch.zeros_like(Y), **transforms()).eval()
    post = model.posterior(query_points())
    assert torch.isfinite(post.mean).all() and (post.variance > 0).all()
    with pytest.raises((ValueError, InputDataError), match="negative"):
        case.build(X, Y, -torch.ones_like(Y))


# ---------------------------------------------------------------------------------
# Acquisition functions, one of each family
# ---------------------------------------------------------------------------------


def _single_output_acqfs(model, X_obs, fantasize):
    best = float(model.posterior(X_obs).mean.max())
    pending = query_points(q=2, seed=11)
    sampler = SobolQMCNormalSampler(torch.Size([16]), seed=0)
    acqfs = {
        "UCB": UpperConfidenceBound(model, beta=2.0),
        "LogEI": LogExpectedImprovement(model, best_f=best),
        "PI": ProbabilityOfImprovement(model, best_f=best),
        "PosteriorMean": PosteriorMean(model),
        "PosteriorStd": PosteriorStandardDeviation(model),
        "qUCB": qUpperConfidenceBound(model, 2.0, sampler, X_pending=pending),
        "qLogEI": qLogExpectedImprovement(model, best, sampler, X_pending=pending),
        "qLogNEI": qLogNoisyExpectedImprovement(
            model, X_obs, sampler, X_pending=pending
        ),
        "qSR": qSimpleRegret(model, sampler),
        "qPI": qProbabilityOfImprovement(model, best, sampler),
        "qMES": qMaxValueEntropy(model, candidate_set=query_points(q=64, seed=4)),
    }
    if fantasize:
        acqfs["qKG"] = qKnowledgeGradient(model, num_fantasies=4)
        acqfs["qNIPV"] = qNegIntegratedPosteriorVariance(
            model, mc_points=query_points(q=16, seed=5)
        )
    return acqfs


def test_acquisition_functions(case):
    model = built(case, fit=True)
    X_obs = make_data()[0]
    for name, acqf in _single_output_acqfs(model, X_obs, case.fantasize).items():
        q = 1 if name[0] != "q" or name == "qMES" else 2
        if name == "qKG":
            q += acqf.num_fantasies
        X = query_points(5, q=q, seed=9).requires_grad_(True)
        value = acqf(X)
        assert value.shape == torch.Size([5]), name
        assert torch.isfinite(value).all(), name
        value.sum().backward()
        assert X.grad is not None and torch.isfinite(X.grad).all(), name
    with torch.no_grad():
        picks = MaxPosteriorSampling(model, replacement=False)(
            query_points(q=50, seed=8), num_samples=3
        )
    assert picks.shape == torch.Size([3, D])


def test_acquisition_optimization_in_a_stock_loop(case):
    model = built(case, fit=True)
    acqf = qLogNoisyExpectedImprovement(
        model, make_data()[0], SobolQMCNormalSampler(torch.Size([16]), seed=0)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cand, value = optimize_acqf(
            acqf, BOUNDS, q=2, num_restarts=2, raw_samples=16, options={"maxiter": 5}
        )
    assert cand.shape == torch.Size([2, D]) and torch.isfinite(value)
    assert ((cand >= BOUNDS[0]) & (cand <= BOUNDS[1])).all()


@pytest.mark.parametrize(
    "case", [c for c in CASES if not c.fantasize], ids=lambda c: c.name
)
def test_fantasy_acquisitions_refused_clearly(case):
    model = built(case, fit=True)
    acqf = qKnowledgeGradient(model, num_fantasies=2)
    with pytest.raises(UnsupportedError, match="fantas"):
        acqf(query_points(q=3))


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.multi_output], ids=lambda c: c.name
)
def test_multi_objective_and_constrained_acquisitions(case):
    X, Y = make_data(m=2)
    model = case.build(X, Y, **transforms(2))
    case.fit(model)
    model.eval()
    sampler = SobolQMCNormalSampler(torch.Size([16]), seed=0)
    ref = Y.min(0).values - 0.1
    acqfs = [
        qLogNoisyExpectedHypervolumeImprovement(
            model, ref_point=ref, X_baseline=X, sampler=sampler
        ),
        qLogNoisyExpectedImprovement(
            model,
            X,
            sampler,
            objective=GenericMCObjective(lambda Z, X=None: Z[..., 0]),
            constraints=[lambda Z: Z[..., 1] - 1.0],
        ),
    ]
    for acqf in acqfs:
        value = acqf(query_points(4, q=2))
        assert value.shape == torch.Size([4]) and torch.isfinite(value).all()
