"""Fit and predict scaling of ``NystromGP`` against exact and variational GPs.

For every (dataset, n, method) the benchmark runs one fresh worker subprocess
(``python benchmarks/bench_nystrom.py --worker ...``) that loads the data, builds
and fits the model, predicts the test set and reports wall/CPU times, peak RSS
memory, the dictionary size (``NystromGP``), the test RMSE and the mean test
negative log predictive density (NLL). The parent process collects the rows into
``nystrom_scaling.csv``, writes ``nystrom_scaling.md`` (table, machine details,
target checks) and plots ``nystrom_scaling.png``.

Data sets (targets standardized; RMSE and NLL are in standardized-target units):

* ``cadata``: California housing (20,640 x 8). Features standardized with
  :func:`botorch_sketch.datasets.standardize_features` (over all rows); target
  ``log(median_house_value)`` standardized with the mean and standard deviation
  of all 20,640 rows (fixed units for every ``n``). A seeded permutation of the
  rows; training set = its first ``n`` rows; test set = its last 10,000 rows when
  ``n <= 10,640`` and otherwise the ``20,640 - n`` held-out rows (640 for
  ``n = 20,000``).
* ``synthetic``: ``X ~ U[0, 1]^8``; ``f`` = a seeded sum of 50 RBF bumps
  (lengthscale 0.3, Gaussian amplitudes, rescaled to unit standard deviation)
  plus ``0.5 sin(2 pi (w^T x) + phi)``; ``y = f + 0.25 eps`` (noise sd about half
  the sd of ``f``, the noise-to-signal level of Cadata). Training sets are
  the first ``n`` points of one seeded pool of 100,000 points (nested in ``n``);
  10,000 test points from the same law (independent seed). Targets standardized
  with the mean and standard deviation of the 100,000-point pool.

Methods:

* ``nystrom``: ``NystromGP(train_X, train_Y, input_transform=Normalize(d),
  seed=seed)`` fitted with ``fit_gpytorch_mll(ExactMarginalLogLikelihood(...))``.
* ``exact``: ``SingleTaskGP(train_X, train_Y, input_transform=Normalize(d))`` with
  BoTorch's default fit (L-BFGS-B), with a wall-clock cap (``--exact-timeout``)
  passed as ``optimizer_kwargs={"timeout_sec": ...}``; only for
  ``n <= --exact-max-n``.
* ``svgp``: ``SingleTaskVariationalGP`` with 512 learned inducing points
  (initialised at a seeded random subset of the normalized training inputs),
  ``outcome_transform=Standardize(1)``, fitted with ``fit_gpytorch_mll`` on
  ``VariationalELBO(likelihood, model.model, num_data=n)``. For ``n <= 1024``
  BoTorch uses L-BFGS-B on the full batch; above that we pass a minibatch
  ``data_loader`` and BoTorch uses ``fit_gpytorch_mll_torch`` (Adam), capped with
  ``optimizer_kwargs={"step_limit": ..., "timeout_sec": ..., "optimizer": ...}``.
* ``nystrom_cap`` (not run by default): ``nystrom`` with
  ``max_dictionary_size=--nystrom-max-dict``.

Prediction: marginal predictive means and variances (with observation noise) of
the test set, in chunks of ``--predict-chunk`` points. ``--predict-mode q1``: each
chunk is a batch of ``q = 1`` posteriors (``posterior(X.unsqueeze(-2))``);
``joint``: each chunk is one joint posterior (``chunk x chunk`` covariance, at
most 1000 x 1000, never the full test set) whose diagonal is taken; ``auto``
(default): ``q1`` for ``NystromGP`` and ``SingleTaskGP``, ``joint`` for the SVGP,
because GPyTorch's variational strategy broadcasts its ``m x m`` factor over a
batch of ``q = 1`` posteriors (``O(batch m^2)`` memory and time). Both modes give
the same marginals; every cell checks it on a few test points
(``marginal_check_maxdiff``).

``--library-ref REF`` benchmarks ``botorch_sketch`` as committed at ``REF`` (an
export of ``git archive REF botorch_sketch`` put first on the workers'
``PYTHONPATH``) instead of the working tree; every row records the source hash of
the package it imported (``library``).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import logging
import math
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger("bench_nystrom")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results"
RESULT_STEM = "nystrom_scaling"

DATASETS: tuple[str, ...] = ("cadata", "synthetic")
METHODS: tuple[str, ...] = ("nystrom", "exact", "svgp")
ALL_METHODS: tuple[str, ...] = (*METHODS, "nystrom_cap")
DEFAULT_SIZES: dict[str, tuple[int, ...]] = {
    "cadata": (1000, 5000, 20000),
    "synthetic": (1000, 5000, 20000, 100000),
}
METHOD_LABELS: dict[str, str] = {
    "nystrom": "NystromGP",
    "nystrom_cap": "NystromGP (capped dict.)",
    "exact": "SingleTaskGP (exact)",
    "svgp": "SingleTaskVariationalGP (512 ind.)",
}

DIM = 8
N_TEST = 10_000
CADATA_ROWS = 20_640
SYNTH_POOL = 100_000
SYNTH_BUMPS = 50
SYNTH_LENGTHSCALE = 0.3
SYNTH_SINE_AMPLITUDE = 0.5
SYNTH_NOISE_SD = 0.25
SVGP_INDUCING = 512
MARGINAL_CHECK_POINTS = 4

# Targets checked in the results README.
TARGET_FIT_N = 20_000
TARGET_FIT_SECONDS = 60.0
TARGET_MEMORY_N = 100_000
TARGET_MEMORY_MB = 4096.0
TARGET_NLL_REL_GAP = 0.05
NEAR_ZERO_NLL = 0.1

CSV_FIELDS: tuple[str, ...] = (
    "dataset",
    "n",
    "method",
    "status",
    "reason",
    "n_test",
    "fit_time_s",
    "fit_cpu_s",
    "predict_time_s",
    "predict_cpu_s",
    "rss_baseline_mb",
    "rss_fit_peak_mb",
    "rss_peak_mb",
    "rss_peak_minus_baseline_mb",
    "dictionary_size",
    "rmse",
    "nll",
    "nll_gap_rel_vs_exact",
    "nll_gap_abs_vs_exact",
    "noise_var",
    "fit_info",
    "predict_mode",
    "marginal_check_maxdiff",
    "loadavg_1m_start",
    "seed",
    "library",
)


# ---------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------


def load_data(dataset: str, n: int, seed: int) -> dict[str, Any]:
    """Build the training and test sets of one benchmark cell.

    Args:
        dataset: ``"cadata"`` or ``"synthetic"``.
        n: Number of training points.
        seed: Seed of every random choice (permutation, synthetic function, draws).

    Returns:
        A dict with float64 tensors ``train_X`` (``n x 8``), ``train_Y``
        (``n x 1``), ``test_X``, ``test_y`` and a short description ``note``.

    Raises:
        ValueError: If the dataset is unknown or ``n`` is too large for it.
    """
    if dataset == "cadata":
        return _load_cadata(n, seed)
    if dataset == "synthetic":
        return _load_synthetic(n, seed)
    raise ValueError(f"Unknown dataset {dataset!r}; choose from {DATASETS}.")


def _load_cadata(n: int, seed: int) -> dict[str, Any]:
    import torch

    from botorch_sketch.datasets import load_cadata, standardize_features

    X, y = load_cadata()
    total = X.shape[0]
    if not 1 <= n < total:
        raise ValueError(f"cadata has {total} rows; n must lie in [1, {total}).")
    X = standardize_features(X)
    log_y = torch.log(y)
    y_std = (log_y - log_y.mean()) / log_y.std()
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed))
    train_idx = perm[:n]
    if n <= total - N_TEST:
        test_idx = perm[-N_TEST:]
        note = f"test = last {N_TEST} rows of the permutation"
    else:
        test_idx = perm[n:]
        note = f"test = the {total - n} held-out rows"
    logger.info("cadata: n=%d, %s", n, note)
    return {
        "train_X": X[train_idx].contiguous(),
        "train_Y": y_std[train_idx].unsqueeze(-1).contiguous(),
        "test_X": X[test_idx].contiguous(),
        "test_y": y_std[test_idx].contiguous(),
        "note": note,
    }


def synthetic_function(seed: int) -> Any:
    """The fixed random smooth test function of the synthetic data set.

    ``f(x) = B(x) + 0.5 sin(2 pi w^T x + phi)`` on ``[0, 1]^8``, where ``B`` is a
    sum of 50 RBF bumps (lengthscale 0.3) with centres uniform in the cube and
    standard normal amplitudes, ``w ~ N(0, I / 8)`` and ``phi ~ U[0, 2 pi]``; all
    drawn from ``seed``. For seed 0 the standard deviation of ``f`` on the cube is
    about 0.46 (bumps 0.26, sine 0.34).

    Args:
        seed: Seed of the function's parameters.

    Returns:
        A callable mapping an ``N x 8`` float64 tensor to an ``N`` tensor.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    dt = torch.float64
    centres = torch.rand(SYNTH_BUMPS, DIM, generator=g, dtype=dt)
    amplitudes = torch.randn(SYNTH_BUMPS, generator=g, dtype=dt)
    w = torch.randn(DIM, generator=g, dtype=dt) / math.sqrt(DIM)
    phase = 2 * math.pi * torch.rand((), generator=g, dtype=dt)

    def bumps(X: Any) -> Any:
        sq = torch.cdist(X, centres).pow(2)
        return torch.exp(-0.5 * sq / SYNTH_LENGTHSCALE**2) @ amplitudes

    def f(X: Any) -> Any:
        sine = torch.sin(2 * math.pi * (X @ w) + phase)
        return bumps(X) + SYNTH_SINE_AMPLITUDE * sine

    return f


