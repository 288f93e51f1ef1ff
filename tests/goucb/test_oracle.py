"""Tests for the GO-UCB Phase I regression oracle."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.goucb.network import ParameterLayout, network_values, paper_network
from botorch_sketch.goucb.oracle import (
    PAPER_ORACLE,
    OracleOptions,
    fit_regression_oracle,
)

DT = torch.float64
FAST = OracleOptions(steps=300, lr=3e-2)


def data(n=12, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=DT)
    return X, torch.sin(3 * X).sum(-1)


def mse(net, w, X, y):
    layout = ParameterLayout.from_module(net)
    return float((network_values(net, layout, w, X) - y).pow(2).mean())


def test_oracle_fits_and_is_seeded():
    X, y = data()
    net = paper_network(2, width=8, seed=0)
    before = [p.detach().clone() for p in net.parameters()]
    w = fit_regression_oracle(net, X, y, options=FAST, seed=4, use_cache=False)
    init = ParameterLayout.from_module(net).flatten(net)
    assert mse(net, w, X, y) < 0.05 * mse(net, init, X, y)
    again = fit_regression_oracle(net, X, y, options=FAST, seed=4, use_cache=False)
    torch.testing.assert_close(w, again, rtol=0, atol=0)
    other = fit_regression_oracle(net, X, y, options=FAST, seed=5, use_cache=False)
    assert not torch.equal(w, other)
    for p, q in zip(net.parameters(), before, strict=True):  # module untouched
        assert torch.equal(p, q)


def test_cache_returns_the_same_estimate_and_restarts_keep_the_best():
    X, y = data(seed=1)
    net = paper_network(2, width=8, seed=0)
    w = fit_regression_oracle(net, X, y, options=FAST, seed=0)
    cached = fit_regression_oracle(net, X, y, options=FAST, seed=0)
    torch.testing.assert_close(w, cached, rtol=0, atol=0)
    short = OracleOptions(steps=30, lr=3e-2)
    single = fit_regression_oracle(net, X, y, options=short, seed=0, use_cache=False)
    multi = fit_regression_oracle(
        net,
        X,
        y,
        options=OracleOptions(steps=30, lr=3e-2, restarts=3),
        seed=0,
        use_cache=False,
    )
    assert mse(net, multi, X, y) <= mse(net, single, X, y)


def test_paper_preset_barely_moves_and_lbfgs_runs():
    X, y = data(seed=2)
    net = paper_network(2, width=4, seed=0)
    init = ParameterLayout.from_module(net).flatten(net)
    w = fit_regression_oracle(net, X, y, options=PAPER_ORACLE, seed=0, use_cache=False)
    assert float((w - init).abs().max()) < 1e-6  # lr 1e-11 (Appendix D.1)
    lb = fit_regression_oracle(
        net,
        X,
        y,
        options=OracleOptions(optimizer="lbfgs", steps=50, lr=1.0),
        use_cache=False,
    )
    assert mse(net, lb, X, y) < mse(net, w, X, y)


def test_bad_input():
    X, y = data()
    net = paper_network(2, width=4, seed=0)
    with pytest.raises(ValueError, match="n >= 1"):
        fit_regression_oracle(net, X[:0], y[:0])
    with pytest.raises(ValueError, match="NaN"):
        fit_regression_oracle(net, X, torch.full_like(y, float("nan")))
    with pytest.raises(ValueError, match="targets"):
        fit_regression_oracle(net, X, y[:-1])
    with pytest.raises(ValueError, match="diverged"):
        fit_regression_oracle(
            net,
            X,
            1e6 * y,
            options=OracleOptions(optimizer="sgd", steps=50, lr=1e6),
            use_cache=False,
        )
    for kwargs in ({"optimizer": "newton"}, {"steps": 0}, {"lr": 0.0}, {"restarts": 0}):
        with pytest.raises(ValueError):
            OracleOptions(**kwargs)
