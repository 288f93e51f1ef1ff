"""Why the trust region's model is fitted on a window of its points.

Runs ``"turbo-bkb"`` with the region's model on every point since its restart
(``region_max_points=None``, TuRBO-1's rule) on a problem of
``bench_large_budget.py`` (noise sd 0.05) for ``--evaluations`` evaluations in
batches of 50, takes the first region's points at a few moments of its life, and
fits the region's model (``fit_region_model``, the strategy's defaults) on all
of them and on the ``w`` nearest the best observation. For each fit it records
the fitted noise standard deviation (against the real 0.05), the lengthscales'
range, and how well the posterior mean ranks the 100 points nearest the best
observation by their noiseless values (Pearson correlation of the mean with
``-f``), next to the range of ``f`` over those points.

Usage (about a minute on one CPU thread)::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/probe_region_window.py \\
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_large_budget as suite  # noqa: E402
import harness  # noqa: E402

logger = logging.getLogger("probe_region_window")


def run_region(problem_name: str, evaluations: int, seed: int):
    """``(U, Y, F)``: the unit-cube points (``n x d``), noisy and noiseless values
    (``n``) of a ``"turbo-bkb"`` run with ``region_max_points=None``. Its first
    region holds Ax's initial trials too, from row 0 until its first restart."""
    from ax import Client

    from botorch_sketch.ax import (
        complete_trials,
        get_generation_strategy,
        get_next_batch,
    )

    problem = suite.make_problem(problem_name)
    client = Client(random_seed=seed)
    client.configure_experiment(parameters=problem.ax_parameters())
    client.configure_optimization(objective="-f")
    client.set_generation_strategy(
        get_generation_strategy(
            "turbo-bkb", seed=seed, batch_size=50, region_max_points=None
        )
    )
    X, Y, F = [], [], []
    while len(F) < evaluations:
        trials = get_next_batch(client, max_batch_size=50)
        results = {}
        for index, params in trials.items():
            x = problem.from_parameters(params)
            y, f = suite.observe(problem, x, index, 0.05, seed)
            results[index] = {"f": float(y)}
            X.append(x[0])
            Y.append(float(y))
            F.append(float(f))
        complete_trials(client, results)
    lo, hi = problem.bounds[0], problem.bounds[1]
    U = (torch.stack(X) - lo) / (hi - lo)
    return U, torch.tensor(Y, dtype=suite.DTYPE), torch.tensor(F, dtype=suite.DTYPE)


def probe(U, Y, F, end: int, windows: list[int | None]) -> list[dict]:
    """One row per window: the region model fitted on the first region's rows
    ``0:end``."""
    from botorch_sketch.trust_region.model import (
        fit_region_model,
        lengthscales,
        noise_sd,
    )
    from botorch_sketch.trust_region.window import nearest_rows

    Xr, Yr, Fr = U[:end], -Y[:end, None], F[:end]
    near = nearest_rows(Xr, Yr, 100)
    rows = []
    for w in windows:
        keep = nearest_rows(Xr, Yr, w)
        model = fit_region_model(Xr[keep], Yr[keep], seed=0)
        with torch.no_grad():
            mean = model.posterior(Xr[near]).mean.reshape(-1)
        corr = torch.corrcoef(torch.stack([mean, -Fr[near]]))[0, 1]
        ls = lengthscales(model)
        rows.append(
            {
                "region_points": end,
                "window": "all" if w is None else w,
                "fitted_noise_sd": noise_sd(model, Xr[keep]),
                "lengthscale_min": float(ls.min()),
                "lengthscale_max": float(ls.max()),
                "corr_mean_vs_minus_f_near_best": float(corr),
                "f_range_near_best": float(Fr[near].max() - Fr[near].min()),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="levy10")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=950)
    parser.add_argument("--ends", default="500,700,900")
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    args = parser.parse_args(argv)
    harness.quiet_single_thread()
    U, Y, F = run_region(args.problem, args.evaluations, args.seed)
    rows = []
    for end in (int(e) for e in args.ends.split(",")):
        rows += probe(U, Y, F, end, [None, 300, 150])
    for row in rows:
        row.update({"problem": args.problem, "seed": args.seed})
    harness.write_table(
        args.out,
        "region_window",
        f"The region's model on all its points or on a window ({args.problem}, "
        f"seed {args.seed}, noise sd 0.05)",
        "Module docstring of `benchmarks/probe_region_window.py`.",
        rows,
    )
    logger.info("wrote %s", args.out / "region_window.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
