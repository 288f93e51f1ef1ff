"""The device-derived budgets are pure functions of (device facts, n, d), and
the model honours them in every path (fit, resample, conditioning)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.models import NystromGP, budget, dictionary_policy, nystrom_fit
from botorch_sketch.models.budget import (
    CPU_FLOP_RATE,
    EXACT_INVERSE_WEIGHT,
    EXACT_MEMORY_BLOCKS,
    FIT_EFFICIENCY,
    FIT_EVALUATIONS,
    FIT_SECONDS,
    MEMORY_BLOCKS,
    MIN_FIT_SUBSET_SIZE,
    REFINE_EFFICIENCY,
    REFINE_EVALUATIONS,
    REFINE_ITERATIONS,
    DeviceFacts,
    device_affords_exact,
    device_dictionary_cap,
    device_facts,
    device_fit_subset_size,
    device_refine_iterations,
    exact_posterior_flops,
    fit_flops,
    measure_device_facts,
    posterior_cache_flops,
    sketch_time_budget,
)
from botorch_sketch.models.dictionary_policy import LeverageScorePolicy
from botorch_sketch.models.sketch_state import hyperparameter_state

CPU = DeviceFacts(flop_rate=2e10, free_memory=8 * 2**30)  # a few CPU cores
GPU = DeviceFacts(flop_rate=5e13, free_memory=70 * 2**30)  # an H100, float64


def test_cap_is_the_largest_affordable_size():
    n, d = 100_000, 6
    m = device_dictionary_cap(CPU, n, d, time_budget=1.0)
    assert posterior_cache_flops(n, m, d) <= CPU.flop_rate
    assert posterior_cache_flops(n, m + 1, d) > CPU.flop_rate
    roomy = DeviceFacts(flop_rate=CPU.flop_rate, free_memory=2**40)  # time binds
    m = device_dictionary_cap(roomy, n, d)  # the default budget T(n)
    flops = roomy.flop_rate * sketch_time_budget(n)
    assert posterior_cache_flops(n, m, d) <= flops < posterior_cache_flops(n, m + 1, d)


def test_gpu_gets_thousands_where_a_cpu_gets_hundreds():
    n, d = 100_000, 6
    cpu = device_dictionary_cap(CPU, n, d)
    gpu = device_dictionary_cap(GPU, n, d)
    assert 100 <= cpu < gpu / 2 and gpu >= 5000


def test_cap_grows_with_time_and_holds_with_data():
    assert device_dictionary_cap(CPU, 10_000, 6, time_budget=4.0) > (
        device_dictionary_cap(CPU, 10_000, 6, time_budget=1.0)
    )
    # A fixed time budget buys fewer points as n grows ...
    assert device_dictionary_cap(CPU, 1_000_000, 6, time_budget=1.0) < (
        device_dictionary_cap(CPU, 10_000, 6, time_budget=1.0)
    )
    # ... the default one holds it up to REFERENCE_POINTS, then grows it.
    roomy = DeviceFacts(flop_rate=CPU.flop_rate, free_memory=2**40)  # time binds
    ref = budget.REFERENCE_POINTS
    small = [device_dictionary_cap(roomy, n, 6) for n in (ref // 2, ref)]
    assert min(small) >= 0.85 * max(small)
    caps = [device_dictionary_cap(roomy, n, 6) for n in (ref, 4 * ref, 16 * ref)]
    assert caps[0] < caps[1] < caps[2]
    assert caps[2] == pytest.approx(2 * caps[0], rel=0.2)  # like n^(1/4)
    T = sketch_time_budget
    assert T(ref // 2) - T(ref // 4) == pytest.approx(T(ref) - T(3 * ref // 4))
    assert T(4 * ref) - T(3 * ref) > 3 * (T(ref) - T(3 * ref // 4))  # superlinear


def test_memory_binds_and_small_data_use_every_point():
    tight = DeviceFacts(flop_rate=1e15, free_memory=2**30)
    n = 1_000_000
    m = device_dictionary_cap(tight, n, 6, memory_fraction=0.5)
    assert MEMORY_BLOCKS * n * m * tight.itemsize <= 0.5 * 2**30
    assert MEMORY_BLOCKS * n * (m + 1) * tight.itemsize > 0.5 * 2**30
    assert device_dictionary_cap(GPU, 300, 6) == 300  # m <= n
    slow = DeviceFacts(flop_rate=1.0, free_memory=1.0)
    assert device_dictionary_cap(slow, 10_000, 6) == 1  # never below one point


def test_exact_posterior_is_affordable_where_it_costs_no_more_than_the_cap():
    n, d = 2_000, 6
    assert exact_posterior_flops(n, d) == pytest.approx(
        3 * n * n * d + (1 + EXACT_INVERSE_WEIGHT) * n**3 / 3
    )
    # One CPU (the modelled rate): the cap binds at n = 2,000 and 6,000; the
    # exact posterior is cheaper than the capped sketch at 2,000, not at 6,000.
    cpu = DeviceFacts(flop_rate=CPU_FLOP_RATE, free_memory=8 * 2**30)
    for n, expected in ((2_000, True), (6_000, False)):
        cap = device_dictionary_cap(cpu, n, d)
        assert cap < n
        assert device_affords_exact(cpu, n, d, cap) is expected
        assert (exact_posterior_flops(n, d) <= posterior_cache_flops(n, cap, d)) is (
            expected
        )
    # A GPU affords 16,000 points; memory rules it out where n x n blocks do not fit.
    assert device_affords_exact(GPU, 16_000, d, device_dictionary_cap(GPU, 16_000, d))
    small = DeviceFacts(
        flop_rate=GPU.flop_rate, free_memory=2 * EXACT_MEMORY_BLOCKS * 8 * 1e6
    )
    assert not device_affords_exact(small, 2_000, d, 2_000)  # 4 x 4e6 x 8 B > 50 %
    assert device_affords_exact(small, 1_000, d, 1_000)  # 4 x 1e6 x 8 B = 50 %
    with pytest.raises(ValueError, match="cap"):
        device_affords_exact(cpu, 100, d, 0)


def test_fit_subset_follows_the_flop_rate():
    s = device_fit_subset_size(GPU, 10**6)
    flops = FIT_EFFICIENCY * GPU.flop_rate * budget.FIT_SECONDS
    assert FIT_EVALUATIONS * fit_flops(s) <= flops < FIT_EVALUATIONS * fit_flops(s + 1)
    assert s >= 4000  # a GPU fits on thousands of points
    assert device_fit_subset_size(CPU, 10**6) == MIN_FIT_SUBSET_SIZE  # the floor
    assert device_fit_subset_size(GPU, 700) == 700  # never more than n
    assert device_fit_subset_size(CPU, 10**6, minimum=10) < MIN_FIT_SUBSET_SIZE


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"n": 0}, "n"),
        ({"n": True}, "n"),
        ({"d": 0}, "d"),
        ({"time_budget": 0.0}, "time_budget"),
        ({"time_budget": True}, "time_budget"),
        ({"memory_fraction": 1.5}, "memory_fraction"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, name):
    args = {"facts": CPU, "n": 100, "d": 2, **kwargs}
    with pytest.raises((TypeError, ValueError), match=name):
        device_dictionary_cap(**args)


def refine_seconds(facts, n):
    flops = REFINE_ITERATIONS * REFINE_EVALUATIONS * fit_flops(n)
    return flops / (REFINE_EFFICIENCY * facts.flop_rate)


def test_refinement_is_what_the_time_and_memory_budgets_afford():
    h200 = DeviceFacts(flop_rate=4.27e13, free_memory=130 * 2**30)
    affordable = [
        n for n in range(1001, 40001, 500) if device_refine_iterations(h200, n)
    ]
    assert 15_000 < max(affordable) < 25_000 and min(affordable) == 1001
    for n in (2_000, max(affordable), max(affordable) + 500):
        fits = refine_seconds(h200, n) <= sketch_time_budget(n)
        assert device_refine_iterations(h200, n) == (REFINE_ITERATIONS if fits else 0)
    # Up to the floor the subsample is every point: nothing to refine.
    assert device_refine_iterations(h200, MIN_FIT_SUBSET_SIZE) == 0
    # The modelled CPU never affords it beyond the floor.
    cpu = device_facts("cpu")
    assert not any(device_refine_iterations(cpu, n) for n in (1001, 1500, 4000, 10**5))
    # Memory: four n x n blocks within half the free memory.
    small = DeviceFacts(flop_rate=4.27e13, free_memory=4 * 4 * 8000**2 * 8 * 1.0)
    assert device_refine_iterations(small, 16_000) == 0
    assert device_refine_iterations(small, 8_000) == REFINE_ITERATIONS
    with pytest.raises(ValueError, match="n"):
        device_refine_iterations(h200, 0)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"n": 0}, "n"),
        ({"time_budget": -1.0}, "time_budget"),
        ({"minimum": 0}, "minimum"),
    ],
)
def test_bad_fit_subset_arguments_name_themselves(kwargs, name):
    with pytest.raises((TypeError, ValueError), match=name):
        device_fit_subset_size(**{"facts": CPU, "n": 100, **kwargs})


def test_bad_facts_name_themselves():
    with pytest.raises(ValueError, match="flop_rate"):
        DeviceFacts(flop_rate=0.0, free_memory=1.0)
    with pytest.raises(TypeError, match="itemsize"):
        DeviceFacts(flop_rate=1.0, free_memory=1.0, itemsize=True)


def test_cpu_facts_are_modelled_and_follow_the_dtype():
    f64 = device_facts("cpu", torch.float64)
    f32 = device_facts("cpu", torch.float32)
    assert f64.flop_rate == f32.flop_rate == CPU_FLOP_RATE  # the same every run
    assert (f64.itemsize, f32.itemsize) == (8, 4) and f64.free_memory > 0


def test_measured_cpu_facts_are_positive():
    facts = measure_device_facts("cpu", size=128)
    assert facts.flop_rate > 0 and facts.free_memory > 0 and facts.itemsize == 8
    assert device_dictionary_cap(facts, 1_000, 2) >= 1


# ----------------------------------------------------------- the model honours it

#: Fake facts: the cap of n = 300 points in 2 dimensions is a few tens.
SLOW = DeviceFacts(flop_rate=3e6, free_memory=2**40)


@pytest.fixture
def slow_device(monkeypatch):
    """Every device looks like ``SLOW`` (of the asked itemsize); records the asks."""
    asked = []

    def fake(device="cpu", dtype=torch.float64):
        asked.append((torch.device(device), dtype))
        size = torch.empty(0, dtype=dtype).element_size()
        return DeviceFacts(SLOW.flop_rate, SLOW.free_memory, size)

    monkeypatch.setattr(dictionary_policy, "device_facts", fake)
    monkeypatch.setattr(nystrom_fit, "device_facts", fake)
    return asked


def data(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    Y = torch.sin(6 * X).sum(-1, keepdim=True)
    return X, Y + 0.01 * torch.randn(n, 1, generator=g, dtype=torch.float64)


def cap_of(n, d=2, itemsize=8):
    facts = DeviceFacts(SLOW.flop_rate, SLOW.free_memory, itemsize)
    return device_dictionary_cap(facts, n, d)


def test_device_cap_is_honoured_by_fit_resample_and_conditioning(slow_device):
    X, Y = data(300)
    assert 5 < cap_of(300) < 150 and cap_of(340) <= cap_of(300) + 5
    model = NystromGP(X, Y, seed=0, exact_max_n=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        report = model.dictionary_report
        assert report["cap"] == cap_of(300)
        assert report["size"] <= cap_of(300) and report["capped"]
        assert report["residual"] is not None  # the criterion's value, reported
        assert report["fit_subset_size"] == 300  # below the floor: every point
        assert model.resample_dictionary().numel() <= cap_of(300)
        Xn, Yn = data(40, seed=1)
        new = model.condition_and_resample(Xn, Yn)
        assert new.dictionary_size <= cap_of(340)
        assert new.dictionary_report["cap"] == cap_of(340)
    assert all(device == X.device for device, _ in slow_device)


def test_report_keeps_the_cap_in_force_at_the_draw(monkeypatch):
    """On a GPU the free memory, and so the device's cap, drops once the fitted
    model holds its blocks: the report gives the cap its dictionary was drawn
    under, not a later reading."""
    X, Y = data(300)
    free = {"bytes": MEMORY_BLOCKS * 300 * 8 * 60 * 2.0}  # the memory term: 60 points

    def fake(device="cpu", dtype=torch.float64):
        return DeviceFacts(1e15, free["bytes"], 8)

    monkeypatch.setattr(dictionary_policy, "device_facts", fake)
    monkeypatch.setattr(nystrom_fit, "device_facts", fake)
    model = NystromGP(X, Y, seed=0, exact_max_n=0, q_bar=20.0)
    assert model.dictionary_size <= 60 and model.dictionary_report["capped"]
    free["bytes"] /= 2  # the model's own blocks now hold memory
    assert model.dictionary_report["cap"] == 60
    assert model.dictionary_policy.cap_for(X) == 30
    # A new draw carries the cap it was made within.
    assert model.dictionary_policy.fresh(model).cap == 30


def test_device_cap_follows_the_dtype_of_the_data(slow_device):
    X, Y = data(300)
    policy = LeverageScorePolicy()
    assert policy.cap_for(X) == cap_of(300)
    assert slow_device[-1] == (X.device, torch.float64)
    policy.cap_for(X.float())
    assert slow_device[-1] == (X.device, torch.float32)
    assert policy.cap(300, 8, 2, X.device) == cap_of(300)


def test_explicit_budgets_override_the_device(slow_device):
    X, Y = data(300)
    model = NystromGP(X, Y, seed=0, exact_max_n=0, max_dictionary_size=200)
    assert model.dictionary_report["cap"] == 200
    model = NystromGP(X, Y, seed=0, fit_subset_size=100)
    assert model.dictionary_report["fit_subset_size"] == 100
    assert not slow_device or all(dt == torch.float64 for _, dt in slow_device)


def test_every_point_when_the_capped_sketch_misses_and_exact_costs_less(monkeypatch):
    """The device budget stops the draw short of the accuracy criterion; the exact
    posterior costs no more than the sketch at the cap, so every point is used
    (the posterior is then the exact GP's). A user's fixed budget, a met
    criterion or a device too slow for the exact posterior keep the sketch."""
    X, Y = data(300)
    rate = {"flops": 2e8}

    def fake(device="cpu", dtype=torch.float64):
        return DeviceFacts(rate["flops"], 2**40, 8)

    monkeypatch.setattr(dictionary_policy, "device_facts", fake)
    monkeypatch.setattr(nystrom_fit, "device_facts", fake)
    cap = device_dictionary_cap(fake(), 300, 2)
    assert cap < 300 and device_affords_exact(fake(), 300, 2, cap)
    # A smooth function: a tight tolerance makes the capped draw miss it.
    policy = LeverageScorePolicy(
        seed=0, exact_max_n=0, q_bar=20.0, residual_tolerance=1e-9
    )
    model = NystromGP(X, Y, dictionary_policy=policy).eval()
    assert model.dictionary_size == 300 and not model.dictionary_capped
    reason = model.dictionary_report["exact_reason"]
    assert "misses residual_tolerance" in reason and "model build's time" in reason
    assert model._posterior_cache()["factor"] is None  # the exact predictor
    twin = NystromGP(X, Y, dictionary="all").eval()
    twin.load_state_dict(model.state_dict())
    Xt = torch.rand(5, 2, dtype=torch.float64)
    torch.testing.assert_close(
        model.posterior(Xt).mean, twin.posterior(Xt).mean, atol=1e-10, rtol=0
    )
    for other in (
        replace(policy, max_dictionary_size=cap),  # the user's budget
        replace(policy, residual_tolerance=1e6),  # the criterion is met
    ):
        sketched = NystromGP(X, Y, dictionary_policy=other)
        assert sketched.dictionary_size <= cap and sketched.dictionary_capped
        assert sketched.dictionary_report["exact_reason"] is None
    rate["flops"] = 3e6  # the cap is a few tens: E(300) > F(cap)
    slow = NystromGP(X, Y, dictionary_policy=policy)
    assert slow.dictionary_size < 100 and slow.dictionary_capped
    # Between the windows: the exact caches cost more than the capped sketch's
    # (E(300) > F(cap)) but fit a model build's time, so the default "build"
    # window takes every point and "posterior" (the Ax strategies') the sketch.
    rate["flops"] = 2e7
    cap = device_dictionary_cap(fake(), 300, 2)
    assert exact_posterior_flops(300, 2) > posterior_cache_flops(300, cap, 2)
    built = NystromGP(X, Y, dictionary_policy=policy)
    assert built.dictionary_size == 300 and built.exact_window == "build"
    posterior = replace(policy, exact_window="posterior")
    sketched = NystromGP(X, Y, dictionary_policy=posterior)
    assert sketched.dictionary_size <= cap and sketched.dictionary_capped
    flat = NystromGP(X, Y, seed=0, exact_max_n=0, exact_window="posterior")
    assert flat.dictionary_policy.exact_window == "posterior"


def test_the_build_window_holds_the_posterior_window():
    # The exact posterior where its caches fit a model build's time: on one CPU
    # (the modelled rate) up to about 5,100 points whatever d, against about
    # 2,900 where they must cost no more than the capped sketch's.
    cpu = DeviceFacts(flop_rate=CPU_FLOP_RATE, free_memory=8 * 2**30)
    for d in (2, 6, 20):
        for n in (1_000, 2_000, 2_900, 4_000, 5_000, 5_200, 8_000):
            cap = device_dictionary_cap(cpu, n, d)
            post = device_affords_exact(cpu, n, d, cap)
            build = device_affords_exact(cpu, n, d, cap, window="build")
            assert build or not post
            expected = exact_posterior_flops(n, d) <= CPU_FLOP_RATE * (
                sketch_time_budget(n) + FIT_SECONDS
            )
            assert build is expected
            assert build is (n <= 5_000)
        assert not device_affords_exact(cpu, 4_000, d, cap)
    with pytest.raises(ValueError, match="window must be one of"):
        device_affords_exact(cpu, 100, 2, 10, window="all")
    with pytest.raises(ValueError, match="exact_window must be one of"):
        LeverageScorePolicy(exact_window="exact")


def test_a_draw_that_keeps_most_points_goes_exact_only_where_it_fits(monkeypatch):
    """A draw keeping most of the n <= cap points becomes every point (the exact
    posterior) only where the exact posterior's n x n blocks fit the memory
    rule; with memory for the sketch's blocks but not for those, the draw stays."""
    X, Y = data(300)
    memory = {"bytes": 2**40}

    def fake(device="cpu", dtype=torch.float64):
        return DeviceFacts(CPU_FLOP_RATE, memory["bytes"], 8)

    monkeypatch.setattr(dictionary_policy, "device_facts", fake)
    monkeypatch.setattr(nystrom_fit, "device_facts", fake)
    policy = LeverageScorePolicy(seed=0, exact_max_n=0, q_bar=10.0)  # ~240 of 300
    model = NystromGP(X, Y, dictionary_policy=policy)
    assert model.dictionary_size == 300
    assert model.dictionary_report["exact_reason"] == "the draw kept most points"
    # Room for 2 blocks of 300 x 300 (the sketch at m = n) but not for 4.
    memory["bytes"] = int(2 * 3 * 300 * 300 * 8)
    assert device_dictionary_cap(fake(), 300, 2) >= 300
    assert not budget.exact_fits_memory(fake(), 300)
    model = NystromGP(X, Y, dictionary_policy=policy)
    assert model.dictionary_size < 300
    assert model.dictionary_report["exact_reason"] is None


# ------------------------------------------------- refinement on every point


def fitted(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def full_loss(model):
    r"""The fit objective (exact likelihood and priors) on every training point."""
    model.train()
    with torch.no_grad():
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        return float(model.compute_custom_loss(mll).sum())


@pytest.fixture
def fast_device(monkeypatch):
    """Every device looks like a GPU that affords the refinement."""

    def fake(device="cpu", dtype=torch.float64):
        return DeviceFacts(4e13, 2**40, torch.empty(0, dtype=dtype).element_size())

    monkeypatch.setattr(nystrom_fit, "device_facts", fake)


def test_refinement_lowers_the_full_data_objective(fast_device, caplog):
    X, Y = data(1100)
    plain = NystromGP(X, Y, seed=0, fit_subset_size=150, refine_iterations=0)
    refined = NystromGP(X, Y, seed=0, fit_subset_size=150)  # "device": affords it
    assert nystrom_fit.refine_iterations(plain) == 0
    assert nystrom_fit.refine_iterations(refined) == REFINE_ITERATIONS
    with caplog.at_level("INFO", logger=nystrom_fit.__name__):
        fitted(plain), fitted(refined)
    assert "refined on all 1100 points" in caplog.text
    assert refined.dictionary_report["refine_iterations"] == REFINE_ITERATIONS
    # L-BFGS-B from the subsample's optimum never raises the objective.
    assert full_loss(refined) < full_loss(plain) - 1e-6
    # The recorded loss is the subsample's at the kept hyperparameters (what
    # the warm-start drift check compares against).
    assert refined.fit_record[1] == pytest.approx(nystrom_fit.subsample_loss(refined))


def test_no_refinement_on_a_cpu_with_a_sketch_objective_or_every_point():
    X, Y = data(1100)
    assert nystrom_fit.refine_iterations(NystromGP(X, Y, seed=0)) == 0  # modelled CPU
    assert (
        nystrom_fit.refine_iterations(
            NystromGP(X, Y, seed=0, fit_subset_size=100, refine_iterations=4)
        )
        == 4
    )  # asked for: also on a CPU
    sketch = NystromGP(X, Y, seed=0, objective="vfe", refine_iterations=4)
    every = NystromGP(X, Y, seed=0, fit_subset_size=None, refine_iterations=4)
    assert nystrom_fit.refine_iterations(sketch) == 0
    assert nystrom_fit.refine_iterations(every) == 0


def test_a_failed_refinement_keeps_the_subsample_fit(monkeypatch, caplog):
    X, Y = data(400)
    plain = fitted(NystromGP(X, Y, seed=0, fit_subset_size=100, refine_iterations=0))
    real = nystrom_fit._fit_fallback

    def failing_on_every_point(mll, **kwargs):
        if mll.model.num_training_points == 400:
            raise nystrom_fit.ModelFittingError("no")
        return real(mll=mll, **kwargs)

    monkeypatch.setattr(nystrom_fit, "_fit_fallback", failing_on_every_point)
    with caplog.at_level("WARNING", logger=nystrom_fit.__name__):
        model = fitted(
            NystromGP(X, Y, seed=0, fit_subset_size=100, refine_iterations=3)
        )
    assert "refinement on every point failed" in caplog.text
    for key, value in hyperparameter_state(plain).items():
        torch.testing.assert_close(hyperparameter_state(model)[key], value)


def test_the_refinement_takes_its_own_tolerance_and_iterations(monkeypatch):
    X, Y = data(400)
    real, calls = nystrom_fit._fit_fallback, []

    def recording(mll, **kwargs):
        options = kwargs.get("optimizer_kwargs", {}).get("options", {})
        calls.append((mll.model.num_training_points, dict(options)))
        return real(mll=mll, **kwargs)

    monkeypatch.setattr(nystrom_fit, "_fit_fallback", recording)
    fitted(
        NystromGP(
            X, Y, seed=0, fit_subset_size=100, refine_iterations=3,
            fit_tolerance=1e-7, fit_max_iterations=40,
        )
    )  # fmt: skip
    assert calls[0] == (100, {"maxiter": 40, "ftol": 1e-7})  # the subsample fit
    assert calls[-1] == (
        400,
        {"ftol": nystrom_fit.REFINE_TOLERANCE, "maxiter": 3},
    )  # every point: the refinement's own ftol and bound
