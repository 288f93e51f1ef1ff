r"""Our Ax generator: seeded calls, and ``NystromGP``'s sketch kept between them.

**Seeds.** Ax's ``Client`` runs every generation inside its seeded random context,
but a ``Client`` loaded from JSON has no seed, so a run that relied on it does not
continue like the uninterrupted one (BoTorch's MC samplers, the raw samples and
restarts of ``optimize_acqf`` and the retries of ``fit_gpytorch_mll`` draw from the
global RNGs). :class:`SketchBoTorchGenerator` runs each fit and each generation
inside ``with_rng_seed(seed, n)``: the strategy's ``seed`` combined with the number
of observed (and pending) points, so the same experiment state always gets the
same draws, whatever the global RNG state, in any process.

**Multi-objective experiments.** A strategy whose acquisition function is
single-objective (qUCB) gets Ax's multi-objective default, qLogNEHVI, on the same
models when the experiment has several objectives.

**Sketch state.**
Ax rebuilds the surrogate from all data at every call (Ax 1.3 refits whatever
``warm_start_refit`` says; generation never passes a state dict). What a generator
may carry from one call to the next, also through Ax JSON, is its ``_get_state()``:
Ax stores it as ``GeneratorRun.generator_state_after_gen`` and passes it back as
constructor keyword arguments at the next fit (``GenerationNode._fit``).

:class:`SketchBoTorchGenerator` is Ax's modular ``BoTorchGenerator`` plus that state:
after each fit it keeps the fitted ``NystromGP``'s
:meth:`~botorch_sketch.models.NystromGP.sketch_state` (hyperparameters, dictionary
rows, refit bookkeeping; :class:`~botorch_sketch.models.nystrom_fit.SketchState` in
its compact JSON form, about ``n / 6`` characters for the dictionary), and the next
fit builds the model with it as ``warm_start``: hyperparameters refitted on a
schedule with bounded iterations, the dictionary updated by BKB's resampling
instead of BLESS from scratch (:mod:`botorch_sketch.models.nystrom_fit`). A run
saved to JSON and reloaded therefore continues from the same state. A carried
state is checked before it is used (:func:`sketch_state_problem`: finite
hyperparameters, dictionary rows among the training rows); an unusable one, or one
whose warm-started fit fails, is discarded with a warning and the model is fitted
from scratch, as Ax's own models are at every call.

**Model reuse between requests.** Ax's Orchestrator asks for new trials whenever
a worker frees up, and often on data that did not change since the last fit (only
the pending trials did): e.g. the next free slot of the same poll, or trials
generated ahead while every worker is busy. The fitted model is a function of
``(training data, surrogate configuration, seed, the state the fit started
from)``. Each fit therefore records, next to the state it leaves, a fingerprint of
its data and the state it started from (``fit_record``, carried like the sketch
state). A fit whose data equal the recorded ones is the recorded fit again: its
model comes from a small process-wide cache (:func:`clear_fit_cache`) keyed by
all of those inputs, so neither the hyperparameters nor the sketch are refitted
and the posterior's factorisations are reused; the pending points are then only
hallucinated by the acquisition function. On a cache miss (a new process, a
reloaded experiment: the cache is never saved) the same fit is rerun from the
recorded starting state, so a reloaded run gives the arms of the uninterrupted
one. New completed data start a new fit from the last state: a warm update (the
hyperparameters kept, the dictionary resampled by BKB's rule) unless the
model's schedule calls for a bounded hyperparameter refit (the data grew by
``refit_growth`` since the last full fit, or the likelihood drifted;
:func:`~botorch_sketch.models.nystrom_fit.refit_due`).

**GSSBO's pilot.** ``GradientSubsetGP`` needs hyperparameters ("pilot", Wei
et al. 2025, Eq. 3) to choose its subset; built from the data alone it fits a
pilot GP first, one extra ``O(M^3)`` fit per call. The generator keeps the fitted
model's ``state_dict`` (hyperparameters and transforms, a few numbers; JSON in
``pilot_state``) and hands it to the next fit as the ``pilot``, with the new
model's hyperparameters starting from it (``warm_start=True``): what
:class:`~botorch_sketch.loops.gssbo.GSSBORefitter` does in a BoTorch loop. A
carried pilot that does not parse, holds non-finite numbers or does not fit the
model is discarded with a warning, and that call fits its own pilot.

:class:`SketchGenerators` is the generator registry entry that makes a
``GeneratorSpec`` use it (``generator_enum=SketchGenerators.BOTORCH_SKETCH``). The
state is carried for experiments with one modelled outcome (the BBKB setting);
with several outcomes each model is fitted from scratch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from ax.adapter.registry import (
    GENERATOR_KEY_TO_GENERATOR_SETUP,
    GeneratorRegistryBase,
    GeneratorSetup,
    MBM_X_trans,
    Y_trans,
)
from ax.core.search_space import SearchSpaceDigest
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from ax.generators.torch.botorch_modular.generator import BoTorchGenerator
from ax.generators.torch.botorch_modular.surrogate import Surrogate, SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.generators.torch_base import TorchGenResults, TorchOptConfig
from ax.utils.common.random import with_rng_seed
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.acquisition.monte_carlo import qUpperConfidenceBound
from botorch.acquisition.multi_objective.logei import (
    qLogNoisyExpectedHypervolumeImprovement,
)
from botorch.utils.datasets import SupervisedDataset
from linear_operator.utils.errors import NotPSDError
from torch import Tensor

from botorch_sketch.ax.adapter import SketchTorchAdapter
from botorch_sketch.ax.library import BBKBLibraryGenerator
from botorch_sketch.models.gssbo import GradientSubsetGP
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.nystrom_fit import SketchState
from botorch_sketch.models.sketch_state import tensors_from_json, tensors_to_json
from botorch_sketch.models.validation import check_seed

logger = logging.getLogger(__name__)

__all__ = [
    "LIBRARY_GENERATOR_KEY",
    "SKETCH_GENERATOR_KEY",
    "SketchBoTorchGenerator",
    "SketchGenerators",
    "clear_fit_cache",
    "sketch_state_problem",
]

#: Registry key of :class:`SketchBoTorchGenerator` (stored in generator runs).
SKETCH_GENERATOR_KEY = "BoTorchSketch"
#: Registry key of :class:`~botorch_sketch.ax.library.BBKBLibraryGenerator`.
LIBRARY_GENERATOR_KEY = "BBKBLibrary"

#: Single-objective acquisition functions a multi-objective experiment replaces by
#: :data:`MULTI_OBJECTIVE_ACQF` (a strategy's model works for any number of
#: outcomes; its acquisition function may not).
SINGLE_OBJECTIVE = (qUpperConfidenceBound,)
MULTI_OBJECTIVE_ACQF = qLogNoisyExpectedHypervolumeImprovement

#: Fitted surrogates kept for reuse (module docstring), most recent last.
FIT_CACHE_SIZE = 4
_FIT_CACHE: OrderedDict[str, Surrogate] = OrderedDict()
#: Guards ``_FIT_CACHE`` (``run_trials`` may generate in a background thread).
_FIT_CACHE_LOCK = threading.Lock()


#: In-sample best points of the cached (never refitted) models, per request.
_BEST_POINTS: weakref.WeakKeyDictionary[Any, dict[str, Tensor | None]] = (
    weakref.WeakKeyDictionary()
)


def clear_fit_cache() -> None:
    r"""Forget every fitted model kept for reuse (the next fits rerun)."""
    with _FIT_CACHE_LOCK:
        _FIT_CACHE.clear()
        _BEST_POINTS.clear()


class SketchBoTorchGenerator(BoTorchGenerator):
    r"""``BoTorchGenerator`` with seeded calls and ``NystromGP``'s sketch kept.

    Args:
        seed: Base seed of every random draw of a fit or a generation
            (module docstring); ``None``: Ax's context (unseeded after a reload).
        sketch_state: The previous fit's ``SketchState.to_dict()`` (Ax passes it
            back from the last generator run); ``None`` at the first call.
        fit_record: The previous fit's ``{"data": fingerprint, "start": the
            sketch state it started from or None}`` (passed back like
            ``sketch_state``; module docstring).
        pilot_state: The previous ``GradientSubsetGP``'s ``state_dict`` in the
            form of :func:`~botorch_sketch.models.sketch_state.tensors_to_json`
            (passed back like ``sketch_state``; module docstring).
        Every other argument: as ``BoTorchGenerator`` (named one by one: Ax checks
        the keyword arguments of a generator against its signature).
    """

    def __init__(
        self,
        surrogate_spec: SurrogateSpec | None = None,
        surrogate: Surrogate | None = None,
        acquisition_class: type[Acquisition] | None = None,
        acquisition_options: dict[str, Any] | None = None,
        botorch_acqf_class: type[AcquisitionFunction] | None = None,
        botorch_acqf_options: dict[str, Any] | None = None,
        botorch_acqf_classes_with_options: (
            list[tuple[type[AcquisitionFunction], dict[str, Any]]] | None
        ) = None,
        refit_on_cv: bool = False,
        warm_start_refit: bool = True,
        use_p_feasible: bool = True,
        seed: int | None = None,
        sketch_state: dict[str, Any] | None = None,
        fit_record: dict[str, Any] | None = None,
        pilot_state: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            surrogate_spec=surrogate_spec,
            surrogate=surrogate,
            acquisition_class=acquisition_class,
            acquisition_options=acquisition_options,
            botorch_acqf_class=botorch_acqf_class,
            botorch_acqf_options=botorch_acqf_options,
            botorch_acqf_classes_with_options=botorch_acqf_classes_with_options,
            refit_on_cv=refit_on_cv,
            warm_start_refit=warm_start_refit,
            use_p_feasible=use_p_feasible,
        )
        if sketch_state is not None and not isinstance(sketch_state, dict):
            raise ValueError(
                "sketch_state must be a SketchState.to_dict() dict, got "
                f"{type(sketch_state).__name__}."
            )
        if fit_record is not None and not (
            isinstance(fit_record, dict)
            and isinstance(fit_record.get("data"), str)
            and isinstance(fit_record.get("start"), dict | None)
        ):
            raise ValueError(
                "fit_record must be {'data': str, 'start': dict or None}, got "
                f"{fit_record!r:.200}."
            )
        if pilot_state is not None and not isinstance(pilot_state, dict):
            raise ValueError(
                "pilot_state must be a tensors_to_json() dict, got "
                f"{type(pilot_state).__name__}."
            )
        check_seed(seed)
        self.seed = seed
        self.sketch_state = sketch_state
        self.fit_record = fit_record
        self.pilot_state = pilot_state
        #: Whether the surrogate is a cached one (never refitted in place).
        self._shared_surrogate = False

    def fit(
        self,
        datasets: Sequence[SupervisedDataset],
        search_space_digest: SearchSpaceDigest,
        candidate_metadata: Any = None,
        state_dict: Any = None,
        refit: bool = True,
        **additional_model_inputs: Any,
    ) -> None:
        r"""``BoTorchGenerator.fit`` with the sketch state as the model's warm start.

        The state is handed to the ``NystromGP`` configurations for this fit only
        (the strategy's stored options do not change), and replaced by the new
        model's state afterwards.
        """
        carried = refit and _single_outcome(datasets)
        configs = self._model_configs(NystromGP) if carried else []
        pilots = self._model_configs(GradientSubsetGP) if carried else []
        num_points = _num_points(datasets)
        if self._shared_surrogate:  # a cached model is never refitted in place
            self._surrogate, self._shared_surrogate = None, False
        data_key = None
        if configs and state_dict is None:
            data_key = _data_fingerprint(datasets, search_space_digest)
        start = self.sketch_state
        record = self.fit_record
        if data_key is not None and record is not None and record["data"] == data_key:
            start = record["start"]  # the same data: the recorded fit again
        if configs and start is not None:
            problem = sketch_state_problem(start, num_points)
            if problem is not None:
                logger.warning(
                    "Carried NystromGP state discarded (%s); fitting from scratch.",
                    problem,
                )
                start = None
        cache_key = None
        if data_key is not None:
            cache_key = self._cache_key(data_key, start, additional_model_inputs)
        cached = None
        if cache_key is not None:
            with _FIT_CACHE_LOCK:
                cached = _FIT_CACHE.get(cache_key)
                if cached is not None:
                    _FIT_CACHE.move_to_end(cache_key)
        if cached is not None:
            self._surrogate, self._shared_surrogate = cached, True
            logger.debug("NystromGP reused: the data did not change since its fit.")
        else:
            fit_kwargs = dict(
                datasets=datasets,
                search_space_digest=search_space_digest,
                candidate_metadata=candidate_metadata,
                state_dict=state_dict,
                refit=refit,
                **additional_model_inputs,
            )
            if pilots:
                self._fit_with_pilot(pilots, **fit_kwargs)
            else:
                start = self._fit_from(start, configs, **fit_kwargs)
        model = self.surrogate.model
        if pilots and isinstance(model, GradientSubsetGP):
            self.pilot_state = tensors_to_json(model.state_dict())
        if configs and isinstance(model, NystromGP):
            self.sketch_state = model.sketch_state().to_dict()
            self.fit_record = (
                None if data_key is None else {"data": data_key, "start": start}
            )
            if cached is None and cache_key is not None:
                with _FIT_CACHE_LOCK:
                    _FIT_CACHE[cache_key] = self.surrogate
                    while len(_FIT_CACHE) > FIT_CACHE_SIZE:
                        _FIT_CACHE.popitem(last=False)
                self._shared_surrogate = True

    def _fit_from(
        self,
        start: dict[str, Any] | None,
        configs: list[ModelConfig],
        datasets: Sequence[SupervisedDataset],
        **fit_kwargs: Any,
    ) -> dict[str, Any] | None:
        r"""``BoTorchGenerator.fit`` warm-started from ``start``; the start used.

        A warm-started fit that fails (``NotPSDError``) is rerun from scratch
        (the start used is then ``None``).
        """
        options = {"warm_start": start} if start is not None else {}
        # A state that passed the checks can still be unusable on this data
        # (e.g. hand-edited hyperparameters): Ax's own models refit.
        used = self._fit_with_options(
            configs, options, (NotPSDError,), "NystromGP state", datasets, **fit_kwargs
        )
        return start if used else None

    def _fit_with_pilot(
        self,
        configs: list[ModelConfig],
        datasets: Sequence[SupervisedDataset],
        **fit_kwargs: Any,
    ) -> None:
        r"""``BoTorchGenerator.fit`` with the carried pilot (module docstring).

        A carried pilot that is unusable on this data (it does not parse, is not
        finite, or does not fit the model's modules) is discarded with a warning
        and the fit runs without it.
        """
        pilot, problem = None, None
        if self.pilot_state is not None:
            pilot, problem = _parse_pilot(self.pilot_state, datasets[0].X)
        if problem is not None:
            logger.warning("Carried GSSBO pilot discarded (%s).", problem)
        options = {"pilot": pilot, "warm_start": True} if pilot is not None else {}
        self._fit_with_options(
            configs,
            options,
            (ValueError, NotPSDError),
            "GSSBO pilot",
            datasets,
            **fit_kwargs,
        )

    def _fit_with_options(
        self,
        configs: list[ModelConfig],
        options: dict[str, Any],
        errors: tuple[type[Exception], ...],
        what: str,
        datasets: Sequence[SupervisedDataset],
        **fit_kwargs: Any,
    ) -> bool:
        r"""``BoTorchGenerator.fit`` with ``options`` added to ``configs``' model
        options for this fit only (the strategy's stored options do not change).

        A fit with the options that raises one of ``errors`` is logged as ``what``
        discarded and rerun without them. Returns whether the options were used.
        """
        num_points = _num_points(datasets)

        def fit_once() -> None:
            with with_rng_seed(self._call_seed(num_points)):
                super(SketchBoTorchGenerator, self).fit(datasets=datasets, **fit_kwargs)

        def drop() -> None:
            for config in configs:
                for key in options:
                    config.model_options.pop(key, None)

        used = bool(configs) and bool(options)
        for config in configs if used else []:
            config.model_options.update(options)
        try:
            fit_once()
        except errors as err:
            if not used:
                raise
            logger.warning(
                "Carried %s discarded (the fit with it failed: %s); fitting without.",
                what,
                err,
            )
            used = False
            drop()
            fit_once()
        finally:
            drop()
        return used

    def _cache_key(
        self,
        data_key: str,
        start: dict[str, Any] | None,
        additional_model_inputs: dict[str, Any],
    ) -> str:
        r"""Every input of a fit: data, configuration, seed and starting state."""
        parts = [
            data_key,
            repr(self.surrogate_spec),
            repr(self._surrogate.surrogate_spec if self._surrogate else None),
            repr((self.refit_on_cv, self.warm_start_refit, self.seed)),
            repr(sorted(additional_model_inputs.items())),
            json.dumps(start, sort_keys=True, default=str),
        ]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()

    def gen(
        self,
        n: int,
        search_space_digest: SearchSpaceDigest,
        torch_opt_config: TorchOptConfig,
    ) -> TorchGenResults:
        r"""``BoTorchGenerator.gen`` inside this call's seeded random context."""
        pending = torch_opt_config.pending_observations or []
        num_pending = max((int(p.shape[0]) for p in pending), default=0)
        num_points = _num_points(self.surrogate.training_data) + num_pending
        acqf = (self._botorch_acqf_class, self._botorch_acqf_options)
        if torch_opt_config.is_moo and self._botorch_acqf_class in SINGLE_OBJECTIVE:
            # qUCB has no multi-objective form: the model's posterior goes to
            # Ax's multi-objective default, qLogNEHVI, for this call.
            logger.info(
                "%s: multi-objective experiment, using %s.",
                self._botorch_acqf_class.__name__,
                MULTI_OBJECTIVE_ACQF.__name__,
            )
            self._botorch_acqf_class, self._botorch_acqf_options = (
                MULTI_OBJECTIVE_ACQF,
                {},
            )
        try:
            with with_rng_seed(self._call_seed(num_points)):
                return super().gen(
                    n=n,
                    search_space_digest=search_space_digest,
                    torch_opt_config=torch_opt_config,
                )
        finally:
            self._botorch_acqf_class, self._botorch_acqf_options = acqf

    def best_point(
        self,
        search_space_digest: SearchSpaceDigest,
        torch_opt_config: TorchOptConfig,
    ) -> Tensor | None:
        r"""``BoTorchGenerator.best_point``, kept with a reused model.

        Ax asks for the in-sample best point after every generation call (three
        posterior predictions at every observed point). While the data do not
        change the model is the cached one, never refitted in place, and so is
        its answer to the same request: it is computed once per model object and
        request (objective, constraints, fixed features, search space; pending
        points do not enter it).
        """
        key = _best_point_key(search_space_digest, torch_opt_config)
        if not self._shared_surrogate or key is None:
            return super().best_point(search_space_digest, torch_opt_config)
        model = self.surrogate.model
        with _FIT_CACHE_LOCK:
            memo = _BEST_POINTS.setdefault(model, {})
            if key in memo:
                best = memo[key]
                return None if best is None else best.clone()
        best = super().best_point(search_space_digest, torch_opt_config)
        with _FIT_CACHE_LOCK:
            memo[key] = None if best is None else best.clone()
        return best

    def _call_seed(self, num_points: int) -> int | None:
        """The seed of a call that sees ``num_points`` points (``None``: unseeded)."""
        if self.seed is None:
            return None
        return (self.seed * 1_000_003 + num_points) % (2**31 - 1)

    def _model_configs(self, model_class: type) -> list[ModelConfig]:
        spec = self.surrogate_spec
        if spec is None:
            return []
        configs = list(spec.model_configs)
        for config_list in spec.metric_to_model_configs.values():
            configs.extend(config_list)
        return [c for c in configs if c.botorch_model_class is model_class]

    def _get_state(self) -> dict[str, Any]:
        r"""``{"sketch_state", "fit_record", "pilot_state"}``: what the next
        call starts from."""
        state = super()._get_state()
        if self.sketch_state is not None:
            state["sketch_state"] = self.sketch_state
        if self.fit_record is not None:
            state["fit_record"] = self.fit_record
        if self.pilot_state is not None:
            state["pilot_state"] = self.pilot_state
        return state


def _parse_pilot(
    state: dict[str, Any], like: Tensor
) -> tuple[dict[str, Tensor] | None, str | None]:
    r"""A carried pilot as tensors of ``like``'s dtype and device, or why not."""
    try:
        pilot = tensors_from_json(state, dtype=like.dtype, device=like.device)
    except ValueError as err:
        return None, f"unreadable: {err}"
    bad = _non_finite(pilot)
    if bad:
        return None, f"non-finite hyperparameters {bad}"
    return pilot, None


def _non_finite(tensors: dict[str, Tensor]) -> list[str]:
    r"""Names of the tensors holding a NaN, or an infinity outside a constraint's
    bounds (a bound may be infinite, a hyperparameter may not)."""
    return sorted(
        name
        for name, value in tensors.items()
        if bool(torch.isnan(value).any())
        or ("_constraint." not in name and not bool(torch.isfinite(value).all()))
    )


def sketch_state_problem(state: Any, num_points: int) -> str | None:
    r"""What makes a carried ``SketchState.to_dict()`` unusable, or ``None``.

    A state is usable when it parses, its hyperparameters are finite (the bounds
    of their constraints may be infinite) and its
    dictionary rows index the ``num_points`` training rows of this fit
    (``0 <= row < num_points``; the data only grow between calls).
    """
    try:
        parsed = SketchState.from_dict(state)
    except (ValueError, TypeError, KeyError, RuntimeError) as err:
        return f"unreadable: {err}"
    bad = _non_finite(dict(parsed.hyperparameters))
    if bad:
        return f"non-finite hyperparameters {bad}"
    rows = parsed.dictionary_rows
    if rows.numel() > 0 and (int(rows.min()) < 0 or int(rows.max()) >= num_points):
        return (
            f"dictionary rows outside 0..{num_points - 1} "
            f"(min {int(rows.min())}, max {int(rows.max())})"
        )
    if not 0 <= parsed.num_fit_points <= num_points:
        return f"num_fit_points={parsed.num_fit_points} outside 0..{num_points}"
    return None


def _best_point_key(
    search_space_digest: SearchSpaceDigest, torch_opt_config: TorchOptConfig
) -> str | None:
    r"""What ``best_point`` reads of a request, as a string; ``None`` where a
    field is not plain data (a learned objective, a pruning target)."""
    c = torch_opt_config
    if c.use_learned_objective or c.pruning_target_point is not None:
        return None

    def plain(value: Any) -> Any:
        if isinstance(value, Tensor):
            return (tuple(value.shape), value.tolist())
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return sorted((k, plain(v)) for k, v in value.items())
        return value

    fields = (
        c.objective_weights,
        c.outcome_constraints,
        c.objective_thresholds,
        c.linear_constraints,
        c.equality_constraints,
        c.fixed_features,
        c.model_gen_options,
    )
    return repr((plain(list(fields)), repr(search_space_digest)))


def _num_points(datasets: Sequence[SupervisedDataset]) -> int:
    return max((int(ds.X.shape[-2]) for ds in datasets), default=0)


def _data_fingerprint(
    datasets: Sequence[SupervisedDataset], search_space_digest: SearchSpaceDigest
) -> str:
    r"""A hash of the training data and the search space's bounds (what a fit
    sees of the experiment), equal across processes for equal data."""
    digest = hashlib.sha256()
    digest.update(repr(search_space_digest.bounds).encode())
    for ds in datasets:
        digest.update(repr((ds.feature_names, ds.outcome_names)).encode())
        for tensor in (ds.X, ds.Y, ds.Yvar):
            if tensor is None:
                digest.update(b"none")
                continue
            values = tensor.detach().to("cpu", torch.float64).contiguous()
            digest.update(repr(tuple(values.shape)).encode())
            digest.update(values.numpy().tobytes())
    return digest.hexdigest()


def _single_outcome(datasets: Sequence[SupervisedDataset]) -> bool:
    return len(datasets) == 1 and datasets[0].Y.shape[-1] == 1


#: Ax's generator setups plus ours.
_SETUPS: dict[str, GeneratorSetup] = {
    **GENERATOR_KEY_TO_GENERATOR_SETUP,
    SKETCH_GENERATOR_KEY: GeneratorSetup(
        adapter_class=SketchTorchAdapter,
        generator_class=SketchBoTorchGenerator,
        transforms=MBM_X_trans + Y_trans,  # as Generators.BOTORCH_MODULAR
        # Passed back at every fit; kept in generator_state_after_gen only.
        not_saved_generator_kwargs=["sketch_state", "fit_record", "pilot_state"],
    ),
    LIBRARY_GENERATOR_KEY: GeneratorSetup(
        adapter_class=SketchTorchAdapter,
        generator_class=BBKBLibraryGenerator,
        # Inputs only: the engine keeps reward sums, so the rewards' scaling is
        # frozen by the generator itself, not re-fitted by Ax at every call.
        transforms=MBM_X_trans,
        # The library is stored once, in the strategy's node; a copy in every
        # generator run would make the JSON grow by the library at each trial.
        not_saved_generator_kwargs=["engine_state", "candidate_set"],
    ),
}


class SketchGenerators(GeneratorRegistryBase):
    r"""Generator registry entries of this package (like Ax's ``Generators``)."""

    BOTORCH_SKETCH = SKETCH_GENERATOR_KEY
    BBKB_LIBRARY = LIBRARY_GENERATOR_KEY

    @property
    def GENERATOR_KEY_TO_GENERATOR_SETUP(self) -> dict[str, GeneratorSetup]:  # noqa: N802
        """Ax's generator setups plus :class:`SketchBoTorchGenerator`'s."""
        return _SETUPS
