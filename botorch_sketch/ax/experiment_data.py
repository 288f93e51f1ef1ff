r"""Ax's training-data extraction, incremental over a long experiment.

Every ``GenerationStrategy.gen`` call of a model-based node builds a new
adapter, and Ax 1.3's adapter starts with
``ax.core.data_utils.extract_experiment_data``: a data frame of every trial's
arm (``Trial.arm`` rebuilds the generator run's arm list several times per
trial), the experiment's data frame again through ``Data.latest`` (Ax writes
``step = NaN`` on every completed row, so the data always "has" a step column),
a pivot and a sort. All of it is ``O(N)`` Python for ``N`` trials at every
call, so a run of ``N`` evaluations in batches of ``b`` pays ``O(N^2 / b)``:
about 0.45 s per call at 5,000 trials on one CPU thread, more than the
region's model and Thompson sample together.

:func:`incremental_experiment_data` returns the same ``ExperimentData`` (equal
frames: values, dtypes, index and column order) but reuses its previous answer
for the experiment's settled prefix: the leading trials, in index order, that
were in a terminal status (completed, failed, abandoned, early stopped) at the
previous call. Ax's own function runs only on the trials after the prefix, and
the two parts are concatenated. The reuse is checked at each call, and any
difference falls back to Ax's function on the whole experiment:

- the same experiment object, data-loader configuration and metrics;
- the prefix's trials are the same objects with the same status and completion
  time, at the same indices;
- the experiment's data rows of the prefix's trials are the same ``DataRow``
  objects (:mod:`~botorch_sketch.ax.data_rows`: read without building Ax's data
  frame of every row);
- no ``step`` values, or one step value per metric (Ax's closed loop records
  an ``IMetric``'s progression, 0 for a final value, on every row; learning-curve
  data normalises steps across trials, so one new row can change them all);
- only one-arm ``Trial`` s with Ax's default arm names (``"<trial>_<arm>"``),
  so that the concatenation is in Ax's sort order;
- both parts have the same columns, dtypes and index levels.

Below :data:`MIN_TRIALS` trials, or where Ax keeps no row list, it is Ax's
function. The new trials' observations are framed from their rows where they
are plain (no times or counts). A copy of the experiment that shares its
generator runs (a background refill's snapshot) can take over its extraction
(:func:`adopt_prefix`).

:func:`fast_experiment_data` installs it in place of Ax's function for the
adapter (``ax.adapter.base``) inside a ``with`` block; the package's adapter,
:class:`~botorch_sketch.ax.adapter.SketchTorchAdapter`, extracts its training
data inside one.
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

import ax.adapter.base as ax_adapter_base
import numpy as np
import pandas as pd
from ax.core.base_trial import TrialStatus
from ax.core.data import MAP_KEY, Data, DataRow
from ax.core.data_utils import (
    DataLoaderConfig,
    ExperimentData,
    _extract_arm_data,
    _extract_observation_data,
)
from ax.core.data_utils import extract_experiment_data as ax_extract_experiment_data
from ax.core.experiment import Experiment
from ax.core.map_metric import MapMetric
from ax.core.trial import Trial

from botorch_sketch.ax.data_rows import data_rows, rows_before, same_rows
from botorch_sketch.ax.swap import ModuleSwap

__all__ = ["adopt_prefix", "fast_experiment_data", "incremental_experiment_data"]

#: Statuses after which Ax changes nothing about a trial's arm or data by itself.
SETTLED = frozenset(
    {
        TrialStatus.COMPLETED,
        TrialStatus.FAILED,
        TrialStatus.ABANDONED,
        TrialStatus.EARLY_STOPPED,
    }
)
_DEFAULT_ARM_NAME = re.compile(r"^\d+_\d+$")
#: :func:`_metric_steps`' value for rows without a step.
_NO_STEP = "no step"
#: Fewer trials than this: Ax's function, which is then as fast as the reuse's fixed
#: pandas cost on the new trials (``benchmarks/results/pending.md``).
MIN_TRIALS = 250


@dataclass(frozen=True)
class _Part:
    r"""An extraction and the dtypes of the arm frame before Ax's row filter."""

    result: ExperimentData
    arm_dtypes: pd.Series