def _load_synthetic(n: int, seed: int) -> dict[str, Any]:
    import torch

    if not 1 <= n <= SYNTH_POOL:
        raise ValueError(f"synthetic n must lie in [1, {SYNTH_POOL}], got {n}.")
    dt = torch.float64
    f = synthetic_function(seed)
    g_train = torch.Generator().manual_seed(seed + 1)
    X_pool = torch.rand(SYNTH_POOL, DIM, generator=g_train, dtype=dt)
    y_pool = f(X_pool) + SYNTH_NOISE_SD * torch.randn(
        SYNTH_POOL, generator=g_train, dtype=dt
    )
    g_test = torch.Generator().manual_seed(seed + 2)
    test_X = torch.rand(N_TEST, DIM, generator=g_test, dtype=dt)
    test_y = f(test_X) + SYNTH_NOISE_SD * torch.randn(
        N_TEST, generator=g_test, dtype=dt
    )
    mu, sd = y_pool.mean(), y_pool.std()
    note = (
        f"noise sd {SYNTH_NOISE_SD} = {SYNTH_NOISE_SD / float(sd):.4f} "
        "in standardized units"
    )
    logger.info("synthetic: n=%d, %s", n, note)
    return {
        "train_X": X_pool[:n].contiguous(),
        "train_Y": ((y_pool[:n] - mu) / sd).unsqueeze(-1).contiguous(),
        "test_X": test_X,
        "test_y": (test_y - mu) / sd,
        "note": note,
    }


# ---------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------


def _maxrss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux: KiB units)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class _FitRecorder:
    """Collects optimizer callbacks and fit warnings to describe how a fit ended."""

    def __init__(self) -> None:
        self.steps = 0
        self.last_message: str | None = None
        self.warnings: list[str] = []

    def callback(self, parameters: Any, result: Any) -> None:
        """``fit_gpytorch_mll_*`` callback: count steps, keep the stop message."""
        self.steps += 1
        if getattr(result, "message", None):
            self.last_message = str(result.message)

    def warning_handler(self, w: Any) -> bool:
        """Record the warning, then defer to BoTorch's default retry policy."""
        from botorch.fit import DEFAULT_WARNING_HANDLER

        self.warnings.append(str(w.message).splitlines()[0])
        return DEFAULT_WARNING_HANDLER(w)


def fit_nystrom(
    data: dict[str, Any], seed: int, max_dictionary_size: int | None = None
) -> tuple[Any, str]:
    """Build and fit a ``NystromGP`` as a drop-in ``SingleTaskGP``.

    Args:
        data: Output of :func:`load_data`.
        seed: Model seed (dictionary draws, fit subsample).
        max_dictionary_size: Passed to ``NystromGP`` if not ``None`` (default
            settings otherwise).

    Returns:
        The fitted model and a short description of the fit.
    """
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.transforms import Normalize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from botorch_sketch.models import NystromGP

    kwargs = (
        {}
        if max_dictionary_size is None
        else {"max_dictionary_size": max_dictionary_size}
    )
    model = NystromGP(
        data["train_X"],
        data["train_Y"],
        input_transform=Normalize(DIM),
        seed=seed,
        **kwargs,
    )
    initial = model.dictionary_size
    rec = _FitRecorder()
    # No optimizer callback: BoTorch's scipy_minimize re-evaluates the loss and its
    # gradient at every callback (botorch/optim/core.py), which cost one extra
    # evaluation per L-BFGS iteration (e.g. 43 s -> 69 s at n = 20,000).
    fit_gpytorch_mll(
        ExactMarginalLogLikelihood(model.likelihood, model),
        warning_handler=rec.warning_handler,
    )
    info = (
        f"custom_fit: subset {model.fit_subset_size}; initial BLESS dict {initial}"
    )
    return model, info


def fit_exact(data: dict[str, Any], timeout_s: float) -> tuple[Any, str]:
    """Build and fit an exact ``SingleTaskGP`` with BoTorch's default fit.

    Args:
        data: Output of :func:`load_data`.
        timeout_s: Wall-clock cap of each L-BFGS-B attempt (``timeout_sec``).

    Returns:
        The fitted model and a short description of the fit.
    """
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms import Normalize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    model = SingleTaskGP(
        data["train_X"], data["train_Y"], input_transform=Normalize(DIM)
    )
    rec = _FitRecorder()
    start = time.perf_counter()
    # No optimizer callback (it re-evaluates the loss every iteration, see
    # fit_nystrom), so iterations are not counted.
    fit_gpytorch_mll(
        ExactMarginalLogLikelihood(model.likelihood, model),
        optimizer_kwargs={"timeout_sec": timeout_s},
        warning_handler=rec.warning_handler,
    )
    others = [w for w in rec.warnings if "timed out" not in w]
    timed_out = len(others) < len(rec.warnings)
    timed_out |= time.perf_counter() - start >= timeout_s
    status = f"TIMED OUT at {timeout_s:.0f} s" if timed_out else "converged"
    info = f"L-BFGS-B: {status}"
    if others:
        info += f"; warnings: {'; '.join(w[:120] for w in others)}"
    return model, info


