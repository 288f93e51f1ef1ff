r"""Adaptive-size batches as Ax trials.

BBKB decides the batch size itself (:class:`~botorch_sketch.ax.AdaptiveBatchAcquisition`
returns ``1 <= k <= n`` arms in one generator run). Ax can hold such a batch in two
ways:

- :func:`new_adaptive_batch_trial`: one ``BatchTrial`` of ``k`` arms (Ax's own
  object for a batch evaluated together; low-level ``Experiment`` API, data attached
  with ``trial.attach_batch_trial_data``).
- :func:`get_next_batch`: ``k`` one-arm ``Trial`` s on an ``ax.Client`` (which
  cannot attach data to a ``BatchTrial``), completed with the usual
  ``client.complete_trial`` or, a batch at once, with
  :func:`~botorch_sketch.ax.complete_trials`.

:func:`gen_filled_batch` is the Orchestrator's variant (``botorch_sketch.ax.ray``):
one batch of exactly ``n`` points, for ``n`` free workers, returned as one-arm
generator runs without touching the experiment.

Ax's generation strategy expects each generator run to become exactly one trial
(``GenerationStrategy.gen_single_trial``). :func:`get_next_batch` therefore does
not split the strategy's run: it keeps that ``k``-arm run out of the experiment
and creates ``k`` new one-arm generator runs carrying the same generation node,
generator key and metadata, so the strategy's trial counting, pending points and
storage see ordinary one-arm trials. Nothing is added to the experiment until all
``k`` runs exist, and an error (or an interrupt) while the ``k`` trials are
created marks the ones already created abandoned, so no trial that was never
returned stays pending.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ax.api.client import Client
from ax.core.batch_trial import BatchTrial
from ax.core.experiment import Experiment
from ax.core.generator_run import GeneratorRun
from ax.core.observation import ObservationFeatures
from ax.core.trial import Trial
from ax.exceptions.core import AxError
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials
from ax.utils.common.random import with_rng_seed

from botorch_sketch.ax.acquisition import AdaptiveBatchAcquisition
from botorch_sketch.ax.generator import SketchGenerators
from botorch_sketch.ax.pending import fast_metric_availability
from botorch_sketch.ax.turbo import TurboGenerators
from botorch_sketch.models.validation import check_fraction

logger = logging.getLogger(__name__)

__all__ = [
    "gen_filled_batch",
    "trials_left_in_generating_node",
    "get_next_batch",
    "new_adaptive_batch_trial",
]

#: What :func:`_remaining_in_node` returns for a node without a trial budget.
_UNLIMITED = 1 << 30

#: ``gen_metadata`` keys recording a one-arm trial's place in its batch.
BATCH_ID_KEY = "adaptive_batch_id"
BATCH_SIZE_KEY = "adaptive_batch_size"
BATCH_POSITION_KEY = "adaptive_batch_position"


def new_adaptive_batch_trial(
    experiment: Experiment,
    generation_strategy: GenerationStrategy,
    max_batch_size: int,
    mark_running: bool = True,
) -> BatchTrial:
    r"""Generate the next batch and add it to ``experiment`` as one ``BatchTrial``.

    With a BBKB strategy the trial has the ``1 <= k <= max_batch_size`` arms that
    the batch rule chose; with any other node (e.g. the Sobol initialisation) it has
    ``max_batch_size`` arms.

    Args:
        experiment: The experiment (``Experiment`` API, not ``ax.Client``).
        generation_strategy: Its generation strategy.
        max_batch_size: Upper bound on the number of arms.
        mark_running: Mark the trial running (so its arms are pending).

    Returns:
        The new ``BatchTrial``; evaluate ``trial.arms``, then
        ``trial.attach_batch_trial_data({arm.name: {metric: value}})`` and
        ``trial.mark_completed()``.
    """
    _check_size(max_batch_size)
    with _expected_short_batches(), fast_metric_availability():
        run = generation_strategy.gen_single_trial(
            experiment=experiment, n=max_batch_size
        )
    if not run.arms:  # pragma: no cover - AdaptiveBatchAcquisition never does this
        raise AxError("The generation strategy produced no arms; no trial created.")
    trial = experiment.new_batch_trial(generator_run=run)
    if mark_running:
        trial.mark_running(no_runner_required=True)
    logger.info("Batch trial %d with %d arm(s).", trial.index, len(trial.arms))
    return trial


def get_next_batch(client: Client, max_batch_size: int) -> dict[int, dict]:
    r"""Ask the client's strategy for its next batch, as one-arm trials.

    The ``ax.Client`` counterpart of ``client.get_next_trials``: instead of a fixed
    count, a BBKB strategy decides how many trials (``1 <= k <= max_batch_size``)
    make up the batch. Before the strategy reaches its model-based node (the Sobol
    initialisation) this is ``client.get_next_trials`` for at most the trials left
    in the initialisation.

    Args:
        client: A configured ``ax.Client`` whose generation strategy is set.
        max_batch_size: Upper bound on the batch size.

    Returns:
        ``{trial_index: parameters}`` like ``client.get_next_trials``; complete each
        with ``client.complete_trial``, or all of them with
        :func:`~botorch_sketch.ax.complete_trials`. A point the batch repeats
        (BBKB may ask for a point again, e.g. when ``min_batch_size`` fills the
        batch) is one trial per repetition.
    """
    _check_size(max_batch_size)
    experiment = client._experiment
    strategy = client._generation_strategy
    if strategy is None:
        raise AxError("Set a generation strategy on the client first.")
    if experiment.optimization_config is None:
        raise AxError("Call client.configure_optimization before generating trials.")
    node = _generating_node(strategy, experiment)
    if not _is_adaptive(node):
        remaining = _remaining_in_node(node, experiment)
        return client.get_next_trials(max_trials=min(max_batch_size, remaining))
    with (
        with_rng_seed(seed=client._random_seed),
        _expected_short_batches(),
        fast_metric_availability(),
    ):
        run = strategy.gen_single_trial(experiment=experiment, n=max_batch_size)
    runs = split_generator_run(run, batch_id=len(experiment.trials))
    created: list[Trial] = []
    try:
        for one_arm_run in runs:
            created.append(experiment.new_trial(generator_run=one_arm_run))
        for trial in created:
            trial.mark_running(no_runner_required=True)
    except BaseException:
        # All or nothing: a trial the caller never receives must not stay
        # pending (Ax cannot delete a trial; an abandoned one is not pending).
        _abandon(created, "get_next_batch failed before returning this trial")
        raise
    trials = {trial.index: dict(trial.arm.parameters) for trial in created}
    logger.info("Adaptive batch of %d trial(s): %s.", len(trials), sorted(trials))
    return trials


def gen_filled_batch(
    strategy: GenerationStrategy,
    experiment: Experiment,
    n: int,
    fixed_features: ObservationFeatures | None = None,
    thompson_fill: float | None = None,
) -> list[GeneratorRun] | None:
    r"""``n`` one-arm generator runs from one BBKB batch of exactly ``n`` points.

    For filling ``n`` free workers at once: the node's
    ``AdaptiveBatchAcquisition`` runs with ``min_batch_size = n`` for this call
    (the batch goes on past the rule's stop with the same greedy sequence and
    its Thompson fill, as for ``n`` parallel workers), with the running and
    candidate trials hallucinated; the run is split as by
    :func:`get_next_batch`. On a trust-region node (``"turbo-bkb"``) the call is
    one TuRBO batch of ``n`` points (one region update and fit, ``n`` Thompson
    samples; TuRBO's batch of ``q``), split the same way: ``n`` calls of one
    point each would fit the region ``n`` times. On a finite library's node
    (``"bbkb"`` with a ``candidate_set``) one engine batch with
    ``min_batch_size = n``. Nothing is added to the experiment.

    Args:
        strategy: The generation strategy.
        experiment: Its experiment.
        n: Points in the batch (``>= 1``).
        fixed_features: Passed to ``GenerationStrategy.gen``.
        thompson_fill: The acquisition's ``thompson_fill`` for this call
            (``None``: the strategy's own; a trust-region or library node has
            none).

    Returns:
        The ``n`` runs (fewer only if the domain has fewer points left), or
        ``None`` when the generating node uses none of
        ``AdaptiveBatchAcquisition``, the trust-region generator and the library
        engine (the caller generates otherwise).
    """
    _check_size(n)
    override: dict[str, Any] = {"min_batch_size": n}
    if thompson_fill is not None:
        check_fraction(thompson_fill, "thompson_fill")
        override["thompson_fill"] = float(thompson_fill)
    node = _generating_node(strategy, experiment)
    specs = [
        spec
        for spec in node.generator_specs
        if spec.generator_kwargs.get("acquisition_class") is AdaptiveBatchAcquisition
    ]
    # A finite library's engine takes the floor as a generator argument (Ax
    # builds the generator anew when its arguments change).
    library = [
        spec
        for spec in node.generator_specs
        if spec.generator_enum is SketchGenerators.BBKB_LIBRARY
    ]
    if not specs and not library and not _is_trust_region(node):
        return None
    changes = [
        (
            spec,
            "acquisition_options",
            {**(spec.generator_kwargs.get("acquisition_options") or {}), **override},
        )
        for spec in specs
    ] + [(spec, "min_batch_size", n) for spec in library]
    with (
        _generator_kwargs_for_the_call(changes),
        _expected_short_batches(),
        fast_metric_availability(),
    ):
        (runs,) = strategy.gen(
            experiment=experiment, n=n, fixed_features=fixed_features
        )
    (run,) = runs
    return split_generator_run(run, batch_id=len(experiment.trials))


@contextmanager
def _generator_kwargs_for_the_call(
    changes: list[tuple[GeneratorSpec, str, Any]],
) -> Iterator[None]:
    r"""Set ``spec.generator_kwargs[key] = value`` for each ``(spec, key, value)``
    inside the block; afterwards (also on an error) every key holds its old value
    again, or is removed where it had none."""
    missing = object()
    saved = [
        (spec, key, spec.generator_kwargs.get(key, missing)) for spec, key, _ in changes
    ]
    try:
        for spec, key, value in changes:
            spec.generator_kwargs[key] = value
        yield
    finally:
        for spec, key, old in saved:
            if old is missing:
                spec.generator_kwargs.pop(key, None)
            else:
                spec.generator_kwargs[key] = old


def _abandon(trials: list[Trial], reason: str) -> None:
    r"""Mark every not yet terminal trial of ``trials`` abandoned."""
    for trial in trials:
        if not trial.status.is_terminal:
            trial.mark_abandoned(reason=reason)
    if trials:
        logger.warning(
            "Adaptive batch interrupted: trial(s) %s abandoned.",
            [t.index for t in trials],
        )


def split_generator_run(run: GeneratorRun, batch_id: int) -> list[GeneratorRun]:
    r"""One new one-arm ``GeneratorRun`` per point of ``run``, same provenance.

    Ax merges repeated points of a generator run into one arm whose weight counts
    them; such an arm becomes that many one-arm runs (BBKB's batch may evaluate a
    point again, and ``min_batch_size=k`` promises ``k`` trials). Each copy
    records ``adaptive_batch_id``, ``adaptive_batch_size`` and
    ``adaptive_batch_position`` in its ``gen_metadata``.
    """
    if not run.arms:
        raise AxError("The generation strategy produced no arms; no trial created.")
    points = [
        arm
        for arm, weight in zip(run.arms, run.weights, strict=True)
        for _ in range(max(1, round(weight)))
    ]
    k = len(points)
    # Per-arm metadata lists are split only when they follow the points' order.
    split = k if k == len(run.arms) else -1
    runs = []
    config, space = run.optimization_config, run.search_space
    for position, arm in enumerate(points):
        # Each run gets its own copies of what ``GeneratorRun.clone`` would copy,
        # without cloning all ``k`` arms ``k`` times.
        metadata = dict(run.gen_metadata or {})
        metadata.update(
            {BATCH_ID_KEY: batch_id, BATCH_SIZE_KEY: k, BATCH_POSITION_KEY: position}
        )
        metadata = {
            key: _entry_for_arm(value, position, split)
            for key, value in metadata.items()
        }
        runs.append(
            GeneratorRun(
                arms=[arm.clone()],
                weights=[1.0],
                optimization_config=None if config is None else config.clone(),
                search_space=None if space is None else space.clone(),
                type=run.generator_run_type,
                fit_time=run.fit_time,
                gen_time=run.gen_time,
                generator_key=run._generator_key,
                generator_kwargs=_copied(run._generator_kwargs),
                adapter_kwargs=_copied(run._adapter_kwargs),
                gen_metadata=metadata,
                # Ax continues from the strategy's own (unsplit) run; a copy of
                # the state in every trial would only grow the JSON.
                generator_state_after_gen=None,
                candidate_metadata_by_arm_signature=_subset_by_arm(
                    run.candidate_metadata_by_arm_signature, arm.signature
                ),
                generation_node_name=run._generation_node_name,
            )
        )
    return runs


def _copied(mapping: dict | None) -> dict | None:
    r"""A shallow copy of a generator run's keyword dict (as its ``clone``)."""
    return None if mapping is None else dict(mapping)


class _ShortBatchFilter(logging.Filter):
    r"""Drops Ax's warning that fewer than ``n`` arms were generated."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "was not able to generate" not in record.getMessage()


@contextmanager
def _expected_short_batches() -> Iterator[None]:
    r"""Silence Ax's "not able to generate n candidates" warning (here ``k < n`` is
    the adaptive rule working, not a failure)."""
    adapter_logger = logging.getLogger("ax.adapter.base")
    short_batch_filter = _ShortBatchFilter()
    adapter_logger.addFilter(short_batch_filter)
    try:
        yield
    finally:
        adapter_logger.removeFilter(short_batch_filter)


def _generating_node(
    strategy: GenerationStrategy, experiment: Experiment
) -> GenerationNode:
    r"""The node that generates next: the current one, or the one it moves to.

    Mirrors the transition check ``GenerationStrategy.gen`` makes first (Ax 1.3
    exposes it only on the node).
    """
    strategy.experiment = experiment
    move, name = strategy._curr.should_transition_to_next_node(
        raise_data_required_error=False
    )
    return strategy.nodes_by_name[name] if move else strategy._curr


def trials_left_in_generating_node(
    strategy: GenerationStrategy, experiment: Experiment
) -> int | None:
    r"""Trials the node that generates next makes before its ``MinTrials`` budget
    is met (``>= 1``), or ``None`` for an open-ended node (e.g. BBKB after the
    Sobol start)."""
    left = _remaining_in_node(_generating_node(strategy, experiment), experiment)
    return None if left == _UNLIMITED else left


def _is_adaptive(node: GenerationNode) -> bool:
    r"""Whether ``node`` lets BBKB choose the batch size: it generates with
    ``AdaptiveBatchAcquisition`` or with the BBKB engine of a finite library."""
    return _is_trust_region(node) or any(
        spec.generator_kwargs.get("acquisition_class") is AdaptiveBatchAcquisition
        or spec.generator_enum is SketchGenerators.BBKB_LIBRARY
        for spec in node.generator_specs
    )


def _is_trust_region(node: GenerationNode) -> bool:
    r"""Whether ``node`` generates with the trust-region generator (``"turbo-bkb"``)."""
    return any(
        spec.generator_enum is TurboGenerators.TURBO_BKB
        for spec in node.generator_specs
    )


def _remaining_in_node(node: GenerationNode, experiment: Experiment) -> int:
    r"""Trials ``node`` generates before its ``MinTrials`` criteria are met (>= 1).

    ``node`` is the node that generates next, so the count is never that of a
    node the strategy is about to leave (whose criteria are met already: with
    trials attached beyond the initialisation, the first model call would
    otherwise be limited to one trial).
    """
    left = [
        criterion.threshold - len(experiment.trials)
        for criterion in node.transition_criteria
        if isinstance(criterion, MinTrials) and criterion.use_all_trials_in_exp
    ]
    return max(1, min(left)) if left else _UNLIMITED


def _entry_for_arm(value: object, position: int, k: int) -> object:
    r"""Per-arm lists in ``gen_metadata`` (e.g. acquisition values) keep one entry."""
    if isinstance(value, list) and len(value) == k:
        return [value[position]]
    return value


def _subset_by_arm(metadata: dict | None, signature: str) -> dict | None:
    if metadata is None or signature not in metadata:
        return None
    return {signature: metadata[signature]}


def _check_size(max_batch_size: int) -> None:
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int):
        raise TypeError(f"max_batch_size must be an int, got {max_batch_size!r}.")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}.")
