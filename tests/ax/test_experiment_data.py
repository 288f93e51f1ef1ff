"""Incremental extraction of Ax's training data: Ax's answer at every call."""

from __future__ import annotations

import copy
import gc

import ax.adapter.base as ax_adapter_base
import pandas as pd
import pytest
from ax import ChoiceParameterConfig, Client, RangeParameterConfig
from ax.core.data import Data
from ax.core.data_utils import DataLoaderConfig, extract_experiment_data
from ax.core.parameter import ParameterType, RangeParameter

from botorch_sketch.ax import complete_trials, get_next_batch
from botorch_sketch.ax import experiment_data as module
from botorch_sketch.ax.experiment_data import (
    fast_experiment_data,
    incremental_experiment_data,
)
from tests.ax.helpers import evaluate, make_client

AX_FUNCTION = ax_adapter_base.extract_experiment_data
DEFAULT = DataLoaderConfig()


@pytest.fixture(autouse=True)
def reuse_from_the_first_trial(monkeypatch):
    r"""Small experiments exercise the reuse (``MIN_TRIALS`` is for speed only)."""
    monkeypatch.setattr(module, "MIN_TRIALS", 0)


def new_client() -> Client:
    r"""Float, int and string parameters; two objectives and a tracking metric."""
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", parameter_type="float", bounds=(0, 1)),
            RangeParameterConfig(name="k", parameter_type="int", bounds=(0, 5)),
            ChoiceParameterConfig(
                name="c", parameter_type="str", values=["u", "v", "w"]
            ),
        ]
    )
    client.configure_optimization(objective="a, b")
    client.configure_tracking_metrics(metric_names=["t"])
    return client


def add_trials(client: Client, count: int, leave_running: bool = True) -> list[int]:
    r"""``count`` trials with every outcome: complete, one objective missing,
    tracking only, failed, abandoned, complete, and (optionally) running."""
    indices = []
    for _ in range(count):
        start = len(client._experiment.trials)
        parameters = {"x": (start % 10) / 10, "k": start % 6, "c": "uvw"[start % 3]}
        for name in client._experiment.search_space.parameters:
            parameters.setdefault(name, 0.5)  # a float parameter added later
        index = client.attach_trial(parameters)
        indices.append(index)
        kind = index % 7
        if kind in (0, 5):
            complete_trials(client, {index: {"a": 0.1 * index, "b": 1.0, "t": 0.0}})
        elif kind == 1:
            complete_trials(client, {index: {"a": float(index)}})
        elif kind == 2:
            complete_trials(client, {index: {"t": 1.0}})
        elif kind == 3:
            client.mark_trial_failed(index)
        elif kind == 4:
            client.mark_trial_abandoned(index)
        elif not leave_running:
            complete_trials(client, {index: {"a": 1.0, "b": 2.0}})
    return indices


def assert_same(experiment, config: DataLoaderConfig = DEFAULT) -> None:
    got = incremental_experiment_data(experiment, config)
    want = extract_experiment_data(experiment, config)
    pd.testing.assert_frame_equal(got.arm_data, want.arm_data, check_exact=True)
    pd.testing.assert_frame_equal(
        got.observation_data, want.observation_data, check_exact=True
    )
    for frame in ("arm_data", "observation_data"):
        for axis in ("index", "columns"):
            got_axis = getattr(getattr(got, frame), axis)
            want_axis = getattr(getattr(want, frame), axis)
            assert level_dtypes(got_axis) == level_dtypes(want_axis)
    assert got == want


def level_dtypes(index: pd.Index) -> list:
    r"""The dtypes of an index's levels (Ax's frames keep strings as objects)."""
    if isinstance(index, pd.MultiIndex):
        return [level.dtype for level in index.levels]
    return [index.dtype]


@pytest.fixture
def seen(monkeypatch):
    r"""The trial indices each of Ax's arm extractions was given."""
    calls: list[list[int]] = []
    original = module._extract_arm_data

    def spy(experiment):
        calls.append(list(experiment.trials))
        return original(experiment=experiment)

    monkeypatch.setattr(module, "_extract_arm_data", spy)
    return calls


def held(experiment) -> int:
    entry = module._PREFIXES.get(id(experiment))
    return 0 if entry is None or entry[1] is None else len(entry[1].trials)