def fit_svgp(
    data: dict[str, Any],
    seed: int,
    steps: int,
    timeout_s: float,
    batch_size: int,
    lr: float,
) -> tuple[Any, str]:
    """Build and fit a ``SingleTaskVariationalGP`` with 512 learned inducing points.

    Inducing points start at a seeded random subset of the normalized training
    inputs: BoTorch's default allocator (``GreedyVarianceReduction``) evaluates the
    full ``n x n`` training kernel (3.2 GB at n = 20,000, 80 GB at n = 100,000).

    Args:
        data: Output of :func:`load_data`.
        seed: Seed of the inducing-point subset and the minibatch order.
        steps: Adam ``step_limit``.
        timeout_s: Wall-clock cap of the optimizer (``timeout_sec``).
        batch_size: Minibatch size of the data loader (at most ``n``).
        lr: Adam learning rate.

    Returns:
        The fitted model and a short description of the fit.
    """
    from functools import partial

    import torch
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.approximate_gp import SingleTaskVariationalGP
    from botorch.models.transforms import Normalize, Standardize
    from gpytorch.mlls import VariationalELBO
    from torch.utils.data import DataLoader, TensorDataset

    train_X, train_Y = data["train_X"], data["train_Y"]
    n = train_X.shape[0]
    g = torch.Generator().manual_seed(seed)
    normalize = Normalize(DIM)
    normalize.train()
    with torch.no_grad():
        X_normalized = normalize(train_X)
    m = min(SVGP_INDUCING, n)
    inducing = X_normalized[torch.randperm(n, generator=g)[:m]].clone()
    with warnings.catch_warnings():
        # BoTorch warns that input/outcome transforms are applied once, up front.
        warnings.simplefilter("ignore")
        model = SingleTaskVariationalGP(
            train_X,
            train_Y,
            inducing_points=inducing,
            input_transform=normalize,
            outcome_transform=Standardize(1),
        )
    mll = VariationalELBO(model.likelihood, model.model, num_data=n)
    rec = _FitRecorder()
    fit_kwargs: dict[str, Any] = {"warning_handler": rec.warning_handler}
    # Transformed data, as the inner GPyTorch model sees it in the fit. With a
    # data loader BoTorch always uses ``fit_gpytorch_mll_torch`` (Adam), for
    # every n; without one it would use L-BFGS-B for n <= 1024.
    batch = min(batch_size, n)
    dataset = TensorDataset(model.model.train_inputs[0], model.model.train_targets)
    fit_kwargs["data_loader"] = DataLoader(
        dataset, batch_size=batch, shuffle=True, generator=g
    )
    fit_kwargs["optimizer_kwargs"] = {
        "callback": rec.callback,
        "step_limit": steps,
        "timeout_sec": timeout_s,
        # Minibatch losses are noisy; BoTorch's default moving-average stopping
        # rule stopped a run after 56 of 200 steps in a trial.
        "stopping_criterion": None,
        "optimizer": partial(torch.optim.Adam, lr=lr),
    }
    how = f"Adam lr {lr}, minibatch {batch}, step_limit {steps}"
    fit_gpytorch_mll(mll, **fit_kwargs)
    info = f"{how}: {rec.steps} steps"
    if rec.last_message:
        info += f" ({rec.last_message.split(' after ')[0].replace('`', '')})"
    if rec.warnings:
        info += f"; warnings: {'; '.join(w[:120] for w in rec.warnings)}"
    return model, info


def predict_marginals(
    model: Any, test_X: Any, chunk: int, mode: str
) -> tuple[Any, Any]:
    """Marginal predictive means and variances (with observation noise).

    Args:
        model: A fitted BoTorch model.
        test_X: ``N x d`` test inputs.
        chunk: Number of test points per ``posterior`` call.
        mode: ``"joint"`` (one joint posterior per chunk, diagonal taken) or
            ``"q1"`` (a batch of ``q = 1`` posteriors per chunk).

    Returns:
        Two ``N`` tensors: means and variances.
    """
    import torch

    means, variances = [], []
    with torch.no_grad():
        for Xc in test_X.split(chunk):
            if mode == "q1":
                post = model.posterior(Xc.unsqueeze(-2), observation_noise=True)
                means.append(post.mean.squeeze(-1).squeeze(-1))
                variances.append(post.variance.squeeze(-1).squeeze(-1))
            elif mode == "joint":
                post = model.posterior(Xc, observation_noise=True)
                means.append(post.mean.squeeze(-1))
                variances.append(post.variance.squeeze(-1))
            else:
                raise ValueError(f"Unknown predict mode {mode!r}.")
    return torch.cat(means), torch.cat(variances)


def gaussian_nll(mean: Any, var: Any, y: Any) -> float:
    """Mean negative log density of ``y`` under independent ``N(mean, var)``."""
    return float(
        (0.5 * (math.log(2 * math.pi) + var.log() + (y - mean) ** 2 / var)).mean()
    )


