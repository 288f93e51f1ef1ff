"""BBKBConfig: one validated set of engine options shared by the engine and loop."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from botorch_sketch.bbkb import BBKBConfig, BBKBEngine, fixed_rbf_kernel
from botorch_sketch.loops import run_bbkb


def test_run_bbkb_keywords_default_to_the_config():
    params = inspect.signature(run_bbkb).parameters
    for f in dataclasses.fields(BBKBConfig):
        assert params[f.name].default == f.default, f.name


@pytest.mark.parametrize(
    "bad",
    [
        {"C": 0.5}, {"C": True}, {"q_bar": 0}, {"rule": "nope"}, {"beta": "x"},
        {"beta": -1.0}, {"xi": 0.0}, {"delta": 1.0}, {"F": -1}, {"learn": 3},
        {"repeats": "x"}, {"resampling": "fixed"}, {"resparsify": "x"},
        {"embedding_bytes": 0},
        {"chunk_size": 1.5}, {"kernel_cache_bytes": -1}, {"pool_size": 0},
        {"lazy": 1}, {"kernel_cache": "yes"}, {"dtype": torch.int64},
    ],
)  # fmt: skip
def test_bad_options_are_rejected_naming_the_option(bad):
    (name,) = bad
    with pytest.raises((ValueError, TypeError), match=name):
        BBKBConfig(**bad)


def test_engine_and_loop_share_the_config():
    X = torch.rand(50, 2, generator=torch.Generator().manual_seed(0))
    cfg = BBKBConfig(C=3.0, q_bar=4.0)
    eng = BBKBEngine(X, fixed_rbf_kernel(0.3), 0.1, cfg, C=1.5)
    assert eng.config == dataclasses.replace(cfg, C=1.5) and eng.q_bar == 4.0
    with pytest.raises(TypeError, match="unknown BBKB options"):
        BBKBEngine(X, fixed_rbf_kernel(0.3), 0.1, colour=1)
    assert BBKBConfig().confidence() == 0.01
    assert BBKBConfig().confidence(99) == pytest.approx(0.01)
    assert BBKBConfig(delta=0.2).confidence(99) == 0.2
    assert BBKBConfig(rule="bkb", C=4.0).threshold == 1.0
    f = X.sum(-1)

    def oracle(idx):
        return f[idx]

    a = run_bbkb(X, oracle, 40, fixed_rbf_kernel(0.3), 0.1, seed=0, config=cfg,
                 progress=False)  # fmt: skip
    b = run_bbkb(X, oracle, 40, fixed_rbf_kernel(0.3), 0.1, 3.0, 4.0, seed=0,
                 progress=False)  # fmt: skip
    assert torch.equal(a.arms, b.arms)
    with pytest.raises(ValueError, match=r"not both: \['C'\]"):
        run_bbkb(X, oracle, 40, fixed_rbf_kernel(0.3), 0.1, C=5.0, config=cfg)