@dataclass(frozen=True)
class _Prefix:
    r"""The extraction of an experiment's first ``len(trials)`` trials.

    Attributes:
        config: The data-loader configuration it was extracted with.
        metrics: The experiment's metric signatures then.
        trials: ``id(trial)`` of each trial, in index order (the trial at
            position ``i`` has index ``i``).
        runs: Each trial's generator runs (the objects), for
            :func:`adopt_prefix`.
        steps: Each metric's one step value in the experiment's rows when
            remembered (:func:`_merged_steps`; a metric of the later trials'
            rows too, which the next call's rows must then agree with).
        completed: Their completion times.
        statuses: Their indices by (settled) status.
        rows: The experiment data's ``DataRow`` objects of those trials.
        part: The extraction restricted to those trials, with the dtypes of the
            whole arm frame it was cut from.
    """

    config: DataLoaderConfig
    metrics: tuple[str, ...]
    trials: list[int]
    runs: list[tuple[Any, ...]]
    steps: dict[str, Any]
    completed: list[Any]
    statuses: dict[TrialStatus, set[int]]
    rows: list[Any]
    part: _Part


_LOCK = threading.Lock()
#: ``id(experiment) -> (weak reference, prefix or None)``; an entry leaves with its
#: experiment (one finalizer each), ``None`` while nothing is held.
_PREFIXES: dict[int, tuple[weakref.ref, _Prefix | None]] = {}


def incremental_experiment_data(
    experiment: Experiment,
    data_loader_config: DataLoaderConfig,
    data: Data | None = None,
) -> ExperimentData:
    r"""Ax's ``extract_experiment_data`` (same signature, same result), reusing
    the previous call's extraction of the experiment's settled leading trials.

    Args:
        experiment: The experiment to extract arms and observations from.
        data_loader_config: Ax's data-loading options.
        data: The observations (default: ``experiment.lookup_data()``).

    Returns:
        ``ExperimentData`` equal to Ax's function's.
    """
    data = data or experiment.lookup_data()
    trials = list(experiment.trials.values())
    rows = data_rows(data)
    if len(trials) < MIN_TRIALS or rows is None:
        return ax_extract_experiment_data(experiment, data_loader_config, data)
    prefix = _valid_prefix(experiment, data_loader_config, trials, rows)
    held = 0 if prefix is None else len(prefix.trials)
    tail = [row for row in rows if row.trial_index >= held]
    steps = _merged_steps({} if prefix is None else prefix.steps, _metric_steps(tail))
    if steps is None or not _eligible(trials[held:], tail):
        _forget(experiment)
        return ax_extract_experiment_data(experiment, data_loader_config, data)
    stepped = _stepped(steps)
    part = None
    if prefix is not None:
        part = _extend(experiment, data_loader_config, tail, trials, prefix, stepped)
    if part is None:
        prefix = None
        part = _extract(experiment, trials, data_loader_config, data)
    _remember(experiment, data_loader_config, trials, rows, part, prefix, steps)
    return part.result


def adopt_prefix(source: Experiment, target: Experiment) -> bool:
    r"""Let ``target``, a copy of ``source``, reuse the extraction remembered for
    ``source``'s settled prefix (a background refill's snapshot of the
    experiment, :meth:`~botorch_sketch.ax.ray.LookaheadOrchestrator._snapshot`,
    taking over the previous snapshot's extraction instead of starting from
    none).

    The copy qualifies where its first trials are at the same indices, have the
    same generator runs (the same objects: the snapshot shares them) and the
    same completion times; their statuses, the data's rows, the metrics and the
    loader configuration are checked at the next call as for any prefix
    (:func:`incremental_experiment_data`). The remembered frames are shared,
    never changed.

    Args:
        source: The experiment whose extraction is remembered.
        target: Its copy.

    Returns:
        Whether ``target`` now holds the prefix (``False``: nothing to adopt, or
        the trials differ; ``target`` then keeps what it held).
    """
    prefix = _held(source)
    if prefix is None:
        return False
    count = len(prefix.trials)
    trials = list(target.trials.values())[:count]
    if len(trials) < count or any(t.index != i for i, t in enumerate(trials)):
        return False
    for trial, runs in zip(trials, prefix.runs, strict=True):
        if not same_rows(trial.generator_runs, runs):  # the same objects
            return False
    if [trial.time_completed for trial in trials] != prefix.completed:
        return False
    _hold(target, replace(prefix, trials=[id(trial) for trial in trials]))
    return True


def fast_experiment_data() -> AbstractContextManager[None]:
    r"""Use :func:`incremental_experiment_data` for the adapter's
    ``extract_experiment_data`` inside the block (re-entrant and thread-safe;
    Ax's function is back once the last open block closes)."""
    return _SWAP()


