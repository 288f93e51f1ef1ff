"""The "turbo-bkb" strategy: options, bounds, save/load, pending trials, outcome."""

from __future__ import annotations

import pytest
import torch
from ax import ChoiceParameterConfig, Client, RangeParameterConfig
from botorch.test_functions import Hartmann
from torch.quasirandom import SobolEngine

from botorch_sketch.ax import (
    get_generation_strategy,
    get_next_batch,
    list_generation_strategies,
    strategy_options,
    turbo,
)
from botorch_sketch.ax.turbo import TurboGenerator
from botorch_sketch.trust_region import default_num_candidates
from botorch_sketch.trust_region.window import nearest_rows
from tests.ax.helpers import evaluate, make_client, run_trials


def batches(client: Client, rounds: int, size: int = 6) -> None:
    for _ in range(rounds):
        for index, p in get_next_batch(client, max_batch_size=size).items():
            client.complete_trial(index, raw_data=evaluate("branin", p, True))


def arms_of(client: Client) -> list[dict]:
    return [t.arm.parameters for t in client._experiment.trials.values()]


def completed_values(client: Client) -> list[float]:
    r"""The maximised values (negated Branin) of the completed trials."""
    return [
        -float(t.lookup_data().df["mean"].iloc[0])
        for t in client._experiment.trials.values()
        if t.status.is_completed
    ]


def last_metadata(client: Client) -> dict:
    trial = client._experiment.trials[max(client._experiment.trials)]
    return trial.generator_runs[0].gen_metadata


def test_registered_with_its_options():
    assert "turbo-bkb" in list_generation_strategies()
    options = strategy_options("turbo-bkb")
    assert options["length_init"] == 0.8 and options["length_min"] == 0.5**7
    assert options["success_tolerance"] == 3 and options["failure_tolerance"] is None
    # The periodic schedule's growth every region_fit="periodic" row was run with.
    assert options["refit_growth"] == 0.1 and options["restart"] == "sobol"
    assert options["noise_tolerance"] == 0.0  # TuRBO's success rule
    # The window with one region, all points with several (resolve_auto_options).
    assert options["region_max_points"] == "auto"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"length_init": -0.8}, "length_init must be a finite number > 0"),
        ({"length_min": 0.0}, "length_min"),
        ({"length_max": float("inf")}, "length_max"),
        ({"length_min": 0.9}, "length_min <= length_init <= length_max"),
        ({"length_max": 0.5}, "length_min <= length_init <= length_max"),
        ({"improvement_tolerance": 1.5}, "improvement_tolerance"),
        ({"improvement_tolerance": 1.0}, "improvement_tolerance"),
        ({"improvement_tolerance": -1e-3}, "improvement_tolerance"),
        ({"success_tolerance": 0}, "success_tolerance"),
        ({"failure_tolerance": -1}, "failure_tolerance"),
        ({"batch_size": 0}, "batch_size must be a positive int"),
        ({"num_candidates": 0}, "num_candidates"),
        ({"region_fit": "lukewarm"}, "region_fit must be one of"),
        ({"restart": "elsewhere"}, "restart must be one of"),
        ({"refit_growth": -0.1}, "refit_growth"),
        ({"noise_tolerance": -1.0}, "noise_tolerance must be a finite number >= 0"),
        ({"noise_tolerance": float("nan")}, "noise_tolerance"),
        ({"one_hot_lengthscales": "tied"}, "one_hot_lengthscales must be one of"),
        ({"num_regions": 0}, "num_regions must be a positive int"),
        ({"num_regions": 2.0}, "num_regions must be a positive int"),
        ({"num_regions": 2, "restart": "reopen"}, "takes restart='sobol' only"),
        (
            {"num_regions": 3, "region_fit": "warm"},
            "takes region_fit='cold' or 'periodic' or 'auto' only",
        ),
        ({"num_regions": 2, "incumbent": "mean"}, "takes incumbent='observed'"),
        ({"region_max_points": 0}, "region_max_points must be a positive int"),
        ({"region_max_points": 2.5}, "region_max_points must be a positive int"),
        ({"region_max_points": "all"}, "region_max_points must be a positive int"),
    ],
)
def test_bad_options_fail_in_get_generation_strategy(options, message):
    with pytest.raises(ValueError, match=message):
        get_generation_strategy("turbo-bkb", **options)


