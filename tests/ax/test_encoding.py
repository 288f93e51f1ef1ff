"""Ax's model space read into the trust region's discrete columns."""

from __future__ import annotations

import pytest
import torch

from botorch_sketch.ax.encoding import discrete_columns

NAMES = ["x", "k", "c_OH_PARAM_0", "c_OH_PARAM_1", "c_OH_PARAM_2"]
BOUNDS = [(-1.0, 1.0), (0, 4), (0.0, 1.0), (0.0, 1.0), (0.0, 1.0)]


def test_digest_gives_unit_grids_and_one_hot_groups():
    dc = discrete_columns(NAMES, BOUNDS, {1: [0, 1, 2, 3, 4]})
    assert list(dc.grids) == [1]
    assert torch.equal(dc.grids[1], torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0]).double())
    assert dc.one_hot == ((2, 3, 4),)
    assert dc.num_columns() == 4
    assert dc.num_parameters(5) == 3


def test_mismatched_digest_is_rejected():
    with pytest.raises(ValueError, match="5 feature names but 4 bounds"):
        discrete_columns(NAMES, BOUNDS[:4], {})
