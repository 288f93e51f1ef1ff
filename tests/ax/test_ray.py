"""Ray-backed runner and metric: trials run once each, faults fail their trial."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from ax import Client, RangeParameterConfig
from ax.api.protocols.metric import IMetric
from ax.core.trial_status import TrialStatus
from ax.orchestration.orchestrator_options import OrchestratorOptions

import botorch_sketch.ax.ray as ray_module
from botorch_sketch.ax import (
    configure_ray,
    experiment_data,
    get_generation_strategy,
    list_generation_strategies,
)
from botorch_sketch.ax.generator import SketchGenerators
from botorch_sketch.ax.library import BBKBLibraryGenerator
from botorch_sketch.ax.ray import (
    ERROR_KEY,
    FINISHED_KEY,
    LOOKAHEAD_PER_WORKER,
    SUBMITTED_KEY,
    TASK_KEY,
    WARM_UP_STALL_S,
    LookaheadOrchestrator,
    RayMetric,
    RayRunner,
    background_mode,
    fork_available,
    generation_ahead,
    parse_outcome,
    refill_size,
    run_trials,
)
from botorch_sketch.ax.trials import gen_filled_batch, trials_left_in_generating_node
from botorch_sketch.ax.turbo import TurboGenerator

ray = pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module (configure_ray then reuses it)."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def make_client(
    initialization_budget: int = 20, strategy: str = "bbkb", **options
) -> Client:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=n, parameter_type="float", bounds=(0.0, 1.0))
            for n in ("x1", "x2")
        ]
    )
    client.configure_optimization(objective="-f")
    client.set_generation_strategy(
        get_generation_strategy(
            strategy, initialization_budget=initialization_budget, **options
        )
    )
    return client


def make_evaluate(sleep: float = 0.01, fail_below: float = -1.0, nan_above=2.0):
    """A nested function (Ray ships it by value): a quadratic with injected faults.

    ``x1 < fail_below`` raises, ``x1 > nan_above`` returns NaN.
    """

    def evaluate(p):
        import time

        time.sleep(sleep)
        if p["x1"] < fail_below:
            raise RuntimeError("boom")
        if p["x1"] > nan_above:
            return {"f": float("nan")}
        return {"f": (p["x1"] - 0.3) ** 2 + (p["x2"] - 0.6) ** 2}

    return evaluate


def make_crashing_evaluate(crash_below: float):
    """Kills its worker process (``os._exit``) when ``x1 < crash_below``."""

    def evaluate(p):
        import os
        import time

        time.sleep(0.01)
        if p["x1"] < crash_below:
            os._exit(1)
        return {"f": p["x1"] + p["x2"]}

    return evaluate


def trials_by_status(client: Client) -> dict[TrialStatus, list[int]]:
    out: dict[TrialStatus, list[int]] = {}
    for index, trial in client._experiment.trials.items():
        out.setdefault(trial.status, []).append(index)
    return out


def data_rows_per_trial(client: Client) -> dict[int, int]:
    df = client._experiment.lookup_data().df
    return df.groupby("trial_index").size().to_dict()


def test_parse_outcome_accepts_numbers_and_pairs_and_rejects_bad_values():
    out = parse_outcome({"a": 1, "b": (np.float64(2.0), None), "c": (3.0, 0.1)}, "abc")
    assert out["a"][0] == 1.0 and math.isnan(out["a"][1])
    assert out["b"][0] == 2.0 and math.isnan(out["b"][1])
    assert out["c"] == (3.0, 0.1)
    with pytest.raises(ValueError, match="'a'.*not finite"):
        parse_outcome({"a": float("nan")}, ["a"])
    with pytest.raises(ValueError, match="not finite"):
        parse_outcome({"a": (0.0, float("inf"))}, ["a"])
    with pytest.raises(ValueError, match="non-negative"):
        parse_outcome({"a": (0.0, -1.0)}, ["a"])
    with pytest.raises(ValueError, match="no value for metric"):
        parse_outcome({"b": 1.0}, ["a"])
    with pytest.raises(TypeError, match="real number"):
        parse_outcome({"a": True}, ["a"])
    with pytest.raises(TypeError, match="mapping"):
        parse_outcome(1.0, ["a"])


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"num_workers": 0}, ValueError),
        ({"num_workers": True}, TypeError),
        ({"num_workers": 2.0}, TypeError),
        ({"evaluate": "not callable"}, TypeError),
        ({"metric_names": ["g"]}, ValueError),
        ({"metric_names": []}, ValueError),
        ({"address": 1}, TypeError),
        ({"warm_up": 1}, TypeError),
    ],
)
def test_bad_arguments_fail_before_anything_is_created(kwargs, error):
    client = make_client()
    args = {"evaluate": make_evaluate(), "num_workers": 2, **kwargs}
    with pytest.raises(error):
        configure_ray(client, **args)
    assert client._experiment.runner is None
    assert len(client._experiment.trials) == 0
    assert not isinstance(client._experiment.metrics["f"], RayMetric)


def test_without_ray_configure_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails
    client = make_client()
    with pytest.raises(ImportError, match=r"pip install botorch_sketch\[ray\]"):
        configure_ray(client, make_evaluate(), num_workers=2)
    assert client._experiment.runner is None


def test_package_imports_without_ray():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import botorch_sketch, botorch_sketch.ax\n"
        "assert callable(botorch_sketch.ax.configure_ray)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]


def test_warm_up_starts_every_worker_process_before_the_first_trial(monkeypatch):
    client = make_client()
    runner = configure_ray(client, make_evaluate(), num_workers=WORKERS, warm_up=False)
    # A worker process can take longer than WARM_UP_STALL_S to start on a loaded
    # machine (the rounds then stop with fewer): a long stall for the first count.
    with monkeypatch.context() as patch:
        patch.setattr(ray_module, "WARM_UP_STALL_S", 30.0)
        assert runner.warm_up(timeout=60.0, seconds=0.1) == WORKERS
    assert len(client._experiment.trials) == 0  # no trial was created
    # More slots than the local Ray runs at once: the rounds stop once no new
    # worker process answers for WARM_UP_STALL_S, long before the timeout, and
    # at the timeout when that comes first.
    runner.num_workers = WORKERS + 2
    start = time.monotonic()
    assert runner.warm_up(timeout=60.0, seconds=0.05) == WORKERS
    assert time.monotonic() - start < WARM_UP_STALL_S + 3.0
    start = time.monotonic()
    assert runner.warm_up(timeout=0.5, seconds=0.05) <= WORKERS
    assert time.monotonic() - start < 2.5


def test_bbkb_keeps_workers_busy_and_every_trial_completes_once():
    client = make_client(initialization_budget=4)
    runner = configure_ray(client, make_evaluate(sleep=0.2), num_workers=WORKERS)
    assert isinstance(runner, RayRunner)
    orchestrator = run_trials(client, max_trials=10, parallelism=WORKERS)
    assert orchestrator.lookahead == LOOKAHEAD_PER_WORKER * WORKERS

    trials = client._experiment.trials
    assert len(trials) == 10
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(10))}
    assert data_rows_per_trial(client) == dict.fromkeys(range(10), 1)
    ids = [t.run_metadata[TASK_KEY] for t in trials.values()]
    assert len(set(ids)) == 10
    arms = {tuple(sorted(t.arm.parameters.items())) for t in trials.values()}
    assert len(arms) == 10  # pending trials were hallucinated, not re-proposed
    # Trials in flight at once (submission to worker finish): never more than the
    # parallelism, and the Orchestrator filled every slot at least once.
    events = sorted(
        [(t.run_metadata[SUBMITTED_KEY], 1) for t in trials.values()]
        + [(t.run_metadata[FINISHED_KEY], -1) for t in trials.values()]
    )
    in_flight = np.cumsum([step for _, step in events])
    assert in_flight.max() == WORKERS


@pytest.mark.parametrize("strategy", sorted(list_generation_strategies()))
def test_run_trials_runs_every_strategy_past_its_initialisation(strategy):
    """Every strategy of the package under ``run_trials`` on Ray: each trial once,
    the model's trials distinct from each other and from the initial ones."""
    client = make_client(initialization_budget=4, strategy=strategy)
    configure_ray(client, make_evaluate(), num_workers=WORKERS)
    run_trials(client, max_trials=8, parallelism=WORKERS)
    trials = client._experiment.trials
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(8))}
    assert data_rows_per_trial(client) == dict.fromkeys(range(8), 1)
    nodes = [t.generator_runs[0]._generation_node_name for t in trials.values()]
    assert nodes[:4] == ["Sobol"] * 4 and "Sobol" not in nodes[4:]
    arms = {tuple(sorted(t.arm.parameters.items())) for t in trials.values()}
    assert len(arms) == 8


