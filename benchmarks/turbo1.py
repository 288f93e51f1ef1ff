"""TuRBO-1: trust-region Bayesian optimisation, written from Eriksson et al. (2019).

The baseline of the large-budget suite (``bench_large_budget.py``): one trust
region on the unit cube ``[0, 1]^d`` around the incumbent, an exact GP on the
data collected since the last restart, and ``q`` points per batch by Thompson
sampling over perturbed Sobol candidates inside the region.

Trust region (Eriksson et al., NeurIPS 2019, section 2). With ``x*`` the point
of the best observation since the restart, ``lambda_i`` the GP's ARD lengthscales
(``d``) and ``L`` the side length, the region is the box

    ``x*_i +- w_i L / 2``, ``w_i = lambda_i / (prod_j lambda_j)^(1/d)``,

clipped to ``[0, 1]^d`` (the ``w_i`` have geometric mean 1, so the box's volume is
``L^d`` before clipping). ``L`` starts at ``length_init`` (0.8), doubles (capped
at ``length_max``, 1.6) after ``success_tolerance`` (3) consecutive successful
batches and halves after ``ceil(max(4 / q, d / q))`` consecutive failed batches;
a batch succeeds when its best value improves the best since the restart by more
than ``1e-3 |best|``. When ``L`` falls below ``length_min`` (``0.5^7``) the region
restarts: its data is dropped (kept only for the final result) and a fresh Sobol
design of ``n_init`` points starts a new region.

Batch (section 2, "Thompson sampling"): ``n_cand = min(5000, max(2000, 200 d))``
Sobol points in the region; each candidate keeps the centre's value in every
dimension except a random subset, each dimension being perturbed with probability
``min(1, 20 / d)`` (at least one per candidate); ``q`` candidates are chosen by
BoTorch's ``MaxPosteriorSampling`` without replacement (one joint posterior
sample over the candidates per chosen point).

Model: BoTorch's ``SingleTaskGP`` with its defaults (RBF kernel with ARD and
dimension-scaled lengthscale prior, learned homoskedastic noise, outcome
standardisation), fitted by ``fit_gpytorch_mll`` on the restart's data, inputs in
``[0, 1]^d``. The defaults replace the paper's noise constraint (noise at most
``1e-3`` of the standardised scale), which does not suit noisy evaluations.

The optimiser minimises; :func:`run_turbo1` maps the unit cube onto the problem's
bounds and reports fit / generate / evaluate CPU seconds (``time.process_time``).

Usage (a seconds-long check)::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/turbo1.py --smoke
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.generation import MaxPosteriorSampling
from botorch.models import SingleTaskGP
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch.quasirandom import SobolEngine

logger = logging.getLogger(__name__)

#: Objective: ``n x d`` points in the problem's bounds -> ``n`` observed values.
Objective = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class TrustRegion:
    """TuRBO-1's trust-region state (side length and counters) for ``dim`` and
    batch size ``batch_size``; ``best`` is the best (lowest) value since the
    restart."""

    dim: int
    batch_size: int
    length_init: float = 0.8
    length_min: float = 0.5**7
    length_max: float = 1.6
    success_tolerance: int = 3
    improvement: float = 1e-3
    length: float = field(init=False)
    failure_tolerance: int = field(init=False)
    successes: int = 0
    failures: int = 0
    best: float = math.inf

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise ValueError(f"dim must be >= 1, got {self.dim}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not 0 < self.length_min <= self.length_init <= self.length_max:
            raise ValueError(
                "need 0 < length_min <= length_init <= length_max, got "
                f"{self.length_min}, {self.length_init}, {self.length_max}"
            )
        self.length = self.length_init
        self.failure_tolerance = math.ceil(
            max(4.0 / self.batch_size, self.dim / self.batch_size)
        )

    @property
    def needs_restart(self) -> bool:
        """``True`` once the side length has fallen below ``length_min``."""
        return self.length < self.length_min

    def update(self, values: torch.Tensor) -> None:
        """Count one batch of observed ``values`` (lower is better) as a success
        or a failure and expand or shrink the region."""
        batch_best = float(values.min())
        if batch_best < self.best - self.improvement * abs(self.best):
            self.successes += 1
            self.failures = 0
        else:
            self.successes = 0
            self.failures += 1
        if self.successes == self.success_tolerance:
            self.length = min(2.0 * self.length, self.length_max)
            self.successes = 0
        elif self.failures == self.failure_tolerance:
            self.length /= 2.0
            self.failures = 0
        self.best = min(self.best, batch_best)


def fit_model(X: torch.Tensor, Y: torch.Tensor) -> SingleTaskGP:
    """``SingleTaskGP`` (BoTorch defaults) on ``X`` (``n x d``, unit cube) and the
    negated values ``-Y`` (``n``), fitted by ``fit_gpytorch_mll``."""
    model = SingleTaskGP(X, -Y.unsqueeze(-1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def region_bounds(
    center: torch.Tensor, lengthscales: torch.Tensor, length: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower and upper corners (``d`` each) of the region of side ``length``
    around ``center`` (``d``), widths scaled by ``lengthscales`` (``d``) to
    geometric mean 1, clipped to the unit cube."""
    weights = lengthscales / lengthscales.log().mean().exp()
    half = weights * length / 2.0
    return (center - half).clamp(0.0, 1.0), (center + half).clamp(0.0, 1.0)