@pytest.mark.parametrize(
    "thompson, incumbent",
    [("joint", "mean"), ("embedding", "observed"), ("pathwise", "observed")],
)
def test_batches_stay_in_the_bounds_and_restart(thompson, incumbent):
    # length_min = 0.5: the first shrink restarts the region.
    client = make_client(
        "turbo-bkb",
        initialization_budget=4,
        length_min=0.5,
        num_candidates=200,
        thompson=thompson,
        incumbent=incumbent,
    )
    run_trials(client, "branin", total=4)
    restarts, lengths = [], []
    for _ in range(8):
        trials = get_next_batch(client, max_batch_size=6)
        assert len(trials) == 6
        for index, p in trials.items():
            assert -5.0 <= p["x0"] <= 10.0 and 0.0 <= p["x1"] <= 15.0
            client.complete_trial(index, raw_data=evaluate("branin", p))
        restarts.append(last_metadata(client)["restarts"])
        lengths.append(last_metadata(client)["length"])
    assert restarts[-1] >= 1
    assert all(length in (0.8, 1.6) for length in lengths)


def reopening_client(**options) -> Client:
    r"""Branin after 4 Sobol trials; ``length_min = 0.5``: the first shrink
    collapses the region, which reopens (``restart="reopen"``); the observed
    incumbent, so that the region's best value is its best observation."""
    client = make_client(
        "turbo-bkb",
        initialization_budget=4,
        length_min=0.5,
        num_candidates=200,
        restart="reopen",
        **{"incumbent": "observed", **options},
    )
    run_trials(client, "branin", total=4)
    return client


def test_a_reopened_region_keeps_its_data_and_its_best_value():
    # length_min = 0.5: the first shrink collapses the region. With
    # restart="reopen" it reopens at length_init around the best point, keeps
    # its data and its best value, and needs no new design.
    client = reopening_client()
    for _ in range(8):
        for index, p in get_next_batch(client, max_batch_size=6).items():
            client.complete_trial(index, raw_data=evaluate("branin", p))
        assert "design" not in last_metadata(client)
    saved = region_runs(client)[-1]._generator_state_after_gen["region_state"]
    values = completed_values(client)
    assert saved["region_start"] == 0 and saved["trust_region"]["restarts"] >= 1
    assert saved["trust_region"]["best_value"] == pytest.approx(max(values))
    assert last_metadata(client)["length"] in (0.8, 1.6)


def test_region_max_points_models_the_points_nearest_the_best_one():
    # A reopened region keeps all its data; its model takes the 12 nearest the
    # best observation, while the state machine still sees every point.
    client = reopening_client(region_max_points=12, region_fit="periodic")
    sizes, fitted = [], []
    for _ in range(6):
        for index, p in get_next_batch(client, max_batch_size=6).items():
            client.complete_trial(index, raw_data=evaluate("branin", p))
        sizes.append(last_metadata(client)["dictionary_size"])
        fitted.append(last_metadata(client)["fitted"])
    assert max(sizes) == 12 and len(client._experiment.trials) == 40
    # The periodic schedule counts the region's points (4, 10, ..., 34 at the
    # calls: a fit once they grew by 10 %), not the full window's 12.
    assert fitted == [True] * 6
    saved = region_runs(client)[-1]._generator_state_after_gen["region_state"]
    values = completed_values(client)
    assert saved["trust_region"]["best_value"] == pytest.approx(max(values))


def test_the_window_is_the_nearest_rows_in_order():
    X = torch.tensor([[0.0], [0.9], [0.5], [0.45], [0.1], [0.55]], dtype=torch.float64)
    Y = torch.tensor([[0.0], [1.0], [3.0], [2.0], [0.5], [1.5]], dtype=torch.float64)
    window = TurboGenerator(region_max_points=3)._window
    assert window(X, Y).tolist() == [2, 3, 5]  # row 2 is the best
    assert window(X[:3], Y[:3]).tolist() == [0, 1, 2]  # fewer than the limit
    assert TurboGenerator()._window(X, Y).tolist() == list(range(6))  # default
    # "auto": max(300, 30 d) rows.
    X, Y = torch.rand(700, 20, dtype=torch.float64), torch.rand(700, 1)
    auto = TurboGenerator(region_max_points="auto")._window
    assert auto(X, Y).tolist() == nearest_rows(X, Y, 600).tolist()
    assert len(auto(X[:, :3], Y)) == 300
    for bad in (0, "all"):
        with pytest.raises(ValueError, match="region_max_points"):
            TurboGenerator(region_max_points=bad)


