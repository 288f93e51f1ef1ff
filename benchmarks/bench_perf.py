"""Performance of the finite-arm BBKB loop and of ``NystromGP`` (issue 8).

One command measures, in one process (NystromGP in a fresh subprocess, for its
peak memory), on the machine it runs on:

* the machine's float64 single-thread GEMM rate (GFLOP/s, CPU time): a square
  1024^3 product and the shape of a BBKB resparsification (``r x m x A``,
  ``(W D)^T K_SA`` as in :func:`botorch_sketch.bbkb.state.rebuild`); the larger
  of the two is the "peak" used for the flop floors;
* Global-BBKB and GlobalLocal-BBKB on Cadata (``T = 10,000``, ``C = 2``,
  ``q_bar = 2``, ``lam = 1e-4``, RBF lengthscale 12.5, paper ``beta~``) for two
  feature scalings: ``minmax`` (the repository's default, ``make demo``) and
  ``standardized`` (the issue's configuration), several seeds each: total wall
  and CPU time, ms/step over steps 1k-2k and 9k-10k, number of batches, and the
  **flop floor of the resparsifications**, ``sum_b 2 A m_b r_b`` (the one
  ``A x m x r`` product every rebuild needs, :func:`~botorch_sketch.bbkb.state.
  rebuild`) divided by the peak rate, and its ratio to the measured time;
* BKB (``C = 1``), exact GP-BUCB (``T = 2,000``) and BoTorch's stock fixed-``q``
  batch (``SingleTaskGP`` with the same fixed kernel and noise, ``qUCB``,
  ``q = 8``, :func:`botorch.optim.optimize_acqf_discrete` over the Cadata
  candidate set) for as many batches as fit in ``--botorch-seconds``;
* ``NystromGP`` at ``n = 100,000``, ``d = 8`` (the synthetic set of
  ``bench_nystrom.py``): construction + fit + posterior on 10,000 points, wall
  time and peak RSS, with ``memory_budget_gb`` (the dictionary cap derived from a
  memory budget). ``SingleTaskGP`` / ``SingleTaskVariationalGP`` rows are quoted
  from ``results/nystrom_scaling.csv`` (``bench_nystrom.py``, a 45-minute sweep).

Every measurement records wall (``perf_counter``) and CPU (``process_time``) time
and the 1-minute load average before and after: this 2-core machine is shared, and
with a load above 2 wall times are inflated; the CPU time is the better estimate
of the idle-machine wall time for single-threaded runs.

Outputs (``--out``, default ``benchmarks/results``): ``perf_results.json`` (all
numbers), ``perf_results.md`` (tables, targets, machine, command) and
``perf_steps.png`` (ms per step vs ``t``).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_perf.py            # everything
    OMP_NUM_THREADS=1 python benchmarks/bench_perf.py --configs minmax --runs 3 \\
        --skip nystrom,botorch
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from harness import cpu_model, git_head

from botorch_sketch.bbkb import fixed_rbf_kernel
from botorch_sketch.datasets import load_cadata, rescale_target, standardize_features
from botorch_sketch.loops import (
    BanditResult,
    noisy_oracle,
    run_bbkb,
    run_gp_bucb,
    uniform_regret,
)

logger = logging.getLogger("bench_perf")

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
NOISE_STD, LAM, C, Q_BAR, LENGTHSCALE = 0.01, 1e-4, 2.0, 2.0, 12.5
SECTIONS = ("bbkb", "bkb", "gp_bucb", "botorch", "nystrom")


# ------------------------------------------------------------------- measuring


def load() -> float:
    """1-minute load average."""
    return os.getloadavg()[0]


def timed(fn: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """Run ``fn`` and return its result with wall/CPU seconds and load averages."""
    la0, w0, c0 = load(), time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return out, {"wall_s": wall, "cpu_s": cpu, "load_before": la0, "load_after": load()}


def gemm_gflops(m: int, k: int, n: int, transposed: bool, reps: int = 5) -> float:
    """Median float64 GFLOP/s of an ``m x k`` by ``k x n`` product."""
    g = torch.Generator().manual_seed(0)
    A = torch.rand(k, m, generator=g, dtype=torch.float64)
    A = A.mT if transposed else A.mT.contiguous()
    B = torch.rand(k, n, generator=g, dtype=torch.float64)
    A @ B  # warm-up
    rates = []
    for _ in range(reps):
        t = time.process_time()  # CPU time: robust to other jobs on the machine
        A @ B
        rates.append(2.0 * m * k * n / max(time.process_time() - t, 1e-9) / 1e9)
    return statistics.median(rates)


def machine() -> dict[str, Any]:
    """CPU model, cores, threads and library versions."""
    import botorch
    import gpytorch

    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "botorch": botorch.__version__,
        "gpytorch": gpytorch.__version__,
        "git": git_head(),
    }


# ------------------------------------------------------------------------ BBKB


def cadata(scaling: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Cadata arms (``minmax`` to [0, 1] or ``standardized``) and ``f`` in [0, 1]."""
    X, y = load_cadata()
    if scaling == "standardized":
        X = standardize_features(X)
    else:
        lo, hi = X.amin(0), X.amax(0)
        X = (X - lo) / (hi - lo)
    return X.to(torch.float64), rescale_target(y).to(torch.float64)


