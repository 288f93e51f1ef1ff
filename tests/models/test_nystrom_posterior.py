from __future__ import annotations

import pytest
import torch
from linear_operator.utils.cholesky import psd_safe_cholesky

from botorch_sketch.models.nystrom_posterior import sample_dtc_joint

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