def library_rows(parameters: list[dict], library: torch.Tensor) -> torch.Tensor:
    """The library row nearest each point, and the distance to it (max norm)."""
    points = torch.tensor([[p["x1"], p["x2"]] for p in parameters])
    return (points[:, None, :] - library[None, :, :]).abs().amax(-1).min(-1)


def test_run_trials_fills_workers_from_a_library(monkeypatch):
    """A finite library under ``run_trials``: each refill one engine batch, every
    trial once, the model's trials distinct library rows."""
    library = torch.rand(30, 2, generator=torch.Generator().manual_seed(1))
    client = make_client(initialization_budget=4, candidate_set=library)
    sizes = []
    original = BBKBLibraryGenerator.gen

    def gen(self, n, *args, **kw):
        result = original(self, n, *args, **kw)
        sizes.append(len(result.points))
        return result

    monkeypatch.setattr(BBKBLibraryGenerator, "gen", gen)
    configure_ray(client, make_evaluate(), num_workers=WORKERS)
    run_trials(client, max_trials=10, parallelism=WORKERS)
    trials = client._experiment.trials
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(10))}
    model = [
        t
        for t in trials.values()
        if t.generator_runs[0]._generation_node_name != "Sobol"
    ]
    assert len(model) == 6
    distance, rows = library_rows([t.arm.parameters for t in model], library)
    assert distance.max() < 1e-9  # library rows
    assert len(set(rows.tolist())) == 6  # none proposed twice
    # Refills were engine batches of several rows, not one call per trial.
    assert max(sizes) > 1 and len(sizes) < len(model)


