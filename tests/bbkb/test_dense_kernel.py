"""The engine's kernel: any gpytorch kernel, evaluated densely and frozen."""

from __future__ import annotations

import math

import pytest
import torch
from gpytorch.kernels import Kernel, MaternKernel, RBFKernel, ScaleKernel

from botorch_sketch.bbkb import (
    DenseKernel,
    IncrementalState,
    as_dense_kernel,
    fixed_rbf_kernel,
    rebuild,
)
from botorch_sketch.bbkb.state import KernelColumnCache
from botorch_sketch.loops import noisy_oracle, run_bbkb

from .conftest import DT


def legacy_rbf(X1, X2, lengthscale, outputscale=1.0):
    """The engine's hand-written kernel before gpytorch kernels (bbkb/kernels.py)."""
    sq = (
        X1.pow(2).sum(-1).unsqueeze(-1)
        + X2.pow(2).sum(-1).unsqueeze(-2)
        - 2.0 * X1 @ X2.mT
    ).clamp_min(0.0)
    return outputscale * torch.exp(-0.5 / lengthscale**2 * sq)


class LegacyRBF(Kernel):
    """The legacy callable as a gpytorch kernel, to run the engine with it."""

    def __init__(self, lengthscale: float) -> None:
        super().__init__()
        self.ls = lengthscale

    def forward(self, x1, x2, diag=False, **params):
        if diag:
            return torch.ones(x1.shape[:-1], dtype=x1.dtype)
        return legacy_rbf(x1, x2, self.ls)


def problem(A=300, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(A, d, generator=g, dtype=DT)
    f = torch.exp(-((X - 0.6) ** 2).sum(-1) / 0.1)
    return X, f


def test_fixed_rbf_kernel_is_the_sklearn_convention():
    g = torch.Generator().manual_seed(0)
    X1, X2 = torch.randn(7, 3, generator=g, dtype=DT), torch.randn(5, 3, dtype=DT)
    for ls, s in [(0.3, 1.0), (12.5, 1.0), (2.0, 0.7)]:
        k = fixed_rbf_kernel(ls, s)
        dense = DenseKernel(k)
        torch.testing.assert_close(
            dense(X1, X2), legacy_rbf(X1, X2, ls, s), rtol=1e-13, atol=1e-15
        )
        torch.testing.assert_close(dense.diag(X1), torch.full((7,), s, dtype=DT))
        assert not any(p.requires_grad for p in k.parameters())
        assert math.isclose(float(k.base_kernel.lengthscale), ls, rel_tol=1e-13)
    with pytest.raises(ValueError, match="lengthscale"):
        fixed_rbf_kernel(0.0)
    with pytest.raises(ValueError, match="outputscale"):
        fixed_rbf_kernel(1.0, outputscale=math.nan)


@pytest.mark.outcome  # exact equality of choices between two kernel codes
@pytest.mark.parametrize("rule", ["global", "bkb"])
def test_gpytorch_kernel_makes_the_legacy_callables_choices(rule):
    """float64: the gpytorch RBF path chooses exactly what the old callable chose."""
    X, f = problem(A=300, d=3, seed=4)
    runs = []
    for kernel in (LegacyRBF(0.25), fixed_rbf_kernel(0.25)):
        oracle = noisy_oracle(f, 0.01, torch.Generator().manual_seed(7))
        runs.append(
            run_bbkb(
                X,
                oracle,
                120,
                kernel,
                1e-3,
                rule=rule,
                seed=3,
                f_true=f,
                progress=False,
            )  # fmt: skip
        )
    old, new = runs
    assert old.arms.tolist() == new.arms.tolist()
    assert torch.equal(old.batch_sizes, new.batch_sizes)
    assert torch.equal(old.dict_size, new.dict_size)
    torch.testing.assert_close(new.final_state.s2_0, old.final_state.s2_0)


def _ard_matern(d: int) -> ScaleKernel:
    k = ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=d)).to(DT)
    k.base_kernel.lengthscale = torch.tensor([0.2, 0.5, 1.5], dtype=DT)[:d]
    k.outputscale = torch.tensor(1.7, dtype=DT)  # a float would be rounded to f32
    return k


def _exact_gp(K_AP, K_PP, kdiag, y, lam):
    """Exact GP posterior mean and variance (RLS units) from dense kernel blocks."""
    L = torch.linalg.cholesky(K_PP + lam * torch.eye(K_PP.shape[0], dtype=DT))
    V = torch.cholesky_solve(K_AP.mT, L)
    return K_AP @ torch.cholesky_solve(y.unsqueeze(-1), L).squeeze(-1), (
        kdiag - (K_AP * V.mT).sum(-1)
    ) / lam


