r"""Frozen batch-start quantities of BBKB over a finite arm set, by state kind.

- :mod:`~botorch_sketch.bbkb.batch_state`: the interface
  (:class:`~botorch_sketch.bbkb.batch_state.BatchState`: ``mu`` by Eq. 1,
  ``s2_0`` by Eqs. 2-3 in RLS units, the embeddings and ``V_fb``) and the
  factored base class;
- :mod:`~botorch_sketch.bbkb.rebuilt_state`: the state recomputed from the
  kernel at every resparsification (:func:`rebuild`, bounded memory);
- :mod:`~botorch_sketch.bbkb.incremental_state`: the state updated in place by
  the changes only (:class:`IncrementalState`).

This module gathers their public names.
"""

from __future__ import annotations

from botorch_sketch.bbkb.batch_state import (
    DEFAULT_CHUNK_SIZE,
    BatchState,
    FactoredState,
)
from botorch_sketch.bbkb.incremental_state import IncrementalState
from botorch_sketch.bbkb.rebuilt_state import (
    KernelColumnCache,
    RebuiltState,
    embed_arms,
    rebuild,
)

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "BatchState",
    "FactoredState",
    "IncrementalState",
    "KernelColumnCache",
    "RebuiltState",
    "embed_arms",
    "rebuild",
]
