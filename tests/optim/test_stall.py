"""Tests of the stall rule and of the basin share it raises in a BBKB batch."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.models import NystromGP
from botorch_sketch.optim import adaptive_batch, optimize_acqf_adaptive_batch
from botorch_sketch.optim.adaptive_batch_inputs import AdaptiveBatchInputs
from botorch_sketch.optim.stall import (
    DEFAULT_STALL_BASIN_SHARE,
    is_stalled,
    stall_window,
)

DT = torch.float64
BOUNDS = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)


def test_stall_window_is_four_batches_or_twenty_evaluations_per_dimension():
    assert stall_window(50, 6) == 200  # 4 batches of 50
    assert stall_window(1, 6) == 120  # one at a time: 20 d
    assert stall_window(8, 20) == 400
    assert stall_window(200, 1) == 800
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="batch_size must be a positive int"):
            stall_window(bad, 2)
        with pytest.raises(ValueError, match="dim must be a positive int"):
            stall_window(2, bad)


def test_is_stalled_compares_the_window_gain_with_the_noise():
    flat_after_jump = torch.tensor([0.0, 1.0, 0.5, 0.9, 0.95, 1.02], dtype=DT)
    # The last 3 raised the best of the first 3 (1.0) by 0.02 <= 0.05: stalled.
    assert is_stalled(flat_after_jump, 3, noise_sd=0.05)
    # ... but not by more than a noise sd of 0.01.
    assert not is_stalled(flat_after_jump, 3, noise_sd=0.01)
    # A gain equal to the noise sd is no gain (Eq. (1) is <=).
    equal = torch.tensor([0.0, 1.0, 1.5], dtype=DT)
    assert is_stalled(equal, 1, noise_sd=0.5)
    # Steady progress is not a stall, whatever the window.
    rising = torch.arange(20, dtype=DT)
    assert not any(is_stalled(rising, w, 0.5) for w in range(1, 20))
    # Too few evaluations to tell, or a non-finite score: not stalled.
    assert not is_stalled(torch.zeros(3, dtype=DT), 3, 1.0)
    nan = torch.tensor([0.0, float("nan"), 0.0, 0.0], dtype=DT)
    assert not is_stalled(nan, 1, 1.0)


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.zeros(4, 1), 2, 0.1), "scores must be one-dimensional"),
        ((torch.zeros(4), 0, 0.1), "window must be a positive int"),
        ((torch.zeros(4), True, 0.1), "window must be a positive int"),
        ((torch.zeros(4), 2, -0.1), "noise_sd must be finite and >= 0"),
        ((torch.zeros(4), 2, float("inf")), "noise_sd must be finite and >= 0"),
    ],
)
def test_is_stalled_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        is_stalled(*args)


def _ordered_model(stalled: bool) -> NystromGP:
    """Two bumps, 60 points (window max(4 x 8, 20 x 2) = 40); the best point is
    the first one added (stalled) or the last one (improving)."""
    g = torch.Generator().manual_seed(3)
    X = torch.rand(60, 2, generator=g, dtype=DT)

    def bump(c):
        return torch.exp(-((X - torch.tensor(c, dtype=DT)) ** 2).sum(-1) / 0.02)

    Y = bump([0.25, 0.25]) + 0.7 * bump([0.75, 0.75])
    order = torch.argsort(Y, descending=stalled)
    X, Y = X[order], Y[order].unsqueeze(-1)
    m = NystromGP(X, Y, seed=0, outcome_transform=None, exact_max_n=0)
    m.covar_module.lengthscale = 0.12
    m.likelihood.noise = 1e-4
    m.eval()
    return m


def _fill_shares(model, monkeypatch, batch: int = 8, **kwargs) -> list[float]:
    """The basin shares the batch's Thompson fill was called with."""
    seen: list[float] = []
    fill = adaptive_batch.thompson_fill_points

    def spy(*args, **kw):
        seen.append(kw["basin_share"])
        return fill(*args, **kw)

    monkeypatch.setattr(adaptive_batch, "thompson_fill_points", spy)
    got, _ = optimize_acqf_adaptive_batch(
        model, BOUNDS, "global", 0.0, batch, min_batch_size=batch, seed=0,
        num_restarts=2, raw_samples=32, thompson_fill=1.0, **kwargs,
    )  # fmt: skip
    assert got.shape == (batch, 2)
    return seen


def test_a_stalled_run_raises_the_fills_basin_share(monkeypatch):
    """The fill of a run whose last 40 evaluations brought no gain gets
    ``stall_basin_share``; an improving run, ``stall_basin_share=None``, a share
    already as large, or ``basin_share=0`` keep ``basin_share``."""
    stalled, improving = _ordered_model(True), _ordered_model(False)
    assert _fill_shares(stalled, monkeypatch) == [DEFAULT_STALL_BASIN_SHARE]
    assert _fill_shares(improving, monkeypatch) == [0.25]
    assert _fill_shares(stalled, monkeypatch, stall_basin_share=None) == [0.25]
    assert _fill_shares(stalled, monkeypatch, basin_share=0.75) == [0.75]
    assert _fill_shares(stalled, monkeypatch, basin_share=0.0) == [0.0]
    # Minimising: the "best" is the smallest value, so the stalled order of a
    # maximiser is an improving one here.
    assert _fill_shares(stalled, monkeypatch, maximize=False) == [0.25]


def test_a_fill_with_no_more_basin_points_at_the_raised_share_keeps_it(monkeypatch):
    """A fill of at most 3 points has one basin point at 0.25 and at 0.5: not
    raised (batches of 4: the greedy part takes 1-3 points)."""
    assert _fill_shares(_ordered_model(True), monkeypatch, batch=4) == [0.25]


def test_stall_basin_share_is_validated():
    model = _ordered_model(True)
    for bad in (-0.1, 1.5, True, "half"):
        with pytest.raises(ValueError, match="stall_basin_share must be a number"):
            AdaptiveBatchInputs(model, BOUNDS, "global", 0.0, 4, stall_basin_share=bad)
