"""Every named Ax strategy on Branin and Hartmann6 through ``ax.Client``.

For each strategy of :func:`botorch_sketch.ax.list_generation_strategies`, and for
Ax's own default (``client.configure_generation_strategy(method="fast")``: Sobol,
then ``SingleTaskGP`` + qLogNEI) as the reference, runs ``--seeds`` seeded Client
experiments that keep ``pending`` trials running while new ones are generated
(Branin: 25 trials, 5 Sobol, 1 pending; Hartmann6: 40 trials, 8 Sobol, 2 pending),
and records the best observed value (both problems are minimised) and the wall time
of generation (fits and acquisition optimisation; evaluations are instantaneous).

Writes ``benchmarks/results/ax_strategies.{csv,md,png}``.

Usage::

    python benchmarks/bench_ax.py [--seeds 3] [--names bbkb,gssbo] [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch
from ax import Client, RangeParameterConfig
from botorch.test_functions import Branin, Hartmann

from botorch_sketch.ax import get_generation_strategy, list_generation_strategies

REPO_ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = {
    # name: (function, bounds, trials, Sobol trials, pending, optimum)
    "branin": (Branin(), [(-5.0, 10.0), (0.0, 15.0)], 25, 5, 1, 0.397887),
    "hartmann6": (Hartmann(dim=6), [(0.0, 1.0)] * 6, 40, 8, 2, -3.32237),
}
AX_DEFAULT = "ax-default"


def run_one(name: str, problem: str, seed: int) -> dict:
    """One Client experiment; returns the best value per trial and the time."""
    f, bounds, total, n_init, pending, _ = PROBLEMS[problem]
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=b)
            for i, b in enumerate(bounds)
        ]
    )
    client.configure_optimization(objective=f"-{problem}")
    if name == AX_DEFAULT:
        client.configure_generation_strategy(
            method="fast", initialization_budget=n_init, initialize_with_center=False
        )
    else:
        client.set_generation_strategy(
            get_generation_strategy(name, seed=seed, initialization_budget=n_init)
        )
    values: dict[int, float] = {}
    running: dict[int, dict] = {}
    gen_time = 0.0
    while len(values) + len(running) < total:
        start = time.perf_counter()
        room = total - len(values) - len(running)
        running.update(client.get_next_trials(max_trials=min(room, pending + 1)))
        gen_time += time.perf_counter() - start
        while len(running) > (pending if len(values) + len(running) < total else 0):
            index = min(running)
            params = running.pop(index)
            x = torch.tensor([[params[f"x{i}"] for i in range(len(bounds))]])
            values[index] = float(f(x))
            client.complete_trial(index, raw_data={problem: values[index]})
    ordered = [values[i] for i in sorted(values)]
    best = torch.tensor(ordered).cummin(0).values.tolist()
    return {
        "best_sobol": min(ordered[:n_init]),
        "best": best[-1],
        "curve": best,
        "gen_time_s": gen_time,
    }


def write_report(rows: list[dict], out: Path) -> None:
    """Markdown table (medians over seeds) and a best-value plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r["strategy"] for r in rows}, key=lambda n: (n == AX_DEFAULT, n))
    lines = [
        "# Named Ax strategies on Branin and Hartmann6 (ax.Client)",
        "",
        f"Machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
        f"load average at the end {os.getloadavg()[0]:.1f}. "
        "Medians over seeds; values are minimised (Branin optimum 0.398, "
        "Hartmann6 optimum -3.322).",
        "",
        "| problem | strategy | seeds | best Sobol value | best value | "
        "generation time (s) |",
        "|---|---|---|---|---|---|",
    ]
    fig, axes = plt.subplots(1, len(PROBLEMS), figsize=(6 * len(PROBLEMS), 4))
    for ax, problem in zip(axes, PROBLEMS, strict=True):
        for name in names:
            sel = [r for r in rows if r["strategy"] == name and r["problem"] == problem]
            if not sel:
                continue
            med = {
                k: statistics.median(r[k] for r in sel)
                for k in ("best_sobol", "best", "gen_time_s")
            }
            lines.append(
                f"| {problem} | {name} | {len(sel)} | {med['best_sobol']:.3f} | "
                f"{med['best']:.3f} | {med['gen_time_s']:.1f} |"
            )
            curves = torch.tensor([r["curve"] for r in sel])
            ax.plot(range(1, curves.shape[1] + 1), curves.median(0).values, label=name)
        ax.axhline(PROBLEMS[problem][5], color="k", ls="--", lw=0.8)
        ax.set(xlabel="trial", ylabel="best value (median over seeds)", title=problem)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "ax_strategies.png", dpi=100)
    (out / "ax_strategies.md").write_text(
        "\n".join(lines) + "\n\n![best value per trial](ax_strategies.png)\n"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    names = [*list_generation_strategies(), AX_DEFAULT]
    p.add_argument("--names", default=",".join(names))
    p.add_argument("--problems", default=",".join(PROBLEMS))
    p.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("ax").setLevel(logging.ERROR)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem in args.problems.split(","):
        for name in args.names.split(","):
            for seed in range(args.seeds):
                row = {"problem": problem, "strategy": name, "seed": seed}
                row.update(run_one(name, problem, seed))
                logging.info(
                    "%s %s seed %d: best %.3f (Sobol %.3f), %.1f s",
                    problem, name, seed, row["best"], row["best_sobol"],
                    row["gen_time_s"],
                )
                rows.append(row)
    with (out / "ax_strategies.csv").open("w", newline="") as fh:
        keys = ["problem", "strategy", "seed", "best_sobol", "best", "gen_time_s"]
        writer = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    write_report(rows, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
