"""Noisy Hartmann6 on an ``ax.Client``: the set-up shared by the Ax-level scripts.

``bench_ax_scaling.py`` (time per generation call at N observed trials) and
``bench_ax_long_run.py`` (a 5,000-trial run) both minimise Hartmann6 on
``[0, 1]^6`` observed with Gaussian noise of a given sd, through ``ax.Client``.
This module builds those clients and strategies and evaluates trials: every noise
draw is seeded by the trial index, so a point's observation does not depend on the
order in which methods or calls run.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pandas as pd
import torch
from ax import Client, RangeParameterConfig
from ax.core.arm import Arm
from ax.core.data import Data
from ax.core.generator_run import GeneratorRun
from botorch.test_functions import Hartmann

from botorch_sketch.ax import get_generation_strategy, get_next_batch

METRIC = "hartmann6"
DIM = 6
OPTIMUM = -3.32237
AX_DEFAULT = "ax-default"
_F = Hartmann(dim=DIM)  # noiseless; minimised


def quiet() -> None:
    """Silence Ax's per-trial INFO logs and library warnings (progress is printed)."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)


def new_client(seed: int = 0) -> Client:
    """A configured client: 6 float parameters in [0, 1], minimise ``hartmann6``."""
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=(0, 1))
            for i in range(DIM)
        ]
    )
    client.configure_optimization(objective=f"-{METRIC}")
    return client


def set_strategy(client: Client, method: str, **options: Any) -> None:
    """Our strategy ``method`` (seed 0) or Ax's default (``AX_DEFAULT``)."""
    if method == AX_DEFAULT:
        client.configure_generation_strategy()
    else:
        client.set_generation_strategy(get_generation_strategy(method, **options))


def to_tensor(parameters: dict[str, float]) -> torch.Tensor:
    """One parameterization as a ``1 x 6`` float64 tensor."""
    return torch.tensor(
        [[parameters[f"x{i}"] for i in range(DIM)]], dtype=torch.float64
    )


def true_value(x: torch.Tensor) -> float:
    """Noiseless Hartmann6 at ``x`` (``1 x 6``)."""
    return float(_F(x))


def observe(x: torch.Tensor, index: int, noise_sd: float, seed: int = 0) -> float:
    """Noisy observation of trial ``index`` (noise seeded by ``seed`` and ``index``)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
    return true_value(x) + noise_sd * float(torch.randn(1, generator=gen))


def uniform_points(n: int, seed: int = 0) -> torch.Tensor:
    """``n x 6`` seeded uniform points (the same prefix for every ``n``)."""
    return torch.rand(
        n, DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)
    )


def attach_uniform(client: Client, X: torch.Tensor, noise_sd: float) -> None:
    """One completed trial per row of ``X``, as ``client.attach_trial`` +
    ``complete_trial`` would make them (same arms, statuses and data), through the
    ``Experiment`` API with one ``attach_data`` call: 2.8 s instead of minutes at
    N = 8,000 (each ``Client.complete_trial`` costs more as trials accumulate).
    """
    experiment = client._experiment
    rows, trials = [], []
    for x in X:
        params = {f"x{i}": float(x[i]) for i in range(DIM)}
        trial = experiment.new_trial(GeneratorRun(arms=[Arm(parameters=params)]))
        trial.mark_running(no_runner_required=True)
        trials.append(trial)
        rows.append(
            {
                "trial_index": trial.index,
                "arm_name": trial.arm.name,
                "metric_name": METRIC,
                "metric_signature": METRIC,
                "mean": observe(x[None], trial.index, noise_sd),
                "sem": float("nan"),
            }
        )
    experiment.attach_data(Data(df=pd.DataFrame(rows)))
    for trial in trials:
        trial.mark_completed()


def next_trials(client: Client, max_batch_size: int | None) -> dict[int, dict]:
    """One generation call: ``get_next_batch(client, max_batch_size)``, or
    ``client.get_next_trials(1)`` when ``max_batch_size`` is ``None``."""
    if max_batch_size is None:
        return client.get_next_trials(max_trials=1)
    return get_next_batch(client, max_batch_size=max_batch_size)


def complete(
    client: Client, trials: dict[int, dict], noise_sd: float, seed: int = 0
) -> list[tuple[int, float]]:
    """Evaluate and complete ``trials`` (noise seeded by ``seed`` and the trial
    index, :func:`observe`); returns ``(index, true value)`` per trial."""
    out = []
    for index, params in trials.items():
        x = to_tensor(params)
        y = observe(x, index, noise_sd, seed=seed)
        client.complete_trial(index, raw_data={METRIC: y})
        out.append((index, true_value(x)))
    return out


def node_of(client: Client, index: int) -> str:
    """Name of the generation node that produced trial ``index``."""
    run = client._experiment.trials[index].generator_runs[0]
    return str(run._generation_node_name)


def model_details(client: Client) -> dict[str, Any]:
    """The fitted model's class and, for ``NystromGP``, its dictionary."""
    try:
        model = client._generation_strategy.adapter.generator.surrogate.model
    except Exception:  # noqa: BLE001 - no fitted torch model (e.g. Sobol)
        return {"model": "-"}
    out: dict[str, Any] = {"model": type(model).__name__}
    if hasattr(model, "dictionary_size"):
        out["dictionary_size"] = model.dictionary_size
        out["dictionary_capped"] = bool(model.dictionary_capped)
    return out
