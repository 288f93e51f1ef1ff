"""BBKB on Abalone and Cadata: the experiment of Calandriello et al. (ICML 2020).

Finite candidate sets built from regression data (BBKB spec Sec. 10.1): the arms
are the feature vectors, ``f(a)`` is the regression target rescaled to [0, 1]
(:func:`botorch_sketch.datasets.rescale_target`) and every evaluation returns
``f(a) + N(0, xi^2)`` with ``xi = 0.01``. Methods (all from
:mod:`botorch_sketch.bbkb`):

* ``global``: Global-BBKB (Lemma 1 rule), ``run_bbkb(rule="global")``;
* ``global_local``: GlobalLocal-BBKB (hybrid Lemma 1 / Lemma 3 rule);
* ``bkb``: BKB (``C = 1``, resparsification at every step);
* ``gp_ucb`` / ``gp_bucb``: exact GP-UCB / GP-BUCB (product rule, ``C``), run
  for ``--T-exact`` steps only (``O(T^2 A)``);
* ``uniform``: uniformly random arms.

Metric: the regret ratio ``R_t / R_t^unif`` with ``R_t^unif = t (f* - mean f)``,
the expected regret of uniform sampling (:meth:`BanditResult.regret_ratio`).
Runtimes are cumulative wall-clock seconds at which each step was selected,
oracle time excluded (the paper's convention).

Configuration (our choice, see ``results/bbkb_settings.md`` for the study behind
it): features min-max scaled to [0, 1] per column (``--scaling``), Gaussian kernel
``k(x, x') = exp(-||x - x'||^2 / (2 l^2))`` with the paper's Table 1 bandwidths
as ``l`` (``--lengthscale`` overrides; Global/GlobalLocal/BKB 17.5 on Abalone and
12.5 on Cadata, GP-UCB 5 / 12.5, GP-BUCB 12.5 / 12.5), ``lam`` (``--lam``), ``C = 2``,
``q_bar = 2``, ``F = 1``, ``delta = 1 / T`` and the ``beta~`` schedule ``--beta``
(``paper`` = Theorem 2, ``reference_code`` = the authors' code, or a number).
GP-UCB / GP-BUCB use the exact-GP analogue of the paper schedule (the library's
only string schedule for them) unless ``--beta`` is a number.

Outputs (in ``--out``): ``bbkb_<dataset>.csv`` (per-seed summaries every
``--every`` steps), ``bbkb_<dataset>.md`` (table, target checks, machine, command)
and ``bbkb_<dataset>.png`` (regret ratio, cumulative time, batch size vs ``t``).
``--bandwidths`` runs the paper's sweep (Figs. 5-6: one bandwidth shared by all
methods) and writes ``bbkb_<dataset>_bandwidth.{csv,md,png}``. ``--settings``
runs the settings study of Global-BBKB on one dataset
(``bbkb_settings_grid.{csv,md}``; ``bbkb_settings.md`` is its commented copy).

Examples::

    OMP_NUM_THREADS=1 python benchmarks/bench_bbkb.py --datasets cadata \\
        --methods global,gp_bucb --seeds 1
    python benchmarks/bench_bbkb.py --report-only --datasets cadata
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import pathlib
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence

import torch
from harness import machine_details, mean_sd, read_csv
from harness import write_csv as write_rows
from torch import Tensor

from botorch_sketch.bbkb import fixed_rbf_kernel
from botorch_sketch.datasets import (
    load_abalone,
    load_cadata,
    rescale_target,
    standardize_features,
)
from botorch_sketch.loops import (
    BanditResult,
    noisy_oracle,
    run_bbkb,
    run_gp_bucb,
    run_gp_ucb,
    run_uniform,
)

logger = logging.getLogger("bench_bbkb")

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
NOISE_STD = 0.01
ALL_METHODS = ("global", "global_local", "bkb", "gp_ucb", "gp_bucb", "uniform")
EXACT_METHODS = ("gp_ucb", "gp_bucb")
LABELS = {
    "global": "Global-BBKB",
    "global_local": "GlobalLocal-BBKB",
    "bkb": "BKB",
    "gp_ucb": "GP-UCB",
    "gp_bucb": "GP-BUCB",
    "uniform": "uniform",
}
#: Paper Table 1 bandwidths (used as the RBF lengthscale).
TABLE1 = {
    "abalone": {
        "global": 17.5,
        "global_local": 17.5,
        "bkb": 17.5,
        "gp_ucb": 5.0,
        "gp_bucb": 12.5,
        "uniform": 0.0,
    },
    "cadata": {m: 12.5 for m in ALL_METHODS},
}
PAPER_BANDWIDTHS = (5.0, 7.5, 10.0, 12.5, 15.0, 17.5)
CSV_FIELDS = (
    "dataset",
    "method",
    "seed",
    "lengthscale",
    "t",
    "regret_ratio",
    "cum_time_s",
    "batch_size",
    "num_batches",
    "dict_size",
)


# ----------------------------------------------------------------------------- data


def minmax_features(X: Tensor) -> Tensor:
    """Scale each column to [0, 1] (constant columns map to 0).

    Args:
        X: ``n x d`` features.

    Returns:
        The scaled ``n x d`` tensor.
    """
    lo, hi = X.amin(0), X.amax(0)
    span = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    return torch.where(hi > lo, (X - lo) / span, torch.zeros_like(X))


def load_problem(dataset: str, scaling: str) -> tuple[Tensor, Tensor]:
    """Load a data set as a bandit problem.

    Args:
        dataset: ``"abalone"`` or ``"cadata"``.
        scaling: ``"minmax"``, ``"standardize"`` or ``"none"``.

    Returns:
        ``(arms, f)``: ``A x d`` float64 arms and ``A`` rewards in [0, 1].
    """
    loader = {"abalone": load_abalone, "cadata": load_cadata}[dataset]
    X, y = loader()
    if scaling == "minmax":
        X = minmax_features(X)
    elif scaling == "standardize":
        X = standardize_features(X)
    elif scaling != "none":
        raise ValueError(f"unknown scaling {scaling!r}")
    return X.to(torch.float64), rescale_target(y).to(torch.float64)


def parse_beta(beta: str) -> str | float:
    """``"paper"`` / ``"reference_code"`` or a float."""
    try:
        return float(beta)
    except ValueError:
        return beta


# -------------------------------------------------------------------------- running


def run_method(
    method: str,
    arms: Tensor,
    f: Tensor,
    T: int,
    lengthscale: float,
    seed: int,
    args: argparse.Namespace,
) -> BanditResult:
    """Run one method for one seed.

    The noise of the oracle is seeded with ``1000 + seed``, the algorithm's own
    randomness (initial arm, dictionary draws) with ``seed``.

    Args:
        method: One of :data:`ALL_METHODS`.
        arms: ``A x d`` candidate set.
        f: ``A`` noiseless rewards.
        T: Horizon.
        lengthscale: RBF lengthscale (ignored by ``uniform``).
        seed: Seed.
        args: Parsed CLI arguments (``lam``, ``C``, ``q_bar``, ``beta``).

    Returns:
        The run's :class:`BanditResult`.
    """
    oracle = noisy_oracle(f, NOISE_STD, torch.Generator().manual_seed(1000 + seed))
    if method == "uniform":
        return run_uniform(arms.shape[0], oracle, T, f_true=f, seed=seed)
    kernel = fixed_rbf_kernel(lengthscale)
    beta = parse_beta(args.beta)
    common = dict(xi=NOISE_STD, delta=1.0 / T, F=1.0, f_true=f, seed=seed)
    common["progress"] = args.progress
    if method in ("global", "global_local", "bkb"):
        return run_bbkb(
            arms,
            oracle,
            T,
            kernel,
            args.lam,
            C=args.C,
            q_bar=args.q_bar,
            rule=method,
            beta=beta,
            **common,
        )
    exact_beta = beta if isinstance(beta, float) else "paper"
    if method == "gp_ucb":
        return run_gp_ucb(arms, oracle, T, kernel, args.lam, exact_beta, **common)
    if method == "gp_bucb":
        return run_gp_bucb(
            arms,
            oracle,
            T,
            kernel,
            args.lam,
            C=args.C,
            beta=exact_beta,
            **common,
        )
    raise ValueError(f"unknown method {method!r}")


def summarize_run(
    res: BanditResult, f: Tensor, every: int
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Per-step rows every ``every`` steps and scalar statistics of one run.

    Args:
        res: A finished run.
        f: ``A`` noiseless rewards.
        every: Row spacing (the last step is always included).

    Returns:
        ``(rows, stats)``.
    """
    rr = res.regret_ratio(f)
    wall = res.wall_time
    T = rr.numel()
    steps = sorted(set(range(every, T + 1, every)) | {T})
    rows = [
        {
            "t": t,
            "regret_ratio": float(rr[t - 1]),
            "cum_time_s": float(wall[t - 1]),
            "batch_size": int(res.batch_size[t - 1]),
            "num_batches": int(res.batch_id[t - 1]) + 1,
            "dict_size": int(res.dict_size[t - 1]),
        }
        for t in steps
    ]

    def per_step(a: int, b: int) -> float:
        if b > T:
            return math.nan
        return float(wall[b - 1] - wall[a - 1]) / (b - a)

    def at(t: int) -> float:
        return float(rr[t - 1]) if t <= T else math.nan

    bs = res.batch_size.to(torch.float64)
    stats = {
        "T": T,
        "total_time_s": float(res.total_time),
        "time_2000_s": float(wall[1999]) if T >= 2000 else math.nan,
        "per_step_1k_2k_ms": 1e3 * per_step(1000, 2000),
        "per_step_9k_10k_ms": 1e3 * per_step(9000, 10000),
        "num_batches": res.num_batches,
        "final_dict_size": int(res.dict_size[-1]),
        "rr_2000": at(2000),
        "rr_T": float(rr[-1]),
        "mean_batch_1k_2k": float(bs[999:2000].mean()) if T >= 2000 else math.nan,
        "mean_batch_last_1k": float(bs[-1000:].mean()),
    }
    return rows, stats


