"""Every public model and batch selector on ``--device``, checked against the CPU.

For each check the same inputs are built on the CPU and on the device; the
script records whether the run finished, whether its outputs live on the
device, the largest difference to the CPU result, and wall seconds on each.
It is the GPU check that the unit tests cannot run (they never require a GPU):

    python benchmarks/gpu_smoke.py --device cuda --out benchmarks/results/gpu_smoke_cuda

Output: ``<out>.jsonl`` (one JSON object per check, with the machine line).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from botorch.acquisition import qUpperConfidenceBound
from botorch.fit import fit_gpytorch_mll
from botorch.optim import optimize_acqf
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch import (
    EmbeddingThompsonSampling,
    GOUCBModel,
    GradientSubsetGP,
    NystromGP,
)
from botorch_sketch.optim import optimize_acqf_adaptive_batch
from botorch_sketch.trust_region import (
    TrustRegionState,
    fit_region_model,
    generate_batch,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import RESULTS, machine_details  # noqa: E402

logger = logging.getLogger("gpu_smoke")
DT = torch.float64


def data(n: int, d: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded inputs on ``[0, 1]^d`` and a noisy smooth target, made on the CPU."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, d, generator=g, dtype=DT)
    Y = torch.sin(4 * X).sum(-1, keepdim=True) + 0.05 * torch.randn(
        n, 1, generator=g, dtype=DT
    )
    return X.to(device), Y.to(device)


def fitted_nystrom(device: torch.device) -> NystromGP:
    """A fresh copy of the one fitted model per device (one fit per device)."""
    return copy.deepcopy(_fitted_nystrom(str(device)))


@functools.cache
def _fitted_nystrom(name: str, n: int = 2000) -> NystromGP:
    device = torch.device(name)
    X, Y = data(n, 4, device)
    # The device-derived defaults differ by device (by design); pinned here so
    # that both devices make the same choices and the outputs can be compared.
    model = NystromGP(X, Y, seed=0, max_dictionary_size=1000, fit_subset_size=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model.eval()


def nystrom_posterior(device: torch.device) -> list[torch.Tensor]:
    model = fitted_nystrom(device)
    Xt = data(500, 4, torch.device("cpu"))[0].flip(0).to(device)
    with torch.no_grad():
        post = model.posterior(Xt)
    return [post.mean, post.variance, model.dictionary_indices]


def nystrom_moved(device: torch.device) -> list[torch.Tensor]:
    """A model fitted on the CPU, then ``.to(device)``: same posterior."""
    model = fitted_nystrom(torch.device("cpu")).to(device)
    assert model.inducing_points.device.type == device.type
    Xt = data(500, 4, torch.device("cpu"))[0].flip(0).to(device)
    with torch.no_grad():
        post = model.posterior(Xt)
    return [post.mean, post.variance]


def nystrom_qucb(device: torch.device) -> list[torch.Tensor]:
    model = fitted_nystrom(device)
    bounds = torch.stack([torch.zeros(4), torch.ones(4)]).to(device, DT)
    torch.manual_seed(0)
    cand, val = optimize_acqf(
        qUpperConfidenceBound(model, beta=4.0),
        bounds,
        q=4,
        num_restarts=4,
        raw_samples=128,
    )
    return [cand, val]


def adaptive_batch_box(
    device: torch.device, max_batch_size: int = 16, min_batch_size: int = 1
) -> list[torch.Tensor]:
    model = fitted_nystrom(device)
    bounds = torch.stack([torch.zeros(4), torch.ones(4)]).to(device, DT)
    batch, ucb = optimize_acqf_adaptive_batch(
        model,
        bounds=bounds,
        rule="global",
        C=2.0,
        alpha=1.0,
        max_batch_size=max_batch_size,
        min_batch_size=min_batch_size,
        num_restarts=4,
        raw_samples=128,
        seed=0,
    )
    return [batch, ucb]


def adaptive_batch_filled(device: torch.device) -> list[torch.Tensor]:
    """A 50-point batch: the stopping rule, then the Thompson and basin fill."""
    return adaptive_batch_box(device, max_batch_size=50, min_batch_size=50)


def adaptive_batch_choices(device: torch.device) -> list[torch.Tensor]:
    model = fitted_nystrom(device)
    choices = data(20000, 4, torch.device("cpu"))[0].mul(0.999).to(device)
    batch, ucb = optimize_acqf_adaptive_batch(
        model,
        bounds=None,
        choices=choices,
        rule="global",
        C=2.0,
        alpha=1.0,
        max_batch_size=64,
        seed=0,
    )
    return [batch, ucb]


def thompson(device: torch.device) -> list[torch.Tensor]:
    model = fitted_nystrom(device)
    X = data(20000, 4, torch.device("cpu"))[0].mul(0.999).to(device)
    ts = EmbeddingThompsonSampling(model, replacement=False, seed=0)
    with torch.no_grad():
        return [ts(X, num_samples=8)]


def fitted_posterior(model: Any, num_test: int, device: torch.device) -> Any:
    """Fit ``model`` (warnings off), then its posterior at ``num_test`` points."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    Xt = data(num_test, 4, torch.device("cpu"))[0].flip(0).to(device)
    with torch.no_grad():
        return model.eval().posterior(Xt)


def gssbo(device: torch.device) -> list[torch.Tensor]:
    X, Y = data(400, 4, device)
    model = GradientSubsetGP(X, Y, subset_size=60, n_initial=10, seed=0)
    post = fitted_posterior(model, 100, device)
    return [post.mean, post.variance, model.subset_indices]


