r"""``"turbo-bkb"``: trust-region BO (TuRBO-1) on ``NystromGP`` as an Ax generator.

Each Ax call of :class:`TurboGenerator` is one step of TuRBO-1 (Eriksson et al.,
NeurIPS 2019) with the sketched GP as the region's model
(:mod:`botorch_sketch.trust_region`):

1. **fit**: the observations, inputs scaled to the unit cube by the search
   space's bounds, values signed so that larger is better.
2. **gen**: the observations that arrived since the last call are the last
   batch (or, when the previous call had no model, the rest of the region's
   design, which sets the incumbent and counts neither way). A ``NystromGP``
   is fitted on the current region's data: by default the ``max(300, 30 d)``
   points nearest its best observation (``region_max_points="auto"``), or all
   of it as TuRBO (``None``). A stationary kernel fitted on all of a shrunken
   region's data sees the large-scale variation of its early, far points and
   explains the small differences around the incumbent as noise, so its
   samples stop resolving what the region refines
   (:mod:`~botorch_sketch.trust_region.window`); the local model keeps them.
   The model is fitted from its initial hyperparameters at
   every call (``region_fit="cold"``, TuRBO's choice); with ``"periodic"``, from
   its initial hyperparameters whenever the region's data grew by the fraction
   ``refit_growth`` since the last fit, the last fit's hyperparameters kept in
   between and only the posterior taking the new points (with small batches
   the fit is the strategy's main cost; ``benchmarks/results/large_budget.md``
   has what ``refit_growth=0.1`` saves and costs); with ``"warm"``, refitted
   from the previous values (:class:`~botorch_sketch.models.NystromGP`'s
   schedule: cheaper, but a region shrinks onto structure the previous
   hyperparameters do not describe, and a warm chain keeps them). The batch is
   a success when its best value beats the best value of the region's earlier
   points by ``improvement_tolerance`` relative (``incumbent="observed"``: observed
   values, as TuRBO; ``"mean"``, the default with one region: posterior means
   of the same model, which a lucky noisy draw cannot inflate; on a model of
   all the region's points they smooth a rugged function's improvements away
   and centre the region off its best point, on the window they do not), and
   :func:`~botorch_sketch.trust_region.update_state` expands, shrinks or flags a
   restart. With ``noise_tolerance=c > 0`` a success must also beat the
   incumbent by ``c`` noise standard deviations: the median of the standard
   errors reported to Ax (``(mean, sem)``), else the region model's fitted
   noise. Near a converged incumbent the best of ``q`` noisy draws often beats
   the incumbent's own noisy record by a noise-sized margin, and each such
   "success" delays the halving that would end the region (TuRBO's relative
   tolerance, ``1e-3 |b|``, is far below the noise wherever ``|b|`` is small
   against ``1000`` noise standard deviations), so a region stuck in a
   smooth objective's second basin restarts sooner. The floor also ends
   regions that still improve by less than the noise (Michalewicz-like narrow
   valleys, and small batches, whose best point gains less per batch), and a
   fitted noise absorbs what the model cannot fit (a rugged
   objective, a large region: many times the real noise), so TuRBO's rule
   (``0``) stays the default (``benchmarks/results/large_budget.md``). Then
   ``q = min(n, batch_size)`` points by Thompson sampling in the region around
   the incumbent (the best observation, or the point of largest posterior mean
   with ``incumbent="mean"``): by default samples of the
   model's joint posterior over the region's candidates, drawn from the ``A x
   A`` factor where the device affords it and by Matheron's rule beyond
   (``thompson="auto"``; ``"joint"``, ``"pathwise"`` force one);
   ``"embedding"`` samples in ``O(A m)`` but draws the Nyström residual
   independently per candidate, which scatters the batch over the region
   (:mod:`~botorch_sketch.trust_region.candidates`).
3. **Restart** (``L < length_min``). With ``restart="sobol"`` (TuRBO's rule)
   the region's data are *dropped* from the model (they stay in the
   experiment): the next points are a fresh scrambled Sobol design in the whole
   cube until the new region has ``2 d`` points, and the region state starts
   again at ``length_init``. With ``restart="reopen"`` the region keeps its data
   and its best value and reopens at ``length_init`` around the same
   incumbent, without a design. A collapsed region has found a basin whose
   coordinates are partly right; a fresh design forgets all of them, a reopened
   region searches again around them at every scale down to ``length_min`` (one
   halving per failed batch), with a model that knows the basin. Its data keep
   growing, so its fits cost more (``region_fit="periodic"`` bounds that, and
   ``region_max_points`` bounds the model's data: the points nearest the best
   observation, so that the model stays the exact GP the device affords).
   Keeping only the best point and drawing the new design around it measured
   level with the fresh design (``benchmarks/results/large_budget.md``): the
   data are what helps.

**Several regions** (``num_regions = m > 1``; TuRBO-m, Eriksson et al., NeurIPS
2019, Sec. 3; :mod:`~botorch_sketch.trust_region.regions`). Each region has its
own data, model, state machine and restarts; region 0 starts from Ax's initial
trials, the others from their own Sobol designs of ``2 d`` points, and a
collapsed region restarts alone with a new design. At each call every region
with enough data is fitted (on its window, as above) and counts its
points that arrived since it last counted (TuRBO's rule on observed values);
the batch is first the design points still owed, then ``k`` points by Thompson
sampling across the regions: the ``i``-th point is the maximiser of the
``i``-th joint samples over all regions' candidates together
(:func:`~botorch_sketch.trust_region.allocate_across_regions`), so a region
gets points in proportion to how good its samples look. Which region a point
belongs to is Ax's candidate metadata of its arm (region, epoch, call), so it
survives out-of-order completion, failed trials and JSON save/load. Each call
fits ``m`` models (cold, or with ``region_fit="periodic"`` each on its own
schedule, its kept hyperparameters in its record); ``restart`` and
``incumbent`` take their defaults.

**Parameter constraints and libraries.** Candidates that violate Ax's linear
parameter constraints are dropped. With a ``candidate_set`` (a finite library),
the candidates are the library rows in the region (the nearest rows when fewer
than ``q`` are), never a row observed or pending, and a restart's design is
random rows.

**Integer and categorical parameters.** Where every column of the model space
is discrete (integers, ordered and one-hot encoded choices), the region's
candidates are projected onto the allowed configurations and deduplicated before
the Thompson sample (:mod:`~botorch_sketch.trust_region.discrete`), those observed
or pending are dropped, and a region too small to hold ``q`` new configurations
draws its candidates from a region of doubled side (its state unchanged) until
it does: without it a shrunken region rounds every candidate to configurations
already run. Where some column is continuous, the candidates stay continuous
relaxations and Ax rounds the chosen points: the batch then never repeats a
point, and projecting measured worse there (``mixed10`` in
``benchmarks/results/large_budget.md``: median 0.26 against 0.10 over 6 seeds
at 1,000 evaluations in batches of 50; the relaxed one-hot points are
farther from the data, so their samples explore other levels more).

**Unordered choice parameters** reach the model as one-hot columns (Ax's
``OneHot`` transform); by default each group of columns shares one lengthscale
in the region's kernel (:func:`~botorch_sketch.trust_region.region_covar_module`;
``one_hot_lengthscales="per_column"``: one per column).

**Pending points** (trials running) are hallucinated at the posterior mean
(kriging believer, ``NystromGP.condition_on_observations``), so Thompson samples
do not pile onto them.

**Defaults.** ``region_fit``, ``incumbent`` and ``region_max_points`` default to
``"auto"``: at the generator's first call they are fixed for the run
(:func:`resolve_auto_options`) and kept in its state. With one region the model
takes the window of points nearest the best observation and the incumbent is
the posterior mean: the window keeps the fitted noise at the real one, so the
mean denoises instead of smoothing, and no lucky noisy observation holds the
region's centre and fails every later batch (TuRBO's rules, ``None`` and
``"observed"``, lost to this pair on most problems of the large-budget suite,
in batches of 1, 8 and 50). The fit is ``"periodic"`` when the first call
asks for one point (a cold fit at every call would be most of the run's CPU,
each fit buying a single point) and ``"cold"`` otherwise. Several regions keep
TuRBO-m's rules: observed values, all of a region's points. What each choice
measured, and where it loses (Rosenbrock-like valleys one point at a time), is
in ``benchmarks/results/which_strategy_notes.md``.

**State.** The region state, the index where the region's data start, the
number of observations seen and the sketch state (the last fit's
hyperparameters; none with ``region_fit="cold"``) are the
generator's ``_get_state()``: Ax stores them in ``generator_state_after_gen``
(also in JSON) and passes them back to the next generator, so a reloaded run
continues with the same arms. Each call's random draws are seeded from ``seed``
and the numbers of observed and pending points.

Importing this module registers :class:`TurboGenerators` with Ax's JSON decoder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from ax.adapter.registry import GeneratorRegistryBase, GeneratorSetup, MBM_X_trans
from ax.core.search_space import SearchSpaceDigest
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.generators.torch_base import TorchGenerator, TorchGenResults, TorchOptConfig
from ax.storage.json_store.registry import CORE_DECODER_REGISTRY
from botorch.utils.datasets import SupervisedDataset
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_sketch.ax.adapter import SketchTorchAdapter
from botorch_sketch.ax.encoding import discrete_columns
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.validation import (
    check_bool_free_int,
    check_choice,
    check_nonnegative_number,
)
from botorch_sketch.optim.new_points import matches_any
from botorch_sketch.trust_region import (
    THOMPSON_SAMPLERS,
    DiscreteColumns,
    TrustRegionState,
    allocate_across_regions,
    batch_candidates,
    default_num_candidates,
    fit_region_model,
    generate_batch,
    incumbent,
    noise_sd,
    restart_state,
    thompson_samples,
    update_state,
)
from botorch_sketch.trust_region.model import REGION_REFIT_GROWTH
from botorch_sketch.trust_region.regions import (
    CALL_KEY,
    RegionRecord,
    count_batch,
    point_label,
    region_rows,
)
from botorch_sketch.trust_region.window import default_window_size, nearest_rows

logger = logging.getLogger(__name__)

__all__ = [
    "TURBO_GENERATOR_KEY",
    "TURBO_OPTIONS",
    "TurboGenerator",
    "TurboGenerators",
    "resolve_auto_options",
    "turbo_generator_kwargs",
]

#: Registry key of :class:`TurboGenerator` (stored in generator runs).
TURBO_GENERATOR_KEY = "TurboBKB"

#: The choice of ``region_fit``, ``incumbent`` and ``region_max_points`` by the
#: first call's batch size and the number of regions (:func:`resolve_auto_options`;
#: for ``region_max_points`` with one region a window sized by the dimension,
#: :func:`~botorch_sketch.trust_region.window.default_window_size`).
AUTO = "auto"

#: The strategy's own options with their defaults (besides the sketch options).
TURBO_OPTIONS: dict[str, Any] = {
    "batch_size": None,
    "length_init": 0.8,
    "length_min": 0.5**7,
    "length_max": 1.6,
    "success_tolerance": 3,
    "failure_tolerance": None,
    "improvement_tolerance": 1e-3,
    "noise_tolerance": 0.0,
    "num_candidates": None,
    "thompson": "auto",
    "incumbent": AUTO,
    "region_fit": AUTO,
    "restart": "sobol",
    "one_hot_lengthscales": "shared",
    "num_regions": 1,
    "region_max_points": AUTO,
    "candidate_set": None,
}


#: How the region's incumbent (centre and success test) is chosen (``"auto"``:
#: by the first call's batch size, :func:`resolve_auto_options`).
INCUMBENTS = ("mean", "observed", AUTO)

#: Lengthscales of a categorical parameter's one-hot columns in the region's kernel.
ONE_HOT_LENGTHSCALES = ("shared", "per_column")

#: How the region's model is fitted at each call (module docstring, step 2;
#: ``"auto"``: by the first call's batch size, :func:`resolve_auto_options`).
REGION_FITS = ("cold", "periodic", "warm", AUTO)

#: Key of the choices that ``"auto"`` options were resolved to, in the state.
RESOLVED_KEY = "resolved_options"

#: Where a collapsed region starts again (module docstring, step 3).
RESTARTS = ("sobol", "reopen")

#: The values several regions take of the options measured with one region
#: first (the first value is the default).
MULTI_REGION_CHOICES: dict[str, tuple[str, ...]] = {
    "region_fit": ("cold", "periodic", AUTO),
    "restart": ("sobol",),
    "incumbent": ("observed", AUTO),
}


def resolve_auto_options(
    region_fit: str,
    incumbent: str,
    batch_size: int,
    num_regions: int = 1,
    region_max_points: int | str | None = None,
) -> dict[str, Any]:
    r"""``region_fit``, ``incumbent`` and ``region_max_points`` with ``"auto"``
    replaced for a run whose first call asks for ``batch_size`` points (module
    docstring, "Defaults").

    ``region_fit="auto"`` becomes ``"periodic"`` when ``batch_size == 1``, else
    ``"cold"``. With one region, ``incumbent="auto"`` becomes ``"mean"`` and
    ``region_max_points="auto"`` stays ``"auto"`` (the window of
    :func:`~botorch_sketch.trust_region.window.default_window_size` points);
    with several regions they become ``"observed"`` and ``None`` (TuRBO-m's
    rules, :data:`MULTI_REGION_CHOICES`). Other values are returned unchanged.

    Returns:
        ``{"region_fit": ..., "incumbent": ..., "region_max_points": ...}``.
    """
    one_region = num_regions == 1
    if region_fit == AUTO:
        region_fit = "periodic" if batch_size == 1 else "cold"
    if incumbent == AUTO:
        incumbent = "mean" if one_region else "observed"
    if region_max_points == AUTO and not one_region:
        region_max_points = None
    return {
        "region_fit": region_fit,
        "incumbent": incumbent,
        "region_max_points": region_max_points,
    }


def multi_region_options(options: dict[str, Any]) -> None:
    r"""Check that ``num_regions > 1`` comes with ``region_fit``, ``restart`` and
    ``incumbent`` among :data:`MULTI_REGION_CHOICES` (``region_fit="warm"``,
    ``restart="reopen"`` and ``incumbent="mean"`` were measured with one region
    only).

    Raises:
        ValueError: Naming the option.
    """
    for key, allowed in MULTI_REGION_CHOICES.items():
        value = options.get(key, allowed[0])
        if value not in allowed:
            shown = " or ".join(repr(a) for a in allowed)
            raise ValueError(
                f"num_regions={options['num_regions']!r} takes {key}={shown} "
                f"only, got {key}={value!r}."
            )


class TurboGenerator(TorchGenerator):
    r"""TuRBO-1 on ``NystromGP``, one batch per Ax call (module docstring).

    Args:
        batch_size: ``q`` (at most Ax's ``n``; ``None``: Ax's ``n``); also sets
            the default failure tolerance ``ceil(max(4 / q, d / q))``.
        length_init, length_min, length_max, success_tolerance,
            failure_tolerance, improvement_tolerance: As
            :class:`~botorch_sketch.trust_region.TrustRegionState`.
        noise_tolerance: ``c >= 0``: a batch is a success only if it also
            improves the incumbent by more than ``c`` noise standard deviations
            (the median standard error reported to Ax for the region's
            observations, else the region model's fitted noise; in the
            objective's units, :func:`~botorch_sketch.trust_region.update_state`'s
            ``floor``). ``0`` (the default) is TuRBO's rule; module docstring,
            step 2.
        num_candidates: Thompson-sampling candidates per batch (``None``:
            ``min(5000, max(2000, 200 d))``, ``d`` the model space's width: a
            one-hot encoded categorical counts one column per value; counting
            it once, as TuRBO's rule for the search space's dimension would,
            gave fewer candidates and worse optima on a mixed space with
            batches of 50, both with one lengthscale per column and per group).
        thompson: ``"joint"`` (samples of the joint posterior over the
            candidates), ``"pathwise"`` (the same for an exact region model by
            Matheron's rule on a random-feature prior path, ``O(A n)`` instead
            of ``O(A^3)``), ``"auto"`` (``"joint"`` where the device factors the
            ``A x A`` matrix in 0.2 s, ``"pathwise"`` beyond: on one CPU
            thread above about 3,100 candidates) or ``"embedding"``
            (``O(A m)``, independent Nyström residual), see
            :func:`~botorch_sketch.trust_region.generate_batch`.
        incumbent: ``"observed"`` (the centre is the best observation and the
            success test compares observed values, as published TuRBO),
            ``"mean"`` (both use posterior means at the observed points; for
            noise that is large against the function's differences, module
            docstring) or ``"auto"`` (default: ``"mean"`` with one region,
            ``"observed"`` with several; :func:`resolve_auto_options`).
        region_fit: ``"cold"`` (the region's model fitted from its initial
            hyperparameters at every call, as TuRBO-1), ``"periodic"`` (fitted
            so once the region's data grew by the model option
            ``refit_growth``, the hyperparameters kept in between),
            ``"warm"`` (from the previous call's sketch state, refitted on
            ``NystromGP``'s schedule) or ``"auto"`` (default: ``"periodic"``
            when the first call asks for one point, else ``"cold"``).
        restart: ``"sobol"`` (a collapsed region's data dropped and a new
            region started from a Sobol design in the whole space, as TuRBO-1)
            or ``"reopen"`` (the region reopened at ``length_init`` around its
            incumbent, its data kept); module docstring, step 3.
        one_hot_lengthscales: ``"shared"`` (one lengthscale per categorical
            parameter: every two of its values equally far apart, as BoTorch's
            ``CategoricalKernel``) or ``"per_column"`` (one per one-hot column,
            BoTorch's ARD RBF on the encoded space); on a mixed space the two
            measured level (``benchmarks/results/large_budget.md``).
        num_regions: ``m``, the number of trust regions (TuRBO-m, module
            docstring); ``1`` is TuRBO-1. With ``m > 1``, ``region_fit`` is
            ``"cold"`` or ``"periodic"``, ``restart`` and ``incumbent`` take
            their defaults.
        region_max_points: At most this many of the region's points in its
            model: the ones nearest the best observation (Euclidean, in the
            unit cube), the others still counted by the region's state machine
            (:mod:`~botorch_sketch.trust_region.window`). ``"auto"``
            (default): ``max(300, 30 d)`` for ``d`` model-space columns with
            one region, every point with several (TuRBO-m's rule,
            :func:`resolve_auto_options`); ``None``: every point since the
            restart, TuRBO's rule. On all of a shrunken region's data the
            fitted noise absorbs the small-scale structure the region is
            refining (module docstring, step 2), and with ``restart="reopen"``
            the data grow without bound.
        seed: Base seed of every draw.
        surrogate_spec: One ``NystromGP`` ``ModelConfig`` whose ``model_options``
            (``q_bar``, ``max_dictionary_size``, ...) build the region's model.
        candidate_set: Optional ``A x d`` library in Ax's model space: batches
            are library rows not yet observed or pending (module docstring).
        warm_start_refit: Ignored (the strategy builder passes it to every
            generator).
        region_state: The previous call's state (Ax passes it back).
    """

    def __init__(
        self,
        batch_size: int | None = None,
        length_init: float = 0.8,
        length_min: float = 0.5**7,
        length_max: float = 1.6,
        success_tolerance: int = 3,
        failure_tolerance: int | None = None,
        improvement_tolerance: float = 1e-3,
        noise_tolerance: float = 0.0,
        num_candidates: int | None = None,
        thompson: str = "auto",
        incumbent: str = AUTO,
        region_fit: str = AUTO,
        restart: str = "sobol",
        one_hot_lengthscales: str = "shared",
        num_regions: int = 1,
        region_max_points: int | str | None = AUTO,
        seed: int = 0,
        surrogate_spec: SurrogateSpec | None = None,
        candidate_set: Any = None,
        warm_start_refit: bool = False,
        region_state: dict[str, Any] | None = None,
    ) -> None:
        self.settings = {
            "length_init": float(length_init),
            "length_min": float(length_min),
            "length_max": float(length_max),
            "success_tolerance": success_tolerance,
            "failure_tolerance": failure_tolerance,
            "improvement_tolerance": float(improvement_tolerance),
        }
        # Validates the settings (d and q are placeholders here).
        TrustRegionState(dim=1, batch_size=1, **self.settings)
        if region_state is not None and not isinstance(region_state, dict):
            raise ValueError(
                f"region_state must be a dict, got {type(region_state).__name__}."
            )
        self.noise_tolerance = float(
            check_nonnegative_number(noise_tolerance, "noise_tolerance")
        )
        self.batch_size = batch_size
        self.num_candidates = num_candidates
        self.thompson = check_choice(thompson, THOMPSON_SAMPLERS, "thompson")
        self.incumbent = check_choice(incumbent, INCUMBENTS, "incumbent")
        self.region_fit = check_choice(region_fit, REGION_FITS, "region_fit")
        self.restart = check_choice(restart, RESTARTS, "restart")
        self.one_hot_lengthscales = check_choice(
            one_hot_lengthscales, ONE_HOT_LENGTHSCALES, "one_hot_lengthscales"
        )
        if (
            isinstance(num_regions, bool)
            or not isinstance(num_regions, int)
            or num_regions < 1
        ):
            raise ValueError(
                f"num_regions must be a positive int, got {num_regions!r}."
            )
        self.num_regions = num_regions
        if region_max_points not in (None, AUTO):
            check_bool_free_int(region_max_points, "region_max_points", minimum=1)
        self.region_max_points = region_max_points
        if num_regions > 1:
            multi_region_options(
                {
                    "num_regions": num_regions,
                    "region_fit": self.region_fit,
                    "restart": self.restart,
                    "incumbent": self.incumbent,
                }
            )
        self.seed = int(seed)
        configs = [] if surrogate_spec is None else surrogate_spec.model_configs
        self.model_options = dict(configs[0].model_options) if configs else {}
        # The region's schedule (as the "turbo-bkb" strategy passes it), not the
        # global model's.
        self.model_options.setdefault("refit_growth", REGION_REFIT_GROWTH)
        self.library = (
            None
            if candidate_set is None
            else torch.as_tensor(candidate_set, dtype=torch.float64)
        )
        self.region_state = region_state
        # The choices of this run (set by gen from the options and the state).
        self._fit_mode, self._incumbent_mode = self.region_fit, self.incumbent
        self._max_points = self.region_max_points
        self.surrogate = RegionData()
        self._labels: list[list[Any]] | None = None
        self._X: Tensor | None = None
        self._Y: Tensor | None = None
        self._sign = 1.0
        self._discrete = DiscreteColumns()
        self._one_hot: tuple[tuple[int, ...], ...] = ()

    # ------------------------------------------------------------------ Ax API
    def fit(
        self,
        datasets: Sequence[SupervisedDataset],
        search_space_digest: SearchSpaceDigest,
        candidate_metadata: Any = None,
    ) -> None:
        r"""Keep the observations (unit-cube inputs); the model is fitted in gen.

        Every outcome's dataset is kept (tracking metrics come with the
        objective); :meth:`gen` models the one its objective weights select.
        """
        for dataset in datasets:
            if not bool(torch.isfinite(dataset.Y).all()):
                raise ValueError("the observations contain NaN or infinite values.")
        self._bounds = torch.tensor(search_space_digest.bounds, dtype=torch.float64).T
        discrete = discrete_columns(
            search_space_digest.feature_names,
            search_space_digest.bounds,
            search_space_digest.discrete_choices,
        )
        all_discrete = discrete.num_columns() == len(search_space_digest.bounds)
        self._discrete = discrete if all_discrete else DiscreteColumns()
        shared = self.one_hot_lengthscales == "shared"
        self._one_hot = discrete.one_hot if shared else ()
        self.surrogate = RegionData(training_data=list(datasets))
        self._labels = None if candidate_metadata is None else list(candidate_metadata)
        self._X = self._Y = None

    def gen(
        self,
        n: int,
        search_space_digest: SearchSpaceDigest,
        torch_opt_config: TorchOptConfig,
    ) -> TorchGenResults:
        r"""The next batch of ``min(n, batch_size)`` points."""
        if not self.surrogate.training_data:
            raise RuntimeError("call fit() before gen().")
        sign, outcome = _objective(torch_opt_config)
        dataset, column = _outcome_column(self.surrogate.training_data, outcome)
        self._X = self._unit(dataset.X.to(torch.float64))
        self._Y = dataset.Y[..., column : column + 1].to(torch.float64)
        self._sign = sign
        X, Y = self._X, sign * self._Y
        num_obs, d = X.shape
        q = n if self.batch_size is None else min(n, self.batch_size)
        saved = self.region_state or {}
        info: dict[str, Any] = {}
        resolved = dict(
            saved.get(RESOLVED_KEY)
            or resolve_auto_options(
                self.region_fit,
                self.incumbent,
                q,
                self.num_regions,
                self.region_max_points,
            )
        )
        # A run saved before region_max_points was resolved kept the option as given.
        resolved.setdefault("region_max_points", self.region_max_points)
        self._fit_mode, self._incumbent_mode = (
            resolved["region_fit"],
            resolved["incumbent"],
        )
        self._max_points = resolved["region_max_points"]
        info.update(resolved)
        if "trust_region" in saved:
            state = TrustRegionState.from_dict(saved["trust_region"])
        else:
            state = TrustRegionState(dim=d, batch_size=q, **self.settings)
        start = int(saved.get("region_start", 0))
        seen = int(saved.get("num_seen", 0))
        sketch = saved.get("sketch_state")
        pending = torch_opt_config.pending_observations or []
        num_pending = int(pending[0].shape[0]) if pending else 0
        call_seed = (self.seed * 1_000_003 + num_obs + 7919 * num_pending) % (2**31 - 1)
        info["num_pending"] = num_pending
        feasible = self._feasibility(torch_opt_config)
        if self.num_regions > 1:
            labels = self._dataset_labels(dataset, num_obs)
            Yvar = dataset.Yvar
            Yvar = None if Yvar is None else Yvar[..., column : column + 1]
            results = self._gen_regions(
                X, Y, Yvar, labels, q, call_seed, feasible, torch_opt_config, info
            )
            self.region_state[RESOLVED_KEY] = resolved
            return results
        region_X, region_Y = X[start:], Y[start:]
        rows = self._window(region_X, region_Y)
        fit_X, fit_Y = region_X[rows], region_Y[rows]
        warm = self._fit_mode == "warm"
        periodic = self._fit_mode == "periodic"
        growth = float(self.model_options["refit_growth"])
        # The schedule counts the region's points, not the model's window.
        fit_points = saved.get("fit_points")
        hold = periodic and hyperparameters_kept(
            sketch, region_X.shape[0], growth, fit_points
        )
        kept = kept_fit_options(growth) if hold else {}
        if region_X.shape[0] >= min_region_points(d):
            model = fit_region_model(
                fit_X, fit_Y, warm_start=sketch if warm or hold else None,
                one_hot=self._one_hot,
                **{"seed": self.seed, **self.model_options, **kept},
            )  # fmt: skip
            Yvar = dataset.Yvar
            Yvar = None if Yvar is None else Yvar[start:, column : column + 1][rows]
            floor = self._noise_floor(model, fit_X, Yvar)
            state = self._update(
                state, model, region_X, region_Y, seen - start, min_region_points(d),
                floor=floor,
            )  # fmt: skip
            if state.restart_triggered and self.restart == "reopen":
                logger.info("turbo-bkb: region reopens after %d points.", num_obs)
                state = replace(restart_state(state), best_value=state.best_value)
            if state.restart_triggered:
                logger.info("turbo-bkb: region restarts after %d points.", num_obs)
                state, start, sketch = restart_state(state), num_obs, None
                fit_points = None
                self.surrogate.model = None
            else:
                sketch = model.sketch_state().to_dict() if warm or periodic else None
                fit_points = fit_points if hold else region_X.shape[0]
                self.surrogate.model = model
                info["dictionary_size"] = model.dictionary_size
                info["fitted"] = not hold
        points = X.new_zeros(0, d)
        if self.surrogate.model is not None and start < num_obs:
            model = self._hallucinate(self.surrogate.model, torch_opt_config)
            num = self.num_candidates or default_num_candidates(d)
            info["num_candidates"] = num
            points = generate_batch(
                model, state, fit_X, q, num_candidates=num,
                seed=call_seed, library=self._unit_library(), feasible=feasible,
                thompson=self.thompson, center=self._center(fit_Y),
                discrete=self._discrete,
            )  # fmt: skip
        if points.shape[0] == 0:
            points = self._design(q, d, call_seed + state.restarts, feasible)
            info["design"] = "sobol"
        self.region_state = {
            "trust_region": state.to_dict(),
            "region_start": start,
            "num_seen": num_obs,
            "sketch_state": sketch,
            RESOLVED_KEY: resolved,
        }
        if fit_points is not None and self._max_points is not None:
            self.region_state["fit_points"] = int(fit_points)
        points = self._from_unit(points.to(torch.float64))
        rounding = torch_opt_config.rounding_func
        if rounding is not None:  # one point at a time (integer parameters)
            points = torch.stack([rounding(x) for x in points]).to(points)
        info.update(
            {"length": state.length, "restarts": state.restarts, "batch_size": q}
        )
        return TorchGenResults(
            points=points,
            weights=torch.ones(points.shape[0], dtype=points.dtype),
            gen_metadata=info,
        )

    def predict(
        self, X: Tensor, use_posterior_predictive: bool = False
    ) -> tuple[Tensor, Tensor]:
        r"""The region model's posterior at ``X`` (``j x d``, Ax's model space)."""
        if self.surrogate.model is None:
            raise RuntimeError("no region model: call gen() after enough data.")
        with torch.no_grad():
            post = self.surrogate.model.posterior(
                self._unit(X.to(torch.float64)),
                observation_noise=use_posterior_predictive,
            )
        var = post.variance.reshape(-1, 1, 1)
        return (self._sign * post.mean).to(X), var.to(X)

    def _get_state(self) -> dict[str, Any]:
        r"""``{"region_state": ...}``: what the next call continues from."""
        state = super()._get_state()
        if self.region_state is not None:
            state["region_state"] = self.region_state
        return state

    # ------------------------------------------------------- several regions
    def _gen_regions(
        self,
        X: Tensor,
        Y: Tensor,
        Yvar: Tensor | None,
        labels: list[dict[str, Any] | None],
        q: int,
        call_seed: int,
        feasible: Callable[[Tensor], Tensor],
        config: TorchOptConfig,
        info: dict[str, Any],
    ) -> TorchGenResults:
        r"""One TuRBO-m call (``num_regions > 1``; module docstring): count each
        region's new points, restart the collapsed regions, propose the
        designs still owed, then fill the batch by Thompson sampling across the
        regions' models."""
        d = X.shape[-1]
        design = min_region_points(d)
        saved = self.region_state or {}
        call = int(saved.get("num_calls", 0))
        if "regions" in saved:
            records = [RegionRecord.from_dict(r) for r in saved["regions"]]
        else:
            fresh = TrustRegionState(dim=d, batch_size=q, **self.settings)
            own = len(region_rows(labels, 0, 0))
            records = [RegionRecord(fresh, design_left=max(0, design - own))]
            records += [
                RegionRecord(fresh, design_left=design)
                for _ in range(self.num_regions - 1)
            ]
        models: dict[int, tuple[NystromGP, Tensor]] = {}
        growth = float(self.model_options["refit_growth"])
        fitted: list[bool | None] = [None] * len(records)
        for r, record in enumerate(records):
            rows = torch.tensor(region_rows(labels, r, record.epoch), dtype=torch.long)
            if rows.numel() < design:
                continue
            calls = [(labels[i] or {}).get(CALL_KEY) for i in rows.tolist()]
            values = Y[rows].reshape(-1).tolist()
            n_region = rows.numel()
            rows = rows[self._window(X[rows], Y[rows])]
            hold = self._fit_mode == "periodic" and hyperparameters_kept(
                record.sketch, n_region, growth, record.fit_points
            )
            kept = kept_fit_options(growth) if hold else {}
            model = fit_region_model(
                X[rows], Y[rows], one_hot=self._one_hot,
                warm_start=record.sketch if hold else None,
                **{"seed": self.seed, **self.model_options, **kept},
            )  # fmt: skip
            fitted[r] = not hold
            if self._fit_mode == "periodic":
                fit_points = record.fit_points if hold else n_region
                record = replace(
                    record,
                    sketch=model.sketch_state().to_dict(),
                    fit_points=fit_points,
                )
            floor = self._noise_floor(
                model, X[rows], None if Yvar is None else Yvar[rows]
            )
            record = count_batch(record, values, calls, design, floor=floor)
            if record.state.restart_triggered:
                logger.info("turbo-bkb: region %d restarts after %d points.", r, len(X))
                record = record.restarted(design)
            else:
                models[r] = (model, rows)
            records[r] = record
        points, owners = [], []
        for r, record in enumerate(records):
            take = min(record.design_left, q - len(owners))
            if take <= 0:
                continue
            seed = call_seed + 7919 * (r + 1) + 104_729 * record.epoch
            block = self._design(take, d, seed, feasible)
            points.append(block)
            owners += [r] * block.shape[0]
            records[r] = replace(
                record, design_left=record.design_left - block.shape[0]
            )
        k = q - len(owners)
        if k > 0 and models:
            chosen = self._across_regions(
                models, records, X, Y, k, call_seed, feasible, config
            )
            for r, point in chosen:
                points.append(point.unsqueeze(0))
                owners.append(r)
        if not owners:  # every region waits for its pending design
            points = [self._design(q, d, call_seed, feasible)]
            owners = [0] * points[0].shape[0]
            info["design"] = "sobol"
        best = max(models, key=lambda r: records[r].state.best_value, default=None)
        self.surrogate.model = None if best is None else models[best][0]
        self.region_state = {
            "regions": [record.to_dict() for record in records],
            "num_calls": call + 1,
        }
        states = [record.state for record in records]
        info.update(
            {
                "length": [state.length for state in states],
                "restarts": sum(state.restarts for state in states),
                "batch_size": q,
                "regions": owners,
                "fitted": fitted,
            }
        )
        out = self._from_unit(torch.cat(points).to(torch.float64))
        rounding = config.rounding_func
        if rounding is not None:
            out = torch.stack([rounding(x) for x in out]).to(out)
        epochs = [records[r].epoch for r in owners]
        return TorchGenResults(
            points=out,
            weights=torch.ones(out.shape[0], dtype=out.dtype),
            gen_metadata=info,
            candidate_metadata=[
                point_label(r, e, call) for r, e in zip(owners, epochs, strict=True)
            ],
        )

    def _across_regions(
        self,
        models: dict[int, tuple[NystromGP, Tensor]],
        records: list[RegionRecord],
        X: Tensor,
        Y: Tensor,
        k: int,
        call_seed: int,
        feasible: Callable[[Tensor], Tensor],
        config: TorchOptConfig,
    ) -> list[tuple[int, Tensor]]:
        r"""``k`` points chosen by Thompson sampling across the regions' models
        (:func:`~botorch_sketch.trust_region.allocate_across_regions`), as
        ``(region, unit-cube point)`` pairs."""
        owners, candidates, samples = [], [], []
        num = self.num_candidates or default_num_candidates(X.shape[-1])
        for r, (model, rows) in models.items():
            model = self._hallucinate(model, config)
            seed = call_seed + 31 * (r + 1)
            C = batch_candidates(
                model, records[r].state, X[rows], k,
                num_candidates=num,
                seed=seed, library=self._unit_library(), feasible=feasible,
                center=int(Y[rows].argmax()), discrete=self._discrete,
            )  # fmt: skip
            if C.shape[0] == 0:
                continue
            owners.append(r)
            candidates.append(C)
            samples.append(
                thompson_samples(model, C, k, seed=seed, thompson=self.thompson)
            )
        picks = allocate_across_regions(candidates, samples, k)
        return [(owners[i], candidates[i][row]) for i, row in picks]

    def _dataset_labels(
        self, dataset: SupervisedDataset, n: int
    ) -> list[dict[str, Any] | None]:
        r"""The region labels of ``dataset``'s ``n`` rows (Ax's candidate metadata,
        :mod:`~botorch_sketch.trust_region.regions`); ``None`` for a row without."""
        datasets = self.surrogate.training_data
        index = next(i for i, other in enumerate(datasets) if other is dataset)
        if self._labels is None or self._labels[index] is None:
            return [None] * n
        labels = list(self._labels[index])
        if len(labels) != n:
            raise ValueError(
                f"Ax passed {len(labels)} candidate metadata entries for {n} rows."
            )
        return [label if isinstance(label, dict) else None for label in labels]

    # --------------------------------------------------------------- internals
    def _update(
        self,
        state: TrustRegionState,
        model: NystromGP,
        X: Tensor,
        Y: Tensor,
        old: int,
        design: int,
        floor: float = 0.0,
    ) -> TrustRegionState:
        r"""Count the last batch (rows ``old:`` of the region) as a success or a
        failure, comparing posterior means of the same model (``incumbent="mean"``)
        or the observed values (``"observed"``).

        A region of fewer than ``design`` rows at the previous call had no model
        (its points were the space-filling design, with Ax's initial Sobol trials
        in the first region): the rows that arrived since complete the design
        and set the incumbent only, as in TuRBO, instead of counting as a
        success over the first few points."""
        if self._incumbent_mode == "observed":
            best = lambda rows: float(Y[rows].max())  # noqa: E731
        else:
            best = lambda rows: incumbent(model, X[rows])[1]  # noqa: E731
        if old < design or old >= X.shape[0]:  # the region's design, or no batch
            return replace(state, best_value=best(slice(None)))
        before, batch = best(slice(None, old)), best(slice(old, None))
        return update_state(replace(state, best_value=before), batch, floor=floor)

    def _noise_floor(self, model: NystromGP, X: Tensor, Yvar: Tensor | None) -> float:
        r"""``noise_tolerance`` times the noise standard deviation of the region's
        observations ``X`` (``n x d``; ``Yvar``: their ``n x 1`` squared standard
        errors as Ax has them, or ``None``): the median of the standard errors
        reported to Ax (rows without one, e.g. Sobol trials completed without,
        left out), else, where none was reported, the region model's fitted
        noise (:func:`~botorch_sketch.trust_region.model.noise_sd`), which also
        absorbs what the model cannot fit (a rugged objective, a large region)."""
        if not self.noise_tolerance:
            return 0.0
        Yvar = X.new_zeros(0) if Yvar is None else Yvar[torch.isfinite(Yvar)]
        if Yvar.numel():
            sd = float(Yvar.clamp_min(0.0).median().sqrt())
        else:
            sd = noise_sd(model, X)
        return self.noise_tolerance * sd

    def _window(self, X: Tensor, Y: Tensor) -> Tensor:
        r"""Sorted rows of the region's ``n x d`` data in its model: all
        (``region_max_points=None``) or the ``region_max_points`` nearest the
        best observation (``"auto"``:
        :func:`~botorch_sketch.trust_region.window.default_window_size` of
        ``d``), by
        :func:`~botorch_sketch.trust_region.window.nearest_rows`."""
        limit = self._max_points
        if limit == AUTO:
            limit = default_window_size(X.shape[-1])
        return nearest_rows(X, Y, limit)

    def _center(self, Y: Tensor) -> int | None:
        r"""The region's centre row: ``None`` (largest posterior mean) or the best
        observation's row."""
        observed = self._incumbent_mode == "observed"
        return int(Y.reshape(-1).argmax()) if observed else None

    def _hallucinate(self, model: NystromGP, config: TorchOptConfig) -> NystromGP:
        pending = config.pending_observations
        if not pending or pending[0].numel() == 0:
            return model
        Xp = self._unit(pending[0].to(torch.float64))
        with torch.no_grad():
            mean = model.posterior(Xp).mean
        return model.condition_on_observations(Xp, mean)

    def _feasibility(self, config: TorchOptConfig) -> Callable[[Tensor], Tensor]:
        r"""Mask of unit-cube candidates that satisfy the parameter constraints
        and, with a library or on an all-discrete space, are neither observed nor
        pending."""
        constraints = config.linear_constraints
        taken = None
        if self.library is not None or not self._discrete.is_empty:
            rows = [self._X]
            if config.pending_observations:
                rows.append(self._unit(config.pending_observations[0].double()))
            taken = torch.cat(rows)

        def feasible(Z: Tensor) -> Tensor:
            ok = torch.ones(Z.shape[0], dtype=torch.bool, device=Z.device)
            if constraints is not None:
                A, b = (t.to(Z) for t in constraints)
                ok &= (self._from_unit(Z) @ A.T <= b.T + 1e-9).all(-1)
            if taken is not None:
                ok &= ~matches_any(Z, taken)
            return ok

        return feasible

    def _design(
        self, q: int, d: int, seed: int, feasible: Callable[[Tensor], Tensor]
    ) -> Tensor:
        r"""A restart's space-filling points: scrambled Sobol (or random library
        rows), feasible ones only."""
        library = self._unit_library()
        if library is None:
            pool = self._discrete.unique_projection(
                _sobol(max(64 * q, 1024), d, seed=seed)
            )
        else:
            perm = torch.randperm(
                library.shape[0], generator=torch.Generator().manual_seed(seed)
            )
            pool = library[perm]
        pool = pool[feasible(pool)]
        if pool.shape[0] == 0:
            raise SearchSpaceExhausted(
                "turbo-bkb found no point that satisfies the constraints (or no "
                "library row left)."
            )
        return pool[:q]

    def _unit_library(self) -> Tensor | None:
        return None if self.library is None else self._unit(self.library)

    def _unit(self, X: Tensor) -> Tensor:
        lower, upper = self._bounds
        return (X - lower) / (upper - lower).clamp_min(1e-12)

    def _from_unit(self, X: Tensor) -> Tensor:
        lower, upper = self._bounds
        return lower + (upper - lower) * X


