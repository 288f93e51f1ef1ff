"""``NystromGP`` against the exact GP, SGPR and SVGP: time, test NLL, memory (issue 15).

Measures issue 15's model targets for the budgeted ``NystromGP`` (dictionary cap
``max_dictionary_size`` 1,000, hyperparameters by the exact likelihood of a
1,000-point subsample, exact GP below ``exact_max_n`` 500):

- fit + predict never slower than ``SingleTaskGP`` by more than 1.5x at any n;
- fit + predict under 60 s at n = 20,000 and 100,000 (Cadata has 20,640 rows: its
  largest cell is n = 16,000, the most that leaves a 2,000-row test set);
- test NLL within 2 % of the best of ``SingleTaskGP``, SGPR and SVGP with as many
  inducing points as ``NystromGP``'s dictionary, at a lower fit time than each.

Every model is used as a user would, with defaults: ``Model(X, Y)`` (each model's
default ``Standardize`` outcome transform, no input transform) and
``fit_gpytorch_mll``; only the competitors' fits are capped in time (L-BFGS-B
``timeout_sec`` for the exact GP and SGPR, Adam ``timeout_sec`` for SVGP).

- ``nystrom``: ``NystromGP(X, Y, seed=seed)`` + ``ExactMarginalLogLikelihood``.
- ``exact``: ``SingleTaskGP(X, Y)``; skipped above ``--exact-max-n`` (one L-BFGS-B
  evaluation is ``O(n^3)``; at n = 4,000 the capped fit already takes the cap).
- ``sgpr``: ``SingleTaskGP`` with gpytorch's ``InducingPointKernel`` (Titsias' VFE
  bound through ``ExactMarginalLogLikelihood``; BoTorch's default RBF kernel and
  likelihood priors), inducing points initialised at ``NystromGP``'s dictionary
  and learned.
- ``svgp``: BoTorch's ``SingleTaskVariationalGP`` with the same inducing points
  (learned), ``VariationalELBO``, minibatch Adam (batch 1,024, lr 0.03, no
  stopping rule): the time cap ends the fit.

Data (``load_data``): Cadata (standardized features and target, seeded split, test
set of 2,000 rows) and a low-noise Hartmann6 (inputs uniform on ``[0, 1]^6``,
noise sd 0.05, about 0.13 of the function's sd, so ``d_eff`` grows almost like
``n``; target standardized by the training mean and sd). Prediction: Gaussian
marginals with observation noise on the test set; ``NystromGP`` takes one
``posterior(X_test, observation_noise=True)`` (its lazy marginal path, checked per
cell), the others joint posteriors over chunks of 500 whose diagonal is taken.
NLL (mean negative log predictive density) and RMSE are in standardized units.

Each cell (data set, n, method, seed) runs in a fresh process: its peak RSS is its
own (``ru_maxrss``), and a watchdog kills it past ``--memory-limit-gb`` or
``--cell-timeout``. Rows are appended to the CSV as cells finish; a rerun skips the
cells the CSV has. ``--report-only`` rebuilds the Markdown and the figure.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import (  # noqa: E402
    RESULTS,
    figure,
    markdown_table,
    mean_sd,
    read_csv,
    timed,
    write_csv,
    write_report,
)

SIZES = {"cadata": (1000, 4000, 16000), "synthetic": (1000, 4000, 20000, 100000)}
METHODS = ("nystrom", "exact", "sgpr", "svgp")
LABELS = {
    "nystrom": "NystromGP",
    "exact": "SingleTaskGP",
    "sgpr": "SGPR",
    "svgp": "SVGP",
}
N_TEST = 2000
NOISE_SD = 0.05
PREDICT_CHUNK = 500
SVGP_BATCH = 1024
SVGP_LR = 0.03
CACHE = RESULTS / "tmp" / "nystrom_dictionaries"


def load_data(dataset: str, n: int, seed: int) -> dict[str, Any]:
    """Float64 ``train_X`` (n x d), ``train_Y`` (n x 1), ``test_X``, ``test_y``.

    Cadata: features standardized (``standardize_features``) and target
    standardized over all rows; a seeded permutation gives the 2,000 test rows
    first and the n training rows next. Synthetic: noisy Hartmann6 on
    ``[0, 1]^6`` (seeded inputs and noise), target standardized by the training
    mean and sd.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    if dataset == "cadata":
        from botorch_sketch.datasets import load_cadata, standardize_features

        X, y = load_cadata()
        if n > X.shape[0] - N_TEST:
            raise ValueError(f"cadata: n <= {X.shape[0] - N_TEST}, got {n}.")
        X, y = standardize_features(X), (y - y.mean()) / y.std()
        perm = torch.randperm(X.shape[0], generator=g)
        test, train = perm[:N_TEST], perm[N_TEST : N_TEST + n]
        return {
            "train_X": X[train].contiguous(),
            "train_Y": y[train].unsqueeze(-1).contiguous(),
            "test_X": X[test].contiguous(),
            "test_y": y[test].contiguous(),
        }
    if dataset != "synthetic":
        raise ValueError(f"unknown dataset {dataset!r}")
    from botorch.test_functions import Hartmann

    f = Hartmann(dim=6).evaluate_true
    X = torch.rand(n + N_TEST, 6, generator=g, dtype=torch.float64)
    y = f(X) + NOISE_SD * torch.randn(n + N_TEST, generator=g, dtype=torch.float64)
    mu, sd = y[:n].mean(), y[:n].std()
    y = (y - mu) / sd
    return {
        "train_X": X[:n].contiguous(),
        "train_Y": y[:n].unsqueeze(-1).contiguous(),
        "test_X": X[n:].contiguous(),
        "test_y": y[n:].contiguous(),
    }


