"""Adaptive batches as Ax trials: BatchTrial, Client helper, candidate sets."""

from __future__ import annotations

import pytest
import torch
from ax.core.arm import Arm
from ax.core.base_trial import TrialStatus
from ax.core.batch_trial import BatchTrial
from ax.core.generator_run import GeneratorRun
from ax.core.parameter import ParameterType, RangeParameter
from ax.core.search_space import SearchSpace
from ax.exceptions.core import SearchSpaceExhausted

from botorch_sketch.ax import get_next_batch, new_adaptive_batch_trial
from botorch_sketch.ax.trials import BATCH_SIZE_KEY, split_generator_run
from botorch_sketch.optim import optimize_acqf_adaptive_batch
from tests.ax.helpers import FAST, evaluate, make_client, run_trials

BOUNDS = torch.tensor([[-5.0, 0.0], [10.0, 15.0]], dtype=torch.float64)


def selector_batch(client, max_batch_size, rule="global", C=2.0, choices=None):
    """The batch the selector picks directly, on the model Ax just fitted."""
    generator = client._generation_strategy.adapter.generator
    acquisition = generator._acquisition
    n_seen = sum(
        0 if X is None else X.shape[0]
        for X in (acquisition.X_observed, acquisition.X_pending)
    )
    points, _ = optimize_acqf_adaptive_batch(
        generator.surrogate.model,
        bounds=BOUNDS,
        rule=rule,
        C=C,
        alpha=float(acquisition.acqf.alpha),
        max_batch_size=max_batch_size,
        X_pending=acquisition.X_pending,
        choices=choices,
        allow_repeats=choices is None,
        posterior_transform=acquisition.acqf.posterior_transform,
        seed=0 + n_seen,
        **FAST,
    )
    return points


def arm_tensor(arms):
    return torch.tensor(
        [[a.parameters["x0"], a.parameters["x1"]] for a in arms], dtype=torch.float64
    )


def test_batch_trial_has_the_size_the_rule_chose():
    # basin_share=0: the eight one-point warm-up batches take no basin turn
    # (tested in tests/optim), so this trajectory reaches rule batches of > 1.
    client = make_client("bbkb", C=3.0, basin_share=0.0)
    run_trials(client, "branin", total=8)
    experiment, strategy = client._experiment, client._generation_strategy
    sizes = []
    for _ in range(3):
        trial = new_adaptive_batch_trial(experiment, strategy, max_batch_size=10)
        assert isinstance(trial, BatchTrial)
        assert trial.status == TrialStatus.RUNNING
        expected = selector_batch(client, 10, C=3.0)
        assert len(trial.arms) == expected.shape[0]
        torch.testing.assert_close(arm_tensor(trial.arms), expected)
        sizes.append(len(trial.arms))
        trial.attach_batch_trial_data(
            {arm.name: evaluate("branin", arm.parameters) for arm in trial.arms}
        )
        trial.mark_completed()
    assert max(sizes) > 1  # a rule that always stopped at 1 would not be tested
    assert all(1 <= k <= 10 for k in sizes)


def test_client_helper_creates_the_rule_batch_as_one_arm_trials():
    client = make_client("bbkb-local", C=3.0)
    run_trials(client, "branin", total=8)
    before = len(client._experiment.trials)
    batch = get_next_batch(client, max_batch_size=6)
    expected = selector_batch(client, 6, rule="global_local", C=3.0)
    assert len(batch) == expected.shape[0]
    assert sorted(batch) == list(range(before, before + len(batch)))
    got = torch.tensor(
        [[p["x0"], p["x1"]] for _, p in sorted(batch.items())], dtype=torch.float64
    )
    torch.testing.assert_close(got, expected)
    for index, parameters in batch.items():
        trial = client._experiment.trials[index]
        assert trial.status == TrialStatus.RUNNING
        run = trial.generator_runs[0]
        assert run._generation_node_name == "BBKB-local"
        assert run.gen_metadata[BATCH_SIZE_KEY] == len(batch)
        client.complete_trial(index, raw_data=evaluate("branin", parameters))
    # The client keeps working with its usual calls afterwards.
    assert len(client.get_next_trials(max_trials=2)) == 2


def test_client_helper_during_initialisation_uses_sobol():
    client = make_client("bbkb", initialization_budget=5)
    batch = get_next_batch(client, max_batch_size=8)
    assert len(batch) == 5  # not more than the initialisation has left
    runs = [client._experiment.trials[i].generator_runs[0] for i in batch]
    assert {run._generation_node_name for run in runs} == {"Sobol"}


