"""Ax's per-call data bookkeeping (pending points, training data) against ours.

Every ``GenerationStrategy.gen`` call starts with Ax's
``extract_pending_observations``; past 100 one-arm trials it asks
``compute_metric_availability`` about every completed trial.
:func:`botorch_sketch.ax.pending.fast_metric_availability` swaps in the one-pass
:func:`~botorch_sketch.ax.pending.metric_availability` during the package's
generation calls. This script builds an ``ax.Client`` experiment of one-arm
trials on a 10-parameter box (completed by batches of 100 with
``complete_trials``, the last batch left running so some points are pending),
and at each size in ``--sizes`` times, in CPU seconds (median of ``--repeats``,
one thread): Ax's ``extract_pending_observations``, the same with the one-pass
availability (and checks that both return the same pending points), and Ax's
``extract_experiment_data`` (the data extraction every ``Adapter`` makes next)
against :func:`botorch_sketch.ax.experiment_data.incremental_experiment_data`,
each timed as a run meets it: after ``--step`` more trials have completed
since the previous call (a new ``Data`` whose frame is not built yet; checked
equal to Ax's answer at every call). Writes
``results/pending.csv`` and ``results/pending.md``.

Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_pending.py
    PYTHONPATH=$PWD python benchmarks/bench_pending.py --smoke   # seconds
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

logger = logging.getLogger("bench_pending")


def cpu_median(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median CPU seconds of ``repeats`` calls of ``fn``, and its last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out


def complete(
    client, results: dict[int, dict[str, float]], progression: int | None
) -> None:
    """Complete trials with ``complete_trials``, or, with a ``progression``, as
    Ax's closed loop records an ``IMetric``'s readings: every row at that step."""
    from ax.core.data import Data

    from botorch_sketch.ax import complete_trials

    if progression is None or not results:
        complete_trials(client, results)
        return
    experiment = client._experiment
    experiment.attach_data(
        Data(
            df=pd.DataFrame(
                {
                    "trial_index": list(results),
                    "arm_name": [experiment.trials[i].arm.name for i in results],
                    "metric_name": "f",
                    "metric_signature": "f",
                    "mean": [r["f"] for r in results.values()],
                    "sem": np.nan,
                    "step": float(progression),
                }
            )
        )
    )
    for index in results:
        experiment.trials[index].mark_completed()


def grow(
    client,
    size: int,
    rng: np.random.Generator,
    running: int,
    progression: int | None = None,
) -> None:
    """Add one-arm trials up to ``size``: all completed but the last ``running``."""
    from ax.core.arm import Arm
    from ax.core.generator_run import GeneratorRun

    experiment = client._experiment
    while len(experiment.trials) < size:
        created = []
        for _ in range(min(100, size - len(experiment.trials))):
            params = {f"x{j}": float(rng.random()) for j in range(10)}
            run = GeneratorRun(arms=[Arm(parameters=params)])
            trial = experiment.new_trial(generator_run=run)
            trial.mark_running(no_runner_required=True)
            created.append(trial.index)
        if len(experiment.trials) == size:
            created = created[: len(created) - running]
        complete(client, {i: {"f": float(rng.random())} for i in created}, progression)


def complete_running(
    client,
    rng: np.random.Generator,
    below: int | None = None,
    progression: int | None = None,
):
    """Complete the running trials (only those with an index below ``below``)."""
    pending = [
        t.index
        for t in client._experiment.trials.values()
        if t.status.is_running and (below is None or t.index < below)
    ]
    complete(client, {i: {"f": float(rng.random())} for i in pending}, progression)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="500,1000,2000,5000,10000")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--running", type=int, default=8)
    p.add_argument("--step", type=int, default=8, help="trials between extractions")
    p.add_argument(
        "--progression",
        type=int,
        default=None,
        help="record every row at this step, as Ax's closed loop does with an "
        "IMetric (results/pending_progression.*)",
    )
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument("--smoke", action="store_true", help="a seconds-long run in tmp/")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    if args.smoke:
        args.out, args.sizes = harness.RESULTS / "tmp" / "pending_smoke", "150,300"
    from ax.core.data_utils import DataLoaderConfig, extract_experiment_data
    from ax.core.utils import extract_pending_observations

    from botorch_sketch.ax.experiment_data import incremental_experiment_data
    from botorch_sketch.ax.pending import fast_metric_availability

    client = harness.box_client()
    experiment, rng, rows, same = client._experiment, np.random.default_rng(0), [], True

    def fast_pending():
        with fast_metric_availability():
            return extract_pending_observations(experiment)

    config = DataLoaderConfig()
    P = args.progression
    for size in (int(s) for s in args.sizes.split(",")):
        complete_running(client, rng, progression=P)  # left running at last size
        grow(client, size, rng, args.running, P)
        incremental_experiment_data(experiment, config)  # as at an earlier call
        grown, times, same_pending, same_data = size, [], True, True

        def step() -> None:
            # ``step`` more completed trials, as between two generation calls:
            # the experiment's ``Data`` is a new object whose frame is not built.
            nonlocal grown
            grown += args.step
            grow(client, grown, rng, args.running, P)
            complete_running(client, rng, below=grown - args.running, progression=P)

        for _ in range(args.repeats):
            step()
            ax_s, _ = cpu_median(lambda: extract_pending_observations(experiment), 1)
            data_s, _ = cpu_median(
                lambda: extract_experiment_data(experiment, config), 1
            )
            incremental_experiment_data(experiment, config)  # keeps its prefix
            step()
            ours_s, ours_out = cpu_median(fast_pending, 1)
            incremental_s, got = cpu_median(
                lambda: incremental_experiment_data(experiment, config), 1
            )
            times.append((ax_s, ours_s, data_s, incremental_s))
            same_pending &= ours_out == extract_pending_observations(experiment)
            same_data &= got == extract_experiment_data(experiment, config)
        ax_s, ours_s, data_s, incremental_s = (
            statistics.median(column) for column in zip(*times, strict=True)
        )
        same = same and same_pending and same_data
        rows.append(
            {
                "trials": size,
                "running": args.running,
                "pending_ax_cpu_s": round(ax_s, 4),
                "pending_one_pass_cpu_s": round(ours_s, 4),
                "speedup": round(ax_s / max(ours_s, 1e-9), 1),
                "extract_ax_cpu_s": round(data_s, 4),
                "extract_incremental_cpu_s": round(incremental_s, 4),
                "same_pending": same_pending,
                "same_data": same_data,
                "commit": harness.git_head(),
            }
        )
        logger.info("%s", rows[-1])
    intro = (
        "CPU seconds (median of "
        f"{args.repeats} calls, one torch thread), each call made as a generation "
        f"call meets the experiment: after {args.step} more trials completed (so "
        "the experiment's `Data` is a new object whose data frame is not built "
        "yet), on an experiment of one-arm trials (all completed but the last "
        f"{args.running}). `pending`: Ax's `extract_pending_observations` with "
        "Ax's `compute_metric_availability` and with the one-pass "
        "`botorch_sketch.ax.pending.metric_availability`; `same_pending`: both "
        "return the same pending points. `extract_ax`: Ax's "
        "`extract_experiment_data`, the data extraction of every `Adapter`; "
        "`extract_incremental`: "
        "`botorch_sketch.ax.experiment_data.incremental_experiment_data`, "
        "called after the pending points as in a generation call (both read the "
        "`Data`'s rows without building its frame); `same_data`: equal to Ax's "
        "at every call."
    )
    if P is not None:
        intro += (
            f" Every observation is recorded at step {P}, as Ax's closed loop "
            "(`Client.run_trials`, the Orchestrator) records an `IMetric`'s "
            "reading; Ax then indexes the observations by step."
        )
    harness.write_table(
        args.out,
        "pending" if P is None else "pending_progression",
        "Ax's data bookkeeping per generation call: Ax's functions against ours",
        intro,
        rows,
    )
    if not same:
        logger.error("the two ways returned different pending points or data")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