def ms_per_step(res: BanditResult, a: int, b: int) -> float | None:
    """Amortised ms/step between steps ``a`` and ``b`` (1-based), if reached."""
    w = res.wall_time
    if w.numel() < b:
        return None
    return 1e3 * float(w[b - 1] - w[a - 1]) / (b - a)


def resparsification_flops(res: BanditResult, num_arms: int) -> float:
    r"""``sum_b 2 A m_b r_b`` over the states that selected batches ``b >= 1``."""
    bid, m = res.batch_id, res.dict_size
    total = 0.0
    ranks = res.batch_ranks.tolist() if res.batch_ranks is not None else None
    for b in range(1, res.num_batches):
        steps = (bid == b).nonzero()
        if steps.numel() == 0:
            continue
        m_b = int(m[steps[0, 0]])
        r_b = ranks[b] if ranks is not None else m_b
        total += 2.0 * num_arms * m_b * r_b
    return total


def bbkb_row(
    label: str, scaling: str, rule: str, T: int, seed: int, peak: float
) -> tuple[dict[str, Any], BanditResult]:
    """One BBKB/BKB run on Cadata with its timings and flop floor."""
    X, f = cadata(scaling)
    kernel = fixed_rbf_kernel(LENGTHSCALE)
    oracle = noisy_oracle(f, NOISE_STD, torch.Generator().manual_seed(1000 + seed))

    def go() -> BanditResult:
        return run_bbkb(
            X, oracle, T, kernel, LAM, C=C, q_bar=Q_BAR, rule=rule,
            f_true=f, seed=seed, progress=False,
        )  # fmt: skip

    res, t = timed(go)
    flops = resparsification_flops(res, X.shape[0])
    floor = flops / (peak * 1e9)
    row = {
        "method": label,
        "scaling": scaling,
        "seed": seed,
        "T": int(res.arms.numel()),
        **t,
        "loop_s": res.total_time,
        "batches": res.num_batches,
        "max_dict": int(res.dict_size.max()),
        "ms_1k_2k": ms_per_step(res, 1000, 2000),
        "ms_9k_10k": ms_per_step(res, 9000, 10000),
        "time_2000_s": float(res.wall_time[min(1999, T - 1)]),
        "resparsification_gflop": flops / 1e9,
        "flop_floor_s": floor,
        "time_over_floor": res.total_time / floor if floor > 0 else None,
        "cpu_over_floor": t["cpu_s"] / floor if floor > 0 else None,
        "regret_ratio": float(res.regret_ratio(f)[-1]),
    }
    logger.info("%s %s seed %d: %s", label, scaling, seed, _short(row))
    return row, res


def _short(row: dict[str, Any]) -> str:
    keys = ("wall_s", "cpu_s", "batches", "ms_1k_2k", "ms_9k_10k", "load_before")
    return ", ".join(f"{k}={row[k]:.3g}" for k in keys if row.get(k) is not None)


