"""Each shared default is written once: the entry points that expose it agree.

The BBKB engine's options live in :class:`~botorch_sketch.bbkb.config.BBKBConfig`,
the model's in :class:`~botorch_sketch.models.dictionary_policy.LeverageScorePolicy`
and :class:`~botorch_sketch.models.fit_options.NystromFitOptions`, the batch
optimizer's in :class:`~botorch_sketch.optim.AdaptiveBatchInputs`; every other
signature or options table that exposes one of them must show the same value.
"""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from botorch_sketch.acquisition.bbkb import (
    DEFAULT_HALLUCINATION,
    BatchUpperConfidenceBound,
)
from botorch_sketch.ax.acquisition import ADAPTIVE_BATCH_OPTIONS
from botorch_sketch.ax.library import BBKBLibraryGenerator
from botorch_sketch.ax.strategies import strategy_options
from botorch_sketch.bbkb.config import BBKBConfig
from botorch_sketch.bbkb.exact import ExactBUCBEngine
from botorch_sketch.loops.bbkb import run_bbkb, run_gp_bucb, run_gp_ucb
from botorch_sketch.models.dictionary_policy import LeverageScorePolicy
from botorch_sketch.models.fit_options import NystromFitOptions
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.optim.adaptive_batch import (
    DEFAULT_C,
    AdaptiveBatchInputs,
    optimize_acqf_adaptive_batch,
)


def defaults(func) -> dict:
    """The keyword defaults of ``func``'s signature."""
    return {
        name: p.default
        for name, p in inspect.signature(func).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def field_defaults(cls) -> dict:
    return {f.name: f.default for f in fields(cls)}


def same(a, b) -> bool:
    return a is b or a == b


def test_run_bbkb_keywords_are_bbkb_configs_defaults():
    config = field_defaults(BBKBConfig)
    given = defaults(run_bbkb)
    assert set(config) <= set(given)
    assert {k: given[k] for k in config} == config


@pytest.mark.parametrize("func", [run_gp_bucb, ExactBUCBEngine.__init__])
def test_exact_baselines_share_bbkb_configs_defaults(func):
    config = field_defaults(BBKBConfig)
    given = defaults(func)
    shared = {"C", "beta", "xi", "delta", "F"}
    assert shared <= set(given)
    assert all(same(given[k], config[k]) for k in shared), given
    assert defaults(run_gp_ucb)["beta"] == config["beta"]


def test_nystrom_gp_flat_options_are_the_option_objects_defaults():
    given = defaults(NystromGP.__init__)
    policy = field_defaults(LeverageScorePolicy)
    fit = field_defaults(NystromFitOptions)
    flat = {"q_bar", "max_dictionary_size", "memory_budget_gb", "exact_max_n", "seed"}
    assert {k: given[k] for k in flat} == {k: policy[k] for k in flat}
    assert {k: given[k] for k in fit} == fit


@pytest.mark.parametrize("name", ["bbkb", "bkb"])
def test_ax_strategy_options_are_the_models_and_engines_defaults(name):
    options = strategy_options(name)
    model = defaults(NystromGP.__init__)
    for key in (
        "q_bar",
        "max_dictionary_size",
        "fit_subset_size",
        "exact_max_n",
        "refit_growth",
        "refit_tolerance",
        "refit_max_iterations",
        "fit_max_iterations",
        "fit_tolerance",
        "refine_iterations",
    ):
        assert same(options[key], model[key]), key
    if "C" in options:  # BKB fixes C = 1
        assert options["C"] == BBKBConfig.C
    library = defaults(BBKBLibraryGenerator.__init__)
    assert library["C"] == BBKBConfig.C and library["q_bar"] == BBKBConfig.q_bar
    # One oversampling factor for the model's dictionary and the engine's.
    assert model["q_bar"] == BBKBConfig.q_bar


def test_batch_optimizer_acquisition_and_ax_agree():
    signature = defaults(optimize_acqf_adaptive_batch)
    inputs = field_defaults(AdaptiveBatchInputs)
    assert signature == {k: inputs[k] for k in signature}
    assert DEFAULT_C == BBKBConfig.C
    assert signature["hallucination"] == DEFAULT_HALLUCINATION
    assert defaults(BatchUpperConfidenceBound.__init__)["hallucination"] == (
        DEFAULT_HALLUCINATION
    )
    assert defaults(BatchUpperConfidenceBound.from_botorch_beta)["hallucination"] == (
        DEFAULT_HALLUCINATION
    )
    # Ax's acquisition options mirror the optimizer's (its own: rule, seed,
    # candidate_set, allow_repeats for distinct arms).
    assert ADAPTIVE_BATCH_OPTIONS["C"] == DEFAULT_C
    for key in (
        "min_batch_size",
        "num_reference_points",
        "reuse_restarts",
        "thompson_fill",
        "basin_share",
        "stall_basin_share",
    ):
        assert same(ADAPTIVE_BATCH_OPTIONS[key], signature[key]), key
    # The strategies share the optimizer's batch settings except the Thompson
    # fill, which they turn on (benchmarks/results/bbkb_exploration.md, sec. 8).
    options = strategy_options("bbkb")
    for key in ("min_batch_size", "reuse_restarts", "basin_share", "stall_basin_share"):
        assert same(options[key], signature[key]), key
    assert options["max_batch_size"] is ADAPTIVE_BATCH_OPTIONS["max_batch_size"]
