"""k parallel workers in Ax: BBKB's batches against fixed-q qUCB and qLogNEI.

Issue 15 asks how a user with ``k`` workers gets ``k`` points from BBKB, measured
for regret against BoTorch's fixed-q batches. This script runs, on Ax's own
benchmarking stack (``ax.benchmark``: registry problem, ``BenchmarkMethod``,
``benchmark_replication``, oracle traces), so a user can rerun it next to any of
Ax's methods:

- ``bbkb k-fill``: ``get_generation_strategy("bbkb", min_batch_size=k,
  thompson_fill=0.0)``: the global rule's batch, filled to ``k`` points with the
  next points of the same hallucinated-UCB sequence (GP-BUCB's batch; the
  strategy's default before stop 23);
- ``bbkb k-fill thompson``: the same with ``thompson_fill=0.5`` (the default
  since): the last ``floor((k - 1) / 2)`` points of the fill are maximisers of
  posterior samples (Thompson sampling) instead of greedy points;
- ``bbkb adaptive``: the plain rule, at most ``k`` points (the batch the rule
  chose; fewer evaluations per round);
- ``qUCB`` and ``qLogNEI``: Ax's ``get_sobol_botorch_modular_acquisition`` with
  ``SingleTaskGP`` and a ``q = k`` joint batch (BoTorch's sequential greedy).

Every method evaluates ``BatchTrial`` s of its batch on noisy Hartmann6 (noise sd
``--noise``, minimised; optimum -3.32237) for ``--rounds`` rounds after
``--sobol-rounds`` Sobol rounds, over ``--seeds`` replications. Recorded per
replication and round: evaluations so far, best noiseless value among evaluated
points (Ax's oracle trace), fit and generation seconds.

Writes ``benchmarks/results/ax_workers.{csv,md,png}``.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_ax_workers.py [--k 8] [--rounds 20]
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ax.benchmark.benchmark_method import BenchmarkMethod  # noqa: E402
from ax.benchmark.problems.registry import get_benchmark_problem  # noqa: E402
from ax_benchmark import (  # noqa: E402
    botorch_method,
    final_rows,
    plot_regret,
    replicate,
    sketch_method,
    summary_cells,
)
from botorch.acquisition import (  # noqa: E402
    qLogNoisyExpectedImprovement,
    qUpperConfidenceBound,
)
from harness import (  # noqa: E402
    RESULTS,
    figure,
    markdown_table,
    mean_sd,
    read_csv,
    write_csv,
    write_report,
)

OPTIMUM = -3.32237
METHODS = ("bbkb k-fill", "bbkb k-fill thompson", "bbkb adaptive", "qUCB", "qLogNEI")
#: Strategy options of the BBKB methods (``k`` is the number of workers).
BBKB_OPTIONS = {
    "bbkb k-fill": lambda k: {"min_batch_size": k, "thompson_fill": 0.0},
    "bbkb k-fill thompson": lambda k: {"min_batch_size": k, "thompson_fill": 0.5},
    "bbkb adaptive": lambda k: {},
}
COLUMNS = ("method", "seeds", "rounds", "evaluations", "best value", "worst seed")
COLUMNS += ("simple regret", "Ax fit + gen wall [s]")


def make_method(name: str, k: int, sobol_rounds: int, seed: int) -> BenchmarkMethod:
    """The ``BenchmarkMethod`` of ``name`` with batches of (at most) ``k`` arms."""
    if name.startswith("bbkb"):
        return sketch_method(
            name,
            "bbkb",
            seed=seed,
            sobol_trials=sobol_rounds,
            batch_size=k,
            **BBKB_OPTIONS[name](k),
        )
    acqf = {"qUCB": qUpperConfidenceBound, "qLogNEI": qLogNoisyExpectedImprovement}
    return botorch_method(name, acqf[name], sobol_trials=sobol_rounds, batch_size=k)


def run(args: argparse.Namespace) -> list[dict]:
    """Every method and seed; one row per replication and round."""
    problem = get_benchmark_problem(
        "hartmann6", noise_std=args.noise, num_trials=args.sobol_rounds + args.rounds
    )
    rows = []
    for seed in range(args.seeds):
        for name in args.methods:
            method = make_method(name, args.k, args.sobol_rounds, seed)
            rows += replicate(problem, method, seed, method=name)
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Per-method numbers after the last round (mean ± sd over seeds)."""
    summary = []
    for name in METHODS:
        final = final_rows(rows, method=name)
        if final:
            summary.append(
                {
                    "method": name,
                    "seeds": len(final),
                    "rounds": int(final[0]["round"]),
                    "evaluations": mean_sd([r["evaluations"] for r in final], "{:.0f}"),
                    **summary_cells(final, OPTIMUM),
                }
            )
    return summary


def plot(rows: list[dict], path: Path) -> None:
    """Best value vs round and vs evaluations (median and range over seeds)."""
    fig, axes = figure(1, 2, figsize=(11, 4))
    for name in METHODS:
        mine = [r for r in rows if r["method"] == name]
        for ax, key in zip(axes, ("round", "evaluations"), strict=True):
            if mine:
                plot_regret(ax, mine, key, OPTIMUM)
    for ax, label in zip(axes, ("batch round", "evaluations"), strict=True):
        ax.set_xlabel(label)
        ax.set_ylabel("simple regret (best true value - optimum)")
        ax.set_yscale("log")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=8, help="parallel workers")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--sobol-rounds", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--noise", type=float, default=0.05)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out", type=Path, default=RESULTS / "ax_workers")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    args.methods = args.methods.split(",")
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; known: {list(METHODS)}")
    logging.getLogger("ax").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    csv_path = args.out.with_suffix(".csv")
    rows = read_csv(csv_path) if args.report_only else run(args)
    if not args.report_only:
        write_csv(csv_path, rows)
    summary = summarise(rows)
    plot(rows, args.out.with_suffix(".png"))
    write_report(
        args.out.with_suffix(".md"),
        f"k = {args.k} parallel workers in Ax: BBKB batches vs fixed-q qUCB / qLogNEI",
        [
            f"Noisy Hartmann6 (noise sd {args.noise}, minimised, optimum {OPTIMUM}), "
            f"Ax's `ax.benchmark` registry problem; {args.sobol_rounds} Sobol "
            f"rounds of {args.k} arms, then {args.rounds} rounds of one `BatchTrial` "
            "each; *best value* is the best noiseless value among evaluated points "
            "(Ax's oracle trace) after the last round; cells mean ± sd over seeds. "
            "*bbkb adaptive* evaluates only the points its rule chose (at most k "
            "per round), so it uses fewer evaluations per round.",
            markdown_table(summary, COLUMNS),
            f"![best value vs rounds and evaluations]({args.out.name}.png)",
        ],
    )


if __name__ == "__main__":
    main()
