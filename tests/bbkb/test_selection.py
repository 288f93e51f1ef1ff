"""Lazy UCB selection (BBKB App. A.3) against brute-force recomputation."""

from __future__ import annotations

import math

import pytest
import torch

from botorch_sketch.bbkb import (
    GlobalRule,
    LazyUCBSelector,
    rebuild,
    select_batch,
    selection,
)
from botorch_sketch.bbkb.selection import PooledUCBSelector
from botorch_sketch.bbkb.stopping import make_rule

from .conftest import DT, make_state


def brute_force_argmax(state, alpha, prefix, masked=()):
    s2 = state.variances(torch.tensor(prefix, dtype=torch.long))
    u = state.mu + alpha * s2.sqrt()
    if masked:
        u[list(masked)] = -math.inf
    return int(torch.argmax(u)), s2


@pytest.mark.parametrize(
    "selector,pool_size", [("pool", 1), ("pool", 256), ("lazy", 0)]
)
@pytest.mark.parametrize(
    "seed,m,alpha,repeats,lazy",
    [
        (0, 10, 0.5, True, True),
        (1, 3, 2.0, True, True),  # r = 3: history vs triangular-solve refreshes
        (2, 15, 0.05, True, True),  # small alpha: repeats of the same arm
        (3, 8, 1.0, False, True),
        (4, 8, 1.0, True, False),
        (5, 20, 5.0, False, False),
    ],
)
def test_lazy_argmax_equals_brute_force(
    seed, m, alpha, repeats, lazy, selector, pool_size
):
    for batch_seed in range(3):  # several batches (different states)
        state, _, _ = make_state(seed=10 * seed + batch_seed, m=m)
        records = []
        batch = select_batch(
            state,
            alpha,
            GlobalRule(1e9),
            max_batch_size=30,
            allow_repeats=repeats,
            lazy=lazy,
            recorder=records.append,
            selector=selector,
            pool_size=pool_size or None,
        )
        assert len(batch) == 30
        for j, arm in enumerate(batch):
            masked = () if repeats else set(batch[:j])
            expected, s2 = brute_force_argmax(state, alpha, batch[:j], masked)
            assert arm == expected, f"step {j}"
            assert records[j].variance == pytest.approx(float(s2[arm]), abs=1e-9)
        if not repeats:
            assert len(set(batch)) == len(batch)


def test_ties_go_to_lowest_index():
    state, _, _ = make_state(seed=7)
    arms = torch.cat([state.arms, state.arms])  # every arm twice
    big = rebuild(
        arms,
        state.kernel,
        state.S_idx,
        torch.cat([state.counts, torch.zeros_like(state.counts)]),
        torch.cat([state.reward_sums, torch.zeros_like(state.reward_sums)]),
        state.lam,
    )
    A = state.num_arms
    batch = select_batch(big, 1.0, GlobalRule(1e9), max_batch_size=20)
    assert all(a < A for a in batch)
    batch = select_batch(
        big, 1.0, GlobalRule(1e9), max_batch_size=20, allow_repeats=False
    )
    for j, a in enumerate(batch):  # brute force with masking
        expected, _ = brute_force_argmax(big, 1.0, batch[:j], set(batch[:j]))
        assert a == expected


def test_within_batch_variances_non_increasing_and_exact():
    state, _, _ = make_state(seed=8, m=6)
    sel = LazyUCBSelector(state, alpha=1.0)
    prev = state.s2_0.clone()
    chosen = []
    for _ in range(25):
        i = sel.argmax()
        chosen.append(i)
        sel.hallucinate(i)
        cur = sel.variances().clone()
        assert (cur <= prev + 1e-12).all()
        ref = state.variances(torch.tensor(chosen))
        assert torch.allclose(cur, ref, rtol=1e-9, atol=1e-10)
        # Also against V_fb + sum z z^T assembled by hand.
        Zh = state.Z[chosen]
        V = state.L @ state.L.mT + Zh.mT @ Zh
        hand = state.resid + (state.Z @ torch.linalg.inv(V) * state.Z).sum(-1)
        assert torch.allclose(cur, hand, rtol=1e-8, atol=1e-10)
        prev = cur