def run_dataset(
    dataset: str,
    methods: Sequence[str],
    seeds: Sequence[int],
    args: argparse.Namespace,
    lengthscale: float | None = None,
) -> tuple[list[dict], list[dict]]:
    """Run every (method, seed) of one data set.

    Args:
        dataset: Data set name.
        methods: Methods to run.
        seeds: Seeds.
        args: Parsed CLI arguments.
        lengthscale: Shared lengthscale (bandwidth sweep) or ``None`` for Table 1
            / ``--lengthscale``.

    Returns:
        ``(csv_rows, stats_rows)``.
    """
    arms, f = load_problem(dataset, args.scaling)
    rows: list[dict] = []
    stats_rows: list[dict] = []
    for method in methods:
        exact = method in EXACT_METHODS
        T = args.T_exact if exact else args.T
        ls = lengthscale
        if ls is None:
            ls = args.lengthscale or TABLE1[dataset][method]
        for seed in args.exact_seeds if exact else seeds:
            start = time.perf_counter()
            res = run_method(method, arms, f, T, ls, seed, args)
            elapsed = time.perf_counter() - start
            r, s = summarize_run(res, f, args.every)
            key = {
                "dataset": dataset,
                "method": method,
                "seed": seed,
                "lengthscale": ls,
            }
            rows.extend({**key, **row} for row in r)
            stats_rows.append({**key, **s})
            logger.info(
                "%s %s seed=%d l=%g T=%d: %.1f s, %d batches, m=%d, rr(T)=%.4f",
                dataset,
                LABELS[method],
                seed,
                ls,
                T,
                elapsed,
                s["num_batches"],
                s["final_dict_size"],
                s["rr_T"],
            )
    return rows, stats_rows


