"""Stopping rules: semantics, Lemma 1 / Lemma 3 bounds, C = 1 and validation."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.bbkb import (
    GlobalLocalRule,
    GlobalRule,
    LocalRule,
    ProductRule,
    make_rule,
    select_batch,
)

from .conftest import make_state


def full_cov(state, j_idx):
    """Batch-start k~_fb(a, x_j) (Eq. 2) for all arms a and the listed x_j, dense."""
    Zj = state.Z[j_idx]
    K = state.kernel(state.arms, state.arms[j_idx])
    V_inv = torch.cholesky_inverse(state.L)
    return (K - state.Z @ Zj.mT) / state.lam + state.Z @ V_inv @ Zj.mT


def local_bound(state, batch):
    kt = full_cov(state, torch.tensor(batch, dtype=torch.long))
    return 1.0 + kt.pow(2).sum(-1) / state.s2_0


def global_bound(state, batch):
    return 1.0 + float(state.s2_0[torch.tensor(batch, dtype=torch.long)].sum())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_lemma1_lemma3_and_local_le_global(seed):
    state, _, _ = make_state(seed=seed, m=8, lam=0.02)
    g = torch.Generator().manual_seed(seed)
    batch = torch.randint(state.num_arms, (12,), generator=g).tolist()
    batch += batch[:2]  # repetitions count twice
    true_ratio = state.s2_0 / state.variances(torch.tensor(batch))
    G = global_bound(state, batch)
    loc = local_bound(state, batch)
    assert (true_ratio <= G * (1 + 1e-10)).all()  # Lemma 1
    assert (true_ratio <= loc * (1 + 1e-10)).all()  # Lemma 3
    assert (loc <= G * (1 + 1e-10)).all()  # Cauchy-Schwarz
    assert (true_ratio >= 1 - 1e-12).all()
    rule = LocalRule(1e9)
    rule.start(state)
    for a in batch:
        rule.update(a, 0.0)
    assert torch.allclose(rule.local_ratios(), loc, rtol=1e-9)
    assert rule.bound == pytest.approx(float(loc.max()), rel=1e-9)


@pytest.mark.parametrize("C", [1.5, 2.0, 4.0])
@pytest.mark.parametrize("kind", ["global", "global_local", "local", "product"])
def test_crossing_point_belongs_to_batch_and_prefixes_satisfy_rule(C, kind):
    state, _, _ = make_state(seed=5, m=10, lam=0.02)
    records = []
    rule = make_rule(kind, C)
    batch = select_batch(state, 0.3, rule, max_batch_size=500, recorder=records.append)
    assert len(batch) < 500, "the rule must stop before the cap"
    assert records[-1].stop and not any(r.stop for r in records[:-1])

    def bound(prefix):
        if kind == "product":
            out = 1.0
            for r in records[: len(prefix)]:
                out *= 1.0 + r.variance
            return out
        G = global_bound(state, prefix)
        if kind == "global":
            return G
        L = float(local_bound(state, prefix).max())
        if kind == "local":
            return L
        return min(G, L)

    assert bound(batch) > C
    for n in range(1, len(batch)):
        assert bound(batch[:n]) <= C * (1 + 1e-12), n
    for r, n in zip(records, range(1, len(batch) + 1), strict=True):
        assert r.bound == pytest.approx(bound(batch[:n]), rel=1e-9)


def test_global_local_batches_at_least_as_long_as_global():
    for seed in range(3):
        state, _, _ = make_state(seed=20 + seed, m=10, lam=0.02)
        b_g = select_batch(state, 0.3, GlobalRule(2.0))
        b_gl = select_batch(state, 0.3, GlobalLocalRule(2.0))
        assert b_gl[: len(b_g)] == b_g  # same selections, only the stop differs
        assert len(b_gl) >= len(b_g)


@pytest.mark.parametrize("kind", ["global", "global_local", "local", "product"])
def test_c_equal_one_gives_batches_of_one(kind):
    state, _, _ = make_state(seed=6)
    for alpha in (0.0, 1.0):
        assert len(select_batch(state, alpha, make_rule(kind, 1.0))) == 1
    rule = make_rule(kind, 1.0)
    rule.start(state)
    assert rule.update(0, 0.0)  # even a zero variance ends the batch
    assert len(select_batch(state, 1.0, make_rule("bkb", 5.0))) == 1


@pytest.mark.parametrize("cls", [GlobalRule, GlobalLocalRule, LocalRule, ProductRule])
def test_invalid_threshold(cls):
    for C in (0.5, 0.999, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="C must be"):
            cls(C)


def test_unknown_rule():
    with pytest.raises(ValueError, match="unknown stopping rule"):
        make_rule("nope", 2.0)
