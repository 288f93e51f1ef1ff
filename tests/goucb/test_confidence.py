"""Tests for the GO-UCB confidence set, the ellipsoid maximum and beta schedules."""

from __future__ import annotations

import math

import pytest
import torch

from botorch_sketch.goucb.confidence import (
    ConstantBeta,
    GradientConfidenceSet,
    OFULBeta,
    PaperBeta,
    TheoryBeta,
    as_beta_schedule,
    ellipsoid_argmax,
    paper_lambda,
    ridge_estimate,
    sherman_morrison,
)

DT = torch.float64


def random_chain(d_w=7, t=5, lam=0.7, seed=0):
    """A confidence set after ``t`` updates, each linearized at the current w_hat.

    Returns the set and the per-step (g, f, y, w_hat_i) used, for references.
    """
    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(d_w, generator=g, dtype=DT)
    cs = GradientConfidenceSet.initial(w0, lam)
    steps = []
    for _ in range(t):
        gi = torch.randn(d_w, generator=g, dtype=DT)
        fi, yi = torch.randn(2, generator=g, dtype=DT)
        steps.append((gi, fi, yi, cs.w_hat.clone()))
        cs = cs.update(gi, fi, yi)
    return cs, steps


def test_sherman_morrison_equals_inverse():
    g = torch.Generator().manual_seed(1)
    B = torch.randn(6, 6, generator=g, dtype=DT)
    A = B @ B.T + torch.eye(6, dtype=DT)
    u = torch.randn(6, generator=g, dtype=DT)
    out = sherman_morrison(torch.linalg.inv(A), u)
    torch.testing.assert_close(out, torch.linalg.inv(A + torch.outer(u, u)))
    torch.testing.assert_close(out, out.T, rtol=0, atol=0)


def test_updates_equal_recompute_and_eq5():
    lam = 0.7
    cs, steps = random_chain(lam=lam)
    G = torch.stack([s[0] for s in steps])
    d_w = G.shape[1]
    sigma = lam * torch.eye(d_w, dtype=DT) + G.T @ G
    # Eq. (3) and the Sherman-Morrison inverse against a fresh inverse.
    torch.testing.assert_close(cs.sigma, sigma)
    torch.testing.assert_close(cs.sigma_inv, torch.linalg.inv(sigma))
    torch.testing.assert_close(cs.recomputed().sigma_inv, torch.linalg.inv(sigma))
    # Eq. (5) as printed (with w_hat_i the estimate at step i).
    rhs = sum(gi * (gi @ wi + yi - fi) for gi, fi, yi, wi in steps) + lam * cs.w0
    torch.testing.assert_close(cs.w_hat, torch.linalg.solve(sigma, rhs))
    # Eq. (4) by least squares on [G; sqrt(lam) I] and the dual form.
    z = torch.stack([gi @ wi + yi - fi for gi, fi, yi, wi in steps])
    A = torch.cat([G, math.sqrt(lam) * torch.eye(d_w, dtype=DT)])
    b = torch.cat([z, math.sqrt(lam) * cs.w0])
    torch.testing.assert_close(cs.w_hat, torch.linalg.lstsq(A, b).solution)
    torch.testing.assert_close(cs.w_hat, ridge_estimate(G, cs.r, cs.w0, lam))


def test_initial_round_and_linearization_point():
    w0 = torch.tensor([1.0, -2.0], dtype=DT)
    cs = GradientConfidenceSet.initial(w0, 2.0)
    torch.testing.assert_close(cs.w_hat, w0)
    torch.testing.assert_close(cs.sigma_inv, torch.eye(2, dtype=DT) / 2)
    assert cs.num_updates == 0
    g = torch.tensor([1.0, 0.0], dtype=DT)
    at = torch.tensor([3.0, 0.0], dtype=DT)
    new = cs.update(g, 0.5, 1.5, at=at)
    # r = y - f + g^T (at - w0) = 1 + 2 = 3
    assert float(new.r[0]) == pytest.approx(3.0)
    assert cs.num_updates == 0 and new.num_updates == 1  # immutable


