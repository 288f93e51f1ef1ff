"""BBKBLibraryGenerator: a finite library in Ax runs the same engine as run_bbkb."""

from __future__ import annotations

import itertools
import json
import logging

import pytest
import torch
from ax import ChoiceParameterConfig, Client, RangeParameterConfig
from ax.exceptions.core import SearchSpaceExhausted
from gpytorch.kernels import RBFKernel, ScaleKernel

from botorch_sketch.ax import encode_library, get_generation_strategy, get_next_batch
from botorch_sketch.ax import library as library_mod
from botorch_sketch.loops import run_bbkb

D, A, LAM = 3, 300, 1e-3
NAMES = [f"x{i}" for i in range(D)]


def make_library(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(A, D, generator=g, dtype=torch.float64)
    f = torch.sin(4 * X[:, 0]) + torch.cos(3 * X[:, 1]) * X[:, 2]
    return X, f


def library_client(X: torch.Tensor, init: list[int], f: torch.Tensor, **options):
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=n, parameter_type="float", bounds=(0.0, 1.0))
            for n in NAMES
        ]
    )
    client.configure_optimization(objective="f")
    strategy = get_generation_strategy(
        "bbkb", candidate_set=X, initialization_budget=len(init), **options
    )
    client.set_generation_strategy(strategy)
    for i in init:  # the initial points are library rows, as in run_bbkb
        index = client.attach_trial(dict(zip(NAMES, X[i].tolist(), strict=True)))
        client.complete_trial(index, raw_data={"f": float(f[i])})
    return client


def row_of(parameters: dict, X: torch.Tensor) -> int:
    x = torch.tensor([parameters[n] for n in NAMES], dtype=torch.float64)
    return int((X - x).abs().amax(-1).argmin())


def run_ax(client, X, f, T: int, max_batch_size: int, forget: bool = False):
    """The rows of at least ``T`` trials, as a list of batches."""
    batches = []
    while sum(map(len, batches)) < T:
        if forget:  # every call restores the engine from Ax's generator state
            library_mod._RUNS.clear()
        batch = get_next_batch(client, max_batch_size=max_batch_size)
        rows = []
        for index, parameters in batch.items():
            rows.append(row_of(parameters, X))
            client.complete_trial(index, raw_data={"f": float(f[rows[-1]])})
        batches.append(rows)
    return batches


def reference_kernel() -> ScaleKernel:
    kernel = ScaleKernel(RBFKernel(ard_num_dims=D)).to(torch.float64)
    kernel.base_kernel.lengthscale = torch.full((1, D), 0.2)
    kernel.outputscale = torch.tensor(1.0)
    kernel.raw_outputscale.requires_grad_(False)
    return kernel


OPTIONS = dict(lam=LAM, standardize=False, allow_repeats=True, seed=3)


@pytest.mark.parametrize(
    "learn, resampling",
    [(False, "independent"), (True, "independent"), (False, "coupled")],
)
def test_ax_library_makes_the_same_choices_as_run_bbkb(learn, resampling):
    X, f = make_library()
    init, T, cap = [5, 17], 40, 8
    ref = run_bbkb(
        X, lambda idx: f[idx], T, reference_kernel(), LAM, C=2.0, q_bar=2.0,
        rule="global", beta="paper", delta=0.01, init=torch.tensor(init),
        max_batch_size=cap, allow_repeats=True, seed=3, progress=False, learn=learn,
        resampling=resampling,
    )  # fmt: skip
    client = library_client(
        X, init, f, learn=learn, max_batch_size=cap, resampling=resampling, **OPTIONS
    )
    batches = run_ax(client, X, f, T - len(init), cap)
    expected = [
        sorted(ref.arms[ref.batch_id == b].tolist()) for b in range(1, ref.num_batches)
    ]
    # Ax merges a row repeated in a batch into one weighted arm, so a batch's
    # trials are its choices in another order; the last batch is cut at T.
    assert [sorted(b) for b in batches[:-1]] == expected[: len(batches) - 1]
    assert sum(len(b) > 1 for b in batches) >= (3 if learn else 0)


@pytest.mark.parametrize("resampling", ["independent", "coupled"])
def test_restored_engine_continues_like_the_cached_one(resampling):
    X, f = make_library(1)
    init = [0, 1, 2]
    opts = {**OPTIONS, "resampling": resampling}
    cached = run_ax(library_client(X, init, f, **opts), X, f, 20, 6)
    restored = run_ax(library_client(X, init, f, **opts), X, f, 20, 6, forget=True)
    assert restored == cached