# -------------------------------------------------------------------------- writing


def write_csv(path: pathlib.Path, rows: Sequence[dict]) -> None:
    """Write ``rows`` with the :data:`CSV_FIELDS` columns, in that order."""
    write_rows(path, [{k: row[k] for k in CSV_FIELDS} for row in rows])


def target_lines(dataset: str, stats_rows: Sequence[dict]) -> list[str]:
    """PASS/FAIL lines for the issue's targets (Cadata Global-BBKB).

    Args:
        dataset: Data set name.
        stats_rows: Per-run statistics.

    Returns:
        Markdown bullet lines.
    """

    def mean(method: str, key: str) -> float:
        vals = [s[key] for s in stats_rows if s["method"] == method]
        vals = [v for v in vals if not math.isnan(v)]
        return sum(vals) / len(vals) if vals else math.nan

    def verdict(ok: bool | None) -> str:
        return "n/a (not run)" if ok is None else ("PASS" if ok else "FAIL")

    g = [s for s in stats_rows if s["method"] == "global"]
    if not g:
        return ["- Global-BBKB not run: no target checks."]
    Tg = int(g[0]["T"])
    tot = mean("global", "total_time_s")
    a12, a910 = (
        mean("global", "per_step_1k_2k_ms"),
        mean("global", "per_step_9k_10k_ms"),
    )
    b_early = mean("global", "mean_batch_1k_2k")
    b_late = mean("global", "mean_batch_last_1k")
    rr_T = mean("global", "rr_T")
    lines = [f"Targets (Global-BBKB, mean over {len(g)} seed(s), T = {Tg}):", ""]
    full = Tg >= 10000
    lines.append(
        f"- total time for T = 10,000 < 60 s: "
        f"{verdict(tot < 60 if full else None)} ({tot:.2f} s)"
    )
    lines.append(
        f"- stretch: total time < 8 s: {verdict(tot < 8 if full else None)} "
        f"({tot:.2f} s)"
    )
    ok = None if math.isnan(a910) else a910 <= 2 * a12
    lines.append(
        f"- amortized per-step time over 9k-10k <= 2x that over 1k-2k: {verdict(ok)} "
        f"({a910:.3g} ms vs {a12:.3g} ms)"
    )
    ok = None if math.isnan(b_early) else b_late > b_early
    lines.append(
        f"- batch sizes grow with t (mean batch size of the last 1,000 steps > over "
        f"steps 1k-2k): {verdict(ok)} ({b_late:.1f} vs {b_early:.1f})"
    )
    if dataset == "cadata":
        lines.append(
            f"- regret ratio at T no worse than the paper's ~0.13: "
            f"{verdict(rr_T <= 0.13 if full else None)} ({rr_T:.4f})"
        )
    t2_g, t2_b = mean("global", "time_2000_s"), mean("gp_bucb", "time_2000_s")
    rr2_g, rr2_b = mean("global", "rr_2000"), mean("gp_bucb", "rr_2000")
    if math.isnan(t2_b) or math.isnan(t2_g):
        lines.append("- >= 100x faster than GP-BUCB over 2,000 steps: n/a (not run)")
    else:
        ok = t2_b / t2_g >= 100 and rr2_g <= rr2_b
        lines.append(
            f"- >= 100x faster than exact GP-BUCB over the first 2,000 steps with an "
            f"equal or better regret ratio: {verdict(ok)} (speed-up "
            f"{t2_b / t2_g:.0f}x: {t2_g:.2f} s vs {t2_b:.1f} s; regret ratio at 2,000 "
            f"{rr2_g:.4f} vs {rr2_b:.4f})"
        )
    return lines


