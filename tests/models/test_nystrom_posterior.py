from __future__ import annotations

import pytest
import torch
from botorch.exceptions.errors import UnsupportedError
from botorch.models.transforms import Standardize
from linear_operator.utils.cholesky import psd_safe_cholesky

from botorch_sketch.models import GroupedRBFKernel, NystromGP
from botorch_sketch.models.nystrom_posterior import (
    prior_feature_paths,
    sample_dtc_joint,
)

DT = torch.float64


@pytest.mark.parametrize("batch, r_n", [((), 0), ((2,), 3)])
def test_joint_samples_factor_the_whole_dtc_covariance_by_blocks(batch, r_n):
    # K - P P^T + N N^T formed by blocks of 7 rows (lower triangle only) gives
    # the draws of the full matrix's Cholesky factor with the same eps.
    g = torch.Generator().manual_seed(0)
    A, r_p = 20, 4
    R = torch.randn(*batch, A, A + 5, generator=g, dtype=DT)
    P = 0.3 * torch.randn(*batch, A, r_p, generator=g, dtype=DT)
    N = 0.3 * torch.randn(*batch, A, r_n, generator=g, dtype=DT)
    K = R @ R.mT / A + P @ P.mT + 0.1 * torch.eye(A, dtype=DT)
    mean = torch.randn(*batch, A, generator=g, dtype=DT)
    kept = K.clone()
    got = sample_dtc_joint(
        mean, K, P, N, 5, generator=torch.Generator().manual_seed(1), block_rows=7
    )
    assert torch.equal(K, kept)
    chol = psd_safe_cholesky(K - P @ P.mT + N @ N.mT)
    g1 = torch.Generator().manual_seed(1)
    eps = torch.randn(*batch, A, 5, generator=g1, dtype=DT)
    want = (mean.unsqueeze(-1) + chol @ eps).movedim(-1, 0)
    assert got.shape == (5, *batch, A)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    again = sample_dtc_joint(
        mean, K, P, N, 5, generator=torch.Generator().manual_seed(1), overwrite_K=True
    )
    torch.testing.assert_close(again, want, rtol=1e-10, atol=1e-10)
    assert not torch.equal(K, kept)


@pytest.mark.parametrize("num_outputs", [1, 2])
def test_latent_samples_equal_the_whitened_formula(num_outputs):
    """``sample_dtc_latent`` projects the candidates' embeddings on one solve
    ``L^{-T} [coef | eps^T]``; the samples are those of the whitened formula
    ``mean + (L^{-1} z)^T (coef + eps) + sqrt(residual) xi`` with the same draws."""
    from botorch_sketch import linalg
    from botorch_sketch.models import NystromGP

    g = torch.Generator().manual_seed(0)
    X = torch.rand(200, 3, generator=g, dtype=torch.float64)
    Y = torch.sin(5 * X).sum(-1, keepdim=True) * torch.arange(1.0, num_outputs + 1)
    model = NystromGP(X, Y, seed=0, exact_max_n=0, max_dictionary_size=40).eval()
    cand = torch.rand(700, 3, generator=g, dtype=torch.float64)
    samples = model.sample_latent(
        cand, 5, generator=torch.Generator().manual_seed(3), chunk_size=10_000
    )

    cache = model._factor_cache()
    factor = cache["factor"]
    with torch.no_grad():
        Xt = model.transform_inputs(cand)
        if num_outputs > 1:
            Xt = Xt.unsqueeze(0).expand(num_outputs, *Xt.shape)
        Z = model._embed(Xt, cache["S"], cache["W"])
        W = linalg.whiten(factor, Z)  # (m) x r x A
        draws = torch.Generator().manual_seed(3)
        eps = torch.randn(
            5, *factor.chol.shape[:-2], W.shape[-2], generator=draws, dtype=W.dtype
        )
        resid = linalg.embedding_residual(model.covar_module(Xt, diag=True), Z)
        xi = torch.randn(5, *resid.shape, generator=draws, dtype=torch.float64)
        mean = model.mean_module(Xt) + (W * factor.coef.unsqueeze(-1)).sum(-2)
        expected = mean + (W * eps.unsqueeze(-1)).sum(-2) + resid.sqrt() * xi
        expected = expected.unsqueeze(-1) if num_outputs == 1 else expected.mT
        expected = model._untransformed_samples(expected)
    assert samples.shape == (5, 700, num_outputs)
    torch.testing.assert_close(samples, expected, atol=1e-10, rtol=1e-10)