def test_batch_size_caps_the_batch_and_integers_are_integers():
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", parameter_type="float", bounds=(-1.0, 1.0)),
            RangeParameterConfig(name="k", parameter_type="int", bounds=(0, 20)),
        ]
    )
    client.configure_optimization(objective="-f")
    client.set_generation_strategy(
        get_generation_strategy(
            "turbo-bkb", initialization_budget=4, batch_size=3, num_candidates=200
        )
    )
    for _ in range(4):
        for index, p in get_next_batch(client, max_batch_size=8).items():
            assert p["k"] == int(p["k"]) and 0 <= p["k"] <= 20
            assert -1.0 <= p["x"] <= 1.0
            client.complete_trial(
                index, raw_data={"f": p["x"] ** 2 + (p["k"] - 7) ** 2}
            )
    # 4 Sobol trials, then batches of batch_size = 3 < max_batch_size.
    assert len(client._experiment.trials) == 4 + 3 * 3


@pytest.mark.parametrize("lengthscales, count", [("shared", 3), ("per_column", 13)])
def test_categoricals_are_one_column_per_value_and_arms_are_levels(lengthscales, count):
    # 1 float and 2 six-level categoricals: 13 one-hot model columns, so the
    # region's design is 2 d = 26 points; each group of 6 columns shares one
    # lengthscale in the region's kernel.
    levels = [str(i) for i in range(6)]
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", parameter_type="float", bounds=(0.0, 1.0)),
            *(
                ChoiceParameterConfig(name=c, parameter_type="str", values=levels)
                for c in ("a", "b")
            ),
        ]
    )
    client.configure_optimization(objective="-f")
    client.set_generation_strategy(
        get_generation_strategy(
            "turbo-bkb",
            initialization_budget=26,
            batch_size=13,
            region_fit="periodic",
            refit_growth=0.5,
            one_hot_lengthscales=lengthscales,
        )
    )
    for _ in range(3):  # 26 Sobol points, then the region's first model
        for index, p in get_next_batch(client, max_batch_size=13).items():
            assert p["a"] in levels and p["b"] in levels
            value = (p["x"] - 0.3) ** 2 + (p["a"] != "2") + (p["b"] != "4")
            client.complete_trial(index, raw_data={"f": value})
    # 200 d candidates for d = 13 columns (counting each categorical once,
    # 2,000, found worse optima on the mixed10 benchmark with batches of 50).
    assert last_metadata(client)["num_candidates"] == default_num_candidates(13)
    run = client._generation_strategy._generator_runs[-1]
    assert run._generator_state_after_gen["region_state"]["trust_region"]["dim"] == 13
    hyper = run._generator_state_after_gen["region_state"]["sketch_state"]
    (raw,) = [
        v for k, v in hyper["hyperparameters"].items() if k.endswith("raw_lengthscale")
    ]
    # shared: the float's and one per categorical; per_column: one per column.
    assert len(raw["values"]) == count


def test_region_batches_on_a_discrete_space_are_new_configurations():
    # 2 integers in [0, 5] and a 4-level categorical: 144 configurations. The
    # region's candidates are projected onto them, so no region batch repeats
    # an evaluated (or pending) configuration or one of its own points.
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="i", parameter_type="int", bounds=(0, 5)),
            RangeParameterConfig(name="j", parameter_type="int", bounds=(0, 5)),
            ChoiceParameterConfig(
                name="c", parameter_type="str", values=["p", "q", "r", "s"]
            ),
        ]
    )
    client.configure_optimization(objective="-f")
    client.set_generation_strategy(
        get_generation_strategy("turbo-bkb", initialization_budget=12, batch_size=6)
    )
    seen: set[tuple] = set()
    for round_ in range(6):
        trials = get_next_batch(client, max_batch_size=6)
        keys = [(p["i"], p["j"], p["c"]) for p in trials.values()]
        if round_ >= 2:  # after the Sobol design and the region's design
            assert len(set(keys)) == len(keys)
            assert not set(keys) & seen
        seen.update(keys)
        for index, p in trials.items():
            value = (p["i"] - 2) ** 2 + (p["j"] - 4) ** 2 + (p["c"] != "r")
            client.complete_trial(index, raw_data={"f": float(value)})
    assert last_metadata(client)["num_candidates"] == default_num_candidates(6)


