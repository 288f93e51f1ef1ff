"""Probe behind ``NystromGP``'s refinement on every point (issue 25, GPU).

Fits ``NystromGP`` on a subsample of ``S`` points (``refine_iterations=0``), then
``K`` L-BFGS-B steps of the exact likelihood on all ``n`` points from there
(``fit_subset_size=None, fit_max_iterations=K``), and records fit seconds and
test NLL (``bench_gpu.py``'s data and metric), plus the seconds of one
full-data likelihood evaluation and gradient. Rows: ``gpu_cuda.jsonl`` run 9.

    python benchmarks/probe_refine.py --device cuda --subsets 4000,5429 --iters 10,20,40
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch
from botorch.fit import fit_gpytorch_mll
from gpytorch.mlls import ExactMarginalLogLikelihood

from botorch_sketch.models import NystromGP
from botorch_sketch.models.nystrom_fit import exact_loss
from botorch_sketch.models.sketch_state import hyperparameter_state

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import clock, nll  # noqa: E402
from bench_nystrom import load_data  # noqa: E402


def fitted(model: NystromGP) -> NystromGP:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dataset", default="cadata")
    p.add_argument("--n", type=int, default=16000)
    p.add_argument("--subsets", default="4000,5429")
    p.add_argument("--iters", default="10,20,40")
    p.add_argument("--out", type=Path, default=Path("probe_refine.jsonl"))
    a = p.parse_args(argv)
    dev = torch.device(a.device)
    data = {k: v.to(dev) for k, v in load_data(a.dataset, a.n, 0).items()}
    X, Y = data["train_X"], data["train_Y"]
    fitted(NystromGP(X[:300], Y[:300], seed=0))  # kernels and imports warm
    rows = []

    def emit(row: dict) -> None:
        row.update(device=a.device, dataset=a.dataset, n=a.n)
        print(json.dumps(row), flush=True)
        rows.append(row)

    def model(**kw) -> NystromGP:
        return NystromGP(X, Y, seed=0, max_dictionary_size=a.n, **kw)

    full = model(fit_subset_size=None)

    def loss_and_gradient() -> float:
        full.train()
        value = exact_loss(full).sum()
        value.backward()
        return float(value)

    clock(loss_and_gradient, dev)
    emit({"what": "full loss+grad", "s": clock(loss_and_gradient, dev)[1]})
    test = (data["test_X"], data["test_y"], 1000)
    for S in map(int, a.subsets.split(",")):
        sub, t_sub = clock(
            lambda S=S: fitted(model(fit_subset_size=S, refine_iterations=0)), dev
        )
        emit({"what": "subset", "S": S, "fit_s": t_sub, "nll": nll(sub.eval(), *test)})
        for K in map(int, a.iters.split(",")):

            def refine(K: int = K, start: NystromGP = sub) -> NystromGP:
                m = model(fit_subset_size=None, fit_max_iterations=K)
                m.load_state_dict(hyperparameter_state(start), strict=False)
                return fitted(m)

            ref, t_ref = clock(refine, dev)
            emit(
                {"what": "refine", "S": S, "K": K, "fit_s": t_sub + t_ref,
                 "refine_s": t_ref, "nll": nll(ref.eval(), *test)}
            )  # fmt: skip
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
