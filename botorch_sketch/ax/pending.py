r"""Pending points of a long Ax experiment: metric availability in one pass.

Every ``GenerationStrategy.gen`` call starts with Ax's
``extract_pending_observations``. With more than 100 one-arm trials it takes
Ax's status-based path, which asks ``ax.core.utils.compute_metric_availability``
which metrics each *completed* trial has data for. Ax 1.3 answers that with a
pandas ``groupby`` and one ``Series.unique`` per trial: about 30 us per
completed trial and call, so an experiment of ``N`` trials generated ``b`` at a
time pays ``O(N^2 / b)`` for it (Hartmann6, 2,000 evaluations in batches of 8:
a tenth of the run's CPU; ``benchmarks/results/``).

:func:`metric_availability` returns the same ``{trial_index:
MetricAvailability}`` from one pass over the same data's rows (without the data
frame Ax would build of them, :mod:`~botorch_sketch.ax.data_rows`), and
:func:`fast_metric_availability` puts it in place of Ax's function for the
duration of a ``with`` block (the package's own
generation calls: :func:`~botorch_sketch.ax.get_next_batch`,
:func:`~botorch_sketch.ax.new_adaptive_batch_trial`,
:func:`~botorch_sketch.ax.trials.gen_filled_batch`). Same inputs, same result
(tested against Ax's function on experiments with complete, partial, missing
and extra-metric data), so nothing Ax decides changes; outside the block Ax is
untouched.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager

import ax.core.utils as ax_core_utils
from ax.core.experiment import Experiment
from ax.core.optimization_config import OptimizationConfig
from ax.core.utils import MetricAvailability

from botorch_sketch.ax.data_rows import data_rows
from botorch_sketch.ax.swap import ModuleSwap

__all__ = ["fast_metric_availability", "metric_availability"]


def metric_availability(
    experiment: Experiment,
    trial_indices: Iterable[int] | None = None,
    optimization_config: OptimizationConfig | None = None,
    metric_names: set[str] | None = None,
) -> dict[int, MetricAvailability]:
    r"""Ax's ``compute_metric_availability`` (same signature, same result) in
    ``O(rows)``: which of the required metrics each trial has data for.

    Args:
        experiment: The experiment whose attached data is read (no fetching).
        trial_indices: Trials to classify (``None``: all of the experiment's).
        optimization_config: Whose metrics are required (``None``: the
            experiment's); ignored with ``metric_names``.
        metric_names: The required metrics, explicitly.

    Returns:
        ``{trial_index: NOT_OBSERVED | INCOMPLETE | COMPLETE}``.

    Raises:
        ValueError: No required metrics can be determined (Ax's message).
    """
    if metric_names is not None:
        required = set(metric_names)
    else:
        config = optimization_config or experiment.optimization_config
        if config is None:
            raise ValueError(
                "An optimization config is required to compute metric availability. "
                "Either pass one explicitly, set one on the experiment, or provide "
                "metric_names."
            )
        required = set(config.metric_names)
    indices = list(experiment.trials) if trial_indices is None else list(trial_indices)
    if not indices:
        return {}
    if not required:
        return dict.fromkeys(indices, MetricAvailability.COMPLETE)
    observed: dict[int, set[str]] = {}
    data = experiment.lookup_data()
    rows = data_rows(data)
    if rows is not None:
        # The rows themselves: ``full_df`` would build a frame of every row.
        wanted = set(indices)
        for row in rows:
            if row.trial_index in wanted:
                observed.setdefault(int(row.trial_index), set()).add(row.metric_name)
    elif data.metric_names:
        frame = data.full_df
        frame = frame.loc[frame["trial_index"].isin(indices)]
        pairs = frame[["trial_index", "metric_name"]].drop_duplicates()
        for index, name in zip(
            pairs["trial_index"].tolist(), pairs["metric_name"].tolist(), strict=True
        ):
            observed.setdefault(int(index), set()).add(name)
    return {
        index: _availability(observed.get(index, set()), required) for index in indices
    }


def _availability(observed: set[str], required: set[str]) -> MetricAvailability:
    count = len(observed & required)
    if count == 0:
        return MetricAvailability.NOT_OBSERVED
    if count == len(required):
        return MetricAvailability.COMPLETE
    return MetricAvailability.INCOMPLETE


def fast_metric_availability() -> AbstractContextManager[None]:
    r"""Use :func:`metric_availability` for Ax's ``compute_metric_availability``
    inside the block (re-entrant and thread-safe: whatever Ax's module held
    before is back once the last block open in any thread has closed)."""
    return _SWAP()


_SWAP = ModuleSwap(
    ax_core_utils, "compute_metric_availability", lambda: metric_availability
)
