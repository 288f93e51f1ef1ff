"""The Ax contract, checked the same way for every named strategy.

Every scenario runs for every strategy in ``list_generation_strategies()``, so a new
strategy gets all of them by being registered: parameter types and constraints,
failed / abandoned / attached trials, outcome constraints and several objectives
(working where the method allows them, refused before any trial otherwise),
metrics reported without noise, and bad input that fails before any trial or
state changes. Save / load continuation is in ``test_storage.py``, adaptive batch
trials in ``test_trials.py``, pending trials in ``test_strategies.py``.
"""

from __future__ import annotations

import pytest
import torch
from ax import ChoiceParameterConfig, Client, RangeParameterConfig
from ax.exceptions.core import UnsupportedError

from botorch_sketch.ax import (
    get_generation_strategy,
    get_next_batch,
    list_generation_strategies,
)
from botorch_sketch.ax.strategies import _RECIPES
from tests.ax.helpers import fast

NAMES = sorted(list_generation_strategies())
SINGLE_OBJECTIVE = sorted(n for n, r in _RECIPES.items() if r.single_objective)
N_INIT = 4


def strategy(name: str, **options):
    return get_generation_strategy(
        name, seed=0, initialization_budget=N_INIT, **{**fast(name), **options}
    )


def float_client(name: str, objective: str = "f", **config) -> Client:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=(0, 1))
            for i in range(2)
        ]
    )
    client.configure_optimization(objective=objective, **config)
    client.set_generation_strategy(strategy(name))
    return client


def f(p: dict) -> float:
    return float(torch.sin(5 * torch.tensor([p["x0"], p["x1"]])).sum())


def f_data(p: dict) -> dict[str, float]:
    return {"f": f(p)}


def step(client: Client, values=f_data) -> dict[int, dict]:
    trials = client.get_next_trials(max_trials=1)
    for index, p in trials.items():
        client.complete_trial(index, raw_data=values(p))
    return trials


def model_trials(client: Client) -> int:
    return sum(
        gr._generation_node_name != "Sobol"
        for t in client._experiment.trials.values()
        for gr in t.generator_runs
    )


@pytest.mark.parametrize("name", NAMES)
def test_mixed_parameter_types_and_parameter_constraints(name):
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", parameter_type="float", bounds=(0.0, 1.0)),
            RangeParameterConfig(name="y", parameter_type="float", bounds=(0.0, 1.0)),
            RangeParameterConfig(name="k", parameter_type="int", bounds=(0, 10)),
            ChoiceParameterConfig(
                name="c", parameter_type="str", values=["a", "b", "c"]
            ),
            ChoiceParameterConfig(
                name="o", parameter_type="int", values=[1, 2, 4, 8], is_ordered=True
            ),
        ],
        parameter_constraints=["x + y <= 1.2"],
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(strategy(name))

    def value(p):
        level = {"a": 0.0, "b": 0.3, "c": 0.1}[p["c"]]
        return {"f": -((p["x"] - 0.3) ** 2) + 0.05 * p["k"] + level - 0.02 * p["o"]}

    for _ in range(N_INIT + 2):
        for p in step(client, value).values():
            assert p["x"] + p["y"] <= 1.2 + 1e-9
            assert p["c"] in ("a", "b", "c") and p["o"] in (1, 2, 4, 8)
            assert p["k"] == int(p["k"]) and 0 <= p["k"] <= 10
    assert model_trials(client) == 2