def candidates(
    center: torch.Tensor,
    lower: torch.Tensor,
    upper: torch.Tensor,
    n: int,
    seed: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """``n x d`` perturbed Sobol candidates in ``[lower, upper]``: each keeps
    ``center`` except in the dimensions picked with probability ``min(1, 20/d)``
    (at least one per candidate)."""
    d = center.shape[-1]
    sobol = SobolEngine(d, scramble=True, seed=seed).draw(n).to(center)
    points = lower + (upper - lower) * sobol
    prob = min(1.0, 20.0 / d)
    mask = torch.rand(n, d, generator=generator, dtype=center.dtype) <= prob
    empty = ~mask.any(dim=-1)
    if empty.any():
        picks = torch.randint(d, (int(empty.sum()),), generator=generator)
        mask[empty.nonzero().squeeze(-1), picks] = True
    return torch.where(mask, points, center.expand(n, d))


def thompson_batch(
    model: SingleTaskGP,
    center: torch.Tensor,
    state: TrustRegion,
    q: int,
    seed: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """``q x d`` points in the region by Thompson sampling over candidates."""
    d = center.shape[-1]
    lengthscales = model.covar_module.lengthscale.detach().reshape(-1)[:d]
    lower, upper = region_bounds(center, lengthscales.to(center), state.length)
    n_cand = min(5000, max(2000, 200 * d))
    X_cand = candidates(center, lower, upper, n_cand, seed, generator)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MaxPosteriorSampling(model=model, replacement=False)(
            X_cand, num_samples=q
        )


@dataclass
class Turbo1Result:
    """Every evaluated point (``n x d``, problem bounds) and observation (``n``)
    in order; CPU seconds spent in fit / generate / evaluate; restarts; the
    cumulative CPU seconds after each batch (``(evaluations, seconds)``); and
    whether the run stopped at its CPU cap before the budget."""

    X: torch.Tensor
    Y: torch.Tensor
    cpu: dict[str, float]
    restarts: int
    cpu_after_batch: list[tuple[int, float]]
    capped: bool = False


def run_turbo1(
    objective: Objective,
    bounds: torch.Tensor,
    budget: int,
    batch_size: int,
    seed: int = 0,
    n_init: int | None = None,
    cpu_cap_s: float | None = None,
) -> Turbo1Result:
    """Minimise ``objective`` over the box ``bounds`` (``2 x d``) with TuRBO-1.

    Args:
        objective: Maps ``n x d`` points to ``n`` noisy values (minimised).
        bounds: ``2 x d`` lower / upper bounds; its dtype and device are used.
        budget: Number of evaluations.
        batch_size: Points per batch ``q`` (the last batch may be shorter).
        seed: Seeds the Sobol designs, candidates and Thompson samples.
        n_init: Sobol points per (re)start; default ``max(2 d, q)``.
        cpu_cap_s: Stop before the next batch once the run has used this many
            CPU seconds (``None``: run to the budget); the result says so.

    Returns:
        A :class:`Turbo1Result`.
    """
    if bounds.ndim != 2 or bounds.shape[0] != 2:
        raise ValueError(f"bounds must be 2 x d, got shape {tuple(bounds.shape)}")
    if budget < 1 or batch_size < 1:
        raise ValueError(f"budget and batch_size must be >= 1: {budget}, {batch_size}")
    d = bounds.shape[-1]
    n_init = n_init or max(2 * d, batch_size)
    tkw = {"dtype": bounds.dtype, "device": bounds.device}
    lo, span = bounds[0], bounds[1] - bounds[0]
    cpu = {"fit": 0.0, "generate": 0.0, "evaluate": 0.0}
    cpu0 = time.process_time()
    all_X, all_Y, after = [], [], []
    generator = torch.Generator().manual_seed(seed)
    restarts, calls, capped = -1, 0, False
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        n = 0
        state, X, Y = None, None, None
        while n < budget:
            if cpu_cap_s is not None and time.process_time() - cpu0 > cpu_cap_s:
                capped = True
                break
            calls += 1
            call_seed = seed * 100_003 + calls
            t0 = time.process_time()
            if state is None or state.needs_restart:
                restarts += 1
                state = TrustRegion(d, batch_size)
                k = min(n_init, budget - n)
                X_next = SobolEngine(d, scramble=True, seed=call_seed).draw(k).to(**tkw)
                X, Y = X_next[:0], torch.empty(0, **tkw)
                t1 = t0
            else:
                model = fit_model(X, Y)
                t1 = time.process_time()
                q = min(batch_size, budget - n)
                center = X[Y.argmin()]
                X_next = thompson_batch(model, center, state, q, call_seed, generator)
            t2 = time.process_time()
            Y_next = objective(lo + span * X_next).reshape(-1).to(**tkw)
            t3 = time.process_time()
            cpu["fit"] += t1 - t0
            cpu["generate"] += t2 - t1
            cpu["evaluate"] += t3 - t2
            if len(Y):  # not a fresh design
                state.update(Y_next)
            else:
                state.best = float(Y_next.min())
            X, Y = torch.cat([X, X_next]), torch.cat([Y, Y_next])
            all_X.append(lo + span * X_next)
            all_Y.append(Y_next)
            n += len(Y_next)
            after.append((n, time.process_time() - cpu0))
            logger.debug("n=%d L=%.4g best=%.5g", n, state.length, state.best)
    return Turbo1Result(
        X=torch.cat(all_X),
        Y=torch.cat(all_Y),
        cpu=cpu,
        restarts=restarts,
        cpu_after_batch=after,
        capped=capped,
    )


def main(argv: list[str] | None = None) -> int:
    """``--smoke``: TuRBO-1 on noiseless Ackley5 (seconds); prints the best."""
    from botorch.test_functions import Ackley

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="a seconds-long run")
    p.add_argument("--dim", type=int, default=5)
    p.add_argument("--budget", type=int, default=200)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.smoke:
        args.dim, args.budget, args.batch = 3, 60, 10
    torch.set_num_threads(1)
    f = Ackley(dim=args.dim, bounds=[(-5.0, 10.0)] * args.dim).to(torch.float64)
    res = run_turbo1(f, f.bounds, args.budget, args.batch, seed=args.seed)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logger.info(
        "TuRBO-1 on Ackley%d: %d evaluations, best %.4f (optimum 0), %d restarts, "
        "CPU s %s",
        args.dim,
        len(res.Y),
        float(res.Y.min()),
        res.restarts,
        {k: round(v, 2) for k, v in res.cpu.items()},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