def test_client_helper_first_model_batch_of_a_fixed_q_strategy_is_full():
    # Regression: right after the Sobol trials, the strategy still sits on its
    # Sobol node (it moves at the next generation); the count of trials left was
    # taken on that node, so the first GSSBO batch had 1 trial instead of 4.
    client = make_client("gssbo", initialization_budget=3)
    for _ in range(2):
        batch = get_next_batch(client, max_batch_size=4)
        for index, parameters in batch.items():
            client.complete_trial(index, raw_data=evaluate("branin", parameters))
    assert len(batch) == 4
    runs = [client._experiment.trials[i].generator_runs[0] for i in batch]
    assert {run._generation_node_name for run in runs} == {"GSSBO"}


def test_split_keeps_repeated_points_as_separate_trials():
    # Regression: Ax merges repeated points of a generator run into one arm with
    # a weight; the split made one trial per arm, so "bbkb" with
    # min_batch_size=50 gave batches of 23-49 trials on Hartmann6.
    a, b = {"x0": 0.5, "x1": 1.0}, {"x0": 2.0, "x1": 3.0}
    run = GeneratorRun(arms=[Arm(a), Arm(a), Arm(b)], weights=[1.0, 1.0, 1.0])
    assert len(run.arms) == 2  # Ax's merge
    runs = split_generator_run(run, batch_id=7)
    assert [r.arms[0].parameters for r in runs] == [a, a, b]
    assert [r.gen_metadata[BATCH_SIZE_KEY] for r in runs] == [3, 3, 3]
    assert all(r.weights == [1.0] for r in runs)


def test_split_runs_own_their_search_space_and_keywords():
    space = SearchSpace(
        [RangeParameter(f"x{i}", ParameterType.FLOAT, 0.0, 4.0) for i in range(2)]
    )
    arms = [Arm({"x0": 0.5 * i, "x1": 1.0}) for i in range(4)]
    run = GeneratorRun(
        arms=arms,
        search_space=space,
        generator_key="BBKB",
        generator_kwargs={"seed": 3},
        adapter_kwargs={"transforms": []},
        gen_metadata={"note": "kept"},
    )
    runs = split_generator_run(run, batch_id=1)
    assert [r.arms[0].parameters for r in runs] == [a.parameters for a in arms]
    spaces = [r.search_space for r in runs]
    assert all(s == space and s is not space for s in spaces)
    assert len({id(s) for s in spaces}) == 4  # one copy per run, none shared
    runs[0]._generator_kwargs["seed"] = 9  # a change to one run stays in it
    assert run._generator_kwargs == {"seed": 3} == runs[1]._generator_kwargs
    assert all(r.gen_metadata["note"] == "kept" for r in runs)
    assert len(run.arms) == 4 and run.weights == [1.0] * 4  # the input untouched


def test_failed_and_abandoned_trials_inside_a_batch():
    client = make_client("bbkb", C=4.0, basin_share=0.0)  # as above: a batch of > 1
    run_trials(client, "branin", total=8)
    batch = get_next_batch(client, max_batch_size=6)
    indices = sorted(batch)
    assert len(indices) >= 2
    client.mark_trial_failed(indices[0])
    if len(indices) > 2:
        client.mark_trial_abandoned(indices[1])
    for index in indices[2:] if len(indices) > 2 else indices[1:]:
        client.complete_trial(index, raw_data=evaluate("branin", batch[index]))
    following = get_next_batch(client, max_batch_size=6)
    assert len(following) >= 1
    for index, parameters in following.items():
        client.complete_trial(index, raw_data=evaluate("branin", parameters))
    statuses = [t.status for t in client._experiment.trials.values()]
    assert TrialStatus.FAILED in statuses
    assert all(t.arm is not None for t in client._experiment.trials.values())


def test_candidate_set_without_repeats_until_exhausted():
    generator = torch.Generator().manual_seed(0)
    library = BOUNDS[0] + (BOUNDS[1] - BOUNDS[0]) * torch.rand(
        9, 2, generator=generator, dtype=torch.float64
    )
    client = make_client("bbkb", candidate_set=library, initialization_budget=3)
    run_trials(client, "branin", total=3)
    chosen = []
    while len(chosen) < 9:
        batch = get_next_batch(client, max_batch_size=4)
        for index, parameters in batch.items():
            chosen.append([parameters["x0"], parameters["x1"]])
            client.complete_trial(index, raw_data=evaluate("branin", parameters))
    chosen_t = torch.tensor(chosen, dtype=torch.float64)
    # Every arm is a library row, and no row is used twice.
    match = (chosen_t.unsqueeze(1) - library.unsqueeze(0)).abs().amax(-1) < 1e-9
    assert bool((match.sum(-1) == 1).all())
    assert sorted(match.int().argmax(-1).tolist()) == list(range(9))
    # The library is used up: a clear error, and no empty or orphan trial.
    count = len(client._experiment.trials)
    with pytest.raises(SearchSpaceExhausted, match="allow_repeats"):
        get_next_batch(client, max_batch_size=4)
    assert len(client._experiment.trials) == count
    assert all(t.arm is not None for t in client._experiment.trials.values())


