"""Shared set-up for the Ax integration tests: small Client experiments."""

from __future__ import annotations

import logging
import os
import warnings

import torch
from ax import Client, RangeParameterConfig
from botorch.test_functions import Branin, Hartmann

from botorch_sketch.ax import get_generation_strategy

logging.getLogger("ax").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", module="ax")

#: Cheap acquisition optimisation for tests.
FAST = {"num_restarts": 2, "raw_samples": 64}


def same_numeric_environment() -> dict[str, str]:
    """The environment for a process that must continue a run bit for bit.

    A reloaded run continues identically only under the same floating-point
    kernels: this process's environment (BLAS kernel choice such as
    ``OPENBLAS_CORETYPE``, ``MKL_CBWR``, ``ATEN_CPU_CAPABILITY``) and its number
    of threads (one under ``make test``; a plain ``pytest`` has more, and a
    one-thread child then sums in another order). Only the global RNG state of
    the new process may differ.
    """
    threads = str(torch.get_num_threads())
    return {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}


def fast(name: str) -> dict:
    """Cheap options of strategy ``name`` for tests that check behaviour, not
    outcomes (GO-UCB: a shorter oracle, with which it no longer beats Sobol)."""
    return {**FAST, "oracle_steps": 300} if name == "goucb" else dict(FAST)


PROBLEMS = {
    "branin": (Branin(), [(-5.0, 10.0), (0.0, 15.0)]),
    "hartmann6": (Hartmann(dim=6), [(0.0, 1.0)] * 6),
}


def make_client(name: str, problem: str = "branin", **options) -> Client:
    """A Client minimising ``problem`` with strategy ``name``."""
    _, bounds = PROBLEMS[problem]
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=b)
            for i, b in enumerate(bounds)
        ]
    )
    client.configure_optimization(objective=f"-{problem}")
    client.set_generation_strategy(
        get_generation_strategy(name, **{"seed": 0, **FAST, **options})
    )
    return client


def evaluate(
    problem: str, parameters: dict, json_exact: bool = False
) -> dict[str, float]:
    """The objective at ``parameters``.

    ``json_exact`` rounds to a multiple of 1/8, which survives Ax's JSON storage
    exactly (pandas writes observed means with 10 decimals and parses them back
    with a fast, inexact parser).
    """
    f, bounds = PROBLEMS[problem]
    x = torch.tensor([[parameters[f"x{i}"] for i in range(len(bounds))]])
    value = float(f(x))
    return {problem: round(8 * value) / 8 if json_exact else value}


def run_trials(
    client: Client,
    problem: str,
    total: int,
    pending: int = 0,
    json_exact: bool = False,
) -> None:
    """Run until ``total`` trials exist, keeping up to ``pending`` trials open.

    Each round asks for ``pending + 1`` trials and completes all but the newest
    ``pending`` of the open ones, so later trials are generated while earlier ones
    are still running.
    """
    open_trials: dict[int, dict] = {}
    while len(client._experiment.trials) < total:
        room = total - len(client._experiment.trials)
        open_trials.update(client.get_next_trials(max_trials=min(pending + 1, room)))
        keep = sorted(open_trials)[-pending:] if pending else []
        if len(client._experiment.trials) >= total:
            keep = []
        for index in sorted(open_trials):
            if index not in keep:
                values = evaluate(problem, open_trials[index], json_exact)
                client.complete_trial(index, raw_data=values)
        open_trials = {i: open_trials[i] for i in keep}


def observed_values(client: Client, problem: str) -> list[float]:
    """Observed objective values in trial order."""
    df = client._experiment.lookup_data().df.sort_values("trial_index")
    return df[df["metric_name"] == problem]["mean"].tolist()
