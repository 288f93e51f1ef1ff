"""Demo: Global-BBKB on Cadata (or a synthetic candidate set), ``make demo``.

Runs Global-BBKB (Calandriello et al., ICML 2020; :func:`botorch_sketch.loops.run_bbkb`
with the Lemma 1 stopping rule) on a finite candidate set:

* **Cadata** (California housing, A = 20,640, d = 8) when the data directory is
  found (:func:`botorch_sketch.datasets.find_data_dir`): features min-max scaled
  to [0, 1] per column, target rescaled to [0, 1], RBF lengthscale 12.5 (the
  paper's Table 1 bandwidth);
* otherwise (or with ``--synthetic``) a seeded **synthetic** set of A = 5,000
  points in [0, 1]^4 with a smooth function (a sum of Gaussian bumps), rescaled
  to [0, 1], RBF lengthscale 0.2.

Feedback is ``f(a) + N(0, 0.01^2)``; ``lam = 1e-4`` (= noise variance), ``C = 2``,
``q_bar = 2``, the paper's ``beta~`` schedule (``delta = 1/T``, ``F = 1``). The
demo writes ``<out>/bbkb_demo.csv`` (per-step records), ``<out>/bbkb_demo.json``
(summary) and ``<out>/bbkb_demo.png`` (regret ratio, batch size and cumulative
time vs ``t``) and logs a short summary.

Usage::

    python -m botorch_sketch.demo [--T 10000] [--out demo_output] [--synthetic]
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import pathlib
import time
from collections.abc import Sequence

import torch
from torch import Tensor

from botorch_sketch.bbkb import fixed_rbf_kernel
from botorch_sketch.datasets import find_data_dir, load_cadata, rescale_target
from botorch_sketch.loops import noisy_oracle, run_bbkb

logger = logging.getLogger("botorch_sketch.demo")

NOISE_STD = 0.01
LAM = 1e-4
C = 2.0
Q_BAR = 2.0


def synthetic_problem(
    num_arms: int = 5000, dim: int = 4, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """A seeded smooth test problem on a finite candidate set.

    ``f`` is a sum of 10 Gaussian bumps (lengthscale 0.25, random centres and
    positive amplitudes) on ``num_arms`` uniform points of ``[0, 1]^dim``,
    rescaled to [0, 1].

    Args:
        num_arms: Number of candidate points ``A``.
        dim: Dimension ``d``.
        seed: Seed.

    Returns:
        ``(arms, f)``: ``A x d`` float64 arms and ``A`` values in [0, 1].
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(num_arms, dim, generator=g, dtype=torch.float64)
    centres = torch.rand(10, dim, generator=g, dtype=torch.float64)
    amps = 0.5 + torch.rand(10, generator=g, dtype=torch.float64)
    sq = torch.cdist(X, centres).pow(2)
    f = (amps * torch.exp(-sq / (2 * 0.25**2))).sum(-1)
    return X, rescale_target(f)


def cadata_problem() -> tuple[Tensor, Tensor]:
    """Cadata arms min-max scaled to [0, 1] per column and ``f`` in [0, 1]."""
    X, y = load_cadata()
    lo, hi = X.amin(0), X.amax(0)
    return (X - lo) / (hi - lo), rescale_target(y)