@pytest.mark.parametrize("continuous", [False, True])
def test_candidates_are_projected_only_where_every_column_is_discrete(continuous):
    # An integer and a 3-level one-hot group: projected (and observed
    # configurations dropped); with a float column beside them the candidates
    # stay continuous relaxations that Ax rounds (measured better on mixed10).
    from ax.core.search_space import SearchSpaceDigest
    from botorch.utils.datasets import SupervisedDataset

    from botorch_sketch.ax.turbo import TurboGenerator

    names = ["k", "c_OH_PARAM_0", "c_OH_PARAM_1", "c_OH_PARAM_2"]
    bounds = [(0, 4), (0.0, 1.0), (0.0, 1.0), (0.0, 1.0)]
    if continuous:
        names, bounds = ["x", *names], [(-1.0, 1.0), *bounds]
    digest = SearchSpaceDigest(
        feature_names=names,
        bounds=bounds,
        ordinal_features=[len(names) - 4],
        discrete_choices={len(names) - 4: [0, 1, 2, 3, 4]},
    )
    X = torch.zeros(3, len(names), dtype=torch.float64)
    X[:, -3] = 1.0
    data = SupervisedDataset(
        X, torch.rand(3, 1, dtype=torch.float64), feature_names=names,
        outcome_names=["f"],
    )  # fmt: skip
    generator = TurboGenerator()
    generator.fit([data], digest)
    assert generator._discrete.is_empty == continuous
    if not continuous:
        assert generator._discrete.one_hot == ((1, 2, 3),)
        assert generator._discrete.num_parameters(4) == 2


def test_the_design_completing_batch_sets_the_incumbent_and_counts_nothing():
    # Branin (d = 2, design 2 d = 4): 2 Sobol trials, then the region's own
    # design of 6 points; the call after it fits the first model. Those 6 points
    # against the first 2 count neither as a success nor as a failure (TuRBO
    # counts the batches after its design). The observed incumbent: the best
    # value is then the best observation.
    client = make_client(
        "turbo-bkb", initialization_budget=2, num_candidates=200, incumbent="observed"
    )
    run_trials(client, "branin", total=2)
    for index, p in get_next_batch(client, max_batch_size=6).items():
        client.complete_trial(index, raw_data=evaluate("branin", p))
    assert last_metadata(client)["design"] == "sobol"
    get_next_batch(client, max_batch_size=6)
    run = client._generation_strategy._generator_runs[-1]
    region = run._generator_state_after_gen["region_state"]["trust_region"]
    values = completed_values(client)
    assert len(values) == 8
    assert region["length"] == 0.8 and region["success_counter"] == 0
    assert region["failure_counter"] == 0
    assert region["best_value"] == pytest.approx(max(values))
    assert "design" not in last_metadata(client)


def region_lengths(sem: float | None, noise_tolerance: float) -> list[float]:
    """The region side after each of 5 batches on Branin, the observations
    reported with standard error ``sem`` (``None``: without one)."""
    client = make_client(
        "turbo-bkb",
        initialization_budget=2,
        num_candidates=200,
        noise_tolerance=noise_tolerance,
    )
    run_trials(client, "branin", total=2)
    for _ in range(6):
        for index, p in get_next_batch(client, max_batch_size=6).items():
            value = evaluate("branin", p)["branin"]
            raw = {"branin": value if sem is None else (value, sem)}
            client.complete_trial(index, raw_data=raw)
    return [
        run._generator_state_after_gen["region_state"]["trust_region"]["length"]
        for run in client._generation_strategy._generator_runs[-5:]
    ]


