"""SketchBoTorchGenerator: NystromGP's sketch state carried between Ax calls."""

from __future__ import annotations

import inspect
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ax import Client, RangeParameterConfig
from ax.adapter.registry import Generators
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from botorch.acquisition.monte_carlo import qUpperConfidenceBound
from linear_operator.utils.errors import NotPSDError

import botorch_sketch.ax  # noqa: F401  (registers the generator enum)
from botorch_sketch.ax.generator import (
    SketchBoTorchGenerator,
    SketchGenerators,
    clear_fit_cache,
)
from botorch_sketch.models import NystromGP
from botorch_sketch.models.nystrom_fit import SketchState
from botorch_sketch.models.sketch_state import tensors_from_json
from tests.ax.helpers import FAST, make_client, run_trials, same_numeric_environment

REPO_ROOT = Path(__file__).resolve().parents[2]
N_INIT = 6


def strategy() -> GenerationStrategy:
    """Sobol, then NystromGP + qUCB through the sketch generator."""
    surrogate = SurrogateSpec(
        model_configs=[
            ModelConfig(
                botorch_model_class=NystromGP,
                model_options={"seed": 0, "exact_max_n": 0, "max_dictionary_size": 6},
            )
        ]
    )
    return GenerationStrategy(
        name="Sobol+sketch",
        nodes=[
            GenerationNode(
                name="Sobol",
                generator_specs=[
                    GeneratorSpec(Generators.SOBOL, generator_kwargs={"seed": 0})
                ],
                transition_criteria=[
                    MinTrials(threshold=N_INIT, transition_to="Sketch")
                ],
            ),
            GenerationNode(
                name="Sketch",
                generator_specs=[
                    GeneratorSpec(
                        SketchGenerators.BOTORCH_SKETCH,
                        generator_kwargs={
                            "surrogate_spec": surrogate,
                            "botorch_acqf_class": qUpperConfidenceBound,
                            "warm_start_refit": False,
                            "seed": 0,
                        },
                        generator_gen_kwargs={
                            "model_gen_options": {"optimizer_kwargs": FAST}
                        },
                    )
                ],
            ),
        ],
    )


def client() -> Client:
    c = Client(random_seed=0)
    c.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=(0, 1))
            for i in range(2)
        ]
    )
    c.configure_optimization(objective="f")
    c.set_generation_strategy(strategy())
    return c


def run(c: Client, total: int) -> None:
    while len(c._experiment.trials) < total:
        for index, p in c.get_next_trials(max_trials=1).items():
            x = torch.tensor([p["x0"], p["x1"]])
            value = float(torch.sin(6 * x).sum())
            c.complete_trial(index, raw_data={"f": round(8 * value) / 8})


def test_state_is_stored_and_passed_back_as_warm_start(monkeypatch):
    received = _spy_fits(monkeypatch, lambda model: model.warm_start)
    c = client()
    run(c, N_INIT + 3)
    # The first model-based call starts cold, every later one from the state
    # the previous call left in its generator run.
    assert received[0] is None
    assert len(received) >= 3
    assert all(isinstance(w, SketchState) for w in received[1:])
    runs = [gr for gr in c._generation_strategy._generator_runs if gr._generator_key]
    last = runs[-1]
    assert last._generator_key == "BoTorchSketch"
    state = SketchState.from_dict(last._generator_state_after_gen["sketch_state"])
    assert state.dictionary_rows.numel() <= 6
    # Not also stored among the generator's kwargs of the run (kept once).
    assert "sketch_state" not in (last._generator_kwargs or {})
    generator = c._generation_strategy.adapter.generator
    assert isinstance(generator, SketchBoTorchGenerator)
    # The strategy's stored model options never carry the state.
    config = generator.surrogate_spec.model_configs[0]
    assert "warm_start" not in config.model_options


CONTINUE = """
import json, sys
from ax import Client
import botorch_sketch.ax
from tests.ax.test_generator import run
c = Client.load_from_json_file(sys.argv[1])  # unseeded: the generator seeds itself
run(c, int(sys.argv[2]))
print(json.dumps([t.arm.parameters for t in c._experiment.trials.values()]))
"""


