"""Fixtures of the optimiser tests."""

from __future__ import annotations

import pytest

from tests.threads import one_torch_thread


@pytest.fixture(autouse=True)
def _single_thread():
    # Small products on a shared 2-core machine: one torch thread is faster and
    # keeps the L-BFGS-B paths (and so the chosen points) the same run to run.
    with one_torch_thread():
        yield
