r"""Named Ax generation strategies for the package's methods.

``get_generation_strategy(name, **options)`` returns a ``GenerationStrategy`` of a
seeded Sobol initialisation followed by Ax's modular BoTorch generator
(``Generators.BOTORCH_MODULAR``) with our model, acquisition function and, for the
adaptive-batch methods, :class:`~botorch_sketch.ax.AdaptiveBatchAcquisition`:

- ``"bkb"``: ``NystromGP`` + ``BatchUpperConfidenceBound``, one arm per batch (BKB,
  Calandriello et al., COLT 2019; rule ``"bkb"``);
- ``"bbkb"``: as above, batch size chosen by the global rule (BBKB, ICML 2020,
  Lemma 1);
- ``"bbkb-local"``: as above with the global-local rule (ICML 2020, Lemma 3);
- ``"gssbo"``: ``GradientSubsetGP`` (exact GP on a gradient-diverse subset of
  ``subset_size`` points, the Sobol points always in) + ``qUpperConfidenceBound``
  (GSSBO, Wei et al., 2025);
- ``"rssbo"``: the same with a uniformly random subset (the paper's baseline);
- ``"goucb"``: ``GOUCBModel`` (linearized neural network, gradient confidence
  set; the Sobol points are GO-UCB's Phase I) + ``qUpperConfidenceBound`` (Liu &
  Wang, ICML 2023).

How the strategies compare on test problems is in
``benchmarks/results/ax_strategies.md``.

Every option is stored in the strategy (Ax JSON) and validated here: an unknown
name or option raises a ``ValueError`` that lists what exists.

The model-based node runs on
:class:`~botorch_sketch.ax.generator.SketchBoTorchGenerator` (Ax's modular BoTorch
generator plus seeds and state):

- Reproducibility: every fit and generation runs in a random context seeded from
  ``seed`` and the number of observed and pending points (the Sobol step and the
  models take ``seed`` too), never from Ax's ``Client`` context, which a reloaded
  ``Client`` no longer has; the same experiment state therefore gives the same
  arms, also after saving and loading the experiment in a new process, whatever
  the global torch/numpy RNG state.
- State: ``NystromGP``'s hyperparameters and dictionary are carried from one call
  to the next (``generator_state_after_gen``), refitted on a schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from ax.adapter.registry import Generators
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from botorch.acquisition.monte_carlo import qUpperConfidenceBound

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound
from botorch_sketch.ax.acquisition import AdaptiveBatchAcquisition
from botorch_sketch.ax.checks import ExperimentCheck, ExperimentGuard
from botorch_sketch.ax.generator import SketchGenerators
from botorch_sketch.ax.library import LIBRARY_OPTIONS
from botorch_sketch.ax.options import validate_options
from botorch_sketch.bbkb.config import BBKBConfig
from botorch_sketch.models.goucb import GOUCBModel
from botorch_sketch.models.gssbo import GradientSubsetGP
from botorch_sketch.models.nystrom import (
    DEFAULT_EXACT_MAX_N,
    DEFAULT_FIT_SUBSET_SIZE,
    DEFAULT_MAX_DICTIONARY_SIZE,
    NystromGP,
)
from botorch_sketch.models.nystrom_inputs import (
    FIT_OPTION_DEFAULTS,
    POLICY_OPTION_DEFAULTS,
)
from botorch_sketch.optim.adaptive_batch_inputs import DEFAULT_BASIN_SHARE
from botorch_sketch.optim.stall import DEFAULT_STALL_BASIN_SHARE
from botorch_sketch.optim.step_tolerance import DEFAULT_GRADIENT_TOLERANCE

__all__ = [
    "StrategyRecipe",
    "get_generation_strategy",
    "list_generation_strategies",
]

#: Options every strategy takes, with their defaults.
COMMON_OPTIONS: dict[str, Any] = {
    "initialization_budget": 5,
    "seed": 0,
    "num_restarts": 8,
    "raw_samples": 256,
}


@dataclass(frozen=True)
class StrategyRecipe:
    r"""How to build one named strategy.

    Attributes:
        name: The registry name.
        node_name: Name of the model-based generation node.
        summary: One line for :func:`list_generation_strategies`.
        options: Method options and their defaults (besides ``COMMON_OPTIONS``).
        generator_kwargs: ``options -> generator_kwargs`` of the model-based node.
        single_objective: The method optimises one objective without outcome
            constraints (checked against the experiment at every call).
        fixed: Settings the method fixes (not options), given to
            ``generator_kwargs`` with the options; every value a builder reads
            comes from ``options`` or ``fixed``, never from a default of its own.
    """

    name: str
    node_name: str
    summary: str
    generator_kwargs: Callable[[dict[str, Any]], dict[str, Any]]
    options: Mapping[str, Any] = field(default_factory=dict)
    single_objective: bool = False
    fixed: Mapping[str, Any] = field(default_factory=dict)


# -------------------------------------------------------------------------------
# BKB / BBKB
# -------------------------------------------------------------------------------

#: ``NystromGP`` options a strategy exposes (the sketch budget, the
#: hyperparameter fit and its schedule between calls), with the model's defaults.
_SKETCH_OPTIONS: dict[str, Any] = {
    "q_bar": POLICY_OPTION_DEFAULTS["q_bar"],
    "max_dictionary_size": DEFAULT_MAX_DICTIONARY_SIZE,
    "fit_subset_size": DEFAULT_FIT_SUBSET_SIZE,
    "exact_max_n": DEFAULT_EXACT_MAX_N,
    # An acquisition function evaluates the posterior thousands of times per
    # call: the exact posterior only where it costs no more than the sketch.
    "exact_window": "posterior",
    "refit_growth": FIT_OPTION_DEFAULTS["refit_growth"],
    "refit_tolerance": FIT_OPTION_DEFAULTS["refit_tolerance"],
    "refit_max_iterations": FIT_OPTION_DEFAULTS["refit_max_iterations"],
    "fit_max_iterations": FIT_OPTION_DEFAULTS["fit_max_iterations"],
    "fit_tolerance": FIT_OPTION_DEFAULTS["fit_tolerance"],
    "refine_iterations": FIT_OPTION_DEFAULTS["refine_iterations"],
}
_NYSTROM_OPTIONS: dict[str, Any] = {
    "beta": None,
    "alpha": None,
    **_SKETCH_OPTIONS,
    "candidate_set": None,
    "allow_repeats": False,
    "gradient_tolerance": DEFAULT_GRADIENT_TOLERANCE,
    **LIBRARY_OPTIONS,
}
_BBKB_OPTIONS: dict[str, Any] = {
    **_NYSTROM_OPTIONS,
    "C": BBKBConfig.C,
    "max_batch_size": None,
    "min_batch_size": 1,
    "reuse_restarts": True,
    "restart_maxiter": None,
    "thompson_fill": 0.5,
    "basin_share": DEFAULT_BASIN_SHARE,
    "stall_basin_share": DEFAULT_STALL_BASIN_SHARE,
}
#: What BKB fixes of BBKB's batch options: one point per batch (the rule
#: ``"bkb"`` is BBKB's global rule with ``C = 1``); the box settings are BBKB's
#: (they only act on points past the rule's stop, which BKB never adds), except
#: ``basin_share = 0`` (and no ``stall_basin_share``): BKB's point is always the
#: UCB's argmax, without the basin turns of BBKB's fixed-size batches (BKB as
#: published, Calandriello et al. 2019).
_BKB_FIXED: dict[str, Any] = {
    "C": 1.0,
    "max_batch_size": None,
    "min_batch_size": 1,
    "reuse_restarts": _BBKB_OPTIONS["reuse_restarts"],
    "restart_maxiter": _BBKB_OPTIONS["restart_maxiter"],
    "thompson_fill": _BBKB_OPTIONS["thompson_fill"],
    "basin_share": 0.0,
    "stall_basin_share": None,
}


def _nystrom_kwargs(rule: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def build(opts: dict[str, Any]) -> dict[str, Any]:
        if opts["candidate_set"] is not None:
            return _library_kwargs(rule, opts)
        _check_unused(opts, LIBRARY_OPTIONS, "with a candidate_set (BBKB engine)")
        model_options = {"seed": opts["seed"]}
        model_options.update({key: opts[key] for key in _SKETCH_OPTIONS})
        acqf_options = {
            key: float(opts[key]) for key in ("alpha", "beta") if opts[key] is not None
        }
        acquisition_options = {
            "rule": rule,
            "C": float(opts["C"]),
            "max_batch_size": opts["max_batch_size"],
            "min_batch_size": opts["min_batch_size"],
            "reuse_restarts": opts["reuse_restarts"],
            "restart_maxiter": opts["restart_maxiter"],
            "gradient_tolerance": opts["gradient_tolerance"],
            "thompson_fill": float(opts["thompson_fill"]),
            "basin_share": float(opts["basin_share"]),
            "stall_basin_share": opts["stall_basin_share"],
            "candidate_set": opts["candidate_set"],
            "allow_repeats": opts["allow_repeats"],
            "seed": opts["seed"],
        }
        return {
            "surrogate_spec": SurrogateSpec(
                model_configs=[
                    ModelConfig(
                        botorch_model_class=NystromGP,
                        model_options=model_options,
                        name="NystromGP",
                    )
                ]
            ),
            "botorch_acqf_class": BatchUpperConfidenceBound,
            "botorch_acqf_options": acqf_options,
            "acquisition_class": AdaptiveBatchAcquisition,
            "acquisition_options": acquisition_options,
        }

    return build


def _library_kwargs(rule: str, opts: dict[str, Any]) -> dict[str, Any]:
    r"""A finite library: the BBKB engine (:mod:`botorch_sketch.ax.library`)."""
    sketch_only = {k: v for k, v in _SKETCH_OPTIONS.items() if k != "q_bar"}
    _check_unused(opts, sketch_only, "without a candidate_set (NystromGP)")
    box_defaults = _BKB_FIXED if rule == "bkb" else _BBKB_OPTIONS
    defaults = {**_NYSTROM_OPTIONS, **box_defaults}
    box_only = {
        k: defaults[k]
        for k in (
            "reuse_restarts",
            "restart_maxiter",
            "gradient_tolerance",
            "thompson_fill",
            "basin_share",
            "stall_basin_share",
        )
    }
    _check_unused(opts, box_only, "on a box, without a candidate_set")
    keys = ("q_bar", "alpha", "beta", "allow_repeats", "seed", *LIBRARY_OPTIONS)
    return {
        "candidate_set": opts["candidate_set"],
        "rule": rule,
        "C": float(opts["C"]),
        "max_batch_size": opts["max_batch_size"],
        "min_batch_size": opts["min_batch_size"],
        **{key: opts[key] for key in keys},
    }


def _check_unused(opts: dict[str, Any], defaults: dict[str, Any], where: str) -> None:
    changed = sorted(k for k, v in defaults.items() if opts.get(k, v) != v)
    if changed:
        raise ValueError(f"option(s) {changed} only apply {where}.")


def _uses_library(recipe: StrategyRecipe, opts: dict[str, Any]) -> bool:
    return "candidate_set" in recipe.options and opts["candidate_set"] is not None


# -------------------------------------------------------------------------------
# GSSBO / RSSBO and GO-UCB: our models with BoTorch's qUCB
# -------------------------------------------------------------------------------

_GSSBO_OPTIONS: dict[str, Any] = {"beta": 2.0, "subset_size": 100}
_GOUCB_OPTIONS: dict[str, Any] = {
    "beta": 4.0,
    "lambda_": 1.0,
    "paper_phases": False,
    "oracle_steps": 2000,
}


def _qucb_kwargs(
    model_class: type, model_options: dict[str, Any], beta: float
) -> dict[str, Any]:
    return {
        "surrogate_spec": SurrogateSpec(
            model_configs=[
                ModelConfig(
                    botorch_model_class=model_class,
                    model_options=model_options,
                    name=model_class.__name__,
                )
            ]
        ),
        "botorch_acqf_class": qUpperConfidenceBound,
        "botorch_acqf_options": {"beta": float(beta)},
    }


def _gssbo_kwargs(mode: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def build(opts: dict[str, Any]) -> dict[str, Any]:
        model_options = {
            "subset_size": opts["subset_size"],
            "mode": mode,
            "n_initial": opts["initialization_budget"],
            "seed": opts["seed"],
        }
        return _qucb_kwargs(GradientSubsetGP, model_options, opts["beta"])

    return build


def _goucb_kwargs(opts: dict[str, Any]) -> dict[str, Any]:
    lam = opts["lambda_"]
    # paper_phases: the network is fitted once on the Sobol points (GO-UCB's Phase
    # I) and later points only update the linearized confidence set (Phase II).
    # Otherwise the network is refitted on all data at every generation.
    n_init = opts["initialization_budget"] if opts["paper_phases"] else None
    model_options = {
        "n_init": n_init,
        "lambda_": float(lam),
        "seed": opts["seed"],
        "oracle": {"steps": opts["oracle_steps"]},
    }
    return _qucb_kwargs(GOUCBModel, model_options, opts["beta"])


#: Every strategy, by name.
_RECIPES: dict[str, StrategyRecipe] = {
    recipe.name: recipe
    for recipe in (
        StrategyRecipe(
            name="bkb",
            node_name="BKB",
            summary="NystromGP (DTC, leverage-score dictionary) + batch UCB, one arm "
            "per batch (Calandriello et al., COLT 2019)",
            generator_kwargs=_nystrom_kwargs("bkb"),
            options=_NYSTROM_OPTIONS,
            single_objective=True,
            fixed=_BKB_FIXED,
        ),
        StrategyRecipe(
            name="bbkb",
            node_name="BBKB",
            summary="BKB with adaptive batches, global stopping rule C (Calandriello "
            "et al., ICML 2020)",
            generator_kwargs=_nystrom_kwargs("global"),
            options=_BBKB_OPTIONS,
            single_objective=True,
        ),
        StrategyRecipe(
            name="bbkb-local",
            node_name="BBKB-local",
            summary="BBKB with the global-local stopping rule (larger batches, ICML "
            "2020 Lemma 3)",
            generator_kwargs=_nystrom_kwargs("global_local"),
            options=_BBKB_OPTIONS,
            single_objective=True,
        ),
        StrategyRecipe(
            name="gssbo",
            node_name="GSSBO",
            summary="exact GP on a gradient-diverse subset (vector gradients) + qUCB "
            "(Wei et al., 2025)",
            generator_kwargs=_gssbo_kwargs("vector"),
            options=_GSSBO_OPTIONS,
        ),
        StrategyRecipe(
            name="rssbo",
            node_name="RSSBO",
            summary="exact GP on a uniformly random subset + qUCB (GSSBO's baseline)",
            generator_kwargs=_gssbo_kwargs("random"),
            options=_GSSBO_OPTIONS,
        ),
        StrategyRecipe(
            name="goucb",
            node_name="GO-UCB",
            summary="linearized neural network with a gradient confidence set + qUCB "
            "(Liu & Wang, ICML 2023)",
            generator_kwargs=_goucb_kwargs,
            options=_GOUCB_OPTIONS,
        ),
    )
}


# -------------------------------------------------------------------------------
# turbo-bkb: TuRBO-1 on NystromGP, on its own generator (botorch_sketch.ax.turbo)
# -------------------------------------------------------------------------------
from botorch_sketch.ax.turbo import (  # noqa: E402
    TURBO_OPTIONS,
    TurboGenerators,
    turbo_generator_kwargs,
)
from botorch_sketch.trust_region.model import (  # noqa: E402
    REGION_FIT_TOLERANCE,
    REGION_REFIT_GROWTH,
)

_RECIPES["turbo-bkb"] = StrategyRecipe(
    name="turbo-bkb",
    node_name="TuRBO-BKB",
    summary="trust region around the incumbent (TuRBO-1, Eriksson et al., NeurIPS "
    "2019) on NystromGP, batches by Thompson sampling",
    generator_kwargs=partial(turbo_generator_kwargs, model_keys=tuple(_SKETCH_OPTIONS)),
    options={
        **_SKETCH_OPTIONS,
        "fit_tolerance": REGION_FIT_TOLERANCE,
        "refit_growth": REGION_REFIT_GROWTH,
        **TURBO_OPTIONS,
    },
    single_objective=True,
)
#: Strategies whose model-based node runs their own generator.
_OWN_GENERATORS = {"turbo-bkb": TurboGenerators.TURBO_BKB}


# -------------------------------------------------------------------------------
# Public API
# -------------------------------------------------------------------------------


def list_generation_strategies() -> dict[str, str]:
    r"""``{name: one-line summary}`` of every registered strategy."""
    return {name: recipe.summary for name, recipe in sorted(_RECIPES.items())}


def strategy_options(name: str) -> dict[str, Any]:
    r"""Every option of strategy ``name`` with its default."""
    recipe = _recipe(name)
    return {**COMMON_OPTIONS, **recipe.options}


def get_generation_strategy(name: str, **options: Any) -> GenerationStrategy:
    r"""A ``GenerationStrategy``: Sobol initialisation, then method ``name``.

    Args:
        name: A name from :func:`list_generation_strategies`.
        **options: ``initialization_budget`` (Sobol trials, default 5), ``seed``
            (default 0), ``num_restarts`` / ``raw_samples`` (acquisition
            optimisation on a box) and the method's own options
            (:func:`strategy_options` lists them with defaults).

    Returns:
        A ``GenerationStrategy`` named ``"Sobol+<method>"``; give it to
        ``client.set_generation_strategy``.
    """
    recipe = _recipe(name)
    opts = strategy_options(name)
    unknown = sorted(set(options) - set(opts))
    if unknown:
        raise ValueError(
            f"Unknown option(s) {unknown} for strategy {name!r}; it takes "
            f"{sorted(opts)}."
        )
    opts.update(options)
    validate_options(opts)
    generator_kwargs = recipe.generator_kwargs({**recipe.fixed, **opts})
    library = _uses_library(recipe, opts)
    if not library:
        generator_kwargs["warm_start_refit"] = False
    generator_kwargs["seed"] = opts["seed"]
    optimizer_kwargs = {
        "num_restarts": opts["num_restarts"],
        "raw_samples": opts["raw_samples"],
    }
    sobol = GenerationNode(
        name="Sobol",
        generator_specs=[
            GeneratorSpec(
                generator_enum=Generators.SOBOL,
                generator_kwargs={"seed": opts["seed"]},
            )
        ],
        transition_criteria=[
            # First: validates the strategy against the experiment at the first
            # generation call, before any trial (it never blocks the transition).
            ExperimentCheck(
                transition_to=recipe.node_name,
                strategy=name,
                single_objective=recipe.single_objective,
                candidate_width=_candidate_width(opts.get("candidate_set")),
            ),
            MinTrials(
                threshold=opts["initialization_budget"],
                transition_to=recipe.node_name,
                use_all_trials_in_exp=True,
            ),
        ],
    )
    model_node = GenerationNode(
        name=recipe.node_name,
        # The same checks before every later generation: the experiment may be
        # reconfigured after the first trials.
        pausing_criteria=[
            ExperimentGuard(
                strategy=name,
                single_objective=recipe.single_objective,
                candidate_width=_candidate_width(opts.get("candidate_set")),
            )
        ],
        generator_specs=[
            GeneratorSpec(
                generator_enum=_OWN_GENERATORS.get(name)
                or (
                    SketchGenerators.BBKB_LIBRARY
                    if library
                    else SketchGenerators.BOTORCH_SKETCH
                ),
                generator_kwargs=generator_kwargs,
                generator_gen_kwargs={
                    "model_gen_options": {"optimizer_kwargs": optimizer_kwargs}
                },
            )
        ],
    )
    return GenerationStrategy(
        name=f"Sobol+{recipe.node_name}", nodes=[sobol, model_node]
    )


def _recipe(name: str) -> StrategyRecipe:
    if name not in _RECIPES:
        raise ValueError(f"Unknown strategy {name!r}; available: {sorted(_RECIPES)}.")
    return _RECIPES[name]


def _candidate_width(candidate_set: Any) -> int | None:
    if candidate_set is None:
        return None
    return int(torch.as_tensor(candidate_set, dtype=torch.float64).shape[-1])