def test_client_run_trials_runs_on_ray():
    client = make_client(initialization_budget=20)
    configure_ray(client, make_evaluate(), num_workers=2)
    client.run_trials(max_trials=3, parallelism=2)
    assert trials_by_status(client) == {TrialStatus.COMPLETED: [0, 1, 2]}
    assert data_rows_per_trial(client) == {0: 1, 1: 1, 2: 1}


def test_raising_and_nan_evaluations_fail_their_trial_and_the_run_continues():
    client = make_client(initialization_budget=20)  # Sobol only: fixed points
    configure_ray(
        client, make_evaluate(fail_below=0.2, nan_above=0.85), num_workers=WORKERS
    )
    run_trials(client, max_trials=12, parallelism=WORKERS)

    trials = client._experiment.trials
    assert len(trials) == 12
    raised = [i for i, t in trials.items() if t.arm.parameters["x1"] < 0.2]
    nans = [i for i, t in trials.items() if t.arm.parameters["x1"] > 0.85]
    assert raised and nans  # the Sobol points hit both faults
    failed = trials_by_status(client)[TrialStatus.FAILED]
    assert failed == sorted(raised + nans)
    for i in raised:
        assert "RuntimeError: boom" in trials[i].run_metadata[ERROR_KEY]
        assert "boom" in trials[i].status_reason
    for i in nans:
        assert "not finite" in trials[i].run_metadata[ERROR_KEY]
    completed = trials_by_status(client)[TrialStatus.COMPLETED]
    assert len(completed) == 12 - len(failed)
    assert sorted(data_rows_per_trial(client)) == completed


def test_killed_worker_fails_its_trial_once():
    client = make_client(initialization_budget=20)
    configure_ray(client, make_crashing_evaluate(crash_below=0.15), num_workers=2)
    run_trials(client, max_trials=8, parallelism=2)

    trials = client._experiment.trials
    assert len(trials) == 8
    crashed = [i for i, t in trials.items() if t.arm.parameters["x1"] < 0.15]
    assert crashed
    assert trials_by_status(client)[TrialStatus.FAILED] == crashed
    for i in crashed:
        assert "worker process died" in trials[i].run_metadata[ERROR_KEY]
    assert len(trials_by_status(client)[TrialStatus.COMPLETED]) == 8 - len(crashed)
    assert sorted(data_rows_per_trial(client)) == sorted(set(trials) - set(crashed))


def test_json_save_and_load_mid_run(tmp_path):
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(), num_workers=WORKERS)
    run_trials(client, max_trials=5, parallelism=WORKERS)
    # A trial "running elsewhere" at save: its task is unknown to this process.
    (orphan,) = client.get_next_trials(max_trials=1)
    client._experiment.trials[orphan].update_run_metadata({TASK_KEY: "f" * 56})
    path = tmp_path / "experiment.json"
    client.save_to_json_file(str(path))

    loaded = Client.load_from_json_file(str(path))
    assert isinstance(loaded._experiment.runner, RayRunner)
    assert loaded._experiment.trials[orphan].status == TrialStatus.RUNNING
    with pytest.raises(RuntimeError, match="configure_ray"):
        loaded._experiment.runner.run_trial(99, {"x1": 0.1, "x2": 0.1})
    configure_ray(loaded, make_evaluate(), num_workers=WORKERS)
    run_trials(loaded, max_trials=3, parallelism=WORKERS)

    trials = loaded._experiment.trials
    assert len(trials) == 5 + 1 + 3
    assert trials_by_status(loaded)[TrialStatus.FAILED] == [orphan]
    assert "unknown to this process" in trials[orphan].run_metadata[ERROR_KEY]
    completed = trials_by_status(loaded)[TrialStatus.COMPLETED]
    assert completed == [i for i in range(9) if i != orphan]
    assert data_rows_per_trial(loaded) == dict.fromkeys(completed, 1)


