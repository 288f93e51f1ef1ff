"""Where one background refill's time goes: ``cProfile`` of one BBKB
``gen_filled_batch`` call (the call a :class:`LookaheadOrchestrator` refill
makes) on Hartmann6 with ``N`` completed trials and ``k`` running ones, the top
functions by own and by cumulative time.

    python benchmarks/profile_refill.py --trials 500 --points 64 [--running 32]

The experiment is built with ``get_next_batch`` batches of ``--running`` points
(noiseless Hartmann6, seed 0); the profiled call follows one unprofiled call of
the same size (the warm-started model and caches in place, as in a run).
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import sys
import time
from pathlib import Path

import torch
from ax import Client, RangeParameterConfig
from botorch.test_functions import Hartmann

from botorch_sketch.ax import get_generation_strategy, get_next_batch
from botorch_sketch.ax.pending import fast_metric_availability
from botorch_sketch.ax.trials import gen_filled_batch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

DIM = 6
INITIALIZATION = 12


def build(trials: int, running: int) -> Client:
    r"""A client with about ``trials`` completed trials and ``running`` running."""
    f = Hartmann(dim=DIM)
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=(0, 1))
            for i in range(DIM)
        ]
    )
    client.configure_optimization(objective="-f")
    client.set_generation_strategy(
        get_generation_strategy(
            "bbkb",
            initialization_budget=INITIALIZATION,
            seed=0,
            min_batch_size=running,
        )
    )
    while len(client._experiment.trials) < trials:
        if len(client._experiment.trials) < INITIALIZATION:
            batch = client.get_next_trials(max_trials=INITIALIZATION)
        else:
            batch = get_next_batch(client, max_batch_size=running)
        for index, p in batch.items():
            x = torch.tensor([[p[f"x{i}"] for i in range(DIM)]], dtype=torch.float64)
            client.complete_trial(index, raw_data={"f": float(f(x))})
    get_next_batch(client, max_batch_size=running)  # left running
    return client


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=500)
    p.add_argument("--points", type=int, default=64, help="points in the refill")
    p.add_argument("--running", type=int, default=32)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    logging.disable(logging.INFO)  # Ax logs every trial
    torch.set_num_threads(1)
    client = build(args.trials, args.running)
    experiment, strategy = client._experiment, client._generation_strategy

    def refill() -> list:
        with fast_metric_availability():
            return gen_filled_batch(strategy, experiment, args.points)

    refill()
    profile = cProfile.Profile()
    wall, cpu = time.perf_counter(), time.process_time()
    runs = profile.runcall(refill)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        f"{len(experiment.trials)} trials: a refill of {len(runs)} points took "
        f"{wall:.2f} s wall, {cpu:.2f} s CPU (profiled)"
    )
    print(harness.profile_report(profile, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
