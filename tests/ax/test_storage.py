"""JSON storage: save mid-run, load in a fresh process, continue identically."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ax import Client
from ax.storage.botorch_modular_registry import MODEL_REGISTRY

from botorch_sketch.ax import (
    get_next_batch,
    list_generation_strategies,
    register_with_ax,
)
from botorch_sketch.models import NystromGP
from tests.ax.helpers import (
    evaluate,
    fast,
    make_client,
    run_trials,
    same_numeric_environment,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

CONTINUE_SCRIPT = """
import json, random, sys
import numpy as np
import torch
from ax import Client
import botorch_sketch.ax  # registers our classes with Ax's storage
from tests.ax.helpers import run_trials
out = {}
for name, path, seed in json.loads(sys.argv[1]):
    # Whatever the global RNG state of the new process, the run must continue
    # alike: a different one for every strategy.
    torch.manual_seed(seed)
    np.random.seed(seed + 1)
    random.seed(seed + 2)
    client = Client.load_from_json_file(path)
    run_trials(client, "branin", total=int(sys.argv[2]), json_exact=True)
    arms = [t.arm.parameters for t in client._experiment.trials.values()]
    out[name] = {"arms": arms, "strategy": client._generation_strategy.name}
print(json.dumps(out))
"""


def arms_of(client: Client) -> list[dict]:
    return [t.arm.parameters for t in client._experiment.trials.values()]


def test_save_load_in_new_process_continues_like_uninterrupted_run(tmp_path):
    """Every registered strategy, saved after 8 trials and continued to 12 in a
    fresh process (one process for all of them: importing Ax takes seconds),
    proposes exactly the arms of the run that was never interrupted: the saved
    client itself, continued in this process (saving only reads the experiment,
    and its first 8 trials are the reference's)."""
    names = sorted(list_generation_strategies())
    jobs, saved = [], {}
    for name in names:
        saved[name] = make_client(name, **fast(name))
        run_trials(saved[name], "branin", total=8, json_exact=True)
        path = tmp_path / f"{name}.json"
        saved[name].save_to_json_file(str(path))
        jobs.append((name, str(path), sum(map(ord, name))))
    result = subprocess.run(
        [sys.executable, "-c", CONTINUE_SCRIPT, json.dumps(jobs), "12"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=same_numeric_environment(),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    continued = json.loads(result.stdout.strip().splitlines()[-1])
    assert sorted(continued) == names
    differ = []
    for name in names:
        uninterrupted = saved[name]
        run_trials(uninterrupted, "branin", total=12, json_exact=True)
        if continued[name]["strategy"] != uninterrupted._generation_strategy.name:
            differ.append(f"{name}: strategy {continued[name]['strategy']}")
        elif continued[name]["arms"] != arms_of(uninterrupted):
            differ.append(f"{name}: the continued run proposed other arms")
    assert not differ, "reloaded runs differ from uninterrupted ones: " + "; ".join(
        differ
    )


def test_registration_is_idempotent_and_covers_our_classes():
    register_with_ax()
    register_with_ax()
    assert MODEL_REGISTRY[NystromGP] == "NystromGP"


def test_reloaded_run_with_filled_batches_continues_alike(tmp_path):
    """k-point batches (greedy and Thompson-sampling fill) continue alike after a
    save and load, whatever the global random state."""

    def batches(client: Client, rounds: int) -> None:
        for _ in range(rounds):
            for index, p in get_next_batch(client, max_batch_size=5).items():
                client.complete_trial(index, raw_data=evaluate("branin", p, True))

    options = {"min_batch_size": 5, "thompson_fill": 1.0, "initialization_budget": 3}
    uninterrupted = make_client("bbkb", **options)
    run_trials(uninterrupted, "branin", total=3, json_exact=True)
    batches(uninterrupted, 3)

    interrupted = make_client("bbkb", **options)
    run_trials(interrupted, "branin", total=3, json_exact=True)
    batches(interrupted, 2)
    path = tmp_path / "experiment.json"
    interrupted.save_to_json_file(str(path))
    torch.manual_seed(12345)
    loaded = Client.load_from_json_file(str(path))
    batches(loaded, 1)
    assert len(arms_of(loaded)) == 3 + 3 * 5
    assert arms_of(loaded) == arms_of(uninterrupted)


@pytest.mark.parametrize("where", ["serializer", "write"])
def test_an_interrupted_save_keeps_the_previous_snapshot(monkeypatch, tmp_path, where):
    from botorch_sketch.ax import save_experiment, storage

    client = make_client("bbkb", initialization_budget=2)
    run_trials(client, "branin", total=2)
    path = tmp_path / "run.json"
    save_experiment(client, path)
    previous = path.read_text()
    assert Client.load_from_json_file(str(path))._experiment.trials.keys() == {0, 1}
    run_trials(client, "branin", total=3)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "serializer":
        monkeypatch.setattr(client, "_to_json_snapshot", interrupt)
    else:  # after part of the file was written
        monkeypatch.setattr(storage.os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        save_experiment(client, path)
    assert path.read_text() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    monkeypatch.undo()
    save_experiment(client, str(path))
    assert len(Client.load_from_json_file(str(path))._experiment.trials) == 3


def test_save_experiment_checks_its_arguments(tmp_path):
    from botorch_sketch.ax import save_experiment

    client = make_client("bbkb")
    with pytest.raises(TypeError, match="client"):
        save_experiment(object(), tmp_path / "x.json")
    with pytest.raises(TypeError, match="path"):
        save_experiment(client, 3)
    with pytest.raises(ValueError, match="path's folder"):
        save_experiment(client, tmp_path / "missing" / "x.json")
    with pytest.raises(ValueError, match="is a folder"):
        save_experiment(client, tmp_path)
    assert list(tmp_path.iterdir()) == []