def test_metric_fetches_new_trials_without_ax_lookup_and_matches_ax(monkeypatch):
    client = make_client(initialization_budget=4)
    runner = configure_ray(client, make_evaluate(), num_workers=WORKERS, warm_up=False)
    run_trials(client, max_trials=3, parallelism=WORKERS)
    experiment = client._experiment
    metric = experiment.metrics["f"]
    assert isinstance(metric, RayMetric)
    # A trial that finished and is marked completed, its data not attached yet.
    (index,) = client.get_next_trials(max_trials=1)
    trial = experiment.trials[index]
    trial.update_run_metadata(runner.run_trial(index, trial.arm.parameters))
    while runner.poll_trial(index, trial.run_metadata) == TrialStatus.RUNNING:
        time.sleep(0.01)
    trial.mark_completed()
    trials = list(experiment.trials.values())

    def values(results):
        return {i: r["f"].unwrap().df["mean"].tolist() for i, r in results.items()}

    ax_results, ax_new = IMetric.fetch_data_prefer_lookup(
        metric, experiment=experiment, metrics=[metric], trials=trials
    )
    results, new = metric.fetch_data_prefer_lookup(
        experiment=experiment, metrics=[metric], trials=trials
    )
    assert new and ax_new
    assert values(results) == values(ax_results)
    # The row built directly is Ax's row, step and signature included; a trial
    # without an outcome is an Err, as Ax's.
    ours = metric.fetch_trial_data(trial).unwrap().full_df
    theirs = IMetric.fetch_trial_data(metric, trial).unwrap().full_df
    pd.testing.assert_frame_equal(ours, theirs)
    (orphan,) = client.get_next_trials(max_trials=1)
    assert metric.fetch_trial_data(experiment.trials[orphan]).is_err()
    assert sorted(results) == [0, 1, 2, index]

    # The new trial alone: no lookup of the experiment's data.
    def no_lookup(*args, **kwargs):
        raise AssertionError("looked up")

    monkeypatch.setattr(experiment, "lookup_data", no_lookup)
    results, new = metric.fetch_data_prefer_lookup(
        experiment=experiment, metrics=[metric], trials=[trial]
    )
    assert new and values(results) == {index: values(ax_results)[index]}


def node_of(trial) -> str:
    return trial.generator_runs[0]._generation_node_name


def test_lookahead_queues_trials_without_overrunning_the_sobol_budget():
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(sleep=0.05), num_workers=WORKERS)
    orchestrator = run_trials(client, max_trials=14, parallelism=WORKERS, lookahead=4)

    trials = client._experiment.trials
    assert len(trials) == 14
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(14))}
    assert data_rows_per_trial(client) == dict.fromkeys(range(14), 1)
    assert [node_of(t) for t in trials.values()].count("Sobol") == 4
    arms = {tuple(sorted(t.arm.parameters.items())) for t in trials.values()}
    assert len(arms) == 14  # queued and running trials were hallucinated
    calls = orchestrator.generation_calls
    assert sum(c.from_queue for c in calls) > 0
    # Fewer model calls than model trials: the queue served the rest.
    model_calls = [c for c in calls if c.generated > 0 and c.num_trials >= 4]
    assert len(model_calls) < 10
    assert orchestrator.queued <= 4


def test_lookahead_run_is_reproducible_and_saves_and_loads(tmp_path):
    def run() -> tuple[Client, list]:
        client = make_client(initialization_budget=3)
        configure_ray(client, make_evaluate(), num_workers=1)
        # One worker: the order of events, hence every draw, is fixed.
        orchestrator = run_trials(
            client,
            max_trials=8,
            parallelism=1,
            lookahead=2,
            generate_ahead=True,
            background=False,
        )
        return client, orchestrator.generation_calls

    (first, calls), (second, _) = run(), run()
    # Generated ahead while the worker was busy (no request pending).
    assert any(c.requested == 0 and c.generated > 0 for c in calls)
    params = [t.arm.parameters for t in first._experiment.trials.values()]
    assert params == [t.arm.parameters for t in second._experiment.trials.values()]
    path = tmp_path / "experiment.json"
    first.save_to_json_file(str(path))
    loaded = Client.load_from_json_file(str(path))
    configure_ray(loaded, make_evaluate(), num_workers=1)
    run_trials(loaded, max_trials=3, parallelism=1, lookahead=2)
    assert trials_by_status(loaded) == {TrialStatus.COMPLETED: list(range(11))}


def test_background_refill_serves_freed_workers_and_every_trial_completes_once():
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(sleep=0.05), num_workers=WORKERS)
    orchestrator = run_trials(
        client, max_trials=16, parallelism=WORKERS, lookahead=4, background=True
    )

    trials = client._experiment.trials
    assert len(trials) == 16
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(16))}
    assert data_rows_per_trial(client) == dict.fromkeys(range(16), 1)
    arms = {tuple(sorted(t.arm.parameters.items())) for t in trials.values()}
    assert len(arms) == 16  # queued (snapshot) and running trials hallucinated
    calls = orchestrator.generation_calls
    assert any(c.background and c.generated > 0 for c in calls)
    assert sum(c.from_queue for c in calls) > 0
    # The refill thread is gone and the strategy points at the experiment again.
    assert orchestrator._worker is None
    assert client._generation_strategy.experiment is client._experiment


def test_thread_refills_take_over_the_previous_snapshots_extraction(monkeypatch):
    r"""Each refill's snapshot starts from the previous one's extraction of the
    settled trials (the prefix adopted, then extended), and the run's trials
    are as without it."""
    monkeypatch.setattr(experiment_data, "MIN_TRIALS", 0)
    adopted: list[tuple[bool, int]] = []

    def spy(source, target):
        ok = experiment_data.adopt_prefix(source, target)
        entry = experiment_data._PREFIXES.get(id(target))
        held = 0 if entry is None or entry[1] is None else len(entry[1].trials)
        adopted.append((ok, held))
        return ok

    monkeypatch.setattr(ray_module, "adopt_prefix", spy)
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(sleep=0.05), num_workers=WORKERS)
    run_trials(client, max_trials=20, parallelism=WORKERS, lookahead=4)
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(20))}
    assert len(adopted) >= 2
    assert any(ok and held >= 4 for ok, held in adopted[1:])