def gp_bucb_row(scaling: str, T: int) -> tuple[dict[str, Any], BanditResult]:
    """Exact GP-BUCB (product rule, rank-one Cholesky rows, ``O(t A)`` per step)."""
    X, f = cadata(scaling)
    kernel = fixed_rbf_kernel(LENGTHSCALE)
    oracle = noisy_oracle(f, NOISE_STD, torch.Generator().manual_seed(1000))
    res, t = timed(
        lambda: run_gp_bucb(
            X, oracle, T, kernel, LAM, C=C, f_true=f, seed=0, progress=False
        )
    )
    A = X.shape[0]
    flops = 2.0 * A * T * T / 2  # sum_t 2 t A for the new Cholesky rows
    row = {
        "method": "GP-BUCB (exact)",
        "scaling": scaling,
        "T": T,
        **t,
        "loop_s": res.total_time,
        "batches": res.num_batches,
        "ms_1k_2k": ms_per_step(res, 1000, 2000),
        "time_2000_s": float(res.wall_time[min(1999, T - 1)]),
        "gflop": flops / 1e9,
        "regret_ratio": float(res.regret_ratio(f)[-1]),
    }
    logger.info("GP-BUCB: %s", _short(row))
    return row, res


def botorch_row(scaling: str, seconds: float, q: int = 8) -> dict[str, Any]:
    """BoTorch's stock fixed-``q`` batch: ``SingleTaskGP`` + ``qUCB`` (discrete)."""
    from botorch.acquisition import qUpperConfidenceBound
    from botorch.models import SingleTaskGP
    from botorch.optim import optimize_acqf_discrete
    from gpytorch.means import ZeroMean

    X, f = cadata(scaling)
    oracle = noisy_oracle(f, NOISE_STD, torch.Generator().manual_seed(1000))
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(X.shape[0], (1,), generator=g)
    Y = oracle(idx)
    arms = [int(idx)]
    t0, c0, la0 = time.perf_counter(), time.process_time(), load()
    step_times = []
    while time.perf_counter() - t0 < seconds:
        ts = time.perf_counter()
        covar = fixed_rbf_kernel(LENGTHSCALE)
        model = SingleTaskGP(
            X[torch.tensor(arms)],
            Y.unsqueeze(-1),
            train_Yvar=torch.full((len(arms), 1), LAM, dtype=torch.float64),
            covar_module=covar,
            mean_module=ZeroMean(),
            outcome_transform=None,
        )
        acq = qUpperConfidenceBound(model, beta=4.0)
        cand, _ = optimize_acqf_discrete(acq, q=q, choices=X, max_batch_size=4096)
        new = torch.cdist(cand, X).argmin(-1)
        Y = torch.cat([Y, oracle(new)])
        arms.extend(new.tolist())
        step_times.append((time.perf_counter() - ts) / q)
    wall = time.perf_counter() - t0
    t = torch.arange(1, len(arms) + 1, dtype=torch.float64)
    regret = (f.max() - f[torch.tensor(arms)]).cumsum(0) / uniform_regret(f, t)
    row = {
        "method": f"BoTorch qUCB, q={q} (SingleTaskGP, optimize_acqf_discrete)",
        "scaling": scaling,
        "T": len(arms),
        "wall_s": wall,
        "cpu_s": time.process_time() - c0,
        "load_before": la0,
        "load_after": load(),
        "batches": len(step_times),
        "ms_per_step_first_batch": 1e3 * step_times[0],
        "ms_per_step_last_batch": 1e3 * step_times[-1],
        "regret_ratio": float(regret[-1]),
    }
    logger.info("BoTorch qUCB: %s", row)
    return row


# -------------------------------------------------------------------- NystromGP