SCALING_LABELS = {"minmax": "min-max", "standardize": "standardized", "none": "raw"}


def both_scalings(dataset: str, out: pathlib.Path) -> list[str]:
    """Global-BBKB with both feature scalings, from ``bbkb_reference.csv``.

    That file is written by ``bench_resparsify.py`` (side by side with the authors'
    code, ``beta="reference_code"``); without it, a line says so.
    """
    path = out / "bbkb_reference.csv"
    head = ['## Both feature scalings (Global-BBKB, `beta="reference_code"`)', ""]
    if not path.is_file():
        return [*head, "`bbkb_reference.csv` not found: run `bench_resparsify.py`.", ""]
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["dataset"] == dataset]
    groups: dict[tuple[str, int, str], list[dict]] = {}
    for r in rows:
        if r["method"] in ("ours", "authors"):
            groups.setdefault((r["scaling"], int(r["T"]), r["method"]), []).append(r)
    lines = [
        *head,
        "From `bbkb_reference.md` (`bench_resparsify.py`: two random initial arms, "
        "3 seeds, the authors' code in the same process; time = wall, oracle "
        "excluded, CPU = process time; `load` there):",
        "",
        "| features | T | code | time (s) | CPU (s) | regret ratio @T | batches | "
        "final dict. |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (scaling, T, method), g in sorted(groups.items()):
        cells = [
            mean_sd([float(r[k]) for r in g], fmt)
            for k, fmt in (
                ("wall_s", "{:.3g}"),
                ("cpu_s", "{:.3g}"),
                ("regret_ratio", "{:.4f}"),
                ("batches", "{:.0f}"),
                ("final_dict", "{:.0f}"),
            )
        ]
        name = "ours" if method == "ours" else "authors'"
        lines.append(
            f"| {SCALING_LABELS.get(scaling, scaling)} | {T} | {name} | "
            + " | ".join(cells)
            + " |"
        )
    return [*lines, ""]


def write_markdown(
    path: pathlib.Path,
    dataset: str,
    stats_rows: Sequence[dict],
    args: argparse.Namespace,
    title: str,
    targets: bool = True,
) -> None:
    """Write the summary table, target checks, machine details and command."""
    keys = (
        ("T", "{:.0f}"),
        ("total_time_s", "{:.3g}"),
        ("time_2000_s", "{:.3g}"),
        ("per_step_1k_2k_ms", "{:.3g}"),
        ("per_step_9k_10k_ms", "{:.3g}"),
        ("num_batches", "{:.0f}"),
        ("final_dict_size", "{:.0f}"),
        ("rr_2000", "{:.3f}"),
        ("rr_T", "{:.3f}"),
    )
    head = (
        "| method | l | seeds | T | total time (s) | time first 2,000 (s) | "
        "ms/step 1k-2k | ms/step 9k-10k | batches | final dict. size | "
        "regret ratio @2,000 | regret ratio @T |"
    )
    scaling = SCALING_LABELS.get(args.scaling, args.scaling)
    lines = [
        f"# {title}: {scaling} features",
        "",
        f"Every number in the first table uses **{scaling}** features "
        f"(`--scaling {args.scaling}`); the next section shows both scalings.",
        "",
        head,
        "|" + "---|" * 12,
    ]
    groups: dict[tuple[str, float], list[dict]] = {}
    for s in stats_rows:
        groups.setdefault((s["method"], float(s["lengthscale"])), []).append(s)
    for (method, ls), runs in groups.items():
        cells = [mean_sd([float(r[k]) for r in runs], fmt) for k, fmt in keys]
        lines.append(
            f"| {LABELS[method]} | {ls:g} | {len(runs)} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "Cells: mean ± standard deviation over seeds (one value when one seed). "
        "Times are cumulative wall-clock seconds at which steps were selected, "
        "oracle excluded; ms/step = (time at step b - time at step a) / (b - a). "
        "Regret ratio = R_t / (t (f* - mean f)). `-` = not reached (T too small). "
        "`batches` counts the initial batch (one uniform arm).",
        "",
    ]
    if targets:
        lines += target_lines(dataset, stats_rows) + [""]
    lines += both_scalings(dataset, path.parent)
    argvs = args.argv if args.argv and isinstance(args.argv[0], list) else [args.argv]
    commands = [
        "OMP_NUM_THREADS=1 " + " ".join(shlex.quote(a) for a in argv) for argv in argvs
    ]
    lines += [
        "Setup: features scaled with "
        f"`{args.scaling}`, target rescaled to [0, 1], noise sd {NOISE_STD}, RBF "
        f"k = exp(-||x-x'||^2 / (2 l^2)), lam = {args.lam:g}, C = {args.C:g}, "
        f"q_bar = {args.q_bar:g}, F = 1, delta = 1/T, beta schedule `{args.beta}` "
        "(GP-UCB/GP-BUCB: exact-GP paper schedule unless numeric). Oracle noise "
        "seeded with 1000 + seed, algorithm with seed.",
        "",
        f"Machine: {machine_details()}",
        "",
        "Command (one process, nothing else of ours running; another job may load "
        "the machine):",
        "",
        "```",
        *commands,
        "```",
        "",
    ]
    if args.note:
        lines += ["Note: " + args.note, ""]
    path.write_text("\n".join(lines))


def plot(path: pathlib.Path, dataset: str, rows: Sequence[dict], by: str) -> None:
    """Regret ratio (mean with min-max band), cumulative time (log) and batch size.

    Args:
        path: Output PNG.
        dataset: Data set name (title).
        rows: CSV rows.
        by: ``"method"`` or ``"lengthscale"`` (curve grouping).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[tuple, dict[float, list[dict]]] = {}
    for r in rows:
        key = (r["method"], float(r["lengthscale"]))
        curves.setdefault(key, {}).setdefault(float(r["t"]), []).append(r)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for (method, ls), per_t in sorted(curves.items()):
        ts = sorted(per_t)
        label = LABELS[method] if by == "method" else f"{LABELS[method]} l={ls:g}"
        for ax, field in zip(
            axes, ("regret_ratio", "cum_time_s", "batch_size"), strict=True
        ):
            if method == "uniform" and field != "regret_ratio":
                continue
            vals = [[float(r[field]) for r in per_t[t]] for t in ts]
            mean = [sum(v) / len(v) for v in vals]
            (line,) = ax.plot(ts, mean, label=label)
            if field != "batch_size" and max(len(v) for v in vals) > 1:
                ax.fill_between(
                    ts,
                    [min(v) for v in vals],
                    [max(v) for v in vals],
                    color=line.get_color(),
                    alpha=0.2,
                )
    axes[0].set(xlabel="t", ylabel="regret ratio R_t / R_t^unif", yscale="log")
    axes[0].set_title(f"{dataset}: regret ratio (band = min-max over seeds)")
    axes[1].set(xlabel="t", ylabel="cumulative time (s)", yscale="log")
    axes[1].set_title("cumulative wall time (oracle excluded)")
    axes[2].set(xlabel="t", ylabel="batch size", yscale="log")
    axes[2].set_title("batch size (mean over seeds)")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- modes


SETTINGS_GRID = (
    ("standardize", "minmax"),
    (1e-4, 1e-2, 1.0),
    ("paper", "reference_code", "0.01"),
)


def settings_study(args: argparse.Namespace) -> None:
    """Global-BBKB over scaling x lam x beta (``args.T``, first seed) on one set.

    Each configuration runs in a subprocess under a ``--job-timeout`` wall clock
    limit; results go to ``bbkb_settings_grid.{csv,md}``.
    """
    dataset = args.datasets[0]
    out = pathlib.Path(args.out)
    fields = (
        "scaling",
        "lam",
        "beta",
        "lengthscale",
        "T",
        "status",
        "time_s",
        "num_batches",
        "final_dict_size",
        "max_batch",
        "mean_batch_last_200",
        "rr_500",
        "rr_1000",
        "rr_T",
        "alpha_last",
    )
    results = []
    for scaling in SETTINGS_GRID[0]:
        for lam in SETTINGS_GRID[1]:
            for beta in SETTINGS_GRID[2]:
                cmd = [
                    sys.executable,
                    __file__,
                    "--worker",
                    "--datasets",
                    dataset,
                    "--scaling",
                    scaling,
                    "--lam",
                    str(lam),
                    "--beta",
                    beta,
                    "--T",
                    str(args.T),
                    "--seeds",
                    str(args.seeds[0]),
                    "--lengthscale",
                    str(args.lengthscale or TABLE1[dataset]["global"]),
                ]
                row = {"scaling": scaling, "lam": lam, "beta": beta, "T": args.T}
                try:
                    p = subprocess.run(
                        cmd,
                        capture_output=True,
                        text=True,
                        timeout=args.job_timeout,
                        check=True,
                    )
                    row.update(json.loads(p.stdout.strip().splitlines()[-1]))
                    row["status"] = "ok"
                except subprocess.TimeoutExpired:
                    row["status"] = f"timeout > {args.job_timeout:g} s"
                logger.info("settings %s", row)
                results.append(row)
    with (out / "bbkb_settings_grid.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore", restval="")
        w.writeheader()
        w.writerows(results)
    lines = [
        f"# Global-BBKB settings study ({dataset}, T = {args.T}, seed {args.seeds[0]})",
        "",
        "| scaling | lam | beta | time (s) | batches | final dict. | max batch | "
        "mean batch (last 200 steps) | rr@500 | rr@1000 | rr@T | alpha (last) |",
        "|" + "---|" * 12,
    ]
    for r in results:
        if r["status"] != "ok":
            lines.append(
                f"| {r['scaling']} | {r['lam']:g} | {r['beta']} | {r['status']} "
                "| | | | | | | | |"
            )
            continue
        lines.append(
            f"| {r['scaling']} | {r['lam']:g} | {r['beta']} | {r['time_s']:.1f} | "
            f"{r['num_batches']} | {r['final_dict_size']} | {r['max_batch']} | "
            f"{r['mean_batch_last_200']:.1f} | {r['rr_500']:.3f} | {r['rr_1000']:.3f} "
            f"| {r['rr_T']:.3f} | {r['alpha_last']:.3g} |"
        )
    lines += ["", f"Machine: {machine_details()}", ""]
    (out / "bbkb_settings_grid.md").write_text("\n".join(lines))


def worker(args: argparse.Namespace) -> None:
    """One Global-BBKB run; prints a JSON line of statistics (settings study)."""
    dataset = args.datasets[0]
    arms, f = load_problem(dataset, args.scaling)
    ls = args.lengthscale or TABLE1[dataset]["global"]
    res = run_method("global", arms, f, args.T, ls, args.seeds[0], args)
    rr = res.regret_ratio(f)
    bs = res.batch_size.to(torch.float64)
    T = args.T
    print(
        json.dumps(
            {
                "lengthscale": ls,
                "time_s": res.total_time,
                "num_batches": res.num_batches,
                "final_dict_size": int(res.dict_size[-1]),
                "max_batch": int(res.batch_sizes.max()),
                "mean_batch_last_200": float(bs[-200:].mean()),
                "rr_500": float(rr[min(500, T) - 1]),
                "rr_1000": float(rr[min(1000, T) - 1]),
                "rr_T": float(rr[-1]),
                "alpha_last": float(res.alphas[-1]),
            }
        )
    )


def old_commands(path: pathlib.Path) -> list[list[str]]:
    """Commands recorded in a ``_stats.json`` file."""
    return json.loads(path.read_text())["commands"]


def parse_seeds(text: str) -> list[int]:
    """``"N"`` -> ``[0, ..., N-1]``; ``"a,b"`` -> ``[a, b]``."""
    if "," in text:
        return [int(s) for s in text.split(",") if s]
    return list(range(int(text)))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="abalone,cadata", help="comma list")
    p.add_argument("--methods", default=",".join(ALL_METHODS), help="comma list")
    p.add_argument("--T", type=int, default=10_000, help="horizon of BBKB/BKB/uniform")
    p.add_argument("--T-exact", type=int, default=2_000, help="GP-UCB/GP-BUCB horizon")
    p.add_argument(
        "--seeds", default="3", help="number of seeds N (0..N-1) or a comma list"
    )
    p.add_argument(
        "--exact-seeds",
        default="1",
        help="seeds of GP-UCB/GP-BUCB (N or a comma list; default 1, they are slow)",
    )
    p.add_argument(
        "--scaling", default="minmax", choices=("minmax", "standardize", "none")
    )
    p.add_argument("--lam", type=float, default=1e-4, help="ridge lam (default xi^2)")
    p.add_argument("--C", type=float, default=2.0, help="batch threshold C~")
    p.add_argument("--q-bar", dest="q_bar", type=float, default=2.0)
    p.add_argument(
        "--beta", default="paper", help="'paper', 'reference_code' or a number"
    )
    p.add_argument(
        "--lengthscale", type=float, default=None, help="override Table 1 bandwidths"
    )
    p.add_argument(
        "--bandwidths",
        default=None,
        help="comma list (or 'paper') for the shared-bandwidth sweep (Figs. 5-6)",
    )
    p.add_argument("--every", type=int, default=100, help="CSV row spacing in steps")
    p.add_argument("--out", default=str(RESULTS), help="output directory")
    p.add_argument("--report-only", action="store_true", help="rebuild .png from CSV")
    p.add_argument("--settings", action="store_true", help="run the settings study")
    p.add_argument("--job-timeout", type=float, default=150.0, help="settings study")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--progress", action="store_true", help="tqdm progress bars")
    p.add_argument(
        "--append",
        action="store_true",
        help="keep the other methods' results already in the output files",
    )
    p.add_argument("--note", default="", help="free text appended to the .md")
    args = p.parse_args(argv)
    args.argv = ["python", "benchmarks/bench_bbkb.py", *(argv or sys.argv[1:])]
    args.datasets = [d for d in args.datasets.split(",") if d]
    args.methods = [m for m in args.methods.split(",") if m]
    for m in args.methods:
        if m not in ALL_METHODS:
            p.error(f"unknown method {m!r}; choose from {ALL_METHODS}")
    args.seeds = parse_seeds(args.seeds)
    args.exact_seeds = parse_seeds(args.exact_seeds)
    if args.bandwidths == "paper":
        args.bandwidths = list(PAPER_BANDWIDTHS)
    elif args.bandwidths:
        args.bandwidths = [float(b) for b in args.bandwidths.split(",")]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.worker:
        worker(args)
        return
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.settings:
        settings_study(args)
        return
    for dataset in args.datasets:
        if args.bandwidths:
            stem = f"bbkb_{dataset}_bandwidth"
            if not args.report_only:
                rows, stats = [], []
                for bw in args.bandwidths:
                    r, s = run_dataset(dataset, args.methods, args.seeds, args, bw)
                    rows += r
                    stats += s
                write_csv(out / f"{stem}.csv", rows)
                write_markdown(
                    out / f"{stem}.md",
                    dataset,
                    stats,
                    args,
                    f"{dataset}: shared-bandwidth sweep (paper Figs. 5-6)",
                    targets=False,
                )
            plot_bandwidth(out / f"{stem}.png", dataset, read_csv(out / f"{stem}.csv"))
            continue
        stem = f"bbkb_{dataset}"
        if not args.report_only:
            rows, stats = run_dataset(dataset, args.methods, args.seeds, args)
            stats_path = out / f"{stem}_stats.json"
            if args.append and stats_path.is_file():
                keep = set(args.methods)
                rows = [
                    r for r in read_csv(out / f"{stem}.csv") if r["method"] not in keep
                ] + rows
                old = json.loads(stats_path.read_text())["runs"]
                stats = [s for s in old if s["method"] not in keep] + stats
                args.argv = [*old_commands(stats_path), args.argv]
            else:
                args.argv = [args.argv]
            stats_path.write_text(
                json.dumps({"commands": args.argv, "runs": stats}, indent=1)
            )
            write_csv(out / f"{stem}.csv", rows)
            write_markdown(
                out / f"{stem}.md",
                dataset,
                stats,
                args,
                f"BBKB experiment on {dataset} (paper Sec. 5, Figs. 1-2)",
            )
        plot(out / f"{stem}.png", dataset, read_csv(out / f"{stem}.csv"), "method")


def plot_bandwidth(path: pathlib.Path, dataset: str, rows: Sequence[dict]) -> None:
    """Final regret ratio vs bandwidth per method (mean, min-max band).

    Args:
        path: Output PNG.
        dataset: Data set name.
        rows: CSV rows of the sweep.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    last: dict[tuple[str, float, str], tuple[float, float]] = {}
    for r in rows:
        key = (r["method"], float(r["lengthscale"]), r["seed"])
        if key not in last or float(r["t"]) > last[key][0]:
            last[key] = (float(r["t"]), float(r["regret_ratio"]))
    per: dict[str, dict[float, list[float]]] = {}
    for (method, ls, _), (_, v) in last.items():
        per.setdefault(method, {}).setdefault(ls, []).append(v)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, d in per.items():
        bws = sorted(d)
        mean = [sum(d[b]) / len(d[b]) for b in bws]
        (line,) = ax.plot(bws, mean, "o-", label=LABELS[method])
        ax.fill_between(
            bws,
            [min(d[b]) for b in bws],
            [max(d[b]) for b in bws],
            color=line.get_color(),
            alpha=0.2,
        )
    ax.set(
        xlabel="shared bandwidth l",
        ylabel="regret ratio at the horizon",
        title=f"{dataset}: bandwidth sweep",
        yscale="log",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
