"""Several trust regions: labels, membership and each region's state machine."""

from __future__ import annotations

import math

import pytest

from botorch_sketch.trust_region import TrustRegionState
from botorch_sketch.trust_region.regions import (
    RegionRecord,
    count_batch,
    point_label,
    region_rows,
)

DESIGN = 4  # 2 d for d = 2


def record(**state) -> RegionRecord:
    return RegionRecord(TrustRegionState(dim=2, batch_size=2, **state))


def test_record_round_trips_and_rejects_bad_fields():
    r = RegionRecord(
        TrustRegionState(dim=2, batch_size=3, length=0.4, best_value=1.5, restarts=2),
        design_left=3,
        counted_call=7,
    )
    assert RegionRecord.from_dict(r.to_dict()) == r
    assert r.epoch == 2  # the epoch is the region's restarts
    fresh = RegionRecord.from_dict(record().to_dict())
    assert math.isinf(fresh.state.best_value) and fresh.epoch == 0
    with pytest.raises(ValueError, match="design_left must be a non-negative int"):
        RegionRecord(r.state, design_left=-1)
    with pytest.raises(ValueError, match="design_left"):
        RegionRecord(r.state, design_left=1.5)
    with pytest.raises(ValueError, match="counted_call must be an int"):
        RegionRecord(r.state, counted_call=None)
    # A periodic region's kept fit travels with it (and only as a pair).
    kept = RegionRecord(r.state, sketch={"num_fit_points": 9}, fit_points=9)
    assert RegionRecord.from_dict(kept.to_dict()) == kept
    assert "sketch_state" not in r.to_dict()
    with pytest.raises(ValueError, match="sketch and fit_points come together"):
        RegionRecord(r.state, sketch={"num_fit_points": 9})


def test_unlabelled_rows_are_region_zeros_first_epoch_only():
    labels = [None, point_label(1, 0, 0), {}, point_label(0, 0, 1),
              point_label(0, 1, 2), point_label(1, 1, 2)]  # fmt: skip
    assert region_rows(labels, 0, 0) == [0, 2, 3]
    assert region_rows(labels, 0, 1) == [4]
    assert region_rows(labels, 1, 0) == [1]
    assert region_rows(labels, 1, 1) == [5]
    assert region_rows(labels, 2, 0) == []


def test_the_design_completing_batch_sets_the_incumbent_only():
    # Two unlabelled rows, then two rows of call 0: fewer than 2 d rows before.
    r = count_batch(record(), [1.0, 3.0, 2.0, 5.0], [None, None, 0, 0], DESIGN)
    assert r.state.best_value == 5.0 and r.counted_call == 0
    assert (r.state.success_counter, r.state.failure_counter) == (0, 0)
    # No new rows: nothing changes, except a first incumbent.
    assert count_batch(r, [1.0, 3.0, 2.0, 5.0], [None, None, 0, 0], DESIGN) == r
    first = count_batch(record(), [1.0, 3.0], [None, None], DESIGN)
    assert first.state.best_value == 3.0 and first.counted_call == -1


def test_batches_count_successes_and_failures_against_the_earlier_rows():
    values, calls = [1.0, 3.0, 2.0, 5.0], [None, None, 0, 0]
    r = count_batch(record(success_tolerance=2), values, calls, DESIGN)
    # Call 1 improves on 5.0: a success; call 2 too: the second doubles L.
    values, calls = values + [6.0], calls + [1]
    r = count_batch(r, values, calls, DESIGN)
    assert (r.state.success_counter, r.state.best_value, r.counted_call) == (1, 6.0, 1)
    values, calls = values + [4.0, 7.0], calls + [2, 2]
    r = count_batch(r, values, calls, DESIGN)
    assert r.state.length == 1.6 and r.state.success_counter == 0
    # A batch below the incumbent fails; tau_fail = ceil(max(4/2, 2/2)) = 2.
    for call in (3, 4):
        values, calls = values + [0.0], calls + [call]
        r = count_batch(r, values, calls, DESIGN)
    assert r.state.length == 0.8 and r.state.failure_counter == 0
    # Rows of an older call arriving late are not a new batch.
    assert count_batch(r, values + [9.0], calls + [2], DESIGN) == r
    with pytest.raises(ValueError, match="same length"):
        count_batch(r, values, calls[:-1], DESIGN)


def test_a_noise_floor_turns_a_small_gain_into_a_failure():
    values, calls = [1.0, 3.0, 2.0, 5.0, 5.1], [None, None, 0, 0, 1]
    base = count_batch(record(), values[:4], calls[:4], DESIGN)
    assert count_batch(base, values, calls, DESIGN).state.success_counter == 1
    strict = count_batch(base, values, calls, DESIGN, floor=0.5)
    assert strict.state.failure_counter == 1


def test_a_restarted_region_starts_a_new_epoch_with_a_design():
    r = RegionRecord(
        TrustRegionState(dim=2, batch_size=2, length=0.001, best_value=2.0, restarts=1),
        counted_call=5,
    )
    again = r.restarted(DESIGN)
    assert again.epoch == 2 and again.design_left == DESIGN
    assert again.state.length == 0.8 and math.isinf(again.state.best_value)
    assert again.state.restarts == 2 and again.counted_call == 5
    kept = RegionRecord(r.state, sketch={"num_fit_points": 9}, fit_points=9)
    assert kept.restarted(DESIGN).sketch is None  # the new epoch fits afresh