def _eligible(trials: list[Any], rows: list[Any]) -> bool:
    r"""``trials`` (those after the held prefix) are one-arm ``Trial`` s, and
    their ``rows`` have default arm names (the held trials' rows were checked
    when they were remembered and are the same objects)."""
    if any(type(trial) is not Trial for trial in trials):
        return False
    return all(_DEFAULT_ARM_NAME.match(row.arm_name) for row in rows)


def _metric_steps(rows: list[Any]) -> dict[str, Any] | None:
    r"""Each metric's one step value in ``rows`` (:data:`_NO_STEP` for rows
    without one), or ``None`` where a metric has several."""
    steps: dict[str, Any] = {}
    for row in rows:
        step = _NO_STEP if row.step is None or math.isnan(row.step) else row.step
        if steps.setdefault(row.metric_signature, step) != step:
            return None
    return steps


def _merged_steps(
    first: dict[str, Any] | None, second: dict[str, Any] | None
) -> dict[str, Any] | None:
    r"""The step values of two row lists together (:func:`_metric_steps`), or
    ``None`` where a metric's differ or some metrics have steps and others not.

    Ax normalises each metric's steps to ``[0, 1]`` over the whole experiment
    (a metric with one step value gets ``1.0``) and indexes the observations by
    step where any row has one: learning-curve data can change every row's
    index with one new row. The reuse covers what Ax's own loop produces: no
    steps, or one step per metric (an ``IMetric``'s progression, 0 for a
    final value: every row then at step ``1.0``)."""
    if first is None or second is None:
        return None
    merged = dict(first)
    for metric, step in second.items():
        if merged.setdefault(metric, step) != step:
            return None
    if len({step == _NO_STEP for step in merged.values()}) > 1:
        return None
    return merged


def _stepped(steps: dict[str, Any]) -> bool:
    r"""Whether the observations are indexed by step (every metric has one)."""
    return bool(steps) and all(step != _NO_STEP for step in steps.values())


def _extract(
    experiment: Experiment,
    trials: list[Trial],
    config: DataLoaderConfig,
    data: Data | None = None,
    rows: list[Any] | None = None,
    stepped: bool = False,
) -> _Part:
    r"""Ax's ``extract_experiment_data`` on ``trials``, step by step, keeping the
    arm frame's dtypes before the row filter: their observations are ``data``,
    or ``rows`` (each metric at one step where ``stepped``), framed directly
    where they are plain (:func:`_observation_frame`) and else as ``Data``
    (:func:`_tail_data`). Without step values the observations are indexed by
    ``(trial_index, arm_name)``."""
    view = _TrialsView(experiment, trials)
    arms = _extract_arm_data(experiment=view)
    observations = None
    if rows is not None:
        observations = _observation_frame(view, config, rows, stepped)
        data = _tail_data(rows, stepped) if observations is None else None
    if observations is None:
        observations = _extract_observation_data(
            experiment=view, data_loader_config=config, data=data
        )
    index = observations.index
    if index.nlevels > 2:  # (trial_index, arm_name, step): Ax keeps two levels
        index = index.droplevel(list(range(2, index.nlevels)))
    return _Part(
        result=ExperimentData(
            arm_data=arms.loc[arms.index.isin(index)],
            observation_data=observations,
        ),
        arm_dtypes=arms.dtypes,
    )


def _valid_prefix(
    experiment: Experiment,
    config: DataLoaderConfig,
    trials: list[Trial],
    rows: list[Any],
) -> _Prefix | None:
    r"""The remembered prefix, if it still describes the experiment."""
    prefix = _held(experiment)
    if prefix is None:
        return None
    count = len(prefix.trials)
    if (
        count > len(trials)
        or prefix.config != config
        or prefix.metrics != _metric_signatures(experiment)
    ):
        return None
    held = trials[:count]
    if [id(trial) for trial in held] != prefix.trials:
        return None
    if [trial.time_completed for trial in held] != prefix.completed:
        return None
    # Ax keeps the indices by status as statuses change: a held trial whose index
    # is still in its status's set has that status.
    now = experiment.trial_indices_by_status
    if any(not indices <= now[status] for status, indices in prefix.statuses.items()):
        return None
    if not same_rows(rows_before(rows, count), prefix.rows):
        return None
    return prefix


