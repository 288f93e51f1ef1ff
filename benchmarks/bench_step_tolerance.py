"""One "bbkb" batch from the same saved state under several L-BFGS-B gradient
tolerances (issue 24, :mod:`botorch_sketch.optim.step_tolerance`).

For each problem of ``bench_large_budget.py`` (noise sd 0.05): ``"bbkb"`` with
``min_batch_size=50`` runs to ``--n`` evaluations (seed 0, batches of 50), the
``ax.Client`` is saved to JSON in memory, and for each ``gradient_tolerance`` of
``--tolerances`` (``none`` = SciPy's absolute ``pgtol = 1e-5``) a fresh client
loaded from that JSON generates the next 50-point batch with the strategy's
acquisition option set to it. Recorded per tolerance: the batch UCB's
evaluations (calls of ``BatchUpperConfidenceBound.forward`` and the rows they
carried), CPU seconds of ``optimize_acqf_adaptive_batch``, the absolute
``pgtol`` it came to, and the UCB values of the batch's points at selection
(mean and first) and how many of the batch's first points equal those of
the first tolerance listed. Same seeds throughout: the greedy steps start from the same
points, so a looser tolerance can only stop earlier on the same L-BFGS-B path.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_step_tolerance.py \\
        --problems hartmann6,ackley20,ackley60 --n 500

Writes ``benchmarks/results/bbkb_step_tolerance.{csv,md}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from bench_large_budget import make_problem, observe  # noqa: E402

logger = logging.getLogger("bench_step_tolerance")
BATCH = 50


def saved_state(problem_name: str, n: int, seed: int) -> str:
    """The JSON of an ``ax.Client`` after ``n`` "bbkb" evaluations (batches of 50)."""
    from ax import Client

    from botorch_sketch.ax import (
        complete_trials,
        get_generation_strategy,
        get_next_batch,
    )

    problem = make_problem(problem_name)
    client = Client(random_seed=seed)
    client.configure_experiment(parameters=problem.ax_parameters())
    client.configure_optimization(objective="-f")
    client.set_generation_strategy(
        get_generation_strategy("bbkb", seed=seed, min_batch_size=BATCH)
    )
    done = 0
    while done < n:
        trials = get_next_batch(client, max_batch_size=BATCH)
        results = {}
        for index, params in trials.items():
            y, _ = observe(problem, problem.from_parameters(params), index, 0.05, seed)
            results[index] = {"f": float(y)}
        complete_trials(client, results)
        done += len(trials)
    path = harness.RESULTS / "tmp" / f"step_tolerance_{problem_name}_{n}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    client.save_to_json_file(str(path))
    text = path.read_text()
    path.unlink()
    return text


def one_batch(state: str, tolerance: float | None) -> dict[str, Any]:
    """Generate the next batch from ``state`` with ``gradient_tolerance``."""
    from ax import Client

    import botorch_sketch.ax.acquisition as ax_acquisition
    import botorch_sketch.optim.step_tolerance as step_tolerance
    from botorch_sketch.acquisition import BatchUpperConfidenceBound
    from botorch_sketch.ax import get_next_batch

    record: dict[str, Any] = {"evaluations": 0, "rows": 0, "pgtol": None}
    forward = BatchUpperConfidenceBound.forward
    optimize = ax_acquisition.optimize_acqf_adaptive_batch
    tolerance_of = step_tolerance.step_gradient_tolerance

    def counted(self, X):
        record["evaluations"] += 1
        record["rows"] += X.reshape(-1, X.shape[-1]).shape[0]
        return forward(self, X)

    def timed(*args, **kwargs):
        kwargs["gradient_tolerance"] = tolerance
        t0 = time.process_time()
        out = optimize(*args, **kwargs)
        record["cpu_s"] = time.process_time() - t0
        record["values"] = out[1].tolist()
        record["points"] = out[0].detach().cpu()
        return out

    def absolute(model, bounds, relative):
        record["pgtol"] = tolerance_of(model, bounds, relative)
        return record["pgtol"]

    path = harness.RESULTS / "tmp" / "step_tolerance_state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(state)
    client = Client.load_from_json_file(str(path))
    path.unlink()
    BatchUpperConfidenceBound.forward = counted
    ax_acquisition.optimize_acqf_adaptive_batch = timed
    step_tolerance.step_gradient_tolerance = absolute
    try:
        get_next_batch(client, max_batch_size=BATCH)
    finally:
        BatchUpperConfidenceBound.forward = forward
        ax_acquisition.optimize_acqf_adaptive_batch = optimize
        step_tolerance.step_gradient_tolerance = tolerance_of
    return record


def _shared_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many leading rows of ``a`` and ``b`` agree within 1e-3 (relative to
    the largest coordinate range of ``a``)."""
    k = min(a.shape[0], b.shape[0])
    scale = float((a.max(0).values - a.min(0).values).max().clamp_min(1e-12))
    close = ((a[:k] - b[:k]).abs().amax(-1) <= 1e-3 * scale).tolist()
    return close.index(False) if False in close else k


def main(argv: list[str] | None = None) -> int:
    """Run the problems and write the CSV and the Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", default="hartmann6,ackley20,ackley60")
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerances", default="none,0.001,0.003,0.01,0.03")
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    args = p.parse_args(argv)
    harness.quiet_single_thread()
    tolerances = [None if t == "none" else float(t) for t in args.tolerances.split(",")]
    rows = []
    for name in args.problems.split(","):
        logger.info("state: %s, %d evaluations", name, args.n)
        state = saved_state(name, args.n, args.seed)
        first = None
        for tolerance in tolerances:
            rec = one_batch(state, tolerance)
            values = torch.tensor(rec["values"])
            first = rec["points"] if first is None else first
            shared = _shared_prefix(first, rec["points"])
            rows.append(
                {
                    "problem": name,
                    "n": args.n,
                    "gradient_tolerance": "none" if tolerance is None else tolerance,
                    "pgtol": "" if rec["pgtol"] is None else f"{rec['pgtol']:.3g}",
                    "evaluations": rec["evaluations"],
                    "rows": rec["rows"],
                    "gen_cpu_s": round(rec["cpu_s"], 2),
                    "points": len(values),
                    "mean_ucb": f"{float(values.mean()):.6f}",
                    "first_ucb": f"{float(values[0]):.6f}",
                    "same_points_as_first_row": shared,
                }
            )
            logger.info("%s", json.dumps(rows[-1]))
    harness.write_csv(args.out / "bbkb_step_tolerance.csv", rows)
    section = "\n".join(
        [
            "One 50-point batch per row, each from the same saved state "
            "(module docstring of `benchmarks/bench_step_tolerance.py`); "
            "`same_points_as_first_row`: how many of the batch's first points "
            "equal the first row's (within 1e-3 of the widest side; past the "
            "first difference the greedy sequences part).",
            "",
            harness.markdown_table(rows),
        ]
    )
    harness.write_report(
        args.out / "bbkb_step_tolerance.md",
        "BBKB's greedy steps under L-BFGS-B gradient tolerances",
        [section],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
