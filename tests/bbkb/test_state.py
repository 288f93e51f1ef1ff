"""Tests of the frozen batch-start state (BBKB Eqs. 1-3) against brute force."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.bbkb import ExactPosterior, rbf_kernel, rebuild
from botorch_sketch.bbkb.state import KernelColumnCache, embed_arms

from .conftest import DT, make_state


def test_rebuild_matches_dense_formulas():
    state, pulls, y = make_state(seed=1)
    lam = state.lam
    X, S = state.arms, state.arms[state.S_idx]
    K_AS = state.kernel(X, S)
    K_pinv = torch.linalg.pinv(state.kernel(S, S), hermitian=True)
    # Nystrom feature-space quantities with repetitions, via the m x m system.
    Phi = K_AS[pulls]  # t x m, z = W^T k_S, z z'^T = k^T K^+ k'
    V = K_pinv @ Phi.mT @ Phi @ K_pinv  # acting on k-coordinates
    # mu(x) = k(x)^T K^+ Phi^T (Phi K^+ Phi^T + lam I)^{-1} y  (push-through)
    Qtt = Phi @ K_pinv @ Phi.mT
    Qat = K_AS @ K_pinv @ Phi.mT
    M = torch.linalg.inv(Qtt + lam * torch.eye(len(pulls), dtype=DT))
    mu = Qat @ M @ y
    Qaa = (K_AS @ K_pinv * K_AS).sum(-1)
    var = (1.0 - Qaa) / lam + (Qaa - (Qat @ M * Qat).sum(-1)) / lam
    assert torch.allclose(state.mu, mu, atol=1e-8)
    assert torch.allclose(state.s2_0, var, rtol=1e-7, atol=1e-8)
    assert torch.allclose(state.variances(), state.s2_0, atol=1e-9)
    del V


def test_full_dictionary_equals_exact_gp():
    """S = every pulled arm: mean and variance equal the exact GP (Eqs. 4-6)."""
    state, pulls, y = make_state(seed=2, all_pulled_in_dict=True)
    post = ExactPosterior(state.arms, state.kernel, state.kernel_diag, state.lam)
    for a in pulls.tolist():
        post.add(a)
    post.observe(y)
    assert torch.allclose(state.mu, post.mean(), atol=1e-8)
    assert torch.allclose(state.s2_0, post.variance(), atol=1e-8)
    # Hallucinated dictionary points: exact GP without feedback == rank-one update.
    extra = pulls[torch.tensor([0, 0, 3, 5])]  # in S, as in GP-BUCB vs BBKB
    for a in extra.tolist():
        post.add(a)
    assert torch.allclose(state.variances(extra), post.variance(), atol=1e-8)


def test_empty_dictionary_and_chunking_and_cache():
    state, _, _ = make_state(seed=3)
    empty = rebuild(
        state.arms,
        state.kernel,
        state.kernel_diag,
        torch.empty(0, dtype=torch.long),
        state.counts,
        state.reward_sums,
        state.lam,
    )
    assert empty.rank == 0 and empty.dict_size == 0
    assert torch.equal(empty.mu, torch.zeros_like(empty.mu))
    assert torch.allclose(empty.s2_0, empty.kdiag / state.lam)
    small = rebuild(
        state.arms,
        state.kernel,
        state.kernel_diag,
        state.S_idx,
        state.counts,
        state.reward_sums,
        state.lam,
        chunk_size=7,
    )
    assert torch.allclose(small.s2_0, state.s2_0, atol=1e-10)
    assert torch.allclose(small.mu, state.mu, atol=1e-10)
    cache = KernelColumnCache(state.arms, state.kernel)
    for S in (
        state.S_idx,
        state.S_idx[1:],
        torch.cat([state.S_idx, torch.tensor([0])]),
    ):
        S = torch.unique(S)
        W, Z = embed_arms(state.arms, state.kernel, S, cache=cache)
        W2, Z2 = embed_arms(state.arms, state.kernel, S)
        assert torch.allclose(Z @ Z.mT, Z2 @ Z2.mT, atol=1e-10)


def test_duplicate_dictionary_points_are_deduplicated():
    state, _, _ = make_state(seed=4)
    S = torch.cat([state.S_idx, state.S_idx[:3]])
    again = rebuild(
        state.arms,
        state.kernel,
        state.kernel_diag,
        S,
        state.counts,
        state.reward_sums,
        state.lam,
    )
    assert torch.equal(again.S_idx, state.S_idx)
    assert torch.allclose(again.s2_0, state.s2_0, atol=1e-10)


def test_rebuild_validation():
    k, kd = rbf_kernel(0.5)
    X = torch.rand(5, 2, dtype=DT)
    z = torch.zeros(5, dtype=DT)
    with pytest.raises(ValueError, match="non-empty"):
        rebuild(X[:0], k, kd, torch.tensor([0]), z[:0], z[:0], 0.1)
    with pytest.raises(ValueError, match="counts and reward_sums"):
        rebuild(X, k, kd, torch.tensor([0]), z[:4], z, 0.1)
    with pytest.raises(ValueError, match="dictionary indices"):
        rebuild(X, k, kd, torch.tensor([7]), z, z, 0.1)
    with pytest.raises(ValueError, match="lam"):
        rebuild(X, k, kd, torch.tensor([0]), z, z, 0.0)
