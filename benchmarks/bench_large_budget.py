"""Large-budget suite: the package's strategies against TuRBO-1, Ax's default and
Sobol at thousands of evaluations (issue 24).

Problems (all minimised, every observation = noiseless value + Gaussian noise of
sd ``--noise-sd`` (0.05), the noise seeded by the run's seed and the evaluation's
index; the recorded value is always the noiseless one):

- ``hartmann6``: Hartmann, d = 6, ``[0, 1]^6``, optimum -3.32237.
- ``ackley20``: Ackley, d = 20, ``[-5, 10]^20`` (TuRBO's setting), optimum 0.
- ``levy10`` / ``levy20``: Levy, ``[-10, 10]^d``, optimum 0.
- ``rosenbrock10``: Rosenbrock, d = 10, ``[-5, 10]^10``, optimum 0.
- ``michalewicz10``: Michalewicz, d = 10, ``[0, pi]^10``, optimum -9.66015.
- ``ackley60``: Ackley, d = 60, ``[-5, 10]^60``, optimum 0.
- ``mixed10``: Ackley (d = 10) on a mixed space: ``x0..x5`` floats in
  ``[-5, 10]``, ``x6, x7`` integers in ``[-5, 10]``, ``x8, x9`` unordered
  categorical parameters with levels ``a..e`` standing for the coordinate values
  ``7, -3, 0, 4, 9`` (``c`` is optimal); optimum 0 at floats 0, integers 0,
  categories ``c``. Ax sees integer and (unordered) choice parameters; Sobol and
  TuRBO-1 work on ``[0, 1]^10`` and decode (integers: ``floor(u (hi - lo + 1))``
  offsets, categories: ``floor(5 u)``).

Methods (each one ``(problem, method, seed)`` run, ``--budget`` evaluations in
batches of ``--batch``):

- ``sobol``: a scrambled Sobol sequence (seeded), decoded to the space.
- ``turbo1``: :mod:`turbo1` (TuRBO-1 from the paper, ``SingleTaskGP``).
- ``bbkb``: ``get_generation_strategy("bbkb", seed=s, min_batch_size=q)`` on an
  ``ax.Client``, batches from ``get_next_batch(client, max_batch_size=q)``.
- ``turbo-bkb``: the same with ``"turbo-bkb"``, when
  ``botorch_sketch.ax.list_generation_strategies()`` has it (skipped otherwise);
  since session 36 its ``region_fit`` and ``incumbent`` default to ``"auto"``
  (``"periodic"`` and ``"mean"`` one point at a time), and since session 37
  ``region_max_points`` too, with ``incumbent="mean"`` at every batch size (one
  region: ``turbo-bkb-auto-mean`` in batches, ``turbo-bkb-g0.1-auto-mean`` one
  point at a time), while every ``turbo-bkb-*`` variant below keeps the earlier
  defaults (``"cold"``, ``"observed"``, all the region's points) unless it names
  its own (:data:`PRE_AUTO_DEFAULTS`).
- ``turbo-bkb-published``: ``"turbo-bkb"`` with those earlier defaults, TuRBO's
  published rules for the region's model and incumbent (cold fit, observed
  values, every point since the restart): the rows labelled ``turbo-bkb`` before
  session 37 were relabelled so (the one point-at-a-time rows of session 36,
  already ``"auto"``, ``turbo-bkb-g0.1-mean``).
- ``turbo-bkb-auto``: ``"turbo-bkb"`` with ``region_max_points="auto"`` (the
  region's model on its ``max(300, 30 d)`` points nearest the best observation);
  ``turbo-bkb-auto-mean`` also with ``incumbent="mean"``; ``turbo-bkb-mean``:
  ``incumbent="mean"`` alone (the region's model on all its points).
- ``turbo-bkb-st1`` / ``turbo-bkb-st2``: ``"turbo-bkb"`` with its current
  defaults (:data:`CURRENT_DEFAULTS`) and ``success_tolerance=1`` / ``2``: the
  region doubles after one / two successful batches instead of TuRBO's three
  (in batches of 50 three successes are 150 evaluations, in batches of 8 24).
- ``turbo-bkb-w150`` / ``-w300`` / ``-w600``: ``"turbo-bkb"`` with
  ``region_max_points`` of 150 / 300 / 600 (``-w300`` is ``-auto`` on up to 10
  model columns, ``-w600`` on 20); ``turbo-bkb-w300-mean`` also with
  ``incumbent="mean"``.
- ``turbo-bkb-warm``: ``"turbo-bkb"`` with ``region_fit="warm"`` (the default
  before 2026-11-27: the rows labelled ``turbo-bkb`` from earlier commits were
  relabelled ``turbo-bkb-warm``).
- ``turbo-bkb-init`` (rows only, not runnable): ``"turbo-bkb"`` with each
  region fit started from the previous call's fitted hyperparameters (the same
  region, fitted to the same tolerance; commit 83617aa, reverted: worse optima
  on Levy10, Michalewicz10 and the mixed space, and no cheaper with batches of
  50).
- ``turbo-bkb-fit300`` / ``turbo-bkb-fit600`` / ``turbo-bkb-fit1000``:
  ``"turbo-bkb"`` with ``fit_subset_size=300`` / ``600`` / ``1000`` (the cold
  fits on a subsample of the region). ``1000`` is the default on a CPU before
  the region fits dropped the global model's 1,000-point floor (3806f10): the
  ``turbo-bkb`` rows of the cells rerun since were relabelled ``turbo-bkb-fit1000``.
- ``turbo-bkb-it100`` / ``turbo-bkb-it200``: ``"turbo-bkb"`` with
  ``fit_max_iterations=100`` / ``200`` (L-BFGS-B iterations of each region fit).
- ``<name>-linls`` (rows only, not runnable): a ``turbo-bkb`` variant before its
  region model optimised the lengthscales in log space
  (:func:`botorch_sketch.trust_region.model.region_covar_module`, commit
  acce6a9), run with one ``client.complete_trial`` per trial; every
  ``turbo-bkb*`` row of earlier commits was relabelled so.
- ``<name>-sketch500`` (rows only, not runnable): a ``turbo-bkb`` variant with
  log-space lengthscales and batch completion, before its region model used
  every point wherever the device affords the exact posterior
  (:func:`botorch_sketch.trust_region.model.region_is_exact`, commit
  0f72e98; before it, a region above ``exact_max_n = 500`` points was a
  leverage-score sketch unless a capped draw missed its accuracy criterion).
  Where no region grew past 500 points its rows equal the new default's.
- ``<name>-designbatch`` (rows only, not runnable): a ``turbo-bkb`` variant
  before the batch completing a region's design set the incumbent without
  counting as a success (commit caa487e); ``turbo-bkb-linear-ls-designbatch``
  (BoTorch's linear-space lengthscales), ``turbo-bkb-fitall-designbatch`` (region
  fits on every point) and ``turbo-bkb-linear-ls-fitall-designbatch`` (both) are
  of the same time, run with a patched region kernel.
- ``turbo-bkb-a2000`` / ``turbo-bkb-a5000``: ``"turbo-bkb"`` with
  ``num_candidates=2000`` / ``5000``.
- ``turbo-bkb-init1.6``: ``"turbo-bkb"`` with ``length_init=1.6``.
- ``turbo-bkb-ft2`` / ``turbo-bkb-ft3``: ``"turbo-bkb"`` with
  ``failure_tolerance=2`` / ``3``.
- ``turbo-bkb-scipyftol`` / ``turbo-bkb-ftol6`` / ``turbo-bkb-ftol7`` /
  ``turbo-bkb-ftol8``: ``"turbo-bkb"`` with ``fit_tolerance=None`` (SciPy's
  L-BFGS-B ``ftol``, the default before commit b7b28d8) / ``1e-6`` / ``1e-7`` /
  ``1e-8``.
- ``turbo-bkb-noise1`` / ``turbo-bkb-noise2``: ``"turbo-bkb"`` with
  ``noise_tolerance=1`` / ``2`` (a success must beat the incumbent by that many
  noise standard deviations; no standard errors are reported here, so the
  region model's fitted noise).
- ``<name>-sem`` (``turbo-bkb-sem``, ``turbo-bkb-noise1-sem``): the variant with
  each observation reported to Ax with its standard error (``--noise-sd``), so
  ``noise_tolerance`` multiplies the reported noise instead of the fitted one
  (``turbo-bkb-sem``, with the default ``noise_tolerance=0``, is the control:
  the region model does not use the errors).
- ``turbo-bkb-m2`` / ``turbo-bkb-m3`` / ``turbo-bkb-m5``: ``"turbo-bkb"`` with
  ``num_regions=2`` / ``3`` / ``5`` (TuRBO-m: that many trust regions, the batch
  allocated across them by Thompson sampling); ``turbo-bkb-m3-g0.1-path``: three
  regions with ``region_fit="periodic"`` and ``thompson="pathwise"`` (each region
  on its own refit schedule; for one point at a time); ``turbo-bkb-m3-g0.1``:
  the same with the joint Thompson sample.
- ``turbo-bkb-mps`` (rows only, not runnable): ``"turbo-bkb"`` before its joint
  Thompson samples were drawn by ``NystromGP.sample_joint`` from a seeded
  generator (commit e822bdc; before, BoTorch's ``MaxPosteriorSampling`` drew them
  from torch's global generator under the same seed), with SciPy's ``ftol``: the
  algorithm of ``turbo-bkb-scipyftol`` on another random stream. Every earlier
  ``turbo-bkb`` row was relabelled so.
- ``turbo-bkb-projected`` / ``turbo-bkb-a2000-projected`` (rows only, not
  runnable; ``mixed10``): ``"turbo-bkb"`` (with 2,000 candidates) when it
  projected the region's candidates onto the integer grids and one-hot groups
  on every space with a discrete column (commit 8f8b7de); since the next commit
  only where every column is discrete, so ``turbo-bkb`` rows of ``mixed10``
  before and after it are the same algorithm.
- ``turbo-bkb-g0.1``: ``"turbo-bkb"`` with ``region_fit="periodic"`` and
  ``refit_growth=0.1`` (the region's hyperparameters fitted from scratch once
  its data grew by 10 % since their fit, kept in between; the default
  ``"cold"`` fits at every call, as TuRBO-1).
- ``turbo-bkb-g0.1-path``: the same with ``thompson="pathwise"`` (for batches of
  one, where the joint sample over the region's candidates is paid per point);
  ``turbo-bkb-g0.1-path-noise1-sem`` also with ``noise_tolerance=1`` and the
  observations' standard errors reported (as ``<name>-sem`` below).
- ``turbo-bkb-ard``: ``"turbo-bkb"`` with ``one_hot_lengthscales="per_column"``
  (one lengthscale per one-hot column, the only kernel before commit f4cc0ab;
  ``mixed10`` is the only problem where it differs). Every earlier
  ``turbo-bkb`` row of ``mixed10`` was relabelled so, and its
  ``turbo-bkb-a2000`` rows ``turbo-bkb-ard-a2000``.
- ``turbo-bkb-tied-a2000`` (rows only; ``mixed10``): ``"turbo-bkb"`` with one
  lengthscale per one-hot group and 2,000 candidates (TuRBO's count with a
  categorical counted once; the default of commits f4cc0ab-625a3f0), the same
  as ``"turbo-bkb"`` with ``num_candidates=2000``; ``turbo-bkb-tied-a2000-g0.1``
  also with ``region_fit="periodic"``, ``refit_growth=0.1``.
- ``turbo-bkb-path`` / ``turbo-bkb-path-a5000``: ``"turbo-bkb"`` with
  ``thompson="pathwise"`` (the Thompson samples by Matheron's rule on a
  random-feature prior path where the region model is exact), with the default
  candidate count / 5,000 candidates; ``turbo-bkb-path-ftol6`` also with
  ``fit_tolerance=1e-6``.
- ``turbo-bkb-joint``: ``"turbo-bkb"`` with ``thompson="joint"`` (the exact
  joint sample from the ``A x A`` factor at every size; the only sampler before
  commit 5304d2c). Since the default ``thompson="auto"`` samples pathwise above
  about 3,100 candidates on one CPU thread (more than 15 model columns:
  ``mixed10``, ``ackley20``, ``levy20``, ``ackley60``), the earlier
  ``turbo-bkb`` rows of those problems were relabelled ``turbo-bkb-joint``, and
  the ``turbo-bkb-path`` rows of ``ackley20`` and ``levy20`` (4,000 candidates at
  every call there, so the same algorithm as ``"auto"``) ``turbo-bkb``.
- ``turbo-bkb-ri`` (rows only, commit 33eabaf): ``"turbo-bkb"`` with a restart
  option since removed, ``restart="incumbent"`` (a collapsed region's data
  dropped but its best point, the new design in the cube of side
  ``length_init`` around it): level with TuRBO's fresh design.
- ``turbo-bkb-reopen``: ``"turbo-bkb"`` with ``restart="reopen"`` (a collapsed
  region reopened at ``length_init`` around its incumbent with its data kept;
  the rows of commit 4616f7e ran it under the option's first name,
  ``restart="incumbent"``);
  ``turbo-bkb-reopen-g0.1`` also with ``region_fit="periodic"``,
  ``refit_growth=0.1``; ``turbo-bkb-reopen-g0.1-w2500`` also with
  ``region_max_points=2500`` (the region's model on the 2,500 points nearest
  its best one: the exact GP on one CPU thread); ``turbo-bkb-reopen-g0.1-w1500``
  the same on 1,500 points (``turbo-bkb-reopen-g0.1-w1500-inv``, rows only, commit
  2dae0d4: before the exact model's posterior came from its Cholesky factor, with
  an ``n x n`` inverse rebuilt at every call, and before ``thompson="auto"``
  counted the model's points: the joint sample at every region size on
  ``michalewicz10``; ``ackley20`` samples pathwise either way);
  ``turbo-bkb-reopen-g0.1-w2500-path`` the 2,500-point one with
  ``thompson="pathwise"``; ``turbo-bkb-reopen-p`` (rows
  only, commit 2cb57b7):
  fitted on the periodic schedule (``refit_growth=0.1``) from the first reopen
  on.
- ``turbo-bkb-product`` (rows only; ``mixed10``): ``"turbo-bkb"`` with the
  shared one-hot lengthscales as a ``ProductKernel`` of per-group RBF kernels
  (commits f4cc0ab-49f3c4d): the same kernel as ``GroupedRBFKernel`` (commit
  f7909c8 on), whose single kernel matrix makes the Thompson sample cheaper.
- ``bbkb-r5``: ``"bbkb"`` with ``num_restarts=5``.
- ``bbkb-autograd`` (rows only, not runnable): ``"bbkb"`` before the batch
  UCB's closed-form value and gradient (commit 3816da8; before, autograd through
  the kernel module): the same algorithm at more CPU. Every earlier ``bbkb`` row
  was relabelled so.
- ``bbkb-rmi10`` / ``bbkb-rmi30`` / ``bbkb-rmi200``: ``"bbkb"`` with
  ``restart_maxiter=10`` / ``30`` / ``200`` (L-BFGS-B iterations of the greedy
  steps started from the previous step's maxima; 200 is BoTorch's default, the
  only setting before the option existed).
- ``bbkb-pgtol5`` / ``bbkb-gtol3``: ``"bbkb"`` with ``gradient_tolerance=None``
  (SciPy's absolute L-BFGS-B ``pgtol = 1e-5`` in every greedy step, the only
  setting before the option existed, commit e64336d: every earlier ``bbkb`` row was
  relabelled so) / ``3e-3`` (the default is ``1e-2``;
  :mod:`botorch_sketch.optim.step_tolerance`).
- ``bbkb-basin0.34``: ``"bbkb"`` with ``basin_share=0.34`` (a 3-point Thompson fill,
  batches of 8, gets one point in another basin; 0.25 gives none).
- ``bbkb-basin0.5``: ``"bbkb"`` with ``basin_share=0.5`` (every batch, stalled or
  not).
- ``bbkb-nostall``: ``"bbkb"`` with ``stall_basin_share=None`` (the basin share is
  never raised when the run stalls: the default before that option existed,
  commit 2b4b406; earlier ``bbkb`` rows since e64336d were relabelled so, except
  where the two are the same run by construction: batches of 8, whose 3-point
  fill gets one basin point at either share, and budgets within the stall window
  ``max(4 q, 20 d)``, e.g. Ackley60 at 1,000 evaluations).
- ``bbkb-before-turns`` (rows only, not runnable): ``"bbkb"`` before the basin
  turns of fixed-size batches without a basin point in their fill (commit baa981a);
  the batches of one point (``--batch 1``) of earlier commits were relabelled.
- ``ax-default``: ``client.configure_generation_strategy()`` and
  ``client.get_next_trials(q)``, stopped at the wall cap (``--ax-cap-s``,
  300 s by default, recorded as ``capped``). ``--turbo-cap-s`` caps TuRBO-1 the
  same way, in CPU seconds (none by default).

Each finished run appends one row to the CSV (``--csv``; a run already there is
skipped, so an interrupted suite resumes): the best noiseless value among the
points evaluated so far after every evaluation (``best_curve``), the cumulative
CPU seconds after every batch (``cpu_curve``, ``evaluations:seconds``), and
where the CPU time went: ``fit`` (model fitting; for ``turbo-bkb`` the region
model's, recorded since 2026-11-27 22:00 UTC, before which it counted as
``ax``), ``gen`` (acquisition / candidate selection), ``ax`` (the rest of Ax's
generation and the completion of trials), ``evaluate`` (the objective). Ax runs
complete each batch with :func:`botorch_sketch.ax.complete_trials` (one data
update per batch; ``--completion trial``: one ``client.complete_trial`` per
trial, whose cost grows with the number of trials, as every row before
2026-11-27 21:30 UTC, column ``completion`` empty). CPU seconds are
``time.process_time`` with one torch thread. ``--report`` writes
``large_budget.md`` (median and quartiles per problem, budget and batch, and the
draft "which strategy" table) and one ``large_budget_<problem>.png`` per problem
from every ``large_budget*.csv``.

Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 10 \
        python benchmarks/bench_large_budget.py --problems hartmann6,ackley20 \
        --methods sobol,turbo1,bbkb --budget 1000 --batch 50 --seeds 0,1,2
    PYTHONPATH=$PWD python benchmarks/bench_large_budget.py --report
    PYTHONPATH=$PWD python benchmarks/bench_large_budget.py --smoke   # seconds
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from botorch.test_functions import Ackley, Hartmann, Levy, Michalewicz, Rosenbrock
from botorch.test_functions.synthetic import SyntheticTestFunction
from torch.quasirandom import SobolEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
from turbo1 import run_turbo1  # noqa: E402

logger = logging.getLogger("bench_large_budget")

DTYPE = torch.float64
CATEGORY_LEVELS = ("a", "b", "c", "d", "e")
CATEGORY_VALUES = (7.0, -3.0, 0.0, 4.0, 9.0)
METHODS = (
    "sobol",
    "turbo1",
    "bbkb",
    "turbo-bkb",
    "turbo-bkb-warm",
    "turbo-bkb-g0.1",
    "turbo-bkb-g0.1-path",
    "turbo-bkb-g0.1-path-noise1-sem",
    "turbo-bkb-ard",
    "turbo-bkb-path",
    "turbo-bkb-path-ftol6",
    "turbo-bkb-path-a5000",
    "turbo-bkb-joint",
    "turbo-bkb-reopen",
    "turbo-bkb-reopen-g0.1",
    "turbo-bkb-reopen-g0.1-w2500",
    "turbo-bkb-reopen-g0.1-w1500",
    "turbo-bkb-reopen-g0.1-w2500-path",
    "turbo-bkb-fit300",
    "turbo-bkb-fit600",
    "turbo-bkb-fit1000",
    "turbo-bkb-it100",
    "turbo-bkb-it200",
    "turbo-bkb-a2000",
    "turbo-bkb-a5000",
    "turbo-bkb-init1.6",
    "turbo-bkb-ft2",
    "turbo-bkb-ft3",
    "turbo-bkb-scipyftol",
    "turbo-bkb-ftol6",
    "turbo-bkb-ftol7",
    "turbo-bkb-ftol8",
    "turbo-bkb-noise1",
    "turbo-bkb-noise2",
    "turbo-bkb-sem",
    "turbo-bkb-noise1-sem",
    "turbo-bkb-m2",
    "turbo-bkb-m3",
    "turbo-bkb-m3-g0.1-path",
    "turbo-bkb-m3-g0.1",
    "turbo-bkb-m5",
    "bbkb-r5",
    "bbkb-basin0.34",
    "bbkb-basin0.5",
    "bbkb-nostall",
    "bbkb-rmi10",
    "bbkb-rmi30",
    "bbkb-rmi200",
    "bbkb-pgtol5",
    "bbkb-gtol3",
    "ax-default",
    "turbo-bkb-published",
    "turbo-bkb-auto",
    "turbo-bkb-auto-mean",
    "turbo-bkb-mean",
    "turbo-bkb-w150",
    "turbo-bkb-w300",
    "turbo-bkb-w600",
    "turbo-bkb-w300-mean",
    "turbo-bkb-g0.1-auto",
    "turbo-bkb-g0.1-mean",
    "turbo-bkb-g0.1-auto-mean",
    "turbo-bkb-g0.1-scipyftol",
    "turbo-bkb-g0.1-mean-scipyftol",
    "turbo-bkb-st1",
    "turbo-bkb-st2",
)
#: The defaults of ``region_fit``, ``incumbent`` and ``region_max_points``
#: before they became ``"auto"`` (sessions 36 and 37): every ``turbo-bkb-*``
#: variant is run with them unless it names its own, so that its rows keep their
#: meaning (plain ``turbo-bkb`` is the strategy's defaults).
PRE_AUTO_DEFAULTS: dict[str, Any] = {
    "region_fit": "cold",
    "incumbent": "observed",
    "region_max_points": None,
}

#: ``"turbo-bkb"``'s own defaults since session 37, named so that a variant on
#: top of them is not run with :data:`PRE_AUTO_DEFAULTS`.
CURRENT_DEFAULTS: dict[str, Any] = {
    "region_fit": "auto",
    "incumbent": "auto",
    "region_max_points": "auto",
}

#: Benchmark names of a package strategy with options: ``name -> (strategy, options)``.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # Session 38: the defaults with a region doubled after fewer successes.
    "turbo-bkb-st1": ("turbo-bkb", {**CURRENT_DEFAULTS, "success_tolerance": 1}),
    "turbo-bkb-st2": ("turbo-bkb", {**CURRENT_DEFAULTS, "success_tolerance": 2}),
    # The defaults before session 37 (PRE_AUTO_DEFAULTS, module docstring).
    "turbo-bkb-published": ("turbo-bkb", {}),
    "turbo-bkb-warm": ("turbo-bkb", {"region_fit": "warm"}),
    # The region's model on a window of its points (session 29).
    "turbo-bkb-auto": ("turbo-bkb", {"region_max_points": "auto"}),
    "turbo-bkb-auto-mean": (
        "turbo-bkb",
        {"region_max_points": "auto", "incumbent": "mean"},
    ),
    "turbo-bkb-mean": ("turbo-bkb", {"incumbent": "mean"}),
    "turbo-bkb-w150": ("turbo-bkb", {"region_max_points": 150}),
    "turbo-bkb-w300": ("turbo-bkb", {"region_max_points": 300}),
    "turbo-bkb-w600": ("turbo-bkb", {"region_max_points": 600}),
    "turbo-bkb-w300-mean": (
        "turbo-bkb",
        {"region_max_points": 300, "incumbent": "mean"},
    ),
    "turbo-bkb-g0.1": ("turbo-bkb", {"region_fit": "periodic", "refit_growth": 0.1}),
    # One point at a time on Levy10 (session 34): the periodic region with the
    # joint sample, and the window / mean incumbent / SciPy's fit tolerance.
    "turbo-bkb-g0.1-auto": (
        "turbo-bkb",
        {"region_fit": "periodic", "refit_growth": 0.1, "region_max_points": "auto"},
    ),
    "turbo-bkb-g0.1-mean": (
        "turbo-bkb",
        {"region_fit": "periodic", "refit_growth": 0.1, "incumbent": "mean"},
    ),
    "turbo-bkb-g0.1-auto-mean": (
        "turbo-bkb",
        {
            "region_fit": "periodic",
            "refit_growth": 0.1,
            "region_max_points": "auto",
            "incumbent": "mean",
        },
    ),
    "turbo-bkb-g0.1-scipyftol": (
        "turbo-bkb",
        {"region_fit": "periodic", "refit_growth": 0.1, "fit_tolerance": None},
    ),
    "turbo-bkb-g0.1-mean-scipyftol": (
        "turbo-bkb",
        {
            "region_fit": "periodic",
            "refit_growth": 0.1,
            "incumbent": "mean",
            "fit_tolerance": None,
        },
    ),
    "turbo-bkb-g0.1-path": (
        "turbo-bkb",
        {"region_fit": "periodic", "refit_growth": 0.1, "thompson": "pathwise"},
    ),
    "turbo-bkb-g0.1-path-noise1-sem": (
        "turbo-bkb",
        {
            "region_fit": "periodic",
            "refit_growth": 0.1,
            "thompson": "pathwise",
            "noise_tolerance": 1.0,
        },
    ),
    "turbo-bkb-ard": ("turbo-bkb", {"one_hot_lengthscales": "per_column"}),
    "turbo-bkb-path": ("turbo-bkb", {"thompson": "pathwise"}),
    "turbo-bkb-path-ftol6": (
        "turbo-bkb",
        {"thompson": "pathwise", "fit_tolerance": 1e-6},
    ),
    "turbo-bkb-joint": ("turbo-bkb", {"thompson": "joint"}),
    "turbo-bkb-reopen": ("turbo-bkb", {"restart": "reopen"}),
    "turbo-bkb-reopen-g0.1": (
        "turbo-bkb",
        {"restart": "reopen", "region_fit": "periodic", "refit_growth": 0.1},
    ),
    "turbo-bkb-reopen-g0.1-w2500": (
        "turbo-bkb",
        {
            "restart": "reopen",
            "region_fit": "periodic",
            "refit_growth": 0.1,
            "region_max_points": 2500,
        },
    ),
    "turbo-bkb-reopen-g0.1-w1500": (
        "turbo-bkb",
        {
            "restart": "reopen",
            "region_fit": "periodic",
            "refit_growth": 0.1,
            "region_max_points": 1500,
        },
    ),
    "turbo-bkb-reopen-g0.1-w2500-path": (
        "turbo-bkb",
        {
            "restart": "reopen",
            "region_fit": "periodic",
            "refit_growth": 0.1,
            "region_max_points": 2500,
            "thompson": "pathwise",
        },
    ),
    "turbo-bkb-path-a5000": (
        "turbo-bkb",
        {"thompson": "pathwise", "num_candidates": 5000},
    ),
    "turbo-bkb-fit300": ("turbo-bkb", {"fit_subset_size": 300}),
    "turbo-bkb-fit600": ("turbo-bkb", {"fit_subset_size": 600}),
    "turbo-bkb-fit1000": ("turbo-bkb", {"fit_subset_size": 1000}),
    "turbo-bkb-it100": ("turbo-bkb", {"fit_max_iterations": 100}),
    "turbo-bkb-it200": ("turbo-bkb", {"fit_max_iterations": 200}),
    "turbo-bkb-a2000": ("turbo-bkb", {"num_candidates": 2000}),
    "turbo-bkb-a5000": ("turbo-bkb", {"num_candidates": 5000}),
    "turbo-bkb-init1.6": ("turbo-bkb", {"length_init": 1.6}),
    "turbo-bkb-ft2": ("turbo-bkb", {"failure_tolerance": 2}),
    "turbo-bkb-ft3": ("turbo-bkb", {"failure_tolerance": 3}),
    "turbo-bkb-scipyftol": ("turbo-bkb", {"fit_tolerance": None}),
    "turbo-bkb-ftol6": ("turbo-bkb", {"fit_tolerance": 1e-6}),
    "turbo-bkb-ftol7": ("turbo-bkb", {"fit_tolerance": 1e-7}),
    "turbo-bkb-ftol8": ("turbo-bkb", {"fit_tolerance": 1e-8}),
    "turbo-bkb-noise1": ("turbo-bkb", {"noise_tolerance": 1.0}),
    "turbo-bkb-noise2": ("turbo-bkb", {"noise_tolerance": 2.0}),
    "turbo-bkb-sem": ("turbo-bkb", {}),
    "turbo-bkb-noise1-sem": ("turbo-bkb", {"noise_tolerance": 1.0}),
    "turbo-bkb-m2": ("turbo-bkb", {"num_regions": 2}),
    "turbo-bkb-m3": ("turbo-bkb", {"num_regions": 3}),
    "turbo-bkb-m3-g0.1-path": (
        "turbo-bkb",
        {
            "num_regions": 3,
            "region_fit": "periodic",
            "refit_growth": 0.1,
            "thompson": "pathwise",
        },
    ),
    "turbo-bkb-m3-g0.1": (
        "turbo-bkb",
        {"num_regions": 3, "region_fit": "periodic", "refit_growth": 0.1},
    ),
    "turbo-bkb-m5": ("turbo-bkb", {"num_regions": 5}),
    "bbkb-r5": ("bbkb", {"num_restarts": 5}),
    "bbkb-basin0.34": ("bbkb", {"basin_share": 0.34}),
    "bbkb-basin0.5": ("bbkb", {"basin_share": 0.5}),
    "bbkb-nostall": ("bbkb", {"stall_basin_share": None}),
    "bbkb-rmi10": ("bbkb", {"restart_maxiter": 10}),
    "bbkb-rmi30": ("bbkb", {"restart_maxiter": 30}),
    "bbkb-rmi200": ("bbkb", {"restart_maxiter": 200}),
    "bbkb-pgtol5": ("bbkb", {"gradient_tolerance": None}),
    "bbkb-gtol3": ("bbkb", {"gradient_tolerance": 3e-3}),
}
#: Methods whose observations go to Ax as ``(mean, sem)`` with the known noise sd.
REPORTS_SEM = (
    "turbo-bkb-sem",
    "turbo-bkb-noise1-sem",
    "turbo-bkb-g0.1-path-noise1-sem",
)
KEY = ("problem", "method", "seed", "budget", "batch")
#: The problems and cells of the issue's full grid, and the problems also run
#: with 10,000 evaluations (:data:`PENDING`, the report's coverage table).
GRID_PROBLEMS = (
    "hartmann6",
    "ackley20",
    "levy10",
    "levy20",
    "rosenbrock10",
    "michalewicz10",
    "mixed10",
    "ackley60",
)
GRID_BUDGETS, GRID_BATCHES, GRID_SEEDS = (1000, 5000), (1, 8, 50), 5
GRID_LARGE_PROBLEMS, GRID_LARGE_BUDGET = ("hartmann6", "ackley20"), 10000

_SEEDS = ",".join(map(str, range(GRID_SEEDS)))
_BATCHES = " ".join(map(str, GRID_BATCHES))
PENDING = f"""```
export PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
M=sobol,turbo1,bbkb,turbo-bkb,ax-default
for P in {" ".join(GRID_PROBLEMS)}; do
  for B in {" ".join(map(str, GRID_BUDGETS))}; do for Q in {_BATCHES}; do
    nice -n 10 python benchmarks/bench_large_budget.py --problems $P --methods $M \\
      --budget $B --batch $Q --seeds {_SEEDS} \\
      --csv benchmarks/results/large_budget_runs_$P.csv
  done; done
done
for P in {" ".join(GRID_LARGE_PROBLEMS)}; do for Q in {_BATCHES}; do
  nice -n 10 python benchmarks/bench_large_budget.py --problems $P --methods $M \\
    --budget {GRID_LARGE_BUDGET} --batch $Q --seeds {_SEEDS} \\
    --csv benchmarks/results/large_budget_runs_$P.csv
done; done
python benchmarks/bench_large_budget.py --report
```"""


# -------------------------------------------------------------------------------
# Problems
# -------------------------------------------------------------------------------


@dataclass
class Problem:
    """A test function on a (possibly mixed) space.

    ``kinds[i]`` is ``"float"``, ``"int"`` or ``"cat"``; ``bounds`` (``2 x d``)
    are the float/int ranges (ignored for ``"cat"``). ``decode`` maps
    ``n x d`` points of ``[0, 1]^d`` to the function's inputs.
    """

    name: str
    function: SyntheticTestFunction
    bounds: torch.Tensor
    kinds: tuple[str, ...]
    optimum: float

    @property
    def dim(self) -> int:
        """Number of parameters."""
        return len(self.kinds)

    def decode(self, U: torch.Tensor) -> torch.Tensor:
        """``n x d`` unit-cube points -> ``n x d`` function inputs."""
        lo, hi = self.bounds[0], self.bounds[1]
        X = lo + (hi - lo) * U
        for i, kind in enumerate(self.kinds):
            if kind == "int":
                steps = hi[i] - lo[i] + 1
                X[:, i] = lo[i] + (U[:, i] * steps).floor().clamp(max=steps - 1)
            elif kind == "cat":
                idx = (U[:, i] * len(CATEGORY_VALUES)).long().clamp(max=4)
                X[:, i] = torch.tensor(CATEGORY_VALUES, dtype=U.dtype)[idx]
        return X

    def from_parameters(self, params: dict[str, Any]) -> torch.Tensor:
        """An Ax parameterization -> a ``1 x d`` function input."""
        row = []
        for i, kind in enumerate(self.kinds):
            v = params[f"x{i}"]
            if kind == "cat":
                v = CATEGORY_VALUES[CATEGORY_LEVELS.index(v)]
            row.append(float(v))
        return torch.tensor([row], dtype=DTYPE)

    def ax_parameters(self) -> list[Any]:
        """Ax parameter configs for this space."""
        from ax import ChoiceParameterConfig, RangeParameterConfig

        out: list[Any] = []
        for i, kind in enumerate(self.kinds):
            lo, hi = float(self.bounds[0, i]), float(self.bounds[1, i])
            if kind == "cat":
                out.append(
                    ChoiceParameterConfig(
                        name=f"x{i}",
                        values=list(CATEGORY_LEVELS),
                        parameter_type="str",
                        is_ordered=False,
                    )
                )
            elif kind == "int":
                out.append(
                    RangeParameterConfig(
                        name=f"x{i}", parameter_type="int", bounds=(int(lo), int(hi))
                    )
                )
            else:
                out.append(
                    RangeParameterConfig(
                        name=f"x{i}", parameter_type="float", bounds=(lo, hi)
                    )
                )
        return out

    def value(self, X: torch.Tensor) -> torch.Tensor:
        """Noiseless values (``n``) at function inputs ``X`` (``n x d``)."""
        return self.function(X)


def _box(fn: SyntheticTestFunction) -> torch.Tensor:
    return fn.bounds.to(DTYPE)


def make_problem(name: str) -> Problem:
    """The problem called ``name`` (module docstring)."""
    if name == "hartmann6":
        fn: SyntheticTestFunction = Hartmann(dim=6)
        return Problem(name, fn, _box(fn), ("float",) * 6, -3.32237)
    if name.startswith("ackley") and name[6:].isdigit():
        d = int(name[6:])
        fn = Ackley(dim=d, bounds=[(-5.0, 10.0)] * d)
        return Problem(name, fn, _box(fn), ("float",) * d, 0.0)
    if name.startswith("levy") and name[4:].isdigit():
        fn = Levy(dim=int(name[4:]))
        return Problem(name, fn, _box(fn), ("float",) * int(name[4:]), 0.0)
    if name == "rosenbrock10":
        fn = Rosenbrock(dim=10, bounds=[(-5.0, 10.0)] * 10)
        return Problem(name, fn, _box(fn), ("float",) * 10, 0.0)
    if name == "michalewicz10":
        fn = Michalewicz(dim=10)
        return Problem(name, fn, _box(fn), ("float",) * 10, -9.66015)
    if name == "mixed10":
        fn = Ackley(dim=10, bounds=[(-5.0, 10.0)] * 10)
        kinds = ("float",) * 6 + ("int",) * 2 + ("cat",) * 2
        return Problem(name, fn, _box(fn), kinds, 0.0)
    raise ValueError(f"unknown problem {name!r}")


def observe(problem: Problem, X: torch.Tensor, index0: int, sd: float, seed: int):
    """Noisy observations of the ``n x d`` inputs ``X`` whose evaluation indices
    start at ``index0`` (each draw seeded by the seed and its index)."""
    f = problem.value(X)
    noise = torch.stack(
        [
            torch.randn(
                (), generator=torch.Generator().manual_seed(seed * 1_000_003 + i)
            )
            for i in range(index0, index0 + len(X))
        ]
    ).to(f)
    return f + sd * noise, f


# -------------------------------------------------------------------------------
# Methods
# -------------------------------------------------------------------------------


@dataclass
class RunOutput:
    """Noiseless values in evaluation order; CPU split; cumulative CPU per batch."""

    values: list[float]
    cpu: dict[str, float]
    cpu_after_batch: list[tuple[int, float]]
    capped: bool = False
    restarts: int | None = None
    note: str = ""


def run_sobol(problem: Problem, budget: int, q: int, seed: int, sd: float):
    """Scrambled Sobol points, evaluated in batches of ``q``."""
    cpu0 = time.process_time()
    U = SobolEngine(problem.dim, scramble=True, seed=seed).draw(budget).to(DTYPE)
    gen_s = time.process_time() - cpu0
    values, after, eval_s = [], [], 0.0
    for start in range(0, budget, q):
        t0 = time.process_time()
        _, f = observe(problem, problem.decode(U[start : start + q]), start, sd, seed)
        eval_s += time.process_time() - t0
        values += f.tolist()
        after.append((len(values), time.process_time() - cpu0))
    cpu = {"fit": 0.0, "gen": gen_s, "ax": 0.0, "evaluate": eval_s}
    return RunOutput(values, cpu, after)


def run_turbo(
    problem: Problem,
    budget: int,
    q: int,
    seed: int,
    sd: float,
    cap_s: float | None = None,
):
    """TuRBO-1 on ``[0, 1]^d``, decoded to the space (stopped after ``cap_s`` CPU
    seconds, if given)."""
    seen = [0]
    truth: list[float] = []

    def objective(U: torch.Tensor) -> torch.Tensor:
        y, f = observe(problem, problem.decode(U), seen[0], sd, seed)
        seen[0] += len(U)
        truth.extend(f.tolist())
        return y

    unit = torch.stack([torch.zeros(problem.dim), torch.ones(problem.dim)]).to(DTYPE)
    res = run_turbo1(objective, unit, budget, q, seed=seed, cpu_cap_s=cap_s)
    cpu = {
        "fit": res.cpu["fit"],
        "gen": res.cpu["generate"],
        "ax": 0.0,
        "evaluate": res.cpu["evaluate"],
    }
    return RunOutput(
        truth, cpu, res.cpu_after_batch, restarts=res.restarts, capped=res.capped
    )


def run_ax(
    problem: Problem,
    budget: int,
    q: int,
    seed: int,
    sd: float,
    method: str,
    cap_s: float,
    completion: str = "batch",
):
    """An ``ax.Client`` run: a package strategy through ``get_next_batch``, or
    Ax's default through ``get_next_trials`` (stopped at ``cap_s`` wall s); each
    batch completed by ``complete_trials`` (``completion="batch"``) or by one
    ``client.complete_trial`` per trial (``"trial"``)."""
    from ax import Client
    from ax.generators.torch.botorch_modular.generator import BoTorchGenerator

    from botorch_sketch.ax import get_generation_strategy, get_next_batch, turbo
    from botorch_sketch.ax.generator import SketchBoTorchGenerator

    cpu0, wall0 = time.process_time(), time.perf_counter()
    client = Client(random_seed=seed)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("ax"):
            logging.getLogger(name).setLevel(logging.WARNING)
    client.configure_experiment(parameters=problem.ax_parameters())
    client.configure_optimization(objective="-f")
    if method == "ax-default":
        client.configure_generation_strategy()
    else:
        strategy, options = VARIANTS.get(method, (method, {}))
        if strategy == "turbo-bkb" and method != "turbo-bkb":
            options = {**PRE_AUTO_DEFAULTS, **options}
        size = {"batch_size" if strategy == "turbo-bkb" else "min_batch_size": q}
        client.set_generation_strategy(
            get_generation_strategy(strategy, seed=seed, **size, **options)
        )
    values, after = [], []
    gen_s = eval_s = complete_s = 0.0
    capped = False
    # One region samples in generate_batch; several in batch_candidates and
    # thompson_samples (rows of turbo-bkb-m3 before this have that time in "ax").
    region = (
        "fit_region_model",
        "generate_batch",
        "batch_candidates",
        "thompson_samples",
    )
    with (
        harness.method_cpu(
            (SketchBoTorchGenerator, BoTorchGenerator), ("fit", "gen")
        ) as inside,
        harness.method_cpu((turbo,), region) as turbo_cpu,
    ):
        while len(values) < budget:
            if method == "ax-default" and time.perf_counter() - wall0 > cap_s:
                capped = True
                break
            k = min(q, budget - len(values))
            t0 = time.process_time()
            if method == "ax-default":
                trials = client.get_next_trials(max_trials=k)
            else:
                trials = get_next_batch(client, max_batch_size=k)
            t1 = time.process_time()
            gen_s += t1 - t0
            results = {}
            t2 = time.process_time()
            for index, params in trials.items():
                y, f = observe(
                    problem, problem.from_parameters(params), index, sd, seed
                )
                raw = (float(y), sd) if method in REPORTS_SEM else float(y)
                results[index] = {"f": raw}
                values.append(float(f))
            t3 = time.process_time()
            harness.complete(client, results, completion)
            complete_s += time.process_time() - t3
            eval_s += t3 - t2
            after.append((len(values), time.process_time() - cpu0))
            if len(after) % 5 == 0:
                logger.info(
                    "%s %s seed %d: %d evaluations, %.0f CPU s, best %.4g",
                    problem.name,
                    method,
                    seed,
                    len(values),
                    after[-1][1],
                    min(values),
                )
    fit = inside["fit"] + turbo_cpu["fit_region_model"]
    gen = inside["gen"] + sum(turbo_cpu[name] for name in region[1:])
    model = fit + gen
    cpu = {
        "fit": fit,
        "gen": gen,
        "ax": gen_s + complete_s - model,
        "evaluate": eval_s,
    }
    return RunOutput(values, cpu, after, capped=capped, restarts=_restarts(client))


def _restarts(client: Any) -> int | None:
    """The trust-region restarts of a "turbo-bkb" run (its last generator run's
    ``gen_metadata``); ``None`` for other strategies."""
    for trial in reversed(list(client._experiment.trials.values())):
        for run in trial.generator_runs:
            if "restarts" in (run.gen_metadata or {}):
                return int(run.gen_metadata["restarts"])
    return None


# -------------------------------------------------------------------------------
# Suite
# -------------------------------------------------------------------------------


def available(method: str) -> bool:
    """Whether ``method`` can run here (``turbo-bkb`` needs the package's)."""
    if not method.startswith("turbo-bkb"):
        return True
    from botorch_sketch.ax import list_generation_strategies

    return "turbo-bkb" in list_generation_strategies()


def run_one(
    problem: Problem, method: str, seed: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One ``(problem, method, seed)`` run as a CSV row."""
    load0, wall0, cpu0 = os.getloadavg()[0], time.perf_counter(), time.process_time()
    runners: dict[str, Callable[..., RunOutput]] = {
        "sobol": run_sobol,
    }
    common = (problem, args.budget, args.batch, seed, args.noise_sd)
    if method == "turbo1":
        out = run_turbo(*common, cap_s=args.turbo_cap_s)
    elif method in runners:
        out = runners[method](*common)
    else:
        out = run_ax(
            *common, method=method, cap_s=args.ax_cap_s, completion=args.completion
        )
    best = [min(out.values[: i + 1]) for i in range(len(out.values))]
    return {
        "problem": problem.name,
        "dim": problem.dim,
        "method": method,
        "seed": seed,
        "budget": args.budget,
        "batch": args.batch,
        "noise_sd": args.noise_sd,
        "evaluations": len(out.values),
        "capped": out.capped,
        "final_best": best[-1],
        "optimum": problem.optimum,
        "cpu_s": time.process_time() - cpu0,
        "wall_s": time.perf_counter() - wall0,
        **{f"{k}_cpu_s": v for k, v in out.cpu.items()},
        "restarts": "" if out.restarts is None else out.restarts,
        "completion": args.completion if method not in ("sobol", "turbo1") else "",
        "load_start": load0,
        "load_end": os.getloadavg()[0],
        "commit": harness.git_head(),
        "cpu": harness.cpu_model(),
        "best_curve": ";".join(f"{v:.6g}" for v in best),
        "cpu_curve": ";".join(f"{n}:{s:.3f}" for n, s in out.cpu_after_batch),
    }


def _key(row: dict[str, Any]) -> tuple:
    return tuple(
        str(int(float(row[k]))) if k != "problem" and k != "method" else str(row[k])
        for k in KEY
    )


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Add ``row`` to the CSV at ``path``, re-read under a lock: runs that write
    the same CSV side by side keep each other's rows (each used to write back
    the rows it read at its start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = harness.read_csv(path) if path.exists() else []
        harness.write_csv(path, [*rows, row])


def run_suite(args: argparse.Namespace) -> None:
    """Every selected ``(problem, method, seed)`` not yet in the CSV."""
    rows = harness.read_csv(args.csv) if args.csv.exists() else []
    done = {_key(r) for r in rows}
    for name in args.problems.split(","):
        problem = make_problem(name)
        methods = [m for m in args.methods.split(",") if available(m)]
        for m in sorted(set(args.methods.split(",")) - set(methods)):
            logger.warning("%s: not registered in this package; skipped", m)
        for seed in (int(s) for s in args.seeds.split(",")):
            for method in methods:
                row_key = (name, method, str(seed), str(args.budget), str(args.batch))
                if row_key in done:
                    continue
                logger.info("run %s %s seed %d", name, method, seed)
                row = run_one(problem, method, seed, args)
                append_row(args.csv, row)
                logger.info(
                    "done %s %s seed %d: best %.4g after %d, %.0f CPU s (load %.1f)",
                    name,
                    method,
                    seed,
                    row["final_best"],
                    row["evaluations"],
                    row["cpu_s"],
                    row["load_end"],
                )


# -------------------------------------------------------------------------------
# Report
# -------------------------------------------------------------------------------


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    t = torch.tensor(values, dtype=DTYPE)
    q = torch.quantile(t, torch.tensor([0.25, 0.5, 0.75], dtype=DTYPE))
    return float(q[0]), float(q[1]), float(q[2])


def _fmt(values: list[float]) -> str:
    if not values:
        return "-"
    lo, med, hi = _quantiles(values)
    return f"{med:.4g} [{lo:.4g}, {hi:.4g}]"


def _curve(row: dict[str, Any]) -> list[float]:
    return [float(v) for v in str(row["best_curve"]).split(";")]


def _cpu_curve(row: dict[str, Any]) -> list[tuple[int, float]]:
    pairs = (p.split(":") for p in str(row["cpu_curve"]).split(";"))
    return [(int(n), float(s)) for n, s in pairs]


def _at(row: dict[str, Any], n: int) -> float | None:
    curve = _curve(row)
    return curve[n - 1] if len(curve) >= n else None


def _groups(rows: list[dict]) -> dict[tuple, dict[str, list[dict]]]:
    out: dict[tuple, dict[str, list[dict]]] = {}
    for r in rows:
        g = (r["problem"], int(r["dim"]), int(r["budget"]), int(r["batch"]))
        out.setdefault(g, {}).setdefault(r["method"], []).append(r)
    return out


def _summary_rows(group: dict[str, list[dict]], budget: int) -> list[dict]:
    marks = [n for n in (250, 500, 1000, 5000, 10000) if n <= budget]
    lines = []
    for method in [*METHODS, *sorted(set(group) - set(METHODS))]:
        runs = group.get(method)
        if not runs:
            continue
        finals = [float(r["final_best"]) for r in runs]
        cpu = [float(r["cpu_s"]) for r in runs]
        total = sum(cpu) or 1.0
        split = "/".join(
            f"{100 * sum(float(r[f'{k}_cpu_s']) for r in runs) / total:.0f}"
            for k in ("fit", "gen", "ax", "evaluate")
        )
        line = {
            "method": method,
            "seeds": len(runs),
            "capped": sum(str(r["capped"]) == "True" for r in runs),
            "evaluations (min)": min(int(r["evaluations"]) for r in runs),
        }
        for n in marks:
            vals = [v for r in runs if (v := _at(r, n)) is not None]
            line[f"@{n} median [q1, q3]"] = (
                _fmt(vals) if len(vals) == len(runs) else "-"
            )
        line["final median [q1, q3]"] = _fmt(finals)
        line["final worst seed"] = f"{max(finals):.4g}"
        line["CPU s median [q1, q3]"] = _fmt(cpu)
        line["CPU % fit/gen/ax/eval"] = split
        lines.append(line)
    return lines


def _plot(problem: str, groups: dict[tuple, dict[str, list[dict]]], out: Path):
    keys = [g for g in groups if g[0] == problem]
    fig, axes = harness.figure(len(keys), 2, figsize=(12, 4 * len(keys)), squeeze=False)
    for (left, right), g in zip(axes, keys, strict=True):
        for i, (method, runs) in enumerate(groups[g].items()):
            color = f"C{METHODS.index(method) if method in METHODS else i}"
            opt = float(runs[0]["optimum"])
            curves = [_curve(r) for r in runs]
            n = min(len(c) for c in curves)
            t = torch.tensor([c[:n] for c in curves], dtype=DTYPE) - opt
            lo, med, hi = torch.quantile(
                t, torch.tensor([0.25, 0.5, 0.75], dtype=DTYPE), dim=0
            )
            x = range(1, n + 1)
            left.plot(x, med.tolist(), color=color, label=f"{method} (median)")
            left.fill_between(x, lo.tolist(), hi.tolist(), color=color, alpha=0.2)
            for j, r in enumerate(runs):
                pairs = _cpu_curve(r)
                curve = _curve(r)
                right.step(
                    [s for _, s in pairs],
                    [curve[k - 1] - opt for k, _ in pairs],
                    where="post",
                    color=color,
                    alpha=0.7,
                    label=method if j == 0 else None,
                )
        for ax, xlabel in ((left, "evaluations"), (right, "CPU seconds")):
            ax.set(yscale="log", xlabel=xlabel, ylabel="best true value - optimum")
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=8)
        right.set_xscale("log")
        left.set_title(f"{g[0]} (d = {g[1]}), batch {g[3]}: median, quartiles")
        right.set_title("each seed vs CPU seconds")
    fig.tight_layout()
    fig.savefig(out / f"large_budget_{problem}.png", dpi=90)


def _shown(value: float) -> float:
    """``value`` at the report's precision (4 significant digits)."""
    return float(f"{value:.4g}")


def _which_table(groups: dict[tuple, dict[str, list[dict]]]) -> str:
    lines = []
    for (problem, dim, budget, batch), group in sorted(groups.items()):
        stats, capped = [], []
        for method, runs in group.items():
            if any(int(r["evaluations"]) < budget for r in runs):
                reached = min(int(r["evaluations"]) for r in runs)
                capped.append(f"{method}: capped at {reached} evaluations")
                continue  # capped runs do not compete at this budget
            finals = [float(r["final_best"]) for r in runs]
            cpu = [float(r["cpu_s"]) for r in runs]
            median, cpu_median = _quantiles(finals)[1], _quantiles(cpu)[1]
            stats.append((median, max(finals), method, cpu_median, len(runs)))
        if not stats:
            continue
        # Values equal at the shown precision (4 significant digits) are a tie,
        # which the lower median CPU breaks.
        stats.sort(key=lambda s: (_shown(s[0]), _shown(s[1]), s[3]))
        best = stats[0]
        safest = min(stats, key=lambda s: (_shown(s[1]), s[3]))
        every = [
            f"{m}: {med:.4g} / {worst:.4g} / {c:.0f} s ({n} seeds)"
            for med, worst, m, c, n in stats
        ]
        lines.append(
            {
                "problem (d)": f"{problem} ({dim})",
                "budget": budget,
                "batch": batch,
                "best median": f"{best[2]} ({best[0]:.4g}; worst seed {best[1]:.4g})",
                "best worst seed": f"{safest[2]} ({safest[1]:.4g})",
                "every method: median / worst seed / median CPU, best first": (
                    "; ".join(every + capped)
                ),
            }
        )
    return harness.markdown_table(lines)


#: Labels of runs made with the configuration that ``"turbo-bkb"``'s defaults
#: resolve to (module docstring), by whether the batch is one point: counted
#: with the plain ``turbo-bkb`` rows in the grid's coverage.
DEFAULT_EQUIVALENTS = {
    False: ("turbo-bkb", "turbo-bkb-auto-mean"),
    True: ("turbo-bkb", "turbo-bkb-g0.1-auto-mean"),
}


def _coverage_table(groups: dict[tuple, dict[str, list[dict]]]) -> str:
    """Seeds per cell of the full grid (and of the larger budgets run) for the
    suite's methods and ``"turbo-bkb"``'s defaults; ``(c capped)`` counts runs
    stopped by their cap."""
    by_cell = {(p, b, q): group for (p, _, b, q), group in groups.items()}
    cells = [
        (p, b, q) for p in GRID_PROBLEMS for b in GRID_BUDGETS for q in GRID_BATCHES
    ]
    cells += sorted(c for c in by_cell if c[1] > max(GRID_BUDGETS))
    lines = []
    for cell in cells:
        group = by_cell.get(cell, {})
        line = {"problem": cell[0], "budget": cell[1], "batch": cell[2]}
        for method in ("sobol", "turbo1", "ax-default", "bbkb"):
            runs = group.get(method, [])
            capped = sum(str(r["capped"]) == "True" for r in runs)
            line[method] = f"{len(runs)}" + (f" ({capped} capped)" if capped else "")
        labels = DEFAULT_EQUIVALENTS[cell[2] == 1]
        seeds = {r["seed"] for m in labels for r in group.get(m, [])}
        line["turbo-bkb defaults"] = str(len(seeds))
        lines.append(line)
    return harness.markdown_table(lines)


def _optimum(group: dict[str, list[dict]]) -> float:
    return float(next(iter(group.values()))[0]["optimum"])


def report(out: Path) -> None:
    """``large_budget.md`` and the plots from every ``large_budget*.csv`` (a run
    found in several CSVs, e.g. a seed rerun next to new seeds, counts once: the
    last file's row in name order)."""
    by_key = {
        _key(r): r
        for p in sorted(out.glob("large_budget*.csv"))
        for r in harness.read_csv(p)
    }
    rows = list(by_key.values())
    if not rows:
        logger.warning("no rows in %s", out)
        return
    groups = _groups(rows)
    sections = [
        "Module docstring of `benchmarks/bench_large_budget.py`: the problems "
        f"(noise sd {rows[0]['noise_sd']:g} on every observation), methods and what "
        "is recorded. "
        "Values are the best noiseless value among the points evaluated so far; "
        "median [first quartile, third quartile] over seeds. CPU seconds are "
        "`time.process_time` of the whole run with one torch thread, split into "
        "model fit / acquisition (gen) / the rest of Ax's calls / the objective. "
        "A capped run (Ax's default past its wall cap, TuRBO-1 past its CPU cap) "
        "stopped before the budget; "
        "its `@n` cells are empty where it did not reach `n`. Load averages and "
        "commits of each run are in the CSVs. CPU seconds of runs made on "
        "different days are not comparable: TuRBO-1 (the same code) took "
        "148-161 s on Ackley60 in the runs of 2026-11-27 and 254-308 s in those "
        "of 2026-11-28 from 12:00 UTC (`_s11` files), which compare with each "
        "other only; the machines differed too (an AMD EPYC in session 26, an "
        "Intel Xeon about twice as fast on these runs in session 27, whose rows "
        "name their CPU in the column `cpu`): compare a method with TuRBO-1 run "
        "in the same session, seed by seed.",
    ]
    for g in sorted(groups):
        problem, dim, budget, batch = g
        loads = [float(r["load_end"]) for rs in groups[g].values() for r in rs]
        sections += [
            f"## {problem} (d = {dim}, optimum {_optimum(groups[g]):g}), "
            f"budget {budget}, batch {batch}",
            harness.markdown_table(_summary_rows(groups[g], budget)),
            f"Load average at the end of the runs: {min(loads):.1f} to "
            f"{max(loads):.1f}.",
        ]
    for problem in sorted({g[0] for g in groups}):
        _plot(problem, groups, out)
        sections.append(
            f"![{problem}: best vs evaluations and vs CPU seconds]"
            f"(large_budget_{problem}.png)"
        )
    sections += [
        "## The full grid: seeds per cell",
        f"The issue's grid asks for {GRID_SEEDS} seeds of every method in every "
        "cell. Seeds run so far (the column `turbo-bkb defaults` counts the "
        "distinct seeds of the rows labelled `turbo-bkb` and of the variants that "
        "the defaults resolve to, `DEFAULT_EQUIVALENTS`):",
        _coverage_table(groups),
        "The rest needs a quiet machine for days (TuRBO-1's exact GP grows "
        "cubically with a restart's data; one point at a time a run is 5,000 model "
        "calls). The exact commands, one CSV per problem (the suite resumes from "
        "it):",
        PENDING,
        "## Which strategy (draft, from the runs above)",
        "Per problem, budget and batch: the method with the best median final value "
        "(with its worst seed), the method whose worst seed is best, and every "
        "method's median, worst seed and median CPU seconds, best median first "
        "(capped runs listed, not ranked; values equal at the shown precision go to "
        "the lower median CPU). Read the worst seed next to the median: "
        "with few seeds one run in a second basin changes the choice.",
        _which_table(groups),
    ]
    harness.write_report(
        out / "large_budget.md", "Large-budget suite (issue 24)", sections
    )


def main(argv: list[str] | None = None) -> int:
    """Run the selected suite (resuming the CSV) or ``--report``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", default="hartmann6,ackley20")
    p.add_argument("--methods", default="sobol,turbo1,bbkb,turbo-bkb,ax-default")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--noise-sd", type=float, default=0.05)
    p.add_argument("--ax-cap-s", type=float, default=300.0)
    p.add_argument(
        "--turbo-cap-s",
        type=float,
        default=None,
        help="stop TuRBO-1 after this many CPU seconds (recorded as capped)",
    )
    p.add_argument(
        "--completion",
        choices=("batch", "trial"),
        default="batch",
        help="Ax runs: complete each batch with complete_trials, or one "
        "client.complete_trial per trial",
    )
    p.add_argument("--out", type=Path, default=harness.RESULTS)
    p.add_argument(
        "--csv", type=Path, default=None, help="default: OUT/large_budget.csv"
    )
    p.add_argument("--report", action="store_true", help="only write the report")
    p.add_argument("--smoke", action="store_true", help="a seconds-long run in tmp/")
    args = p.parse_args(argv)
    harness.quiet_single_thread()
    if args.smoke:
        args.out = harness.RESULTS / "tmp" / "large_budget_smoke"
        args.problems, args.methods = "hartmann6,mixed10", "sobol,turbo1,bbkb"
        args.seeds, args.budget, args.batch = "0", 40, 10
    args.csv = args.csv or args.out / "large_budget.csv"
    if not args.report:
        run_suite(args)
    if args.report or args.smoke:
        report(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
