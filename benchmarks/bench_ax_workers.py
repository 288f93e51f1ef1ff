"""k parallel workers in Ax: BBKB's batches against fixed-q qUCB and qLogNEI.

Issue 15 asks how a user with ``k`` workers gets ``k`` points from BBKB, measured
for regret against BoTorch's fixed-q batches. This script runs, on Ax's own
benchmarking stack (``ax.benchmark``: registry problem, ``BenchmarkMethod``,
``benchmark_replication``, oracle traces), so a user can rerun it next to any of
Ax's methods:

- ``bbkb k-fill``: ``get_generation_strategy("bbkb", min_batch_size=k)``: the
  global rule's batch, filled to ``k`` points with the next points of the same
  hallucinated-UCB sequence (GP-BUCB's batch; the documented way for k workers);
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

from ax.benchmark.benchmark import benchmark_replication  # noqa: E402
from ax.benchmark.benchmark_method import BenchmarkMethod  # noqa: E402
from ax.benchmark.methods.modular_botorch import (  # noqa: E402
    get_sobol_botorch_modular_acquisition,
)
from ax.benchmark.problems.registry import get_benchmark_problem  # noqa: E402
from botorch.acquisition import (  # noqa: E402
    qLogNoisyExpectedImprovement,
    qUpperConfidenceBound,
)
from botorch.models import SingleTaskGP  # noqa: E402
from harness import (  # noqa: E402
    RESULTS,
    figure,
    markdown_table,
    mean_sd,
    read_csv,
    timed,
    write_csv,
    write_report,
)

from botorch_sketch.ax import get_generation_strategy  # noqa: E402

OPTIMUM = -3.32237
METHODS = ("bbkb k-fill", "bbkb adaptive", "qUCB", "qLogNEI")


def make_method(name: str, k: int, sobol_rounds: int, seed: int) -> BenchmarkMethod:
    """The ``BenchmarkMethod`` of ``name`` with batches of (at most) ``k`` arms."""
    if name.startswith("bbkb"):
        options = {"min_batch_size": k} if name == "bbkb k-fill" else {}
        strategy = get_generation_strategy(
            "bbkb", seed=seed, initialization_budget=sobol_rounds, **options
        )
        return BenchmarkMethod(name=name, generation_strategy=strategy, batch_size=k)
    acqf = {"qUCB": qUpperConfidenceBound, "qLogNEI": qLogNoisyExpectedImprovement}
    return get_sobol_botorch_modular_acquisition(
        SingleTaskGP,
        acqf[name],
        name=name,
        num_sobol_trials=sobol_rounds,
        batch_size=k,
    )


def run(args: argparse.Namespace) -> list[dict]:
    """Every method and seed; one row per replication and round."""
    rows = []
    problem = get_benchmark_problem(
        "hartmann6", noise_std=args.noise, num_trials=args.sobol_rounds + args.rounds
    )
    for seed in range(args.seeds):
        for name in args.methods:
            method = make_method(name, args.k, args.sobol_rounds, seed)
            result, clock = timed(
                lambda method=method, seed=seed: benchmark_replication(
                    problem=problem,
                    method=method,
                    seed=seed,
                    orchestrator_logging_level=logging.WARNING,
                )
            )
            evaluations = 0
            trials = result.experiment.trials.values()
            traces = zip(trials, result.oracle_trace, strict=True)
            for round_, (trial, best) in enumerate(traces):
                evaluations += len(trial.arms)
                rows.append(
                    {
                        "method": name,
                        "seed": seed,
                        "round": round_ + 1,
                        "evaluations": evaluations,
                        "best": float(best),
                        "fit_s": result.fit_time,
                        "gen_s": result.gen_time,
                        "wall_s": clock["wall_s"],
                        "cpu_s": clock["cpu_s"],
                        "load": clock["load"],
                    }
                )
            print(
                f"{name} seed {seed}: best {rows[-1]['best']:.3f}, "
                f"{evaluations} evaluations, {clock['cpu_s']:.0f} s CPU",
                flush=True,
            )
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Per-method numbers after the last round (mean ± sd over seeds)."""
    summary = []
    for name in METHODS:
        mine = [r for r in rows if r["method"] == name]
        if not mine:
            continue
        last_round = max(r["round"] for r in mine)
        final = [r for r in mine if r["round"] == last_round]
        summary.append(
            {
                "method": name,
                "seeds": len(final),
                "rounds": int(last_round),
                "evaluations": mean_sd([r["evaluations"] for r in final], "{:.0f}"),
                "best value": mean_sd([r["best"] for r in final], "{:.3f}"),
                "worst seed": f"{max(r['best'] for r in final):.3f}",
                "simple regret": mean_sd([r["best"] - OPTIMUM for r in final]),
                "Ax fit + gen wall [s]": mean_sd(
                    [r["gen_s"] + r["fit_s"] for r in final], "{:.1f}"
                ),
            }
        )
    return summary


def plot(rows: list[dict], path: Path) -> None:
    """Best value vs round and vs evaluations (median and range over seeds)."""
    fig, axes = figure(1, 2, figsize=(11, 4))
    for name in METHODS:
        mine = [r for r in rows if r["method"] == name]
        if not mine:
            continue
        rounds = sorted({int(r["round"]) for r in mine})
        for ax, key in zip(axes, ("round", "evaluations"), strict=True):
            xs, med, lo, hi = [], [], [], []
            for t in rounds:
                at = [r for r in mine if int(r["round"]) == t]
                vals = sorted(r["best"] - OPTIMUM for r in at)
                xs.append(sum(r[key] for r in at) / len(at))
                med.append(vals[len(vals) // 2])
                lo.append(vals[0])
                hi.append(vals[-1])
            ax.plot(xs, med, label=name)
            ax.fill_between(xs, lo, hi, alpha=0.15)
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
            markdown_table(summary),
            f"![best value vs rounds and evaluations]({args.out.name}.png)",
        ],
    )


if __name__ == "__main__":
    main()
