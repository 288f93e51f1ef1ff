"""BBKB as users run it, side by side with the authors' code; incremental
resparsification (issue 14).

Two experiments, everything in one process, one thread (``OMP_NUM_THREADS=1``):

* ``reference``: Global-BBKB (``run_bbkb``, ``beta="reference_code"``, ``C = 2``,
  ``q_bar = 2``, ``lam = 1e-4``, ``delta = 1/T``, ``F = 1``, noise sd 0.01, two
  uniformly random initial arms) on Cadata with standardized features (RBF
  lengthscale 12.5) and with min-max features (12.5), and on Abalone with both
  (17.5); ``T`` = 2,000 and 10,000; seeds 0, 1, 2. Rows: ours (default path,
  incremental), ours with ``resparsify="rebuild"``, ours with
  ``repeats="per_pull"`` (the rule before issue 14), and the authors' numpy code
  (``Batch_BKB`` of ``luigicarratino/batch-bkb``) on the same arms, kernel
  (their ``FastMixinKernel`` of scikit-learn's ``RBF``), initial arms, initial
  rewards and oracle seed, when ``--reference-code DIR`` points to a local copy
  of that repository (not distributed with this package; without it the column
  is skipped and the report says so). Timings exclude the oracle and include
  the initialisation, wall (``perf_counter``) and CPU (``process_time``).
* ``categorical``: the regime where the dictionary grows with ``t``
  (:func:`botorch_sketch.datasets.categorical_library`, 6 inputs x 5 levels,
  15,625 one-hot arms scaled to unit norm, RBF lengthscale 1, ``lam = 1e-2``,
  noise sd 0.1): total time (wall and CPU) vs ``T``, one run per ``T``, for the
  incremental path, the rebuild path (shorter horizons, it is O(T^3)) and the
  authors' code, and the slopes of ``log CPU time`` vs ``log T``.

Outputs (``--out``): ``bbkb_reference.{csv,md,png}``, ``bbkb_categorical.{csv,md,
png}``.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_resparsify.py \\
        --reference-code /path/to/batch-bkb
    OMP_NUM_THREADS=1 python benchmarks/bench_resparsify.py --sections categorical
"""

from __future__ import annotations

import argparse
import csv
import importlib
import logging
import math
import os
import pathlib
import shlex
import statistics
import sys
import time
from collections.abc import Sequence

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_bbkb import load_problem  # noqa: E402
from harness import machine_details  # noqa: E402

from botorch_sketch.bbkb import fixed_rbf_kernel  # noqa: E402
from botorch_sketch.datasets import categorical_library  # noqa: E402
from botorch_sketch.loops import noisy_oracle, run_bbkb, uniform_regret  # noqa: E402

logger = logging.getLogger("bench_resparsify")

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
LAM, C, Q_BAR, NOISE_STD = 1e-4, 2.0, 2.0, 0.01
#: (dataset, scaling, lengthscale) of the reference experiment.
CONFIGS = (
    ("cadata", "standardize", 12.5),
    ("cadata", "minmax", 12.5),
    ("abalone", "standardize", 17.5),
    ("abalone", "minmax", 17.5),
)
FIELDS = (
    "dataset", "scaling", "T", "seed", "method", "wall_s", "cpu_s", "load",
    "regret_ratio", "regret_ratio_2000", "batches", "final_dict", "ms_1k_2k",
    "ms_9k_10k", "paths",
)  # fmt: skip


def _per_step_ms(times: Sequence[float], a: int, b: int) -> float:
    """Amortised ms per step between steps ``a`` and ``b`` (cumulative times)."""
    if len(times) < b:
        return math.nan
    return 1e3 * (times[b - 1] - times[a - 1]) / (b - a)


