r"""Several trust regions at once (TuRBO-m, Eriksson et al., NeurIPS 2019, Sec. 3).

TuRBO-m keeps ``m`` regions, each with its own data, model and state machine
(:mod:`~botorch_sketch.trust_region.state`), and fills a batch of ``q`` by
Thompson sampling across them
(:func:`~botorch_sketch.trust_region.candidates.allocate_across_regions`). A
region that collapses restarts alone, from its own space-filling design of
``2 d`` points; the others go on.

Which region an observation belongs to travels with the observation: each
point a region proposes carries a label (:func:`point_label`: the region, its
epoch, i.e. its number of restarts when it proposed the point, and the call
that proposed it), which Ax stores as the arm's candidate metadata and hands
back with the data. Labels therefore survive trials that complete out of order,
fail, or run while a saved experiment is reloaded. Observations without a label
(the initial Sobol trials, attached trials) belong to region 0 until its first
restart, so region 0 is TuRBO-1's region and the others are regions that start
elsewhere.

The functions here are pure; :class:`RegionRecord` is one region's state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from botorch_sketch.trust_region.state import (
    TrustRegionState,
    restart_state,
    update_state,
)

__all__ = [
    "CALL_KEY",
    "EPOCH_KEY",
    "REGION_KEY",
    "RegionRecord",
    "count_batch",
    "point_label",
    "region_rows",
]

#: Keys of a point's label (Ax candidate metadata).
REGION_KEY = "turbo_region"
EPOCH_KEY = "turbo_epoch"
CALL_KEY = "turbo_call"


@dataclass(frozen=True)
class RegionRecord:
    r"""One region of several.

    Attributes:
        state: Its :class:`~botorch_sketch.trust_region.TrustRegionState`.
        design_left: Points of its space-filling design still to propose.
        counted_call: The last call whose points its success test counted
            (``-1``: none).
        sketch: Its model's last ``SketchState`` dict, whose hyperparameters a
            periodic region keeps until its data grew by ``refit_growth``
            (``None``: none kept, e.g. ``region_fit="cold"`` or a restart).
        fit_points: The region's points (before any window) when those
            hyperparameters were fitted (``None`` with ``sketch``).
    """

    state: TrustRegionState
    design_left: int = 0
    counted_call: int = -1
    sketch: dict[str, Any] | None = None
    fit_points: int | None = None

    def __post_init__(self) -> None:
        value = self.design_left
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"design_left must be a non-negative int, got {value!r}.")
        if isinstance(self.counted_call, bool) or not isinstance(
            self.counted_call, int
        ):
            raise ValueError(f"counted_call must be an int, got {self.counted_call!r}.")
        if (self.sketch is None) != (self.fit_points is None):
            raise ValueError("sketch and fit_points come together or not at all.")

    @property
    def epoch(self) -> int:
        r"""The region's restarts so far: labels of earlier epochs are not its
        data."""
        return self.state.restarts

    def to_dict(self) -> dict[str, Any]:
        r"""A JSON-serialisable dict."""
        out = {
            "trust_region": self.state.to_dict(),
            "design_left": self.design_left,
            "counted_call": self.counted_call,
        }
        if self.sketch is not None:
            out.update(sketch_state=self.sketch, fit_points=self.fit_points)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RegionRecord:
        r"""The inverse of :meth:`to_dict`."""
        fit_points = data.get("fit_points")
        return cls(
            state=TrustRegionState.from_dict(data["trust_region"]),
            design_left=int(data["design_left"]),
            counted_call=int(data["counted_call"]),
            sketch=data.get("sketch_state"),
            fit_points=None if fit_points is None else int(fit_points),
        )

    def restarted(self, design: int) -> RegionRecord:
        r"""The region started again: a fresh state, the next epoch, a design of
        ``design`` points to propose, no hyperparameters kept."""
        return RegionRecord(
            state=restart_state(self.state),
            design_left=design,
            counted_call=self.counted_call,
        )


def point_label(region: int, epoch: int, call: int) -> dict[str, int]:
    r"""The label a proposed point carries (module docstring)."""
    return {REGION_KEY: region, EPOCH_KEY: epoch, CALL_KEY: call}


def region_rows(
    labels: Sequence[dict[str, Any] | None], region: int, epoch: int
) -> list[int]:
    r"""Rows of the observations whose labels name ``region`` at ``epoch``; for
    region 0 at epoch 0 also the rows without a label (module docstring)."""
    rows = []
    for i, label in enumerate(labels):
        if not label or REGION_KEY not in label:
            if region == 0 and epoch == 0:
                rows.append(i)
        elif label[REGION_KEY] == region and label[EPOCH_KEY] == epoch:
            rows.append(i)
    return rows


def count_batch(
    record: RegionRecord,
    values: Sequence[float],
    calls: Sequence[int | None],
    design: int,
    floor: float = 0.0,
) -> RegionRecord:
    r"""The region after counting its points that arrived since the last count.

    Args:
        record: The region.
        values: Its observed values (larger is better), one per row.
        calls: The call that proposed each row (``None``: unlabelled, never
            new).
        design: Rows a region needs before its first model (``2 d``).
        floor: Absolute improvement a success needs
            (:func:`~botorch_sketch.trust_region.update_state`).

    Returns:
        The record with ``counted_call`` advanced. The rows of calls after
        ``counted_call`` are the new batch: with at least ``design`` rows before
        them it is a success or a failure (TuRBO's rule on observed values);
        with fewer (the region's design completing) they only set the
        incumbent, as in TuRBO-1.
    """
    if len(values) != len(calls):
        raise ValueError("values and calls must have the same length.")
    new = [i for i, c in enumerate(calls) if c is not None and c > record.counted_call]
    old = [i for i, c in enumerate(calls) if c is None or c <= record.counted_call]
    if not new:
        if math.isinf(record.state.best_value) and old:
            state = replace(record.state, best_value=max(values[i] for i in old))
            return replace(record, state=state)
        return record
    last = max(int(calls[i]) for i in new)
    batch_best = max(values[i] for i in new)
    if len(old) < design:
        best = max(values)
        return replace(
            record, state=replace(record.state, best_value=best), counted_call=last
        )
    before = max(values[i] for i in old)
    state = update_state(
        replace(record.state, best_value=before), batch_best, floor=floor
    )
    return replace(record, state=state, counted_call=last)