needs_fork = pytest.mark.skipif(
    not fork_available(), reason='background="process" needs the fork start method'
)


@needs_fork
@pytest.mark.parametrize("strategy", ["bbkb", "turbo-bkb"])
def test_process_refill_serves_freed_workers_and_continues_the_strategy(strategy):
    """Refills in a forked child: every trial once, distinct arms, the child's
    runs recorded in the parent's strategy (a trust region's state goes on)."""
    client = make_client(initialization_budget=4, strategy=strategy)
    configure_ray(client, make_evaluate(sleep=0.05), num_workers=WORKERS)
    orchestrator = run_trials(
        client, max_trials=16, parallelism=WORKERS, lookahead=4, background="process"
    )
    assert orchestrator.background_mode == "process"
    trials = client._experiment.trials
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(16))}
    assert data_rows_per_trial(client) == dict.fromkeys(range(16), 1)
    arms = {tuple(sorted(t.arm.parameters.items())) for t in trials.values()}
    assert len(arms) == 16
    refills = [c for c in orchestrator.generation_calls if c.background]
    assert any(c.generated > 0 and c.cpu > 0 for c in refills)
    # Every trial's arm is in a run of the strategy's list (the child's runs are
    # recorded in the parent's strategy).
    runs = client._generation_strategy._generator_runs
    recorded = {arm.signature for run in runs for arm in run.arms}
    assert all(t.arm.signature in recorded for t in trials.values())
    if strategy == "turbo-bkb":
        last = runs[-1]._generator_state_after_gen["region_state"]
        assert last["num_seen"] > 4  # a refill's state, not the first call's
    assert orchestrator._worker is None
    assert client._generation_strategy.experiment is client._experiment


@pytest.mark.parametrize(
    "mode, fault",
    [
        ("thread", "raises"),
        pytest.param("process", "raises", marks=needs_fork),
        pytest.param("process", "dies", marks=needs_fork),
    ],
)
def test_a_failing_background_refill_is_reported_and_the_run_goes_on(
    monkeypatch, caplog, mode, fault
):
    """A refill that raises (in the thread, or in the child, which sends its
    error back) or whose child dies without a result (``os._exit``) is logged;
    the loop generates itself and every trial completes once."""
    import botorch_sketch.ax.ray as ray_module

    original = ray_module.gen_filled_batch
    parent = os.getpid()

    def faulty_in_background(*args, **kwargs):
        in_background = (
            os.getpid() != parent
            if mode == "process"
            else threading.current_thread() is not threading.main_thread()
        )
        if in_background:
            if fault == "dies":
                os._exit(3)
            raise RuntimeError("injected refill failure")
        return original(*args, **kwargs)

    monkeypatch.setattr(ray_module, "gen_filled_batch", faulty_in_background)
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(sleep=0.05), num_workers=WORKERS)
    with caplog.at_level(logging.WARNING, logger="botorch_sketch.ax.ray"):
        orchestrator = run_trials(
            client, max_trials=10, parallelism=WORKERS, lookahead=2, background=mode
        )
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(10))}
    expected = "injected refill failure" if fault == "raises" else "exit code 3"
    assert "Background generation failed" in caplog.text and expected in caplog.text
    assert all(c.generated == 0 for c in orchestrator.generation_calls if c.background)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"lookahead": -1}, ValueError),
        ({"lookahead": True}, TypeError),
        ({"max_queue_age": 0}, ValueError),
        ({"parallelism": 0}, ValueError),
        ({"background": 1}, TypeError),
        ({"background": "fork"}, ValueError),
        ({"pace_fill": 1.5}, ValueError),
        ({"pace_fill": True}, ValueError),
    ],
)
def test_run_trials_rejects_bad_queue_arguments(kwargs, error):
    client = make_client()
    configure_ray(client, make_evaluate(), num_workers=2)
    args = {"max_trials": 2, "parallelism": 2, **kwargs}
    with pytest.raises(error, match=next(iter(kwargs))):
        run_trials(client, **args)
    assert len(client._experiment.trials) == 0


def client_on_its_bbkb_node(
    seed: int, strategy: str = "bbkb", **options
) -> tuple[Client, int]:
    """Six completed trials and one running (its generation moved the strategy
    to its model's node); returns the client and the running trial's index."""
    client = make_client(initialization_budget=4, strategy=strategy, **options)
    rng = np.random.default_rng(seed)
    for _ in range(6):
        x = rng.random(2)
        index = client.attach_trial({"x1": float(x[0]), "x2": float(x[1])})
        client.complete_trial(index, {"f": float(((x - 0.4) ** 2).sum())})
    (running,) = client.get_next_trials(max_trials=1)
    return client, running