def _source_hash(package_dir: Path) -> str:
    """Short SHA-256 over the ``.py`` files (names and contents) of a package."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        digest.update(str(path.relative_to(package_dir)).encode())
        digest.update(path.read_bytes())
    return f"sha256:{digest.hexdigest()[:12]}"


def _library_id() -> str:
    """Where ``botorch_sketch`` was imported from and a hash of its sources."""
    import botorch_sketch

    root = Path(botorch_sketch.__file__).resolve().parent
    try:
        where = str(root.parent.relative_to(REPO_ROOT)) or "."
    except ValueError:
        where = str(root.parent)
    return f"{where} {_source_hash(root)}"


def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Run one (dataset, n, method) cell in this process and return its row.

    Args:
        args: Parsed CLI arguments (``--dataset``, ``--n``, ``--method``, ...).

    Returns:
        A dict with the :data:`CSV_FIELDS` measured here.
    """
    import torch

    torch.manual_seed(args.seed)
    load_start = os.getloadavg()[0]
    data = load_data(args.dataset, args.n, args.seed)
    baseline = _maxrss_mb()
    method = args.method
    predict_mode = args.predict_mode
    if predict_mode == "auto":
        predict_mode = "joint" if method == "svgp" else "q1"

    wall, cpu = time.perf_counter(), time.process_time()
    if method == "nystrom":
        model, info = fit_nystrom(data, args.seed)
    elif method == "nystrom_cap":
        model, info = fit_nystrom(data, args.seed, args.nystrom_max_dict)
    elif method == "exact":
        model, info = fit_exact(data, args.exact_timeout)
    elif method == "svgp":
        model, info = fit_svgp(
            data,
            args.seed,
            steps=args.svgp_steps,
            timeout_s=args.svgp_timeout,
            batch_size=args.svgp_batch,
            lr=args.svgp_lr,
        )
    else:
        raise ValueError(f"Unknown method {method!r}; choose from {ALL_METHODS}.")
    fit_time, fit_cpu = time.perf_counter() - wall, time.process_time() - cpu
    fit_peak = _maxrss_mb()
    model.eval()
    logger.info("fit done in %.1f s: %s", fit_time, info)

    wall, cpu = time.perf_counter(), time.process_time()
    mean, var = predict_marginals(
        model, data["test_X"], args.predict_chunk, predict_mode
    )
    predict_time, predict_cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = _maxrss_mb()

    # Both prediction modes must give the same marginals: check on a few points,
    # after the memory measurement (q = 1 batches may broadcast an m x m factor).
    k = MARGINAL_CHECK_POINTS
    other = "q1" if predict_mode == "joint" else "joint"
    m_k, v_k = predict_marginals(model, data["test_X"][:k], k, other)
    check = float(
        torch.maximum((m_k - mean[:k]).abs().max(), (v_k - var[:k]).abs().max())
    )

    y = data["test_y"]
    noise = getattr(model.likelihood, "noise", None)
    if noise is not None and hasattr(model, "outcome_transform"):
        # Likelihood noise is in the model's standardized units; map it back.
        stdvs = getattr(model.outcome_transform, "stdvs", None)
        if stdvs is not None:
            noise = noise * stdvs.squeeze() ** 2
    return {
        "dataset": args.dataset,
        "n": args.n,
        "method": method,
        "status": "ok",
        "reason": data["note"],
        "n_test": int(y.numel()),
        "fit_time_s": fit_time,
        "fit_cpu_s": fit_cpu,
        "predict_time_s": predict_time,
        "predict_cpu_s": predict_cpu,
        "rss_baseline_mb": baseline,
        "rss_fit_peak_mb": fit_peak,
        "rss_peak_mb": peak,
        "rss_peak_minus_baseline_mb": peak - baseline,
        "dictionary_size": getattr(model, "dictionary_size", None),
        "rmse": float((mean - y).pow(2).mean().sqrt()),
        "nll": gaussian_nll(mean, var, y),
        "noise_var": None if noise is None else float(noise.detach().mean()),
        "fit_info": info,
        "predict_mode": predict_mode,
        "marginal_check_maxdiff": check,
        "loadavg_1m_start": load_start,
        "seed": args.seed,
        "library": _library_id(),
    }


# ---------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------


def plan_cells(
    datasets: list[str], methods: list[str], sizes: list[int] | None
) -> list[tuple[str, int, str]]:
    """The (dataset, n, method) cells to run, in run order."""
    cells = []
    for dataset in datasets:
        for n in sizes if sizes else DEFAULT_SIZES[dataset]:
            for method in methods:
                cells.append((dataset, n, method))
    return cells


def skip_reason(dataset: str, n: int, method: str, args: argparse.Namespace) -> str:
    """Why a cell is not run (empty string: run it)."""
    if dataset == "cadata" and n >= CADATA_ROWS:
        return f"cadata has only {CADATA_ROWS} rows"
    if dataset == "synthetic" and n > SYNTH_POOL:
        return f"synthetic pool has {SYNTH_POOL} points"
    if method == "exact" and n > args.exact_max_n:
        return (
            f"exact GP only for n <= {args.exact_max_n} (--exact-max-n): O(n^3) "
            "time per L-BFGS evaluation, see the projection in the README"
        )
    return ""


def _empty_row(dataset: str, n: int, method: str, status: str, reason: str) -> dict:
    row: dict[str, Any] = dict.fromkeys(CSV_FIELDS)
    row.update(dataset=dataset, n=n, method=method, status=status, reason=reason)
    return row


def export_library(ref: str, dest_root: Path) -> tuple[Path, str]:
    """Export ``botorch_sketch`` as committed at ``ref`` (``git archive``).

    Args:
        ref: A git ref of this repository.
        dest_root: Directory under which the export is created.

    Returns:
        The directory to put on ``PYTHONPATH`` and the full commit hash.
    """
    import tarfile

    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    ).stdout.strip()
    dest = dest_root / f"botorch_sketch-{sha[:12]}"
    if not (dest / "botorch_sketch" / "__init__.py").exists():
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha, "botorch_sketch"],
            capture_output=True,
            check=True,
            cwd=REPO_ROOT,
        ).stdout
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    logger.info("benchmarking botorch_sketch at %s (%s) from %s", ref, sha[:12], dest)
    return dest, sha


def worker_env(library_path: Path | None) -> dict[str, str] | None:
    """Environment of the workers: ``library_path`` first on ``PYTHONPATH``.

    The data directory is resolved here (from the working tree) and passed on in
    ``BOTORCH_SKETCH_DATA``, because an exported package looks for its data
    relative to the export.
    """
    if library_path is None:
        return None
    from botorch_sketch.datasets import DATA_DIR_ENV_VAR, find_data_dir

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(library_path), env.get("PYTHONPATH", "")) if p
    )
    env.setdefault(DATA_DIR_ENV_VAR, str(find_data_dir()))
    return env