def nystrom_worker(n: int, budget_gb: float, seed: int) -> dict[str, Any]:
    """Construct, fit and predict a ``NystromGP`` (run in a fresh process)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import bench_nystrom
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.transforms import Normalize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from botorch_sketch.models import NystromGP

    data = bench_nystrom.load_data("synthetic", n, seed)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out: dict[str, Any] = {"n": n, "d": data["train_X"].shape[-1]}
    model, out["construct"] = timed(
        lambda: NystromGP(
            data["train_X"], data["train_Y"], seed=seed, memory_budget_gb=budget_gb,
            input_transform=Normalize(data["train_X"].shape[-1]),
        )
    )  # fmt: skip
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    _, out["fit"] = timed(lambda: fit_gpytorch_mll(mll))
    model.eval()
    Xt, yt = data["test_X"], data["test_y"].reshape(-1)

    def predict() -> tuple[torch.Tensor, torch.Tensor]:
        means, variances = [], []
        with torch.no_grad():
            for lo in range(0, Xt.shape[0], 1000):
                post = model.posterior(
                    Xt[lo : lo + 1000].unsqueeze(-2), observation_noise=True
                )
                means.append(post.mean.reshape(-1))
                variances.append(post.variance.reshape(-1))
        return torch.cat(means), torch.cat(variances)

    (mean, var), out["predict"] = timed(predict)
    out["num_test"] = int(Xt.shape[0])
    out["dictionary_size"] = model.dictionary_size
    out["rmse"] = float((mean - yt).pow(2).mean().sqrt())
    out["nll"] = float(
        0.5
        * (
            (yt - mean).pow(2) / var + var.log() + torch.log(torch.tensor(6.2832))
        ).mean()
    )
    out["baseline_rss_mb"] = base
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["total_s"] = sum(out[k]["wall_s"] for k in ("construct", "fit", "predict"))
    out["total_cpu_s"] = sum(out[k]["cpu_s"] for k in ("construct", "fit", "predict"))
    out["memory_budget_gb"] = budget_gb
    return out


def nystrom_rows(
    n: int, budget_gb: float, timeout: float, threads: int = 1
) -> dict[str, Any]:
    """Run :func:`nystrom_worker` in a subprocess and parse its JSON line."""
    cmd = [
        sys.executable, __file__, "--nystrom-worker", str(n),
        "--nystrom-budget-gb", str(budget_gb), "--nystrom-threads", str(threads),
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"n": n, "status": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"n": n, "status": f"failed: {proc.stderr.strip()[-300:]}"}
    return {"status": "ok", **json.loads(lines[-1])}


def quoted_nystrom_scaling() -> list[dict[str, str]]:
    """Rows of ``results/nystrom_scaling.csv`` (``bench_nystrom.py``), if present."""
    import csv

    path = RESULTS / "nystrom_scaling.csv"
    if not path.exists():
        return []
    with path.open() as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------- report


def _fmt(x: Any, spec: str = ".3g") -> str:
    if x is None or x == "":
        return "-"
    if isinstance(x, float):
        return format(x, spec)
    return str(x)


def _median(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over seeds per (method, scaling)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["method"], r["scaling"]), []).append(r)
    keys = (
        "wall_s", "cpu_s", "loop_s", "load_before", "batches", "max_dict",
        "ms_1k_2k", "ms_9k_10k", "time_2000_s", "resparsification_gflop",
        "flop_floor_s", "time_over_floor", "cpu_over_floor", "regret_ratio",
    )  # fmt: skip
    return [
        {"method": m, "scaling": s, "runs": len(g), **{k: _median(g, k) for k in keys}}
        for (m, s), g in groups.items()
    ]


def targets(summary: list[dict[str, Any]], nys: dict[str, Any] | None) -> list[str]:
    """The issue's targets, met / not met with numbers."""
    lines = []
    for s in summary:
        if s["method"] != "Global-BBKB":
            continue
        tot, ratio = s["loop_s"], s["cpu_over_floor"]
        a, b = s["ms_1k_2k"], s["ms_9k_10k"]
        lines.append(
            f"- Global-BBKB ({s['scaling']}, median of {s['runs']}): total < 8 s: "
            f"**{'met' if tot < 8 else 'not met'}** ({tot:.2f} s wall, "
            f"{s['cpu_s']:.2f} s CPU, load {s['load_before']:.1f}); within 3x of "
            f"the resparsification flop floor: **"
            f"{'met' if ratio is not None and ratio <= 3 else 'not met'}** "
            f"(CPU time / floor = {_fmt(ratio)}, wall / floor = "
            f"{_fmt(s['time_over_floor'])}, floor {_fmt(s['flop_floor_s'])} s)"
        )
        if a and b:
            lines.append(
                f"- Global-BBKB ({s['scaling']}): ms/step over 9k-10k <= 1.5x "
                f"1k-2k: **{'met' if b <= 1.5 * a else 'not met'}** ({b:.3f} vs "
                f"{a:.3f} ms, ratio {b / a:.2f})"
            )
    if nys is not None:
        if nys.get("status") == "ok":
            ok_t = nys["total_s"] < 60
            ok_m = nys["peak_rss_mb"] < 4096
            lines.append(
                f"- NystromGP n = {nys['n']:,}, d = {nys['d']}: fit + posterior on "
                f"{nys['num_test']:,} points < 60 s: **{'met' if ok_t else 'not met'}"
                f"** ({nys['total_s']:.1f} s wall, {nys['total_cpu_s']:.1f} s CPU); "
                f"peak < 4 GB: **{'met' if ok_m else 'not met'}** "
                f"({nys['peak_rss_mb']:.0f} MB peak RSS)"
            )
        else:
            lines.append(f"- NystromGP: **not met** ({nys.get('status')})")
    return lines


