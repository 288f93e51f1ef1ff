"""NystromGP and the BBKB engine on whatever device is there (``--device``).

Model rows: fit + predict time and test NLL (2,000 held-out points, with
observation noise) of ``SingleTaskGP`` (where ``n <= --exact-max-n``),
``NystromGP`` with its defaults (the dictionary sized by its accuracy criterion
within the device-derived cap, the fit subset by the device: the rows record
both, ``m`` and ``fit_subset``, with the criterion's value ``residual``), and
``NystromGP`` with a larger budget (``--budget``, ``fit_subset_size=
--fit-subset``), on standardized Cadata and
low-noise Hartmann6 (noise sd 0.05), the data of ``bench_nystrom.py``. Every
tensor is created on the device; float64 throughout.

BBKB rows: Global-BBKB (``run_bbkb``, the ``bench_perf.py`` configuration) on
standardized Cadata (T = ``--bbkb-T``), and with ``--tiled-rows R`` on ``R``
rows made of the Cadata rows tiled with a small seeded jitter (T =
``--tiled-T``), arms and oracle on the device: loop seconds, regret ratio,
batches, dictionary size.

Trust-region rows (``--region-sizes``): one "turbo-bkb" step on the device, the
region model's fit (``fit_region_model`` with its device-derived choices: every
point where the device affords the exact posterior, else the sketch) and an
8-point Thompson batch (``generate_batch``, ``thompson="auto"``) on ``n``
noisy Ackley20 points (noise sd 0.05) in a box of side 0.4 of the unit cube:
the seconds of each, the dictionary size and the sampler used.

Output: ``benchmarks/results/gpu_<device>.jsonl`` (one JSON object per row,
appended as each row ends, with the machine line) and ``gpu_<device>.md``.

    OMP_NUM_THREADS=1 python benchmarks/bench_gpu.py --device cpu --quick
    python benchmarks/bench_gpu.py --device cuda            # every row, one GPU
    python benchmarks/bench_gpu.py --device cuda --tiled-rows 1000000
    python benchmarks/bench_gpu.py --device cuda --methods none --region-sizes 1000,4000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.test_functions import Ackley
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.bbkb import fixed_rbf_kernel
from botorch_sketch.loops import noisy_oracle, run_bbkb
from botorch_sketch.models import NystromGP, nystrom_fit
from botorch_sketch.trust_region import (
    TrustRegionState,
    batch_candidates,
    fit_region_model,
    generate_batch,
)
from botorch_sketch.trust_region.candidates import resolve_sampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_nystrom import load_data  # noqa: E402
from bench_perf import ENGINE_CONFIGS, LAM, NOISE_STD, Q_BAR, C, cadata  # noqa: E402
from harness import RESULTS, machine_details, markdown_table  # noqa: E402

logger = logging.getLogger("bench_gpu")

MODEL_CELLS = (
    ("cadata", 16000),
    ("synthetic", 16000),
    ("synthetic", 50000),
    ("synthetic", 1000000),
)
QUICK_CELLS = (("cadata", 4000), ("synthetic", 4000))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(fn: Any, device: torch.device) -> tuple[Any, float]:
    """Result and wall seconds of ``fn()``, the device's queue drained first and
    last (CUDA kernels run asynchronously)."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def nll(model: Any, test_X: torch.Tensor, y: torch.Tensor, chunk: int) -> float:
    """Mean Gaussian negative log predictive density with observation noise."""
    total = 0.0
    with torch.no_grad():
        for X, yc in zip(test_X.split(chunk), y.split(chunk), strict=True):
            post = model.posterior(X, observation_noise=True)
            mean, var = post.mean.squeeze(-1), post.variance.squeeze(-1)
            total += float(
                (0.5 * (math.log(2 * math.pi) + var.log() + (yc - mean) ** 2 / var))
                .sum()
                .item()
            )
    return total / y.numel()


