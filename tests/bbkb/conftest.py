"""Shared fixtures for the BBKB tests: small random instances, single-threaded."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.bbkb import fixed_rbf_kernel, rebuild
from tests.threads import one_torch_thread

DT = torch.float64


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    # Tiny linear algebra on a shared 2-core machine: OpenMP spinning with 2
    # threads makes these tests ~10x slower.
    with one_torch_thread():
        yield


def make_state(
    seed: int = 0,
    A: int = 120,
    d: int = 2,
    n_pulled: int = 25,
    m: int = 10,
    lam: float = 0.05,
    ls: float = 0.3,
    all_pulled_in_dict: bool = False,
):
    """Random arms, random pulls (with repeats), a dictionary among pulled arms."""
    g = torch.Generator().manual_seed(seed)
    arms = torch.rand(A, d, generator=g, dtype=DT)
    kernel = fixed_rbf_kernel(ls)
    pulls = torch.randint(A, (n_pulled,), generator=g)
    counts = torch.zeros(A, dtype=DT).index_add_(
        0, pulls, torch.ones(n_pulled, dtype=DT)
    )
    f = torch.sin(4 * arms).sum(-1)
    y = f[pulls] + 0.1 * torch.randn(n_pulled, generator=g, dtype=DT)
    sums = torch.zeros(A, dtype=DT).index_add_(0, pulls, y)
    pulled = torch.unique(pulls)
    if all_pulled_in_dict:
        S = pulled
    else:
        S = pulled[torch.randperm(pulled.numel(), generator=g)[:m]]
    state = rebuild(arms, kernel, S, counts, sums, lam)
    return state, pulls, y
