"""GSSBO against exact GP-UCB, RSSBO and NystromGP: the experiment of Wei et al. (2025).

Problems (BoTorch test functions, negated to maximisation, searched in [0, 1]^d
and unnormalised to their domains): ``hart6``, ``powell50`` (BoTorch's Powell sums
over ``dim // 4 = 12`` blocks, so dims 49-50 are inert; spec C11), ``eggholder2``,
``levy20``, ``rastrigin100``. Every run starts from the same scrambled Sobol design
of ``--n-initial`` points (seeded by the run's seed) and then does ``--iterations``
steps of UCB (``mu + sqrt(beta) sigma``, fixed ``--beta``), maximised by
``optimize_acqf`` with ``--num-restarts`` / ``--raw-samples`` (identical for all
methods; the raw-sample RNG is seeded per seed and iteration). Methods:

* ``exact``: ``SingleTaskGP`` on all data (GP-UCB), Matérn-5/2 ARD;
* ``gssbo``: ``GradientSubsetGP(mode="vector")`` through ``GSSBORefitter``;
* ``gssbo_scalar``: the paper-literal scalar mode (sign balancing);
* ``rssbo``: ``mode="random"`` (forced points kept, the rest uniform);
* ``nystrom``: ``NystromGP`` (DTC, leverage-score dictionary), Matérn-5/2.

All GP fits are ``fit_gpytorch_mll`` (L-BFGS-B) at every iteration; ``exact`` and
the subset models are warm-started from the previous hyperparameters. Subset size:
``--subset-size M`` (fixed, default 100 like the paper's "about 100"), or
``--dynamic-z Z`` for the paper's timing rule (machine-dependent).

Timing: per iteration, model construction + selection + fit + acquisition
optimisation (the function evaluation is excluded), with the shared harness's
:func:`harness.timed` (wall, and CPU of the worker process). Regret: ``f* -
f(x_t)`` per BO step (the initial design, identical across methods, is not
counted); cumulative regret and cumulative time are reported.

Each (problem, method, seed) run is one task in a pool of ``--jobs`` worker
processes (one BLAS thread each). A task appends one CSV row per iteration to
``<out>/tmp/gssbo_parts/`` as it goes; the merged ``gssbo_<tag>.csv`` and the report
are rewritten after every finished task, so an interrupted run keeps its rows and
``--resume`` (the default) skips finished tasks.

Paper protocol (the defaults): 4 problems, 1,000 iterations, 10 seeds, n0 = 20.
Examples::

    OMP_NUM_THREADS=1 python benchmarks/bench_gssbo.py --problems hart6,powell50 \\
        --iterations 300 --seeds 3 --jobs 2 --tag reduced
    python benchmarks/bench_gssbo.py --report-only --tag reduced
"""

from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import pathlib
import statistics
from collections.abc import Sequence
from functools import partial

import torch
from harness import (
    RESULTS,
    figure,
    markdown_table,
    mean_sd,
    read_csv,
    timed,
    write_csv,
    write_report,
)

ALL_PROBLEMS = ("hart6", "powell50", "eggholder2", "levy20", "rastrigin100")
PAPER_PROBLEMS = ("hart6", "powell50", "eggholder2", "levy20")
ALL_METHODS = ("exact", "gssbo", "gssbo_scalar", "rssbo", "nystrom")
LABELS = {
    "exact": "GP-UCB (SingleTaskGP)",
    "gssbo": "GSSBO (vector)",
    "gssbo_scalar": "GSSBO (scalar)",
    "rssbo": "RSSBO",
    "nystrom": "NystromGP",
}

logger = logging.getLogger("bench_gssbo")


# ---------------------------------------------------------------------------------
# Problems and surrogates
# ---------------------------------------------------------------------------------


def make_problem(name: str):
    """The negated (maximisation) BoTorch test function ``name``."""
    from botorch.test_functions import EggHolder, Hartmann, Levy, Powell, Rastrigin

    factories = {
        "hart6": lambda: Hartmann(dim=6, negate=True),
        "powell50": lambda: Powell(dim=50, negate=True),
        "eggholder2": lambda: EggHolder(negate=True),
        "levy20": lambda: Levy(dim=20, negate=True),
        "rastrigin100": lambda: Rastrigin(dim=100, negate=True),
    }
    return factories[name]().to(torch.float64)


