"""Repeated configurations in filled "bbkb" batches on a tabular discrete problem.

What is measured, and why: issue 24 reports that on a tabular HPO benchmark (9
ordinal/categorical parameters) 50-point "bbkb" batches re-ran configurations
already evaluated, up to 48 of 50 inside one batch. This script builds a tabular
problem of the same shape with a known objective and counts, per run, the
evaluations of a configuration already evaluated (or earlier in its batch), next
to the simple regret of the best evaluated configuration.

Problem: the issue's table is not available here; this one has its size and
kinds: 4 ordinal parameters with 4 levels, 3 ordinal with 3 levels and 2
categorical ones with 3 levels (4^4 3^3 3 3 = 62,208 configurations).
``f(x) = -sum_i w_i (u_i - c_i)^2 + b[cat1] + b'[cat2] + 0.3 u_0 u_1`` with
``u_i`` the ordinal level scaled to [0, 1]; observations ``f + N(0, 0.05^2)``,
maximised. The optimum is found by enumeration.

Variants: ``new-points`` (the package: ``prefer_new_points=True``) and
``plain`` (``prefer_new_points=False``: the plain argmax of the batch UCB,
the behaviour the issue reports), patched into the Ax acquisition's call;
``turbo-bkb`` (``get_generation_strategy("turbo-bkb", batch_size=50)``, whose
region candidates are projected onto the configurations on an all-discrete
space since commit 8f8b7de; since session 37 with its window and mean-incumbent
defaults), ``turbo-bkb-published`` (rows only: the same before session 37, TuRBO's
rules for the region's model and incumbent) and ``turbo-bkb-relaxed`` (rows only:
the strategy before 8f8b7de, run from that commit's parent).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_discrete_repeats.py --seeds 0 \
        --trials 500 --variants new-points,plain [--fast]

Each run prints a progress line per batch; ``--progress-logs LOG...`` writes
the results from such lines (runs stopped before the end, e.g. one process per
seed and variant) and compares the variants at equal trials.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from ax import ChoiceParameterConfig, Client  # noqa: E402
from ax_hartmann import quiet  # noqa: E402

import botorch_sketch.ax.acquisition as ax_acquisition  # noqa: E402
from botorch_sketch.ax import get_generation_strategy  # noqa: E402
from botorch_sketch.ax.trials import get_next_batch  # noqa: E402

ORDINAL = [4, 4, 4, 4, 3, 3, 3]
CATEGORICAL = [3, 3]
CENTER = [0.7, 0.3, 0.6, 1.0, 0.0, 0.5, 1.0]
WEIGHT = [1.0, 0.8, 0.6, 0.5, 0.4, 0.3, 0.2]
CAT_EFFECT = [[0.0, 0.25, -0.1], [0.0, -0.2, 0.15]]
NOISE_SD = 0.05
BATCH = 50
#: ``--fast``: cheaper acquisition optimisation of every greedy step.
FAST_OPTIMIZER = {"num_restarts": 2, "raw_samples": 64}
CSV = "discrete_repeats.csv"


def value(cfg: dict) -> float:
    """The noiseless objective of one configuration (maximised)."""
    u = [cfg[f"o{i}"] / (n - 1) for i, n in enumerate(ORDINAL)]
    f = -sum(w * (ui - c) ** 2 for w, ui, c in zip(WEIGHT, u, CENTER, strict=True))
    f += sum(CAT_EFFECT[j][int(cfg[f"c{j}"][1:])] for j in range(len(CATEGORICAL)))
    return f + 0.3 * u[0] * u[1]


def optimum() -> float:
    """The best noiseless value, by enumeration."""
    levels = [range(n) for n in ORDINAL] + [range(n) for n in CATEGORICAL]
    best = -float("inf")
    for combo in itertools.product(*levels):
        cfg = {f"o{i}": combo[i] for i in range(len(ORDINAL))}
        cfg |= {f"c{j}": f"k{combo[len(ORDINAL) + j]}" for j in range(len(CATEGORICAL))}
        best = max(best, value(cfg))
    return best


def new_client(seed: int) -> Client:
    """The tabular problem as an ``ax.Client`` experiment."""
    client = Client(random_seed=seed)
    params = [
        ChoiceParameterConfig(
            name=f"o{i}", parameter_type="int", values=list(range(n)), is_ordered=True
        )
        for i, n in enumerate(ORDINAL)
    ] + [
        ChoiceParameterConfig(
            name=f"c{j}",
            parameter_type="str",
            values=[f"k{v}" for v in range(n)],
            is_ordered=False,
        )
        for j, n in enumerate(CATEGORICAL)
    ]
    client.configure_experiment(parameters=params)
    client.configure_optimization(objective="f")
    return client


def run(
    seed: int, trials: int, variant: str, best_value: float, optimizer: dict
) -> dict:
    """One run; repeats counted against every earlier evaluation."""
    original = ax_acquisition.optimize_acqf_adaptive_batch
    if variant == "plain":
        ax_acquisition.optimize_acqf_adaptive_batch = functools.partial(
            original, prefer_new_points=False
        )
    try:
        client = new_client(seed)
        if variant.startswith("turbo-bkb"):
            strategy = get_generation_strategy("turbo-bkb", seed=seed, batch_size=BATCH)
        else:
            strategy = get_generation_strategy(
                "bbkb", seed=seed, min_batch_size=BATCH, **optimizer
            )
        client.set_generation_strategy(strategy)
        gen = torch.Generator().manual_seed(seed)
        seen: set[tuple] = set()
        repeats, in_batch_max, done, best = 0, 0, 0, -float("inf")
        cpu0 = time.process_time()
        while done < trials:
            batch = get_next_batch(client, min(BATCH, trials - done))
            in_batch = 0
            for index, cfg in batch.items():
                key = tuple(sorted(cfg.items()))
                if key in seen:
                    repeats += 1
                    in_batch += 1
                seen.add(key)
                f = value(cfg)
                y = f + NOISE_SD * float(torch.randn(1, generator=gen))
                client.complete_trial(index, raw_data={"f": y})
                best = max(best, f)
            in_batch_max = max(in_batch_max, in_batch)
            done += len(batch)
            print(
                f"{variant} seed {seed}: {done} trials, {repeats} repeats, "
                f"regret {best_value - best:.4g}, cpu {time.process_time() - cpu0:.0f}",
                flush=True,
            )
    finally:
        ax_acquisition.optimize_acqf_adaptive_batch = original
    return {
        "variant": variant,
        "seed": seed,
        "trials": done,
        "repeats": repeats,
        "repeat share": repeats / done,
        "max repeats in a batch": in_batch_max,
        "regret": best_value - best,
        "restarts/raw": "-"
        if variant.startswith("turbo-bkb")
        else f"{optimizer.get('num_restarts', 'default')}/"
        f"{optimizer.get('raw_samples', 'default')}",
        "cpu_s": time.process_time() - cpu0,
        "load": os.getloadavg()[0],
    }


def report(out: Path) -> None:
    """``discrete_repeats.md`` from the CSV."""
    rows = harness.read_csv(out / CSV)
    summary = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        summary.append(
            {
                "variant": variant,
                "runs": len(mine),
                "median repeat share": statistics.median(
                    r["repeat share"] for r in mine
                ),
                "worst repeat share": max(r["repeat share"] for r in mine),
                "median regret": statistics.median(r["regret"] for r in mine),
                "worst regret": max(r["regret"] for r in mine),
            }
        )
    sections = [
        "Tabular problem of `benchmarks/bench_discrete_repeats.py` (9 choice "
        "parameters, 62,208 configurations, a synthetic stand-in for the "
        "issue's table, noise sd 0.05), "
        f'`get_generation_strategy("bbkb", min_batch_size={BATCH})` (variants '
        f'new-points, plain) or `get_generation_strategy("turbo-bkb", '
        f"batch_size={BATCH})` (turbo-bkb, turbo-bkb-relaxed; module docstring) + "
        f"`get_next_batch(client, {BATCH})`; a repeat is an evaluation of a "
        "configuration evaluated before (or earlier in its batch). One torch "
        "thread, shared 2-core machine (load per row).",
        "## Summary",
        harness.markdown_table(summary),
        "## Per run",
        harness.markdown_table(rows),
    ]
    harness.write_report(
        out / "discrete_repeats.md", "Repeats on a tabular problem", sections
    )


PROGRESS = re.compile(
    r"(\S+) seed (\d+): (\d+) trials, (\d+) repeats, regret (\S+), cpu (\d+)"
)


def report_progress(logs: list[Path], out: Path, optimizer: dict) -> None:
    """``discrete_repeats.{csv,md}`` from the per-batch progress lines of runs
    (their stdout), for runs cut before the end; both variants are compared at
    the largest trial count every run reached."""
    rows = []
    for log in logs:
        for match in map(PROGRESS.match, log.read_text().splitlines()):
            if match:
                variant, seed, trials, repeats, regret, cpu = match.groups()
                rows.append(
                    {
                        "variant": variant,
                        "seed": int(seed),
                        "trials": int(trials),
                        "repeats": int(repeats),
                        "repeat share": int(repeats) / int(trials),
                        "regret": float(regret),
                        "cpu_s": int(cpu),
                    }
                )
    harness.write_csv(out / CSV, rows)
    last = {(r["variant"], r["seed"]): r for r in rows}
    common = min(r["trials"] for r in last.values())
    summary = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        at = [r for r in rows if r["variant"] == variant and r["trials"] == common]
        reached = sorted(
            (r["seed"], r["trials"]) for (v, _), r in last.items() if v == variant
        )
        summary.append(
            {
                "variant": variant,
                "runs": len(at),
                "trials": common,
                "median repeat share": statistics.median(r["repeat share"] for r in at),
                "worst repeat share": max(r["repeat share"] for r in at),
                "median regret": statistics.median(r["regret"] for r in at),
                "worst regret": max(r["regret"] for r in at),
                "trials reached": ", ".join(f"seed {s}: {t}" for s, t in reached),
            }
        )
    sections = [
        "Tabular problem of `benchmarks/bench_discrete_repeats.py` (9 choice "
        "parameters, 62,208 configurations, a synthetic stand-in for the issue's "
        "table, noise sd 0.05), "
        f'`get_generation_strategy("bbkb", min_batch_size={BATCH}, '
        f"**{optimizer})` + `get_next_batch(client, {BATCH})`; a repeat is an "
        "evaluation of a configuration evaluated before (or earlier in its "
        "batch). Rows: the per-batch progress lines of one process per (variant, "
        "seed), all run at once under nice 10 on the shared 2-core machine; "
        "cpu_s is the run's CPU seconds so far; load average when this report "
        f"was written: {' '.join(f'{x:.1f}' for x in os.getloadavg())}.",
        "## Summary at equal trials",
        harness.markdown_table(summary),
        "## Per batch",
        harness.markdown_table(rows),
    ]
    harness.write_report(
        out / "discrete_repeats.md", "Repeats on a tabular problem", sections
    )


def main(argv: list[str] | None = None) -> int:
    """Run every (variant, seed), write the CSV, then report."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0")
    p.add_argument("--trials", type=int, default=500)
    p.add_argument("--variants", default="new-points,plain")
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument(
        "--fast",
        action="store_true",
        help="cheaper acquisition optimisation (2 restarts, 64 raw samples)",
    )
    p.add_argument(
        "--progress-logs",
        nargs="+",
        type=Path,
        help="write the results from these runs' progress lines instead of running",
    )
    p.add_argument("--report", action="store_true", help="only write the report")
    args = p.parse_args(argv)
    if args.report:
        report(args.out)
        return 0
    if args.progress_logs:
        optimizer = FAST_OPTIMIZER if args.fast else {}
        report_progress(args.progress_logs, args.out, optimizer)
        return 0
    quiet()
    best_value = optimum()
    path = args.out / CSV
    rows = harness.read_csv(path) if path.exists() else []
    for variant in args.variants.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            optimizer = FAST_OPTIMIZER if args.fast else {}
            rows.append(run(seed, args.trials, variant, best_value, optimizer))
            print(rows[-1], flush=True)
            harness.write_csv(path, rows)
    report(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
