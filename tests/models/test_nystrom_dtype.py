"""``NystromGP`` keeps ``SingleTaskGP``'s dtype and batch-shape contract.

A float32 user gets float32 back (training data, posteriors, fantasies,
conditioned models) although the model computes in float64; batch shapes that
do not broadcast fail with BoTorch's message. Some checks run BoTorch's own test
helpers (``botorch.utils.test_helpers``) on both models.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from botorch.acquisition import qExpectedImprovement
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.models import SingleTaskGP
from botorch.sampling import SobolQMCNormalSampler
from botorch.utils.test_helpers import get_pvar_expected

from botorch_sketch.models import NystromGP

MODELS = [SingleTaskGP, NystromGP]


def data(n=20, d=2, m=1, batch=(), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(*batch, n, d, generator=g, dtype=torch.float64)
    Y = torch.cat(
        [torch.sin(3 * X).sum(-1, keepdim=True) * (j + 1) for j in range(m)], -1
    )
    return X.to(dtype), Y.to(dtype)


def build(cls, X, Y, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BoTorch's single-precision warning
        return cls(X, Y, **kwargs).eval()


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize("m", [1, 2])
def test_float32_in_float32_out(cls, m):
    X, Y = data(m=m)
    model = build(cls, X, Y)
    assert model.train_inputs[0].dtype == torch.float32
    assert model.train_targets.dtype == torch.float32
    Xt = torch.rand(3, 4, 2)
    for kwargs in ({}, {"observation_noise": True}):
        post = model.posterior(Xt, **kwargs)
        assert post.mean.dtype == torch.float32
        assert post.variance.dtype == torch.float32
        assert post.rsample(torch.Size([2])).dtype == torch.float32
        # BoTorch's own check of the observation-noise variance.
        if kwargs:
            expected = get_pvar_expected(post, model, Xt, m)
            torch.testing.assert_close(
                post.variance, expected.to(post.variance), rtol=1e-4, atol=1e-5
            )
    transform = ScalarizedPosteriorTransform(torch.ones(m))
    assert model.posterior(Xt, posterior_transform=transform).mean.dtype == (
        torch.float32
    )


@pytest.mark.parametrize("cls", MODELS)
def test_float32_conditioning_and_fantasies(cls):
    X, Y = data()
    model = build(cls, X, Y)
    model.posterior(X[:2])  # caches built, as in a loop
    cond = model.condition_on_observations(torch.rand(2, 2), torch.rand(2, 1))
    assert cond.train_inputs[0].dtype == torch.float32
    assert cond.train_inputs[0].shape[-2] == 22
    assert cond.posterior(torch.rand(3, 2)).mean.dtype == torch.float32
    sampler = SobolQMCNormalSampler(torch.Size([3]), seed=0)
    fant = model.fantasize(torch.rand(2, 2), sampler)
    assert fant.train_inputs[0].dtype == torch.float32
    assert fant.posterior(torch.rand(4, 2)).mean.shape == (3, 4, 1)
    assert fant.posterior(torch.rand(4, 2)).mean.dtype == torch.float32
    acqf = qExpectedImprovement(model, best_f=Y.max())
    assert acqf(torch.rand(5, 2, 2)).dtype == torch.float32


def test_float32_matches_float64():
    X, Y = data(n=40)
    m32 = build(NystromGP, X, Y, seed=0, dictionary="all")
    m64 = build(NystromGP, X.double(), Y.double(), seed=0, dictionary="all")
    Xt = torch.rand(6, 2, dtype=torch.float64)
    p32, p64 = m32.posterior(Xt.float()), m64.posterior(Xt)
    torch.testing.assert_close(p32.mean.double(), p64.mean, atol=1e-5, rtol=0)
    torch.testing.assert_close(p32.variance.double(), p64.variance, atol=1e-5, rtol=0)


def test_float32_gradients_flow():
    X, Y = data()
    model = build(NystromGP, X, Y)
    Xt = torch.rand(4, 2, requires_grad=True)
    model.posterior(Xt).mean.sum().backward()
    assert Xt.grad is not None and Xt.grad.dtype == torch.float32
    assert torch.isfinite(Xt.grad).all()


@pytest.mark.parametrize("cls", MODELS)
def test_broadcastable_batch_shapes_work(cls):
    X, Y = data(batch=(2,), dtype=torch.float64)
    model = build(cls, X, Y)
    assert model.posterior(torch.rand(3, 1, 4, 2, dtype=torch.float64)).mean.shape == (
        3,
        2,
        4,
        1,
    )


def test_non_broadcastable_batch_shapes_fail_with_botorchs_message():
    X, Y = data(batch=(2,), dtype=torch.float64)
    model = build(NystromGP, X, Y)
    message = "trailing batch dimensions of X must match"
    with pytest.raises(RuntimeError, match=message):
        model.posterior(torch.rand(3, 4, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=message):
        model.condition_on_observations(
            torch.rand(3, 2, 2, dtype=torch.float64),
            torch.rand(3, 2, 1, dtype=torch.float64),
        )
    # The model is unchanged and still predicts.
    assert model.posterior(torch.rand(2, 4, 2, dtype=torch.float64)).mean.shape == (
        2,
        4,
        1,
    )


def test_to_changes_both_compute_and_output_dtype():
    X, Y = data(dtype=torch.float64)
    model = build(NystromGP, X, Y)
    model.to(torch.float32)
    assert model.compute_dtype == torch.float32
    assert model.posterior(torch.rand(3, 2)).mean.dtype == torch.float32
    model.double()
    assert model.posterior(torch.rand(3, 2, dtype=torch.float64)).mean.dtype == (
        torch.float64
    )
