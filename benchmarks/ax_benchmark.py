"""Ax's own benchmarking stack (``ax.benchmark``) for the Ax-level scripts.

``bench_ax.py`` (every named strategy, pending trials) and ``bench_ax_workers.py``
(k workers, ``BatchTrial`` s) run the package's generation strategies as Ax
``BenchmarkMethod`` s on Ax's registry problems with ``benchmark_replication``, so
a user can rerun them next to any of Ax's methods. This module builds those
methods, runs one timed replication into rows (one per point of Ax's traces) and
summarises and plots the rows.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from itertools import accumulate
from typing import Any

from ax.benchmark.benchmark import benchmark_replication
from ax.benchmark.benchmark_method import BenchmarkMethod
from ax.benchmark.benchmark_problem import BenchmarkProblem
from ax.benchmark.methods.modular_botorch import (
    get_sobol_botorch_modular_acquisition,
)
from botorch.acquisition import AcquisitionFunction
from botorch.models import SingleTaskGP
from harness import mean_sd, timed

from botorch_sketch.ax import get_generation_strategy


def sketch_method(
    name: str,
    strategy: str,
    *,
    seed: int,
    sobol_trials: int,
    batch_size: int = 1,
    max_pending_trials: int = 1,
    **options: Any,
) -> BenchmarkMethod:
    """``get_generation_strategy(strategy, ...)`` as the ``BenchmarkMethod`` ``name``.

    ``batch_size`` > 1 makes every trial a ``BatchTrial`` of (at most) that many
    arms; ``max_pending_trials`` is how many trials Ax's Orchestrator keeps running.
    """
    generation_strategy = get_generation_strategy(
        strategy, seed=seed, initialization_budget=sobol_trials, **options
    )
    return BenchmarkMethod(
        name=name,
        generation_strategy=generation_strategy,
        batch_size=batch_size,
        max_pending_trials=max_pending_trials,
    )


def botorch_method(
    name: str,
    acquisition: type[AcquisitionFunction],
    *,
    sobol_trials: int,
    batch_size: int = 1,
    max_pending_trials: int = 1,
) -> BenchmarkMethod:
    """Ax's Sobol + ``SingleTaskGP`` + ``acquisition`` (its modular BoTorch method)."""
    method = get_sobol_botorch_modular_acquisition(
        SingleTaskGP,
        acquisition,
        name=name,
        num_sobol_trials=sobol_trials,
        batch_size=batch_size,
    )
    return dataclasses.replace(method, max_pending_trials=max_pending_trials)


def replicate(
    problem: BenchmarkProblem, method: BenchmarkMethod, seed: int, /, **keys: Any
) -> list[dict[str, Any]]:
    """One timed ``benchmark_replication``; one row per point of Ax's traces.

    A trace point is a time at which trials completed (every trial when they run
    one at a time; a round of trials when several run at once). Each row has
    ``keys``, ``seed``, ``round``, ``trials`` and ``evaluations`` (arms) completed
    so far, ``best`` (Ax's oracle trace: the best noiseless value among them),
    ``score`` (Ax's score trace: 0 at the problem's Sobol baseline, 100 at the
    optimum), Ax's fit and generation seconds for the whole run (``fit_s``,
    ``gen_s``: wall time) and the replication's ``wall_s``, ``cpu_s``, ``load``.
    """
    result, clock = timed(
        lambda: benchmark_replication(
            problem=problem,
            method=method,
            seed=seed,
            orchestrator_logging_level=logging.WARNING,
        )
    )
    # Ax orders its traces by completion time (trial index when run one by one).
    trials = sorted(
        result.experiment.trials.values(),
        key=lambda t: (t.time_completed or datetime.datetime.max, t.index),
    )
    arms = [0, *accumulate(len(t.arms) for t in trials)]
    rows = []
    for i, (n, best, score) in enumerate(
        zip(result.num_trials, result.oracle_trace, result.score_trace, strict=True)
    ):
        rows.append(
            {
                **keys,
                "seed": seed,
                "round": i + 1,
                "trials": n,
                "evaluations": arms[n],
                "best": float(best),
                "score": float(score),
                "fit_s": result.fit_time,
                "gen_s": result.gen_time,
                **clock,
            }
        )
    print(
        f"{' '.join(map(str, keys.values()))} seed {seed}: best {rows[-1]['best']:.3f}"
        f", {arms[-1]} evaluations, {clock['cpu_s']:.0f} s CPU",
        flush=True,
    )
    return rows


def final_rows(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    """The last row of every seed among the rows that match ``match``."""
    last: dict[Any, dict[str, Any]] = {}
    for row in rows:
        if all(row[k] == v for k, v in match.items()):
            if row["seed"] not in last or row["round"] > last[row["seed"]]["round"]:
                last[row["seed"]] = row
    return list(last.values())


def summary_cells(final: list[dict[str, Any]], optimum: float) -> dict[str, str]:
    """Table cells over seeds (mean ± sd) from :func:`final_rows`."""
    best = [r["best"] for r in final]
    return {
        "best value": mean_sd(best, "{:.3f}"),
        "worst seed": f"{max(best):.3f}",
        "simple regret": mean_sd([b - optimum for b in best]),
        "score": mean_sd([r.get("score") for r in final], "{:.1f}"),
        "Ax fit + gen wall [s]": mean_sd(
            [r["gen_s"] + r["fit_s"] for r in final], "{:.1f}"
        ),
        "CPU [s]": mean_sd([r["cpu_s"] for r in final], "{:.1f}"),
    }


def plot_regret(
    ax: Any, rows: list[dict[str, Any]], x: str, optimum: float, **style: Any
) -> None:
    """Simple regret vs ``x`` on ``ax``: median line, range over seeds shaded."""
    xs, med, lo, hi = [], [], [], []
    for t in sorted({int(r["round"]) for r in rows}):
        at = [r for r in rows if int(r["round"]) == t]
        vals = sorted(r["best"] - optimum for r in at)
        xs.append(sum(r[x] for r in at) / len(at))
        med.append(vals[len(vals) // 2])
        lo.append(vals[0])
        hi.append(vals[-1])
    (line,) = ax.plot(xs, med, label=rows[0]["method"], **style)
    ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color())
