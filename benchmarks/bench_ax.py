"""Every named Ax strategy on Branin and Hartmann6, on Ax's ``ax.benchmark``.

Each strategy of :func:`botorch_sketch.ax.list_generation_strategies` and Ax's
default (Sobol, then ``SingleTaskGP`` + qLogNEI: ``ax.benchmark``'s modular
BoTorch method) runs as a ``BenchmarkMethod`` on Ax's registry problems
``"branin"`` (25 trials, 5 Sobol) and ``"hartmann6"`` (40 trials, 8 Sobol), both
noiseless as registered and minimised, with ``benchmark_replication`` for seeds
0 ... ``--seeds`` - 1. Pending trials: ``max_pending_trials`` 2 (Branin) and 3
(Hartmann6): Ax's Orchestrator keeps that many trials running, and as the
registry problems' trials all take one (virtual) time step, each round of 2 or 3
trials is generated one trial at a time with the earlier trials of the round
pending. Recorded per replication and round: trials so far, best value among
them (Ax's oracle trace), Ax's score trace, Ax's fit and generation seconds and
the replication's CPU seconds (the comparable number on a shared machine).

Writes ``benchmarks/results/ax_strategies.{csv,md,png}``.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_ax.py [--seeds 3] [--methods bbkb,ax-default] [--problems branin]
    python benchmarks/bench_ax.py --report-only   # rebuild .md/.png from the CSV
"""  # noqa: E501

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ax.benchmark.problems.registry import get_benchmark_problem  # noqa: E402
from ax_benchmark import (  # noqa: E402
    botorch_method,
    final_rows,
    plot_regret,
    replicate,
    sketch_method,
    summary_cells,
)
from botorch.acquisition import qLogNoisyExpectedImprovement  # noqa: E402
from harness import (  # noqa: E402
    RESULTS,
    figure,
    markdown_table,
    read_csv,
    write_csv,
    write_report,
)

from botorch_sketch.ax import list_generation_strategies  # noqa: E402

#: Ax registry key: (trials, Sobol trials, max pending trials).
PROBLEMS = {"branin": (25, 5, 2), "hartmann6": (40, 8, 3)}
AX_DEFAULT = "ax-default"
METHODS = (*list_generation_strategies(), AX_DEFAULT)


def run(args: argparse.Namespace) -> list[dict]:
    """Every problem, method and seed; one row per replication and round."""
    rows = []
    for key in args.problems:
        trials, sobol, pending = PROBLEMS[key]
        problem = get_benchmark_problem(key, num_trials=trials)
        for name in args.methods:
            for seed in range(args.seeds):
                options = {"sobol_trials": sobol, "max_pending_trials": pending}
                method = (
                    botorch_method(name, qLogNoisyExpectedImprovement, **options)
                    if name == AX_DEFAULT
                    else sketch_method(name, name, seed=seed, **options)
                )
                rows += replicate(problem, method, seed, problem=key, method=name)
    return rows


def report(rows: list[dict], out: Path) -> None:
    """The Markdown table (mean ± sd over seeds) and the regret plot."""
    problems = [p for p in PROBLEMS if any(r["problem"] == p for r in rows)]
    fig, axes = figure(1, len(problems), figsize=(6 * len(problems), 4), squeeze=False)
    summary, same = [], []
    for ax, key in zip(axes[0], problems, strict=True):
        optimum = get_benchmark_problem(key).optimal_value
        traces: dict[tuple, list[str]] = {}
        for i, name in enumerate(METHODS):
            mine = [r for r in rows if (r["problem"], r["method"]) == (key, name)]
            if not mine:
                continue
            final = final_rows(mine)
            traces.setdefault(tuple(r["best"] for r in mine), []).append(name)
            summary.append(
                {
                    "problem": key,
                    "method": name,
                    "seeds": len(final),
                    "trials": int(final[0]["trials"]),
                    **summary_cells(final, optimum),
                }
            )
            plot_regret(ax, mine, "trials", optimum, ls=("-", "--", ":")[i % 3])
        same += [f"{key}: {' = '.join(n)}" for n in traces.values() if len(n) > 1]
        pending = PROBLEMS[key][2]
        ax.set(xlabel="trials", yscale="log", title=f"{key} (max {pending} pending)")
        ax.set_ylabel("simple regret (best value - optimum)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)
    settings = ", ".join(
        f"`{key}`: {t} trials, {s} Sobol, `max_pending_trials={p}`"
        for key, (t, s, p) in PROBLEMS.items()
    )
    write_report(
        out.with_suffix(".md"),
        "Named Ax strategies on Branin and Hartmann6 (`ax.benchmark`)",
        [
            "Every strategy of `list_generation_strategies()` and Ax's default "
            "(Sobol + `SingleTaskGP` + qLogNEI, `get_sobol_botorch_modular_"
            "acquisition`) as a `BenchmarkMethod` on Ax's registry problems "
            f"(noiseless, minimised; {settings}), one `benchmark_replication` per "
            "seed. Trials run in rounds of `max_pending_trials`, each generated "
            "with the earlier trials of its round pending. *best value*: Ax's "
            "oracle trace after the last trial; *score*: Ax's score trace (0 at the "
            "registry's Sobol baseline, 100 at the optimum); *Ax fit + gen wall*: "
            "Ax's fit and generation times (wall); *CPU*: the whole replication's "
            "CPU seconds (generation, Ax's bookkeeping and the traces). Cells are "
            "mean ± sd over seeds.",
            markdown_table(summary),
            "Identical traces (every seed and trial): "
            + ("; ".join(same) or "none")
            + ".",
            f"![simple regret per trial]({out.name}.png)",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--out", type=Path, default=RESULTS / "ax_strategies")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    args.methods = args.methods.split(",")
    args.problems = args.problems.split(",")
    unknown = set(args.methods) - set(METHODS) | set(args.problems) - set(PROBLEMS)
    if unknown:
        parser.error(f"unknown {sorted(unknown)}; known: {[*METHODS, *PROBLEMS]}")
    logging.getLogger("ax").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    csv_path = args.out.with_suffix(".csv")
    rows = read_csv(csv_path) if args.report_only else run(args)
    if not args.report_only:
        write_csv(csv_path, rows)
    report(rows, args.out)


if __name__ == "__main__":
    main()