@dataclass
class RegionData:
    r"""What the generator was fitted on and its current region model (as the
    ``surrogate`` of Ax's ``BoTorchGenerator``).

    Attributes:
        training_data: Ax's datasets of the last fit (model space).
        model: The region's ``NystromGP`` (unit-cube inputs, signed outcome);
            ``None`` before a region has enough points.
    """

    training_data: list[SupervisedDataset] = field(default_factory=list)
    model: NystromGP | None = None


def hyperparameters_kept(
    sketch: dict[str, Any] | None,
    n: int,
    growth: float,
    fit_points: int | None = None,
) -> bool:
    r"""Whether a periodic region keeps the hyperparameters of its last fit (in
    ``sketch``, a ``SketchState`` dict; ``None``: no fit yet) at ``n`` points of
    the region: while ``n < (1 + growth) fit_points``, ``fit_points`` the
    region's points at that fit (``None``: the sketch's ``num_fit_points``, the
    same where the model takes every point of the region)."""
    if sketch is None:
        return False
    base = int(sketch["num_fit_points"]) if fit_points is None else fit_points
    return n < (1.0 + growth) * base


def kept_fit_options(growth: float) -> dict[str, Any]:
    r"""``NystromGP`` options of a periodic region's model that keeps its last
    fit's hyperparameters: the warm start on the region's schedule ``growth``,
    without its drift check (module docstring)."""
    return {"refit_growth": growth, "refit_tolerance": None}


