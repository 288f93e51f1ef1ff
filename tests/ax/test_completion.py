"""complete_trials: one data update for a batch, the same state as complete_trial."""

from __future__ import annotations

import math

import ax.core.experiment as ax_experiment
import pytest
from ax.core.base_trial import TrialStatus
from ax.core.data import combine_data_rows_favoring_recent

from botorch_sketch.ax import complete_trials, get_next_batch
from botorch_sketch.ax.data_rows import data_rows, same_rows
from tests.ax.helpers import evaluate, make_client


def _state(client):
    df = client._experiment.lookup_data().df
    df = df.sort_values(["trial_index", "metric_name"]).reset_index(drop=True)
    statuses = {i: t.status for i, t in client._experiment.trials.items()}
    return df[["trial_index", "arm_name", "metric_name", "mean", "sem"]], statuses


def test_batch_completion_equals_one_call_per_trial():
    """Two clients on the same strategy and seed: completing each batch with
    complete_trials gives the same data, statuses and next batches as
    client.complete_trial per trial."""
    one, bulk = make_client("turbo-bkb"), make_client("turbo-bkb")
    for _ in range(4):
        batch_one = get_next_batch(one, max_batch_size=4)
        batch_bulk = get_next_batch(bulk, max_batch_size=4)
        assert batch_one == batch_bulk
        for index, parameters in batch_one.items():
            one.complete_trial(index, raw_data=evaluate("branin", parameters))
        statuses = complete_trials(
            bulk, {i: evaluate("branin", p) for i, p in batch_bulk.items()}
        )
        assert statuses == dict.fromkeys(batch_bulk, TrialStatus.COMPLETED)
    (df_one, st_one), (df_bulk, st_bulk) = _state(one), _state(bulk)
    assert st_one == st_bulk and len(df_one) == len(st_one) >= 8
    assert df_one.equals(df_bulk)
    assert get_next_batch(one, 4) == get_next_batch(bulk, 4)


def test_mean_and_sem_pairs_and_new_metrics_become_tracking_metrics():
    client = make_client("bbkb")
    batch = client.get_next_trials(max_trials=2)
    first, second = sorted(batch)
    complete_trials(
        client,
        {first: {"branin": (1.5, 0.25), "cost": 3.0}, second: {"branin": (2.0, None)}},
    )
    assert "cost" in client._experiment.tracking_metrics[0].name
    df = client._experiment.lookup_data().df.set_index(["trial_index", "metric_name"])
    assert df.loc[(first, "branin"), "sem"] == 0.25
    assert math.isnan(df.loc[(second, "branin"), "sem"])
    assert df.loc[(first, "cost"), "mean"] == 3.0


@pytest.mark.parametrize(
    "results, message",
    [
        ({99: {"branin": 1.0}}, "not a trial"),
        ({"0": {"branin": 1.0}}, "must be ints"),
        ({0: {"branin": math.nan}}, "finite"),
        ({0: {"branin": math.inf}}, "finite"),
        ({0: {"branin": (1.0, -0.1)}}, "SEM"),
        ({0: {"branin": (1.0, math.nan)}}, "SEM"),
        ({0: {"branin": (1.0, 0.1, 2)}}, "pair"),
        ({0: {"branin": "1.0"}}, "finite"),
        ({0: {}}, "non-empty"),
        ({0: 1.0}, "non-empty"),
        ([(0, {"branin": 1.0})], "must map"),
    ],
)
def test_bad_results_are_refused_before_anything_changes(results, message):
    client = make_client("bbkb")
    batch = client.get_next_trials(max_trials=2)
    first = min(batch)
    client.complete_trial(first, raw_data={"branin": 1.0})
    before = _state(client)
    # A valid result next to the bad one is not attached either.
    if isinstance(results, dict):
        results = {max(batch): {"branin": 2.0}, **results}
    with pytest.raises(ValueError, match=message):
        complete_trials(client, results)
    after = _state(client)
    assert after[0].equals(before[0]) and after[1] == before[1]


def test_failed_trials_cannot_be_completed():
    client = make_client("bbkb")
    batch = client.get_next_trials(max_trials=2)
    failed, running = sorted(batch)
    client.mark_trial_failed(failed)
    with pytest.raises(ValueError, match="FAILED"):
        complete_trials(client, {running: {"branin": 1.0}, failed: {"branin": 2.0}})
    assert client._experiment.trials[running].status == TrialStatus.RUNNING
    assert client._experiment.lookup_data().df.empty
    assert complete_trials(client, {}) == {}


def _merge_spy(monkeypatch) -> list[int]:
    r"""Count Ax's row merges (``attach_data``'s ``O(n)`` dictionary pass)."""
    calls: list[int] = []
    original = ax_experiment.combine_data_rows_favoring_recent

    def spy(last_rows, new_rows):
        calls.append(1)
        return original(last_rows=last_rows, new_rows=new_rows)

    monkeypatch.setattr(ax_experiment, "combine_data_rows_favoring_recent", spy)
    return calls


def test_new_trials_rows_are_appended_without_axs_merge(monkeypatch):
    client = make_client("bbkb")
    batch = client.get_next_trials(max_trials=4)
    first, *rest = sorted(batch)
    complete_trials(client, {first: {"branin": 1.0}})
    experiment = client._experiment
    old = list(data_rows(experiment.data))
    calls = _merge_spy(monkeypatch)
    complete_trials(client, {i: {"branin": float(i), "cost": 2.0} for i in rest})
    assert calls == []
    rows = data_rows(experiment.data)
    new = rows[len(old) :]
    # Ax's merge of the same rows: the same objects in the same order.
    assert same_rows(rows, combine_data_rows_favoring_recent(old, new))
    assert len(rows) == len(old) + 2 * len(rest)
    df = experiment.lookup_data().df.set_index(["trial_index", "metric_name"])
    assert df.loc[(rest[0], "branin"), "mean"] == float(rest[0])


def test_a_trial_with_rows_goes_through_axs_merge(monkeypatch):
    r"""Completing an already completed trial again replaces its row (Ax's
    merge), and a trial with partial data keeps its other metric."""
    client = make_client("bbkb")
    batch = client.get_next_trials(max_trials=2)
    first, second = sorted(batch)
    complete_trials(client, {first: {"branin": 1.0}, second: {"branin": 2.0}})
    calls = _merge_spy(monkeypatch)
    complete_trials(client, {first: {"branin": 5.0}})
    assert calls == [1]
    df = client._experiment.lookup_data().df
    assert len(df) == 2
    assert df.set_index("trial_index").loc[first, "mean"] == 5.0