# ------------------------------------------------------------------ the models


def _cache_path(dataset: str, n: int, seed: int) -> Path:
    return CACHE / f"{dataset}_{n}_{seed}.pt"


def fit_nystrom(data: dict[str, Any], args: argparse.Namespace) -> Any:
    """``NystromGP`` with defaults, fitted as the README shows."""
    from botorch.fit import fit_gpytorch_mll
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from botorch_sketch.models import NystromGP

    model = NystromGP(data["train_X"], data["train_Y"], seed=args.seed)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def fit_exact(data: dict[str, Any], args: argparse.Namespace) -> Any:
    """``SingleTaskGP`` with defaults, each L-BFGS-B attempt capped in time."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    model = SingleTaskGP(data["train_X"], data["train_Y"])
    fit_gpytorch_mll(
        ExactMarginalLogLikelihood(model.likelihood, model),
        optimizer_kwargs={"timeout_sec": args.exact_cap},
    )
    return model


def _inducing_points(data: dict[str, Any], args: argparse.Namespace) -> Any:
    """``NystromGP``'s dictionary of this cell (saved by its cell, else refitted)."""
    import torch

    path = _cache_path(args.dataset, args.n, args.seed)
    if path.exists():
        return torch.load(path)
    return fit_nystrom(data, args).inducing_points.detach().clone()