@pytest.mark.parametrize("name", NAMES)
def test_failed_abandoned_and_attached_trials(name):
    client = float_client(name)
    for _ in range(N_INIT):
        step(client)
    failed = next(iter(client.get_next_trials(max_trials=1)))
    client.mark_trial_failed(failed)
    abandoned = next(iter(client.get_next_trials(max_trials=1)))
    client.mark_trial_abandoned(abandoned)
    attached = client.attach_trial({"x0": 0.31, "x1": 0.32})
    client.complete_trial(attached, raw_data=f_data({"x0": 0.31, "x1": 0.32}))
    trials = step(client)
    assert len(trials) == 1
    # The model saw the completed and the attached trials only.
    generator = client._generation_strategy.adapter.generator
    assert generator.surrogate.training_data[0].X.shape[0] == N_INIT + 1


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "config",
    [
        dict(objective="f", outcome_constraints=["g <= 0.5"]),
        dict(objective="f, -g"),
    ],
    ids=["outcome_constraint", "two_objectives"],
)
def test_outcome_constraints_and_multi_objective(name, config):
    client = float_client(name, **config)

    def values(p):
        return {"f": f(p), "g": p["x0"]}

    if name in SINGLE_OBJECTIVE:
        # Refused at the first call, before any trial exists.
        with pytest.raises(UnsupportedError, match="one objective"):
            client.get_next_trials(max_trials=1)
        assert len(client._experiment.trials) == 0
        return
    for _ in range(N_INIT + 2):
        step(client, values)
    assert model_trials(client) == 2


@pytest.mark.parametrize("name", NAMES)
def test_metrics_reported_without_noise(name):
    client = float_client(name)
    for _ in range(N_INIT + 2):
        step(client, lambda p: {"f": (f(p), 0.0)})
    assert model_trials(client) == 2


@pytest.mark.parametrize("name", SINGLE_OBJECTIVE)
def test_candidate_set_of_the_wrong_width_fails_before_any_trial(name):
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=(0, 1))
            for i in range(2)
        ]
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(strategy(name, candidate_set=torch.rand(20, 3)))
    with pytest.raises(ValueError, match="3 columns but the experiment has 2"):
        client.get_next_trials(max_trials=1)
    assert len(client._experiment.trials) == 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "options, message",
    [
        ({"seed": -1}, "seed"),
        ({"initialization_budget": 0}, "initialization_budget"),
        ({"num_restarts": 1.5}, "num_restarts"),
        ({"beta": float("inf")}, "beta"),
        ({"no_such_option": 1}, "Unknown option"),
    ],
)
def test_bad_common_options_fail_in_get_generation_strategy(name, options, message):
    with pytest.raises(ValueError, match=message):
        get_generation_strategy(name, **options)


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("bbkb", {"allow_repeats": "no"}, "allow_repeats must be True or False"),
        ("goucb", {"paper_phases": "no"}, "paper_phases must be True or False"),
        ("bkb", {"q_bar": 0}, "q_bar must be a finite number > 0"),
        ("bbkb", {"max_dictionary_size": 0}, "max_dictionary_size"),
        ("bbkb", {"alpha": 1.0, "beta": 2.0}, "either alpha"),
        ("bbkb", {"candidate_set": [[0.1, 0.2], [0.3]]}, "candidate_set"),
        ("bbkb", {"candidate_set": [[0.1, float("nan")]]}, "NaN"),
        ("bbkb", {"candidate_set": torch.zeros(0, 2)}, "non-empty"),
        ("bbkb", {"min_batch_size": 5, "max_batch_size": 3}, "min_batch_size"),
        ("gssbo", {"subset_size": 5}, "subset_size"),
        ("goucb", {"lambda_": 0.0}, "lambda_"),
    ],
)
def test_bad_method_options_fail_in_get_generation_strategy(name, options, message):
    with pytest.raises(ValueError, match=message):
        get_generation_strategy(name, **options)


@pytest.mark.parametrize("name", SINGLE_OBJECTIVE)
@pytest.mark.parametrize(
    "config, named",
    [
        (dict(objective="f", outcome_constraints=["g <= 0.5"]), "outcome constraints"),
        (dict(objective="f, -g"), "several objectives"),
    ],
    ids=["outcome_constraint", "two_objectives"],
)
def test_a_later_change_the_method_cannot_honour_is_refused(name, config, named):
    client = float_client(name)

    def values(p):
        return {"f": f(p), "g": p["x0"]}

    for _ in range(N_INIT + 3):
        step(client, values)
    client.configure_optimization(**config)
    before = len(client._experiment.trials)
    with pytest.raises(UnsupportedError, match=named):
        client.get_next_trials(max_trials=1)
    with pytest.raises(UnsupportedError, match=named):
        get_next_batch(client, max_batch_size=3)
    trials = client._experiment.trials.values()
    assert len(client._experiment.trials) == before
    assert all(t.status.is_completed for t in trials)
