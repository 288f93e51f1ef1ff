"""Generation CPU of a strategy's call: ``n`` one-arm calls against one ``n``-arm call.

What bounds a strategy's worker utilisation under
:func:`botorch_sketch.ax.run_trials`: a background refill of ``n`` trials is one
batch split into trials on BBKB and trust-region nodes, and ``n`` one-arm calls
of the generation strategy (a model call each) on the others. ``N`` Hartmann6
observations at uniform points (seed 0) are attached to an Ax ``Client`` with the
strategy; then ``n`` one-arm calls and one ``n``-arm call (Ax's q-batch of the
node's acquisition) are timed in CPU seconds, one torch thread. The first call
of a strategy pays its model fit. Writes ``strategy_call{tag}.csv/.md``.

    OMP_NUM_THREADS=1 python benchmarks/bench_strategy_call.py \
        --strategies gssbo rssbo goucb --n 1 8 --observations 200
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from botorch.test_functions import Hartmann  # noqa: E402
from harness import RESULTS, box_client, quiet_single_thread, write_table  # noqa: E402

from botorch_sketch.ax import get_generation_strategy  # noqa: E402

logger = logging.getLogger(__name__)


def time_calls(strategy: str, observations: int, sizes: list[int]) -> list[dict]:
    """CPU seconds of ``n`` one-arm calls and of one ``n``-arm call, per ``n``."""
    problem = Hartmann(dim=6)
    client = box_client(dim=6, seed=0)
    client.set_generation_strategy(
        get_generation_strategy(strategy, initialization_budget=12, seed=0)
    )
    points = torch.rand(observations, 6, generator=torch.Generator().manual_seed(0))
    for x in points:
        index = client.attach_trial(parameters={f"x{i}": float(x[i]) for i in range(6)})
        client.complete_trial(trial_index=index, raw_data={"f": float(problem(x))})
    gs, experiment = client._generation_strategy_or_choose(), client._experiment
    rows = []
    for n in sizes:
        start = time.process_time()
        gs.gen(experiment=experiment, num_trials=n)
        one_arm = time.process_time() - start
        start = time.process_time()
        gs.gen(experiment=experiment, n=n)
        q_arm = time.process_time() - start
        rows.append(
            {
                "strategy": strategy,
                "N": observations,
                "n": n,
                "n one-arm calls [CPU s]": one_arm,
                "one n-arm call [CPU s]": q_arm,
            }
        )
        logger.info("%s", rows[-1])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=["gssbo", "rssbo", "goucb"])
    parser.add_argument("--n", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--observations", type=int, default=200)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    quiet_single_thread()
    rows = [
        row
        for strategy in args.strategies
        for row in time_calls(strategy, args.observations, args.n)
    ]
    intro = (
        "Hartmann6, N observations at uniform points (seed 0), initialisation 12, "
        "strategy seed 0, one torch thread; in each row the one-arm calls run "
        "first (the first row of a strategy pays its model fit)."
    )
    write_table(
        RESULTS,
        f"strategy_call{args.tag}",
        "Generation CPU per call: one-arm calls against one n-arm call",
        intro,
        rows,
    )


if __name__ == "__main__":
    main()
