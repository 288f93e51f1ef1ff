"""Fixtures of the optimiser tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_thread():
    # Small products on a shared 2-core machine: one torch thread is faster and
    # keeps the L-BFGS-B paths (and so the chosen points) the same run to run.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
