"""Metric availability in one pass: the same answers as Ax's, Ax untouched outside."""

from __future__ import annotations

import threading

import ax.core.utils as ax_core_utils
import pytest
from ax import Client, RangeParameterConfig
from ax.core.utils import (
    compute_metric_availability,
    extract_pending_observations,
)

from botorch_sketch.ax import complete_trials, get_next_batch
from botorch_sketch.ax import pending as pending_module
from botorch_sketch.ax.pending import fast_metric_availability, metric_availability
from tests.ax.helpers import evaluate, make_client

AX_FUNCTION = ax_core_utils.compute_metric_availability


def mixed_experiment(num_trials: int = 120) -> Client:
    r"""Two objectives and a tracking metric; completed trials with both, one or
    neither objective, running, failed and abandoned trials."""
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=(0, 1))
            for i in range(2)
        ]
    )
    client.configure_optimization(objective="a, b")
    client.configure_tracking_metrics(metric_names=["t"])
    trials = client.get_next_trials(max_trials=num_trials)
    for index, parameters in trials.items():
        x = parameters["x0"]
        kind = index % 7
        if kind == 0:
            client.complete_trial(index, {"a": x, "b": 1 - x, "t": 0.0})
        elif kind == 1:
            client.complete_trial(index, {"a": x})  # b missing: INCOMPLETE
        elif kind == 2:
            client.complete_trial(index, {"t": 1.0})  # tracking only
        elif kind == 3:
            client.mark_trial_failed(index)
        elif kind == 4:
            client.mark_trial_abandoned(index)
        elif kind == 5:
            client.complete_trial(index, {"a": x, "b": x})
        # kind 6: left running
    return client


@pytest.fixture(scope="module")
def experiment():
    return mixed_experiment()._experiment


def test_same_availability_as_ax(experiment):
    ours = metric_availability(experiment)
    assert ours == compute_metric_availability(experiment)
    kinds = {index % 7: state for index, state in ours.items()}
    assert kinds[0].name == "COMPLETE" and kinds[1].name == "INCOMPLETE"
    assert kinds[2].name == "NOT_OBSERVED" and kinds[6].name == "NOT_OBSERVED"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"trial_indices": [0, 1, 2, 6, 8]},
        {"trial_indices": []},
        {"metric_names": {"t"}},
        {"metric_names": {"a", "t"}},
        {"metric_names": set()},
        {"trial_indices": [1, 2], "metric_names": {"b"}},
    ],
)
def test_same_availability_as_ax_for_subsets_and_metric_names(experiment, kwargs):
    assert metric_availability(experiment, **kwargs) == compute_metric_availability(
        experiment, **kwargs
    )


def test_explicit_optimization_config(experiment):
    config = experiment.optimization_config
    assert metric_availability(
        experiment, optimization_config=config
    ) == compute_metric_availability(experiment, optimization_config=config)


def test_no_required_metrics_is_an_error():
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", parameter_type="float", bounds=(0, 1))
        ]
    )
    with pytest.raises(ValueError, match="optimization config is required"):
        metric_availability(client._experiment)


def test_same_pending_points_as_ax(experiment):
    assert len(experiment.trials) > 100  # Ax's status-based path
    expected = extract_pending_observations(experiment)
    with fast_metric_availability():
        assert ax_core_utils.compute_metric_availability is metric_availability
        got = extract_pending_observations(experiment)
    assert got == expected
    # Running, abandoned and completed-but-incomplete trials are pending.
    indices = {feature.trial_index for feature in got["a"]}
    assert {index % 7 for index in indices} == {1, 2, 4, 6}


def test_context_restores_ax_even_on_error_and_nesting():
    assert ax_core_utils.compute_metric_availability is AX_FUNCTION
    with pytest.raises(RuntimeError, match="boom"):
        with fast_metric_availability():
            with fast_metric_availability():
                assert ax_core_utils.compute_metric_availability is metric_availability
            assert ax_core_utils.compute_metric_availability is metric_availability
            raise RuntimeError("boom")
    assert ax_core_utils.compute_metric_availability is AX_FUNCTION


def test_context_restores_ax_after_overlapping_threads():
    entered, release = threading.Barrier(3), threading.Event()

    def hold():
        with fast_metric_availability():
            entered.wait()
            release.wait()

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    entered.wait()
    assert ax_core_utils.compute_metric_availability is metric_availability
    release.set()
    for thread in threads:
        thread.join()
    assert ax_core_utils.compute_metric_availability is AX_FUNCTION


def test_get_next_batch_uses_it(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return metric_availability(*args, **kwargs)

    monkeypatch.setattr(pending_module, "metric_availability", spy)
    client = make_client("turbo-bkb", initialization_budget=5)
    trials = client.get_next_trials(max_trials=5)
    complete_trials(client, {i: evaluate("branin", p) for i, p in trials.items()})
    # Past Ax's 100-trial threshold, with every trial completed.
    while len(client._experiment.trials) <= 100:
        trials = get_next_batch(client, max_batch_size=50)
        complete_trials(client, {i: evaluate("branin", p) for i, p in trials.items()})
    calls.clear()
    get_next_batch(client, max_batch_size=4)
    assert calls
    assert ax_core_utils.compute_metric_availability is AX_FUNCTION


def test_reads_rows_without_building_the_data_frame(experiment):
    data = experiment.lookup_data()
    data.__dict__.pop("full_df", None)  # Ax's cached frame, if built before
    ours = metric_availability(experiment)
    assert "full_df" not in data.__dict__
    assert ours == compute_metric_availability(experiment)


def test_without_a_row_list_it_reads_the_data_frame(experiment, monkeypatch):
    monkeypatch.setattr(pending_module, "data_rows", lambda data: None)
    for kwargs in ({}, {"trial_indices": [0, 1, 2, 6]}, {"metric_names": {"t"}}):
        assert metric_availability(experiment, **kwargs) == (
            compute_metric_availability(experiment, **kwargs)
        )