def run_cell(
    dataset: str,
    n: int,
    method: str,
    args: argparse.Namespace,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one cell in a fresh subprocess and return its row (or a failure row)."""
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "row.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "--dataset",
            dataset,
            "--n",
            str(n),
            "--method",
            method,
            "--result-file",
            str(result_file),
            *_shared_cli_args(args),
        ]
        logger.info("running %s", shlex.join(cmd[1:]))
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=args.job_timeout, env=env
            )
        except subprocess.TimeoutExpired:
            reason = f"killed after --job-timeout {args.job_timeout} s"
            logger.warning("%s %d %s: %s", dataset, n, method, reason)
            return _empty_row(dataset, n, method, "failed", reason)
        log_dir = args.out / "tmp" / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"{dataset}_{n}_{method}.log").write_text(proc.stderr)
        if proc.returncode != 0 or not result_file.exists():
            reason = _failure_reason(proc.returncode, proc.stderr, args)
            logger.warning("%s %d %s failed: %s", dataset, n, method, reason)
            return _empty_row(dataset, n, method, "failed", reason)
        row = json.loads(result_file.read_text())
    logger.info(
        "%s n=%d %s: fit %.1f s, predict %.1f s, peak %.0f MB, NLL %.4f (%.0f s)",
        dataset,
        n,
        method,
        row["fit_time_s"],
        row["predict_time_s"],
        row["rss_peak_mb"],
        row["nll"],
        time.perf_counter() - start,
    )
    return row


def _resumable_rows(
    csv_path: Path, env: dict[str, str] | None
) -> dict[tuple[str, int, str], dict[str, Any]]:
    """The earlier rows that ``--resume`` keeps.

    Args:
        csv_path: The results CSV of the earlier (interrupted) run.
        env: The workers' environment (``None``: the working tree is imported).

    Returns:
        The rows with status ``ok`` measured with the same ``botorch_sketch``
        sources as this run, keyed by (dataset, n, method).
    """
    if not csv_path.exists():
        return {}
    if env is not None:
        package = Path(env["PYTHONPATH"].split(os.pathsep)[0]) / "botorch_sketch"
    else:
        package = REPO_ROOT / "botorch_sketch"
    current = _source_hash(package)
    kept = {
        (r["dataset"], r["n"], r["method"]): r
        for r in read_csv(csv_path)
        if r["status"] == "ok" and (r.get("library") or "").endswith(current)
    }
    logger.info("--resume: %d earlier cells measured with %s", len(kept), current)
    return kept


def _failure_reason(returncode: int, stderr: str, args: argparse.Namespace) -> str:
    """A one-line failure reason: the exception and the innermost package frame."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    error = lines[-1] if lines else "no output"
    error = error.split(" (Triggered internally")[0][:160]
    frames = [line for line in lines if line.startswith("File ") and "botorch" in line]
    where = ""
    if frames:
        # 'File ".../pkg/mod.py", line 12, in func' -> 'pkg/mod.py:12 in func'
        parts = frames[-1].split('"')
        if len(parts) >= 3:
            path = "/".join(Path(parts[1]).parts[-2:])
            line_no = parts[2].split("line ")[-1].split(",")[0]
            func = parts[2].split(" in ")[-1]
            where = f" at {path}:{line_no} in {func}"
    if returncode in (-9, 137):
        return f"killed by SIGKILL (likely the OOM killer){where}"
    if "allocate memory" in error or "MemoryError" in error:
        return (
            f"out of memory under --memory-limit-gb {args.memory_limit_gb:g}"
            f"{where}: {error}"
        )
    return f"exit code {returncode}{where}: {error}"


def _shared_cli_args(args: argparse.Namespace) -> list[str]:
    return [
        "--seed",
        str(args.seed),
        "--predict-mode",
        args.predict_mode,
        "--predict-chunk",
        str(args.predict_chunk),
        "--exact-timeout",
        str(args.exact_timeout),
        "--svgp-steps",
        str(args.svgp_steps),
        "--svgp-timeout",
        str(args.svgp_timeout),
        "--svgp-batch",
        str(args.svgp_batch),
        "--svgp-lr",
        str(args.svgp_lr),
        "--memory-limit-gb",
        str(args.memory_limit_gb),
        "--nystrom-max-dict",
        str(args.nystrom_max_dict),
    ]


def add_nll_gaps(rows: list[dict[str, Any]]) -> None:
    """Fill the NLL gap of NystromGP rows against the exact GP, in place.

    ``nll_gap_rel_vs_exact = (NLL - NLL_exact) / |NLL_exact|`` (positive: worse
    than exact) and ``nll_gap_abs_vs_exact = NLL - NLL_exact``.
    """
    exact = {
        (r["dataset"], r["n"]): r["nll"]
        for r in rows
        if r["method"] == "exact" and r["status"] == "ok"
    }
    for r in rows:
        ref = exact.get((r["dataset"], r["n"]))
        if (
            r["method"].startswith("nystrom")
            and r["status"] == "ok"
            and ref is not None
        ):
            r["nll_gap_abs_vs_exact"] = r["nll"] - ref
            r["nll_gap_rel_vs_exact"] = (r["nll"] - ref) / abs(ref)


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Write the rows with the :data:`CSV_FIELDS` header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(row.get(k)) for k in CSV_FIELDS})