def test_saved_and_loaded_client_continues(tmp_path):
    X, f = make_library(2)
    init = [3, 4]
    client = library_client(X, init, f, **OPTIONS)
    first = run_ax(client, X, f, 12, 4)
    path = str(tmp_path / "run.json")
    client.save_to_json_file(path)
    rest = run_ax(client, X, f, 12, 4)
    library_mod._RUNS.clear()
    loaded = Client.load_from_json_file(path)
    assert run_ax(loaded, X, f, 12, 4) == rest
    assert sum(map(len, first)) >= 12


def test_without_repeats_the_library_is_used_up_then_exhausted():
    X, f = make_library(3)
    X, f = X[:12], f[:12]
    client = library_client(X, [0], f, lam=LAM, seed=0)
    chosen = sum(run_ax(client, X, f, 11, 5), [])
    assert sorted(chosen) == list(range(1, 12))
    with pytest.raises(SearchSpaceExhausted):
        get_next_batch(client, max_batch_size=5)


def test_sobol_points_become_extra_arms_never_proposed(caplog):
    X, f = make_library(4)
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=n, parameter_type="float", bounds=(0.0, 1.0))
            for n in NAMES
        ]
    )
    client.configure_optimization(objective="-f")  # minimised
    client.set_generation_strategy(
        get_generation_strategy("bbkb", candidate_set=X, initialization_budget=4)
    )

    def value(p: dict) -> float:
        x = torch.tensor([p[n] for n in NAMES], dtype=torch.float64)
        return float(torch.sin(4 * x[0]) + torch.cos(3 * x[1]) * x[2])

    for index, p in client.get_next_trials(max_trials=4).items():
        client.complete_trial(index, raw_data={"f": value(p)})
    rows = []
    with caplog.at_level(logging.INFO, logger="botorch_sketch.ax.library"):
        for _ in range(4):
            for index, p in get_next_batch(client, max_batch_size=5).items():
                i = row_of(p, X)
                assert (X[i] - torch.tensor([p[n] for n in NAMES])).abs().max() < 1e-6
                rows.append(i)
                client.complete_trial(index, raw_data={"f": value(p)})
    assert "starting again" not in caplog.text  # the engine was kept
    assert len(set(rows)) == len(rows)  # no repeats by default
    # A minimised objective: the proposals are better than the library average.
    assert float(f[rows].mean()) < float(f.mean())
    best, prediction, _, _ = client.get_best_parameterization()
    assert prediction["f"][0] == pytest.approx(value(best), abs=0.5)


def test_library_only_options_are_refused_on_a_box():
    with pytest.raises(ValueError, match="only apply with a candidate_set"):
        get_generation_strategy("bbkb", lam=0.1)
    with pytest.raises(ValueError, match="only apply without a candidate_set"):
        get_generation_strategy(
            "bbkb", candidate_set=torch.rand(5, 2), max_dictionary_size=10
        )
    for option in ({"thompson_fill": 0.25}, {"reuse_restarts": False}):
        with pytest.raises(ValueError, match="only apply on a box"):
            get_generation_strategy("bbkb", candidate_set=torch.rand(5, 2), **option)
    with pytest.raises(ValueError, match="schedule"):
        get_generation_strategy("bbkb", candidate_set=torch.rand(5, 2), schedule="x")


def test_categorical_library_encoded_with_ax_transforms():
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", parameter_type="float", bounds=(0.0, 1.0)),
            ChoiceParameterConfig(
                name="c", parameter_type="str", values=["a", "b", "c"]
            ),
            ChoiceParameterConfig(
                name="o", parameter_type="int", values=[1, 2, 4, 8], is_ordered=True
            ),
        ]
    )
    client.configure_optimization(objective="f")
    library = [
        {"x": x / 9, "c": c, "o": o}
        for x, c, o in itertools.product(range(10), "abc", [1, 2, 4, 8])
    ]
    rows = encode_library(client, library)
    assert rows.shape == (120, 5)  # x, o's index and c one-hot (3 columns)
    binary = [j for j in range(5) if set(rows[:, j].tolist()) <= {0.0, 1.0}]
    assert len(binary) == 3  # c one-hot
    assert torch.equal(rows[:, binary].sum(-1), torch.ones(120, dtype=rows.dtype))
    with pytest.raises(ValueError, match="not in the search space"):
        encode_library(client, [{"x": 2.0, "c": "a", "o": 1}])
    client.set_generation_strategy(
        get_generation_strategy("bbkb", candidate_set=rows, initialization_budget=3)
    )

    def value(p: dict) -> dict:
        level = {"a": 0.0, "b": 0.3, "c": 0.1}[p["c"]]
        return {"f": -((p["x"] - 0.3) ** 2) + level - 0.02 * p["o"]}

    for index, p in client.get_next_trials(max_trials=3).items():
        client.complete_trial(index, raw_data=value(p))
    proposed = []
    for _ in range(3):
        for index, p in get_next_batch(client, max_batch_size=4).items():
            proposed.append((round(p["x"], 9), p["c"], p["o"]))
            client.complete_trial(index, raw_data=value(p))
    keys = {(round(e["x"], 9), e["c"], e["o"]) for e in library}
    assert proposed and set(proposed) <= keys
    assert len(set(proposed)) == len(proposed)