def test_growing_experiment_reuses_the_settled_prefix(seen):
    client = new_client()
    experiment = client._experiment
    add_trials(client, 20, leave_running=False)
    assert_same(experiment)
    assert seen[-1] == list(range(20))  # first call: everything
    assert held(experiment) == 20
    for _ in range(4):
        start = len(experiment.trials)
        add_trials(client, 9, leave_running=False)
        seen.clear()
        assert_same(experiment)
        assert seen == [list(range(start, start + 9))]  # only the new trials
        assert held(experiment) == start + 9


def test_new_trials_observations_are_built_from_their_rows(monkeypatch):
    r"""The new trials' observation frame comes from their rows, not Ax's
    frame and pivot, and the answer is still Ax's (every outcome kind)."""
    client = new_client()
    experiment = client._experiment
    add_trials(client, 20)
    assert_same(experiment)
    calls = []
    original = module._extract_observation_data

    def spy(**kwargs):
        calls.append(list(kwargs["experiment"].trials))
        return original(**kwargs)

    monkeypatch.setattr(module, "_extract_observation_data", spy)
    for _ in range(3):
        add_trials(client, 9)
        assert_same(experiment)
    assert calls == []


def test_rows_with_times_or_repeats_use_axs_frame(monkeypatch):
    r"""Rows the direct build does not cover fall back to Ax's extraction."""
    client = new_client()
    experiment = client._experiment
    add_trials(client, 20, leave_running=False)
    assert_same(experiment)
    with_times(client)
    assert (
        module._observation_frame(
            module._TrialsView(experiment, [experiment.trials[20]]),
            DEFAULT,
            [
                r
                for r in module.data_rows(experiment.lookup_data())
                if r.trial_index == 20
            ],
            False,
        )
        is None
    )
    assert_same(experiment)


def complete_at_progression(client: Client, count: int, progression: int) -> None:
    r"""``count`` trials completed as Ax's own loop reports them: every metric
    at one progression (an ``IMetric``'s), some with one objective missing."""
    for _ in range(count):
        start = len(client._experiment.trials)
        index = client.attach_trial({"x": (start % 10) / 10, "k": start % 6, "c": "u"})
        values = {"a": 0.1 * index, "t": 1.0}
        if index % 3:
            values["b"] = 2.0
        client.complete_trial(index, values, progression=progression)


def test_one_step_per_metric_is_reused_and_framed_from_the_rows(monkeypatch, seen):
    r"""Rows at one progression (Ax's Orchestrator fetches an ``IMetric`` at
    progression 0): observations indexed by step 1.0, the new trials' frame
    built from their rows, Ax's answer at every call; a trial at another
    progression changes every row's step, and it is Ax's function again."""
    client = new_client()
    experiment = client._experiment
    complete_at_progression(client, 12, progression=0)
    assert_same(experiment)
    assert experiment.lookup_data()._data_rows[0].step == 0
    assert held(experiment) == 12
    frames = []
    original = module._extract_observation_data
    monkeypatch.setattr(
        module,
        "_extract_observation_data",
        lambda **kwargs: frames.append(1) or original(**kwargs),
    )
    for _ in range(3):
        complete_at_progression(client, 5, progression=0)
        seen.clear()
        assert_same(experiment)
        assert seen == [list(range(held(experiment) - 5, held(experiment)))]
    assert frames == []
    assert (
        "step"
        in incremental_experiment_data(experiment, DEFAULT).observation_data.index.names
    )
    complete_at_progression(client, 1, progression=4)
    seen.clear()
    assert_same(experiment)
    assert held(experiment) == 0 and seen == []  # Ax's function, nothing held


def copy_sharing_runs(experiment):
    r"""A deep copy of the experiment that shares its generator runs, arms and
    data (as a background refill's snapshot does)."""
    shared = [experiment.data, *experiment.metrics.values()]
    for trial in experiment.trials.values():
        for run in trial.generator_runs:
            shared += [run, *run.arms]
    return copy.deepcopy(experiment, {id(obj): obj for obj in shared})


