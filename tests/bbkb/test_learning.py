"""Kernel hyperparameters learned during a finite-arm run."""

from __future__ import annotations

import math

import pytest
import torch
from botorch.exceptions.errors import ModelFittingError
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.bbkb import fixed_rbf_kernel, rebuild
from botorch_sketch.bbkb import learning as learning_module
from botorch_sketch.bbkb.learning import KernelLearner, KernelLearning
from botorch_sketch.loops import noisy_oracle, run_bbkb

from .conftest import DT

TRUE_LENGTHSCALE = 0.2


def gp_sample_problem(seed: int, A: int = 400):
    """Arms in [0, 1]^2 and a draw of a zero-mean GP with a known RBF kernel."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(A, 2, generator=g, dtype=DT)
    K = torch.exp(-0.5 * torch.cdist(X, X).square() / TRUE_LENGTHSCALE**2)
    L = torch.linalg.cholesky(K + 1e-8 * torch.eye(A, dtype=DT))
    return X, L @ torch.randn(A, generator=g, dtype=DT)


def trainable_rbf(lengthscale: float) -> ScaleKernel:
    k = ScaleKernel(RBFKernel()).to(DT)
    k.base_kernel.lengthscale = torch.tensor(lengthscale, dtype=DT)
    return k


def run(X, f, T, kernel, seed=0, **kw):
    oracle = noisy_oracle(f, 0.1, torch.Generator().manual_seed(seed))
    return run_bbkb(
        X, oracle, T, kernel, 1e-2, xi=0.1, seed=seed, f_true=f, progress=False, **kw
    )


def test_schedule_and_validation():
    s = KernelLearning(growth=0.5, first_fit=4)
    assert not s.due(3, None) and s.due(4, None)
    assert not s.due(14, 10) and s.due(15, 10)
    for bad in (dict(growth=0.0), dict(first_fit=1), dict(max_iterations=True)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            KernelLearning(**bad)
    X, f = gp_sample_problem(0, A=50)
    with pytest.raises(ValueError, match="trainable"):
        run(X, f, 20, fixed_rbf_kernel(0.3), learn=True)
    with pytest.raises(ValueError, match="learn"):
        run(X, f, 20, trainable_rbf(0.3), learn="yes")


@pytest.mark.outcome
@pytest.mark.parametrize("seed, start", [(0, 1.0), (1, 0.04)])
def test_learned_lengthscale_moves_to_the_truth(seed, start):
    """From 5x too long or too short, the lengthscale ends within 1.5x of the truth
    (observed within 10 % on these seeds)."""
    X, f = gp_sample_problem(seed)
    kernel = trainable_rbf(start)
    res = run(X, f, 250, kernel, seed=seed, learn=True)
    learned = float(res.kernel.base_kernel.lengthscale.detach())
    assert abs(math.log(learned / TRUE_LENGTHSCALE)) < math.log(1.5)
    # the engine learned on a copy: the caller's kernel is unchanged
    assert float(kernel.base_kernel.lengthscale.detach()) == pytest.approx(start)
    assert all(fit.success for fit in res.kernel_fits)


def test_refits_follow_the_schedule_and_reproduce():
    X, f = gp_sample_problem(2, A=200)
    schedule = KernelLearning(growth=0.5, first_fit=6, max_iterations=10)
    a = run(X, f, 150, trainable_rbf(1.0), seed=3, learn=schedule)
    b = run(X, f, 150, trainable_rbf(1.0), seed=3, learn=schedule)
    assert a.arms.tolist() == b.arms.tolist()
    steps = [fit.step for fit in a.kernel_fits]
    assert steps == [fit.step for fit in b.kernel_fits] and len(steps) >= 3
    for fa, fb in zip(a.kernel_fits, b.kernel_fits, strict=True):
        for name, value in fa.hyperparameters.items():
            assert torch.equal(value, fb.hyperparameters[name])
    # Each fit runs at the first resparsification (batch end) where it is due.
    ends = a.batch_sizes.cumsum(0).tolist()
    last = None
    for step in steps:
        assert step in ends and schedule.due(step, last)
        earlier = [e for e in ends if e < step and (last is None or e > last)]
        assert not any(schedule.due(e, last) for e in earlier)
        last = step


def test_state_after_refits_equals_a_rebuild_with_the_learned_kernel():
    X, f = gp_sample_problem(3, A=200)
    res = run(X, f, 120, trainable_rbf(1.0), learn=KernelLearning(first_fit=5))
    state = res.final_state
    assert res.kernel_fits and res.kernel is state.kernel.module
    assert float(res.kernel.base_kernel.lengthscale) != pytest.approx(1.0, rel=0.05)
    ref = rebuild(X, res.kernel, state.S_idx, state.counts, state.reward_sums, 1e-2)
    torch.testing.assert_close(state.s2_0, ref.s2_0, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(state.mu, ref.mu, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("error", [ModelFittingError, RuntimeError])
def test_a_failed_fit_keeps_the_previous_values(monkeypatch, error):
    X, f = gp_sample_problem(4, A=60)
    learner = KernelLearner(trainable_rbf(0.7), KernelLearning())
    before = {k: v.clone() for k, v in learner.module.state_dict().items()}

    def fail(mll, **kwargs):
        mll.model.covar_module.base_kernel.lengthscale = 5.0  # half-way through
        raise error("optimiser failed")

    monkeypatch.setattr(learning_module, "fit_gpytorch_mll", fail)
    counts = torch.ones(60, dtype=DT)
    g = torch.Generator().manual_seed(0)
    if error is ModelFittingError:
        assert not learner.fit(X, counts, f, 1e-2, g).success
    else:
        with pytest.raises(RuntimeError, match="optimiser"):
            learner.fit(X, counts, f, 1e-2, g)
    for k, v in learner.module.state_dict().items():
        assert torch.equal(v, before[k])


@pytest.mark.parametrize("lengthscale, kept", [(0.25, True), (40.0, False)])
def test_a_fit_is_kept_only_when_the_likelihood_improves(
    monkeypatch, lengthscale, kept
):
    """An optimiser run that ends with a warning (e.g. L-BFGS-B's abnormal line
    search) keeps its values if the likelihood rose, and is undone if it fell."""
    X, f = gp_sample_problem(4, A=60)
    learner = KernelLearner(trainable_rbf(0.7), KernelLearning(misfit=False))
    before = float(learner.module.base_kernel.lengthscale)

    def end_with_a_warning(mll, **kwargs):
        assert kwargs["warning_handler"](None)  # warnings do not fail the fit
        mll.model.covar_module.base_kernel.lengthscale = lengthscale

    monkeypatch.setattr(learning_module, "fit_gpytorch_mll", end_with_a_warning)
    counts = torch.ones(60, dtype=DT)
    fit = learner.fit(X, counts, f, 1e-2, torch.Generator().manual_seed(0))
    after = float(learner.module.base_kernel.lengthscale)
    assert fit.success is kept
    assert after == pytest.approx(lengthscale if kept else before)
