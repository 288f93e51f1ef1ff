"""Tests of the frozen batch-start state (BBKB Eqs. 1-3) against brute force."""

from __future__ import annotations

import math

import pytest
import torch

from botorch_sketch.bbkb import ExactPosterior, fixed_rbf_kernel, rebuild
from botorch_sketch.bbkb.state import IncrementalState, KernelColumnCache, embed_arms

from .conftest import DT, make_state


def _rebuild_like(state, **kw):
    return rebuild(
        state.arms,
        state.kernel,
        state.S_idx,
        state.counts,
        state.reward_sums,
        state.lam,
        **kw,
    )


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
    post = ExactPosterior(state.arms, state.kernel, state.lam)
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
        torch.empty(0, dtype=torch.long),
        state.counts,
        state.reward_sums,
        state.lam,
    )
    assert empty.rank == 0 and empty.dict_size == 0
    assert torch.equal(empty.mu, torch.zeros_like(empty.mu))
    assert torch.allclose(empty.s2_0, empty.kdiag / state.lam)
    small = _rebuild_like(state, chunk_size=7)
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
        S,
        state.counts,
        state.reward_sums,
        state.lam,
    )
    assert torch.equal(again.S_idx, state.S_idx)
    assert torch.allclose(again.s2_0, state.s2_0, atol=1e-10)


def test_rebuild_validation():
    k = fixed_rbf_kernel(0.5)
    X = torch.rand(5, 2, dtype=DT)
    z = torch.zeros(5, dtype=DT)
    with pytest.raises(ValueError, match="non-empty"):
        rebuild(X[:0], k, torch.tensor([0]), z[:0], z[:0], 0.1)
    with pytest.raises(ValueError, match="counts and reward_sums"):
        rebuild(X, k, torch.tensor([0]), z[:4], z, 0.1)
    with pytest.raises(ValueError, match="dictionary indices"):
        rebuild(X, k, torch.tensor([7]), z, z, 0.1)
    with pytest.raises(ValueError, match="lam"):
        rebuild(X, k, torch.tensor([0]), z, z, 0.0)


def test_fused_and_two_product_sweeps_agree(monkeypatch):
    """The one-product sweep (D D^T = I - lam V^-1) equals Eq. 3 term by term."""
    import botorch_sketch.bbkb.rebuilt_state as state_mod

    state, _, _ = make_state(seed=5, m=12, lam=1e-3)
    assert state.num_arms >= state_mod.FUSED_MIN_RATIO * state.rank  # fused path
    monkeypatch.setattr(state_mod, "FUSED_MIN_RATIO", 10**9)
    two = _rebuild_like(state)
    assert two._Z is not None  # the two-product path keeps Z
    assert torch.allclose(state.s2_0, two.s2_0, rtol=1e-9, atol=1e-9)
    assert torch.allclose(state.mu, two.mu, atol=1e-10)
    # Lazily built Z / resid / rows equal the eager ones; no kernel cache, chunks.
    assert torch.allclose(state.Z @ state.Z.mT, two.Z @ two.Z.mT, atol=1e-10)
    assert torch.allclose(state.resid, two.resid, atol=1e-8)
    idx = torch.tensor([3, 0, 3])
    assert torch.allclose(state.embed(idx), state.Z[idx])
    chunked = _rebuild_like(state, chunk_size=7)  # no cache: kernel per chunk
    assert chunked.K_SA is None
    assert torch.allclose(chunked.embed(idx), state.Z[idx], atol=1e-12)
    assert torch.allclose(chunked.resid_at(idx), state.resid[idx], atol=1e-8)
    assert torch.allclose(chunked.covariance_with(4), state.covariance_with(4))


def test_kernel_cache_memory_cap_falls_back_to_chunks():
    state, _, _ = make_state(seed=6)
    cache = KernelColumnCache(state.arms, state.kernel, max_bytes=8)
    capped = _rebuild_like(state, cache=cache, chunk_size=16)
    assert capped.K_SA is None
    assert torch.allclose(capped.s2_0, state.s2_0, atol=1e-9)
    assert torch.allclose(capped.mu, state.mu, atol=1e-10)


