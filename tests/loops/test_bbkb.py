"""Bandit loops: reproducibility, batch growth, BKB, exact baselines, validation."""

from __future__ import annotations

import math

import pytest
import torch

from botorch_sketch.bbkb import ExactPosterior, fixed_rbf_kernel
from botorch_sketch.bbkb.exact import ExactBatchView
from botorch_sketch.bbkb.stopping import make_rule
from botorch_sketch.loops import bbkb as run_bbkb_module
from botorch_sketch.loops import (
    noisy_oracle,
    run_bbkb,
    run_botorch_fixed_q,
    run_gp_bucb,
    run_gp_ucb,
    run_uniform,
    uncertainty_sampling_init,
    uniform_regret,
)

DT = torch.float64


def problem(A=300, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(A, d, generator=g, dtype=DT)
    f = torch.exp(-((X - 0.6) ** 2).sum(-1) / 0.1)
    return X, f


def run(X, f, T, **kw):
    k = fixed_rbf_kernel(kw.pop("ls", 0.2))
    oracle = noisy_oracle(f, 0.01, torch.Generator().manual_seed(123))
    kw.setdefault("lam", 1e-2)
    kw.setdefault("xi", 0.01)
    return run_bbkb(X, oracle, T, k, f_true=f, progress=False, **kw)


def test_seeded_runs_reproduce_exactly():
    X, f = problem()
    for rule in ("global", "global_local"):
        a = run(X, f, 120, seed=5, rule=rule)
        b = run(X, f, 120, seed=5, rule=rule)
        assert torch.equal(a.arms, b.arms) and torch.equal(a.rewards, b.rewards)
        assert torch.equal(a.dict_size, b.dict_size)
        assert torch.equal(a.batch_sizes, b.batch_sizes)
    c = run(X, f, 120, seed=6)
    assert not torch.equal(a.arms[:1], c.arms[:1]) or not torch.equal(a.arms, c.arms)


@pytest.mark.outcome
def test_result_bookkeeping_and_horizon_cut():
    X, f = problem()
    res = run(X, f, 150, seed=0)
    assert res.arms.shape == (150,) and res.batch_sizes.sum() == 150
    assert torch.equal(res.batch_size, res.batch_sizes[res.batch_id])
    assert res.batch_sizes[0] == 1 and res.dict_size[0] == 0  # x_1 uniform, S_0 = {}
    assert (res.wall_time.diff() >= 0).all()
    assert torch.allclose(res.regret, f.max() - f[res.arms])
    ratio = res.regret_ratio(f)
    t = torch.arange(1, 151, dtype=DT)
    assert torch.allclose(ratio, res.regret.cumsum(0) / (t * (f.max() - f.mean())))
    assert ratio[-1] < 0.8
    assert res.final_state is not None and res.final_state.dict_size >= 1


@pytest.mark.outcome
def test_batch_sizes_grow_on_smooth_problem():
    X, f = problem(A=2000, seed=1)
    res = run(X, f, 600, seed=0)
    early = res.batch_size[1:150].double().mean()
    late = res.batch_size[400:].double().mean()
    assert late > 3 * early, (early, late)
    assert res.num_batches < 600 / 3
    assert res.regret_ratio(f)[-1] < 0.4


def test_bkb_and_c_one_give_batches_of_one():
    X, f = problem(A=100)
    for kw in ({"rule": "bkb", "C": 3.0}, {"rule": "global", "C": 1.0}):
        res = run(X, f, 25, seed=0, **kw)
        assert (res.batch_sizes == 1).all() and res.num_batches == 25


def test_max_batch_size_and_no_repeats():
    X, f = problem(A=200)
    res = run(X, f, 200, seed=0, max_batch_size=4, C=50.0, allow_repeats=False)
    assert res.batch_sizes.max() <= 4
    for b in range(res.num_batches):
        arms = res.arms[res.batch_id == b]
        assert arms.unique().numel() == arms.numel()


def test_huge_q_bar_matches_exact_gp_posterior():
    """Every pulled arm in the dictionary: BBKB's UCB == exact GP-BUCB's UCB."""
    X, f = problem(A=150)
    res = run(X, f, 60, seed=0, q_bar=1e12, beta=0.5)
    state = res.final_state
    # The final state was rebuilt after the penultimate batch: replay its data.
    n_before = int(res.batch_sizes[:-1].sum())
    pulled = res.arms[:n_before]
    assert torch.equal(state.S_idx, pulled.unique())
    k = fixed_rbf_kernel(0.2)
    post = ExactPosterior(X, k, 1e-2)
    for a in pulled.tolist():
        post.add(a)
    post.observe(res.rewards[:n_before])
    assert torch.allclose(state.mu, post.mean(), atol=1e-8)
    assert torch.allclose(state.s2_0, post.variance(), atol=1e-8)
    alpha = float(res.alphas[-1])
    u_bbkb = state.mu + alpha * state.s2_0.sqrt()
    u_exact = post.mean() + alpha * post.variance().sqrt()
    assert torch.allclose(u_bbkb, u_exact, atol=1e-8)


def test_exact_baselines():
    X, f = problem(A=150)
    k = fixed_rbf_kernel(0.2)
    oracle = noisy_oracle(f, 0.01, torch.Generator().manual_seed(0))
    ucb = run_gp_ucb(X, oracle, 40, k, 1e-2, xi=0.01, seed=0, f_true=f, progress=False)
    assert (ucb.batch_sizes == 1).all()
    bucb = run_gp_bucb(
        X, oracle, 80, k, 1e-2, C=4.0, xi=0.01, seed=0, f_true=f, progress=False
    )
    assert bucb.batch_sizes.sum() == 80 and bucb.batch_sizes.max() > 1
    # Product rule: every proper prefix has prod(1 + sigma^2_{s-1}(x_s)) <= C.
    # Replay with an exact posterior to get the hallucinated variances.
    post = ExactPosterior(X, k, 1e-2)
    start = 0
    for b, size in enumerate(bucb.batch_sizes.tolist()):
        idx = bucb.arms[start : start + size].tolist()
        prod = 1.0
        for j, a in enumerate(idx):
            prod *= 1.0 + float(post.variance()[a])
            post.add(a)
            if b > 0 and j < size - 1:
                assert prod <= 4.0
        if b > 0 and start + size < 80:
            assert prod > 4.0
        post.observe(bucb.rewards[start : start + size])
        start += size
    uni = run_uniform(150, oracle, 500, f_true=f, seed=0)
    assert uni.regret.sum() / uniform_regret(f, 500) == pytest.approx(1.0, abs=0.15)


def reference_gp_bucb(
    X, oracle, T, k, lam, C, xi, delta, init, rule=None, cap=None, allow_repeats=True
):
    """GP-BUCB written out on an ExactPosterior (BBKB Alg. 2), product rule or a
    rule object, with the paper's beta: what the engine-driven loop must match."""
    post = ExactPosterior(X, k, lam, capacity=max(256, T))
    arms, rewards, sizes = init.tolist(), oracle(init).tolist(), [init.numel()]
    for a in arms:
        post.add(a)
    post.observe(torch.tensor(rewards, dtype=DT))
    while len(arms) < T:
        b = 2 * xi * math.sqrt(post.logdet() + math.log(1 / delta))
        alpha = C * (b + (1 + math.sqrt(2)) * math.sqrt(lam))
        mu, size, bound = post.mean(), 0, 1.0
        masked = torch.zeros(X.shape[0], dtype=torch.bool)
        if rule is not None:
            rule.start(ExactBatchView(0, 0, post.variance()))
        batch = []
        while True:
            var = post.variance()
            u = mu + alpha * var.sqrt()
            if not allow_repeats:
                u = u.masked_fill(masked, -math.inf)
            i = int(torch.argmax(u))
            batch.append(i)
            masked[i] = True
            post.add(i)
            size += 1
            if rule is None:
                bound *= 1 + float(var[i])
                stop = bound > C
            else:
                stop = rule.update(i, float(var[i]))
            limit = T - len(arms) if cap is None else min(cap, T - len(arms))
            if stop or size >= limit or (bool(masked.all()) and not allow_repeats):
                break
        y = oracle(torch.tensor(batch))
        post.observe(y)
        arms += batch
        rewards += y.tolist()
        sizes.append(len(batch))
    return arms, rewards, sizes


@pytest.mark.parametrize(
    "options",
    [
        {"C": 4.0},
        {"C": 3.0, "rule": "global"},
        {"C": 8.0, "allow_repeats": False, "max_batch_size": 5},
    ],
)
def test_exact_baselines_match_the_plain_gp_bucb_loop(options):
    X, f = problem(A=150)
    k = fixed_rbf_kernel(0.3)
    T, lam, xi = 100, 1e-2, 0.1

    def oracle():
        return noisy_oracle(f, 0.01, torch.Generator().manual_seed(7))

    res = run_gp_bucb(
        X, oracle(), T, k, lam, xi=xi, seed=3, f_true=f, progress=False, **options
    )
    init = res.arms[:1]
    rule = options.get("rule")
    arms, rewards, sizes = reference_gp_bucb(
        X,
        oracle(),
        T,
        k,
        lam,
        options["C"],
        xi,
        1 / (T + 1),
        init,
        rule=None if rule is None else make_rule(rule, options["C"]),
        cap=options.get("max_batch_size"),
        allow_repeats=options.get("allow_repeats", True),
    )
    assert res.arms.tolist() == arms
    assert torch.equal(res.rewards, torch.tensor(rewards, dtype=DT))
    assert res.batch_sizes.tolist() == sizes
    assert max(sizes) > 1  # batches grew: the comparison covers the stopping rule
    # dict_size: distinct pulled arms at the start of each step's batch.
    start = sizes[0]
    for size in sizes[1:]:
        expected = len(set(arms[:start]))
        assert res.dict_size[start : start + size].tolist() == [expected] * size
        start += size


def test_exact_baseline_interrupted_resumes_like_an_uninterrupted_run():
    X, f = problem(A=100)
    k = fixed_rbf_kernel(0.3)
    calls = []

    def flaky(idx):
        calls.append(idx.numel())
        if len(calls) == 6:
            raise RuntimeError("instrument down")
        return f[idx]

    full = run_gp_bucb(
        X, lambda idx: f[idx], 60, k, 1e-2, C=4.0, seed=1, progress=False
    )
    with pytest.raises(run_bbkb_module.BBKBInterrupted, match="instrument") as info:
        run_gp_bucb(X, flaky, 60, k, 1e-2, C=4.0, seed=1, progress=False)
    partial = info.value.partial
    assert 0 < partial.arms.numel() < 60
    resumed = run_gp_bucb(X, flaky, 60, k, 1e-2, C=4.0, progress=False, resume=partial)
    assert torch.equal(resumed.arms, full.arms)
    assert torch.equal(resumed.batch_sizes, full.batch_sizes)
    with pytest.raises(ValueError, match="unknown beta"):
        run_gp_bucb(X, flaky, 60, k, 1e-2, beta="reference_code", progress=False)


@pytest.mark.outcome
def test_botorch_fixed_q_baseline():
    X, f = problem(A=80)

    def go(seed):
        oracle = noisy_oracle(f, 0.01, torch.Generator().manual_seed(5))
        return run_botorch_fixed_q(
            X,
            oracle,
            41,
            q=4,
            kernel=fixed_rbf_kernel(0.2),
            lam=1e-2,
            beta=0.5,
            f_true=f,
            seed=seed,
            progress=False,
        )

    res = go(0)
    assert res.arms.numel() == 41
    assert res.batch_sizes.tolist() == [1] + [4] * 10
    for b in range(1, 11):  # optimize_acqf_discrete picks distinct arms per batch
        batch = res.arms[res.batch_id == b]
        assert batch.unique().numel() == batch.numel()
    assert bool(((res.arms >= 0) & (res.arms < X.shape[0])).all())
    assert res.dict_size.tolist()[1:5] == [1, 1, 1, 1]  # observations at selection
    assert torch.equal(res.arms, go(0).arms)  # seeded
    assert float(res.regret_ratio(f)[-1]) < 0.7  # better than uniform sampling
    with pytest.raises(ValueError, match="q must be a positive int"):
        run_botorch_fixed_q(
            X, noisy_oracle(f, 0.01), 5, q=0, kernel=fixed_rbf_kernel(0.2), lam=0.1
        )


def test_uncertainty_sampling_init():
    X, f = problem(A=200)
    k = fixed_rbf_kernel(0.3)
    P = 5.0
    idx = uncertainty_sampling_init(X, k, 0.1, P)
    post = ExactPosterior(X, k, 0.1)
    for j, a in enumerate(idx.tolist()):
        var = post.variance()
        assert a == int(torch.argmax(var))
        if j < idx.numel() - 1:
            assert float(var[a]) >= 1 / P
        else:
            assert float(var[a]) < 1 / P
        post.add(a)
    res = run(X, f, idx.numel() + 30, seed=0, init=idx, ls=0.3, lam=0.1)
    assert res.batch_sizes[0] == idx.numel()


def test_loop_validation():
    X, f = problem(A=50)
    k = fixed_rbf_kernel(0.2)
    orc = noisy_oracle(f, 0.01)
    with pytest.raises(ValueError, match="empty"):
        run_bbkb(X[:0], orc, 10, k, 0.1, progress=False)
    with pytest.raises(ValueError, match="f_true"):
        run_bbkb(X, orc, 10, k, 0.1, f_true=f[:-1], progress=False)
    with pytest.raises(ValueError, match="A x d"):
        run_bbkb(X[0], orc, 10, k, 0.1, progress=False)
    with pytest.raises(ValueError, match="C must be"):
        run_bbkb(X, orc, 10, k, 0.1, C=0.5, progress=False)
    with pytest.raises(ValueError, match="init indices"):
        run_bbkb(X, orc, 10, k, 0.1, init=torch.tensor([99]), progress=False)
    with pytest.raises(ValueError, match="init_rewards"):
        run_bbkb(
            X,
            orc,
            10,
            k,
            0.1,
            init=torch.tensor([1, 2]),
            init_rewards=torch.zeros(3),
            progress=False,
        )
    with pytest.raises(ValueError, match="horizon"):
        run_bbkb(X, orc, 0, k, 0.1, progress=False)
    with pytest.raises(ValueError, match="max_batch_size"):
        run_bbkb(X, orc, 10, k, 0.1, max_batch_size=0, progress=False)


@pytest.mark.outcome  # exact equality of choices between two arithmetic paths
@pytest.mark.parametrize("rule", ["global", "global_local", "bkb"])
def test_incremental_and_rebuild_paths_make_identical_choices(rule):
    X, f = problem(A=400, d=3, seed=2)
    runs = {
        mode: run(X, f, 150, seed=1, rule=rule, resparsify=mode, lam=1e-3)
        for mode in ("incremental", "rebuild")
    }
    inc, reb = runs["incremental"], runs["rebuild"]
    assert inc.arms.tolist() == reb.arms.tolist()
    assert torch.equal(inc.batch_sizes, reb.batch_sizes)
    assert torch.equal(inc.dict_size, reb.dict_size)
    assert type(inc.final_state).__name__ == "IncrementalState"
    assert type(reb.final_state).__name__ == "RebuiltState"
    assert inc.final_state.stats["incremental"] > 0
    torch.testing.assert_close(inc.final_state.s2_0, reb.final_state.s2_0)
    torch.testing.assert_close(inc.final_state.mu, reb.final_state.mu)


def test_auto_path_falls_back_to_rebuild_over_the_memory_budget():
    X, f = problem(A=200, seed=3)
    small = run(X, f, 60, seed=0, embedding_bytes=10)
    big = run(X, f, 60, seed=0)
    assert type(small.final_state).__name__ == "RebuiltState"
    assert type(big.final_state).__name__ == "IncrementalState"
    assert small.arms.tolist() == big.arms.tolist()
    with pytest.raises(ValueError, match="resparsify"):
        run(X, f, 10, resparsify="sometimes")
    with pytest.raises(ValueError, match="repeats"):
        run(X, f, 10, repeats="coins")


def test_categorical_regime_keeps_batch_and_dictionary_invariants():
    """One-hot library with a large effective dimension: every pull enters the
    dictionary and every batch has one point (issue 14); both paths agree."""
    from botorch_sketch.datasets import categorical_library

    X, f = categorical_library(num_inputs=4, num_levels=4, seed=0)
    assert X.shape == (256, 16)
    torch.testing.assert_close(X.norm(dim=-1), torch.ones(256, dtype=DT))
    runs = {}
    for mode in ("incremental", "rebuild"):
        k = fixed_rbf_kernel(1.0)
        oracle = noisy_oracle(f, 0.1, torch.Generator().manual_seed(5))
        runs[mode] = run_bbkb(
            X, oracle, 80, k, 1e-2, beta="reference_code", xi=0.1, seed=0,
            init=torch.tensor([0, 1]), f_true=f, progress=False, resparsify=mode,
        )  # fmt: skip
    res = runs["incremental"]
    assert res.arms.tolist() == runs["rebuild"].arms.tolist()
    assert (res.batch_sizes[1:] == 1).all()  # batches of one point
    steps = torch.arange(res.arms.numel())
    # The dictionary used at step t >= 2 holds every arm pulled before it (m = t
    # while the arms are distinct), and never an arm that was not pulled.
    distinct = torch.tensor(
        [torch.unique(res.arms[:t]).numel() for t in steps.tolist()]
    )
    assert torch.equal(res.dict_size[2:], distinct[2:])
    st = res.final_state
    pulled = (st.counts > 0).nonzero().squeeze(-1)
    assert torch.isin(st.S_idx, pulled).all()
    assert st.rank == st.dict_size  # no point of this library is in the span
    assert st.stats["incremental"] > 0.9 * res.num_batches  # refreshes while r is tiny


# ----------------------------------------------------------- faults and resume


class FaultyOracle:
    """``noisy_oracle`` that raises (or returns NaN) before drawing its noise, so a
    retried batch gets the rewards the fault-free run got."""

    def __init__(self, f, fail_at=(), nan_at=(), p_fail=0.0, seed=0, exc=None):
        self.base = noisy_oracle(f, 0.01, torch.Generator().manual_seed(123))
        self.calls, self.fail_at, self.nan_at = 0, set(fail_at), set(nan_at)
        self.p_fail, self.g = p_fail, torch.Generator().manual_seed(seed)
        self.exc = exc or RuntimeError("instrument failure")

    def __call__(self, idx):
        self.calls += 1
        fail = self.calls in self.fail_at
        if self.p_fail and float(torch.rand(1, generator=self.g)) < self.p_fail:
            fail = True
        if fail:
            raise self.exc
        if self.calls in self.nan_at:
            return torch.full(idx.shape, float("nan"), dtype=DT)
        return self.base(idx)


def run_oracle(X, oracle, T, **kw):
    kw.setdefault("lam", 1e-2)
    kw.setdefault("xi", 0.01)
    return run_bbkb(X, oracle, T, fixed_rbf_kernel(0.2), progress=False, **kw)


def test_raising_oracle_keeps_observations_and_resumes_exactly():
    X, f = problem()
    ref = run_oracle(X, FaultyOracle(f), 150, seed=3)
    oracle = FaultyOracle(f, fail_at={6})
    with pytest.raises(run_bbkb_module.BBKBInterrupted, match="instrument") as info:
        run_oracle(X, oracle, 150, seed=3)
    partial = info.value.partial
    assert isinstance(info.value.__cause__, RuntimeError)
    n = int(ref.batch_sizes[:5].sum())  # five batches observed before the fault
    assert partial.arms.numel() == n == partial.rewards.numel()
    assert torch.equal(partial.arms, ref.arms[:n])
    assert torch.equal(partial.rewards, ref.rewards[:n])
    assert partial.run_state is not None
    res = run_oracle(X, oracle, 150, resume=partial)
    assert torch.equal(res.arms, ref.arms) and torch.equal(res.rewards, ref.rewards)
    assert torch.equal(res.batch_sizes, ref.batch_sizes)
    assert torch.equal(res.dict_size, ref.dict_size)
    with pytest.raises(ValueError, match="already resumed"):
        run_oracle(X, oracle, 150, resume=partial)


def test_non_finite_reward_is_rejected_naming_arm_and_step():
    X, f = problem()
    oracle = FaultyOracle(f, nan_at={4})
    with pytest.raises(
        run_bbkb_module.BBKBInterrupted, match=r"nan for arm \d+ at step"
    ):
        run_oracle(X, oracle, 100, seed=1)
    oracle = FaultyOracle(f, nan_at={4})
    try:
        run_oracle(X, oracle, 100, seed=1)
    except run_bbkb_module.BBKBInterrupted as exc:
        partial = exc.partial
    assert torch.isfinite(partial.rewards).all()
    engine = partial.run_state.engine
    assert engine.num_observations == partial.rewards.numel()
    ref = run_oracle(X, FaultyOracle(f), 100, seed=1)
    res = run_oracle(X, oracle, 100, resume=partial)  # call 5 returns the rewards
    assert torch.equal(res.arms, ref.arms)


def test_fault_injection_long_run_matches_the_uninterrupted_run():
    X, f = problem(A=500, seed=2)
    ref = run_oracle(X, FaultyOracle(f), 400, seed=7)
    oracle = FaultyOracle(f, p_fail=0.15, seed=11)
    faults, resume = 0, None
    while True:
        try:
            res = run_oracle(X, oracle, 400, seed=None if resume else 7, resume=resume)
            break
        except run_bbkb_module.BBKBInterrupted as exc:
            faults += 1
            resume = exc.partial
            assert torch.equal(resume.arms, ref.arms[: resume.arms.numel()])
    assert faults >= 3
    assert torch.equal(res.arms, ref.arms) and torch.equal(res.rewards, ref.rewards)
    assert torch.equal(res.batch_sizes, ref.batch_sizes)


def test_keyboard_interrupt_in_the_oracle_carries_the_partial_result():
    X, f = problem()
    ref = run_oracle(X, FaultyOracle(f), 80, seed=2)
    oracle = FaultyOracle(f, fail_at={3}, exc=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt) as info:
        run_oracle(X, oracle, 80, seed=2)
    partial = info.value.partial
    res = run_oracle(X, oracle, 80, resume=partial)
    assert torch.equal(res.arms, ref.arms)


def test_initial_batch_fault_and_wrong_shape_are_resumable():
    X, f = problem()
    ref = run_oracle(X, FaultyOracle(f), 60, seed=4)
    oracle = FaultyOracle(f, fail_at={1})
    with pytest.raises(run_bbkb_module.BBKBInterrupted) as info:
        run_oracle(X, oracle, 60, seed=4)
    assert info.value.partial.arms.numel() == 0
    res = run_oracle(X, oracle, 60, resume=info.value.partial)
    assert torch.equal(res.arms, ref.arms)
    with pytest.raises(run_bbkb_module.BBKBInterrupted, match="shape"):
        run_oracle(X, lambda idx: torch.zeros(2, 2, dtype=DT), 60, seed=4)


def test_checkpoints_resume_a_fresh_run():
    import json

    X, f = problem()
    ckpts = []
    ref = run_oracle(X, FaultyOracle(f), 150, seed=3, checkpoint=ckpts.append)
    assert len(ckpts) == ref.num_batches
    every = []
    run_oracle(X, FaultyOracle(f), 150, seed=3, checkpoint=every.append,
               checkpoint_every=3)  # fmt: skip
    assert len(every) == ref.num_batches // 3
    ckpt = ckpts[6]
    data = json.loads(json.dumps(ckpt.to_dict()))
    restored = run_bbkb_module.BBKBCheckpoint.from_dict(data)
    oracle = FaultyOracle(f)
    oracle.base(torch.tensor(ckpt.arms))  # the oracle's noise stream moves on
    res = run_oracle(X, oracle, 150, seed=99, resume=restored)
    assert torch.equal(res.arms, ref.arms)
    assert torch.equal(res.batch_sizes, ref.batch_sizes)
    with pytest.raises(ValueError, match="batch_sizes"):
        run_bbkb_module.BBKBCheckpoint.from_dict({**data, "batch_sizes": [1]})
    with pytest.raises(ValueError, match="checkpoint_every"):
        run_oracle(X, oracle, 10, checkpoint=ckpts.append, checkpoint_every=0)
    with pytest.raises(ValueError, match="resume"):
        run_oracle(X, oracle, 10, resume=ref)


def test_coupled_resampling_moves_fewer_points_and_checkpoints():
    # resampling="coupled": each arm keeps one uniform for the whole run, so
    # consecutive dictionaries share more points than with fresh coins; the
    # run is reproducible, and a checkpoint carries the uniforms' seed, so a
    # fresh engine resumes with the same arms (a checkpoint of the other mode
    # is refused).
    import json

    X, f = problem()
    churn = {}
    for mode in ("independent", "coupled"):
        dicts = []
        res = run_oracle(
            X, FaultyOracle(f), 150, seed=3, resampling=mode,
            checkpoint=lambda c, d=dicts: d.append(c),
        )  # fmt: skip
        sets = [set(c.to_dict()["engine"]["dictionary"]) for c in dicts]
        churn[mode] = sum(len(a ^ b) for a, b in zip(sets, sets[1:], strict=False))
        if mode == "coupled":
            again = run_oracle(X, FaultyOracle(f), 150, seed=3, resampling=mode)
            assert torch.equal(res.arms, again.arms)
            ckpt, ref = dicts[6], res
    assert churn["coupled"] < 0.5 * churn["independent"], churn
    data = json.loads(json.dumps(ckpt.to_dict()))
    assert "coupling_seed" in data["engine"]
    restored = run_bbkb_module.BBKBCheckpoint.from_dict(data)
    oracle = FaultyOracle(f)
    oracle.base(torch.tensor(ckpt.arms))
    res = run_oracle(X, oracle, 150, seed=99, resampling="coupled", resume=restored)
    assert torch.equal(res.arms, ref.arms)
    with pytest.raises(ValueError, match="resampling"):
        run_oracle(X, FaultyOracle(f), 150, seed=99, resume=restored)


def test_progress_without_tqdm_runs_silently(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    X, f = problem(A=50)
    k = fixed_rbf_kernel(0.2)
    res = run_bbkb(X, noisy_oracle(f, 0.01), 20, k, 1e-2, seed=0, progress=True)
    assert res.arms.numel() == 20