def matern(d: int):
    """Matérn-5/2 ARD with BoTorch's dimension-scaled lengthscale prior."""
    from botorch.models.utils.gpytorch_modules import (
        get_covar_module_with_dim_scaled_prior,
    )

    return get_covar_module_with_dim_scaled_prior(ard_num_dims=d, use_rbf_kernel=False)


class ExactFitter:
    """``SingleTaskGP`` on all data, warm-started from the last hyperparameters."""

    def __init__(self, d: int, warm_start: bool = True) -> None:
        self.d = d
        self.warm_start = warm_start
        self.model = None

    def fit(self, X, Y, iteration_time=None):
        from botorch.fit import fit_gpytorch_mll
        from botorch.models import SingleTaskGP
        from gpytorch.mlls import ExactMarginalLogLikelihood

        from botorch_sketch.loops.gssbo import hyperparameter_state

        model = SingleTaskGP(X, Y, covar_module=matern(self.d))
        if self.warm_start and self.model is not None:
            state = hyperparameter_state(self.model)
            model.load_state_dict(state, strict=False, keep_transforms=True)
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        self.model = model
        return model, X.shape[0]


class NystromFitter:
    """``NystromGP`` (its registered fit: leverage-score dictionary + VFE)."""

    def __init__(self, d: int, seed: int) -> None:
        self.d = d
        self.seed = seed

    def fit(self, X, Y, iteration_time=None):
        from botorch.fit import fit_gpytorch_mll
        from gpytorch.mlls import ExactMarginalLogLikelihood

        from botorch_sketch import NystromGP

        model = NystromGP(
            X, Y, covar_module=matern(self.d), seed=self.seed * 1_000_003 + len(X)
        )
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        return model, int(model.dictionary_indices.numel())


class SubsetFitter:
    """GSSBO / RSSBO through :class:`~botorch_sketch.loops.gssbo.GSSBORefitter`."""

    def __init__(self, mode, d, seed, n_initial, subset_size, dynamic_z, warm_start):
        from botorch_sketch.gssbo.selection import DynamicBufferSize
        from botorch_sketch.loops.gssbo import GSSBORefitter

        dynamic = None
        if dynamic_z is not None:
            dynamic = DynamicBufferSize(factor=dynamic_z, min_size=n_initial + 2)
            subset_size = None
        self.refitter = GSSBORefitter(
            subset_size=subset_size,
            dynamic=dynamic,
            n_initial=n_initial,
            seed=seed,
            warm_start=warm_start,
            mode=mode,
            covar_module=matern(d),
        )

    def fit(self, X, Y, iteration_time=None):
        model = self.refitter.fit(X, Y, iteration_time=iteration_time)
        return model, int(model.subset_indices.numel())


def make_fitter(method: str, d: int, seed: int, args: argparse.Namespace):
    warm_start = not getattr(args, "cold_start", False)
    if method == "exact":
        return ExactFitter(d, warm_start)
    if method == "nystrom":
        return NystromFitter(d, seed)
    mode = {"gssbo": "vector", "gssbo_scalar": "scalar", "rssbo": "random"}[method]
    return SubsetFitter(
        mode, d, seed, args.n_initial, args.subset_size, args.dynamic_z, warm_start
    )


# ---------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------


def part_path(args: argparse.Namespace, problem: str, method: str, seed: int):
    return (
        pathlib.Path(args.out)
        / "tmp"
        / f"gssbo_parts_{args.tag}"
        / (f"{problem}_{method}_{seed}.csv")
    )


#: Integer columns of the CSVs (``read_csv`` reads numbers as floats).
INT_COLUMNS = ("seed", "iteration", "n", "subset_size", "rep")


def read_rows(path: pathlib.Path) -> list[dict]:
    """The rows of ``path`` (none if it does not exist yet)."""
    rows = read_csv(path) if path.exists() else []
    return [{k: int(v) if k in INT_COLUMNS else v for k, v in r.items()} for r in rows]


def bo_step(fitter, X, Y, last_time, torch_seed: int, unit, args) -> tuple:
    """Fit the surrogate on ``(X, Y)`` and maximise UCB: ``(x, subset size)``."""
    from botorch.acquisition import UpperConfidenceBound
    from botorch.optim import optimize_acqf

    model, size = fitter.fit(X, Y, iteration_time=last_time)
    acqf = UpperConfidenceBound(model, beta=args.beta)
    torch.manual_seed(torch_seed)
    x, _ = optimize_acqf(
        acqf, unit, q=1, num_restarts=args.num_restarts, raw_samples=args.raw_samples
    )
    return x, size


