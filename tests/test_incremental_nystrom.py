"""Incremental Nystrom coordinates against the pseudo-inverse formula."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch import incremental_nystrom as inc
from botorch_sketch.incremental_nystrom import (
    IncrementalNystrom,
    compact_wy,
    pivoted_cholesky,
)

DT = torch.float64


def rbf(A, B, ls=0.4):
    return torch.exp(-0.5 * torch.cdist(A, B).pow(2) / ls**2)


def linear(A, B):
    return A @ B.mT


def nystrom_gram(X, S, kernel):
    """``K_XS K_S^+ K_SX``: the Gram matrix of the exact Nystrom embedding."""
    if S.numel() == 0:
        return torch.zeros(X.shape[0], X.shape[0], dtype=DT)
    K_XS = kernel(X, X[S])
    return K_XS @ torch.linalg.pinv(kernel(X[S], X[S]), hermitian=True) @ K_XS.mT


def test_pivoted_cholesky_detects_rank_and_factorises():
    g = torch.Generator().manual_seed(0)
    F = torch.randn(7, 3, generator=g, dtype=DT)
    A = F @ F.mT  # rank 3
    order, L = pivoted_cholesky(A, torch.full((7,), 1e-12, dtype=DT))
    assert order.numel() == 3 and L.shape == (7, 3)
    torch.testing.assert_close(L @ L.mT, A, atol=1e-10, rtol=0)
    R = L[order]
    assert torch.equal(R, R.tril()) and (R.diagonal() > 0).all()
    # Greedy: the first pivot has the largest diagonal.
    assert int(order[0]) == int(A.diagonal().argmax())
    with pytest.raises(ValueError, match="c x c"):
        pivoted_cholesky(A, torch.ones(3, dtype=DT))


def test_compact_wy_equals_householder_product():
    g = torch.Generator().manual_seed(1)
    G = torch.randn(9, 4, generator=g, dtype=DT)
    a, tau = torch.geqrf(G)
    Y, T = compact_wy(a, tau)
    Q = torch.eye(9, dtype=DT) - Y @ T @ Y.mT
    a_full = torch.cat([a, torch.zeros(9, 5, dtype=DT)], 1)
    tau_full = torch.cat([tau, torch.zeros(5, dtype=DT)])
    torch.testing.assert_close(Q, torch.linalg.householder_product(a_full, tau_full))
    torch.testing.assert_close(Q.mT @ Q, torch.eye(9, dtype=DT), atol=1e-14, rtol=0)
    R = (Q.mT @ G)[4:]
    assert R.abs().max() < 1e-13  # Q^T G is upper triangular


@pytest.mark.parametrize("kernel_name", ["rbf", "linear"])
def test_random_insertions_and_removals_match_the_pseudo_inverse(kernel_name):
    """Duplicated points and (linear kernel, d = 3) a singular dictionary."""
    g = torch.Generator().manual_seed(2)
    X = torch.rand(120, 3, generator=g, dtype=DT)
    X[100:110] = X[:10]  # exact duplicates
    kernel = rbf if kernel_name == "rbf" else linear
    kdiag = kernel(X, X).diagonal().clone()
    emb = IncrementalNystrom(X, kernel, kdiag, capacity=2)
    S: set[int] = set()
    for step in range(60):
        n = int(torch.randint(0, 6, (1,), generator=g))
        add = torch.randint(120, (n,), generator=g)
        cur = emb.members
        remove = cur[torch.rand(cur.numel(), generator=g) < 0.2]
        emb.update(add=add, remove=remove)
        S = (S - set(remove.tolist())) | set(add.tolist())
        assert emb.members.tolist() == sorted(S)
        assert set(emb.pivots.tolist()) <= S
        if step % 5 == 0 or step == 59:
            Sx = torch.tensor(sorted(S), dtype=torch.long)
            Q = nystrom_gram(X, Sx, kernel)
            Z = emb.Z
            torch.testing.assert_close(Z @ Z.mT, Q, atol=1e-9, rtol=0)
            torch.testing.assert_close(
                emb.residual, kdiag - Q.diagonal(), atol=1e-9, rtol=0
            )
            rank = int(torch.linalg.matrix_rank(kernel(X[Sx], X[Sx]), hermitian=True))
            if kernel_name == "linear":
                assert emb.rank == rank <= 3  # singular dictionary: rank 3
            assert emb.drift() < 1e-12
    assert emb.num_insertions > 0 and emb.num_removals > 0


def test_probes_reset_and_fused_apply():
    g = torch.Generator().manual_seed(3)
    X = torch.rand(80, 2, generator=g, dtype=DT)
    kdiag = torch.ones(80, dtype=DT)
    emb = IncrementalNystrom(X, rbf, kdiag)
    emb.reset(torch.arange(0, 30, 3))
    r = emb.rank
    Z_old = emb.Zt.clone()
    probes = torch.randn(r, 4, generator=g, dtype=DT)
    removal = emb.plan_removal(emb.pivots[:2])
    insertion = emb.plan_insertion(torch.tensor([40, 41, 41, 42]), after=removal)
    predicted = emb.new_coordinates(insertion, torch.tensor([5, 60]), after=removal)
    out = emb.apply(removal, insertion, probes)
    torch.testing.assert_close(out, probes.mT @ Z_old)  # old coordinates
    assert emb.rank == r - 2 + 3
    torch.testing.assert_close(emb.Zt[r - 2 :, [5, 60]], predicted)
    ref = IncrementalNystrom(X, rbf, kdiag)
    ref.reset(emb.members)
    torch.testing.assert_close(emb.Z @ emb.Z.mT, ref.Z @ ref.Z.mT, atol=1e-10, rtol=0)
    # Inserting a pivot again changes nothing.
    emb.reset(torch.tensor([1, 2, 3]))
    before = emb.Zt.clone()
    emb.apply_insertion(emb.plan_insertion(torch.tensor([1])))
    assert torch.equal(emb.Zt, before) and emb.members.tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="members"):
        emb.plan_removal(torch.tensor([70]))


def test_duplicate_becomes_non_pivot_and_is_retried_after_removal():
    X = torch.tensor([[0.0, 0.0], [0.5, 0.1], [0.0, 0.0]], dtype=DT)
    emb = IncrementalNystrom(X, rbf, torch.ones(3, dtype=DT))
    emb.update(add=torch.tensor([0, 1, 2]))
    assert emb.rank == 2 and emb.members.tolist() == [0, 1, 2]
    assert emb.nonpivots.numel() == 1  # 0 and 2 are the same point
    emb.update(remove=emb.pivots[emb.pivots != 1][:1])  # drop the pivot twin
    assert emb.rank == 2 and emb.nonpivots.numel() == 0  # the twin took over
    zero = torch.zeros(3, dtype=DT)
    torch.testing.assert_close(emb.residual, zero, atol=1e-12, rtol=0)


def test_numpy_and_torch_products_agree(monkeypatch):
    g = torch.Generator().manual_seed(4)
    X = torch.rand(50, 2, generator=g, dtype=DT)
    runs = []
    for backend in ("numpy", "torch"):
        monkeypatch.setattr(inc, "CPU_PRODUCT_BACKEND", backend)
        emb = IncrementalNystrom(X, rbf, torch.ones(50, dtype=DT))
        emb.update(add=torch.arange(0, 20, 2))
        emb.update(add=torch.tensor([31, 33]), remove=emb.pivots[:3])
        runs.append(emb.Z @ emb.Z.mT)
    torch.testing.assert_close(runs[0], runs[1], atol=1e-12, rtol=0)


def test_validation():
    X = torch.rand(5, 2, dtype=DT)
    with pytest.raises(ValueError, match="non-empty"):
        IncrementalNystrom(X[:0], rbf, torch.ones(0, dtype=DT))
    with pytest.raises(ValueError, match="kdiag"):
        IncrementalNystrom(X, rbf, torch.ones(4, dtype=DT))
    with pytest.raises(ValueError, match="rtol"):
        IncrementalNystrom(X, rbf, torch.ones(5, dtype=DT), rtol=0.0)
    with pytest.raises(ValueError, match="floating"):
        IncrementalNystrom(X.long(), rbf, torch.ones(5, dtype=DT))
    emb = IncrementalNystrom(X, rbf, torch.ones(5, dtype=DT))
    with pytest.raises(ValueError, match="lie in"):
        emb.plan_insertion(torch.tensor([9]))
    plan = emb.plan_insertion(torch.tensor([0, 1]))
    emb.update(add=torch.tensor([2]))
    with pytest.raises(ValueError, match="rank"):
        emb.apply(None, plan)
