r"""An Ax ``Data``'s rows, without building its data frame.

Ax 1.3 keeps an experiment's observations as a list of ``DataRow`` objects and
builds ``Data.full_df`` from them on first access: a record per row, a
``DataFrame``, dtype casts and a sort on parsed arm names, about 10 us per row.
``Experiment.attach_data`` replaces the experiment's ``Data`` with a new one at
every completion, so each generation call of a long experiment that reads
``full_df`` rebuilds the frame of every observation: ``O(N)`` per call, ``O(N^2
/ b)`` over a run of ``N`` evaluations in batches of ``b`` (at 4,000 one-arm
trials about 40 ms a call on one CPU thread, the largest single part of Ax's
own per-call work; ``benchmarks/results/which_strategy_notes.md``).

Attaching keeps the ``DataRow`` objects of the observations it does not
replace (``ax.core.data.combine_data_rows_favoring_recent`` maps each
``(trial, metric, arm, step)`` key to its latest row, in first-seen order), so a
row that is the same object as at an earlier call is an unchanged observation
(Ax documents a ``Data`` and its rows as immutable). The package's replacements
of Ax's per-call helpers (:mod:`~botorch_sketch.ax.pending`,
:mod:`~botorch_sketch.ax.experiment_data`) read the rows directly and fall back
to Ax's frame where the rows are not exposed (:func:`data_rows` is ``None``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ax.core.data import Data

__all__ = ["data_rows", "rows_before", "same_rows"]


def data_rows(data: Data) -> Sequence[Any] | None:
    r"""The ``DataRow`` objects of ``data`` in its own order (not a copy: do not
    mutate), or ``None`` where this Ax keeps no row list."""
    rows = getattr(data, "_data_rows", None)
    return rows if isinstance(rows, list) else None


def rows_before(rows: Sequence[Any], count: int) -> list[Any]:
    r"""The rows of the trials with index below ``count``, in ``rows``' order."""
    return [row for row in rows if row.trial_index < count]


def same_rows(first: Sequence[Any], second: Sequence[Any]) -> bool:
    r"""Whether two row lists hold the same objects in the same order."""
    return len(first) == len(second) and all(
        a is b for a, b in zip(first, second, strict=True)
    )