def goucb(device: torch.device) -> list[torch.Tensor]:
    X, Y = data(60, 4, device)
    model = GOUCBModel(X, Y, n_init=10, seed=0)
    Xt = data(100, 4, torch.device("cpu"))[0].flip(0).to(device)
    with torch.no_grad():
        post = model.posterior(Xt)
    return [post.mean, post.variance]


def nystrom_every_point(device: torch.device) -> list[torch.Tensor]:
    """``dictionary="all"``: the exact posterior (one Cholesky factor)."""
    X, Y = data(1500, 4, device)
    model = NystromGP(X, Y, seed=0, dictionary="all", fit_subset_size=1000)
    post = fitted_posterior(model, 500, device)
    return [post.mean, post.variance]


def nystrom_sample_joint(device: torch.device) -> list[torch.Tensor]:
    """Joint samples of the sketched model at 800 points (CPU-seeded noise)."""
    model = fitted_nystrom(device)
    Xt = data(800, 4, torch.device("cpu"))[0].flip(0).to(device)
    g = torch.Generator().manual_seed(0)
    return [model.sample_joint(Xt, 16, generator=g)]


def region_data(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """400 points of 4 floats and a 3-level one-hot group (columns 4-6)."""
    X, Y = data(400, 4, torch.device("cpu"))
    level = torch.arange(400) % 3
    one_hot = torch.nn.functional.one_hot(level, 3).to(DT)
    return torch.cat([X, one_hot], -1).to(device), (Y + 0.3 * level[:, None]).to(device)


def fitted_region(device: torch.device) -> NystromGP:
    return copy.deepcopy(_fitted_region(str(device)))


@functools.cache
def _fitted_region(name: str) -> NystromGP:
    X, Y = region_data(torch.device(name))
    return fit_region_model(X, Y, seed=0, one_hot=[[4, 5, 6]]).eval()


def region_model(device: torch.device) -> list[torch.Tensor]:
    """The trust region's model (grouped one-hot kernel, every point)."""
    model = fitted_region(device)
    Xt = region_data(torch.device("cpu"))[0].flip(0)[:100].to(device)
    with torch.no_grad():
        post = model.posterior(Xt)
    return [post.mean, post.variance, model.dictionary_indices]


def region_batch(device: torch.device, thompson: str) -> list[torch.Tensor]:
    """Eight points of one trust region by Thompson sampling (``thompson``)."""
    model = fitted_region(device)
    X = region_data(device)[0]
    state = TrustRegionState(dim=7, batch_size=8, length=0.4)
    return [
        generate_batch(
            model, state, X, 8, num_candidates=2000, seed=0, thompson=thompson
        )
    ]


CHECKS: dict[str, Callable[[torch.device], list[torch.Tensor]]] = {
    "nystrom_posterior": nystrom_posterior,
    "nystrom_moved_to_device": nystrom_moved,
    "nystrom_qucb_optimize_acqf": nystrom_qucb,
    "adaptive_batch_box": adaptive_batch_box,
    "adaptive_batch_filled": adaptive_batch_filled,
    "adaptive_batch_choices": adaptive_batch_choices,
    "embedding_thompson": thompson,
    "gssbo_posterior": gssbo,
    "goucb_posterior": goucb,
    "nystrom_every_point": nystrom_every_point,
    "nystrom_sample_joint": nystrom_sample_joint,
    "region_model": region_model,
    "region_batch_joint": functools.partial(region_batch, thompson="joint"),
    "region_batch_pathwise": functools.partial(region_batch, thompson="pathwise"),
    "region_batch_embedding": functools.partial(region_batch, thompson="embedding"),
}


def timed(fn: Callable, device: torch.device) -> tuple[list[torch.Tensor], float]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start


def compare(ref: list[torch.Tensor], out: list[torch.Tensor]) -> dict[str, Any]:
    """Largest absolute difference per output (shapes must agree)."""
    diffs, shapes_equal = [], True
    for a, b in zip(ref, out, strict=True):
        if a.shape != b.shape:
            shapes_equal = False
            diffs.append(None)
            continue
        diffs.append(
            float((a.double() - b.cpu().double()).abs().max()) if a.numel() else 0.0
        )
    return {"max_abs_diff": diffs, "shapes_equal": shapes_equal}


def run_check(name: str, device: torch.device) -> dict[str, Any]:
    row: dict[str, Any] = {"check": name, "device": str(device)}
    try:
        ref, row["cpu_s"] = timed(CHECKS[name], torch.device("cpu"))
        out, row["device_s"] = timed(CHECKS[name], device)
        row["on_device"] = all(t.device.type == device.type for t in out)
        row.update(compare(ref, out))
        row["ok"] = row["on_device"] and row["shapes_equal"]
    except Exception as err:  # recorded: the point is to see every failure
        row.update(ok=False, error=f"{type(err).__name__}: {err}"[:500])
        row["traceback"] = traceback.format_exc()[-1500:]
    return row


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--checks", default=",".join(CHECKS))
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    out = (args.out or RESULTS / f"gpu_smoke_{device.type}").with_suffix(".jsonl")
    machine = machine_details()
    out.write_text("")
    failed = 0
    for name in args.checks.split(","):
        row = run_check(name, device)
        failed += not row["ok"]
        logger.info(json.dumps({k: v for k, v in row.items() if k != "traceback"}))
        with out.open("a") as fh:
            fh.write(json.dumps({**row, "machine": machine}) + "\n")
    logger.info("%d of %d checks failed", failed, len(args.checks.split(",")))
    return int(failed > 0)


if __name__ == "__main__":
    raise SystemExit(main())
