"""Completing trials in Ax: one ``client.complete_trial`` per trial against
:func:`botorch_sketch.ax.complete_trials` per batch.

An ``ax.Client`` on a 10-parameter box; ``--trials`` one-arm trials attached in
batches of ``--batch`` (``client.attach_trial``, no model: only the completion is
timed), each batch completed one way or the other with a random objective value,
then the experiment's data read once (as the next generation call does).
Records the CPU seconds (``time.process_time``, one thread) spent completing,
cumulated after every 1,000 trials, and checks that both ways end with the same
data. Writes ``results/completion.csv`` and ``results/completion.md``.

Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_completion.py \
        --trials 5000
    PYTHONPATH=$PWD python benchmarks/bench_completion.py --smoke   # seconds
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

logger = logging.getLogger("bench_completion")


def run(trials: int, batch: int, mode: str, seed: int = 0) -> tuple[dict, object]:
    """Cumulative completion CPU seconds after every 1,000 trials, and the data."""
    client = harness.box_client(seed=seed)
    rng = np.random.default_rng(seed)
    spent, marks = 0.0, {}
    while len(client._experiment.trials) < trials:
        k = min(batch, trials - len(client._experiment.trials))
        indices = [
            client.attach_trial(
                parameters={f"x{j}": float(rng.random()) for j in range(10)}
            )
            for _ in range(k)
        ]
        results = {i: {"f": float(rng.random())} for i in indices}
        t0 = time.process_time()
        harness.complete(client, results, mode)
        _ = client._experiment.lookup_data().df  # the next gen reads the data once
        spent += time.process_time() - t0
        n = len(client._experiment.trials)
        if n % 1000 == 0 or n == trials:
            marks[n] = spent
            logger.info("%s: %d trials, %.1f CPU s completing", mode, n, spent)
    df = client._experiment.lookup_data().df.sort_values("trial_index")
    return marks, df[["trial_index", "arm_name", "metric_name", "mean"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=5000)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument("--smoke", action="store_true", help="a seconds-long run in tmp/")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    if args.smoke:
        args.out, args.trials = harness.RESULTS / "tmp" / "completion_smoke", 200
    marks, frames = {}, {}
    for mode in ("batch", "trial"):
        marks[mode], frames[mode] = run(args.trials, args.batch, mode)
    same = (
        frames["batch"]
        .reset_index(drop=True)
        .equals(frames["trial"].reset_index(drop=True))
    )
    rows = [
        {
            "trials": n,
            "batch": args.batch,
            "complete_trial_cpu_s": round(marks["trial"][n], 3),
            "complete_trials_cpu_s": round(marks["batch"][n], 3),
            "same_data": same,
            "commit": harness.git_head(),
        }
        for n in sorted(marks["trial"])
    ]
    intro = (
        f"CPU seconds spent completing trials and reading the data once per "
        f"batch (cumulative), batches of "
        f"{args.batch}, one torch thread: one `client.complete_trial` per trial "
        "against one `complete_trials` per batch. `same_data`: both end with "
        "the same experiment data."
    )
    harness.write_table(
        args.out,
        "completion",
        "Completing trials: per trial against per batch",
        intro,
        rows,
    )
    if not same:
        logger.error("the two ways ended with different data")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
