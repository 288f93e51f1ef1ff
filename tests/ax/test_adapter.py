"""The package's adapter: Ax's TorchAdapter with the incremental extraction."""

from __future__ import annotations

import ax.adapter.base as ax_adapter_base
import pytest
from ax.adapter.torch import TorchAdapter

from botorch_sketch.ax import complete_trials
from botorch_sketch.ax import experiment_data as module
from botorch_sketch.ax.adapter import SketchTorchAdapter
from botorch_sketch.ax.experiment_data import incremental_experiment_data
from tests.ax.helpers import evaluate, make_client

AX_FUNCTION = ax_adapter_base.extract_experiment_data


@pytest.mark.parametrize("name", ["turbo-bkb", "bbkb"])
def test_our_adapters_extract_incrementally_on_axs_own_calls(monkeypatch, name):
    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return incremental_experiment_data(*args, **kwargs)

    monkeypatch.setattr(module, "incremental_experiment_data", spy)
    client = make_client(name, initialization_budget=4)
    trials = client.get_next_trials(max_trials=4)
    complete_trials(client, {i: evaluate("branin", p) for i, p in trials.items()})
    assert not calls  # Sobol's adapter is Ax's
    trials = client.get_next_trials(max_trials=2)  # Ax's own generation path
    assert len(trials) == 2 and calls
    adapter = client._generation_strategy.adapter
    assert isinstance(adapter, SketchTorchAdapter)
    assert isinstance(adapter, TorchAdapter)
    assert ax_adapter_base.extract_experiment_data is AX_FUNCTION
    # Ax's refit of an existing adapter (GeneratorSpec.fit) extracts through it too.
    calls.clear()
    adapter._process_and_transform_data(experiment=client._experiment)
    assert calls
    assert ax_adapter_base.extract_experiment_data is AX_FUNCTION