def _extend(
    experiment: Experiment,
    config: DataLoaderConfig,
    rows: list[Any],
    trials: list[Trial],
    prefix: _Prefix,
    stepped: bool = False,
) -> _Part | None:
    r"""The prefix's extraction followed by that of the other trials (``rows``:
    the data's rows of those); ``None`` where the two parts would not
    concatenate to Ax's answer."""
    head = prefix.part
    count = len(prefix.trials)
    rest = trials[count:]
    if not rest:
        return head
    tail = _extract(experiment, rest, config, rows=rows, stepped=stepped)
    if not tail.arm_dtypes.equals(head.arm_dtypes):
        return None  # the whole arm frame would infer other dtypes
    if tail.result.observation_data.empty:
        return head
    observations = (head.result.observation_data, tail.result.observation_data)
    if not (
        observations[0].columns.equals(observations[1].columns)
        and observations[0].dtypes.equals(observations[1].dtypes)
        and observations[0].index.names == observations[1].index.names
    ):
        return None
    return _Part(
        result=ExperimentData(
            arm_data=pd.concat([head.result.arm_data, tail.result.arm_data]),
            observation_data=pd.concat(observations),
        ),
        arm_dtypes=head.arm_dtypes,
    )


def _observation_frame(
    view: _TrialsView, config: DataLoaderConfig, rows: list[Any], stepped: bool
) -> pd.DataFrame | None:
    r"""Ax's ``_extract_observation_data`` of ``rows`` (the rows of the one-arm
    trials of ``view``; with ``stepped``, each metric at one step, which Ax
    normalises to ``1.0`` and adds as an index level), built from the rows instead of
    Ax's data frame, pivot and sort (about 8 ms of pandas per call, whatever
    the number of rows); ``None`` where Ax's function is needed: rows with
    times, counts or a repeated ``(trial, arm, metric)``. Without a row kept
    the frame is empty.

    Ax keeps a row if its metric is one of the experiment's and its trial's
    status (a one-arm trial's arm is abandoned when the trial is) is in
    ``config.statuses_to_fit`` (``statuses_to_fit_map_metric`` for a metric
    with learning-curve data); the frame is indexed by
    ``(trial_index, arm_name)`` in that order (one arm per trial), with columns
    ``("mean", signature)`` then ``("sem", signature)`` for the sorted
    signatures of the kept rows, NaN where a trial lacks a metric.
    """
    statuses = {
        metric.signature: (
            config.statuses_to_fit_map_metric
            if isinstance(metric, MapMetric) and metric.has_map_data
            else config.statuses_to_fit
        )
        for metric in view.metrics.values()
    }
    kept: dict[tuple[int, str], dict[str, tuple[float, float]]] = {}
    for row in rows:
        if row.start_time is not None or row.end_time is not None or row.n is not None:
            return None
        trial = view.trials.get(row.trial_index)
        if trial is None:
            return None
        if trial.status not in statuses.get(row.metric_signature, ()):
            continue
        cells = kept.setdefault((row.trial_index, row.arm_name), {})
        if row.metric_signature in cells:
            return None
        se = float("nan") if row.se is None else float(row.se)
        cells[row.metric_signature] = (float(row.mean), se)
    keys = sorted(kept)
    signatures = sorted({s for cells in kept.values() for s in cells})
    nan = (float("nan"), float("nan"))
    values = np.array(
        [
            [kept[key].get(s, nan)[field] for field in (0, 1) for s in signatures]
            for key in keys
        ],
        dtype=np.float64,
    ).reshape(len(keys), 2 * len(signatures))
    # Ax builds its frames with pandas' string inference off: object levels.
    levels = [
        pd.Index([key[0] for key in keys], dtype=np.int64),
        pd.Index([key[1] for key in keys], dtype=object),
    ]
    names = ["trial_index", "arm_name"]
    if stepped:  # one step per metric, normalised by Ax to 1.0
        levels.append(pd.Index(np.ones(len(keys)), dtype=np.float64))
        names.append(MAP_KEY)
    index = pd.MultiIndex.from_arrays(levels, names=names)
    columns = pd.MultiIndex.from_arrays(
        [
            pd.Index(
                ["mean"] * len(signatures) + ["sem"] * len(signatures), dtype=object
            ),
            pd.Index(signatures * 2, dtype=object),
        ],
        names=[None, "metric_signature"],
    )
    return pd.DataFrame(values, index=index, columns=columns)


