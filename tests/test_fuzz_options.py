r"""Random bad options at the public entry points.

Each entry point has a table of options with values it must refuse. A seeded
generator draws cases: one bad option, plus a random subset of valid options
around it. Every case must raise ``ValueError`` or ``TypeError`` whose message
names the bad option, and must leave what existed before unchanged (a fitted
model's state, the training data).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
import torch
from gpytorch.kernels import RBFKernel

from botorch_sketch.ax import get_generation_strategy
from botorch_sketch.bbkb.config import BBKBConfig
from botorch_sketch.loops.bbkb import run_bbkb
from botorch_sketch.models import NystromGP
from botorch_sketch.optim import optimize_acqf_adaptive_batch

DT = torch.float64
CASES = 40  # draws per entry point

#: Values no numeric option accepts.
NOT_A_NUMBER = ["a", [], None, float("nan"), float("inf")]


def data(n: int = 30, d: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, d, generator=g, dtype=DT)
    return X, torch.sin(6 * X).sum(-1, keepdim=True)


# (valid values, bad values) per option.
NYSTROM: dict[str, tuple[list[Any], list[Any]]] = {
    "q_bar": ([1.0, 3.0], [0.0, -1.0, True, *NOT_A_NUMBER[:2], math.nan]),
    "max_dictionary_size": ([10, 20], [0, -3, True, 2.5, "10"]),
    "fit_subset_size": ([15, None], [0, -1, False, 7.5]),
    "exact_max_n": ([0], [-1, True, 1.5]),
    "seed": ([0, 7, 2**32 - 1], ["a", 1.5, True, -1, 2**32, 2**70]),
    "refit_max_iterations": ([5], [0, True, 2.5]),
    "fit_max_iterations": ([5, None], [0, True, 2.5]),
    "fit_tolerance": ([1e-6, None], [0, -1.0, True, "a", math.nan]),
    "refine_iterations": (["device", 0, 3], [-1, True, 2.5, "gpu", None]),
    "objective": (["exact", "vfe"], ["elbo", 3, None]),
    "dictionary_policy": ([None], ["bless", 3]),
    "fit_options": ([None], [{"objective": "vfe"}, "exact"]),
}

BBKB: dict[str, tuple[list[Any], list[Any]]] = {
    "C": ([1.5, 2.0], [0.5, -1.0, True, *NOT_A_NUMBER]),
    "q_bar": ([1.0, 2.0], [0.0, -2.0, True, "x"]),
    "rule": (["global", "global_local"], ["greedy", 3]),
    "repeats": (["union", "per_pull"], ["all", 0]),
    "resparsify": (["auto", "rebuild"], ["sometimes", None]),
    "chunk_size": ([64], [0, -1, True, 2.5]),
    "delta": ([None, 0.1], [0.0, 1.0, 1.5, True, "a"]),
}

STRATEGY: dict[str, tuple[list[Any], list[Any]]] = {
    "seed": ([0, 3], ["a", 1.5, True, -1, 2**32, 2**70]),
    "initialization_budget": ([3, 5], [0, -1, True, 2.5]),
    "num_restarts": ([4], [0, -2, True, 1.5]),
    "raw_samples": ([64], [0, True, 3.5]),
    "q_bar": ([2.0], [0.0, -1.0, True, "x"]),
    "C": ([2.0], [0.5, True, float("nan")]),
    "max_dictionary_size": ([500], [0, True, 2.5]),
    "refine_iterations": (["device", 0], [-1, True, 2.5, "gpu"]),
    "thompson_fill": ([0.0, 0.5], [-0.1, 1.5, True, "a"]),
    "basin_share": ([0.0, 0.5], [-0.1, 1.5, True, "a"]),
    "stall_basin_share": ([None, 0.5], [-0.1, 1.5, True, "a"]),
    "min_batch_size": ([1, 4], [0, True, 2.5]),
}

ADAPTIVE: dict[str, tuple[list[Any], list[Any]]] = {
    "alpha": ([1.0, 0.0], [-1.0, True, float("nan"), "a"]),
    "max_batch_size": ([4], [0, -1, True, 2.5]),
    "num_restarts": ([2], [0, True, 1.5]),
    "raw_samples": ([32], [0, True, 1.5]),
    "seed": ([0], ["a", 1.5, True, -1, 2**70]),
    "thompson_fill": ([0.0], [-0.5, 2.0, True]),
    "basin_share": ([0.0, 1.0], [-0.5, 2.0, True]),
    "stall_basin_share": ([None, 1.0], [-0.5, 2.0, True]),
    "hallucination": (["full"], ["some", 3]),
}


def draw_cases(
    table: dict[str, tuple[list[Any], list[Any]]], seed: int
) -> list[tuple[str, Any, dict[str, Any]]]:
    r"""``CASES`` cases ``(bad option, bad value, valid other options)``."""
    rng = random.Random(seed)
    names = sorted(table)
    cases = []
    for _ in range(CASES):
        bad = rng.choice(names)
        value = rng.choice(table[bad][1])
        others = {
            name: rng.choice(table[name][0])
            for name in names
            if name != bad and rng.random() < 0.5
        }
        cases.append((bad, value, others))
    return cases


def assert_refused(
    call: Callable[..., Any], args: tuple, kwargs: dict[str, Any], name: str
) -> None:
    r"""``call(*args, **kwargs)`` raises an error whose message names ``name``."""
    with pytest.raises((ValueError, TypeError)) as info:
        call(*args, **kwargs)
    assert name in str(info.value), (name, kwargs.get(name), str(info.value))


#: Options that may go with an explicit dictionary_policy / fit_options object.
NYSTROM_POLICY_FREE = {"refit_max_iterations"}


def test_nystrom_gp_constructor():
    X, Y = data()
    for name, value, others in draw_cases(NYSTROM, seed=0):
        if name in ("dictionary_policy", "fit_options"):
            others = {k: v for k, v in others.items() if k in NYSTROM_POLICY_FREE}
        assert_refused(NystromGP, (X, Y), {**others, name: value}, name)


def test_bbkb_config_and_run_bbkb():
    arms = torch.rand(40, 2, dtype=DT, generator=torch.Generator().manual_seed(1))

    def oracle(idx: torch.Tensor) -> torch.Tensor:
        return arms[idx].sum(-1)

    for k, (name, value, others) in enumerate(draw_cases(BBKB, seed=1)):
        assert_refused(BBKBConfig, (), {**others, name: value}, name)
        if k % 8 == 0:  # the loop's own entry point validates the same way
            loop_options = {"T": 5, "kernel": RBFKernel(), "lam": 0.01}
            loop_options.update(progress=False, **others)
            loop_options[name] = value
            assert_refused(run_bbkb, (arms, oracle), loop_options, name)


def test_get_generation_strategy():
    for name, value, others in draw_cases(STRATEGY, seed=2):
        assert_refused(
            get_generation_strategy, ("bbkb",), {**others, name: value}, name
        )


def test_adaptive_batch_optimizer_leaves_the_model_unchanged():
    X, Y = data(n=25)
    model = NystromGP(X, Y, seed=0, exact_max_n=0, max_dictionary_size=15)
    indices = model.dictionary_indices.clone()  # drawn on first use
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DT)
    valid = {"rule": "global"}
    for name, value, others in draw_cases(ADAPTIVE, seed=3):
        kwargs = {"alpha": 1.0, "max_batch_size": 4, **valid, **others}
        kwargs[name] = value
        assert_refused(optimize_acqf_adaptive_batch, (model, bounds), kwargs, name)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(model.dictionary_indices, indices)


def test_bad_new_data_leaves_a_fitted_model_unchanged():
    X, Y = data(n=25)
    model = NystromGP(X, Y, seed=0, exact_max_n=0, max_dictionary_size=15)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    good_X = torch.rand(3, 2, dtype=DT)
    bad = [
        (good_X, torch.full((3, 1), float("nan"), dtype=DT), "Y"),
        (good_X, torch.rand(4, 1, dtype=DT), "Y"),
        (torch.rand(3, 5, dtype=DT), torch.rand(3, 1, dtype=DT), "X"),
        (good_X.clone().fill_(float("inf")), torch.rand(3, 1, dtype=DT), "X"),
    ]
    rng = random.Random(4)
    for _ in range(12):
        X_new, Y_new, name = rng.choice(bad)
        with pytest.raises((ValueError, TypeError, RuntimeError)) as info:
            model.condition_on_observations(X_new, Y_new)
        assert name in str(info.value), str(info.value)
        with pytest.raises((ValueError, TypeError, RuntimeError)):
            model.condition_and_resample(X_new, Y_new)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert model.train_inputs[0].shape[-2] == 25