def _pathwise_data(n=30, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=DT)
    Y = torch.sin(5 * X).sum(-1, keepdim=True)
    return X, Y


def test_prior_paths_have_the_kernels_covariance():
    # 8,000 paths with 1,024 features: the empirical covariance of the paths
    # is the kernel matrix (unit diagonal) up to the features' error (about
    # 0.03) and the sample's (sd about 0.016); the grouped kernel goes through
    # its ARD equivalent.
    kernel = GroupedRBFKernel(3, [(1, 2)]).to(DT)
    kernel.lengthscale = torch.tensor([[0.4, 0.7]], dtype=DT)
    X = torch.rand(5, 3, generator=torch.Generator().manual_seed(1), dtype=DT)
    g = torch.Generator().manual_seed(2)
    paths = prior_feature_paths(kernel, 3, 8000, 1024, generator=g)
    values = paths(X)
    assert values.shape == (5, 8000)
    with torch.no_grad():
        K = kernel(X).to_dense()
    torch.testing.assert_close(torch.cov(values), K, atol=0.12, rtol=0)
    again = prior_feature_paths(
        kernel, 3, 8000, 1024, generator=torch.Generator().manual_seed(2)
    )
    assert torch.equal(again(X), values)


def test_pathwise_samples_have_the_exact_posteriors_moments():
    X, Y = _pathwise_data()
    model = NystromGP(X, Y, dictionary="all", outcome_transform=Standardize(1))
    model.likelihood.noise = 0.01
    model.eval()
    assert model.is_exact
    cand = torch.rand(6, 3, generator=torch.Generator().manual_seed(3), dtype=DT)
    g = torch.Generator().manual_seed(4)
    samples = model.sample_pathwise(cand, 8000, generator=g)
    assert samples.shape == (8000, 6, 1)
    with torch.no_grad():
        post = model.posterior(cand)
    sd = post.variance.sqrt().squeeze(-1)
    err = (samples.squeeze(-1).mean(0) - post.mean.squeeze(-1)).abs()
    assert bool((err < 5 * sd / 8000**0.5 + 1e-3).all())
    cov = torch.cov(samples.squeeze(-1).mT)
    scale = post.variance.squeeze(-1).max()
    torch.testing.assert_close(
        cov / scale, post.covariance_matrix / scale, atol=0.1, rtol=0
    )
    # Seeded: the same generator state gives the same paths.
    again = model.sample_pathwise(
        cand, 8000, generator=torch.Generator().manual_seed(4)
    )
    assert torch.equal(again, samples)


def test_pathwise_samples_interpolate_noiseless_data():
    # Matheron's rule with (almost) no noise: every path passes through the
    # data (prior sd about 1; gpytorch rounds the noise up to 1e-6, a posterior
    # sd of about 1e-3 at the data), whatever its prior draw.
    X, Y = _pathwise_data(n=12)
    model = NystromGP(X, Y, train_Yvar=torch.full_like(Y, 1e-6), dictionary="all")
    model.eval()
    samples = model.sample_pathwise(X, 7, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(samples, Y.expand(7, 12, 1), atol=0.01, rtol=0)


def test_pathwise_needs_an_exact_single_output_model():
    X, Y = _pathwise_data(n=40)
    sketched = NystromGP(X, Y, dictionary=torch.arange(0, 40, 4))
    assert not sketched.is_exact
    with pytest.raises(UnsupportedError, match="every training point"):
        sketched.sample_pathwise(X[:3], 2)
    two = NystromGP(X, torch.cat([Y, -Y], -1), dictionary="all")
    with pytest.raises(UnsupportedError, match="single-output"):
        two.sample_pathwise(X[:3], 2)
    with pytest.raises(ValueError):
        NystromGP(X, Y, dictionary="all").sample_pathwise(X[:3, :2], 2)