def test_candidate_set_allows_repeats_by_option():
    library = torch.tensor([[3.1, 2.3], [-3.0, 12.0], [9.4, 2.5]], dtype=torch.float64)
    client = make_client(
        "bbkb", candidate_set=library, allow_repeats=True, initialization_budget=3
    )
    run_trials(client, "branin", total=9)
    arms = arm_tensor([t.arm for t in client._experiment.trials.values()][3:])
    match = (arms.unsqueeze(1) - library).abs().amax(-1) < 1e-9
    assert bool(match.any(-1).all())
    assert arms.shape[0] > library.shape[0]  # so some row was used again


@pytest.mark.parametrize("size, error", [(0, ValueError), (2.0, TypeError)])
def test_bad_batch_size(size, error):
    client = make_client("bbkb")
    with pytest.raises(error, match="max_batch_size"):
        get_next_batch(client, max_batch_size=size)
    assert len(client._experiment.trials) == 0


@pytest.mark.parametrize(
    "option,value,bad",
    [
        ("reuse_restarts", True, "yes"),
        ("reuse_restarts", False, "yes"),
        ("restart_maxiter", 7, 0),
    ],
)
def test_box_options_reach_the_box_optimiser(monkeypatch, option, value, bad):
    import botorch_sketch.ax.acquisition as acquisition

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs[option])
        return optimize_acqf_adaptive_batch(*args, **kwargs)

    monkeypatch.setattr(acquisition, "optimize_acqf_adaptive_batch", spy)
    client = make_client("bbkb", min_batch_size=3, **{option: value})
    run_trials(client, "branin", total=6)
    batch = get_next_batch(client, max_batch_size=3)
    assert len(batch) == 3 and seen and set(seen) == {value}
    with pytest.raises(ValueError, match=option):
        make_client("bbkb", **{option: bad})


def test_thompson_fill_option_fills_the_batch_on_a_box(monkeypatch):
    import botorch_sketch.ax.acquisition as acquisition

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["thompson_fill"])
        return optimize_acqf_adaptive_batch(*args, **kwargs)

    monkeypatch.setattr(acquisition, "optimize_acqf_adaptive_batch", spy)
    client = make_client("bbkb", min_batch_size=5, thompson_fill=1.0)
    run_trials(client, "branin", total=6)
    batch = get_next_batch(client, max_batch_size=5)
    assert len(batch) == 5 and seen and set(seen) == {1.0}
    points = torch.tensor([[p["x0"], p["x1"]] for p in batch.values()])
    assert torch.unique(points, dim=0).shape[0] == 5  # distinct Thompson samples
    for bad in (1.5, -0.1, True, "0.5"):
        with pytest.raises(ValueError, match="thompson_fill must be a number"):
            make_client("bbkb", thompson_fill=bad)


@pytest.mark.parametrize("where", ["new_trial", "mark_running"])
def test_a_batch_interrupted_between_two_trials_leaves_no_pending_trial(
    monkeypatch, where
):
    from ax.core.trial import Trial

    client = make_client("bbkb", min_batch_size=3)
    run_trials(client, "branin", total=8)
    experiment = client._experiment
    owner, name = (
        (experiment, "new_trial") if where == "new_trial" else (Trial, "mark_running")
    )
    original = getattr(owner, name)
    calls = {"n": 0}

    def second_call_interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, second_call_interrupted)
    with pytest.raises(KeyboardInterrupt):
        get_next_batch(client, max_batch_size=6)
    monkeypatch.undo()
    statuses = [t.status for t in experiment.trials.values()]
    assert len(statuses) > 8  # the interrupted call had created a trial
    assert statuses[:8] == [TrialStatus.COMPLETED] * 8
    assert set(statuses[8:]) == {TrialStatus.ABANDONED}
    batch = get_next_batch(client, max_batch_size=6)
    assert len(batch) >= 3
    assert all(experiment.trials[i].status.is_running for i in batch)