def fit_sgpr(data: dict[str, Any], args: argparse.Namespace, Z: Any) -> Any:
    """SGPR (VFE): ``InducingPointKernel`` in a ``SingleTaskGP``, capped L-BFGS-B."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.utils.gpytorch_modules import (
        get_covar_module_with_dim_scaled_prior,
        get_gaussian_likelihood_with_lognormal_prior,
    )
    from gpytorch.kernels import InducingPointKernel
    from gpytorch.mlls import ExactMarginalLogLikelihood

    d = data["train_X"].shape[-1]
    likelihood = get_gaussian_likelihood_with_lognormal_prior()
    base = get_covar_module_with_dim_scaled_prior(ard_num_dims=d)
    covar = InducingPointKernel(base, inducing_points=Z, likelihood=likelihood)
    model = SingleTaskGP(
        data["train_X"], data["train_Y"], likelihood=likelihood, covar_module=covar
    )
    fit_gpytorch_mll(
        ExactMarginalLogLikelihood(likelihood, model),
        optimizer_kwargs={"timeout_sec": args.sgpr_cap},
    )
    return model


def fit_svgp(data: dict[str, Any], args: argparse.Namespace, Z: Any) -> Any:
    """``SingleTaskVariationalGP``, ``VariationalELBO``, minibatch Adam, capped."""
    from functools import partial

    import torch
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.approximate_gp import SingleTaskVariationalGP
    from botorch.models.transforms import Standardize
    from gpytorch.mlls import VariationalELBO
    from torch.utils.data import DataLoader, TensorDataset

    X, Y = data["train_X"], data["train_Y"]
    model = SingleTaskVariationalGP(
        X, Y, inducing_points=Z, outcome_transform=Standardize(1)
    )
    inner = model.model
    loader = DataLoader(
        TensorDataset(inner.train_inputs[0], inner.train_targets),
        batch_size=min(SVGP_BATCH, X.shape[0]),
        shuffle=True,
        generator=torch.Generator().manual_seed(args.seed),
    )
    fit_gpytorch_mll(
        VariationalELBO(model.likelihood, inner, num_data=X.shape[0]),
        data_loader=loader,
        optimizer_kwargs={
            "step_limit": 10**6,
            "timeout_sec": args.svgp_cap,
            "stopping_criterion": None,
            "optimizer": partial(torch.optim.Adam, lr=SVGP_LR),
        },
    )
    return model


def predict(model: Any, test_X: Any, method: str) -> tuple[Any, Any, str]:
    """Marginal means and variances with observation noise; and the path taken."""
    import torch
    from linear_operator.operators import DenseLinearOperator

    with torch.no_grad():
        if method == "nystrom":
            post = model.posterior(test_X, observation_noise=True)
            lazy = post.distribution.lazy_covariance_matrix
            path = "dense joint" if isinstance(lazy, DenseLinearOperator) else "lazy"
            return post.mean.squeeze(-1), post.variance.squeeze(-1), path
        means, variances = [], []
        for chunk in test_X.split(PREDICT_CHUNK):
            post = model.posterior(chunk, observation_noise=True)
            means.append(post.mean.squeeze(-1))
            variances.append(post.variance.squeeze(-1))
        return torch.cat(means), torch.cat(variances), f"joint chunks {PREDICT_CHUNK}"


def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    """One cell in this process: fit, predict, score; returns the CSV row."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    data = load_data(args.dataset, args.n, args.seed)
    Z = None
    if args.method in ("sgpr", "svgp"):
        Z = _inducing_points(data, args)
    fitters = {
        "nystrom": lambda: fit_nystrom(data, args),
        "exact": lambda: fit_exact(data, args),
        "sgpr": lambda: fit_sgpr(data, args, Z.clone()),
        "svgp": lambda: fit_svgp(data, args, Z.clone()),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. BoTorch's input-scaling warnings
        model, fit_t = timed(fitters[args.method])
        (mean, var, path), pred_t = timed(
            lambda: predict(model, data["test_X"], args.method)
        )
    y = data["test_y"]
    row: dict[str, Any] = {
        "fit_time_s": fit_t["wall_s"],
        "fit_cpu_s": fit_t["cpu_s"],
        "predict_time_s": pred_t["wall_s"],
        "predict_cpu_s": pred_t["cpu_s"],
        "total_s": fit_t["wall_s"] + pred_t["wall_s"],
        "total_cpu_s": fit_t["cpu_s"] + pred_t["cpu_s"],
        "load": 0.5 * (fit_t["load"] + pred_t["load"]),
        "nll": float(
            (0.5 * (math.log(2 * math.pi) + var.log() + (y - mean) ** 2 / var)).mean()
        ),
        "rmse": float((y - mean).pow(2).mean().sqrt()),
        "m": "" if Z is None else int(Z.shape[-2]),
        "predict_path": path,
        "timed_out": fit_t["wall_s"] >= getattr(args, f"{args.method}_cap", math.inf),
        "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cap_s": getattr(args, f"{args.method}_cap", ""),
    }
    if args.method == "nystrom":
        row["m"] = model.dictionary_size
        row["dictionary_capped"] = bool(model.dictionary_capped)
        row["exact_regime"] = model.dictionary_size == args.n
        CACHE.mkdir(parents=True, exist_ok=True)
        torch.save(model.inducing_points.detach().clone(), _cache_path(
            args.dataset, args.n, args.seed
        ))  # fmt: skip
        # The marginal path agrees with the diagonal of a small joint posterior.
        with torch.no_grad():
            few = model.posterior(data["test_X"][:4], observation_noise=True)
            diff = (few.variance.squeeze(-1) - var[:4]).abs().max()
        row["marginal_check"] = float(diff)
    return row


# ------------------------------------------------------------- cells, processes


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Cells in run order: per (data set, n, seed) NystromGP first (its
    dictionary is the others' inducing points); seeds ``1..`` only for n <= 4,000."""
    cells = []
    for dataset in args.datasets:
        for n in args.sizes or SIZES[dataset]:
            for seed in range(args.seeds if n <= 4000 else 1):
                for method in args.methods:
                    cells.append(
                        {"dataset": dataset, "n": n, "method": method, "seed": seed}
                    )
    return cells


def skip_reason(cell: dict[str, Any], args: argparse.Namespace) -> str:
    if cell["method"] == "exact" and cell["n"] > args.exact_max_n:
        return (
            f"skipped: n > {args.exact_max_n} (an O(n^3) L-BFGS-B evaluation; at n ="
            f" 4,000 the fit already reaches its {args.exact_cap:.0f} s cap)"
        )
    return ""


def run_cell(cell: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Run ``cell`` in a fresh process, watching its RSS and wall time."""
    cmd = [sys.executable, __file__, "--worker", json.dumps(cell)]
    cmd += [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in CAP_ARGS]
    out_path = RESULTS / "tmp" / "nystrom_cell.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.unlink(missing_ok=True)
    proc = subprocess.Popen(cmd + [f"--worker-out={out_path}"])
    start, peak, status = time.perf_counter(), 0.0, "ok"
    while proc.poll() is None:
        peak = max(peak, _rss_mb(proc.pid))
        if peak > 1024 * args.memory_limit_gb:
            status = f"failed: RSS over {args.memory_limit_gb} GB"
        elif time.perf_counter() - start > args.cell_timeout:
            status = f"failed: over {args.cell_timeout:.0f} s"
        if status != "ok":
            proc.kill()
        time.sleep(0.5)
    if status == "ok" and (proc.returncode or not out_path.exists()):
        status = f"failed: exit status {proc.returncode}"
    row = {**cell, "status": status, "rss_sampled_mb": peak}
    return {**row, **json.loads(out_path.read_text())} if status == "ok" else row


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# ------------------------------------------------------------------- report


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (data set, n, method): means ± sd over seeds."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], int(r["n"]), r["method"]), []).append(r)
    out = []
    for (dataset, n, method), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        if not ok:
            out.append({"dataset": dataset, "n": n, "method": method,
                        "note": rs[0]["status"]})  # fmt: skip
            continue

        def vals(key: str, ok: list = ok) -> list[float]:
            return [float(r[key]) for r in ok if r.get(key) not in ("", None)]

        def avg(key: str) -> float:
            v = vals(key)
            return sum(v) / len(v) if v else math.nan

        notes = []
        if any(str(r.get("timed_out")) == "True" for r in ok):
            notes.append("fit hit its time cap")
        if any(str(r.get("dictionary_capped")) == "True" for r in ok):
            notes.append("dictionary capped")
        if any(str(r.get("exact_regime")) == "True" for r in ok):
            notes.append("exact regime (m = n)")
        out.append({
            "dataset": dataset, "n": n, "method": method, "seeds": len(ok),
            "fit s": mean_sd(vals("fit_time_s")),
            "fit CPU s": mean_sd(vals("fit_cpu_s")),
            "predict s": mean_sd(vals("predict_time_s")),
            "total s": avg("total_s"), "total CPU s": avg("total_cpu_s"),
            "fit_s": avg("fit_time_s"), "fit_cpu": avg("fit_cpu_s"),
            "NLL": mean_sd(vals("nll"), "{:.4f}"), "nll": avg("nll"),
            "RMSE": mean_sd(vals("rmse"), "{:.4f}"),
            "m": mean_sd(vals("m"), "{:.0f}"),
            "peak RSS MB": avg("rss_peak_mb"), "load": avg("load"),
            "note": "; ".join(notes),
        })  # fmt: skip
    return out


def targets(summary: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """The issue's three model targets, met / not met, with the numbers."""
    by = {(s["dataset"], s["n"], s["method"]): s for s in summary}
    nys = [s for s in summary if s["method"] == "nystrom" and "nll" in s]
    speed, under60, quality = [], [], []
    for s in nys:
        key = f"{s['dataset']} n = {s['n']:,}"
        ex = by.get((s["dataset"], s["n"], "exact"), {})
        if "nll" in ex:
            r_wall = s["total s"] / ex["total s"]
            r_cpu = s["total CPU s"] / ex["total CPU s"]
            speed.append((max(r_wall, r_cpu), f"{key}: {r_wall:.2f}x wall "
                          f"({s['total s']:.1f} vs {ex['total s']:.1f} s), "
                          f"{r_cpu:.2f}x CPU"))  # fmt: skip
        if s["n"] >= 16000:
            under60.append((s["total s"], f"{key}: {s['total s']:.1f} s wall "
                            f"({s['total CPU s']:.1f} s CPU, load "
                            f"{s['load']:.1f})"))  # fmt: skip
        others = [by[(s["dataset"], s["n"], m)] for m in ("exact", "sgpr", "svgp")
                  if "nll" in by.get((s["dataset"], s["n"], m), {})]  # fmt: skip
        if others:
            best = min(others, key=lambda o: o["nll"])
            gap = (s["nll"] - best["nll"]) / abs(best["nll"])
            slower = [LABELS[o["method"]] for o in others if o["fit_s"] <= s["fit_s"]]
            times = ", ".join(
                f"{LABELS[o['method']]} {o['fit_s']:.1f} s" for o in others
            )
            ok = gap <= 0.02 and not slower
            quality.append(
                (
                    gap if not slower else math.inf,
                    f"{key}: NLL {s['nll']:.4f} vs best {LABELS[best['method']]} "
                    f"{best['nll']:.4f} ({100 * gap:+.1f} %, "
                    f"{s['nll'] - best['nll']:+.4f} nats); fit {s['fit_s']:.1f} s vs "
                    f"{times}; {'met' if ok else '**not met**'}",
                )
            )

    def verdict(items: list[tuple[float, str]], limit: float, what: str) -> str:
        if not items:
            return f"- {what}: **not measured** in this run."
        met = all(v <= limit for v, _ in items)
        items = sorted(items)
        text = f"- {what}: **{'met' if met else 'not met'}**; worst {items[-1][1]}"
        if len(items) > 1:
            text += f"; best {items[0][1]}"
        return text

    lines = [
        verdict(
            speed,
            1.5,
            "fit + predict within 1.5x of `SingleTaskGP` (larger "
            "of the wall and CPU ratios)",
        ),
        verdict(under60, 60.0, "fit + predict under 60 s at n >= 16,000"),
        "  Cadata has 20,640 rows: n = 20,000 and 100,000 cannot leave a 2,000-row "
        "test set, so its largest cell is n = 16,000.",
        verdict(
            quality,
            0.02,
            "NLL within 2 % of the best competitor (exact, "
            "SGPR, SVGP where they ran) at a lower fit time than each",
        ),
        "",
        "Per cell:",
        "",
        *[f"- {t}" for _, t in speed + under60 + quality],
    ]
    regime = [s for s in nys if "exact regime" in s.get("note", "")]
    if regime:
        lines += ["", "Regime guard: `NystromGP` used every point (the exact GP) at "
                  + ", ".join(f"{s['dataset']} n = {s['n']:,}" for s in regime)
                  + "."]  # fmt: skip
    return lines


def report(path: Path, args: argparse.Namespace) -> None:
    rows = read_csv(path)
    summary = summarize(rows)
    cols = ["n", "method", "seeds", "fit s", "fit CPU s", "predict s", "total s",
            "NLL", "RMSE", "m", "peak RSS MB", "load", "note"]  # fmt: skip
    sections = []
    for dataset in dict.fromkeys(s["dataset"] for s in summary):
        table = [{**s, "method": LABELS[s["method"]]} for s in summary
                 if s["dataset"] == dataset]  # fmt: skip
        sections.append(f"## {dataset}\n\n{markdown_table(table, cols)}")
    sections.append("## Targets\n\n" + "\n".join(targets(summary, args)))
    sections.append(
        "## Protocol\n\n"
        f"One torch thread per cell; fit time caps (per L-BFGS-B attempt for the "
        f"exact GP and SGPR, of Adam for SVGP): {caps(rows)}. "
        "*fit* = construction + `fit_gpytorch_mll`; *predict* = marginals of "
        "the 2,000 test points with observation noise; *total* = fit + predict "
        "(wall and CPU); *m* = dictionary size (inducing points of SGPR/SVGP); "
        "*peak RSS* = the cell process's `ru_maxrss`; *load* = 1-minute load "
        "average (2 cores, shared machine). Mean ± sd over seeds; per-cell rows "
        f"in `{path.name}`. See the module docstring of `bench_nystrom.py`."
    )
    write_report(path.with_suffix(".md"), "NystromGP vs SingleTaskGP, SGPR, SVGP",
                 sections)  # fmt: skip
    plot(summary, path.with_suffix(".png"))


def caps(rows: list[dict[str, Any]]) -> str:
    found = {
        (r["method"], r["cap_s"]) for r in rows if r.get("cap_s") not in ("", None)
    }
    return ", ".join(f"{LABELS[m]} {c:.0f} s" for m, c in sorted(found)) or "-"


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    fig, axes = figure(2, 2, figsize=(10, 7))
    for col, dataset in enumerate(SIZES):
        for method in METHODS:
            pts = sorted((s["n"], s["total s"], s["nll"]) for s in summary
                         if s["dataset"] == dataset and s["method"] == method
                         and "nll" in s)  # fmt: skip
            if pts:
                n, t, nll = zip(*pts, strict=True)
                axes[0][col].loglog(n, t, "o-", label=LABELS[method])
                axes[1][col].semilogx(n, nll, "o-", label=LABELS[method])
        axes[0][col].set_title(f"{dataset}: fit + predict (wall s)")
        axes[0][col].axhline(60, color="grey", ls=":")
        axes[1][col].set_title(f"{dataset}: test NLL (standardized)")
        axes[1][col].set_xlabel("n")
        axes[0][col].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------- main

CAP_ARGS = ("exact_cap", "sgpr_cap", "svgp_cap")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="cadata,synthetic")
    p.add_argument("--sizes", default="", help="override both data sets' sizes")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", type=int, default=1, help="seeds for n <= 4,000")
    p.add_argument("--exact-max-n", type=int, default=4000)
    p.add_argument("--exact-cap", type=float, default=300.0)
    p.add_argument("--sgpr-cap", type=float, default=120.0)
    p.add_argument("--svgp-cap", type=float, default=120.0)
    p.add_argument("--cell-timeout", type=float, default=900.0)
    p.add_argument("--memory-limit-gb", type=float, default=8.0)
    p.add_argument("--out", type=Path, default=RESULTS / "nystrom_scaling.csv")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.datasets = args.datasets.split(",")
    args.methods = args.methods.split(",")
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker:
        vars(args).update(json.loads(args.worker))
        args.worker_out.write_text(json.dumps(run_worker(args)))
        return 0
    if not args.report_only:
        rows = read_csv(args.out) if args.out.exists() else []
        done = {(r["dataset"], int(r["n"]), r["method"], int(r["seed"])) for r in rows}
        for cell in plan(args):
            if tuple(cell.values()) in done:
                continue
            reason = skip_reason(cell, args)
            row = {**cell, "status": reason} if reason else run_cell(cell, args)
            print(json.dumps(row), flush=True)
            rows.append(row)
            write_csv(args.out, rows)
    report(args.out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