def min_region_points(dim: int) -> int:
    r"""Points a region needs before its first model: ``2 d`` (TuRBO's design)."""
    return 2 * dim


def _sobol(num: int, dim: int, seed: int) -> Tensor:
    return SobolEngine(dim, scramble=True, seed=seed).draw(num).to(torch.float64)


def _outcome_column(
    datasets: Sequence[SupervisedDataset], outcome: int
) -> tuple[SupervisedDataset, int]:
    r"""The dataset holding outcome ``outcome`` (Ax's outcome order: the datasets'
    ``Y`` columns one after another) and its column there."""
    column = outcome
    for dataset in datasets:
        width = dataset.Y.shape[-1]
        if column < width:
            return dataset, column
        column -= width
    raise ValueError(f"no dataset holds outcome {outcome}.")


def _objective(config: TorchOptConfig) -> tuple[float, int]:
    r"""``(sign, outcome index)`` of the single objective (``+1``: maximise)."""
    weights = config.objective_weights
    if config.outcome_constraints is not None:
        raise UnsupportedError(
            "turbo-bkb optimises one objective; the experiment has outcome constraints."
        )
    # 1-d (one weight per outcome) or 2-d (one row per objective) in Ax 1.3.
    rows = weights.reshape(-1, weights.shape[-1])
    chosen = torch.nonzero(rows.abs().sum(0)).flatten()
    if rows.shape[0] != 1 or chosen.numel() != 1:
        raise UnsupportedError(
            "turbo-bkb optimises one objective; the experiment has several objectives."
        )
    outcome = int(chosen[0])
    return (1.0 if float(rows[0, outcome]) > 0 else -1.0), outcome


