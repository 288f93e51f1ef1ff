"""TrustRegionState: validation, the expand/shrink/restart machine, JSON."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from botorch_sketch.trust_region import (
    TrustRegionState,
    is_improvement,
    restart_state,
    update_state,
)


def run(state: TrustRegionState, values: list[float]) -> TrustRegionState:
    for value in values:
        state = update_state(state, value)
    return state


def test_default_failure_tolerance_is_turbos():
    assert TrustRegionState(dim=6, batch_size=50).failure_tolerance == 1
    assert TrustRegionState(dim=10, batch_size=4).failure_tolerance == 3
    assert TrustRegionState(dim=2, batch_size=1).failure_tolerance == 4
    assert (
        TrustRegionState(dim=2, batch_size=1, failure_tolerance=7).failure_tolerance
        == 7
    )


def test_three_successes_double_the_length_up_to_the_cap():
    state = TrustRegionState(dim=2, batch_size=1, best_value=1.0)
    state = run(state, [2.0, 3.0])
    assert (state.length, state.success_counter) == (0.8, 2)
    state = update_state(state, 4.0)
    assert (state.length, state.success_counter, state.best_value) == (1.6, 0, 4.0)
    state = run(state, [5.0, 6.0, 7.0])
    assert state.length == 1.6  # capped at length_max


def test_a_failure_resets_the_successes():
    state = TrustRegionState(dim=2, batch_size=1, best_value=1.0)
    state = run(state, [2.0, 3.0, 3.0, 4.0, 5.0])
    assert state.length == 0.8  # 2 successes, a failure, 2 successes
    assert (state.success_counter, state.failure_counter) == (2, 0)


def test_failures_halve_the_length_then_trigger_a_restart():
    state = TrustRegionState(dim=4, batch_size=1, best_value=1.0)  # tau_fail = 4
    state = run(state, [0.5] * 3)
    assert (state.length, state.failure_counter) == (0.8, 3)
    state = update_state(state, 0.5)
    assert (state.length, state.failure_counter) == (0.4, 0)
    lengths = []
    while not state.restart_triggered:
        state = run(state, [0.5] * 4)
        lengths.append(state.length)
    assert lengths == [0.8 / 2**k for k in range(2, 8)]
    assert state.length < state.length_min <= lengths[-2]
    fresh = restart_state(state)
    assert (fresh.length, fresh.restarts, fresh.failure_counter) == (0.8, 1, 0)
    assert fresh.best_value == -math.inf and not fresh.restart_triggered


def test_improvement_needs_the_relative_tolerance():
    state = TrustRegionState(dim=2, batch_size=1, best_value=-100.0)
    assert not is_improvement(state, -99.95)  # 0.05 < 1e-3 * 100
    assert is_improvement(state, -99.8)
    assert is_improvement(TrustRegionState(dim=2, batch_size=1), -1e9)  # no best yet
    state = update_state(state, -99.95)
    assert (state.failure_counter, state.best_value) == (1, -99.95)


def test_a_floor_turns_noise_sized_improvements_into_failures():
    state = TrustRegionState(dim=2, batch_size=1, best_value=3.0)  # 1e-3 |b| = 0.003
    assert is_improvement(state, 3.01)
    assert not is_improvement(state, 3.01, floor=0.05)
    assert is_improvement(state, 3.06, floor=0.05)
    # The relative tolerance still applies where it is the larger one.
    assert not is_improvement(replace(state, best_value=300.0), 300.2, floor=0.05)
    assert is_improvement(TrustRegionState(dim=2, batch_size=1), -1e9, floor=1.0)
    after = update_state(state, 3.04, floor=0.05)
    assert (after.success_counter, after.failure_counter) == (0, 1)
    assert after.best_value == 3.04  # the incumbent still moves up


@pytest.mark.parametrize("floor", [-0.1, math.nan, math.inf, True, "0.1"])
def test_the_floor_must_be_a_finite_non_negative_number(floor):
    state = TrustRegionState(dim=2, batch_size=1, best_value=0.0)
    with pytest.raises(ValueError, match="floor must be a finite number >= 0"):
        update_state(state, 1.0, floor=floor)


def test_json_round_trip():
    state = run(TrustRegionState(dim=3, batch_size=2, best_value=0.0), [1.0, 0.5])
    text = json.dumps(state.to_dict())
    assert TrustRegionState.from_dict(json.loads(text)) == state
    fresh = TrustRegionState(dim=3, batch_size=2)
    assert TrustRegionState.from_dict(json.loads(json.dumps(fresh.to_dict()))) == fresh


def test_a_fresh_region_starts_at_length_init():
    assert TrustRegionState(dim=2, batch_size=1).length == 0.8
    assert TrustRegionState(dim=2, batch_size=1, length_init=0.4).length == 0.4
    state = TrustRegionState(dim=2, batch_size=1, length_init=0.4, length=0.1)
    assert state.length == 0.1
    assert TrustRegionState.from_dict(state.to_dict()) == state


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"length_init": -0.8}, "length_init"),
        ({"length_min": 0.0}, "length_min"),
        ({"length_min": 1.0}, "length_min <= length_init"),
        ({"length_max": 0.5}, "length_init <= length_max"),
        ({"length": 2.0}, "length_max"),
        ({"improvement_tolerance": 1.0}, "improvement_tolerance"),
        ({"improvement_tolerance": -0.1}, "improvement_tolerance"),
        ({"success_tolerance": 0}, "success_tolerance"),
        ({"failure_tolerance": 0}, "failure_tolerance"),
        ({"batch_size": 0}, "batch_size"),
        ({"dim": 0}, "dim"),
        ({"best_value": math.nan}, "best_value"),
    ],
)
def test_bad_settings_name_the_argument(options, match):
    with pytest.raises(ValueError, match=match):
        TrustRegionState(**{"dim": 2, "batch_size": 1, **options})


def test_update_rejects_nan():
    with pytest.raises(ValueError, match="batch_best"):
        update_state(TrustRegionState(dim=2, batch_size=1), math.nan)
