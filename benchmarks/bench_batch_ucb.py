"""Cost of one value-and-gradient of BBKB's batch UCB, by path (issue 24).

``BatchUpperConfidenceBound`` is what L-BFGS-B evaluates thousands of times per
BBKB batch on a box (every greedy step is a multi-start ``optimize_acqf``), so its
value-and-gradient is the inner loop of the "bbkb" strategies. Two paths give
the same numbers (``tests/acquisition/test_dtc_marginals.py``):

- ``autograd``: torch's autograd through the gpytorch kernel module and the
  predictor products (the only path before the closed form);
- ``closed-form``: :func:`botorch_sketch.acquisition.dtc_marginals.dtc_marginals`
  (one ``q x m x (1 + r)`` product forward, one backward), the default for a
  Gaussian kernel.

Per cell (``d`` inputs, ``n`` training points = dictionary size ``m`` with every
point kept, ``p`` pending points, 8 restarts per evaluation as
``optimize_acqf``'s batched L-BFGS-B asks for): milliseconds per evaluation (the
best of ``--repeats`` rounds of 50, the paths interleaved so that a busy machine
slows each alike) and, with ``--batch``, one 50-point adaptive batch
(``optimize_acqf_adaptive_batch``, 8 restarts) per path.

    OMP_NUM_THREADS=1 python benchmarks/bench_batch_ucb.py [--device cuda] [--batch]

Writes ``benchmarks/results/batch_ucb_<device>.{jsonl,md}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from botorch.test_functions import Ackley

from botorch_sketch.acquisition import BatchUpperConfidenceBound
from botorch_sketch.acquisition import bbkb as bbkb_module
from botorch_sketch.models import NystromGP
from botorch_sketch.optim import optimize_acqf_adaptive_batch

logger = logging.getLogger("bench_batch_ucb")

RESULTS = Path(__file__).resolve().parent / "results"
PATHS = ("autograd", "closed-form")
#: (d, n, p): Hartmann6-like, Ackley20 and Ackley60 at the sizes of a 1,000-point run.
CELLS = ((6, 500, 40), (20, 1000, 40), (60, 400, 40), (60, 1000, 40))


@contextmanager
def path_of(name: str) -> Iterator[None]:
    """Force one of the two evaluation paths (module docstring)."""
    saved = bbkb_module._fused_marginals
    if name == "autograd":
        bbkb_module._fused_marginals = lambda *args: None
    try:
        yield
    finally:
        bbkb_module._fused_marginals = saved


def make_model(d: int, n: int, device: torch.device) -> NystromGP:
    """Every point in the dictionary, Ackley values, fixed hyperparameters."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    Y = -Ackley(dim=d)(-5.0 + 15.0 * X).unsqueeze(-1)
    model = NystromGP(X.to(device), Y.to(device), dictionary="all", seed=0)
    model.covar_module.lengthscale = 0.5 * d**0.5
    model.likelihood.noise = 1e-2
    return model.eval()


def evaluation_ms(
    model: NystromGP, pending: torch.Tensor, name: str, X: torch.Tensor
) -> float:
    """Milliseconds per value-and-gradient at the ``8 x 1 x d`` points ``X``."""
    with path_of(name):
        acqf = BatchUpperConfidenceBound(model, alpha=2.0)
        acqf.set_X_pending(pending)
        X = X.clone().requires_grad_(True)
        torch.autograd.grad(acqf(X).sum(), X)  # builds the caches
        _sync(X)
        start = time.perf_counter()
        for _ in range(50):
            torch.autograd.grad(acqf(X).sum(), X)
        _sync(X)
        return 1e3 * (time.perf_counter() - start) / 50


def batch_seconds(model: NystromGP, name: str) -> tuple[float, float]:
    """Seconds of one 50-point adaptive batch, and the mean UCB of its points."""
    d = model.train_inputs[0].shape[-1]
    bounds = torch.stack([torch.zeros(d), torch.ones(d)]).to(model.train_inputs[0])
    with path_of(name):
        start = time.perf_counter()
        _, values = optimize_acqf_adaptive_batch(
            model,
            bounds,
            "global",
            alpha=2.0,
            max_batch_size=50,
            min_batch_size=50,
            num_restarts=8,
            raw_samples=256,
            seed=0,
        )
        _sync(values)
        return time.perf_counter() - start, float(values.mean())


def _sync(t: torch.Tensor) -> None:
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    device = torch.device(args.device)
    rows = []
    for d, n, p in CELLS:
        model = make_model(d, n, device)
        g = torch.Generator().manual_seed(1)
        pending = torch.rand(p, d, generator=g, dtype=torch.float64).to(device)
        X = torch.rand(8, 1, d, generator=g, dtype=torch.float64).to(device)
        best = {name: float("inf") for name in PATHS}
        for _ in range(args.repeats):
            for name in PATHS:
                best[name] = min(best[name], evaluation_ms(model, pending, name, X))
        row: dict[str, Any] = {"device": str(device), "d": d, "n": n, "p": p}
        row.update({f"{name}_ms": round(best[name], 3) for name in PATHS})
        if args.batch:
            for name in PATHS:
                seconds, ucb = batch_seconds(model, name)
                row[f"{name}_batch_s"] = round(seconds, 2)
                row[f"{name}_batch_ucb"] = round(ucb, 6)
        logger.info("%s", row)
        rows.append(row)
    return rows


def report(rows: list[dict[str, Any]], device: str) -> str:
    lines = [
        f"# Batch UCB value-and-gradient by path ({device})",
        "",
        "`benchmarks/bench_batch_ucb.py` (module docstring): milliseconds per "
        "evaluation of 8 points (best of the rounds), every training point in the "
        "dictionary (m = n), p pending points; with `--batch`, seconds of one "
        "50-point adaptive batch (8 restarts) and its mean UCB. Wall seconds, one "
        "thread on a CPU.",
        "",
        "| d | n = m | p | autograd ms | closed-form ms | batch s "
        "(autograd / closed-form) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        batch = "-"
        if "closed-form_batch_s" in r:
            batch = " / ".join(str(r[f"{name}_batch_s"]) for name in PATHS)
        lines.append(
            f"| {r['d']} | {r['n']} | {r['p']} | {r['autograd_ms']} | "
            f"{r['closed-form_ms']} | {batch} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", action="store_true", help="also time adaptive batches")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.manual_seed(0)
    rows = run(args)
    device = torch.device(args.device).type
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"batch_ucb_{device}"
    with open(stem.with_suffix(".jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    stem.with_suffix(".md").write_text(report(rows, device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