def test_selection_validation():
    state, _, _ = make_state(seed=9)
    with pytest.raises(ValueError, match="max_batch_size"):
        select_batch(state, 1.0, GlobalRule(2.0), max_batch_size=0)
    with pytest.raises(ValueError, match="alpha"):
        select_batch(state, -1.0, GlobalRule(2.0))
    with pytest.raises(ValueError, match="alpha"):
        select_batch(state, math.nan, GlobalRule(2.0))


def test_batch_without_repeats_stops_when_arms_run_out():
    state, _, _ = make_state(seed=11, A=5, n_pulled=4, m=2)
    batch = select_batch(state, 1.0, GlobalRule(1e9), allow_repeats=False)
    assert sorted(batch) == list(range(5))
    assert DT == state.Z.dtype


def test_pooled_selector_grows_its_pool_and_tracks_exact_variances():
    state, _, _ = make_state(seed=21, m=40, n_pulled=80)
    sel = PooledUCBSelector(state, alpha=5.0, pool_size=1)
    chosen = []
    for _ in range(25):
        i = sel.argmax()
        _, var = sel.current()
        expected, s2 = brute_force_argmax(state, 5.0, chosen)
        assert i == expected
        assert var == pytest.approx(float(s2[i]), abs=1e-9)
        chosen.append(i)
        sel.hallucinate(i)
        assert torch.allclose(
            sel.variances(), state.variances(torch.tensor(chosen)), atol=1e-9
        )
    assert 1 < sel.pool_size <= state.num_arms  # the pool was doubled on demand
    assert sel.total_refreshed >= 25
    # Any arm (a pending one, say) may be hallucinated, not only the argmax.
    other = (sel.argmax() + 1) % state.num_arms
    sel.hallucinate(other)
    chosen.append(other)
    assert torch.allclose(
        sel.variances(), state.variances(torch.tensor(chosen)), atol=1e-9
    )
    with pytest.raises(ValueError, match="out of range"):
        sel.hallucinate(state.num_arms)
    with pytest.raises(ValueError, match="pool_size"):
        PooledUCBSelector(state, alpha=1.0, pool_size=0)
    with pytest.raises(ValueError, match="selector"):
        select_batch(state, 1.0, GlobalRule(2.0), selector="magic")


def test_pool_refactorisation_keeps_long_batches_exact():
    """Batches much longer than r: the periodic refactorisation of V_t."""
    state, _, _ = make_state(seed=22, m=4, A=60)
    batch = select_batch(state, 0.7, GlobalRule(1e9), max_batch_size=40)
    sel = PooledUCBSelector(state, 0.7)
    for i in batch[:-1]:
        assert sel.argmax() == i
        sel.hallucinate(i)
    assert torch.allclose(
        sel.variances(), state.variances(torch.tensor(batch[:-1])), atol=1e-9
    )
    expected, _ = brute_force_argmax(state, 0.7, batch[:-1])
    assert batch[-1] == expected


@pytest.mark.parametrize("min_batch_size", [1, 4, 9])
def test_min_batch_size_continues_the_greedy_sequence(min_batch_size):
    """Past the rule's stop the batch goes on with the same greedy sequence (the
    rule is no longer consulted) until it holds ``min_batch_size`` points."""
    state, _, _ = make_state(seed=12)
    long = select_batch(state, 1.0, GlobalRule(1e9), max_batch_size=9)
    records = []
    rule = GlobalRule(1.0)  # stops at the first point
    batch = select_batch(
        state,
        1.0,
        rule,
        max_batch_size=9,
        min_batch_size=min_batch_size,
        recorder=records.append,
    )
    assert batch == long[:min_batch_size]
    assert rule.size == 1  # the rule saw the first point only
    assert [r.stop for r in records] == [False] * (min_batch_size - 1) + [True]
    with pytest.raises(ValueError, match="min_batch_size"):
        select_batch(state, 1.0, GlobalRule(2.0), max_batch_size=3, min_batch_size=4)
    with pytest.raises(ValueError, match="min_batch_size"):
        select_batch(state, 1.0, GlobalRule(2.0), min_batch_size=0)


