r"""Ax integration: named generation strategies, adaptive batch trials, storage.

Importing this module registers the package's classes with Ax's storage and
BoTorch's acquisition input constructors, so experiments using our strategies save
and load with ``ax.storage.json_store`` / ``Client.save_to_json_file``.

Example:
    >>> from ax import Client, RangeParameterConfig
    >>> from botorch_sketch.ax import get_generation_strategy
    >>> client = Client(random_seed=0)
    >>> client.configure_experiment(parameters=[...])
    >>> client.configure_optimization(objective="-branin")
    >>> client.set_generation_strategy(get_generation_strategy("bbkb"))
"""

from botorch_sketch.ax import fit, input_constructors  # noqa: F401  (registration)
from botorch_sketch.ax.acquisition import AdaptiveBatchAcquisition
from botorch_sketch.ax.completion import complete_trials
from botorch_sketch.ax.encoding import encode_library
from botorch_sketch.ax.library import BBKBLibraryGenerator
from botorch_sketch.ax.ray import configure_ray
from botorch_sketch.ax.storage import register_with_ax, save_experiment
from botorch_sketch.ax.strategies import (
    get_generation_strategy,
    list_generation_strategies,
    strategy_options,
)
from botorch_sketch.ax.trials import get_next_batch, new_adaptive_batch_trial

register_with_ax()

__all__ = [
    "AdaptiveBatchAcquisition",
    "BBKBLibraryGenerator",
    "complete_trials",
    "configure_ray",
    "encode_library",
    "get_generation_strategy",
    "get_next_batch",
    "list_generation_strategies",
    "new_adaptive_batch_trial",
    "register_with_ax",
    "save_experiment",
    "strategy_options",
]