def test_gen_filled_batch_gives_one_batch_of_n_and_restores_the_strategy():
    client, running = client_on_its_bbkb_node(0)  # the running one: hallucinated
    strategy, experiment = client._generation_strategy, client._experiment
    assert trials_left_in_generating_node(strategy, experiment) is None
    spec = strategy._curr.generator_specs[0]
    options = dict(spec.generator_kwargs["acquisition_options"])

    runs = gen_filled_batch(strategy, experiment, n=5)

    assert len(runs) == 5 and all(len(run.arms) == 1 for run in runs)
    points = {run.arms[0].signature for run in runs}
    points.add(experiment.trials[running].arm.signature)
    assert len(points) == 6  # distinct, and none repeats the pending trial
    assert len(experiment.trials) == 7  # nothing added
    assert spec.generator_kwargs["acquisition_options"] == options
    assert options["min_batch_size"] == 1


def test_gen_filled_batch_gives_one_trust_region_batch_from_one_call(monkeypatch):
    """On "turbo-bkb": one generator call of n points (one region fit), split."""
    client, running = client_on_its_bbkb_node(2, strategy="turbo-bkb")
    strategy, experiment = client._generation_strategy, client._experiment
    calls = []
    original = TurboGenerator.gen

    def gen(self, n, *args, **kwargs):
        calls.append(n)
        return original(self, n, *args, **kwargs)

    monkeypatch.setattr(TurboGenerator, "gen", gen)
    runs = gen_filled_batch(strategy, experiment, n=6)

    assert calls == [6]
    assert len(runs) == 6 and all(len(run.arms) == 1 for run in runs)
    points = {run.arms[0].signature for run in runs}
    points.add(experiment.trials[running].arm.signature)
    assert len(points) == 7
    for run in runs:
        assert all(0.0 <= v <= 1.0 for v in run.arms[0].parameters.values())
    assert len(experiment.trials) == 7  # nothing added


def test_gen_filled_batch_gives_one_library_batch_from_one_call(monkeypatch):
    """On a finite library: one engine batch of exactly n new rows, split."""
    library = torch.rand(40, 2, generator=torch.Generator().manual_seed(0))
    client, running = client_on_its_bbkb_node(0, candidate_set=library)
    strategy, experiment = client._generation_strategy, client._experiment
    (spec,) = strategy._curr.generator_specs
    assert spec.generator_enum is SketchGenerators.BBKB_LIBRARY
    kwargs = dict(spec.generator_kwargs)
    calls = []
    original = BBKBLibraryGenerator.gen

    def gen(self, n, *args, **kw):
        calls.append((n, self.min_batch_size))
        return original(self, n, *args, **kw)

    monkeypatch.setattr(BBKBLibraryGenerator, "gen", gen)
    runs = gen_filled_batch(strategy, experiment, n=5)

    assert calls == [(5, 5)]  # one call, whose floor is the whole batch
    assert len(runs) == 5 and all(len(run.arms) == 1 for run in runs)
    parameters = [run.arms[0].parameters for run in runs]
    _, rows = library_rows(
        [*parameters, experiment.trials[running].arm.parameters], library
    )
    assert len(set(rows.tolist())) == 6  # distinct library rows, none the pending one
    assert len(experiment.trials) == 7  # nothing added
    assert spec.generator_kwargs == kwargs  # the floor restored
    # The next plain call has the strategy's own floor again.
    strategy.gen(experiment=experiment, n=3)
    assert calls[-1][1] == kwargs.get("min_batch_size", 1)


def test_gen_filled_batch_overrides_thompson_fill_for_the_call_only(monkeypatch):
    client, _ = client_on_its_bbkb_node(1)
    strategy, experiment = client._generation_strategy, client._experiment
    spec = strategy._curr.generator_specs[0]
    options = dict(spec.generator_kwargs["acquisition_options"])
    seen = []
    original = type(strategy).gen

    def gen(self, *args, **kwargs):
        seen.append(dict(spec.generator_kwargs["acquisition_options"]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(strategy), "gen", gen)
    assert len(gen_filled_batch(strategy, experiment, n=4, thompson_fill=1.0)) == 4
    assert seen[-1]["thompson_fill"] == 1.0 and seen[-1]["min_batch_size"] == 4
    assert options["thompson_fill"] == 0.5  # the strategy's own, restored
    assert spec.generator_kwargs["acquisition_options"] == options
    gen_filled_batch(strategy, experiment, n=2)
    assert seen[-1]["thompson_fill"] == 0.5
    with pytest.raises(ValueError, match="thompson_fill"):
        gen_filled_batch(strategy, experiment, n=2, thompson_fill=-0.1)
    assert len(seen) == 2 and len(experiment.trials) == 7


@pytest.mark.parametrize(
    "per_trial, durations, workers, ahead",
    [
        ([0.001] * 2, [1.0], 32, False),  # fewer calls than PACE_CALLS = 3
        ([0.001] * 3, [], 32, False),  # no evaluation finished yet
        ([0.005] * 3, [1.0, 1.0, 0.5], 32, True),  # 4 x 5 ms < 1 s / 32
        ([0.01] * 3, [1.0, 1.0, 0.5], 32, False),  # 4 x 10 ms > 1 s / 32
        ([0.01] * 3, [1.0, 1.0, 0.5], 8, True),  # 4 x 10 ms < 1 s / 8
        ([0.001, 0.001, 9.0], [1.0], 32, True),  # one slow refit
        ([0.001, 0.001, 0.001, 9.0, 9.0, 9.0], [1.0], 32, False),  # recent calls
    ],
)
def test_generation_ahead_compares_the_median_call_with_the_workers_pace(
    per_trial, durations, workers, ahead
):
    assert generation_ahead(per_trial, durations, workers) is ahead


def test_generation_ahead_rejects_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        generation_ahead([0.1] * 3, [1.0], 0)
    with pytest.raises(TypeError, match="calls"):
        generation_ahead([0.1] * 3, [1.0], 2, calls=2.5)
    with pytest.raises(ValueError, match="headroom"):
        generation_ahead([0.1] * 3, [1.0], 2, headroom=0.5)


def _record_fills(monkeypatch) -> list:
    fills = []
    original = ray_module.gen_filled_batch

    def record(*args, **kwargs):
        fills.append(kwargs.get("thompson_fill"))
        return original(*args, **kwargs)

    monkeypatch.setattr(ray_module, "gen_filled_batch", record)
    return fills


@pytest.mark.parametrize("pace_fill", [1.0, None])
def test_run_trials_fills_with_thompson_samples_with_many_workers(
    monkeypatch, pace_fill
):
    """``PACE_FILL_WORKERS`` lowered to 3: every BBKB call gets ``pace_fill``
    (10 ms evaluations: generation is never well ahead); with ``None`` none."""
    fills = _record_fills(monkeypatch)
    monkeypatch.setattr(ray_module, "PACE_FILL_WORKERS", WORKERS)
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(sleep=0.01), num_workers=WORKERS)
    orchestrator = run_trials(
        client, max_trials=24, parallelism=WORKERS, pace_fill=pace_fill
    )
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(24))}
    assert len(fills) > 1 and orchestrator.pace_fill_until is None
    assert set(fills) == {pace_fill}
    assert orchestrator.pacing is (pace_fill is not None)


