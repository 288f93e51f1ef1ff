r"""Model state that is not a parameter or buffer, carried by ``state_dict``.

A BoTorch model's ``state_dict`` holds its hyperparameters; our models also hold
state that their predictions depend on and that cannot be recomputed from the
data and the hyperparameters alone: ``NystromGP``'s dictionary (redrawn at
random during the fit) and ``GOUCBModel``'s confidence set. They travel through
``torch.nn.Module``'s extra-state hook (``get_extra_state`` / ``set_extra_state``,
key ``"_extra_state"``), so that ``load_state_dict`` restores predictions exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["EXTRA_STATE_KEY", "with_extra_state"]

#: The key ``torch.nn.Module`` stores a module's own extra state under.
EXTRA_STATE_KEY = "_extra_state"


def with_extra_state(
    module: torch.nn.Module, state_dict: Mapping[str, Any]
) -> Mapping[str, Any]:
    r"""``state_dict``, completed with ``module``'s current extra state if it lacks one.

    A state saved without extra state (by an older version, or built by hand from
    hyperparameters) then loads with ``strict=True`` and leaves that part of the
    model as it is.
    """
    if EXTRA_STATE_KEY in state_dict:
        return state_dict
    return {**state_dict, EXTRA_STATE_KEY: module.get_extra_state()}
