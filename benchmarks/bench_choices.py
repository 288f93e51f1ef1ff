"""One BBKB batch over a finite library: the engine vs a per-point scan (issue 16).

``optimize_acqf_adaptive_batch(model, choices=...)`` (what the Ax strategies run
with a ``candidate_set``) selects the batch with BBKB's finite-arm engine: the
batch UCB of the rows becomes a frozen engine state (one sweep over the rows)
and ``bbkb.select_batch`` picks the points with pooled Sherman-Morrison
downdates. Before, every point was the argmax of a scan of the batch UCB over
all rows (``O(A m (d + r))`` per point). This script times one call of each on
the same model and checks that they return the same rows:

* problem: the 20,640 Cadata rows, features standardized, rewards rescaled to
  [0, 1] (``bench_bbkb.load_problem``); a ``NystromGP`` (default kernel and
  ``Standardize``) fitted by ``fit_gpytorch_mll`` on 2,000 seeded random rows
  with noise sd 0.01;
* ``engine``: ``optimize_acqf_adaptive_batch(choices=rows)``; ``state_s`` is the
  part spent building the engine state (``BatchUpperConfidenceBound.batch_state``);
* ``scan``: the previous algorithm, the box path of the same function with a step
  optimizer that evaluates the batch UCB on all rows in chunks of 4,096 and the
  rows as the local rule's reference set (``tests/optim`` checks it returns the
  same batch);
* batch rules: global and global-local with ``C = 2``, and global with
  ``min_batch_size = 16`` and ``64`` (``k`` workers); ``alpha`` from BoTorch's
  ``beta = 4`` (a two-sigma UCB), at most 64 points.

Run single-threaded: ``OMP_NUM_THREADS=1 python benchmarks/bench_choices.py``.

``--synthetic-rows N`` instead measures the engine alone on ``N`` seeded uniform
rows in ``[0, 1]^8`` (a smooth sum of sines, same model protocol): peak resident
memory of the process before and after the call (issue 16: ``A = 10^6``
candidates in bounded memory), written to ``choices_engine_rows<N>.{md,csv}``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import pathlib
import resource
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from bench_bbkb import load_problem  # noqa: E402
from botorch.fit import fit_gpytorch_mll  # noqa: E402
from gpytorch.mlls import ExactMarginalLogLikelihood  # noqa: E402
from harness import RESULTS, markdown_table, timed, write_csv, write_report  # noqa: E402

from botorch_sketch.acquisition import BatchUpperConfidenceBound  # noqa: E402
from botorch_sketch.models import NystromGP  # noqa: E402
from botorch_sketch.optim import optimize_acqf_adaptive_batch  # noqa: E402

logger = logging.getLogger("bench_choices")

NUM_PULLED, NOISE_STD, BETA, MAX_BATCH, CHUNK = 2_000, 0.01, 4.0, 64, 4096
#: (rule, C, min_batch_size)
CONFIGS = [
    ("global", 2.0, 1),
    ("global_local", 2.0, 1),
    ("global", 2.0, 16),
    ("global", 2.0, 64),
]


def fit_model(arms: torch.Tensor, f: torch.Tensor, seed: int) -> NystromGP:
    """A NystromGP fitted on ``NUM_PULLED`` seeded random rows with noisy rewards."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randperm(arms.shape[0], generator=g)[:NUM_PULLED]
    y = f[rows] + NOISE_STD * torch.randn(NUM_PULLED, generator=g, dtype=f.dtype)
    model = NystromGP(arms[rows], y.unsqueeze(-1), seed=seed)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    model.eval()
    return model


def scan_batch(model, choices, rule, alpha, C, min_batch_size):
    """The previous finite path: every point by a scan of all rows."""
    rows: list[int] = []

    def scan(acqf, step):
        with torch.no_grad():
            vals = torch.cat([acqf(c.unsqueeze(-2)) for c in choices.split(CHUNK)])
        i = int(torch.argmax(vals))
        rows.append(i)
        return choices[i], vals[i]

    bounds = torch.stack([choices.min(0).values, choices.max(0).values])
    optimize_acqf_adaptive_batch(
        model,
        bounds,
        rule,
        alpha=alpha,
        max_batch_size=MAX_BATCH,
        C=C,
        min_batch_size=min_batch_size,
        step_optimizer=scan,
        reference_points=choices,
    )
    return rows


def engine_call(model, choices, rule, alpha, C, min_batch_size):
    """The engine path: ``optimize_acqf_adaptive_batch(choices=...)``."""
    return optimize_acqf_adaptive_batch(
        model,
        None,
        rule,
        alpha=alpha,
        max_batch_size=MAX_BATCH,
        C=C,
        min_batch_size=min_batch_size,
        choices=choices,
    )