def test_ard_matern_states_equal_the_exact_posterior():
    """A kernel the hand-written RBF could not express: with every pulled arm in
    the dictionary, both state paths give the exact GP posterior of that kernel."""
    g = torch.Generator().manual_seed(1)
    A, d, lam = 200, 3, 1e-2
    X = torch.rand(A, d, generator=g, dtype=DT)
    kernel = _ard_matern(d)
    pulls = torch.randint(A, (40,), generator=g)
    y = torch.randn(40, generator=g, dtype=DT)
    counts = torch.zeros(A, dtype=DT).index_add_(0, pulls, torch.ones(40, dtype=DT))
    sums = torch.zeros(A, dtype=DT).index_add_(0, pulls, y)
    S = pulls.unique()
    with torch.no_grad():
        K_AP, K_PP = kernel(X, X[pulls]).to_dense(), kernel(X[pulls]).to_dense()
    mu, s2 = _exact_gp(K_AP, K_PP, torch.full((A,), 1.7, dtype=DT), y, lam)
    for state in (
        rebuild(X, kernel, S, counts, sums, lam),
        IncrementalState(X, kernel, S, counts, sums, lam),
    ):
        torch.testing.assert_close(state.mu, mu, rtol=1e-7, atol=1e-8)
        torch.testing.assert_close(state.s2_0, s2, rtol=1e-7, atol=1e-8)


def test_run_bbkb_with_ard_matern_batch_variances_are_exact():
    X, f = problem(A=150, d=3, seed=5)
    kernel, lam = _ard_matern(3), 1e-2
    oracle = noisy_oracle(f, 0.01, torch.Generator().manual_seed(2))
    res = run_bbkb(
        X,
        oracle,
        60,
        kernel,
        lam,
        C=10.0,
        q_bar=1e12,
        beta=0.5,
        seed=0,
        progress=False,
    )
    state = res.final_state
    n_before = int(res.batch_sizes[:-1].sum())
    pulled = res.arms[:n_before]
    with torch.no_grad():
        K_AP, K_PP = kernel(X, X[pulled]).to_dense(), kernel(X[pulled]).to_dense()
    mu, s2 = _exact_gp(K_AP, K_PP, state.kdiag, res.rewards[:n_before], lam)
    assert res.batch_sizes.max() > 1
    torch.testing.assert_close(state.s2_0, s2, rtol=1e-7, atol=1e-8)
    torch.testing.assert_close(state.mu, mu, rtol=1e-7, atol=1e-8)


def test_dense_kernel_snapshots_casts_and_validates():
    kernel = ScaleKernel(RBFKernel(ard_num_dims=2))  # float32, trainable
    X = torch.rand(6, 2, dtype=DT)
    dense = as_dense_kernel(kernel, X)
    assert dense.module.base_kernel.raw_lengthscale.dtype == DT
    assert dense(X, X[:2]).dtype == DT and dense(X, X[:2]).shape == (6, 2)
    before = dense(X, X)
    kernel.base_kernel.lengthscale = 3.0  # the caller refits its module later
    torch.testing.assert_close(dense(X, X), before, rtol=0, atol=0)
    assert kernel.base_kernel.raw_lengthscale.requires_grad  # original untouched
    assert as_dense_kernel(dense, X) is dense
    assert as_dense_kernel(dense, X.float()).dtype == torch.float32
    with pytest.raises(TypeError, match="gpytorch.kernels.Kernel"):
        as_dense_kernel(lambda a, b: a @ b.mT, X)
    with pytest.raises(ValueError, match="batch"):
        DenseKernel(RBFKernel(batch_shape=torch.Size([2])))
    cache = KernelColumnCache(X, fixed_rbf_kernel(1.0))
    z = torch.zeros(6, dtype=DT)
    with pytest.raises(ValueError, match="cache.kernel"):
        rebuild(X, fixed_rbf_kernel(1.0), torch.tensor([0]), z, z, 0.1, cache=cache)
    state = rebuild(X, cache.kernel, torch.tensor([0]), z, z, 0.1, cache=cache)
    assert state.kernel is cache.kernel


@pytest.mark.parametrize(
    "make",
    [
        lambda: fixed_rbf_kernel(0.4, 1.7),
        lambda: RBFKernel(ard_num_dims=3).to(DT),
        lambda: ScaleKernel(RBFKernel(ard_num_dims=3)).to(DT),
    ],
)
def test_gaussian_kernels_take_the_fast_path_bit_for_bit(make):
    from botorch_sketch.bbkb.dense_kernel import SquaredExponential

    kernel = make()
    with torch.no_grad():
        for p in kernel.parameters():
            p.add_(0.3)
    dense = DenseKernel(kernel)
    assert isinstance(dense._fast, SquaredExponential)
    X = torch.randn(300, 3, generator=torch.Generator().manual_seed(0), dtype=DT)
    with torch.no_grad():
        for X1, X2 in ((X[:7], X), (X[5:20], X[5:20]), (X[:1], X[:1])):
            K = dense(X1, X2)
            assert torch.equal(K, dense.module(X1, X2).to_dense())
        assert torch.equal(dense(X[5:20], X[5:20]).diagonal(), dense.diag(X[5:20]))


def test_other_kernels_use_gpytorch():
    dense = DenseKernel(MaternKernel(nu=2.5).to(DT))
    assert dense._fast is None
    batched = RBFKernel(batch_shape=torch.Size([2])).to(DT)
    from botorch_sketch.bbkb.dense_kernel import SquaredExponential

    assert (
        SquaredExponential(batched, None)(
            torch.zeros(2, 1, dtype=DT), torch.zeros(3, 1, dtype=DT)
        )
        is None
    )