def test_noise_tolerance_sets_how_much_a_success_must_gain():
    # Branin (d = 2, q = 6: tau_fail = 1); the first of the 5 calls fits the
    # first model (no batch to count), so a floor no batch beats halves the
    # region at each of the other 4. TuRBO's rule (0) has successes here.
    halving = [0.8 / 2**k for k in range(5)]
    turbo = region_lengths(None, 0.0)
    assert turbo != halving and turbo[-1] > halving[-1]
    # Without reported errors the floor is in fitted noise sds.
    assert region_lengths(None, 1e6) == halving
    # With reported errors (every trial but Ax's two Sobol trials) it is in
    # their median, not the fitted noise: errors of 0 give TuRBO's rule exactly.
    assert region_lengths(0.0, 1.0) == turbo
    assert region_lengths(1e6, 1.0) == halving


def test_the_first_region_starts_at_length_init():
    client = make_client(
        "turbo-bkb", initialization_budget=4, length_init=0.4, num_candidates=200
    )
    run_trials(client, "branin", total=4)
    get_next_batch(client, max_batch_size=4)
    run = client._generation_strategy._generator_runs[-1]
    region = run._generator_state_after_gen["region_state"]["trust_region"]
    assert region["length_init"] == 0.4
    # The first model only sets the incumbent: the side is still length_init.
    assert region["length"] == 0.4 == last_metadata(client)["length"]


@pytest.mark.parametrize(
    "region_fit, restart, num_regions",
    [("cold", "sobol", 1), ("periodic", "reopen", 1), ("warm", "sobol", 1),
     ("cold", "sobol", 3), ("periodic", "sobol", 2)],
)  # fmt: skip
def test_json_save_load_mid_run_continues_with_the_same_arms(
    tmp_path, region_fit, restart, num_regions
):
    options = {
        "initialization_budget": 4,
        "length_min": 0.5,
        "num_candidates": 300,
        "region_fit": region_fit,
        "refit_growth": 0.3,
        "restart": restart,
        "num_regions": num_regions,
    }
    # The reference is the saved client continued in this process (saving only
    # reads the experiment): the run that was never interrupted.
    uninterrupted = make_client("turbo-bkb", **options)
    run_trials(uninterrupted, "branin", total=4, json_exact=True)
    batches(uninterrupted, 4)
    path = tmp_path / "experiment.json"
    uninterrupted.save_to_json_file(str(path))
    torch.manual_seed(12345)
    loaded = Client.load_from_json_file(str(path))
    batches(loaded, 2)
    batches(uninterrupted, 2)
    assert len(arms_of(loaded)) == 4 + 6 * 6
    assert arms_of(loaded) == arms_of(uninterrupted)
    assert last_metadata(loaded) == last_metadata(uninterrupted)
    # A region whose fits can be kept carries its model's sketch along.
    region = region_runs(loaded)[-1]._generator_state_after_gen["region_state"]
    if num_regions == 1:
        assert (region["sketch_state"] is not None) == (region_fit != "cold")
    else:  # the regions' labels came back from the JSON with the data
        assert len(region["regions"]) == num_regions
        kept = [r.get("sketch_state") is not None for r in region["regions"]]
        assert any(kept) == (region_fit == "periodic")
        assert all(r["counted_call"] >= 0 for r in region["regions"])


@pytest.mark.parametrize(
    "region_fit, incumbent, window, q, regions, expected",
    [("auto", "auto", "auto", 1, 1, ("periodic", "mean", "auto")),
     ("auto", "auto", "auto", 2, 1, ("cold", "mean", "auto")),
     ("auto", "auto", "auto", 50, 3, ("cold", "observed", None)),
     ("auto", "auto", "auto", 1, 3, ("periodic", "observed", None)),
     ("warm", "auto", 40, 1, 1, ("warm", "mean", 40)),
     ("auto", "observed", None, 1, 1, ("periodic", "observed", None)),
     ("cold", "observed", 30, 8, 2, ("cold", "observed", 30))],
)  # fmt: skip
def test_auto_options_follow_the_first_batch_size_and_the_regions(
    region_fit, incumbent, window, q, regions, expected
):
    resolved = turbo.resolve_auto_options(region_fit, incumbent, q, regions, window)
    assert tuple(resolved.values()) == expected