def engine_batch(model, choices, rule, alpha, C, min_batch_size):
    """The engine path; returns the row indices."""
    cand, _ = engine_call(model, choices, rule, alpha, C, min_batch_size)
    match = (cand.unsqueeze(1) == choices.unsqueeze(0)).all(-1)
    return match.int().argmax(-1).tolist()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux: KB units)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic_memory(num_rows: int, seed: int) -> None:
    """Engine call on ``num_rows`` synthetic rows; peak memory before and after."""
    g = torch.Generator().manual_seed(seed)
    arms = torch.rand(num_rows, 8, generator=g, dtype=torch.float64)
    f = torch.sin(3.0 * arms).sum(-1) / 8.0
    model, fit_time = timed(lambda: fit_model(arms, f, seed))
    alpha = float(BatchUpperConfidenceBound.from_botorch_beta(model, BETA).alpha)
    data_mb = arms.numel() * arms.element_size() / 2**20
    rows = []
    for rule, C, kmin in CONFIGS:
        before = peak_rss_mb()
        (cand, _), t = timed(
            functools.partial(engine_call, model, arms, rule, alpha, C, kmin)
        )
        row = {
            "rows": num_rows,
            "rule": rule,
            "min_batch_size": kmin,
            "batch_size": cand.shape[0],
            "wall_s": t["wall_s"],
            "cpu_s": t["cpu_s"],
            "load": t["load"],
            "peak_rss_before_mb": before,
            "peak_rss_after_mb": peak_rss_mb(),
        }
        logger.info("%s", row)
        rows.append(row)
    tag = f"choices_engine_rows{num_rows}"
    write_csv(RESULTS / f"{tag}.csv", rows)
    write_report(
        RESULTS / f"{tag}.md",
        f"The engine on {num_rows:,} candidate rows: time and peak memory",
        [
            f"{num_rows:,} seeded uniform rows in [0, 1]^8 ({data_mb:.0f} MB as "
            f"float64), rewards `sum(sin(3 x)) / 8` with noise sd {NOISE_STD}; "
            f"NystromGP fitted on {NUM_PULLED:,} random rows: dictionary m = "
            f"{model.dictionary_size}, fit {fit_time['wall_s']:.1f} s. Peak RSS "
            "is the process's `ru_maxrss` (data, model and libraries included) "
            "before and after each call: the growth is what the call needed, "
            "plus what the allocator keeps: glibc's dynamic mmap threshold lets "
            "freed chunk-sized temporaries fragment the heap (measured at "
            "200,000 rows: +350-670 MB across identical runs, +90 MB with "
            "`MALLOC_MMAP_THRESHOLD_=131072`). This run: MALLOC_MMAP_THRESHOLD_="
            f"{os.environ.get('MALLOC_MMAP_THRESHOLD_', 'unset')}.",
            markdown_table(rows),
        ],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", default="choices_engine")
    parser.add_argument("--synthetic-rows", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    torch.set_num_threads(1)
    if args.synthetic_rows:
        synthetic_memory(args.synthetic_rows, args.seed)
        return
    arms, f = load_problem("cadata", "standardize")
    model, fit_time = timed(lambda: fit_model(arms, f, args.seed))
    alpha = float(BatchUpperConfidenceBound.from_botorch_beta(model, BETA).alpha)
    acqf = BatchUpperConfidenceBound(model, alpha)
    state, state_time = timed(lambda: acqf.batch_state(arms))
    state_mb = sum(
        t.numel() * t.element_size()
        for t in vars(state).values()
        if isinstance(t, torch.Tensor)
    )
    logger.info(
        "model: m=%d, fit %.1fs; alpha=%.3g; engine state %.2fs, %.1f MB",
        model.dictionary_size,
        fit_time["wall_s"],
        alpha,
        state_time["wall_s"],
        state_mb / 2**20,
    )
    rows = []
    for rule, C, kmin in CONFIGS:
        kw = dict(model=model, choices=arms, rule=rule, alpha=alpha, C=C)
        eng, t_eng = timed(functools.partial(engine_batch, **kw, min_batch_size=kmin))
        ref, t_ref = timed(functools.partial(scan_batch, **kw, min_batch_size=kmin))
        row = {
            "rule": rule,
            "C": C,
            "min_batch_size": kmin,
            "batch_size": len(eng),
            "same_rows": eng == ref,
            "engine_wall_s": t_eng["wall_s"],
            "engine_cpu_s": t_eng["cpu_s"],
            "scan_wall_s": t_ref["wall_s"],
            "scan_cpu_s": t_ref["cpu_s"],
            "speedup_cpu": t_ref["cpu_s"] / t_eng["cpu_s"],
            "load": 0.5 * (t_eng["load"] + t_ref["load"]),
        }
        logger.info("%s", row)
        rows.append(row)
    write_csv(RESULTS / f"{args.tag}.csv", rows)
    setup = (
        f"Cadata, A = {arms.shape[0]:,} rows x d = {arms.shape[1]} (standardized); "
        f"NystromGP fitted on {NUM_PULLED:,} random rows (seed {args.seed}): "
        f"dictionary m = {model.dictionary_size}, fit {fit_time['wall_s']:.1f} s. "
        f"alpha = {alpha:.3g} (BoTorch beta = {BETA}), max_batch_size = "
        f"{MAX_BATCH}, one thread. Engine state of all rows: built in "
        f"{state_time['wall_s']:.2f} s (wall), {state_mb / 2**20:.1f} MB held "
        f"(rows, means, variances, prior variances and the r x r factor; no A x m "
        f"or A x A block)."
    )
    write_report(
        RESULTS / f"{args.tag}.md",
        "One `optimize_acqf_adaptive_batch(choices=...)` call: engine vs scan",
        [
            "## Setup\n\n" + setup,
            "## One batch\n\n"
            + markdown_table(rows)
            + "\n\n`engine`: the current path (engine state + pooled selection); "
            "`scan`: the previous path (batch UCB of all rows per point). Times "
            "in seconds for the whole call; `same_rows`: both return the same "
            "rows in the same order.",
        ],
    )


if __name__ == "__main__":
    main()