def test_run_trials_gives_the_strategy_its_fill_back_when_generation_is_ahead(
    monkeypatch,
):
    """Evaluations that take long against the generation (faked here): after
    ``PACE_CALLS`` calls the strategy's own fill; with fewer workers than
    ``PACE_FILL_WORKERS``, the strategy's own throughout."""
    fills = _record_fills(monkeypatch)
    monkeypatch.setattr(LookaheadOrchestrator, "_recent_durations", lambda s: [3600.0])
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(sleep=0.01), num_workers=WORKERS)
    orchestrator = run_trials(
        client, max_trials=30, parallelism=WORKERS, lookahead=WORKERS
    )
    assert set(fills) == {None} and orchestrator.pace_fill_until is None
    assert not orchestrator.pacing and not orchestrator._seconds_per_trial

    monkeypatch.setattr(ray_module, "PACE_FILL_WORKERS", WORKERS)
    fills.clear()
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(sleep=0.01), num_workers=WORKERS)
    orchestrator = run_trials(
        client, max_trials=30, parallelism=WORKERS, lookahead=WORKERS
    )
    calls = ray_module.PACE_CALLS
    assert fills[:calls] == [1.0] * calls and fills[-1] is None
    assert 4 < orchestrator.pace_fill_until < 30 and not orchestrator.pacing
    assert len(orchestrator._seconds_per_trial) == calls
    with pytest.raises(ValueError, match="pace_fill"):
        LookaheadOrchestrator(
            experiment=client._experiment,
            generation_strategy=client._generation_strategy_or_choose(),
            options=OrchestratorOptions(max_pending_trials=WORKERS),
            pace_fill=2.0,
        )


def test_snapshot_is_independent_of_the_experiment_and_shares_its_runs():
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(), num_workers=WORKERS)
    run_trials(client, max_trials=4, parallelism=WORKERS, lookahead=0)
    experiment = client._experiment
    running = experiment.new_trial(
        generator_run=next(iter(experiment.trials.values())).generator_runs[0].clone()
    )
    running.mark_running(no_runner_required=True)
    orchestrator = LookaheadOrchestrator(
        experiment=experiment,
        generation_strategy=client._generation_strategy,
        options=OrchestratorOptions(max_pending_trials=WORKERS),
        lookahead=2,
        background=True,
    )
    snapshot = orchestrator._snapshot()

    assert snapshot is not experiment
    assert {i: t.status for i, t in snapshot.trials.items()} == {
        i: t.status for i, t in experiment.trials.items()
    }
    for index, trial in snapshot.trials.items():
        original = experiment.trials[index]
        assert trial is not original and trial.experiment is snapshot
        assert trial.generator_runs[0] is original.generator_runs[0]  # shared
        assert trial.run_metadata == original.run_metadata
        assert trial.run_metadata is not original.run_metadata
    assert snapshot.lookup_data().df.equals(experiment.lookup_data().df)
    # Changing the experiment afterwards leaves the snapshot as it was.
    running.mark_completed()
    running.update_run_metadata({"late": 1})
    assert snapshot.trials[running.index].status == TrialStatus.RUNNING
    assert "late" not in snapshot.trials[running.index].run_metadata
    assert running.index in snapshot.running_trial_indices
    assert running.index not in experiment.running_trial_indices
    # A trial added to the snapshot (a queued run) stays out of the experiment.
    snapshot.new_trial(generator_run=running.generator_runs[0].clone())
    assert len(snapshot.trials) == len(experiment.trials) + 1