def one_point_runs(size: int, calls: int, **options) -> Client:
    client = make_client(
        "turbo-bkb", initialization_budget=4, num_candidates=200, **options
    )
    run_trials(client, "branin", total=4)
    batches(client, calls, size=size)
    return client


def test_defaults_one_point_at_a_time_are_the_periodic_fit_and_mean_incumbent():
    # The defaults ("auto") equal the explicit choices of the first call's batch
    # size, call by call, and keep them when a later call asks for more points.
    auto = one_point_runs(1, 6, refit_growth=0.5)
    explicit = one_point_runs(
        1, 6, refit_growth=0.5, region_fit="periodic", incumbent="mean"
    )
    assert arms_of(auto) == arms_of(explicit)
    assert last_metadata(auto)["region_fit"] == "periodic"
    assert last_metadata(auto)["incumbent"] == "mean"
    assert not all(gr.gen_metadata.get("fitted", True) for gr in region_runs(auto))
    batches(auto, 1, size=3)
    assert len(arms_of(auto)) == 4 + 6 + 3
    assert last_metadata(auto)["region_fit"] == "periodic"
    state = region_runs(auto)[-1]._generator_state_after_gen["region_state"]
    assert state[turbo.RESOLVED_KEY] == {
        "region_fit": "periodic",
        "incumbent": "mean",
        "region_max_points": "auto",
    }
    batch = one_point_runs(3, 3)
    cold = one_point_runs(
        3, 3, region_fit="cold", incumbent="mean", region_max_points="auto"
    )
    assert arms_of(batch) == arms_of(cold)
    assert last_metadata(batch)["region_fit"] == "cold"
    assert last_metadata(batch)["incumbent"] == "mean"


def test_the_window_default_is_resolved_once_and_old_states_keep_the_option():
    # One region: the window ("auto") and the mean incumbent; several regions:
    # all points and observed values. A state saved before region_max_points
    # was resolved (no key) keeps the option as given: "auto", the window.
    one = regions_client()
    batches(one, 1, size=4)
    assert last_metadata(one)["region_max_points"] == "auto"
    assert last_metadata(one)["incumbent"] == "mean"
    two = regions_client(num_regions=2)
    batches(two, 3, size=4)
    assert last_metadata(two)["region_max_points"] is None
    assert last_metadata(two)["incumbent"] == "observed"
    saved = region_runs(two)[-1]._generator_state_after_gen["region_state"]
    del saved[turbo.RESOLVED_KEY]["region_max_points"]
    batches(two, 1, size=4)
    assert last_metadata(two)["region_max_points"] == "auto"
    saved = region_runs(two)[-1]._generator_state_after_gen["region_state"]
    assert saved[turbo.RESOLVED_KEY]["region_max_points"] == "auto"


def region_runs(client: Client) -> list:
    runs = client._generation_strategy._generator_runs
    return [gr for gr in runs if "region_state" in gr._generator_state_after_gen]


def test_periodic_region_refits_once_its_data_grew_by_refit_growth():
    # Batches of 4 from a 12-point region: with refit_growth = 0.5 the
    # hyperparameters fitted at 12 points are kept (unchanged, posterior updated)
    # while the region holds fewer than 18, refitted from the initial values at
    # 20 and kept below 30; with refit_growth = 0, or a cold region (the
    # default), every call fits, as TuRBO.
    def run(growth: float, region_fit: str = "periodic") -> list[tuple]:
        client = make_client(
            "turbo-bkb",
            initialization_budget=12,
            length_min=0.01,
            num_candidates=200,
            region_fit=region_fit,
            refit_growth=growth,
        )
        run_trials(client, "branin", total=12)
        batches(client, 5, size=4)
        out = []
        for gr in region_runs(client):
            state = gr._generator_state_after_gen["region_state"]
            sketch = state["sketch_state"]
            raw = None if sketch is None else sketch["hyperparameters"]
            seen = state["num_seen"] - state["region_start"]
            out.append((seen, gr.gen_metadata["fitted"], raw))
        return out

    kept = run(0.5)
    assert [(seen, fitted) for seen, fitted, _ in kept] == [
        (12, True), (16, False), (20, True), (24, False), (28, False)
    ]  # fmt: skip
    assert kept[1][2] == kept[0][2] and kept[4][2] == kept[3][2] == kept[2][2]
    assert kept[2][2] != kept[1][2]
    assert [fitted for _, fitted, _ in run(0.0)] == [True] * 5
    assert [fitted for _, fitted, _ in run(0.5, "cold")] == [True] * 5


