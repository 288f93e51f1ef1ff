r"""Whether a run has stopped improving, read from its observations alone.

A global batch UCB that has settled in one good basin keeps refining it: the
width of the confidence bound away from the data is small against the gap to
the incumbent once the outcome is standardised over data that crowd that basin
(``benchmarks/results/bbkb_exploration.md`` section 10). The BBKB strategies
spend a share of each Thompson fill in other basins of the posterior mean
(:func:`~botorch_sketch.optim.adaptive_batch.thompson_fill_points`); a larger
share keeps more runs out of a second basin but takes points from the
incumbent's, which problems with many shallow basins (Ackley) need. This module
tells the two situations apart, so that the larger share is spent only where
the run has stalled.

With the observed outcomes ``y_1, ..., y_n`` (model units, larger is better) in
the order they were added to the model, a window of ``w`` evaluations and the
noise standard deviation ``sigma_n``, the run is **stalled** when

.. math::

    \max_{i \le n} y_i - \max_{i \le n - w} y_i \le \sigma_n ,            (1)

i.e. the last ``w`` evaluations did not raise the best observation by more
than one noise standard deviation (the running maximum of noisy values in one
basin creeps up by less than that over a few hundred evaluations). The window
is

.. math::

    w = \max(W_b \, q, \; W_d \, d)                                       (2)

for batches of ``q`` points in ``d`` dimensions: ``W_b = 4`` batches (TuRBO's
failure counter, Eriksson et al. 2019, counts ``ceil(max(4 / q, d / q))``
batches before it shrinks a region; here the run is global, so the window is
several batches), and at least ``W_d = 20`` evaluations per dimension, so that
batches of one point are not called stalled after four evaluations.

The rule reads only the data, so it needs no state between calls and a run
reloaded from JSON decides as the original did.
"""

from __future__ import annotations

import math

from torch import Tensor

__all__ = [
    "DEFAULT_STALL_BASIN_SHARE",
    "STALL_WINDOW_BATCHES",
    "STALL_WINDOW_PER_DIM",
    "is_stalled",
    "stall_window",
]

#: Basin share of the Thompson fill while a run is stalled (Eq. (1)).
DEFAULT_STALL_BASIN_SHARE = 0.5
#: ``W_b`` of Eq. (2): batches without improvement before a run is stalled.
STALL_WINDOW_BATCHES = 4
#: ``W_d`` of Eq. (2): evaluations per input dimension, the window's floor.
STALL_WINDOW_PER_DIM = 20


def stall_window(batch_size: int, dim: int) -> int:
    r"""The window ``w`` of Eq. (2), in evaluations.

    Args:
        batch_size: Points per batch ``q >= 1``.
        dim: Input dimension ``d >= 1``.

    Returns:
        ``max(STALL_WINDOW_BATCHES q, STALL_WINDOW_PER_DIM d)``.
    """
    for name, value in (("batch_size", batch_size), ("dim", dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}.")
    return max(STALL_WINDOW_BATCHES * batch_size, STALL_WINDOW_PER_DIM * dim)


def is_stalled(scores: Tensor, window: int, noise_sd: float) -> bool:
    r"""Eq. (1): the last ``window`` scores raised the best by at most ``noise_sd``.

    Args:
        scores: ``n`` observed outcomes in the order they were added, larger is
            better (model units).
        window: Evaluations ``w >= 1`` of Eq. (2).
        noise_sd: The noise standard deviation ``sigma_n >= 0`` in the units of
            ``scores``.

    Returns:
        ``False`` while ``n <= window`` (too few evaluations to tell) or when a
        score is not finite; otherwise whether Eq. (1) holds.
    """
    if scores.dim() != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {scores.shape}.")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}.")
    if not (math.isfinite(noise_sd) and noise_sd >= 0):
        raise ValueError(f"noise_sd must be finite and >= 0, got {noise_sd!r}.")
    n = scores.shape[0]
    if n <= window or not bool(scores.isfinite().all()):
        return False
    gain = float(scores.max() - scores[: n - window].max())
    return gain <= noise_sd
