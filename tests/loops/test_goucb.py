"""Tests for the two-phase GO-UCB loop."""

from __future__ import annotations

import math

import pytest
import torch

from botorch_sketch.goucb.confidence import paper_lambda
from botorch_sketch.goucb.network import paper_network
from botorch_sketch.goucb.oracle import OracleOptions
from botorch_sketch.loops.goucb import run_goucb, uniform_design
from botorch_sketch.models.goucb import GOUCBModel

DT = torch.float64
FAST = OracleOptions(steps=150, lr=3e-2)
BOUNDS = torch.tensor([[-1.0, 0.0], [1.0, 2.0]], dtype=DT)


def objective(X):
    return -((X - 0.3) ** 2).sum(-1, keepdim=True)


def run(**kwargs):
    opts = dict(
        T=4,
        network=paper_network(2, width=4, seed=0),
        oracle=FAST,
        seed=0,
        num_restarts=2,
        raw_samples=16,
        maxiter=15,
    )
    opts.update(kwargs)
    T = opts.pop("T")
    return run_goucb(objective, BOUNDS, T, **opts)


def test_run_is_seeded_and_follows_the_paper_schedule():
    seen = []
    a = run(callback=lambda t, x, y: seen.append(t))
    b = run()
    # equal up to round-off (SIMD kernels may round differently by memory alignment)
    torch.testing.assert_close(a.X, b.X, rtol=0, atol=1e-10)
    assert a.n_init == 2 == math.ceil(math.sqrt(4))
    assert a.X.shape == (6, 2) and a.Y.shape == (6, 1) and seen == list(range(1, 7))
    assert bool(((a.X >= BOUNDS[0]) & (a.X <= BOUNDS[1])).all())
    torch.testing.assert_close(a.Y, objective(a.X))
    d_w = a.model._layout.numel
    F = float(a.Y[:2].abs().max())
    expected = [d_w**3 * F**4 * t / 4 for t in range(1, 5)]
    assert a.betas == pytest.approx(expected)
    assert a.model.lambda_ == pytest.approx(paper_lambda(4))
    c = run(seed=1)
    assert not torch.equal(a.X, c.X)


def test_online_run_equals_a_rebuild_from_data():
    # What Ax would do: rebuild the model from all rows, in order, with n_init.
    res = run(beta=2.0, n=3, T=3)
    rebuilt = GOUCBModel(
        res.X,
        res.Y,
        network=paper_network(2, width=4, seed=0),
        n_init=3,
        lambda_=paper_lambda(3),
        oracle=FAST,
        outcome_transform=None,
        seed=0,
    )
    torch.testing.assert_close(rebuilt.w_hat, res.model.w_hat)
    torch.testing.assert_close(
        rebuilt.confidence_set.sigma_inv, res.model.confidence_set.sigma_inv
    )
    assert res.betas == [2.0] * 3


def test_exact_mode_runs():
    res = run(exact=True, T=2, beta=0.5)
    assert res.X.shape == (4, 2)


def test_uniform_design_and_bad_input():
    g = torch.Generator().manual_seed(0)
    X = uniform_design(BOUNDS, 100, g)
    assert bool(((X >= BOUNDS[0]) & (X <= BOUNDS[1])).all())
    with pytest.raises(ValueError, match="T"):
        run(T=0)
    with pytest.raises(ValueError, match="bounds"):
        run_goucb(objective, BOUNDS.flip(0), 3)
    with pytest.raises(ValueError, match="beta"):
        run(beta="theory")
    with pytest.raises(ValueError, match="n must"):
        run(n=0)