def test_a_generator_built_directly_refits_on_the_regions_schedule():
    # Without the strategy (which passes REGION_REFIT_GROWTH), the generator
    # still takes the region's refit growth, not the global model's.
    from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
    from ax.generators.torch.botorch_modular.utils import ModelConfig

    from botorch_sketch.ax.turbo import TurboGenerator
    from botorch_sketch.models import NystromGP
    from botorch_sketch.models.nystrom_inputs import FIT_OPTION_DEFAULTS
    from botorch_sketch.trust_region.model import REGION_REFIT_GROWTH

    assert REGION_REFIT_GROWTH != FIT_OPTION_DEFAULTS["refit_growth"]
    assert TurboGenerator().model_options["refit_growth"] == REGION_REFIT_GROWTH
    config = ModelConfig(
        botorch_model_class=NystromGP, model_options={"refit_growth": 0.3}
    )
    spec = SurrogateSpec(model_configs=[config])
    assert TurboGenerator(surrogate_spec=spec).model_options["refit_growth"] == 0.3


@pytest.mark.parametrize("num_regions", [1, 2])
def test_pending_trials_get_new_points(num_regions):
    client = make_client(
        "turbo-bkb",
        initialization_budget=4,
        num_candidates=300,
        num_regions=num_regions,
    )
    run_trials(client, "branin", total=4)
    first = get_next_batch(client, max_batch_size=4)
    second = get_next_batch(client, max_batch_size=4)  # the first still running
    points = {tuple(p.values()) for p in [*first.values(), *second.values()]}
    assert len(points) == 8


def regions_client(**options) -> Client:
    r"""Branin after 4 Sobol trials with several regions (``options``)."""
    client = make_client(
        "turbo-bkb", initialization_budget=4, num_candidates=200, **options
    )
    run_trials(client, "branin", total=4)
    return client


def test_several_regions_each_run_their_own_design_and_state():
    # Three regions on Branin (d = 2, designs of 4): region 0 starts from Ax's
    # Sobol trials, regions 1 and 2 from their own designs; every arm the
    # generator makes is labelled with its region, and each region's state
    # counts its own batches (length_min = 0.3: restarts happen).
    client = regions_client(num_regions=3, length_min=0.3)
    first = get_next_batch(client, max_batch_size=10)
    labels = [label_of(client, index) for index in first]
    assert [label["turbo_region"] for label in labels].count(1) == 4
    assert [label["turbo_region"] for label in labels].count(2) == 4
    for index, p in first.items():
        client.complete_trial(index, raw_data=evaluate("branin", p))
    for _ in range(6):
        for index, p in get_next_batch(client, max_batch_size=6).items():
            assert -5.0 <= p["x0"] <= 10.0 and 0.0 <= p["x1"] <= 15.0
            assert label_of(client, index)["turbo_region"] in (0, 1, 2)
            client.complete_trial(index, raw_data=evaluate("branin", p))
    state = region_runs(client)[-1]._generator_state_after_gen["region_state"]
    records = state["regions"]
    assert len(records) == 3 and state["num_calls"] == 7
    assert sum(r["trust_region"]["restarts"] for r in records) >= 1
    # Each region's newest arms carry its current epoch (its restarts).
    epochs = {r: rec["trust_region"]["restarts"] for r, rec in enumerate(records)}
    newest = {}
    for index in client._experiment.trials:
        label = label_of(client, index) if index >= 4 else None
        if label is not None:
            newest[label["turbo_region"]] = label["turbo_epoch"]
    assert all(newest[r] == epochs[r] for r in newest if records[r]["design_left"] == 0)
    lengths = last_metadata(client)["length"]
    assert len(lengths) == 3 and all(0.3 <= x <= 1.6 for x in lengths)


