"""The engine's choices stay those of the reference implementation.

The arms chosen by ``run_bbkb`` on a small problem for fixed seeds, recorded with
the code before the per-step and per-batch speed-ups (``reference_choices.json``):
faster code must make the same choices, step for step.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import torch

from botorch_sketch.bbkb import fixed_rbf_kernel
from botorch_sketch.loops import noisy_oracle, run_bbkb

DT = torch.float64
REFERENCE = pathlib.Path(__file__).with_name("reference_choices.json")

#: name -> (lengthscale, lam, horizon, options of run_bbkb)
CASES = {
    "growing": (0.3, 1e-2, 300, {"rule": "global"}),
    "global_local": (0.6, 1e-1, 300, {"rule": "global_local"}),
    "reference_beta": (1.0, 1e-2, 300, {"rule": "global", "beta": "reference_code"}),
    "rebuild": (0.6, 1e-2, 200, {"rule": "global", "resparsify": "rebuild"}),
}


def problem() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    X = torch.rand(600, 3, generator=g, dtype=DT)
    f = torch.sin(4 * X).sum(-1)
    return X, (f - f.min()) / (f.max() - f.min())


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_choices_as_the_reference(name):
    ls, lam, T, options = CASES[name]
    X, f = problem()
    oracle = noisy_oracle(f, 0.01, torch.Generator().manual_seed(3))
    res = run_bbkb(
        X, oracle, T, fixed_rbf_kernel(ls), lam, C=2.0, q_bar=2.0, seed=0,
        progress=False, init=torch.tensor([0, 1]), **options,
    )  # fmt: skip
    expected = json.loads(REFERENCE.read_text())[name]
    assert res.arms.tolist() == expected
