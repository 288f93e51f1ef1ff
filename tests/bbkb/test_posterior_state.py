"""PosteriorState (dictionary given as points) against the engine's RebuiltState."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.bbkb import GlobalLocalRule, select_batch
from botorch_sketch.bbkb.posterior_state import PosteriorState

from .conftest import make_state


def as_posterior_state(state, chunk_size=32):
    """The same batch-start state, with the dictionary passed as points."""
    return PosteriorState(
        arms=state.arms,
        kernel=state.kernel,
        lam=state.lam,
        X_S=state.arms[state.S_idx],
        W=state.W,
        L=state.L,
        mu=state.mu,
        s2_0=state.s2_0,
        kdiag=state.kdiag,
        chunk_size=chunk_size,
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_same_quantities_and_batches_as_the_rebuilt_state(seed):
    ref, _, _ = make_state(seed=seed, m=12, lam=1.0)
    st = as_posterior_state(ref)
    assert (st.rank, st.dict_size) == (ref.rank, ref.dict_size)
    idx = torch.tensor([0, 7, 7, 99])
    torch.testing.assert_close(st.embed(idx), ref.embed(idx))
    torch.testing.assert_close(st.resid, ref.resid)
    torch.testing.assert_close(st.Vinv, ref.Vinv)
    torch.testing.assert_close(st.covariance_with(5), ref.covariance_with(5))
    torch.testing.assert_close(st.variances(idx), ref.variances(idx))
    for repeats in (True, False):
        batches = [
            select_batch(
                s,
                1.0,
                GlobalLocalRule(3.0),
                max_batch_size=40,
                allow_repeats=repeats,
                pool_size=8,
            )
            for s in (ref, st)
        ]
        assert batches[0] == batches[1]
        assert len(batches[0]) > 2  # the local rule is exercised


def test_validation():
    ref, _, _ = make_state(seed=2)
    st = as_posterior_state(ref)
    kw = {f: getattr(st, f) for f in ("arms", "kernel", "lam", "X_S", "W", "L")}
    kw.update(mu=st.mu, s2_0=st.s2_0, kdiag=st.kdiag)
    with pytest.raises(ValueError, match="mu must have shape"):
        PosteriorState(**{**kw, "mu": st.mu[:-1]})
    with pytest.raises(ValueError, match="W must be m x r"):
        PosteriorState(**{**kw, "W": st.W[:-1]})
    with pytest.raises(ValueError, match="lam must be positive"):
        PosteriorState(**{**kw, "lam": 0.0})
    with pytest.raises(ValueError, match="non-empty"):
        PosteriorState(**{**kw, "arms": st.arms[:0]})
