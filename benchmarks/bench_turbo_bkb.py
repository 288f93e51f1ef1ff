"""turbo-bkb against bbkb (and TuRBO-1 when available) at 1,000 evaluations.

Hartmann6 (noise sd 0.05), Ackley10 on ``[-5, 10]^10`` and Michalewicz10 on
``[0, pi]^10`` (``--problems michalewicz10``; noise sd 0.05),
batches of 50 through ``get_next_batch``; reports the noiseless value at the best
observed point after 250 / 500 / 1,000 evaluations and the CPU seconds
(``time.process_time``, one thread).

``--turbo1 PATH`` adds the TuRBO-1 baseline of ``PATH`` (a ``turbo1.py`` with
``run_turbo1``), run on the same problems and noise. ``--set KEY=VALUE ...`` passes
options to turbo-bkb, or to ``NystromGP`` in ``--ablation`` (JSON values:
``thompson='"embedding"'``, ``exact_max_n=1000``). ``--init N``: Ax's Sobol
points before turbo-bkb (default ``2 d``). turbo-bkb fits each region model
from scratch (``region_fit="cold"``, its default since 2026-11-27; the
``--cold-fit`` switch of the earlier rows); ``--set region_fit='"warm"'`` gives
the warm-started fits of the earlier ``defaults`` rows.

``--ablation MODEL SAMPLER CENTRE SUCCESS`` runs the loop of ``turbo1.py`` with
one piece swapped at a time instead of the Ax strategies (the diagnosis in
``results/turbo_bkb.md``): ``MODEL`` ``stgp`` (``SingleTaskGP``) or ``nystrom``
(``NystromGP``), ``SAMPLER`` ``joint`` (``MaxPosteriorSampling``) or
``embedding`` (``EmbeddingThompsonSampling``), ``CENTRE`` and ``SUCCESS`` ``obs``
(best noisy observation, as TuRBO-1) or ``mean`` (posterior means of a model
refitted on the batch, as turbo-bkb). ``stgp joint obs obs`` is ``turbo1.py``.

Usage::

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python benchmarks/bench_turbo_bkb.py \
        --methods turbo-bkb --problems hartmann6 --seeds 0
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
import time
import warnings

import torch
from ax import Client, RangeParameterConfig
from botorch.fit import fit_gpytorch_mll
from botorch.generation import MaxPosteriorSampling
from botorch.models import SingleTaskGP
from botorch.test_functions import Ackley, Hartmann, Michalewicz
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch.quasirandom import SobolEngine

from botorch_sketch.ax import get_generation_strategy, get_next_batch
from botorch_sketch.generation import EmbeddingThompsonSampling
from botorch_sketch.models import NystromGP

NOISE = 0.05
CHECKPOINTS = (250, 500, 1000)


def problem(name: str):
    if name == "hartmann6":
        return Hartmann(dim=6).to(torch.float64)
    if name == "michalewicz10":
        return Michalewicz(dim=10).to(torch.float64)
    return Ackley(dim=10, bounds=[(-5.0, 10.0)] * 10).to(torch.float64)


def noisy(f, seed: int):
    g = torch.Generator().manual_seed(10_000 + seed)

    def evaluate(X: torch.Tensor) -> torch.Tensor:
        return f(X) + NOISE * torch.randn(X.shape[0], generator=g, dtype=X.dtype)

    return evaluate


def trace(f, X: torch.Tensor, Y: torch.Tensor) -> dict[int, float]:
    """Noiseless f at the best observed point among the first n, n in CHECKPOINTS."""
    out = {}
    for n in CHECKPOINTS:
        i = int(Y[:n].argmin())
        out[n] = float(f(X[i : i + 1]))
    return out


def run_ax(
    method: str,
    f,
    seed: int,
    budget: int,
    batch: int,
    extra: dict | None = None,
    init: int | None = None,
) -> dict:
    d = f.dim
    names = [f"x{i}" for i in range(d)]
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=n, parameter_type="float", bounds=tuple(b))
            for n, b in zip(names, f.bounds.T.tolist(), strict=True)
        ]
    )
    client.configure_optimization(objective="-f")
    options = {"seed": seed, "initialization_budget": init or 2 * d}
    if method == "bbkb":
        options["min_batch_size"] = batch
    if method == "turbo-bkb":
        options.update(extra or {})
    client.set_generation_strategy(get_generation_strategy(method, **options))
    evaluate = noisy(f, seed)
    X, Y = [], []
    cpu0 = time.process_time()
    while len(Y) < budget:
        trials = get_next_batch(client, max_batch_size=min(batch, budget - len(Y)))
        for index, p in trials.items():
            x = torch.tensor([[p[n] for n in names]], dtype=torch.float64)
            y = float(evaluate(x))
            client.complete_trial(index, raw_data={"f": y})
            X.append(x)
            Y.append(y)
    cpu = time.process_time() - cpu0
    return {"best": trace(f, torch.cat(X), torch.tensor(Y)), "cpu": cpu}


def run_turbo1(path: str, f, seed: int, budget: int, batch: int) -> dict:
    spec = importlib.util.spec_from_file_location("turbo1_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    cpu0 = time.process_time()
    res = module.run_turbo1(noisy(f, seed), f.bounds, budget, batch, seed=seed)
    cpu = time.process_time() - cpu0
    return {"best": trace(f, res.X, res.Y), "cpu": cpu}


def _fit(kind: str, X: torch.Tensor, Y: torch.Tensor, options: dict | None = None):
    """``SingleTaskGP`` or ``NystromGP`` (with ``options``) on ``X`` and the values
    ``Y`` (``n``, maximised), fitted by ``fit_gpytorch_mll``; ``options["y_jitter"]``
    adds seeded Gaussian noise of that sd to ``Y`` first (a perturbation test)."""
    options = dict(options or {})
    jitter = options.pop("y_jitter", 0.0)
    if jitter:  # a perturbation far below the noise: does the run diverge?
        g = torch.Generator().manual_seed(len(Y))
        Y = Y + jitter * torch.randn(Y.shape, generator=g, dtype=Y.dtype)
    cls = SingleTaskGP if kind == "stgp" else NystromGP
    kwargs = {} if kind == "stgp" else {"seed": 0, **options}
    model = cls(X, Y.unsqueeze(-1), **kwargs)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def run_ablation(
    parts: list[str],
    f,
    seed: int,
    budget: int,
    batch: int,
    options: dict | None = None,
) -> dict:
    """``turbo1.py``'s loop (minimisation, same seeds and noise) with the model,
    the sampler, the centre and the success test chosen by ``parts``."""
    sys.path.insert(0, "benchmarks")
    from turbo1 import TrustRegion, candidates, region_bounds

    kind, sampler, centre, success = parts
    d, lo = f.dim, f.bounds[0]
    span = f.bounds[1] - lo
    evaluate, generator = noisy(f, seed), torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    state, X, Y, all_X, all_Y, calls = None, None, None, [], [], 0
    cpu0 = time.process_time()
    while sum(len(y) for y in all_Y) < budget:
        calls += 1
        call_seed = seed * 100_003 + calls
        if state is None or state.needs_restart:
            state = TrustRegion(d, batch)
            X_next = SobolEngine(d, scramble=True, seed=call_seed).draw(
                max(2 * d, batch)
            )
            X, Y = X_next[:0].double(), torch.empty(0, dtype=torch.float64)
        else:
            model = _fit(kind, X, -Y, options)
            with torch.no_grad():
                mean = model.posterior(X).mean.reshape(-1)
            c = X[Y.argmin()] if centre == "obs" else X[mean.argmax()]
            kernel = getattr(model.covar_module, "base_kernel", model.covar_module)
            ls = kernel.lengthscale.detach().reshape(-1)
            lower, upper = region_bounds(c, ls, state.length)
            n_cand = min(5000, max(2000, 200 * d))
            X_cand = candidates(c, lower, upper, n_cand, call_seed, generator)
            with torch.no_grad():
                if sampler == "joint":
                    ts = MaxPosteriorSampling(model=model, replacement=False)
                else:
                    ts = EmbeddingThompsonSampling(model, False, seed=call_seed)
                X_next = ts(X_cand, num_samples=batch)
        Y_next = evaluate(lo + span * X_next.double())
        if len(Y) and success == "obs":
            state.update(Y_next)
        elif len(Y):  # posterior means of one model on old and new points
            XX, YY = torch.cat([X, X_next]), torch.cat([Y, Y_next])
            refit = _fit(kind, XX, -YY, options)
            with torch.no_grad():
                mu = -refit.posterior(XX).mean.reshape(-1)
            state.best = float(mu[: len(Y)].min())
            state.update(mu[len(Y) :])
        else:
            state.best = float(Y_next.min())
        X, Y = torch.cat([X, X_next.double()]), torch.cat([Y, Y_next])
        all_X.append(lo + span * X_next.double())
        all_Y.append(Y_next)
    cpu = time.process_time() - cpu0
    return {"best": trace(f, torch.cat(all_X), torch.cat(all_Y)), "cpu": cpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", nargs="+", default=["turbo-bkb", "bbkb"])
    p.add_argument("--problems", nargs="+", default=["hartmann6", "ackley10"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budget", type=int, default=1000)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--turbo1", default=None)
    p.add_argument(
        "--set", nargs="*", default=[], help="turbo-bkb options, KEY=JSON_VALUE"
    )
    p.add_argument("--ablation", nargs=4, default=None)
    p.add_argument(
        "--init", type=int, default=None, help="Ax's Sobol points (default 2 d)"
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("ax").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    for name in args.problems:
        f = problem(name)
        methods = ["ablation"] if args.ablation else args.methods
        for method in methods:
            for seed in args.seeds:
                label = method
                extra = dict(kv.split("=", 1) for kv in args.set)
                extra = {k: json.loads(v) for k, v in extra.items()}
                if method == "ablation":
                    out = run_ablation(
                        args.ablation, f, seed, args.budget, args.batch, extra
                    )
                    label = "ablation:" + "/".join(args.ablation)
                    if extra:
                        label += ":" + ",".join(args.set)
                elif method == "turbo1":
                    out = run_turbo1(args.turbo1, f, seed, args.budget, args.batch)
                else:
                    out = run_ax(
                        method, f, seed, args.budget, args.batch, extra, args.init
                    )
                    if extra:
                        label += ":" + ",".join(args.set)
                    if args.init:
                        label += f":init={args.init}"
                out["load"] = open("/proc/loadavg").read().split()[0]
                row = {"problem": name, "method": label, "seed": seed, **out}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
