r"""The adapter of the package's Ax generators: Ax's ``TorchAdapter``, whose
training data is extracted incrementally.

Ax builds a new adapter at every generation call of a model-based node, and the
adapter starts by extracting every trial's arm and data
(``extract_experiment_data``), ``O(N)`` Python work per call for ``N`` trials.
:class:`SketchTorchAdapter` is ``TorchAdapter`` with that extraction replaced,
while it runs, by
:func:`~botorch_sketch.ax.experiment_data.incremental_experiment_data` (the same
``ExperimentData``, reusing the previous call's extraction of the settled
trials), whichever way the generation was asked for: ``Client.get_next_trials``,
``get_next_batch``, Ax's orchestrator. It is a ``TorchAdapter`` for everything
else (Ax's analyses and best-point utilities check for one).
"""

from __future__ import annotations

from inspect import signature
from typing import Any

from ax.adapter.torch import TorchAdapter
from ax.core.data import Data
from ax.core.data_utils import ExperimentData
from ax.core.experiment import Experiment
from ax.core.search_space import SearchSpace

from botorch_sketch.ax.experiment_data import fast_experiment_data

__all__ = ["SketchTorchAdapter"]


class SketchTorchAdapter(TorchAdapter):
    r"""``TorchAdapter`` with the incremental training-data extraction."""

    def __init__(self, **kwargs: Any) -> None:
        with fast_experiment_data():
            super().__init__(**kwargs)

    # Ax's registry checks the keyword arguments against this signature.
    __init__.__signature__ = signature(TorchAdapter.__init__)  # type: ignore[attr-defined]

    def _process_and_transform_data(
        self, experiment: Experiment, data: Data | None = None
    ) -> tuple[ExperimentData, SearchSpace]:
        with fast_experiment_data():
            return super()._process_and_transform_data(experiment=experiment, data=data)