@pytest.mark.parametrize(
    ("demand", "parallelism", "lookahead", "expected"),
    [
        (0, 8, 16, 8),  # refills keep up: one per worker
        (3, 8, 16, 8),
        (5, 8, 16, 10),  # twice the demand met during the last refill
        (20, 8, 16, 16),  # never past the lookahead
        (20, 8, 4, 4),  # a lookahead below k bounds it too
        (-1, 3, 6, 3),
    ],
)
def test_refill_size_follows_the_demand(demand, parallelism, lookahead, expected):
    assert refill_size(demand, parallelism, lookahead) == expected


def test_refill_size_grows_when_workers_wait(monkeypatch):
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(sleep=0.01), num_workers=WORKERS)
    sizes = []
    original = LookaheadOrchestrator._start_background

    def record(self):
        original(self)
        if self._worker is not None:
            sizes.append(self._refill_size)

    monkeypatch.setattr(LookaheadOrchestrator, "_start_background", record)
    orchestrator = run_trials(
        client, max_trials=24, parallelism=WORKERS, lookahead=4 * WORKERS
    )
    assert len(client._experiment.trials) == 24
    assert trials_by_status(client) == {TrialStatus.COMPLETED: list(range(24))}
    refills = [c for c in orchestrator.generation_calls if c.background]
    assert refills and sizes[0] is None  # the first refill: k runs
    # Each call records the queue's length when it began.
    assert all(c.queued >= 0 for c in orchestrator.generation_calls)
    assert refills[0].queued < WORKERS
    assert refills[0].generated == WORKERS
    # 10 ms evaluations finish while a refill runs: the next ones are larger.
    assert max(c.generated for c in refills) > WORKERS
    assert all(c.generated <= 4 * WORKERS for c in refills)


class _FinishedRefill:
    """A refill that has ended: what ``_finish_background`` reads of one."""

    def __init__(self, demand: int) -> None:
        self.demand, self.runs, self.recorded, self.error = demand, [], [], None
        self.completed = self.num_trials = 0
        self.wall = self.cpu = 0.0
        self.queued = 5

    def done(self) -> bool:
        return True

    def wait(self) -> None:
        return None


def test_queue_target_lasts_through_the_slowest_refill(monkeypatch):
    client = make_client(initialization_budget=4)
    configure_ray(client, make_evaluate(), num_workers=WORKERS)
    k, lookahead = WORKERS, 8 * WORKERS
    orchestrator = LookaheadOrchestrator(
        experiment=client._experiment,
        generation_strategy=client._generation_strategy_or_choose(),
        options=OrchestratorOptions(max_pending_trials=k),
        lookahead=lookahead,
        background=True,
    )
    started = []
    monkeypatch.setattr(ray_module, "trials_left_in_generating_node", lambda *a: None)
    monkeypatch.setattr(LookaheadOrchestrator, "_snapshot", lambda self: None)
    monkeypatch.setattr(
        ray_module._BackgroundGeneration,
        "start",
        lambda self: started.append(len(orchestrator._queue)),
    )
    orchestrator._num_remaining_requested_trials = 100

    def refill_ends(requested_during_it: int) -> None:
        orchestrator._worker = _FinishedRefill(demand=orchestrator._demand)
        orchestrator._demand += requested_during_it
        orchestrator._finish_background(wait=True)

    def queue_at(level: int) -> bool:
        orchestrator._queue = deque([(None, 0)] * level)
        orchestrator._worker, count = None, len(started)
        orchestrator._start_background()
        return len(started) > count

    # Before any refill: the queue's target is k.
    assert queue_at(k - 1) and not queue_at(k)
    # A slow refill (a refit) saw 10 requests, then quick ones saw 1 each: the
    # refills shrink back to k, but the queue keeps 2 x 10 runs in hand.
    refill_ends(10)
    assert orchestrator._refill_size == orchestrator.queue_target == 20
    refill_ends(1)
    assert orchestrator._refill_size == k and orchestrator.queue_target == 20
    assert queue_at(19) and not queue_at(20)
    assert [c.queued for c in orchestrator.generation_calls] == [5, 5]
    # The target never passes the lookahead.
    refill_ends(100)
    assert orchestrator.queue_target == lookahead
    assert queue_at(lookahead - 1) and not queue_at(lookahead)


def test_background_mode_names_the_refill(monkeypatch):
    import botorch_sketch.ax.ray as ray_module

    assert background_mode(True) == "thread" and background_mode("thread") == "thread"
    assert background_mode(False) is None and background_mode(None) is None
    monkeypatch.setattr(ray_module, "fork_available", lambda: False)
    with pytest.raises(ValueError, match='use background="thread"'):
        background_mode("process")
    for bad in (1, 0.5, ["process"]):
        with pytest.raises(TypeError, match="background must be a bool"):
            background_mode(bad)