def turbo_generator_kwargs(
    opts: dict[str, Any], model_keys: Sequence[str]
) -> dict[str, Any]:
    r"""The generator's keyword arguments from a strategy's options (validates
    the region settings together: ``0 < length_min <= length_init <= length_max``);
    the options named in ``model_keys`` (the strategies' ``NystromGP`` options)
    go to the region's model.
    """
    settings = {key: opts[key] for key in TURBO_OPTIONS if key != "candidate_set"}
    own = (
        "batch_size",
        "num_candidates",
        "thompson",
        "incumbent",
        "region_fit",
        "restart",
        "one_hot_lengthscales",
        "noise_tolerance",
        "num_regions",
        "region_max_points",
    )
    generator = {key: settings.pop(key) for key in own}
    TrustRegionState(dim=1, batch_size=1, **settings)
    model_options = {"seed": opts["seed"]}
    model_options.update({key: opts[key] for key in model_keys if key in opts})
    return {
        **settings,
        **generator,
        "candidate_set": opts.get("candidate_set"),
        "surrogate_spec": SurrogateSpec(
            model_configs=[
                ModelConfig(
                    botorch_model_class=NystromGP,
                    model_options=model_options,
                    name="NystromGP",
                )
            ]
        ),
    }


class TurboGenerators(GeneratorRegistryBase):
    r"""Generator registry entry of :class:`TurboGenerator` (like Ax's
    ``Generators``)."""

    TURBO_BKB = TURBO_GENERATOR_KEY

    @property
    def GENERATOR_KEY_TO_GENERATOR_SETUP(self) -> dict[str, GeneratorSetup]:  # noqa: N802
        """The setup of :class:`TurboGenerator`."""
        return _SETUPS


_SETUPS: dict[str, GeneratorSetup] = {
    TURBO_GENERATOR_KEY: GeneratorSetup(
        adapter_class=SketchTorchAdapter,
        generator_class=TurboGenerator,
        transforms=MBM_X_trans,
        # Passed back at every call; kept in generator_state_after_gen only.
        not_saved_generator_kwargs=["region_state"],
    )
}

CORE_DECODER_REGISTRY.setdefault(TurboGenerators.__name__, TurboGenerators)
