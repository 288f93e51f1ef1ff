"""Run every benchmark in ``benchmarks/``, in a fixed order (``make bench``).

Each benchmark is a script run in its own process with the Python interpreter
running this file, from the repository root, with its default arguments (they
write their results under ``benchmarks/results/``). Extra command-line arguments
of this script are rejected: run a benchmark script directly to change its
arguments.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

logger = logging.getLogger("run_all")

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Benchmark scripts (relative to the repository root) and their arguments.
BENCHMARKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("benchmarks/bench_nystrom.py", ()),
    # NystromGP with twice the default budget where it binds (same CSV, resumed).
    (
        "benchmarks/bench_nystrom.py",
        (
            "--methods",
            "nystrom2000",
            "--datasets",
            "synthetic",
            "--sizes",
            "4000,20000,100000",
        ),  # fmt: skip
    ),
    # Before bench_bbkb, whose reports quote bbkb_reference.csv. The authors' code
    # is used when BBKB_REFERENCE_CODE names a local copy of it.
    ("benchmarks/bench_resparsify.py", ()),
    ("benchmarks/bench_bbkb.py", ()),
    ("benchmarks/bench_bbkb_dtype.py", ()),
    # bench_gssbo's defaults are the paper's protocol (days of CPU here): run the
    # reduced settings recorded in results/gssbo_summary.md.
    (
        "benchmarks/bench_gssbo.py",
        tuple(
            "--problems hart6 --methods exact,gssbo,gssbo_scalar,rssbo,nystrom "
            "--iterations 200 --seeds 3 --subset-size 50 --jobs 2 --tag hart6".split()
        ),
    ),
    (
        "benchmarks/bench_gssbo.py",
        tuple(
            "--problems powell50 --methods exact,gssbo,rssbo,gssbo_scalar,nystrom "
            "--iterations 100 --seeds 1 --subset-size 50 --tag powell50".split()
        ),
    ),
    (
        "benchmarks/bench_gssbo.py",
        tuple(
            "--scaling --problems hart6,powell50 --scaling-sizes "
            "100,250,500,750,1000 --seeds 2 --subset-size 100 --tag m100".split()
        ),
    ),
    (
        "benchmarks/bench_gssbo.py",
        tuple(
            "--scaling --cold-start --problems hart6 --scaling-sizes "
            "100,250,500,750,1000 --seeds 2 --subset-size 100 --tag m100cold".split()
        ),
    ),
    ("benchmarks/bench_goucb.py", ()),
    (
        "benchmarks/bench_perf.py",
        (
            "--standardized-runs",
            "1",
            "--T-standardized",
            "1000",
            "--nystrom-threads",
            "2",
        ),  # fmt: skip
    ),
    ("benchmarks/bench_ax.py", ()),
    ("benchmarks/bench_ax_workers.py", ()),
    ("benchmarks/bench_ax_library.py", ()),
    ("benchmarks/bench_choices.py", ()),
    # Issue 15: per-call time vs N (two noise levels; Ax's default capped at 300 s
    # per call), then the 5,000-trial run. Not concurrently: they time each other.
    ("benchmarks/bench_ax_scaling.py", ("--noise-sd", "0.05")),
    (
        "benchmarks/bench_ax_scaling.py",
        tuple(
            "--noise-sd 0.5 --sizes 500,2000,8000 --methods bkb,bbkb,ax-default".split()
        ),
    ),
    ("benchmarks/bench_ax_long_run.py", ()),
    # Issue 24: large budgets (TuRBO-1, "bbkb", "turbo-bkb", Ax's default, Sobol),
    # completing trials per batch, the 10-seed stall check and repeats on discrete
    # spaces.
    ("benchmarks/bench_large_budget.py", ()),
    ("benchmarks/bench_batch_ucb.py", ("--batch",)),
    ("benchmarks/bench_step_tolerance.py", ()),
    ("benchmarks/bench_completion.py", ()),
    ("benchmarks/bench_pending.py", ()),
    ("benchmarks/bench_ax_call.py", ()),
    ("benchmarks/bench_turbo_bkb.py", ()),
    ("benchmarks/bench_stall.py", ()),
    ("benchmarks/bench_discrete_repeats.py", ()),
    # Issue 25: the model and engine rows on this machine's device.
    ("benchmarks/bench_gpu.py", ()),
    ("benchmarks/bench_exact_posterior.py", ()),
    # Issue 27: k workers on a local Ray (needs the `ray` extra).
    ("benchmarks/bench_ray_workers.py", ()),
    ("benchmarks/bench_strategy_call.py", ()),
    ("benchmarks/bench_learning.py", ()),
    ("benchmarks/bench_ax_seeds.py", ()),
)


def run_benchmark(script: str, args: tuple[str, ...]) -> int:
    """Run one benchmark script and return its exit status.

    Args:
        script: Path of the script relative to the repository root.
        args: Command-line arguments of the script.

    Returns:
        The exit status of the script's process.
    """
    cmd = [sys.executable, script, *args]
    logger.info("running %s", " ".join(cmd))
    start = time.perf_counter()
    status = subprocess.run(cmd, cwd=REPO_ROOT, check=False).returncode
    logger.info(
        "%s finished with status %d in %.1f min",
        script,
        status,
        (time.perf_counter() - start) / 60,
    )
    return status


def main(argv: list[str] | None = None) -> int:
    """Run all benchmarks; return 1 if any of them failed, else 0.

    Args:
        argv: Must be empty (default: ``sys.argv[1:]``).

    Returns:
        The process exit status.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print(f"run_all.py takes no arguments (got {argv}).", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    failed = [script for script, args in BENCHMARKS if run_benchmark(script, args)]
    if failed:
        logger.error("failed benchmarks: %s", ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