def regret_ratio_curve(arms: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """``R_t / R_t^unif`` for ``t = 1..T``."""
    t = torch.arange(1, arms.numel() + 1, dtype=f.dtype)
    return (f.max() - f[arms]).cumsum(0) / uniform_regret(f, t)


def _summary(arms: torch.Tensor, f: torch.Tensor, times: Sequence[float]) -> dict:
    T = arms.numel()
    rr = regret_ratio_curve(arms, f)
    return {
        "regret_ratio": float(rr[-1]),
        "regret_ratio_2000": float(rr[min(T, 2000) - 1]),
        "ms_1k_2k": _per_step_ms(times, 1000, 2000),
        "ms_9k_10k": _per_step_ms(times, 9000, 10000),
    }


def run_ours(X, f, T, ls, seed, init, method) -> tuple[dict, list[float]]:
    """One ``run_bbkb`` run; ``method`` is ``ours``, ``ours_rebuild`` or
    ``ours_per_pull``."""
    kernel = fixed_rbf_kernel(ls)
    oracle = noisy_oracle(f, NOISE_STD, torch.Generator().manual_seed(1000 + seed))
    opts = {"ours_rebuild": {"resparsify": "rebuild"}}.get(method, {})
    if method == "ours_per_pull":
        opts = {"repeats": "per_pull"}
    la, c0 = os.getloadavg()[0], time.process_time()
    res = run_bbkb(
        X, oracle, T, kernel, LAM, C=C, q_bar=Q_BAR, beta="reference_code",
        xi=NOISE_STD, delta=1.0 / T, F=1.0, init=init, f_true=f, seed=seed,
        progress=False, **opts,
    )  # fmt: skip
    times = res.wall_time.tolist()
    stats = getattr(res.final_state, "stats", None)
    row = {
        "wall_s": res.total_time,
        "cpu_s": time.process_time() - c0,
        "load": la,
        "batches": res.num_batches,
        "final_dict": int(res.final_state.dict_size),
        "paths": ""
        if stats is None
        else " ".join(f"{k}={v}" for k, v in stats.items()),
        **_summary(res.arms, f, times),
        "rr_curve": regret_ratio_curve(res.arms, f).tolist(),
    }
    return row, times


def run_reference(
    module, X, f, T, ls, seed, init, lam=LAM, noise_std=NOISE_STD
) -> tuple[dict, list[float]]:
    """The authors' ``Batch_BKB`` with the same data, initial arms and oracle.

    Their protocol (``example_batch_bkb.py``): ``initialize`` with the evaluated
    initial arms, then ``predict`` / evaluate / ``update`` until ``T`` points; the
    last batch is cut at the horizon and, as in ours, not followed by a
    resparsification.
    """
    import numpy as np
    from sklearn.gaussian_process.kernels import RBF, PairwiseKernel

    bkb_lib, utils = module
    dot = utils.FastMixinKernel(
        RBF(length_scale=ls), PairwiseKernel(gamma=0.5 / ls**2, metric="rbf")
    )
    alg = bkb_lib.Batch_BKB(
        lam=lam, dot=dot, fnorm=1.0, noise_variance=noise_std**2, delta=1.0 / T,
        qbar=Q_BAR, ratio_threshold=C,
    )  # fmt: skip
    oracle = noisy_oracle(f, noise_std, torch.Generator().manual_seed(1000 + seed))
    rs = np.random.RandomState(seed)
    Xn = X.numpy()
    la, w0, c0, oracle_s = (
        os.getloadavg()[0],
        time.perf_counter(),
        time.process_time(),
        0.0,
    )

    def evaluate(idx):
        nonlocal oracle_s
        t = time.perf_counter()
        y = oracle(torch.as_tensor(np.asarray(idx), dtype=torch.long)).numpy()
        oracle_s += time.perf_counter() - t
        return y

    arms = init.tolist()
    alg.initialize(Xn, arms, evaluate(arms))
    times = [time.perf_counter() - w0 - oracle_s] * len(arms)
    batches, dict_size = 1, int(alg.dict_size)
    while len(arms) < T:
        idx, _ = alg.predict()
        idx = [int(i) for i in idx[: T - len(arms)]]
        now = time.perf_counter() - w0 - oracle_s
        times += [now] * len(idx)
        arms += idx
        batches += 1
        y = evaluate(idx)
        if len(arms) < T:
            alg.update(idx, y, rs)
            dict_size = int(alg.dict_size)
    wall = time.perf_counter() - w0 - oracle_s
    row = {
        "wall_s": wall,
        "cpu_s": time.process_time() - c0,
        "load": la,
        "batches": batches,
        "final_dict": dict_size,
        "paths": "",
        **_summary(torch.tensor(arms), f, times),
        "rr_curve": regret_ratio_curve(torch.tensor(arms), f).tolist(),
    }
    return row, times


def load_reference(directory: str | None):
    """Import ``bkb_lib`` and ``utils`` from a local copy of the authors' code."""
    if directory is None:
        return None
    sys.path.insert(0, str(pathlib.Path(directory).resolve()))
    return importlib.import_module("bkb_lib"), importlib.import_module("utils")


# ---------------------------------------------------------------------- report


def _agg(rows: list[dict], key: str, fmt: str = "{:.3g}") -> str:
    vals = [
        r[key] for r in rows if not (isinstance(r[key], float) and math.isnan(r[key]))
    ]
    if not vals:
        return "-"
    if len(vals) == 1:
        return fmt.format(vals[0])
    return f"{fmt.format(statistics.mean(vals))} ± {fmt.format(statistics.stdev(vals))}"


def _mean(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if not math.isnan(r[key])]
    return statistics.mean(vals) if vals else math.nan


def write_reference(out: pathlib.Path, rows: list[dict], args, curves) -> None:
    """``bbkb_reference.{csv,md,png}``."""
    with (out / "bbkb_reference.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows({k: r[k] for k in FIELDS} for r in rows)
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["scaling"], r["T"], r["method"]), []).append(
            r
        )
    L = [
        "# BBKB side by side with the authors' code (issue 14)",
        "",
        "Generated by `benchmarks/bench_resparsify.py`; do not edit by hand.",
        "",
        'Global-BBKB, `beta="reference_code"`, `C = 2`, `q_bar = 2`, `lam = 1e-4`, '
        "`delta = 1/T`, `F = 1`, noise sd 0.01, target rescaled to [0, 1], two "
        "uniformly random initial arms (seeded), oracle seeded with 1000 + seed; "
        "features **standardized** (zero mean, unit sd) or **min-max** scaled to "
        "[0, 1] as stated per row. *ours* = `run_bbkb` defaults (union rule, "
        "incremental resparsification); *ours, rebuild path* = "
        '`resparsify="rebuild"`; *ours, per-pull coins* = `repeats="per_pull"` '
        "(the rule before issue 14); *authors* = `Batch_BKB` of "
        "luigicarratino/batch-bkb (numpy/scipy, their `FastMixinKernel` of "
        "scikit-learn's RBF), same arms, initial arms and rewards, oracle seed.",
        "",
    ]
    if args.reference_code is None:
        L += ["**The authors' code was not given (`--reference-code DIR`): its rows "
              "are skipped.**", ""]  # fmt: skip
    L += [
        "| data | features | l | T | method | seeds | time [s] | CPU [s] | load | "
        "regret ratio @T | batches | final dict. | ms/step 1k-2k | ms/step 9k-10k |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ls_of = {(d, s): ls for d, s, ls in CONFIGS}
    for (d, s, T, m), g in groups.items():
        L.append(
            f"| {d} | {SCALING[s]} | {ls_of[(d, s)]} | {T} | {LABELS[m]} | {len(g)} | "
            f"{_agg(g, 'wall_s')} | {_agg(g, 'cpu_s')} | {_agg(g, 'load', '{:.1f}')} | "
            f"{_agg(g, 'regret_ratio', '{:.4f}')} | {_agg(g, 'batches', '{:.0f}')} | "
            f"{_agg(g, 'final_dict', '{:.0f}')} | {_agg(g, 'ms_1k_2k')} | "
            f"{_agg(g, 'ms_9k_10k')} |"
        )
    L += ["", "Cells: mean ± sd over seeds. *time* excludes the oracle (the "
          "paper's convention) and includes the initialisation.", ""]  # fmt: skip
    L += ["## Targets (issue 14)", "", *reference_targets(groups), ""]
    L += ["## Machine and command", "", machine_details(), "", "```", args.command,
          "```", ""]  # fmt: skip
    (out / "bbkb_reference.md").write_text("\n".join(L))
    plot_reference(out / "bbkb_reference.png", curves)


SCALING = {"standardize": "standardized", "minmax": "min-max"}
LABELS = {
    "ours": "ours",
    "ours_rebuild": "ours, rebuild path",
    "ours_per_pull": "ours, per-pull coins",
    "authors": "authors' code",
}


def reference_targets(groups: dict[tuple, list[dict]]) -> list[str]:
    """Met / not met lines with numbers."""
    out = []

    def get(d, s, T, m):
        return groups.get((d, s, T, m), [])

    for T in (2000, 10000):
        ours, auth = (
            get("cadata", "standardize", T, "ours"),
            get("cadata", "standardize", T, "authors"),
        )
        if ours and auth:
            a, b = _mean(ours, "regret_ratio"), _mean(auth, "regret_ratio")
            ok = a <= 1.1 * b
            out.append(
                f"- Cadata standardized, T = {T:,}: regret ratio within 10 % of the "
                f"authors': **{'met' if ok else 'not met'}** ({a:.4f} vs {b:.4f}, "
                f"ratio {a / b:.2f}; {len(ours)} / {len(auth)} seeds)"
            )
        if T == 10000 and ours:
            t = _mean(ours, "wall_s")
            line = (
                f"- Cadata standardized, T = 10,000 in under 1.5 s: "
                f"**{'met' if t < 1.5 else 'not met'}** ({t:.2f} s wall, "
                f"{_mean(ours, 'cpu_s'):.2f} s CPU"
            )
            if auth:
                ta = _mean(auth, "wall_s")
                line += f"; authors {ta:.1f} s, speed-up {ta / t:.1f}x (target 10x)"
            out.append(line + ")")
            a, b = _mean(ours, "ms_1k_2k"), _mean(ours, "ms_9k_10k")
            out.append(
                f"- per-step time flat on Cadata (steps 9k-10k <= 1.5x steps 1k-2k): "
                f"**{'met' if b <= 1.5 * a else 'not met'}** ({b:.3f} vs {a:.3f} "
                f"ms/step, ratio {b / a:.2f})"
            )
            reb = get("cadata", "standardize", T, "ours_rebuild")
            if reb:
                out.append(
                    f"- incremental vs rebuild path, same run: {t:.2f} s vs "
                    f"{_mean(reb, 'wall_s'):.2f} s"
                )
    return out


def plot_reference(path: pathlib.Path, curves: dict[str, tuple]) -> None:
    """Regret ratio and cumulative time vs ``t`` (Cadata standardized, T = 10k)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, (rr, times) in curves.items():
        t = range(1, len(times) + 1)
        axes[0].plot(t, rr, label=label)
        axes[1].plot(t, times, label=label)
    axes[0].set(xlabel="t", ylabel="regret ratio", yscale="log",
                title="Cadata, standardized features (seed 0)")  # fmt: skip
    axes[1].set(xlabel="t", ylabel="cumulative time [s]", yscale="log",
                title="time (oracle excluded)")  # fmt: skip
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- categorical


def _loglog_slope(T: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` against ``log T``."""
    lx = [math.log(t) for t in T]
    ly = [math.log(v) for v in y]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


def categorical(args, module) -> None:
    """Total time vs ``T`` on the categorical library: incremental and rebuild
    paths (and the authors' code), one run per ``T``."""
    X, f = categorical_library()
    kernel = fixed_rbf_kernel(1.0)
    init = torch.tensor([0, 1])
    rows, curves = [], {}
    runs = [("incremental", T) for T in args.categorical_T]
    runs += [("rebuild", T) for T in args.categorical_T_rebuild]
    if module is not None:
        runs += [("authors", T) for T in args.categorical_T_reference]
    for path, T in runs:
        if path == "authors":
            row, times = run_reference(module, X, f, T, 1.0, 0, init, 1e-2, 0.1)
            res_row = {"wall_s": row["wall_s"], "cpu_s": row["cpu_s"],
                       "load": row["load"], "batches": row["batches"],
                       "max_batch": "-", "final_dict": row["final_dict"],
                       "rank": "-", "regret_ratio": row["regret_ratio"]}  # fmt: skip
        else:
            oracle = noisy_oracle(f, 0.1, torch.Generator().manual_seed(1000))
            la, c0 = os.getloadavg()[0], time.process_time()
            res = run_bbkb(
                X, oracle, T, kernel, 1e-2, C=C, q_bar=Q_BAR,
                beta="reference_code", xi=0.1, delta=1.0 / T, init=init,
                f_true=f, seed=0, progress=False, resparsify=path,
            )  # fmt: skip
            times = res.wall_time.tolist()
            res_row = {
                "wall_s": res.total_time, "cpu_s": time.process_time() - c0,
                "load": la, "batches": res.num_batches,
                "max_batch": int(res.batch_sizes[1:].max()),
                "final_dict": int(res.final_state.dict_size),
                "rank": res.final_state.rank,
                "regret_ratio": float(res.regret_ratio(f)[-1]),
            }  # fmt: skip
        rows.append({"path": path, "T": T, **res_row})
        curves[path] = times  # the longest run of each path is plotted
        logger.info("categorical %s T=%d: %s", path, T, rows[-1])
    out = args.out
    fields = ("path", "T", "wall_s", "cpu_s", "load", "batches", "max_batch",
              "final_dict", "rank", "regret_ratio")  # fmt: skip
    with (out / "bbkb_categorical.csv").open("w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=fields)
        wr.writeheader()
        wr.writerows(rows)
    L = [
        "# BBKB where the dictionary grows with t: categorical library (issue 14)",
        "",
        "Generated by `benchmarks/bench_resparsify.py`; do not edit by hand.",
        "",
        "`categorical_library()`: 6 categorical inputs x 5 levels, one-hot, rows "
        "scaled to unit norm (15,625 arms), reward = main effects + pairwise "
        "interactions rescaled to [0, 1], noise sd 0.1; RBF lengthscale 1, "
        '`lam = 1e-2`, `C = 2`, `q_bar = 2`, `beta="reference_code"`, '
        "`delta = 1/T`, initial arms 0 and 1, seed 0. Every pulled arm has `q_bar "
        "s2 >= 1`, so every pull enters the dictionary (m = t) and every batch has "
        "one point. One run per T; *time* excludes the oracle, *CPU* is the whole "
        "call (the machine is shared: CPU time is the load-independent number).",
        "",
        "| code | T | time [s] | CPU [s] | load | batches | max batch | final m | "
        "rank | regret ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        L.append(
            f"| {r['path']} | {r['T']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
            f"{r['load']:.1f} | {r['batches']} | {r['max_batch']} | "
            f"{r['final_dict']} | {r['rank']} | {r['regret_ratio']:.3f} |"
        )
    L += [
        "",
        "Log-log slope of the total CPU time against T (least squares over the "
        "runs of each code; 2 = O(T^2) in total, O(A t) per step):",
        "",
    ]
    slopes = {}
    for path in ("incremental", "rebuild", "authors"):
        g = [r for r in rows if r["path"] == path]
        if len(g) >= 2:
            slopes[path] = _loglog_slope([r["T"] for r in g], [r["cpu_s"] for r in g])
            L.append(f"- {path}: {slopes[path]:.2f} (T = "
                     f"{', '.join(str(r['T']) for r in g)})")  # fmt: skip
    L += ["", "## Targets", ""]
    inc = [r for r in rows if r["path"] == "incremental" and r["T"] == 2000]
    if inc:
        r = inc[0]
        ok = r["wall_s"] < 120
        L.append(
            f"- T = 2,000 in under 2 minutes: **{'met' if ok else 'not met'}** "
            f"({r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, load "
            f"{r['load']:.1f})"
        )
    if "incremental" in slopes:
        ok = slopes["incremental"] <= 2.05
        L.append(
            f"- time vs T O(T^2) or better: **{'met' if ok else 'not met'}** "
            f"(slope {slopes['incremental']:.2f}; rebuild path "
            f"{slopes.get('rebuild', math.nan):.2f})"
        )
    L += ["", "## Machine and command", "", machine_details(), "", "```",
          args.command, "```", ""]  # fmt: skip
    (out / "bbkb_categorical.md").write_text("\n".join(L))
    plot_categorical(out / "bbkb_categorical.png", rows, curves)


def plot_categorical(path: pathlib.Path, rows: list[dict], curves: dict) -> None:
    """Total CPU time vs T (log-log) and cumulative time vs t of the longest runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for code in ("incremental", "rebuild", "authors"):
        g = [r for r in rows if r["path"] == code]
        if g:
            axes[0].plot([r["T"] for r in g], [r["cpu_s"] for r in g], "o-",
                         label=code)  # fmt: skip
        if code in curves:
            times = curves[code]
            axes[1].plot(range(1, len(times) + 1), times, label=code)
    inc = [r for r in rows if r["path"] == "incremental"]
    if inc:
        t0, c0 = inc[0]["T"], inc[0]["cpu_s"]
        t1 = max(r["T"] for r in rows)
        for s, ls in ((2, ":"), (3, "--")):
            axes[0].plot([t0, t1], [c0, c0 * (t1 / t0) ** s], "k", ls=ls, lw=0.8,
                         label=f"slope {s}")  # fmt: skip
    axes[0].set(xscale="log", yscale="log", xlabel="T", ylabel="total CPU time [s]",
                title="Categorical library (15,625 arms), m = t")  # fmt: skip
    axes[1].set(
        xscale="log",
        yscale="log",
        xlabel="t",
        ylabel="cumulative wall time [s]",
        title="longest run of each code",
    )
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------ main


def reference(args, module) -> None:
    """The side-by-side experiment."""
    rows: list[dict] = []
    curves: dict[str, tuple] = {}
    for dataset, scaling, ls in CONFIGS:
        if dataset not in args.datasets:
            continue
        X, f = load_problem(dataset, scaling)
        for T in args.T:
            for seed in args.seeds:
                g = torch.Generator().manual_seed(seed)
                init = torch.randperm(X.shape[0], generator=g)[:2]
                methods = ["ours"]
                if dataset == "cadata" and scaling == "standardize":
                    methods.append("ours_rebuild")
                    if seed in args.per_pull_seeds and T in args.per_pull_T:
                        methods.append("ours_per_pull")
                if module is not None:
                    methods.append("authors")
                for m in methods:
                    if m == "authors":
                        row, times = run_reference(module, X, f, T, ls, seed, init)
                    else:
                        row, times = run_ours(X, f, T, ls, seed, init, m)
                    key = dict(
                        dataset=dataset, scaling=scaling, T=T, seed=seed, method=m
                    )
                    rows.append({**key, **row})
                    logger.info("%s: %s", key, {k: row[k] for k in FIELDS[5:]})
                    rows[-1] = {k: v for k, v in rows[-1].items() if k != "rr_curve"}
                    if (dataset, scaling, seed) == ("cadata", "standardize", 0) and (
                        T == max(args.T)
                    ):
                        curves[LABELS[m]] = (row.pop("rr_curve"), times)
                    row.pop("rr_curve", None)
    write_reference(args.out, rows, args, curves)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=pathlib.Path, default=RESULTS)
    p.add_argument("--sections", default="reference,categorical")
    p.add_argument(
        "--reference-code",
        default=os.environ.get("BBKB_REFERENCE_CODE"),
        help="local copy of luigicarratino/batch-bkb (default: $BBKB_REFERENCE_CODE)",
    )
    p.add_argument("--datasets", default="cadata,abalone")
    p.add_argument("--T", default="2000,10000")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--per-pull-T", default="2000,10000")
    p.add_argument("--per-pull-seeds", default="0")
    p.add_argument("--categorical-T", default="250,500,1000,2000")
    p.add_argument("--categorical-T-rebuild", default="150,300,600")
    p.add_argument(
        "--categorical-T-reference",
        default="150,300",
        help="horizons of the authors' code on the library ('': skip)",
    )
    args = p.parse_args(argv)
    ints = lambda s: [int(v) for v in s.split(",") if v]  # noqa: E731
    args.T, args.seeds = ints(args.T), ints(args.seeds)
    args.per_pull_T, args.per_pull_seeds = (
        ints(args.per_pull_T),
        ints(args.per_pull_seeds),
    )
    args.categorical_T = ints(args.categorical_T)
    args.categorical_T_rebuild = ints(args.categorical_T_rebuild)
    args.categorical_T_reference = ints(args.categorical_T_reference)
    args.datasets = args.datasets.split(",")
    args.command = (
        "OMP_NUM_THREADS=1 python benchmarks/bench_resparsify.py "
        + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    )
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    module = load_reference(args.reference_code)
    sections = args.sections.split(",")
    if "reference" in sections:
        reference(args, module)
    if "categorical" in sections:
        categorical(args, module)


if __name__ == "__main__":
    main()
