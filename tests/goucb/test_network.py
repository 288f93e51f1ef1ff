"""Tests for GO-UCB networks, parameter layouts and torch.func Jacobians."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from botorch_sketch.goucb.network import (
    ParameterLayout,
    is_sigmoid_mlp,
    network_values,
    paper_network,
    realizable_network,
    reset_parameters,
    rowwise_values_and_jacobian,
    values_and_jacobian,
)

DT = torch.float64


def test_paper_network_size_and_seeding():
    net = paper_network(20, seed=0)
    assert ParameterLayout.from_module(net).numel == 25 * 20 + 51 == 551
    same = paper_network(20, seed=0)
    other = paper_network(20, seed=1)
    for a, b, c in zip(
        net.parameters(), same.parameters(), other.parameters(), strict=True
    ):
        assert torch.equal(a, b) and not torch.equal(a, c)
        assert a.dtype == DT
    state = torch.random.get_rng_state()
    reset_parameters(net, 3)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched


def test_realizable_network_is_f1():
    net = realizable_network(20)
    X = 10 * torch.rand(7, 20, dtype=DT) - 5
    expected = 25 * torch.sigmoid(1 + X.sum(-1, keepdim=True)) + 1
    torch.testing.assert_close(net(X), expected)


def test_jacobian_matches_closed_form_and_autograd():
    d = 3
    net = paper_network(d, width=4, seed=2)
    layout = ParameterLayout.from_module(net)
    w = layout.flatten(net)
    X = torch.randn(5, d, dtype=DT)
    f, J = values_and_jacobian(net, layout, w, X, use_closed_form=False)
    torch.testing.assert_close(f, net(X).squeeze(-1))
    assert is_sigmoid_mlp(net, layout)
    f_cf, J_cf = values_and_jacobian(net, layout, w, X)  # closed-form fast path
    torch.testing.assert_close(f_cf, f)
    torch.testing.assert_close(J_cf, J)
    # Closed form (spec Sec. 6.1): a = w2 * h * (1 - h).
    W1, b1, w2, b2 = (p.detach() for p in net.parameters())
    h = torch.sigmoid(X @ W1.T + b1)
    a = w2.squeeze(0) * h * (1 - h)
    closed = torch.cat(
        [
            (a.unsqueeze(-1) * X.unsqueeze(-2)).reshape(5, -1),
            a,
            h,
            torch.ones(5, 1, dtype=DT),
        ],
        dim=-1,
    )
    torch.testing.assert_close(J, closed)
    for i in range(5):
        net.zero_grad()
        net(X[i : i + 1]).sum().backward()
        ref = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
        torch.testing.assert_close(J[i], ref)


def test_jacobian_is_differentiable_in_x():
    net = paper_network(2, width=3, seed=0)
    layout = ParameterLayout.from_module(net)
    w = layout.flatten(net)
    X = torch.randn(3, 2, dtype=DT, requires_grad=True)
    for closed in (False, True):
        assert torch.autograd.gradcheck(
            lambda Z, c=closed: values_and_jacobian(net, layout, w, Z, c)[1], (X,)
        )
    assert not is_sigmoid_mlp(
        nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)), layout
    )


def test_layout_roundtrip_and_load():
    net = paper_network(3, width=2, seed=0)
    layout = ParameterLayout.from_module(net)
    w = torch.arange(layout.numel, dtype=DT)
    parts = layout.unflatten(w)
    assert [tuple(v.shape) for v in parts.values()] == [(2, 3), (2,), (1, 2), (1,)]
    layout.load(net, w)
    torch.testing.assert_close(layout.flatten(net), w)
    with pytest.raises(ValueError, match="shape"):
        layout.unflatten(w[:-1])
    f, J = values_and_jacobian(net, layout, w, torch.zeros(0, 3, dtype=DT))
    assert f.shape == (0,) and J.shape == (0, layout.numel)


class _NoParams(nn.Module):
    def forward(self, x):
        return x.sum(-1, keepdim=True)


def test_bad_networks():
    with pytest.raises(ValueError, match="no trainable parameters"):
        ParameterLayout.from_module(_NoParams())
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ParameterLayout.from_module(lambda x: x)
    wide = nn.Linear(3, 2).double()
    layout = ParameterLayout.from_module(wide)
    with pytest.raises(ValueError, match="N x 1"):
        network_values(wide, layout, layout.flatten(wide), torch.zeros(4, 3, dtype=DT))
    with pytest.raises(ValueError, match="positive int"):
        paper_network(0)


def test_rowwise_jacobian_matches_per_row_evaluation():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(4, 2, dtype=DT, generator=g)
    tanh = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)).double()
    for net in (paper_network(2, width=3, seed=1), tanh):
        layout = ParameterLayout.from_module(net)
        W = torch.randn(4, layout.numel, dtype=DT, generator=g)
        f, J = rowwise_values_and_jacobian(net, layout, W, X)
        for i in range(4):
            fi, Ji = values_and_jacobian(net, layout, W[i], X[i : i + 1], False)
            torch.testing.assert_close(f[i], fi[0])
            torch.testing.assert_close(J[i], Ji[0])