def run_task(task: tuple[str, str, int, argparse.Namespace]) -> tuple[str, str, int]:
    """Run one (problem, method, seed); append a CSV row per iteration."""
    problem, method, seed, args = task
    torch.set_num_threads(1)
    from botorch.utils.sampling import draw_sobol_samples
    from botorch.utils.transforms import unnormalize

    f = make_problem(problem)
    d = f.dim
    unit = torch.stack([torch.zeros(d), torch.ones(d)]).to(torch.float64)
    X = draw_sobol_samples(unit, n=args.n_initial, q=1, seed=seed).squeeze(-2)
    Y = f(unnormalize(X, f.bounds)).unsqueeze(-1)
    fitter = make_fitter(method, d, seed, args)
    path = part_path(args, problem, method, seed)
    cum = {"regret": 0.0, "wall": 0.0, "cpu": 0.0}
    best = -math.inf
    last_time = None
    rows: list[dict] = []
    for t in range(1, args.iterations + 1):
        step = partial(bo_step, fitter, X, Y, last_time, seed * 100_003 + t, unit, args)
        (x, size), cost = timed(step)
        wall, cpu = cost["wall_s"], cost["cpu_s"]
        last_time = wall
        y = f(unnormalize(x, f.bounds)).unsqueeze(-1)
        X, Y = torch.cat([X, x]), torch.cat([Y, y])
        regret = float(f.optimal_value - y)
        best = max(best, float(y))
        cum["regret"] += regret
        cum["wall"] += wall
        cum["cpu"] += cpu
        rows.append(
            {
                "problem": problem,
                "method": method,
                "seed": seed,
                "iteration": t,
                "n": X.shape[0] - 1,
                "subset_size": size,
                "regret": f"{regret:.6g}",
                "cum_regret": f"{cum['regret']:.6g}",
                "best_regret": f"{float(f.optimal_value) - best:.6g}",
                "wall_s": f"{wall:.4f}",
                "cpu_s": f"{cpu:.4f}",
                "cum_wall_s": f"{cum['wall']:.3f}",
                "cum_cpu_s": f"{cum['cpu']:.3f}",
            }
        )
        # Rewritten every iteration: an interrupted task keeps its rows.
        write_csv(path, rows)
    return problem, method, seed
    return problem, method, seed


# ---------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------


def merge_parts(args: argparse.Namespace, tasks) -> list[dict]:
    rows = []
    for problem, method, seed in tasks:
        rows.extend(read_rows(part_path(args, problem, method, seed)))
    write_csv(pathlib.Path(args.out) / f"gssbo_{args.tag}.csv", rows)
    return rows


def final_rows(rows: Sequence[dict], iterations: int) -> dict:
    """``{(problem, method): [last row of each complete seed]}``."""
    out: dict = {}
    for r in rows:
        if int(r["iteration"]) == iterations:
            out.setdefault((r["problem"], r["method"]), []).append(r)
    return out


