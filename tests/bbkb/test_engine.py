"""BBKBEngine: an interrupted resampling leaves the engine as it was."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.bbkb import BBKBEngine, fixed_rbf_kernel
from botorch_sketch.bbkb import engine as engine_module
from botorch_sketch.incremental_nystrom import IncrementalNystrom

DT = torch.float64


def make_engine(seed=0, A=300, **kw):
    g = torch.Generator().manual_seed(1)
    X = torch.rand(A, 2, generator=g, dtype=DT)
    f = torch.sin(5 * X).sum(-1)
    eng = BBKBEngine(
        X, fixed_rbf_kernel(0.2), 1e-2, xi=0.01,
        generator=torch.Generator().manual_seed(seed), **kw,
    )  # fmt: skip
    init = torch.tensor([0, 1])
    eng.start(init, f[init])
    return eng, f


def drive(eng, f, batches, fault_from=None, install=None, cap=3):
    """Batches of at most ``cap`` arms; from batch ``fault_from`` on, try with the fault
    installed until it fires once."""
    out, fired = [], False
    for b in range(batches):
        batch = None
        if fault_from is not None and b >= fault_from and not fired:
            undo = install()
            try:
                batch = eng.next_batch(cap)
            except KeyboardInterrupt:
                fired = True
            undo()
        if batch is None:
            batch = eng.next_batch(cap)
        out.append(batch)
        idx = torch.tensor(batch)
        eng.observe(idx, f[idx])
    assert fault_from is None or fired
    return out


def fault_in(monkeypatch, owner, name):
    """Make ``owner.name`` raise KeyboardInterrupt once, after running."""
    original = getattr(owner, name)

    def install():
        def broken(*args, **kwargs):
            original(*args, **kwargs)
            raise KeyboardInterrupt

        monkeypatch.setattr(owner, name, broken)
        return lambda: monkeypatch.setattr(owner, name, original)

    return install


@pytest.mark.parametrize("where", ["incremental_apply", "after_draw", "after_update"])
def test_interrupted_resampling_restores_the_engine(monkeypatch, where):
    ref_engine, f = make_engine()
    cap = 3
    ref = drive(ref_engine, f, 30, cap=cap)
    eng, _ = make_engine()
    if where == "incremental_apply":  # mid-way through the in-place update
        install = fault_in(monkeypatch, IncrementalNystrom, "apply")
    elif where == "after_draw":  # the dictionary drawn, nothing rebuilt yet
        install = fault_in(monkeypatch, engine_module.linalg, "sample_dictionary")
    else:
        # the state moved in place, the engine not yet
        install = fault_in(monkeypatch, engine_module.IncrementalState, "resparsify")
    got = drive(eng, f, 30, fault_from=6, install=install, cap=cap)
    assert got == ref
    assert torch.equal(eng.counts, ref_engine.counts)
    assert torch.equal(eng.state.S_idx, ref_engine.state.S_idx)


def test_rejected_rewards_leave_the_engine_unchanged():
    eng, f = make_engine()
    batch = torch.tensor(eng.next_batch(10))
    counts = eng.counts.clone()
    y = f[batch].clone()
    y[-1] = float("inf")
    with pytest.raises(ValueError, match=f"arm {int(batch[-1])}"):
        eng.observe(batch, y)
    assert torch.equal(eng.counts, counts)
    with pytest.raises(ValueError, match="init_dictionary"):
        BBKBEngine(eng.arms, fixed_rbf_kernel(0.2), 1e-2).start(batch, f[batch], "nope")
