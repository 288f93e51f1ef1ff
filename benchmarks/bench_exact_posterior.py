"""The exact posterior where the device budget caps the sketch (issue 25).

For each (dataset, n): ``NystromGP`` fitted by ``fit_gpytorch_mll`` with

- ``default``: the defaults (the device budget; every point where the capped
  sketch misses its accuracy criterion and the exact caches fit a model build's
  time, ``exact_window="build"``, ``LeverageScorePolicy.exact_is_cheaper``);
- ``posterior-window``: ``exact_window="posterior"`` (every point only where
  the exact caches cost no more than the capped sketch's: the Ax strategies'
  choice);
- ``sketch-at-cap``: ``max_dictionary_size`` fixed to the device's cap (what the
  defaults gave before every point became an option of the budget);
- ``all``: ``dictionary="all"`` (every point whatever the cost);
- ``exact`` (``n <= --exact-max-n``): ``SingleTaskGP``, fitted on every point.

Recorded per row: dictionary size, whether the budget capped it, the mean
Nystrom residual, CPU seconds (``time.process_time``, one torch thread) of the
fit and of the prediction (the posterior caches plus the 2,000 test points'
variances), the test NLL with observation noise (``bench_gpu.nll``), and the
posterior-cache build alone (``cache_s``: the first ``posterior`` call at one
point after the fit) and, on cuda, its peak memory above the fitted model's in
``n x n`` blocks of the data's dtype (``cache_peak_blocks``; the budget assumes
``EXACT_MEMORY_BLOCKS`` for the exact posterior). With ``--acquisition``, also
the CPU seconds of one BoTorch ``optimize_acqf`` of ``qLogExpectedImprovement``
(``q = 1``, 10 restarts, 512 raw samples, seeded) on the fitted model
(``acquisition_cpu_s``): what a plain BoTorch loop pays per iteration on top
of the fit. Data as
``bench_nystrom.load_data``: low-noise Hartmann6 (``synthetic``, noise sd 0.05)
and standardized Cadata.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_exact_posterior.py \
        --cells synthetic:2000,synthetic:4000,cadata:4000 [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from gpytorch.mlls import ExactMarginalLogLikelihood

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import nll  # noqa: E402
from bench_nystrom import load_data  # noqa: E402

from botorch_sketch.models import NystromGP  # noqa: E402
from botorch_sketch.models.budget import (  # noqa: E402
    device_dictionary_cap,
    device_facts,
)

logger = logging.getLogger("bench_exact_posterior")
RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("default", "posterior-window", "sketch-at-cap", "all", "exact")


def build(method: str, X: torch.Tensor, Y: torch.Tensor, seed: int) -> Any:
    if method == "exact":
        return SingleTaskGP(X, Y)
    if method == "all":
        return NystromGP(X, Y, seed=seed, dictionary="all")
    if method == "posterior-window":
        return NystromGP(X, Y, seed=seed, exact_window="posterior")
    if method == "sketch-at-cap":
        cap = device_dictionary_cap(device_facts(X.device), X.shape[0], X.shape[1])
        return NystromGP(X, Y, seed=seed, max_dictionary_size=cap)
    return NystromGP(X, Y, seed=seed)


def row(dataset: str, n: int, method: str, args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    data = {k: v.to(device) for k, v in load_data(dataset, n, args.seed).items()}
    start = time.process_time()
    model = build(method, data["train_X"], data["train_Y"], args.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        fit_s = time.process_time() - start
        model.eval()
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        t = time.process_time()
        model.posterior(data["test_X"][:1])
        cache_s = time.process_time() - t
        # The cache build's peak memory above what the fitted model held, in
        # n x n blocks (budget.EXACT_MEMORY_BLOCKS counts the exact posterior's).
        block = data["train_X"].element_size() * n * n
        peak_blocks = (
            round((torch.cuda.max_memory_allocated(device) - before) / block, 2)
            if cuda
            else None
        )
        t = time.process_time()
        chunk = 500 if method == "exact" else 100000
        score = nll(model, data["test_X"], data["test_y"], chunk)
        predict_s = time.process_time() - t
    report = getattr(model, "dictionary_report", {})
    extra = (
        {"acquisition_cpu_s": acquisition_seconds(model, data, args.seed)}
        if args.acquisition
        else {}
    )
    return {
        "dataset": dataset,
        "n": n,
        "method": method,
        "m": report.get("size", n),
        "capped": report.get("capped"),
        "cap": report.get("cap"),
        "residual": report.get("residual"),
        "fit_cpu_s": round(fit_s, 3),
        "cache_cpu_s": round(cache_s, 3),
        "cache_peak_blocks": peak_blocks,
        "predict_cpu_s": round(predict_s, 3),
        "total_cpu_s": round(fit_s + cache_s + predict_s, 3),
        "nll": round(score, 4),
        "device": str(device),
        **extra,
    }


def acquisition_seconds(model: Any, data: dict, seed: int) -> float:
    """CPU seconds of one seeded ``optimize_acqf`` of ``qLogExpectedImprovement``
    (module docstring) on the fitted ``model``."""
    from botorch.acquisition import qLogExpectedImprovement
    from botorch.optim import optimize_acqf

    X = data["train_X"]
    bounds = torch.stack([X.min(0).values, X.max(0).values])  # the data's box
    torch.manual_seed(seed)
    t = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acqf = qLogExpectedImprovement(model, best_f=data["train_Y"].max())
        optimize_acqf(acqf, bounds, q=1, num_restarts=10, raw_samples=512)
    return round(time.process_time() - t, 3)


def rates(n: int, device: torch.device) -> dict:
    """GFLOP/s of a Cholesky factor, a triangular inverse and a product at ``n``
    (the weights of ``budget.exact_posterior_flops``), one call each."""
    g = torch.Generator().manual_seed(0)
    A = torch.rand(n, n, generator=g, dtype=torch.float64).to(device)
    C = A @ A.mT / n + torch.eye(n, dtype=A.dtype, device=device)
    out = {"rates_n": n, "device": str(device)}
    for name, flops, fn in (
        ("cholesky", n**3 / 3, lambda: torch.linalg.cholesky(C)),
        ("product", 2 * n**3, lambda: C @ C),
    ):
        t = time.perf_counter()
        L = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        out[name + "_gflops"] = round(flops / (time.perf_counter() - t) / 1e9, 1)
    L = torch.linalg.cholesky(C)
    eye = torch.eye(n, dtype=A.dtype, device=device)
    t = time.perf_counter()
    torch.linalg.solve_triangular(L, eye, upper=False)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    out["inverse_gflops"] = round(n**3 / 3 / (time.perf_counter() - t) / 1e9, 1)
    return out


def report(rows: list[dict], path: Path, rate_rows: list[dict]) -> None:
    keys = [
        "dataset",
        "n",
        "method",
        "m",
        "capped",
        "cap",
        "residual",
        "fit_cpu_s",
        "cache_cpu_s",
        "cache_peak_blocks",
        "predict_cpu_s",
        "total_cpu_s",
        "nll",
        "device",
        "acquisition_cpu_s",
    ]
    lines = [
        "# The exact posterior where the budget caps the sketch",
        "",
        "Generated by `benchmarks/bench_exact_posterior.py` (module docstring: the",
        "methods and columns); CPU seconds of one torch thread.",
        "",
        "| " + " | ".join(keys) + " |",
        "|" + "---|" * len(keys),
    ]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    lines += ["", "Rates of the exact posterior's steps (one call each, GFLOP/s):", ""]
    lines += [
        "| device | n | Cholesky | triangular inverse | product |",
        "|---|---|---|---|---|",
    ]
    for r in rate_rows:
        lines.append(
            f"| {r['device']} | {r['rates_n']} | {r['cholesky_gflops']} | "
            f"{r['inverse_gflops']} | {r['product_gflops']} |"
        )
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", default="synthetic:2000,synthetic:4000,cadata:4000")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--exact-max-n", type=int, default=2000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS / "exact_posterior")
    p.add_argument(
        "--acquisition",
        action="store_true",
        help="also time one optimize_acqf of qLogExpectedImprovement per row",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_default_dtype(torch.float64)
    jsonl = args.out.with_suffix(".jsonl")
    rows = (
        [json.loads(x) for x in jsonl.read_text().splitlines()]
        if (jsonl.exists())
        else []
    )
    for cell in filter(None, args.cells.split(",")):
        dataset, n = cell.split(":")
        for method in args.methods.split(","):
            if method == "exact" and int(n) > args.exact_max_n:
                continue
            r = row(dataset, int(n), method, args)
            logger.info("%s", r)
            rows = [
                x
                for x in rows
                if (x["dataset"], x["n"], x["method"], x["device"])
                != (r["dataset"], r["n"], r["method"], r["device"])
            ] + [r]
            jsonl.write_text("".join(json.dumps(x) + "\n" for x in rows))
    rate_rows = [rates(n, torch.device(args.device)) for n in (2000, 4000)]
    report(rows, args.out.with_suffix(".md"), rate_rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