@pytest.mark.parametrize("repeats", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_memory_capped_pool_selects_the_same_batch(seed, repeats):
    """A pool capped at a few arms (re-made from the current UCBs by chunked
    sweeps) chooses exactly the batch of an uncapped pool."""
    state, _, _ = make_state(seed=30 + seed, m=12, A=300)
    state.chunk_size = 64  # several chunks per sweep
    kwargs = dict(max_batch_size=40, allow_repeats=repeats)
    free = select_batch(state, 2.0, GlobalRule(1e9), **kwargs)
    row_bytes = state.mu.element_size() * state.rank
    capped_sel = PooledUCBSelector(
        state, 2.0, allow_repeats=repeats, pool_size=2, max_pool_bytes=5 * row_bytes
    )
    capped = []
    for _ in range(40):
        capped.append(capped_sel.argmax())
        assert capped_sel.pool_size <= 5
        capped_sel.hallucinate(capped[-1])
    assert capped == free
    with pytest.raises(ValueError, match="max_pool_bytes"):
        PooledUCBSelector(state, 1.0, max_pool_bytes=0)


@pytest.mark.parametrize("allow_repeats", [True, False])
def test_select_batch_with_pending_and_excluded_arms(allow_repeats):
    state, _, _ = make_state(seed=5, m=30, n_pulled=60)
    alpha, pending = 3.0, [4, 17]
    excluded = torch.zeros(state.num_arms, dtype=torch.bool)
    excluded[::3] = True
    batch = select_batch(
        state, alpha, make_rule("global", 2.0), max_batch_size=6,
        min_batch_size=6, allow_repeats=allow_repeats, excluded=excluded,
        pending=pending,
    )  # fmt: skip
    # The same greedy sequence by brute force: pending arms first hallucinated,
    # excluded arms never chosen.
    chosen = list(pending)
    for i in batch:
        s2 = state.variances(torch.tensor(chosen))
        u = state.mu + alpha * s2.sqrt()
        u[excluded] = -math.inf
        if not allow_repeats:
            u[torch.tensor(chosen[len(pending) :], dtype=torch.long)] = -math.inf
        assert i == int(torch.argmax(u))
        assert not excluded[i]
        chosen.append(i)
    assert len(batch) == 6
    everything = torch.ones(state.num_arms, dtype=torch.bool)
    with pytest.raises(ValueError, match="every arm is excluded"):
        select_batch(state, alpha, make_rule("global", 2.0), excluded=everything)
    with pytest.raises(ValueError, match="boolean mask"):
        select_batch(state, alpha, make_rule("global", 2.0), excluded=everything[1:])
    with pytest.raises(ValueError, match="selector='pool'"):
        select_batch(
            state, alpha, make_rule("global", 2.0), selector="lazy", pending=[1]
        )


@pytest.mark.parametrize("allow_repeats", [True, False])
def test_numpy_and_torch_step_paths_choose_the_same_arms(monkeypatch, allow_repeats):

    state, _, _ = make_state(seed=3, A=200, m=12)
    runs = {}
    for name in ("numpy", "torch"):
        if name == "torch":
            monkeypatch.setattr(selection, "_numpy_views_ok", lambda x: False)
        sel = PooledUCBSelector(state, 2.0, allow_repeats=allow_repeats, pool_size=8)
        assert sel._np == (name == "numpy")
        arms, s2 = [], []
        for _ in range(40):
            i = sel.argmax()
            arms.append(i)
            s2.append(sel.current()[1])
            sel.hallucinate(i)
        runs[name] = (arms, torch.tensor(s2), sel.variances())
    (a_np, s_np, v_np), (a_t, s_t, v_t) = runs["numpy"], runs["torch"]
    assert a_np == a_t
    assert torch.allclose(s_np, s_t, rtol=1e-10, atol=1e-12)
    assert torch.allclose(v_np, v_t, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_argmax_read_is_one_read_of_the_lowest_maximiser(dtype):
    u = torch.tensor([0.5, 2.0, -1.0, 2.0], dtype=dtype)
    s2 = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=dtype)
    j, uj, s2j = selection._argmax_read(u, s2)
    assert (j, uj, s2j) == (1, 2.0, float(s2[1]))
    assert isinstance(j, int) and isinstance(uj, float)
