"""turbo-bkb against bbkb (and TuRBO-1 when available) at 1,000 evaluations.

Hartmann6 (noise sd 0.05) and Ackley10 on ``[-5, 10]^10`` (noise sd 0.05),
batches of 50 through ``get_next_batch``; reports the noiseless value at the best
observed point after 250 / 500 / 1,000 evaluations and the CPU seconds
(``time.process_time``, one thread).

``--turbo1 PATH`` adds the TuRBO-1 baseline of ``PATH`` (a ``turbo1.py`` with
``run_turbo1``), run on the same problems and noise.

Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_turbo_bkb.py \
        --methods turbo-bkb --problems hartmann6 --seeds 0
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import time
import warnings

import torch
from ax import Client, RangeParameterConfig
from botorch.test_functions import Ackley, Hartmann

from botorch_sketch.ax import get_generation_strategy, get_next_batch

NOISE = 0.05
CHECKPOINTS = (250, 500, 1000)


def problem(name: str):
    if name == "hartmann6":
        return Hartmann(dim=6).to(torch.float64)
    return Ackley(dim=10, bounds=[(-5.0, 10.0)] * 10).to(torch.float64)


def noisy(f, seed: int):
    g = torch.Generator().manual_seed(10_000 + seed)

    def evaluate(X: torch.Tensor) -> torch.Tensor:
        return f(X) + NOISE * torch.randn(X.shape[0], generator=g, dtype=X.dtype)

    return evaluate


def trace(f, X: torch.Tensor, Y: torch.Tensor) -> dict[int, float]:
    """Noiseless f at the best observed point among the first n, n in CHECKPOINTS."""
    out = {}
    for n in CHECKPOINTS:
        i = int(Y[:n].argmin())
        out[n] = float(f(X[i : i + 1]))
    return out


def run_ax(method: str, f, seed: int, budget: int, batch: int) -> dict:
    d = f.dim
    names = [f"x{i}" for i in range(d)]
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=n, parameter_type="float", bounds=tuple(b))
            for n, b in zip(names, f.bounds.T.tolist(), strict=True)
        ]
    )
    client.configure_optimization(objective="-f")
    options = {"seed": seed, "initialization_budget": 2 * d}
    if method == "bbkb":
        options["min_batch_size"] = batch
    client.set_generation_strategy(get_generation_strategy(method, **options))
    evaluate = noisy(f, seed)
    X, Y = [], []
    cpu0 = time.process_time()
    while len(Y) < budget:
        trials = get_next_batch(client, max_batch_size=min(batch, budget - len(Y)))
        for index, p in trials.items():
            x = torch.tensor([[p[n] for n in names]], dtype=torch.float64)
            y = float(evaluate(x))
            client.complete_trial(index, raw_data={"f": y})
            X.append(x)
            Y.append(y)
    cpu = time.process_time() - cpu0
    return {"best": trace(f, torch.cat(X), torch.tensor(Y)), "cpu": cpu}


def run_turbo1(path: str, f, seed: int, budget: int, batch: int) -> dict:
    spec = importlib.util.spec_from_file_location("turbo1_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    cpu0 = time.process_time()
    res = module.run_turbo1(noisy(f, seed), f.bounds, budget, batch, seed=seed)
    cpu = time.process_time() - cpu0
    return {"best": trace(f, res.X, res.Y), "cpu": cpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=["turbo-bkb", "bbkb"])
    p.add_argument("--problems", nargs="+", default=["hartmann6", "ackley10"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--turbo1", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("ax").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    for name in args.problems:
        f = problem(name)
        for method in args.methods:
            for seed in args.seeds:
                if method == "turbo1":
                    out = run_turbo1(args.turbo1, f, seed, args.budget, args.batch)
                else:
                    out = run_ax(method, f, seed, args.budget, args.batch)
                row = {"problem": name, "method": method, "seed": seed, **out}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