def test_reloaded_run_continues_from_the_same_state(tmp_path):
    # The reference is the saved client continued in this process (saving only
    # reads the experiment): the run that was never interrupted.
    uninterrupted = client()
    run(uninterrupted, N_INIT + 2)
    path = tmp_path / "experiment.json"
    uninterrupted.save_to_json_file(str(path))
    result = subprocess.run(
        [sys.executable, "-c", CONTINUE, str(path), str(N_INIT + 5)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=same_numeric_environment(),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    arms = json.loads(result.stdout.strip().splitlines()[-1])
    run(uninterrupted, N_INIT + 5)
    assert arms == [t.arm.parameters for t in uninterrupted._experiment.trials.values()]


def _corrupt(c: Client, how: str) -> None:
    runs = [gr for gr in c._generation_strategy._generator_runs if gr._generator_key]
    state = runs[-1]._generator_state_after_gen["sketch_state"]
    if how == "nan_hyperparameters":
        for name, entry in state["hyperparameters"].items():
            if "_constraint." not in name:
                entry["values"] = [float("nan")] * len(entry["values"])
    else:  # dictionary rows beyond the data
        state["dictionary_rows"] = list(range(1000, 1004))


@pytest.mark.parametrize(
    "how", ["nan_hyperparameters", "rows_out_of_bounds", "failing_warm_fit"]
)
def test_a_corrupt_saved_state_is_discarded_and_refitted(
    monkeypatch, tmp_path, caplog, how
):
    c = client()
    run(c, N_INIT + 2)
    if how != "failing_warm_fit":
        _corrupt(c, how)
    path = tmp_path / "experiment.json"
    c.save_to_json_file(str(path))
    loaded = Client.load_from_json_file(str(path))
    if how == "failing_warm_fit":  # a state the checks pass, whose warm fit fails
        original_init = NystromGP.__init__

        def failing_warm_init(self, *args, warm_start=None, **kwargs):
            if warm_start is not None:
                raise NotPSDError("injected failure of the warm-started fit")
            original_init(self, *args, **kwargs)

        # Ax reads the constructor's arguments (inspect.getfullargspec).
        failing_warm_init.__signature__ = inspect.signature(original_init)

        monkeypatch.setattr(NystromGP, "__init__", failing_warm_init)
    with caplog.at_level(logging.WARNING, logger="botorch_sketch.ax.generator"):
        run(loaded, N_INIT + 4)
    assert len(loaded._experiment.trials) == N_INIT + 4
    assert "discarded" in caplog.text
    generator = loaded._generation_strategy.adapter.generator
    state = SketchState.from_dict(generator.sketch_state)
    assert all(not v.isnan().any() for v in state.hyperparameters.values())


def _spy_fits(monkeypatch, record) -> list:
    """Patch NystromGP's fit to append ``record(model)`` at every fit."""
    import botorch_sketch.models.nystrom as nystrom

    seen: list = []
    original = nystrom.fit_nystrom_gp

    def spy(model, mll, fit_kwargs):
        seen.append(record(model))
        return original(model, mll, fit_kwargs)

    monkeypatch.setattr(nystrom, "fit_nystrom_gp", spy)
    return seen


def _count_fits(monkeypatch) -> list[int]:
    """Patch NystromGP's fit to record the training-set size of every fit."""
    return _spy_fits(monkeypatch, lambda model: model.num_training_points)


def request(c: Client) -> tuple[int, dict]:
    """One new trial, left running (a pending point for the next request)."""
    ((index, parameters),) = c.get_next_trials(max_trials=1).items()
    return index, parameters


def complete(c: Client, index: int, parameters: dict) -> None:
    x = torch.tensor([parameters["x0"], parameters["x1"]])
    c.complete_trial(index, raw_data={"f": float(torch.sin(6 * x).sum())})


def model_of(c: Client) -> NystromGP:
    return c._generation_strategy.adapter.generator.surrogate.model


def test_the_model_is_reused_while_only_pending_trials_change(monkeypatch):
    clear_fit_cache()
    fits = _count_fits(monkeypatch)
    c = client()
    run(c, N_INIT + 2)
    fits.clear()
    first = request(c)  # new data since the last fit: one fit
    assert fits == [N_INIT + 2]
    model = model_of(c)
    second = request(c)  # only a pending trial more: no fit, the same model
    assert fits == [N_INIT + 2]
    assert model_of(c) is model
    assert second[1] != first[1]  # the pending point is hallucinated
    generator = c._generation_strategy.adapter.generator
    assert generator.fit_record["data"]
    complete(c, *first)
    request(c)  # new completed data: fitted again
    assert fits == [N_INIT + 2, N_INIT + 3]
    assert model_of(c) is not model


def test_a_reused_model_gives_the_arms_of_a_refit_and_of_a_reload(
    monkeypatch, tmp_path
):
    clear_fit_cache()
    c = client()
    run(c, N_INIT + 2)
    request(c)
    path = tmp_path / "experiment.json"
    c.save_to_json_file(str(path))
    reused = request(c)[1]  # from the cache
    # A reloaded experiment (no cache: as in a new process) refits once, from
    # the state the recorded fit started from, and proposes the same arm.
    clear_fit_cache()
    fits = _count_fits(monkeypatch)
    loaded = Client.load_from_json_file(str(path))
    assert request(loaded)[1] == reused
    assert fits == [N_INIT + 2]
    runs = [gr for gr in loaded._generation_strategy._generator_runs]
    record = runs[-1]._generator_state_after_gen["fit_record"]
    assert set(record) == {"data", "start"}
    assert "fit_record" not in (runs[-1]._generator_kwargs or {})


def test_a_failing_generation_leaves_the_reused_model_unchanged(monkeypatch):
    clear_fit_cache()
    reference = client()
    run(reference, N_INIT + 2)
    request(reference)
    expected = request(reference)[1]
    c = client()
    run(c, N_INIT + 2)
    request(c)
    original = SketchBoTorchGenerator.gen

    def failing_gen(self, *args, **kwargs):
        raise RuntimeError("injected generation failure")

    monkeypatch.setattr(SketchBoTorchGenerator, "gen", failing_gen)
    with pytest.raises(RuntimeError, match="injected"):
        request(c)
    monkeypatch.setattr(SketchBoTorchGenerator, "gen", original)
    assert request(c)[1] == expected


def test_bad_fit_record_is_refused():
    with pytest.raises(ValueError, match="fit_record"):
        SketchBoTorchGenerator(fit_record={"data": 3})


def test_the_best_point_is_computed_once_per_reused_model(monkeypatch):
    """Ax asks for the in-sample best point after every generation: with the
    model reused (only pending trials changed) it is computed once and given
    again (the generator run's best arm is the computed point); new data (a new
    model) compute it anew."""
    from ax.generators.torch.botorch_modular.generator import BoTorchGenerator

    clear_fit_cache()
    calls = []
    original = BoTorchGenerator.best_point

    def counted(self, *args, **kwargs):
        best = original(self, *args, **kwargs)
        calls.append(None if best is None else best.clone())
        return best

    monkeypatch.setattr(BoTorchGenerator, "best_point", counted)
    c = client()
    run(c, N_INIT + 2)
    calls.clear()
    request(c)  # new data since the last generation: computed
    request(c)  # the same model: the kept answer
    request(c)
    assert len(calls) == 1
    run_best = c._generation_strategy._generator_runs[-1].best_arm_predictions
    assert run_best is not None
    kept = run_best[0].parameters
    assert [kept["x0"], kept["x1"]] == pytest.approx(calls[0].tolist())
    complete(c, *request(c))  # the same model, kept: no computation
    assert len(calls) == 1
    request(c)  # new data: a new model, computed anew
    assert len(calls) == 2


# -------------------------------------------------------------------------------
# GSSBO: the pilot carried between calls
# -------------------------------------------------------------------------------


def gssbo_client() -> Client:
    """GSSBO on Hartmann6 with a subset of 6 (a selection from 7 points on)."""
    return make_client("gssbo", "hartmann6", initialization_budget=4, subset_size=6)


def _spy_pilots(monkeypatch) -> list:
    """Record ``(pilot given, warm_start)`` at every ``GradientSubsetGP`` built."""
    import botorch_sketch.models.gssbo as gssbo

    seen: list = []
    original = gssbo.GradientSubsetGP.__init__

    def spy(self, *args, pilot=None, warm_start=False, **kwargs):
        seen.append((pilot is not None, warm_start))
        original(self, *args, pilot=pilot, warm_start=warm_start, **kwargs)

    spy.__signature__ = inspect.signature(original)  # Ax reads the signature
    monkeypatch.setattr(gssbo.GradientSubsetGP, "__init__", spy)
    return seen


def _last_pilot_state(c: Client) -> dict:
    runs = [gr for gr in c._generation_strategy._generator_runs if gr._generator_key]
    return runs[-1]._generator_state_after_gen["pilot_state"]


def test_gssbo_pilot_is_carried_to_the_next_call(monkeypatch):
    seen = _spy_pilots(monkeypatch)
    c = gssbo_client()
    run_trials(c, "hartmann6", total=10)
    # The first model call builds its own pilot; every later one gets the last
    # model's state as its pilot and starts its hyperparameters from it.
    assert seen[0] == (False, False)
    assert len(seen) >= 5 and all(s == (True, True) for s in seen[1:])
    state = _last_pilot_state(c)
    model = c._generation_strategy.adapter.generator.surrogate.model
    for name, tensor in tensors_from_json(state).items():
        torch.testing.assert_close(tensor, model.state_dict()[name].double())
    runs = [gr for gr in c._generation_strategy._generator_runs if gr._generator_key]
    assert "pilot_state" not in (runs[-1]._generator_kwargs or {})
    config = c._generation_strategy.adapter.generator.surrogate_spec.model_configs[0]
    assert "pilot" not in config.model_options  # the strategy's options unchanged


def test_gssbo_reloaded_run_continues_from_the_same_pilot(tmp_path):
    uninterrupted = gssbo_client()
    run_trials(uninterrupted, "hartmann6", total=9, json_exact=True)
    path = tmp_path / "experiment.json"
    uninterrupted.save_to_json_file(str(path))
    torch.manual_seed(123)  # another global RNG state: the generator seeds itself
    loaded = Client.load_from_json_file(str(path))
    run_trials(loaded, "hartmann6", total=12, json_exact=True)
    run_trials(uninterrupted, "hartmann6", total=12, json_exact=True)
    arms = [t.arm.parameters for t in uninterrupted._experiment.trials.values()]
    assert [t.arm.parameters for t in loaded._experiment.trials.values()] == arms


@pytest.mark.parametrize("how", ["nan", "wrong_shape", "unreadable"])
def test_gssbo_unusable_pilot_is_discarded(monkeypatch, tmp_path, caplog, how):
    c = gssbo_client()
    run_trials(c, "hartmann6", total=9)
    state = _last_pilot_state(c)
    key = next(k for k in state if "lengthscale" in k)
    if how == "nan":
        state[key]["values"] = [float("nan")] * len(state[key]["values"])
    elif how == "wrong_shape":  # parses, but does not fit the model's modules
        state[key] = {"shape": [1, 2], "values": [0.5, 0.5]}
    else:
        state[key] = {"values": "not a tensor"}
    path = tmp_path / "experiment.json"
    c.save_to_json_file(str(path))
    loaded = Client.load_from_json_file(str(path))
    seen = _spy_pilots(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="botorch_sketch.ax.generator"):
        run_trials(loaded, "hartmann6", total=11)
    assert len(loaded._experiment.trials) == 11
    assert "GSSBO pilot discarded" in caplog.text
    assert seen[-1] == (True, True)  # the next call carries the new model's
    carried = tensors_from_json(_last_pilot_state(loaded))
    # every number finite (a constraint's bound may be infinite)
    assert all(
        torch.isfinite(v).all() for k, v in carried.items() if "_constraint." not in k
    )


def test_bad_pilot_state_is_refused():
    with pytest.raises(ValueError, match="pilot_state"):
        SketchBoTorchGenerator(pilot_state=[1.0])
