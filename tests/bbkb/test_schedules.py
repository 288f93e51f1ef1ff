"""Beta / alpha schedules (BBKB Thm. 2, authors' code, fixed) and unit conversions."""

from __future__ import annotations

import math

import pytest
import torch

import botorch_sketch.bbkb.engine as engine_mod
from botorch_sketch.bbkb import (
    FixedSchedule,
    PaperSchedule,
    ReferenceCodeSchedule,
    alpha_from_botorch_beta,
    botorch_beta,
    fixed_rbf_kernel,
    make_schedule,
)
from botorch_sketch.bbkb.schedules import exact_logdet
from botorch_sketch.loops import noisy_oracle, run_bbkb

from .conftest import DT, make_state


def test_paper_formula_and_incremental_accumulation():
    state, pulls, _ = make_state(seed=0)
    s = PaperSchedule(xi=0.1, delta=0.01, F=2.0, lam=state.lam, C=3.0)
    s.initialize(state, pulls)
    init = exact_logdet(state.arms[pulls], state.kernel, state.lam)
    K = state.kernel(state.arms[pulls], state.arms[pulls])
    ref = torch.logdet(torch.eye(len(pulls), dtype=DT) + K / state.lam)
    assert init == pytest.approx(float(ref), rel=1e-10)
    assert s.logdet_acc == pytest.approx(init)
    b1, b2 = state.s2_0[:5], state.s2_0[10:30]
    s.update(b1)
    s.update(b2)
    acc = init + float(torch.log1p(3 * b1).sum() + torch.log1p(3 * b2).sum())
    assert s.logdet_acc == pytest.approx(acc, rel=1e-12)
    beta = (
        2 * 0.1 * math.sqrt(acc + math.log(100))
        + (1 + math.sqrt(2)) * math.sqrt(state.lam) * 2.0
    )
    assert s.beta == pytest.approx(beta, rel=1e-12)
    assert s.alpha == pytest.approx(3.0 * beta, rel=1e-12)
    s2 = PaperSchedule(0.1, 0.01, 2.0, state.lam, 4.0, multiplier="sqrt_C")
    s2.logdet_acc = s.logdet_acc
    assert s2.alpha == pytest.approx(2.0 * beta, rel=1e-12)


def test_reference_code_and_fixed():
    state, pulls, _ = make_state(seed=1)
    r = ReferenceCodeSchedule(xi=0.1, delta=0.01, F=1.0, lam=state.lam, C=2.0)
    r.initialize(state, pulls)
    init = float((state.counts * state.s2_0).sum()) * math.log(len(pulls))
    assert r.logdet_acc == pytest.approx(init, rel=1e-12)
    # First beta without C (BKB.initialize of the authors' code), then with C.
    first = math.sqrt(state.lam) + math.sqrt(0.01 * (init + math.log(100)))
    assert r.beta == pytest.approx(first, rel=1e-12)
    r.update(state.s2_0[:4])
    acc = init + float(torch.log1p(state.s2_0[:4]).sum())
    beta = math.sqrt(state.lam) + math.sqrt(0.01 * (2.0 * acc + math.log(100)))
    assert r.beta == pytest.approx(beta, rel=1e-12) and r.alpha == r.beta
    f = make_schedule(0.7, C=2.0, lam=0.1, xi=0.1, delta=0.1)
    assert isinstance(f, FixedSchedule) and f.alpha == pytest.approx(1.4)
    f.update(state.s2_0)
    assert f.beta == 0.7


def test_botorch_units_roundtrip():
    # mu + alpha sigma~ == mu + sqrt(beta_bt) sigma_GP, sigma~ = sigma_GP / sqrt(lam)
    lam, alpha, sigma_gp = 1e-4, 0.3, 0.002
    b = botorch_beta(alpha, lam)
    assert math.sqrt(b) * sigma_gp == pytest.approx(alpha * sigma_gp / math.sqrt(lam))
    assert alpha_from_botorch_beta(b, lam) == pytest.approx(alpha)


def test_schedule_validation():
    with pytest.raises(ValueError, match="delta"):
        PaperSchedule(0.1, 1.5, 1.0, 0.1, 2.0)
    with pytest.raises(ValueError, match="delta"):
        ReferenceCodeSchedule(0.1, 0.0, 1.0, 0.1, 2.0)
    with pytest.raises(ValueError, match="multiplier"):
        PaperSchedule(0.1, 0.5, 1.0, 0.1, 2.0, multiplier="x")
    with pytest.raises(ValueError, match="unknown beta"):
        make_schedule("bogus", C=2.0, lam=0.1, xi=0.1, delta=0.1)
    with pytest.raises(ValueError, match="non-negative"):
        FixedSchedule(-1.0)


def test_loop_accumulates_batch_start_variances(monkeypatch):
    """In the loop, beta~ sums log(1 + 3 s2_0) with each batch's START variances."""
    captured = []
    orig = engine_mod.select_batch

    def spy(state, alpha, rule, **kw):
        batch = orig(state, alpha, rule, **kw)
        captured.append((state.s2_0[torch.tensor(batch)].clone(), alpha))
        return batch

    monkeypatch.setattr(engine_mod, "select_batch", spy)
    g = torch.Generator().manual_seed(0)
    X = torch.rand(150, 2, generator=g, dtype=DT)
    f = torch.sin(3 * X).sum(-1)
    k = fixed_rbf_kernel(0.3)
    sched = PaperSchedule(xi=0.05, delta=0.01, F=1.0, lam=0.01, C=2.0)
    res = run_bbkb(
        X,
        noisy_oracle(f, 0.05, torch.Generator().manual_seed(1)),
        80,
        k,
        lam=0.01,
        beta=sched,
        init=torch.tensor([3, 9]),
        seed=0,
        progress=False,
    )
    init = exact_logdet(X[torch.tensor([3, 9])], k, 0.01)
    acc = init
    for j, (s2, alpha) in enumerate(captured):
        tmp = PaperSchedule(0.05, 0.01, 1.0, 0.01, 2.0)
        tmp.logdet_acc = acc
        assert alpha == pytest.approx(tmp.alpha, rel=1e-12)
        assert res.alphas[j + 1] == pytest.approx(alpha)
        acc += float(torch.log1p(3 * s2).sum())
    assert sched.logdet_acc == pytest.approx(acc, rel=1e-10)
    assert sum(len(s) for s, _ in captured) == 78