def test_several_regions_fit_their_windows_and_count_every_point(monkeypatch):
    # Two regions with region_max_points = 6: each model takes the 6 points of
    # its region nearest its best one, while its state machine still counts
    # every batch (the incumbent is the best of all the region's values).
    fitted = []
    original = turbo.fit_region_model

    def spy(X, Y, **kwargs):
        fitted.append((X.shape[0], float(Y.max())))
        return original(X, Y, **kwargs)

    monkeypatch.setattr(turbo, "fit_region_model", spy)
    client = regions_client(num_regions=2, region_max_points=6)
    for _ in range(6):
        for index, p in get_next_batch(client, max_batch_size=6).items():
            client.complete_trial(index, raw_data=evaluate("branin", p))
    assert fitted and max(size for size, _ in fitted) == 6
    state = region_runs(client)[-1]._generator_state_after_gen["region_state"]
    values = completed_values(client)
    best = max(r["trust_region"]["best_value"] for r in state["regions"])
    assert best == pytest.approx(max(values))


def test_several_periodic_regions_each_refit_on_their_own_schedule():
    # Two regions, one point at a time, refit_growth = 0.5: a region keeps its
    # hyperparameters (the same raw values) until its own points grew by half
    # since its last fit, whichever region the points went to; a cold region
    # fits at every call.
    client = regions_client(num_regions=2, region_fit="periodic", refit_growth=0.5)
    for _ in range(14):
        for index, p in get_next_batch(client, max_batch_size=1).items():
            client.complete_trial(index, raw_data=evaluate("branin", p))
    runs = region_runs(client)
    seen = []
    for gr in runs:
        records = gr._generator_state_after_gen["region_state"]["regions"]
        for r, (record, fitted) in enumerate(
            zip(records, gr.gen_metadata["fitted"], strict=True)
        ):
            if fitted is None:
                continue
            sketch = record["sketch_state"]
            seen.append((r, fitted, record["fit_points"], sketch["hyperparameters"]))
    assert any(not fitted for _, fitted, _, _ in seen)
    for r in (0, 1):
        mine = [s for s in seen if s[0] == r]
        assert mine and mine[0][1]  # a region's first model is fitted
        for (_, _, base, raw), (_, fitted, points, raw_next) in zip(
            mine, mine[1:], strict=False
        ):
            if fitted:
                assert points >= 1.5 * base  # refitted once grown by half
            else:
                assert points == base and raw_next == raw  # kept unchanged
    cold = regions_client(num_regions=2, region_fit="cold")
    for _ in range(4):
        for index, p in get_next_batch(cold, max_batch_size=1).items():
            cold.complete_trial(index, raw_data=evaluate("branin", p))
    flags = [f for gr in region_runs(cold) for f in gr.gen_metadata["fitted"]]
    assert all(f in (None, True) for f in flags) and True in flags


def label_of(client: Client, index: int) -> dict:
    run = client._experiment.trials[index].generator_runs[0]
    (label,) = run.candidate_metadata_by_arm_signature.values()
    return label


@pytest.mark.outcome
def test_beats_sobol_on_hartmann6():
    # 12 Sobol points, then 6 batches of 8 (60 evaluations in all) against 60
    # scrambled Sobol points, 3 seeds. A trust region is a local method: one run
    # in about 16 stays in a side basin this early (-1.94, seed 1 under AVX2
    # kernels, with TuRBO's rules), so the median gain over Sobol is asserted
    # (1.10 to 1.12 on the two numeric paths with the window and the mean
    # incumbent; each seed's gain printed on failure).
    f = Hartmann(dim=6)
    names = [f"x{i}" for i in range(6)]
    gains = []
    for seed in range(3):
        client = Client(random_seed=seed)
        client.configure_experiment(
            parameters=[
                RangeParameterConfig(name=n, parameter_type="float", bounds=(0, 1))
                for n in names
            ]
        )
        client.configure_optimization(objective="-f")
        client.set_generation_strategy(
            get_generation_strategy(
                "turbo-bkb", seed=seed, initialization_budget=12, num_candidates=1000
            )
        )
        values = []
        while len(values) < 60:
            for index, p in get_next_batch(client, max_batch_size=8).items():
                value = float(f(torch.tensor([[p[n] for n in names]])))
                client.complete_trial(index, raw_data={"f": value})
                values.append(value)
        sobol = SobolEngine(6, scramble=True, seed=seed).draw(60).double()
        gains.append(float(f(sobol).min()) - min(values))
    assert sorted(gains)[1] > 0.5, gains