def plot_demo(
    path: pathlib.Path, rr: Tensor, batch: Tensor, wall: Tensor, title: str
) -> None:
    """Regret ratio, batch size and cumulative time vs ``t`` in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = torch.arange(1, rr.numel() + 1)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].plot(t, rr)
    axes[0].set(
        xlabel="t", ylabel="R_t / R_t^unif", title="regret ratio", ylim=(0, None)
    )
    axes[1].plot(t, batch)
    axes[1].set(xlabel="t", ylabel="batch size", title="batch size", yscale="log")
    axes[2].plot(t, wall)
    axes[2].set(xlabel="t", ylabel="seconds", title="cumulative time (oracle excluded)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict:
    """Run the demo.

    Args:
        argv: Command-line arguments (``None``: ``sys.argv``).

    Returns:
        The summary dictionary also written to ``bbkb_demo.json``.
    """
    p = argparse.ArgumentParser(description="Global-BBKB demo (Cadata or synthetic).")
    p.add_argument("--T", type=int, default=10_000, help="horizon (default 10,000)")
    p.add_argument("--out", default="demo_output", help="output directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--synthetic",
        action="store_true",
        help="use the synthetic set even if the Cadata data are found",
    )
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    dataset = "synthetic"
    if not args.synthetic:
        try:
            find_data_dir()
            dataset = "cadata"
        except FileNotFoundError:
            logger.info("no data directory found: using the synthetic set.")
    if dataset == "cadata":
        arms, f = cadata_problem()
        lengthscale = 12.5
    else:
        arms, f = synthetic_problem(seed=args.seed)
        lengthscale = 1.0
    kernel = fixed_rbf_kernel(lengthscale)
    oracle = noisy_oracle(f, NOISE_STD, torch.Generator().manual_seed(1000 + args.seed))
    start = time.perf_counter()
    res = run_bbkb(
        arms,
        oracle,
        args.T,
        kernel,
        LAM,
        C=C,
        q_bar=Q_BAR,
        rule="global",
        beta="paper",
        xi=NOISE_STD,
        delta=1.0 / args.T,
        F=1.0,
        f_true=f,
        seed=args.seed,
        progress=not args.no_progress,
    )
    elapsed = time.perf_counter() - start
    rr = res.regret_ratio(f)

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "bbkb_demo.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [
                "t",
                "arm",
                "reward",
                "regret_ratio",
                "batch_size",
                "dict_size",
                "cum_time_s",
            ]
        )
        for i in range(rr.numel()):
            w.writerow(
                [
                    i + 1,
                    int(res.arms[i]),
                    f"{float(res.rewards[i]):.6g}",
                    f"{float(rr[i]):.6g}",
                    int(res.batch_size[i]),
                    int(res.dict_size[i]),
                    f"{float(res.wall_time[i]):.6g}",
                ]
            )
    summary = {
        "dataset": dataset,
        "num_arms": int(arms.shape[0]),
        "dim": int(arms.shape[1]),
        "T": args.T,
        "lengthscale": lengthscale,
        "lam": LAM,
        "C": C,
        "q_bar": Q_BAR,
        "noise_std": NOISE_STD,
        "beta": "paper",
        "seed": args.seed,
        "total_time_s": res.total_time,
        "wall_time_s": elapsed,
        "num_batches": res.num_batches,
        "max_batch_size": int(res.batch_sizes.max()),
        "final_dict_size": int(res.dict_size[-1]),
        "regret_ratio_T": float(rr[-1]),
        "best_value_found": float(f[res.arms].max()),
    }
    if not math.isfinite(summary["regret_ratio_T"]):
        logger.warning("non-finite regret ratio")
    (out / "bbkb_demo.json").write_text(json.dumps(summary, indent=2))
    plot_demo(
        out / "bbkb_demo.png",
        rr,
        res.batch_size,
        res.wall_time,
        f"Global-BBKB on {dataset} (A = {arms.shape[0]}, T = {args.T})",
    )
    logger.info(
        "Global-BBKB on %s (A=%d, d=%d), T=%d: %.2f s, %d batches (max size %d), "
        "final dictionary %d, regret ratio %.4f, best f found %.3f. Files in %s/.",
        dataset,
        arms.shape[0],
        arms.shape[1],
        args.T,
        res.total_time,
        res.num_batches,
        summary["max_batch_size"],
        summary["final_dict_size"],
        summary["regret_ratio_T"],
        summary["best_value_found"],
        out,
    )
    return summary


if __name__ == "__main__":
    main()