def column(rows: Sequence[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows]


def report(args: argparse.Namespace, rows: Sequence[dict]) -> None:
    finals = final_rows(rows, args.iterations)
    problems = [p for p in args.problems if any(k[0] == p for k in finals)]
    sections = [
        f"Protocol: n0 = {args.n_initial} Sobol points, {args.iterations} UCB "
        f"iterations (beta = {args.beta}), optimize_acqf(num_restarts="
        f"{args.num_restarts}, raw_samples={args.raw_samples}), subset size "
        + (
            f"M = {args.subset_size}"
            if args.dynamic_z is None
            else f"Z = {args.dynamic_z}"
        )
        + ". Values: mean ± sd over the complete seeds; times in seconds (model + "
        "selection + fit + acquisition, evaluation excluded)."
    ]
    for problem in problems:
        exact = finals.get((problem, "exact"), [])
        ex_wall = statistics.fmean(column(exact, "cum_wall_s")) if exact else None
        ex_cpu = statistics.fmean(column(exact, "cum_cpu_s")) if exact else None
        table = []
        for method in args.methods:
            fin = finals.get((problem, method), [])
            if not fin:
                continue
            wall, cpu = column(fin, "cum_wall_s"), column(fin, "cum_cpu_s")
            table.append(
                {
                    "method": LABELS[method],
                    "seeds": str(len(fin)),
                    "cumulative regret": mean_sd(column(fin, "cum_regret")),
                    "final simple regret": mean_sd(column(fin, "best_regret")),
                    "cum. wall time": mean_sd(wall),
                    "cum. CPU time": mean_sd(cpu),
                    "wall / exact": (
                        f"{statistics.fmean(wall) / ex_wall:.2f}" if ex_wall else "-"
                    ),
                    "CPU / exact": (
                        f"{statistics.fmean(cpu) / ex_cpu:.2f}" if ex_cpu else "-"
                    ),
                    "M (last)": str(int(fin[0]["subset_size"])),
                }
            )
        lines = [f"## {problem}", "", markdown_table(table), ""]
        lines += [*partial_lines(problem, rows, finals, args), ""]
        lines += target_lines(problem, finals, args)
        sections.append("\n".join(lines))
    out = pathlib.Path(args.out) / f"gssbo_{args.tag}.md"
    write_report(out, f"GSSBO benchmark (`{args.tag}`)", sections)
    plot(args, rows, problems)


def partial_lines(
    problem: str, rows: Sequence[dict], finals: dict, args: argparse.Namespace
) -> list[str]:
    """Unfinished runs of methods without a finished one, against GP-UCB at t."""
    exact = {
        (r["seed"], r["iteration"]): r
        for r in rows
        if r["problem"] == problem and r["method"] == "exact"
    }
    out = []
    for method in args.methods:
        if finals.get((problem, method)):
            continue
        last: dict = {}
        for r in rows:
            if r["problem"] == problem and r["method"] == method:
                last[r["seed"]] = r
        for seed, r in sorted(last.items()):
            ref = exact.get((seed, r["iteration"]))
            vs = (
                f" (GP-UCB, same seed and iteration: {float(ref['cum_regret']):.4g}, "
                f"{float(ref['cum_cpu_s']):.1f} s)"
                if ref
                else ""
            )
            out.append(
                f"Unfinished: {LABELS[method]} seed {seed} stopped at iteration "
                f"{r['iteration']} of {args.iterations}: cumulative regret "
                f"{float(r['cum_regret']):.4g}, cumulative CPU "
                f"{float(r['cum_cpu_s']):.1f} s{vs}."
            )
    return out


def target_lines(problem: str, finals: dict, args: argparse.Namespace) -> list[str]:
    """The issue's target, evaluated at the recorded horizon."""
    exact = finals.get((problem, "exact"), [])
    gss = finals.get((problem, "gssbo"), [])
    if not exact or not gss:
        return []
    ex_reg = column(exact, "cum_regret")
    gs_reg = statistics.fmean(column(gss, "cum_regret"))

    def ratio(key: str) -> float:
        return statistics.fmean(column(gss, key)) / statistics.fmean(column(exact, key))

    wall, cpu = ratio("cum_wall_s"), ratio("cum_cpu_s")
    lo, hi = min(ex_reg), max(ex_reg)
    within = lo <= gs_reg <= hi or gs_reg < lo
    met = max(wall, cpu) <= 0.15 and within
    return [
        f"Target (issue 4, stated for 1,000 iterations): GSSBO total time <= 15% of "
        f"GP-UCB's with cumulative regret within GP-UCB's seed spread. Measured at "
        f"{args.iterations} iterations: time ratio {wall:.2f} (wall), {cpu:.2f} "
        f"(CPU); GSSBO mean cumulative regret {gs_reg:.4g} vs GP-UCB seeds "
        f"[{lo:.4g}, {hi:.4g}]: {'within or below' if within else 'above'} the "
        f"spread. {'MET' if met else 'NOT MET'} at this horizon.",
    ]


def plot(args: argparse.Namespace, rows: Sequence[dict], problems: list[str]) -> None:
    if not problems:
        return
    fig, axes = figure(
        2, len(problems), figsize=(4.5 * len(problems), 7), squeeze=False
    )
    for col, problem in enumerate(problems):
        for method in args.methods:
            runs: dict = {}
            for r in rows:
                if r["problem"] == problem and r["method"] == method:
                    runs.setdefault(r["seed"], []).append(r)
            done = {s: v for s, v in runs.items() if len(v) == args.iterations}
            for row, key in enumerate(("cum_regret", "cum_cpu_s")):
                ax = axes[row][col]
                if not done:  # only unfinished runs: dashed, up to where they got
                    for seed, v in runs.items():
                        ax.plot(
                            [int(r["iteration"]) for r in v],
                            [float(r[key]) for r in v],
                            "--",
                            label=f"{LABELS[method]} (seed {int(seed)}, unfinished)",
                        )
                    continue
                t = torch.arange(1, args.iterations + 1)
                vals = torch.tensor([[float(r[key]) for r in v] for v in done.values()])
                ax.plot(t, vals.mean(0), label=f"{LABELS[method]} ({len(done)})")
                ax.fill_between(t, vals.min(0).values, vals.max(0).values, alpha=0.2)
        axes[0][col].set_title(problem)
        axes[0][col].set_ylabel("cumulative regret")
        axes[1][col].set_ylabel("cumulative CPU time [s]")
        axes[1][col].set_xlabel("iteration")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("mean over seeds, band = min/max")
    fig.tight_layout()
    fig.savefig(pathlib.Path(args.out) / f"gssbo_{args.tag}.png", dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)


# ---------------------------------------------------------------------------------
# Per-step cost at large N (for extrapolating the time ratio to 1,000 iterations)
# ---------------------------------------------------------------------------------


def step_cost(problem: str, method: str, n: int, rep: int, args) -> dict:
    """Time one warm BO step at ``n`` points: refit on ``n + 1`` points + UCB.

    The previous model (on the first ``n`` points, fitted untimed) is the warm
    start (unless ``--cold-start``) and GSSBO's pilot, as in the BO loop. The
    data are a scrambled Sobol design, not a BO trajectory: this measures cost,
    not regret.
    """
    from botorch.utils.sampling import draw_sobol_samples
    from botorch.utils.transforms import unnormalize

    f = make_problem(problem)
    d = f.dim
    unit = torch.stack([torch.zeros(d), torch.ones(d)]).to(torch.float64)
    X = draw_sobol_samples(unit, n=n + 1, q=1, seed=rep).squeeze(-2)
    Y = f(unnormalize(X, f.bounds)).unsqueeze(-1)
    fitter = make_fitter(method, d, rep, args)
    fitter.fit(X[:n], Y[:n])
    (_, size), cost = timed(partial(bo_step, fitter, X, Y, None, rep, unit, args))
    wall, cpu = cost["wall_s"], cost["cpu_s"]
    return {
        "problem": problem,
        "method": method,
        "n": n,
        "rep": rep,
        "wall_s": f"{wall:.4f}",
        "cpu_s": f"{cpu:.4f}",
        "subset_size": size,
    }


def run_scaling(args: argparse.Namespace) -> None:
    """Per-step CPU cost vs ``n``; extrapolated cumulative-time ratio at 1,000 it.

    Rows already in the CSV are kept and not re-measured (resume); the report
    uses every size at which both methods have rows.
    """
    torch.set_num_threads(1)
    out = pathlib.Path(args.out) / f"gssbo_scaling_{args.tag}.csv"
    rows = read_rows(out)
    done = {(r["problem"], r["method"], int(r["n"]), int(r["rep"])) for r in rows}
    for problem in args.problems:
        for n in args.scaling_sizes:
            for method in ("exact", "gssbo"):
                for rep in range(args.seeds):
                    if (problem, method, n, rep) in done or args.report_only:
                        continue
                    row = step_cost(problem, method, n, rep, args)
                    logger.info("scaling %s", row)
                    rows.append(row)
                    write_csv(out, rows)
    write_scaling_report(args, rows)


def write_scaling_report(args: argparse.Namespace, rows: Sequence[dict]) -> None:
    table = []
    lines = [
        f"One BO step ({'cold' if args.cold_start else 'warm'}-started refit on "
        "n + 1 points, previous model as pilot, then UCB optimisation), "
        f"M = {args.subset_size}, mean CPU seconds over the repetitions (process "
        "time; mean wall seconds in brackets).",
    ]
    notes = []
    for problem in args.problems:
        cost = {}
        for n in sorted({int(r["n"]) for r in rows if r["problem"] == problem}):
            sel = {
                method: [
                    r
                    for r in rows
                    if r["problem"] == problem
                    and r["method"] == method
                    and int(r["n"]) == n
                ]
                for method in ("exact", "gssbo")
            }
            if not all(sel.values()):
                continue
            for method, rs in sel.items():
                cost[method, n] = (
                    statistics.fmean(column(rs, "cpu_s")),
                    statistics.fmean(column(rs, "wall_s")),
                )
            e, g = cost["exact", n], cost["gssbo", n]
            table.append(
                {
                    "problem": problem,
                    "n": str(n),
                    "reps": str(len(sel["exact"])),
                    "exact GP-UCB": f"{e[0]:.3g} ({e[1]:.3g})",
                    "GSSBO": f"{g[0]:.3g} ({g[1]:.3g})",
                    "GSSBO / exact": f"{g[0] / e[0]:.2f}",
                }
            )
        sizes = sorted({n for _, n in cost})
        if len(sizes) < 2:
            continue
        total = {}
        for method in ("exact", "gssbo"):
            # Piecewise-linear per-step cost in n, constant outside the sizes.
            ns = torch.tensor([float(n) for n in sizes])
            cs = torch.tensor([cost[method, n][0] for n in sizes])
            steps = torch.arange(args.n_initial, args.n_initial + 1000).double()
            idx = torch.searchsorted(ns, steps).clamp(1, len(sizes) - 1)
            w = ((steps - ns[idx - 1]) / (ns[idx] - ns[idx - 1])).clamp(0, 1)
            total[method] = float((cs[idx - 1] + w * (cs[idx] - cs[idx - 1])).sum())
        notes.append(
            f"{problem}: per-step CPU cost interpolated over 1,000 steps (n = "
            f"{args.n_initial} .. {args.n_initial + 999}; held constant beyond "
            f"n = {sizes[-1]}): exact {total['exact']:.0f} s, GSSBO "
            f"{total['gssbo']:.0f} s, ratio {total['gssbo'] / total['exact']:.2f}."
        )
    write_report(
        pathlib.Path(args.out) / f"gssbo_scaling_{args.tag}.md",
        f"GSSBO per-step cost vs n (`{args.tag}`)",
        ["\n".join(lines), markdown_table(table), "\n".join(notes)],
    )


# ---------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", default=",".join(PAPER_PROBLEMS), help="comma list")
    p.add_argument("--methods", default=",".join(ALL_METHODS), help="comma list")
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=10, help="seeds 0 .. seeds-1")
    p.add_argument("--n-initial", dest="n_initial", type=int, default=20)
    p.add_argument("--subset-size", dest="subset_size", type=int, default=100)
    p.add_argument(
        "--dynamic-z",
        dest="dynamic_z",
        type=float,
        default=None,
        help="use the paper's timing rule with this Z instead of a fixed M",
    )
    p.add_argument("--beta", type=float, default=2.0, help="UCB beta (sqrt convention)")
    p.add_argument("--num-restarts", dest="num_restarts", type=int, default=2)
    p.add_argument("--raw-samples", dest="raw_samples", type=int, default=128)
    p.add_argument(
        "--cold-start",
        dest="cold_start",
        action="store_true",
        help="fit every model from BoTorch's default initial hyperparameters "
        "(default: warm start from the previous iteration's)",
    )
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--tag", default="paper", help="output name gssbo_<tag>.*")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--no-resume", dest="resume", action="store_false")
    p.add_argument("--report-only", action="store_true")
    p.add_argument(
        "--scaling",
        action="store_true",
        help="measure one BO step's cost at --scaling-sizes instead of full runs",
    )
    p.add_argument("--scaling-sizes", dest="scaling_sizes", default="100,250,500,1000")
    args = p.parse_args(argv)
    args.problems = [s for s in args.problems.split(",") if s]
    args.methods = [s for s in args.methods.split(",") if s]
    args.scaling_sizes = [int(s) for s in args.scaling_sizes.split(",") if s]
    for name, allowed in (("problems", ALL_PROBLEMS), ("methods", ALL_METHODS)):
        bad = set(getattr(args, name)) - set(allowed)
        if bad:
            p.error(f"unknown {name}: {sorted(bad)} (allowed: {allowed})")
    return args


def is_complete(args: argparse.Namespace, task: tuple[str, str, int]) -> bool:
    rows = read_rows(part_path(args, *task))
    return bool(rows) and int(rows[-1]["iteration"]) == args.iterations


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    if args.scaling:
        run_scaling(args)
        return
    tasks = [
        (problem, method, seed)
        for problem in args.problems
        for seed in range(args.seeds)
        for method in args.methods
    ]
    if not args.report_only:
        todo = [t for t in tasks if not (args.resume and is_complete(args, t))]
        logger.info("%d tasks, %d to run, %d jobs", len(tasks), len(todo), args.jobs)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(args.jobs, maxtasksperchild=1) as pool:
            for done in pool.imap_unordered(run_task, [(*t, args) for t in todo]):
                logger.info("finished %s", done)
                report(args, merge_parts(args, tasks))
    report(args, merge_parts(args, tasks))


if __name__ == "__main__":
    main()