def test_lemma_c4_and_c6_identities():
    cs, _ = random_chain(d_w=5, t=8, lam=0.3, seed=3)
    d_w, lam = cs.d_w, cs.lam
    logdet = torch.logdet(cs.sigma)
    assert cs.log_det_ratio == pytest.approx(float(logdet - d_w * math.log(lam)))
    lev = (cs.G @ cs.sigma_inv * cs.G).sum(-1)
    assert bool((lev < 1).all())
    assert float(lev.sum()) == pytest.approx(float(d_w - lam * cs.sigma_inv.trace()))
    assert float(lev.sum()) <= 2 * cs.log_det_ratio


def test_ellipsoid_argmax_is_the_maximum():
    cs, _ = random_chain(d_w=6, t=4, seed=5)
    beta = 2.5
    g = torch.randn(3, 6, dtype=DT, generator=torch.Generator().manual_seed(0))
    value, v = ellipsoid_argmax(g, cs.sigma_inv, beta)
    torch.testing.assert_close(
        value, math.sqrt(beta) * (g @ cs.sigma_inv * g).sum(-1).sqrt()
    )
    torch.testing.assert_close((g * v).sum(-1), value)  # attained
    # on the boundary of the ellipsoid
    torch.testing.assert_close(
        (v @ cs.sigma * v).sum(-1), torch.full((3,), beta, dtype=DT)
    )
    # random boundary points never do better
    L = torch.linalg.cholesky(cs.sigma_inv)
    u = torch.randn(2000, 6, dtype=DT, generator=torch.Generator().manual_seed(1))
    u = u / u.norm(dim=-1, keepdim=True)
    V = math.sqrt(beta) * u @ L.T
    assert bool(((g @ V.T).max(-1).values <= value + 1e-10).all())
    zero_value, zero_v = ellipsoid_argmax(torch.zeros(6, dtype=DT), cs.sigma_inv, beta)
    assert float(zero_value) == 0.0 and bool((zero_v == 0).all())


def test_beta_schedules():
    cs, _ = random_chain(d_w=4, t=3, lam=2.0)
    assert ConstantBeta(3.0)(5, cs) == 3.0
    assert PaperBeta(T=25, F=26.0)(5, cs) == pytest.approx(4**3 * 26.0**4 * 5 / 25)
    th = TheoryBeta(T=10, sigma=0.1, mu=0.5, c0=2.0)
    assert th(5, cs) == pytest.approx(2.0 * (4 * 0.01 + 64 / 0.25 * 1.5))
    oful = OFULBeta(sigma=0.5, delta=0.1, S=2.0)
    expected = (
        0.5 * math.sqrt(cs.log_det_ratio + 2 * math.log(10)) + math.sqrt(2.0) * 2.0
    ) ** 2
    assert oful(1, cs) == pytest.approx(expected)
    assert as_beta_schedule(2).beta == 2.0
    assert as_beta_schedule(oful) is oful
    assert paper_lambda(25) == pytest.approx(5 * math.log(25) ** 2)
    assert paper_lambda(1) == 1.0


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConstantBeta(0.0),
        lambda: ConstantBeta(float("nan")),
        lambda: PaperBeta(T=0, F=1.0),
        lambda: PaperBeta(T=5, F=-1.0),
        lambda: TheoryBeta(T=5, sigma=1.0, mu=0.0),
        lambda: OFULBeta(delta=1.5),
        lambda: paper_lambda(0),
        lambda: GradientConfidenceSet.initial(torch.zeros(3, dtype=DT), 0.0),
        lambda: GradientConfidenceSet.initial(torch.full((3,), float("nan")), 1.0),
    ],
)
def test_bad_options_raise(make):
    with pytest.raises(ValueError):
        make()


def test_bad_beta_type_and_bad_updates():
    with pytest.raises(TypeError, match="beta"):
        as_beta_schedule("large")
    with pytest.raises(TypeError, match="beta"):
        as_beta_schedule(True)
    cs = GradientConfidenceSet.initial(torch.zeros(3, dtype=DT), 1.0)
    with pytest.raises(ValueError, match="shape"):
        cs.update(torch.zeros(4, dtype=DT), 0.0, 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        cs.update(torch.ones(3, dtype=DT), 0.0, float("nan"))
    assert cs.num_updates == 0