def test_a_copy_adopts_the_prefix_and_extracts_only_the_new_trials(seen):
    client = new_client()
    experiment = client._experiment
    add_trials(client, 20, leave_running=False)
    assert_same(experiment)
    add_trials(client, 9, leave_running=False)
    snapshot = copy_sharing_runs(experiment)
    assert held(snapshot) == 0
    assert module.adopt_prefix(experiment, snapshot)
    assert held(snapshot) == 20
    seen.clear()
    assert_same(snapshot)
    assert seen == [list(range(20, 29))]
    assert held(snapshot) == 29
    # The source keeps its own prefix.
    assert held(experiment) == 20


def test_a_copy_with_other_runs_or_times_does_not_adopt(seen):
    client = new_client()
    experiment = client._experiment
    add_trials(client, 20, leave_running=False)
    assert_same(experiment)
    other_run = copy_sharing_runs(experiment)
    trial = other_run.trials[3]
    trial._generator_run = copy.deepcopy(trial._generator_run)
    other_time = copy_sharing_runs(experiment)
    other_time.trials[5]._time_completed = None
    fresh = new_client()._experiment
    for target in (other_run, other_time):
        assert not module.adopt_prefix(experiment, target)
        assert held(target) == 0
        assert_same(target)
    assert not module.adopt_prefix(fresh, experiment)  # nothing held there
    assert held(experiment) == 20


def test_running_trial_ends_the_prefix_until_it_settles(seen):
    client = new_client()
    experiment = client._experiment
    add_trials(client, 14)  # trials 6 and 13 stay running
    assert_same(experiment)
    assert held(experiment) == 6
    complete_trials(client, {6: {"a": 3.0, "b": 4.0}})
    seen.clear()
    assert_same(experiment)
    assert seen == [list(range(6, 14))]
    assert held(experiment) == 13
    add_trials(client, 5)  # the running trial 13 is still in the tail
    assert_same(experiment)
    assert held(experiment) == 13
    complete_trials(client, {13: {"a": 3.0, "b": 4.0}})
    assert_same(experiment)
    assert held(experiment) == 19


def test_no_new_trials_reuses_everything(seen):
    client = new_client()
    add_trials(client, 12, leave_running=False)
    assert_same(client._experiment)
    seen.clear()
    assert_same(client._experiment)
    assert seen == []


def rewrite_trial_zero(client: Client) -> None:
    experiment = client._experiment
    row = experiment.lookup_data().full_df.iloc[[0]].copy()
    row["mean"] = 123.0
    experiment.attach_data(Data(df=row))


def add_metric(client: Client) -> None:
    client.configure_tracking_metrics(metric_names=["t", "u"])
    complete_trials(client, {6: {"u": 1.0}})


def custom_arm_name(client: Client) -> None:
    index = client.attach_trial({"x": 0.5, "k": 1, "c": "u"}, arm_name="baseline")
    complete_trials(client, {index: {"a": 1.0, "b": 1.0}})


def with_step(client: Client) -> None:
    index = client.attach_trial({"x": 0.5, "k": 1, "c": "u"})
    client.complete_trial(index, {"a": 1.0, "b": 1.0}, progression=3)


def new_parameter(client: Client) -> None:
    experiment = client._experiment
    experiment.search_space.add_parameter(
        RangeParameter("z", ParameterType.FLOAT, lower=0.0, upper=1.0)
    )
    index = client.attach_trial({"x": 0.5, "k": 1, "c": "u", "z": 0.5})
    complete_trials(client, {index: {"a": 1.0, "b": 1.0}})


def with_times(client: Client) -> None:
    r"""A completed trial whose rows carry start and end times (metadata)."""
    experiment = client._experiment
    index = client.attach_trial({"x": 0.5, "k": 1, "c": "u"})
    rows = pd.DataFrame(
        {
            "trial_index": [index, index],
            "arm_name": [f"{index}_0"] * 2,
            "metric_name": ["a", "b"],
            "metric_signature": ["a", "b"],
            "mean": [1.0, 2.0],
            "sem": [float("nan")] * 2,
            "start_time": [pd.Timestamp("2026-01-01"), pd.Timestamp("2026-01-02")],
            "end_time": [pd.Timestamp("2026-01-03")] * 2,
        }
    )
    experiment.attach_data(Data(df=rows))
    experiment.trials[index].mark_completed()


def abandon_completed_trial(client: Client) -> None:
    client._experiment.trials[0].mark_abandoned(unsafe=True)