def model_row(
    dataset: str, n: int, method: str, args: argparse.Namespace
) -> dict[str, Any]:
    device = torch.device(args.device)
    data = {k: v.to(device) for k, v in load_data(dataset, n, args.seed).items()}
    X, Y = data["train_X"], data["train_Y"]
    cpu_start = time.process_time()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if method == "exact":
        model = SingleTaskGP(X, Y)
    elif method == "nystrom":
        model = NystromGP(X, Y, seed=args.seed)
    else:
        model = NystromGP(
            X,
            Y,
            seed=args.seed,
            max_dictionary_size=args.budget,
            fit_subset_size=args.fit_subset,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        _, fit_s = clock(lambda: fit_gpytorch_mll(mll), device)
        chunk = 500 if method == "exact" else 100000
        score, predict_s = clock(
            lambda: nll(model, data["test_X"], data["test_y"], chunk), device
        )
    return {
        "kind": "model",
        "dataset": dataset,
        "n": n,
        "method": method if method != "budget" else f"nystrom{args.budget}",
        "fit_s": fit_s,
        "predict_s": predict_s,
        "total_s": fit_s + predict_s,
        "nll": score,
        "m": getattr(model, "dictionary_size", n),
        **_report(model),
        "cpu_s": time.process_time() - cpu_start,
        "peak_gb": _peak_gb(device),
        "load": _load(),
    }


def _report(model: Any) -> dict[str, Any]:
    """The chosen cap, fit subset and criterion value of a ``NystromGP``."""
    report = getattr(model, "dictionary_report", None)
    if report is None:
        return {}
    keys = ("cap", "capped", "residual", "fit_subset_size", "refine_iterations")
    return {k: report.get(k) for k in keys}


def _peak_gb(device: torch.device) -> float | None:
    """Peak GPU memory allocated since the row began, GB (``None`` off a GPU)."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 1e9


def _load() -> float:
    try:
        with open("/proc/loadavg") as fh:
            return float(fh.read().split()[0])
    except OSError:
        return math.nan


def bbkb_row(rows: int | None, T: int, args: argparse.Namespace) -> dict[str, Any]:
    """Global-BBKB in the ``std`` configuration of ``bench_perf.py`` (the issue-25
    engine target: standardized Cadata, reference-code beta, two seeded initial
    arms), on ``rows`` tiled rows when given."""
    device = torch.device(args.device)
    scaling, lengthscale, opts = ENGINE_CONFIGS["std"]
    X, f = cadata(scaling)
    if rows is not None:
        g = torch.Generator().manual_seed(args.seed)
        reps = math.ceil(rows / X.shape[0])
        X = X.repeat(reps, 1)[:rows]
        X = X + 1e-3 * torch.randn(X.shape, generator=g, dtype=X.dtype)
        f = f.repeat(reps)[:rows]
    g = torch.Generator().manual_seed(args.seed)
    init = torch.randperm(X.shape[0], generator=g)[:2]
    opts = {**opts, "F": 1.0, "delta": 1.0 / T, "init": init.to(device)}
    X, f = X.to(device), f.to(device)
    oracle = noisy_oracle(f, NOISE_STD, torch.Generator().manual_seed(1000 + args.seed))
    # Built before the clock: the first gpytorch kernel of a process imports
    # sympy (through torch's shape utilities), 0.3 s here and 3.2 s on a fresh
    # GPU machine without bytecode caches, which is not the engine's time.
    kernel = fixed_rbf_kernel(lengthscale)
    res, loop_s = clock(
        lambda: run_bbkb(
            X,
            oracle,
            T,
            kernel,
            LAM,
            C=C,
            q_bar=Q_BAR,
            rule="global",
            f_true=f,
            seed=args.seed,
            progress=False,
            **opts,
        ),  # fmt: skip
        device,
    )
    arms = ",".join(map(str, res.arms.tolist())).encode()
    return {
        "kind": "bbkb",
        "dataset": "cadata" if rows is None else f"cadata tiled {rows:,}",
        "n": int(X.shape[0]),
        "method": "global-bbkb std",
        "T": T,
        "loop_s": loop_s,
        "regret_ratio": float(res.regret_ratio(f.cpu())[-1]),
        "batches": res.num_batches,
        "m": int(res.dict_size.max()),
        "arms_sha": hashlib.sha256(arms).hexdigest()[:12],
    }


def region_row(n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One trust-region step (fit + 8-point Thompson batch) on ``n`` points."""
    device, d, q = torch.device(args.device), 20, 8
    g = torch.Generator().manual_seed(args.seed)
    X = 0.3 + 0.4 * torch.rand(n, d, generator=g, dtype=torch.float64)
    f = Ackley(dim=d, bounds=[(-5.0, 10.0)] * d)
    Y = -f(-5.0 + 15.0 * X) + 0.05 * torch.randn(n, generator=g, dtype=X.dtype)
    X, Y = X.to(device), Y.unsqueeze(-1).to(device)
    fit_region_model(X[:50], Y[:50], seed=args.seed)  # imports and kernels warm
    model, fit_s = clock(lambda: fit_region_model(X, Y, seed=args.seed), device)
    state = TrustRegionState(dim=d, batch_size=q, length=0.2)
    batch, gen_s = clock(
        lambda: generate_batch(model, state, X, q, seed=args.seed), device
    )
    sampler = resolve_sampler(
        model, batch_candidates(model, state, X, q, seed=args.seed), "auto"
    )
    return {
        "kind": "region",
        "dataset": f"ackley{d} box",
        "n": n,
        "m": int(model.dictionary_indices.numel()),
        "exact": bool(model.is_exact),
        "sampler": sampler,
        "fit_s": fit_s,
        "gen_s": gen_s,
        "total_s": fit_s + gen_s,
        "batch_on_device": batch.device.type == device.type,
    }


def plan(args: argparse.Namespace) -> list[tuple[str, tuple]]:
    cells = QUICK_CELLS if args.quick else MODEL_CELLS
    if args.cells:
        cells = tuple(
            (name, int(n)) for name, n in (c.split(":") for c in args.cells.split(","))
        )
    methods = args.methods.split(",")
    jobs: list[tuple[str, tuple]] = []
    for dataset, n in cells:
        if n <= args.exact_max_n and "exact" in methods:
            jobs.append(("model", (dataset, n, "exact")))
        jobs += [
            ("model", (dataset, n, method))
            for method in ("nystrom", "budget")
            if method in methods
        ]
    if "bbkb" in methods:
        jobs.append(("bbkb", (None, args.bbkb_T)))
    if args.tiled_rows:
        jobs.append(("bbkb", (args.tiled_rows, args.tiled_T)))
    sizes = [int(n) for n in args.region_sizes.split(",") if n]
    return jobs + [("region", (n,)) for n in sizes]


def report(rows: list[dict[str, Any]], path: Path, machine: str, argv: str) -> None:
    models = [r for r in rows if r["kind"] == "model"]
    bbkb = [r for r in rows if r["kind"] == "bbkb"]
    region = [r for r in rows if r["kind"] == "region"]
    cols = [
        "dataset",
        "n",
        "method",
        "m",
        "cap",
        "residual",
        "fit_subset_size",
        "refine_iterations",
        "fit_s",
        "predict_s",
        "total_s",
        "cpu_s",
        "nll",
        "peak_gb",
        "load",
    ]
    rcols = ["dataset", "n", "m", "exact", "sampler", "fit_s", "gen_s", "total_s"]
    bcols = ["dataset", "n", "T", "loop_s", "regret_ratio", "batches", "m", "arms_sha"]
    text = [
        f"# NystromGP and BBKB on `{rows[0]['device'] if rows else '?'}`",
        "",
        f"Machine: {machine}",
        f"Command: `python benchmarks/bench_gpu.py {argv}`",
        "",
        "## Models (fit + predict, test NLL with observation noise)",
        "",
        markdown_table(models, cols) if models else "(none)",
        "",
        "## BBKB engine (Global-BBKB, standardized Cadata)",
        "",
        markdown_table(bbkb, bcols) if bbkb else "(none)",
        "",
        "## One trust-region step (fit + 8-point Thompson batch)",
        "",
        markdown_table(region, rcols) if region else "(none)",
        "",
    ]
    path.write_text("\n".join(text))


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="n = 4,000 model cells only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=int, default=8000)
    p.add_argument("--fit-subset", type=int, default=4000)
    p.add_argument("--exact-max-n", type=int, default=None)
    p.add_argument("--bbkb-T", type=int, default=10000)
    p.add_argument("--tiled-rows", type=int, default=0)
    p.add_argument("--tiled-T", type=int, default=2000)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument(
        "--refine-tolerance",
        type=float,
        default=None,
        help="L-BFGS-B ftol of NystromGP's refinement on every point "
        "(nystrom_fit.REFINE_TOLERANCE; default: the package's)",
    )
    p.add_argument(
        "--region-sizes",
        default="",
        help="trust-region step rows at these numbers of points, e.g. 1000,4000",
    )
    p.add_argument(
        "--methods",
        default="exact,nystrom,budget,bbkb",
        help="rows to run: exact, nystrom, budget (model rows), bbkb",
    )
    p.add_argument(
        "--cells", default="", help="model cells, e.g. synthetic:16000,cadata:4000"
    )
    args = p.parse_args(argv)
    if args.exact_max_n is None:
        args.exact_max_n = 20000 if args.device.startswith("cuda") else 4000
    return args


ROWS = {"model": model_row, "bbkb": bbkb_row, "region": region_row}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse(argv)
    if args.refine_tolerance is not None:  # a setting to measure, not an option
        nystrom_fit.REFINE_TOLERANCE = args.refine_tolerance
    torch.manual_seed(args.seed)
    tag = torch.device(args.device).type
    out = args.out or RESULTS / f"gpu_{tag}"
    machine = machine_details()
    if tag == "cuda":
        machine += f"; GPU: {torch.cuda.get_device_name(args.device)}"
    jsonl = out.with_suffix(".jsonl")
    jsonl.write_text("")
    rows = []
    for kind, job in plan(args):
        try:
            row = ROWS[kind](*job, args)
        except Exception as err:  # out of memory or a failure: recorded, not fatal
            message = f"{type(err).__name__}: {err}"[:300]
            row = {
                "kind": kind,
                "dataset": str(job[0]),
                "job": str(job),
                "error": message,
                "traceback": traceback.format_exc()[-1200:],
            }
        row["device"] = args.device
        rows.append(row)
        logger.info(json.dumps(row))
        with jsonl.open("a") as fh:
            fh.write(json.dumps({**row, "machine": machine}) + "\n")
        if tag == "cuda":
            torch.cuda.empty_cache()
    report(rows, out.with_suffix(".md"), machine, " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