def test_float32_state_is_accurate_for_moderate_lam():
    """float32: relative accuracy ~1e-4 of mu and s2_0 at lam = 0.05."""
    state, _, _ = make_state(seed=8, m=10, lam=0.05)
    s32 = rebuild(
        state.arms.float(),
        state.kernel,
        state.S_idx,
        state.counts.float(),
        state.reward_sums.float(),
        state.lam,
    )
    assert s32.s2_0.dtype == torch.float32 and s32.mu.dtype == torch.float32
    assert torch.allclose(s32.s2_0.double(), state.s2_0, rtol=1e-3, atol=1e-3)
    assert torch.allclose(s32.mu.double(), state.mu, atol=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_rebuild_and_loop_on_cuda_match_cpu():
    from botorch_sketch.loops import noisy_oracle, run_bbkb

    state, _, _ = make_state(seed=9)
    dev = torch.device("cuda")
    cuda = rebuild(
        state.arms.to(dev),
        state.kernel,
        state.S_idx.to(dev),
        state.counts.to(dev),
        state.reward_sums.to(dev),
        state.lam,
    )
    assert cuda.s2_0.device.type == "cuda"
    assert torch.allclose(cuda.s2_0.cpu(), state.s2_0, atol=1e-8)
    f = torch.sin(3 * state.arms).sum(-1)
    runs = [
        run_bbkb(
            state.arms.to(d),
            noisy_oracle(f.to(d), 0.01, torch.Generator().manual_seed(0)),
            200,
            state.kernel,
            0.01,
            seed=0,
            progress=False,
            init=torch.tensor([3, 7], device=d),  # initial arms on the data's device
            f_true=f.to(d),
        )
        for d in ("cpu", dev)
    ]
    assert runs[1].final_state.s2_0.device.type == "cuda"
    assert runs[0].arms[:100].tolist() == runs[1].arms[:100].tolist()
    torch.testing.assert_close(
        runs[1].regret_ratio(f.to(dev)).cpu(), runs[0].regret_ratio(f)
    )


def _random_resparsifications(seed, A=150, steps=40, keep=0.85, dup=True):
    """A run of random pulls and dictionary draws (with duplicated arms)."""
    g = torch.Generator().manual_seed(seed)
    arms = torch.rand(A, 2, generator=g, dtype=DT)
    if dup:
        arms[A - 10 :] = arms[:10]  # duplicated arms: singular dictionaries
    f = torch.sin(4 * arms).sum(-1)
    counts = torch.zeros(A, dtype=DT)
    sums = torch.zeros(A, dtype=DT)
    for _ in range(steps):
        n = int(torch.randint(1, 6, (1,), generator=g))
        b = torch.randint(A, (n,), generator=g)
        y = f[b] + 0.05 * torch.randn(b.numel(), generator=g, dtype=DT)
        counts.index_add_(0, b, torch.ones(b.numel(), dtype=DT))
        sums.index_add_(0, b, y)
        pulled = (counts > 0).nonzero().squeeze(-1)
        S = pulled[torch.rand(pulled.numel(), generator=g) < keep]
        yield arms, (S if S.numel() else pulled[:1]), counts.clone(), sums.clone()


def _assert_same_state(a, b, atol=1e-7):
    assert torch.equal(a.S_idx, b.S_idx) and a.rank == b.rank
    torch.testing.assert_close(a.Z @ a.Z.mT, b.Z @ b.Z.mT, atol=1e-9, rtol=0)
    torch.testing.assert_close(a.s2_0, b.s2_0, atol=atol, rtol=1e-7)
    torch.testing.assert_close(a.mu, b.mu, atol=atol, rtol=1e-7)
    torch.testing.assert_close(a.resid, b.resid, atol=atol, rtol=1e-7)
    for st in (a, b):  # V = sum_a n_a z(a) z(a)^T + lam I in each state's basis
        Zn = st.Z * st.counts.sqrt().unsqueeze(-1)
        V = Zn.mT @ Zn + st.lam * torch.eye(st.rank, dtype=DT)
        torch.testing.assert_close(st.V, V, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("seed, as_product", [(0, False), (1, False), (0, True)])
def test_incremental_state_equals_rebuild(monkeypatch, seed, as_product):
    """Forced incremental updates (insertions, removals, pulls) equal a rebuild,
    also with every triangular solve done as a product with ``L^{-1}`` (the
    form used off the CPU for many right-hand sides)."""
    if as_product:
        from botorch_sketch.bbkb import batch_state

        original = batch_state.solve_lower
        monkeypatch.setattr(
            "botorch_sketch.bbkb.incremental_state.solve_lower",
            lambda L, B: original(L, B, as_product=True),
        )
    k = fixed_rbf_kernel(0.1)
    state, singular = None, 0
    for arms, S, counts, sums in _random_resparsifications(seed):
        if state is None:
            state = IncrementalState(
                arms, k, S, counts, sums, 1e-3, refresh_fraction=math.inf,
                reorthonormalize_every=10**9,
            )  # fmt: skip
        else:
            state.resparsify(S, counts, sums)
        ref = rebuild(arms, k, S, counts, sums, 1e-3)
        _assert_same_state(state, ref)
        singular += state.dict_size > state.rank  # duplicated arms in S
        eye = torch.eye(state.rank, dtype=DT)
        torch.testing.assert_close(state.Vinv @ state.V, eye, atol=1e-8, rtol=0)
    assert singular > 5
    assert state.stats["incremental"] > 30 and state.stats["refresh"] == 1
    assert state.stats["reset"] == 1
    # The exact reference formulas of the base class agree with the cached ones.
    torch.testing.assert_close(state.variances(), state.s2_0, atol=1e-8, rtol=1e-8)
    torch.testing.assert_close(state.covariance_with(3), ref.covariance_with(3))
    err, drift = state.check(torch.arange(10))
    assert err < 1e-8 and drift < 1e-10


def test_incremental_state_refresh_reset_and_check_paths(monkeypatch):
    import botorch_sketch.bbkb.incremental_state as state_mod

    monkeypatch.setattr(state_mod, "CHECK_WORK_RATIO", 0.0)  # check every time
    k = fixed_rbf_kernel(0.1)
    runs = {}
    for name, kw in {
        "cost": dict(),  # default: refreshes when many changes
        "periodic": dict(reorthonormalize_every=5, refresh_fraction=math.inf),
        "always_check": dict(check_rtol=-1.0, refresh_fraction=math.inf),
    }.items():
        state = None
        for arms, S, counts, sums in _random_resparsifications(3, keep=0.6):
            if state is None:
                state = IncrementalState(arms, k, S, counts, sums, 1e-3, **kw)
            else:
                state.resparsify(S, counts, sums)
        _assert_same_state(state, rebuild(arms, k, S, counts, sums, 1e-3))
        runs[name] = dict(state.stats)
    assert runs["cost"]["refresh"] > 1  # 40 % churn: cheaper to refresh
    assert runs["periodic"]["reset"] > 5
    assert runs["always_check"]["refresh"] > 1 and runs["always_check"]["checks"] > 1


def test_incremental_state_validation():
    k = fixed_rbf_kernel(0.1)
    arms, S, counts, sums = next(_random_resparsifications(0))
    state = IncrementalState(arms, k, S, counts, sums, 1e-3)
    with pytest.raises(ValueError, match="grow"):
        state.resparsify(S, counts - 1, sums)
    with pytest.raises(ValueError, match="dictionary indices"):
        state.resparsify(torch.tensor([10**6]), counts, sums)
    with pytest.raises(ValueError, match="lam"):
        IncrementalState(arms, k, S, counts, sums, 0.0)


@pytest.mark.parametrize("seed", [1, 3])
def test_incremental_state_in_float32_for_moderate_lam(seed):
    """float32 (lam = 0.05): ~1e-3 relative accuracy, as the rebuild path."""
    k = fixed_rbf_kernel(0.1)
    state = None
    for arms, S, counts, sums in _random_resparsifications(seed, steps=25, dup=False):
        a32, c32, s32 = arms.float(), counts.float(), sums.float()
        if state is None:
            state = IncrementalState(a32, k, S, c32, s32, 0.05)
        else:
            state.resparsify(S, c32, s32)
    ref = rebuild(arms, k, S, counts, sums, 0.05)
    assert state.s2_0.dtype == torch.float32 and state.stats["incremental"] > 10
    assert state.rank == ref.rank
    # Typical errors here ~1e-4 (the float32 rebuild's too): 10x margin or more.
    err = (state.s2_0.double() - ref.s2_0).abs() / (1 + ref.s2_0)
    assert err.max() < 1e-2
    err_mu = (state.mu.double() - ref.mu).abs() / (1 + ref.mu.abs())
    assert err_mu.max() < 1e-3


def test_an_incremental_update_that_loses_definiteness_is_recomputed(monkeypatch):
    """A Schur complement made indefinite by rounding (float32, a small ridge)
    makes the state recompute itself from the kernel: the same state as a
    rebuild, not a LinAlgError in the middle of a run."""
    k = fixed_rbf_kernel(0.1)
    steps = _random_resparsifications(0, dup=False)
    arms, S, counts, sums = next(steps)
    state = IncrementalState(arms, k, S, counts, sums, 1e-3, refresh_fraction=math.inf)
    arms, S, counts, sums = next(steps)
    real = torch.linalg.cholesky

    def indefinite(A, *args, **kwargs):
        raise torch.linalg.LinAlgError("the leading minor of order 1 is not p.d.")

    monkeypatch.setattr(torch.linalg, "cholesky", indefinite)
    state.resparsify(S, counts, sums)
    monkeypatch.setattr(torch.linalg, "cholesky", real)
    assert state.stats["fallback"] == 1 and state.stats["reset"] == 2
    _assert_same_state(state, rebuild(arms, k, S, counts, sums, 1e-3))
    arms, S, counts, sums = next(steps)
    state.resparsify(S, counts, sums)  # incremental again from the recomputed state
    assert state.stats["incremental"] == 1
    _assert_same_state(state, rebuild(arms, k, S, counts, sums, 1e-3))


def test_a_singular_V_is_a_clear_error():
    from botorch_sketch.bbkb.batch_state import checked_cholesky

    V = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float32)
    with pytest.raises(ValueError, match=r"float32 \(lam = 0.0001.*float64"):
        checked_cholesky(V, 1e-4)
    L = checked_cholesky(V @ V.mT + torch.eye(2), 1.0)
    torch.testing.assert_close(L @ L.mT, V @ V.mT + torch.eye(2))


def test_solve_lower_as_a_product_equals_the_triangular_solve():
    """The product form (used off the CPU for many right-hand sides) gives the
    solve to rounding (the incremental state with it: the test above)."""
    from botorch_sketch.bbkb import batch_state

    g = torch.Generator().manual_seed(0)
    Z = torch.randn(300, 12, generator=g, dtype=DT)
    L = torch.linalg.cholesky(Z.mT @ Z + 1e-3 * torch.eye(12, dtype=DT))
    B = torch.randn(12, 500, generator=g, dtype=DT)
    solve = batch_state.solve_lower(L, B)  # on the CPU: the triangular solve
    torch.testing.assert_close(
        solve, torch.linalg.solve_triangular(L, B, upper=False), atol=0, rtol=0
    )
    product = batch_state.solve_lower(L, B, as_product=True)
    torch.testing.assert_close(product, solve, atol=1e-9, rtol=1e-9)
