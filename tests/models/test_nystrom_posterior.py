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