def test_saved_json_holds_the_library_a_fixed_number_of_times(tmp_path):
    """Neither the generator runs nor the one-arm trials copy the library (or the
    engine state): a run's JSON grows by a bounded number of library copies."""
    sizes, copies = [], []
    for rows in (30, 3000):
        g = torch.Generator().manual_seed(0)
        X = torch.rand(rows, D, generator=g, dtype=torch.float64)
        f = X.sum(-1)
        client = library_client(X, [0, 1], f, **OPTIONS)
        run_ax(client, X, f, 12, 3)
        path = tmp_path / f"run{rows}.json"
        client.save_to_json_file(str(path))
        sizes.append(path.stat().st_size)
        copies.append(len(json.dumps(X.tolist())))
    assert sizes[1] - sizes[0] < 4 * (copies[1] - copies[0])


@pytest.mark.parametrize("where", ["refresh", "dictionary_draw", "after_draw"])
def test_a_call_interrupted_inside_the_engine_retries_like_the_uninterrupted_run(
    monkeypatch, where
):
    import botorch_sketch.bbkb.engine as engine_mod

    X, f = make_library(4)
    init = [0, 1, 2]
    options = {**OPTIONS, "learn": True}
    reference = library_client(X, init, f, **options)
    expected = run_ax(reference, X, f, 16, 4)
    library_mod._RUNS.clear()
    # Interrupt the 3rd engine call once: inside the incremental refresh of its
    # state (after the in-place update), after its dictionary draw, or right
    # after the refresh, before the batch.
    owner, target = {
        "refresh": (engine_mod.IncrementalState, "_refresh"),
        "dictionary_draw": (engine_mod.linalg, "sample_dictionary"),
        "after_draw": (engine_mod, "select_batch"),
    }[where]
    original = getattr(owner, target)
    calls = {"n": 0}

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3 and where == "refresh":
            raise KeyboardInterrupt  # the embedding is updated, the rest is not
        result = original(*args, **kwargs)
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(owner, target, interrupted)
    client = library_client(X, init, f, **options)
    batches = []
    while sum(map(len, batches)) < 16:
        try:
            batch = get_next_batch(client, max_batch_size=4)
        except KeyboardInterrupt:
            continue
        rows = [row_of(p, X) for p in batch.values()]
        for index, row in zip(batch, rows, strict=True):
            client.complete_trial(index, raw_data={"f": float(f[row])})
        batches.append(rows)
    assert calls["n"] > 3
    assert all(t.status.is_completed for t in client._experiment.trials.values())
    assert batches == expected
    # The engines end in the same state (dictionary, draws, sums).
    assert last_engine_state(client) == last_engine_state(reference)


def last_engine_state(client: Client) -> dict:
    runs = client._generation_strategy._generator_runs
    return runs[-1]._generator_state_after_gen["engine_state"]["checkpoint"]


@pytest.mark.parametrize("how", ["nan_kernel", "dictionary_out_of_bounds"])
def test_a_corrupt_saved_engine_state_is_discarded_and_restarted(tmp_path, caplog, how):
    X, f = make_library(5)
    init = [0, 1, 2]
    client = library_client(X, init, f, **OPTIONS)
    run_ax(client, X, f, 6, 3)
    checkpoint = last_engine_state(client)
    if how == "nan_kernel":
        checkpoint["kernel"] = {
            k: torch.full_like(torch.tensor(v), float("nan")).tolist()
            for k, v in checkpoint["kernel"].items()
        }
    else:
        checkpoint["dictionary"] = [10**6]
    path = str(tmp_path / "run.json")
    client.save_to_json_file(path)
    library_mod._RUNS.clear()
    loaded = Client.load_from_json_file(path)
    with caplog.at_level(logging.WARNING, logger="botorch_sketch.ax.library"):
        batches = run_ax(loaded, X, f, 6, 3)
    assert "engine state discarded" in caplog.text
    assert sum(map(len, batches)) >= 6
    kernel = last_engine_state(loaded)["kernel"]
    assert all(torch.isfinite(torch.tensor(v)).all() for v in kernel.values())