def write_markdown(path: pathlib.Path, res: dict[str, Any]) -> None:
    """Tables, targets, machine and command."""
    L = ["# Performance: BBKB loop and NystromGP (issue 8)", ""]
    L += ["Generated by `benchmarks/bench_perf.py`; do not edit by hand.", ""]
    mach = res["machine"]
    L += [
        "## Machine",
        "",
        f"- CPU: {mach['cpu_model']}, {mach['cpu_count']} cores; torch threads "
        f"{mach['torch_threads']} (OMP_NUM_THREADS={mach['OMP_NUM_THREADS']})",
        f"- python {mach['python']}, torch {mach['torch']}, botorch "
        f"{mach['botorch']}, gpytorch {mach['gpytorch']}, git {mach['git']}",
        f"- float64 GEMM, 1 thread: square 1024^3 {res['gemm']['square']:.1f} "
        f"GFLOP/s; rebuild shape {res['gemm']['shape']} "
        f"{res['gemm']['rebuild_shape']:.1f} GFLOP/s; peak used "
        f"{res['gemm']['peak']:.1f} GFLOP/s",
        "- The machine is shared (2 cores, other jobs running): each row gives the "
        "1-minute load average at its start; with a load above 2, wall times are "
        "inflated and the CPU time is the better estimate of an idle-machine run.",
        "",
        "## Targets (the flop-floor ratio uses CPU time, see above)",
        "",
        *res["targets"],
        "",
        "## BBKB loop on Cadata (medians over seeds)",
        "",
        "| method | features | runs | loop [s] | wall [s] | CPU [s] | load | "
        "batches | max dict | ms/step 1k-2k | ms/step 9k-10k | time to 2,000 [s] "
        "| resparsif. GFLOP | flop floor [s] | loop / floor | CPU / floor "
        "| regret ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in res["summary"]:
        L.append(
            "| "
            + " | ".join(
                _fmt(s[k])
                for k in (
                    "method",
                    "scaling",
                    "runs",
                    "loop_s",
                    "wall_s",
                    "cpu_s",
                    "load_before",
                    "batches",
                    "max_dict",
                    "ms_1k_2k",
                    "ms_9k_10k",
                    "time_2000_s",
                    "resparsification_gflop",
                    "flop_floor_s",
                    "time_over_floor",
                    "cpu_over_floor",
                    "regret_ratio",
                )
            )  # fmt: skip
            + " |"
        )
    L += [
        "",
        "*loop* = the algorithm's own clock (oracle excluded, the paper's "
        "convention); *wall* / *CPU* = the whole call. *flop floor* = "
        "`sum_b 2 A m_b r_b` (the one `A x m x r` product of every "
        "resparsification) / peak GEMM rate. GP-BUCB: exact posterior, one new "
        "Cholesky row per step (`O(t A)`, no refactorisation).",
        "",
    ]
    if res.get("botorch"):
        b = res["botorch"]
        L += [
            "## BoTorch stock fixed-q batch",
            "",
            f"{b['method']} on Cadata ({b['scaling']}), same fixed kernel and noise "
            f"as BBKB, qUCB beta = 4: {b['batches']} batches ({b['T']} points) in "
            f"{b['wall_s']:.0f} s wall ({b['cpu_s']:.0f} s CPU, load "
            f"{b['load_before']:.1f}); {b['ms_per_step_first_batch']:.0f} ms per "
            f"point in the first batch, {b['ms_per_step_last_batch']:.0f} ms in the "
            f"last; regret ratio {b['regret_ratio']:.3f} at t = {b['T']}.",
            "",
        ]
    nys = res.get("nystrom")
    if nys:
        L += ["## NystromGP at n = 100,000", ""]
        if nys.get("status") == "ok":
            L += [
                "| phase | wall [s] | CPU [s] | load |",
                "|---|---|---|---|",
                *[
                    f"| {k} | {nys[k]['wall_s']:.1f} | {nys[k]['cpu_s']:.1f} | "
                    f"{nys[k]['load_before']:.1f} |"
                    for k in ("construct", "fit", "predict")
                ],
                "",
                f"Synthetic set of `bench_nystrom.py` (n = {nys['n']:,}, d = "
                f"{nys['d']}), {nys.get('threads', 1)} torch thread(s), "
                f"`memory_budget_gb={nys['memory_budget_gb']}` "
                f"(dictionary cap {nys['dictionary_size']}), predictive marginals "
                f"of {nys['num_test']:,} test points in chunks of 1,000. Peak RSS "
                f"{nys['peak_rss_mb']:.0f} MB (baseline after imports and data "
                f"{nys['baseline_rss_mb']:.0f} MB); test RMSE {nys['rmse']:.3f}, "
                f"NLL {nys['nll']:.3f} (standardized units).",
                "",
            ]
        else:
            L += [f"Not completed: {nys.get('status')}", ""]
    quoted = res.get("nystrom_scaling") or []
    if quoted:
        L += [
            "Quoted from `results/nystrom_scaling.csv` (`bench_nystrom.py`, its own "
            "machine state and settings; no memory budget):",
            "",
            "| dataset | n | method | status | fit [s] | predict [s] | peak RSS [MB] "
            "| dict. | NLL |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in quoted:
            L.append(
                "| "
                + " | ".join(
                    str(r.get(k, "")).split(":")[0]
                    for k in (
                        "dataset",
                        "n",
                        "method",
                        "status",
                        "fit_time_s",
                        "predict_time_s",
                        "rss_peak_mb",
                        "dictionary_size",
                        "nll",
                    )
                )  # fmt: skip
                + " |"
            )
        L.append("")
    L += ["## Command", "", "```", res["command"], "```", ""]
    path.write_text("\n".join(L))


def plot(path: pathlib.Path, curves: dict[str, BanditResult]) -> None:
    """ms/step (window averages of 250 steps) vs ``t``, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, res in curves.items():
        w = res.wall_time
        T = w.numel()
        win = 250 if T >= 1000 else max(T // 8, 1)
        ends = torch.arange(win, T, win)
        ms = 1e3 * (w[ends] - w[ends - win]) / win
        ax.plot(ends.numpy(), ms.numpy(), label=label)
    ax.set(
        xlabel="t (step)",
        ylabel="ms per step (window of 250)",
        yscale="log",
        title="Per-step time vs t on Cadata (flat is the goal)",
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------ main


# ------------------------------------------- engine speed, two trees (issue 25)

#: ``name -> (scaling, lengthscale, run_bbkb options)`` of the issue-25 runs:
#: ``std`` is the authors' configuration of ``bench_resparsify.py`` (standardized
#: features, two seeded random initial arms, ``beta="reference_code"``), ``hard``
#: the dictionary-growth configuration (min-max features, ``l = 0.6``, paper
#: ``beta~``). Both: ``lam = 1e-4``, ``C = q_bar = 2``, noise sd 0.01.
ENGINE_CONFIGS = {
    "std": ("standardized", 12.5, {"beta": "reference_code", "xi": NOISE_STD}),
    "hard": ("minmax", 0.6, {}),
    # The same with coupled dictionary resampling (BBKBConfig.resampling).
    "std-coupled": (
        "standardized",
        12.5,
        {"beta": "reference_code", "xi": NOISE_STD, "resampling": "coupled"},
    ),
    "hard-coupled": ("minmax", 0.6, {"resampling": "coupled"}),
}


def engine_worker(
    name: str, T: int, seed: int, dtype: torch.dtype | None = None
) -> dict[str, Any]:
    """One ``run_bbkb`` of :data:`ENGINE_CONFIGS` (whatever package is imported);
    ``dtype``: the engine's compute dtype (``None``: its default, float64)."""
    import hashlib

    scaling, ls, opts = ENGINE_CONFIGS[name]
    if dtype is not None:
        opts = {**opts, "dtype": dtype}
    X, f = cadata(scaling)
    if name.startswith("std"):
        g = torch.Generator().manual_seed(seed)
        init = torch.randperm(X.shape[0], generator=g)[:2]
        opts = {**opts, "F": 1.0, "delta": 1.0 / T, "init": init}
    kernel = fixed_rbf_kernel(ls)
    oracle = noisy_oracle(f, NOISE_STD, torch.Generator().manual_seed(1000 + seed))
    res, t = timed(
        lambda: run_bbkb(
            X,
            oracle,
            T,
            kernel,
            LAM,
            C=C,
            q_bar=Q_BAR,
            f_true=f,
            seed=seed,
            progress=False,
            **opts,
        )  # fmt: skip
    )
    arms = ",".join(map(str, res.arms.tolist())).encode()
    return {
        "config": name, "T": T, "seed": seed, **t, "batches": res.num_batches,
        "max_dict": int(res.dict_size.max()),
        "regret_ratio": float(res.regret_ratio(f)[-1]),
        "arms_sha1": hashlib.sha1(arms).hexdigest()[:12],
    }  # fmt: skip


def engine_ab(base: str, runs: Sequence[str], seeds: Sequence[int], reps: int) -> str:
    """Alternate processes on the package of ``base`` and of this tree; markdown.

    ``runs``: ``name:T`` items of :data:`ENGINE_CONFIGS`.
    """
    here = pathlib.Path(__file__).resolve()
    trees = {"base": str(pathlib.Path(base).resolve()), "new": str(here.parents[1])}
    rows = []
    for _ in range(reps):
        for item in runs:
            name, T = item.split(":")
            for seed in seeds:
                for label, tree in trees.items():
                    env = {**os.environ, "PYTHONPATH": tree, "OMP_NUM_THREADS": "1"}
                    cmd = [sys.executable, str(here), "--engine-worker", name, T]
                    out = subprocess.run(
                        [*cmd, str(seed)], env=env, capture_output=True, text=True,
                        check=True,
                    )  # fmt: skip
                    row = {"code": label, **json.loads(out.stdout.splitlines()[-1])}
                    logger.info("%s", row)
                    rows.append(row)
    keys = ("code", "config", "T", "seed", "cpu_s", "wall_s", "load_before",
            "batches", "max_dict", "regret_ratio", "arms_sha1")  # fmt: skip
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_fmt(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=pathlib.Path, default=RESULTS)
    p.add_argument("--configs", default="minmax,standardized")
    p.add_argument("--runs", type=int, default=3, help="seeds per BBKB config")
    p.add_argument(
        "--standardized-runs", type=int, default=None, help="seeds (default --runs)"
    )
    p.add_argument("--T", type=int, default=10_000)
    p.add_argument(
        "--T-standardized", type=int, default=None, help="horizon (default --T)"
    )
    p.add_argument("--T-bkb", type=int, default=2_000)
    p.add_argument("--T-exact", type=int, default=2_000)
    p.add_argument(
        "--botorch-seconds", type=float, default=60.0, help="at least one batch"
    )
    p.add_argument("--nystrom-n", type=int, default=100_000)
    p.add_argument("--nystrom-budget-gb", type=float, default=2.0)
    p.add_argument(
        "--nystrom-threads",
        type=int,
        default=1,
        help="torch threads of the NystromGP worker (the machine has 2 cores)",
    )
    p.add_argument("--nystrom-timeout", type=float, default=1200.0)
    p.add_argument("--skip", default="", help=f"comma list of {SECTIONS}")
    p.add_argument(
        "--update",
        action="store_true",
        help="keep the sections of an existing perf_results.json that are skipped",
    )
    p.add_argument("--nystrom-worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--engine-worker", nargs=3, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--ab-base",
        default=None,
        help="source tree of the baseline package: only run the issue-25 engine "
        "comparison (processes alternating the baseline and this tree)",
    )
    p.add_argument("--ab-runs", default="std:10000", help="name:T of ENGINE_CONFIGS")
    p.add_argument("--ab-seeds", default="0,1,2")
    p.add_argument("--ab-reps", type=int, default=1)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.nystrom_worker is not None:
        torch.set_num_threads(args.nystrom_threads)
        out = nystrom_worker(args.nystrom_worker, args.nystrom_budget_gb, 0)
        print(json.dumps(out))
        return
    if args.engine_worker is not None:
        torch.set_num_threads(1)
        name, T, seed = args.engine_worker
        print(json.dumps(engine_worker(name, int(T), int(seed))))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    if args.ab_base is not None:
        seeds = [int(s) for s in args.ab_seeds.split(",")]
        print(engine_ab(args.ab_base, args.ab_runs.split(","), seeds, args.ab_reps))
        return
    skip = set(filter(None, args.skip.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {
        "machine": machine(),
        "command": "OMP_NUM_THREADS=1 python benchmarks/bench_perf.py "
        + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
    }
    sq = gemm_gflops(1024, 1024, 1024, False)
    rb = gemm_gflops(130, 130, 20640, False)
    res["gemm"] = {
        "square": sq,
        "rebuild_shape": rb,
        "shape": "130 x 130 x 20640 ((W D)^T K_SA)",
        "peak": max(sq, rb),
    }
    peak = res["gemm"]["peak"]
    logger.info("GEMM float64 1 thread: %.1f / %.1f GFLOP/s", sq, rb)
    rows: list[dict[str, Any]] = []
    curves: dict[str, BanditResult] = {}
    for scaling in args.configs.split(","):
        runs = args.runs
        if scaling == "standardized" and args.standardized_runs is not None:
            runs = args.standardized_runs
        if "bbkb" not in skip:
            for rule, label in (("global", "Global-BBKB"), ("global_local", "GL")):
                label = "GlobalLocal-BBKB" if label == "GL" else label
                T = args.T
                if scaling == "standardized" and args.T_standardized is not None:
                    T = args.T_standardized
                for seed in range(runs):
                    row, r = bbkb_row(label, scaling, rule, T, seed, peak)
                    rows.append(row)
                    curves.setdefault(f"{label} ({scaling})", r)
        if "bkb" not in skip:
            row, r = bbkb_row("BKB", scaling, "bkb", args.T_bkb, 0, peak)
            rows.append(row)
            curves[f"BKB ({scaling})"] = r
    if "gp_bucb" not in skip:
        row, r = gp_bucb_row("minmax", args.T_exact)
        rows.append(row)
        curves["GP-BUCB exact (minmax)"] = r
    old = {}
    if args.update and (args.out / "perf_results.json").exists():
        old = json.loads((args.out / "perf_results.json").read_text())
        res["command"] = old["command"] + "\n" + res["command"]
    done = {(r["method"], r["scaling"]) for r in rows}
    kept = [r for r in old.get("rows", []) if (r["method"], r["scaling"]) not in done]
    res["rows"] = kept + rows
    res["summary"] = summarize(res["rows"])
    if "botorch" not in skip:
        res["botorch"] = botorch_row("minmax", args.botorch_seconds)
    elif old.get("botorch"):
        res["botorch"] = old["botorch"]
    if "nystrom" not in skip:
        res["nystrom"] = nystrom_rows(
            args.nystrom_n,
            args.nystrom_budget_gb,
            args.nystrom_timeout,
            args.nystrom_threads,
        )
        res["nystrom"]["threads"] = args.nystrom_threads
        logger.info("NystromGP: %s", res["nystrom"])
    elif old.get("nystrom"):
        res["nystrom"] = old["nystrom"]
    res["nystrom_scaling"] = quoted_nystrom_scaling()
    res["targets"] = targets(res["summary"], res.get("nystrom"))
    (args.out / "perf_results.json").write_text(json.dumps(res, indent=1))
    write_markdown(args.out / "perf_results.md", res)
    if curves:
        plot(args.out / "perf_steps.png", curves)
    logger.info("wrote %s", args.out / "perf_results.md")


if __name__ == "__main__":
    main()