@pytest.mark.parametrize(
    "change",
    [
        rewrite_trial_zero,
        add_metric,
        custom_arm_name,
        with_step,
        new_parameter,
        with_times,
        abandon_completed_trial,
    ],
)
def test_changes_behind_the_prefix_give_axs_answer(change):
    client = new_client()
    add_trials(client, 20, leave_running=False)
    assert_same(client._experiment)
    change(client)
    assert_same(client._experiment)
    add_trials(client, 3, leave_running=False)
    assert_same(client._experiment)


def test_other_loader_configurations():
    client = new_client()
    add_trials(client, 20)
    for config in (
        DataLoaderConfig(fit_abandoned=True),
        DEFAULT,
        DataLoaderConfig(latest_rows_per_group=None),
    ):
        assert_same(client._experiment, config)
        add_trials(client, 4)
        assert_same(client._experiment, config)


def test_explicit_data_and_empty_experiment():
    client = new_client()
    experiment = client._experiment
    assert_same(experiment)  # no trials
    add_trials(client, 10, leave_running=False)
    subset = experiment.lookup_data().filter(trial_indices=range(5))
    got = incremental_experiment_data(experiment, DEFAULT, subset)
    assert got == extract_experiment_data(experiment, DEFAULT, subset)
    assert_same(experiment)  # the subset's rows did not become the prefix's


def test_below_min_trials_it_is_axs_function(monkeypatch, seen):
    monkeypatch.setattr(module, "MIN_TRIALS", 30)
    client = new_client()
    add_trials(client, 29, leave_running=False)
    assert_same(client._experiment)
    assert seen == [] and held(client._experiment) == 0
    add_trials(client, 1, leave_running=False)
    assert_same(client._experiment)
    assert seen == [list(range(30))] and held(client._experiment) == 30


def test_prefix_is_dropped_with_its_experiment():
    client = new_client()
    add_trials(client, 10, leave_running=False)
    assert_same(client._experiment)
    key = id(client._experiment)
    assert key in module._PREFIXES
    del client
    gc.collect()
    assert key not in module._PREFIXES


def test_context_installs_it_for_the_adapter_only_inside():
    def installed():
        return ax_adapter_base.extract_experiment_data

    assert installed() is AX_FUNCTION
    with pytest.raises(RuntimeError, match="boom"):
        with fast_experiment_data():
            with fast_experiment_data():
                assert installed() is incremental_experiment_data
            assert installed() is incremental_experiment_data
            raise RuntimeError("boom")
    assert installed() is AX_FUNCTION


def test_get_next_batch_gives_the_same_batch_as_with_axs_extraction(monkeypatch):
    def run(client: Client) -> list[dict]:
        trials = client.get_next_trials(max_trials=6)
        complete_trials(client, {i: evaluate("branin", p) for i, p in trials.items()})
        batches = []
        for _ in range(3):
            trials = get_next_batch(client, max_batch_size=4)
            complete_trials(
                client, {i: evaluate("branin", p) for i, p in trials.items()}
            )
            batches.append(trials)
        return batches

    options = {"initialization_budget": 6, "batch_size": 4}
    ours = run(make_client("turbo-bkb", **options))
    assert ax_adapter_base.extract_experiment_data is AX_FUNCTION
    monkeypatch.setattr(module, "incremental_experiment_data", AX_FUNCTION)
    theirs = run(make_client("turbo-bkb", **options))
    assert ours == theirs


def test_reuse_builds_no_data_frame_of_every_row():
    client = new_client()
    experiment = client._experiment
    add_trials(client, 20, leave_running=False)
    incremental_experiment_data(experiment, DEFAULT)  # first call: everything
    add_trials(client, 9, leave_running=False)
    data = experiment.lookup_data()
    got = incremental_experiment_data(experiment, DEFAULT)
    assert "full_df" not in data.__dict__  # only the new trials' rows were framed
    assert held(experiment) == 29
    assert got == extract_experiment_data(experiment, DEFAULT)


def test_without_a_row_list_it_is_axs_function(monkeypatch, seen):
    monkeypatch.setattr(module, "data_rows", lambda data: None)
    client = new_client()
    add_trials(client, 20, leave_running=False)
    assert_same(client._experiment)
    assert seen == [] and held(client._experiment) == 0