def _tail_data(rows: list[Any], stepped: bool = False) -> Data:
    r"""``rows`` as ``Data``; without their step column (unless ``stepped``:
    each metric at one step) where Ax's ``Data.latest`` would keep every row
    and order nothing that matters: one row per (trial, arm, metric) and no
    metadata (times, ``n``). Ax's extraction drops an all-NaN step column after
    ``latest``, which costs two more data frames."""
    keys = {(row.trial_index, row.arm_name, row.metric_name) for row in rows}
    plain = all(
        row.start_time is None and row.end_time is None and row.n is None
        for row in rows
    )
    if plain and len(keys) == len(rows):
        rows = [
            DataRow(
                trial_index=row.trial_index,
                arm_name=row.arm_name,
                metric_name=row.metric_name,
                metric_signature=row.metric_signature,
                mean=row.mean,
                se=row.se,
                step=row.step if stepped else None,
            )
            for row in rows
        ]
    return Data(data_rows=rows)


def _remember(
    experiment: Experiment,
    config: DataLoaderConfig,
    trials: list[Trial],
    rows: list[Any],
    part: _Part,
    prefix: _Prefix | None,
    steps: dict[str, Any],
) -> None:
    r"""Keep the extraction of the leading settled trials for the next call
    (``prefix``: the still valid one it extends; ``steps``: each metric's one
    step value over all of ``rows``, :func:`_merged_steps`)."""
    ids = [] if prefix is None else list(prefix.trials)
    runs = [] if prefix is None else list(prefix.runs)
    completed = [] if prefix is None else list(prefix.completed)
    statuses = {} if prefix is None else {s: set(i) for s, i in prefix.statuses.items()}
    for position in range(len(ids), len(trials)):
        trial = trials[position]
        status = trial.status
        if trial.index != position or status not in SETTLED:
            break
        ids.append(id(trial))
        runs.append(tuple(trial.generator_runs))
        completed.append(trial.time_completed)
        statuses.setdefault(status, set()).add(position)
    count = len(ids)
    if count == 0:
        _forget(experiment)
        return
    held_rows = rows_before(rows, count)
    arms = part.result.arm_data
    observations = part.result.observation_data
    remembered = _Prefix(
        config=config,
        metrics=_metric_signatures(experiment),
        trials=ids,
        runs=runs,
        steps=steps,
        completed=completed,
        statuses=statuses,
        rows=held_rows,
        part=_Part(
            result=ExperimentData(
                arm_data=arms.loc[_trial_level(arms) < count].copy(),
                observation_data=observations.loc[
                    _trial_level(observations) < count
                ].copy(),
            ),
            arm_dtypes=part.arm_dtypes,
        ),
    )
    _hold(experiment, remembered)


def _trial_level(frame: pd.DataFrame) -> Any:
    return frame.index.get_level_values("trial_index")


def _metric_signatures(experiment: Experiment) -> tuple[str, ...]:
    return tuple(sorted(metric.signature for metric in experiment.metrics.values()))


def _held(experiment: Experiment) -> _Prefix | None:
    r"""The prefix remembered for this experiment object, if any."""
    with _LOCK:
        entry = _PREFIXES.get(id(experiment))
    if entry is None or entry[0]() is not experiment:
        return None
    return entry[1]


def _hold(experiment: Experiment, prefix: _Prefix | None) -> None:
    key = id(experiment)
    with _LOCK:
        entry = _PREFIXES.get(key)
        fresh = entry is None or entry[0]() is not experiment
        if fresh and prefix is None:
            return
        _PREFIXES[key] = (weakref.ref(experiment), prefix)
    if fresh:
        weakref.finalize(experiment, _drop, key)


def _forget(experiment: Experiment) -> None:
    _hold(experiment, None)


def _drop(key: int) -> None:
    with _LOCK:
        _PREFIXES.pop(key, None)


class _TrialsView:
    r"""An experiment seen through some of its trials, for Ax's extraction
    helpers (which read ``trials``, ``metrics`` and ``parameters``)."""

    def __init__(self, experiment: Experiment, trials: list[Trial]) -> None:
        self.trials: Mapping[int, Trial] = {trial.index: trial for trial in trials}
        self.metrics = experiment.metrics
        self.parameters = experiment.parameters


_SWAP = ModuleSwap(
    ax_adapter_base, "extract_experiment_data", lambda: incremental_experiment_data
)