def _csv_value(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else value


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Read rows written by :func:`write_csv`, converting numbers back."""
    rows = []
    with path.open(newline="") as fh:
        for raw in csv.DictReader(fh):
            row: dict[str, Any] = {}
            for key, value in raw.items():
                if value == "":
                    row[key] = None
                elif key in ("n", "n_test", "dictionary_size", "seed"):
                    row[key] = int(value)
                elif key.endswith(
                    ("_s", "_mb", "_vs_exact", "_start", "_maxdiff")
                ) or key in (
                    "rmse",
                    "nll",
                    "noise_var",
                ):
                    row[key] = float(value)
                else:
                    row[key] = value
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------


def machine_details() -> dict[str, str]:
    """CPU model, core count, memory and library versions of this machine."""
    import botorch
    import gpytorch
    import torch

    model_name = platform.processor() or "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            if line.startswith("Model name:"):
                model_name = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        logger.warning("lscpu not available")
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "CPU (lscpu model name)": model_name,
        "cores (os.cpu_count)": str(os.cpu_count()),
        "torch threads": str(torch.get_num_threads()),
        "memory": f"{mem_gb:.1f} GiB",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "botorch": botorch.__version__,
        "gpytorch": gpytorch.__version__,
        "platform": platform.platform(),
    }


def _git_state() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO_ROOT,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "botorch_sketch"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO_ROOT,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    if dirty:
        files = ", ".join(line[3:] for line in dirty.splitlines())
        return f"{head} + uncommitted changes in {files}"
    return head


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return format(value, spec)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The results table (one line per cell, skipped and failed cells included)."""
    capped = _capped_exact(rows)
    header = (
        "| dataset | n | method | status | fit [s] | predict [s] | peak RSS [MB] "
        "| peak - baseline [MB] | dict. size | RMSE | NLL | NLL gap vs exact |"
    )
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for r in rows:
        if r["status"] != "ok":
            reason = (
                r["reason"] if len(r["reason"]) <= 150 else r["reason"][:147] + "..."
            )
            lines.append(
                f"| {r['dataset']} | {r['n']} | {METHOD_LABELS[r['method']]} | "
                f"{r['status']}: {reason} |  |  |  |  |  |  |  |  |"
            )
            continue
        status = "ok"
        if r["method"] == "exact" and "TIMED OUT" in (r["fit_info"] or ""):
            status = "ok, fit capped"
        gap = ""
        if r.get("nll_gap_rel_vs_exact") is not None:
            gap = (
                f"{100 * r['nll_gap_rel_vs_exact']:+.1f} % "
                f"({r['nll_gap_abs_vs_exact']:+.4f})"
            )
            if (r["dataset"], r["n"]) in capped:
                gap += " (exact fit capped)"
        lines.append(
            f"| {r['dataset']} | {r['n']} | {METHOD_LABELS[r['method']]} | {status} | "
            f"{_fmt(r['fit_time_s'], '.1f')} | {_fmt(r['predict_time_s'], '.1f')} | "
            f"{_fmt(r['rss_peak_mb'], '.0f')} | "
            f"{_fmt(r['rss_peak_minus_baseline_mb'], '.0f')} | "
            f"{_fmt(r['dictionary_size'], 'd')} | {_fmt(r['rmse'], '.4f')} | "
            f"{_fmt(r['nll'], '.4f')} | {gap} |"
        )
    return "\n".join(lines)


def target_checks(rows: list[dict[str, Any]]) -> list[str]:
    """PASS/FAIL lines for the three targets of the benchmark."""
    ok = [r for r in rows if r["status"] == "ok" and r["method"] == "nystrom"]
    lines = []

    fit_rows = [r for r in ok if r["n"] == TARGET_FIT_N]
    if fit_rows:
        verdict = all(r["fit_time_s"] < TARGET_FIT_SECONDS for r in fit_rows)
        detail = ", ".join(f"{r['dataset']} {r['fit_time_s']:.1f} s" for r in fit_rows)
        lines.append(
            f"- **{'PASS' if verdict else 'FAIL'}**: NystromGP construction + fit at "
            f"n = {TARGET_FIT_N:,} under {TARGET_FIT_SECONDS:.0f} s ({detail})."
        )
    else:
        lines.append(f"- **NOT RUN**: no NystromGP result at n = {TARGET_FIT_N:,}.")

    mem_rows = [r for r in ok if r["n"] == TARGET_MEMORY_N]
    if mem_rows:
        verdict = all(r["rss_peak_mb"] < TARGET_MEMORY_MB for r in mem_rows)
        detail = ", ".join(
            f"{r['dataset']}: peak {r['rss_peak_mb']:.0f} MB (fit phase "
            f"{r['rss_fit_peak_mb']:.0f} MB, baseline {r['rss_baseline_mb']:.0f} MB)"
            for r in mem_rows
        )
        lines.append(
            f"- **{'PASS' if verdict else 'FAIL'}**: NystromGP at n = "
            f"{TARGET_MEMORY_N:,} peak RSS under {TARGET_MEMORY_MB / 1024:.0f} GB "
            f"({detail})."
        )
    else:
        failed = [
            r for r in rows if r["method"] == "nystrom" and r["n"] == TARGET_MEMORY_N
        ]
        why = failed[0]["reason"] if failed else "not in this run"
        lines.append(
            f"- **FAIL/NOT RUN**: NystromGP at n = {TARGET_MEMORY_N:,}: {why}."
        )

    gap_rows = [r for r in ok if r.get("nll_gap_rel_vs_exact") is not None]
    capped = _capped_exact(rows)
    if gap_rows:
        parts = []
        failed, passed_converged, indicative_fail = False, False, False
        for r in gap_rows:
            passed = r["nll_gap_rel_vs_exact"] <= TARGET_NLL_REL_GAP
            text = (
                f"{r['dataset']} n={r['n']}: {100 * r['nll_gap_rel_vs_exact']:+.1f} % "
                f"(abs {r['nll_gap_abs_vs_exact']:+.4f})"
            )
            if (r["dataset"], r["n"]) not in capped:
                failed |= not passed
                passed_converged |= passed
                parts.append(f"{text} {'ok' if passed else 'FAIL'}")
            elif passed:
                parts.append(
                    f"{text} against an exact fit stopped by its time cap: inconclusive"
                )
            else:
                indicative_fail = True
                parts.append(
                    f"{text} against an exact fit stopped by its time cap: FAIL "
                    "(indicative; a converged exact fit would need a longer run)"
                )
        if failed or indicative_fail:
            verdict = "FAIL" if failed else "FAIL (indicative)"
        else:
            verdict = "PASS" if passed_converged else "INCONCLUSIVE"
        lines.append(
            f"- **{verdict}**: NystromGP test NLL within "
            f"{100 * TARGET_NLL_REL_GAP:.0f} % of the exact GP where both ran "
            f"({'; '.join(parts)})."
        )
    else:
        lines.append("- **NOT RUN**: no (dataset, n) with both NystromGP and exact GP.")
    return lines


def _capped_exact(rows: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """(dataset, n) of exact-GP fits that were stopped by their time cap."""
    return {
        (r["dataset"], r["n"])
        for r in rows
        if r["method"] == "exact"
        and r["status"] == "ok"
        and "TIMED OUT" in (r["fit_info"] or "")
    }


def exact_projection(rows: list[dict[str, Any]]) -> str:
    """A line projecting the exact GP fit time beyond the largest n that ran."""
    done = [r for r in rows if r["method"] == "exact" and r["status"] == "ok"]
    if not done:
        return ""
    ref = max(done, key=lambda r: (r["n"], r["fit_time_s"]))
    iters = _leading_int(ref["fit_info"], "L-BFGS-B: ")
    if not iters:
        return ""
    per_iter = ref["fit_time_s"] / iters
    parts = []
    for n in (10_000, 20_000, 100_000):
        per = per_iter * (n / ref["n"]) ** 3
        parts.append(f"n = {n:,}: ~{per:,.0f} s per iteration")
    return (
        f"Exact GP cost: at n = {ref['n']:,} ({ref['dataset']}) the fit took "
        f"{ref['fit_time_s']:.0f} s for {iters} L-BFGS-B iterations "
        f"({per_iter:.1f} s each, line-search evaluations included). The O(n^3) "
        f"projection is {'; '.join(parts)}; a fit needs 50-100 iterations, so the "
        "exact GP at n = 10,000 (synthetic) would take far more than the 5 minutes "
        "allowed and was not run."
    )


def _leading_int(text: str | None, prefix: str) -> int | None:
    if not text or prefix not in text:
        return None
    digits = ""
    for ch in text.split(prefix, 1)[1]:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else None


def write_markdown(rows: list[dict[str, Any]], path: Path, run: dict[str, Any]) -> None:
    """Write ``nystrom_scaling.md``: table, machine, command, protocol, checks.

    Args:
        rows: All result rows (skipped and failed ones included).
        path: Output path.
        run: Run metadata: ``command``, ``started``, ``elapsed_s``,
            ``predict_chunk``.
    """
    details = machine_details()
    ok_rows = [r for r in rows if r["status"] == "ok"]
    loads = [
        r["loadavg_1m_start"] for r in ok_rows if r["loadavg_1m_start"] is not None
    ]
    svgp_infos = sorted(
        {
            f"{r['dataset']} n={r['n']}: {r['fit_info'].split(': ', 1)[-1]}"
            for r in ok_rows
            if r["method"] == "svgp"
        }
    )
    svgp_infos += sorted(
        {r["fit_info"].split(": ", 1)[0] for r in ok_rows if r["method"] == "svgp"}
    )
    exact_infos = sorted(
        {
            f"{r['dataset']} n={r['n']}: {r['fit_info']}"
            for r in ok_rows
            if r["method"] == "exact"
        }
    )
    libraries = sorted({r["library"].split()[-1] for r in ok_rows if r.get("library")})
    modes = ", ".join(
        sorted(
            {
                f"{METHOD_LABELS[r['method']]}: {r['predict_mode']}"
                for r in ok_rows
                if r.get("predict_mode")
            }
        )
    )
    checks = [r["marginal_check_maxdiff"] for r in ok_rows]
    checks = [c for c in checks if c is not None]
    synth_note = next((r["reason"] for r in ok_rows if r["dataset"] == "synthetic"), "")
    text = [
        "# NystromGP fit and predict scaling",
        "",
        "Generated by `benchmarks/bench_nystrom.py` (do not edit by hand; rerun it).",
        "",
        "## Results",
        "",
        markdown_table(rows),
        "",
        "Times are wall-clock seconds. *fit* = model construction + "
        "`fit_gpytorch_mll`; *predict* = marginal predictive mean and variance "
        "(with observation noise) of the whole test set. *peak RSS* = "
        "`ru_maxrss` of the worker process at the end (each cell runs in a fresh "
        "process); *baseline* = `ru_maxrss` after imports and data loading. RMSE "
        "and NLL (mean Gaussian negative log predictive density) are in "
        "standardized-target units. *NLL gap* = (NLL - NLL_exact) / |NLL_exact| "
        "(absolute difference in brackets; positive = worse than exact). "
        "Per-cell CPU times, fit details and the fitted noise are in "
        f"`{RESULT_STEM}.csv`.",
        "",
        "## Targets",
        "",
        *target_checks(rows),
        "",
        "## Machine and run",
        "",
        *(f"- {key}: {value}" for key, value in details.items()),
        f"- date: {run['started']} (total run time {run['elapsed_s'] / 60:.1f} min)",
        f"- botorch_sketch: {run.get('library', 'unknown')}; source hashes of the "
        f"imported package: {', '.join(libraries) or 'none'}",
        f"- command: `{run['command']}`",
        *(
            [
                f"- {run['resumed_cells']} cells were kept from an earlier, "
                "interrupted run (`--resume`); the total run time above excludes "
                "them."
            ]
            if run.get("resumed_cells")
            else []
        ),
    ]
    if loads:
        text.append(
            f"- 1-min load average at the start of each cell: {min(loads):.2f} to "
            f"{max(loads):.2f} (the machine is shared; a load above the 2 cores "
            "means other processes competed for the CPU and inflated wall times)."
        )
    text += [
        "",
        "## Data",
        "",
        "- **cadata** (California housing, 20,640 x 8): features standardized "
        "(`standardize_features`, over all rows), target `log(median_house_value)` "
        "standardized with the mean and sd of all 20,640 rows. Seeded permutation "
        "of the rows: training set = its first n rows, test set = its last 10,000 "
        "rows for n = 1,000 and 5,000; for n = 20,000 the test set is the 640 "
        "held-out rows only (cadata has no more).",
        "- **synthetic** (d = 8): X uniform in [0, 1]^8, f = sum of 50 seeded RBF "
        "bumps (lengthscale 0.3, N(0, 1) amplitudes, centres uniform in the cube) "
        "+ 0.5 sin(2 pi w^T x + phi), w ~ N(0, I/8); sd of f about 0.46; "
        "y = f + N(0, 0.25^2) (noise sd about half the sd of f, like Cadata; "
        "with sd 0.1 the effective dimension approaches n and no sparse GP "
        "helps). Training sets are nested "
        "prefixes of one seeded 100,000-point pool; 10,000 independent test "
        "points; targets standardized with the pool's mean and sd "
        f"({synth_note}).",
        "",
        "## Protocol",
        "",
        "- **NystromGP**: `NystromGP(train_X, train_Y, input_transform=Normalize(8), "
        "seed=seed)` + `fit_gpytorch_mll(ExactMarginalLogLikelihood(...))` (its "
        "registered custom fit: hyperparameters on a 3,000-point subsample, BLESS "
        "dictionary on all n).",
        "- **SingleTaskGP**: `SingleTaskGP(train_X, train_Y, "
        "input_transform=Normalize(8))`, BoTorch's default fit (L-BFGS-B, exact "
        "Cholesky: BoTorch turns GPyTorch's fast computations off), each attempt "
        "capped with `optimizer_kwargs={'timeout_sec': ...}`. Fits: "
        + "; ".join(exact_infos)
        + ".",
        "- **SingleTaskVariationalGP**: 512 learned inducing points initialised at "
        "a seeded random subset of the normalized training inputs (BoTorch's "
        "default `GreedyVarianceReduction` allocator builds the full n x n training "
        "kernel: 3.2 GB at n = 20,000, 80 GB at n = 100,000), "
        "`outcome_transform=Standardize(1)`, `VariationalELBO(model.likelihood, "
        "model.model, num_data=n)` and `fit_gpytorch_mll` with a minibatch "
        "`data_loader` (transformed data), so BoTorch uses "
        "`fit_gpytorch_mll_torch` (Adam) at every n, capped with "
        "`optimizer_kwargs={'step_limit': ..., 'timeout_sec': ..., "
        "'stopping_criterion': None, 'optimizer': partial(Adam, lr=...)}`. "
        "Without a data loader BoTorch would use L-BFGS-B for n <= 1,024 and "
        "full-batch Adam above (O(n m^2) per step: 3.5 s at n = 20,000 here); the "
        "default learning rate 1e-3 barely moves the hyperparameters in a capped "
        "run, and the default moving-average stopping rule stops noisy minibatch "
        "runs early. Fits: " + "; ".join(svgp_infos) + ".",
        f"- **Prediction**: chunks of {run['predict_chunk']} test points. "
        f"Modes used: {modes}. *q1*: `posterior(X_chunk.unsqueeze(-2), "
        "observation_noise=True)`, a batch of q = 1 posteriors; *joint*: "
        "`posterior(X_chunk, observation_noise=True)`, one joint posterior per "
        "chunk (at most 1,000 x 1,000, never the 10,000 x 10,000 joint) whose "
        "diagonal gives the marginals. The SVGP uses *joint* because GPyTorch's "
        "variational strategy broadcasts its m x m factor over a batch of q = 1 "
        "posteriors (O(batch m^2) memory and time: 52 s and 5 GB for 1,000 points "
        "at m = 512 in a trial here, 0.7 s as one joint posterior). Both modes give "
        "the same marginals: max abs difference on 4 test points per cell "
        f"{max(checks) if checks else float('nan'):.1e}.",
    ]
    projection = exact_projection(rows)
    if projection:
        text += ["", projection]
    not_ok = [r for r in rows if r["status"] != "ok"]
    if not_ok:
        text += ["", "## Skipped and failed cells", ""]
        text += [
            f"- {r['dataset']} n={r['n']} {METHOD_LABELS[r['method']]}: "
            f"{r['status']}: {r['reason']}"
            for r in not_ok
        ]
    path.write_text("\n".join(text) + "\n")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Two panels: fit time vs n (log-log) and test NLL vs n, per method/dataset.

    Exact-GP fits stopped by the time cap are drawn with open markers; NystromGP
    points are labelled with their dictionary size.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, (ax_time, ax_nll) = plt.subplots(1, 2, figsize=(12, 5.2))
    colors = {"nystrom": "C0", "nystrom_cap": "C3", "exact": "C1", "svgp": "C2"}
    styles = {"cadata": ("-", "o"), "synthetic": ("--", "s")}
    for method in ALL_METHODS:
        for dataset in DATASETS:
            sel = sorted(
                (
                    r
                    for r in rows
                    if r["method"] == method
                    and r["dataset"] == dataset
                    and r["status"] == "ok"
                ),
                key=lambda r: r["n"],
            )
            if not sel:
                continue
            ns = [r["n"] for r in sel]
            ls, marker = styles[dataset]
            kw = {"color": colors[method], "linestyle": ls, "marker": marker}
            label = f"{METHOD_LABELS[method]}, {dataset}"
            ax_time.plot(ns, [r["fit_time_s"] for r in sel], label=label, **kw)
            ax_nll.plot(ns, [r["nll"] for r in sel], label=label, **kw)
            capped = [r for r in sel if "TIMED OUT" in (r["fit_info"] or "")]
            for ax, key in ((ax_time, "fit_time_s"), (ax_nll, "nll")):
                ax.plot(
                    [r["n"] for r in capped],
                    [r[key] for r in capped],
                    linestyle="none",
                    marker=marker,
                    markersize=9,
                    markerfacecolor="white",
                    color=colors[method],
                )
            for r in sel:
                if r["dictionary_size"] is not None:
                    ax_time.annotate(
                        f"m={r['dictionary_size']}",
                        (r["n"], r["fit_time_s"]),
                        textcoords="offset points",
                        xytext=(4, -11),
                        fontsize=7,
                        color=colors[method],
                    )
    ax_time.axhline(TARGET_FIT_SECONDS, color="grey", linewidth=0.8, linestyle=":")
    ax_time.annotate(
        f"{TARGET_FIT_SECONDS:.0f} s target at n = {TARGET_FIT_N:,}",
        (TARGET_FIT_N, TARGET_FIT_SECONDS),
        textcoords="offset points",
        xytext=(-60, 5),
        fontsize=8,
        color="grey",
    )
    ax_time.set(
        xscale="log",
        yscale="log",
        xlabel="training points n",
        ylabel="construction + fit wall time [s]",
        title="Fit time (open marker: exact fit stopped by its time cap)",
    )
    ax_nll.set(
        xscale="log",
        xlabel="training points n",
        ylabel="mean test NLL (standardized target)",
        title="Test NLL (lower is better)",
    )
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for ax in (ax_time, ax_nll):
        ax.grid(True, which="both", alpha=0.3)
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax_time.yaxis.set_major_formatter(plain)
    ax_time.yaxis.set_minor_formatter(NullFormatter())
    handles, labels = ax_time.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------


def _csv_list(kind: type, choices: tuple[str, ...] | None = None) -> Any:
    def parse(text: str) -> list:
        items = [kind(item) for item in text.split(",") if item.strip()]
        if choices is not None:
            bad = [item for item in items if item not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"{bad} not in {choices}")
        return items

    return parse


def _command_line(argv: list[str]) -> str:
    """The command that reproduces this run, relative to the repository root."""
    python = Path(sys.executable)
    try:
        python_str = str(python.relative_to(REPO_ROOT))
    except ValueError:
        python_str = "python"
    script = Path(__file__).resolve().relative_to(REPO_ROOT)
    return shlex.join([python_str, str(script), *argv])


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(
        description="NystromGP fit + predict scaling benchmark.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--sizes",
        type=_csv_list(int),
        default=None,
        help="comma-separated training sizes for every dataset (default: "
        "cadata 1000,5000,20000; synthetic 1000,5000,20000,100000)",
    )
    p.add_argument(
        "--methods",
        type=_csv_list(str, ALL_METHODS),
        default=list(METHODS),
        help=f"comma-separated subset of {','.join(ALL_METHODS)}",
    )
    p.add_argument(
        "--datasets",
        type=_csv_list(str, DATASETS),
        default=list(DATASETS),
        help=f"comma-separated subset of {','.join(DATASETS)}",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    p.add_argument("--exact-max-n", type=int, default=5000)
    p.add_argument(
        "--exact-timeout",
        type=float,
        default=300.0,
        help="timeout_sec of each exact-GP L-BFGS-B attempt",
    )
    p.add_argument("--svgp-steps", type=int, default=1500, help="Adam step_limit")
    p.add_argument("--svgp-timeout", type=float, default=60.0, help="timeout_sec")
    p.add_argument("--svgp-batch", type=int, default=1024, help="minibatch size")
    p.add_argument("--svgp-lr", type=float, default=0.03, help="Adam learning rate")
    p.add_argument(
        "--nystrom-max-dict",
        type=int,
        default=4000,
        help="max_dictionary_size of the nystrom_cap method",
    )
    p.add_argument("--predict-mode", choices=("auto", "q1", "joint"), default="auto")
    p.add_argument("--predict-chunk", type=int, default=1000)
    p.add_argument(
        "--job-timeout",
        type=float,
        default=1200.0,
        help="wall-clock limit of one worker subprocess [s]",
    )
    p.add_argument(
        "--memory-limit-gb",
        type=float,
        default=12.0,
        help="address-space limit (RLIMIT_AS) of each worker; 0: none",
    )
    p.add_argument(
        "--library-ref",
        default=None,
        help="benchmark botorch_sketch as committed at this git ref (default: "
        "the working tree)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the ok cells of the existing CSV that were measured with the "
        "same botorch_sketch sources (after an interrupted run); settings other "
        "than the library are not compared",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild the markdown and PNG from the existing CSV",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    worker = p.add_argument_group("worker (internal)")
    worker.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    worker.add_argument("--dataset", choices=DATASETS, help=argparse.SUPPRESS)
    worker.add_argument("--n", type=int, help=argparse.SUPPRESS)
    worker.add_argument("--method", choices=ALL_METHODS, help=argparse.SUPPRESS)
    worker.add_argument("--result-file", type=Path, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or one worker cell with ``--worker``).

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The process exit status: 0 if every planned cell ran or was skipped,
        1 if any cell failed.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )

    if args.worker:
        if args.memory_limit_gb > 0:
            # Fail with an allocation error instead of waking the OOM killer on a
            # shared machine. RLIMIT_AS caps virtual memory, a bit above RSS.
            limit = int(args.memory_limit_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        logging.getLogger("botorch_sketch").setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", message=".*input data.*")
        row = run_worker(args)
        args.result_file.write_text(json.dumps(row))
        return 0

    out: Path = args.out
    csv_path = out / f"{RESULT_STEM}.csv"
    md_path = out / f"{RESULT_STEM}.md"
    png_path = out / f"{RESULT_STEM}.png"
    meta_path = out / "tmp" / f"{RESULT_STEM}_run.json"
    run = {
        "command": _command_line(sys.argv[1:] if argv is None else argv),
        "started": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "elapsed_s": float("nan"),
        "predict_chunk": args.predict_chunk,
        "library": f"working tree, git {_git_state()}",
    }
    t0 = time.perf_counter()
    env = None
    if args.library_ref and not args.report_only:
        library_path, sha = export_library(args.library_ref, out / "tmp")
        env = worker_env(library_path)
        run["library"] = f"git {sha[:12]} (`--library-ref {args.library_ref}`)"

    if args.report_only:
        rows = read_csv(csv_path)
        if meta_path.exists():
            run = json.loads(meta_path.read_text())
    else:
        rows = []
        previous = _resumable_rows(csv_path, env) if args.resume else {}
        for dataset, n, method in plan_cells(args.datasets, args.methods, args.sizes):
            reason = skip_reason(dataset, n, method, args)
            if (dataset, n, method) in previous:
                logger.info("resuming: keeping %s n=%d %s", dataset, n, method)
                rows.append(previous[(dataset, n, method)])
                run["resumed_cells"] = run.get("resumed_cells", 0) + 1
            elif reason:
                logger.info("skipping %s n=%d %s: %s", dataset, n, method, reason)
                rows.append(_empty_row(dataset, n, method, "skipped", reason))
            else:
                rows.append(run_cell(dataset, n, method, args, env))
            add_nll_gaps(rows)
            write_csv(rows, csv_path)  # after every cell: partial results survive

        run["elapsed_s"] = time.perf_counter() - t0
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        meta_path.write_text(json.dumps(run))

    add_nll_gaps(rows)
    write_csv(rows, csv_path)
    write_markdown(rows, md_path, run)
    plot(rows, png_path)

    print(f"\nWrote {csv_path}, {md_path}, {png_path}\n")
    print(markdown_table(rows))
    print()
    for line in target_checks(rows):
        print(line)
    return 1 if any(r["status"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
