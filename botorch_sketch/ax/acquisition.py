r"""Ax ``Acquisition`` that lets BBKB decide how many arms a generator run has.

Ax's modular BoTorch generator asks its ``Acquisition`` for ``n`` candidates.
:class:`AdaptiveBatchAcquisition` answers with ``1 <= k <= n`` of them, chosen by
:func:`~botorch_sketch.optim.optimize_acqf_adaptive_batch`: BBKB's sequential batch
UCB with the batch so far hallucinated into the variance, stopped by a batch rule
(global, global-local, ...; Calandriello et al., ICML 2020, Alg. 1). Ax accepts
``k < n`` arms in a generator run (``api_botorch_ax.md`` Sec. 3) and turns it into
a ``BatchTrial`` of ``k`` arms; under ``ax.Client``, which always asks for
``n = 1``, it returns one point per trial, with the other pending trials
hallucinated (BBKB's within-batch update driven by Ax's pending points).

Options (``acquisition_options`` of the generator, stored in Ax JSON):

- ``rule`` (``"global"``): stopping rule name for
  :func:`~botorch_sketch.bbkb.stopping.make_rule`; ``"bkb"`` gives batches of one.
- ``C`` (``2.0``): the rule's threshold ``C~ >= 1``.
- ``max_batch_size`` (``None``): cap on ``k`` besides ``n``.
- ``candidate_set`` (``None``): an ``A x d`` tensor (or nested list) of candidates
  in Ax's model space, which for float range parameters are their own units (Ax
  normalises inside the model); the batch is then picked from its rows.
- ``allow_repeats`` (``False``): whether a candidate row already observed,
  pending or picked earlier in the batch may be picked again (BBKB's paper allows
  repeats; Ax users usually want distinct arms).
- ``seed`` (``0``): base seed. Each call uses ``seed + (number of observed and
  pending points)``, so the same experiment state gives the same batch, also after
  the experiment was saved and loaded in another process.
- ``num_reference_points`` (``1024``): Sobol reference set of the local rule on a
  box.

The optimiser options Ax forwards (``num_restarts``, ``raw_samples``, ``options``)
are used on a box.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from ax.core.search_space import SearchSpaceDigest
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from torch import Tensor

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound
from botorch_sketch.bbkb.stopping import make_rule
from botorch_sketch.optim.adaptive_batch import optimize_acqf_adaptive_batch

logger = logging.getLogger(__name__)

__all__ = ["AdaptiveBatchAcquisition", "ADAPTIVE_BATCH_OPTIONS"]

#: Recognised ``acquisition_options`` and their defaults.
ADAPTIVE_BATCH_OPTIONS: dict[str, Any] = {
    "rule": "global",
    "C": 2.0,
    "max_batch_size": None,
    "candidate_set": None,
    "allow_repeats": False,
    "seed": 0,
    "num_reference_points": 1024,
}
#: Keys that Ax itself may put into ``acquisition_options``.
_AX_OWNED_OPTIONS = frozenset({"prune_irrelevant_parameters", "subset_model"})
#: Rows closer than this (max-abs, model space) count as the same candidate.
SAME_POINT_ATOL = 1e-9


class AdaptiveBatchAcquisition(Acquisition):
    r"""Ax ``Acquisition`` returning a BBKB batch of rule-chosen size.

    Requires ``botorch_acqf_class = BatchUpperConfidenceBound`` (its ``alpha`` and
    Ax's ``posterior_transform`` are reused) and a single-output
    :class:`~botorch_sketch.models.NystromGP` surrogate.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        options = kwargs.get("options") or {}
        unknown = set(options) - set(ADAPTIVE_BATCH_OPTIONS) - _AX_OWNED_OPTIONS
        if unknown:
            raise ValueError(
                f"Unknown AdaptiveBatchAcquisition option(s) {sorted(unknown)}; "
                f"known: {sorted(ADAPTIVE_BATCH_OPTIONS)}."
            )
        super().__init__(*args, **kwargs)
        if not isinstance(self.acqf, BatchUpperConfidenceBound):
            raise UnsupportedError(
                "AdaptiveBatchAcquisition needs botorch_acqf_class="
                f"BatchUpperConfidenceBound, got {type(self.acqf).__name__}."
            )
        # Validate the rule now, so a bad option fails before any generation.
        make_rule(self._option("rule"), C=float(self._option("C")))

    def _option(self, key: str) -> Any:
        return self.options.get(key, ADAPTIVE_BATCH_OPTIONS[key])

    def optimize(
        self,
        n: int,
        search_space_digest: SearchSpaceDigest,
        inequality_constraints: list[tuple[Tensor, Tensor, float]] | None = None,
        equality_constraints: list[tuple[Tensor, Tensor, float]] | None = None,
        fixed_features: dict[int, float] | None = None,
        rounding_func: Callable[[Tensor], Tensor] | None = None,
        optimizer_options: dict[str, Any] | None = None,
        candidate_set: Tensor | None = None,
        sampling_strategy: Any = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        r"""Generate ``1 <= k <= n`` candidates; ``k`` is chosen by the batch rule.

        Returns:
            ``(candidates k x d, acquisition values k, arm weights k)`` in Ax's
            model space (weights are all one).
        """
        _reject_unsupported(
            search_space_digest,
            inequality_constraints,
            equality_constraints,
            fixed_features,
            sampling_strategy,
        )
        max_batch_size = n
        if self._option("max_batch_size") is not None:
            max_batch_size = min(n, int(self._option("max_batch_size")))
        if max_batch_size < 1:
            raise ValueError(f"n must be a positive int, got {n}.")
        bounds = torch.tensor(search_space_digest.bounds, dtype=torch.float64).T
        allow_repeats = bool(self._option("allow_repeats"))
        choices = self._choices(candidate_set, bounds.shape[-1], allow_repeats)
        opts = dict(optimizer_options or {})
        acqf: BatchUpperConfidenceBound = self.acqf
        seed = int(self._option("seed")) + _num_rows(self.X_observed)
        seed += _num_rows(self.X_pending)
        candidates, values = optimize_acqf_adaptive_batch(
            self._model,
            bounds=bounds,
            rule=self._option("rule"),
            C=float(self._option("C")),
            alpha=float(acqf.alpha),
            max_batch_size=max_batch_size,
            num_restarts=int(opts.pop("num_restarts", 10)),
            raw_samples=int(opts.pop("raw_samples", 512)),
            X_pending=self.X_pending,
            choices=choices,
            allow_repeats=allow_repeats or choices is None,
            options=opts.pop("options", None),
            posterior_transform=acqf.posterior_transform,
            num_reference_points=int(self._option("num_reference_points")),
            seed=seed,
        )
        if rounding_func is not None and choices is None:
            # Library rows are kept exactly as given (Ax's rounding callback goes
            # through numpy and the parameter transforms and can move a row by
            # ~1e-8, off the library).
            candidates = rounding_func(candidates)
        k = candidates.shape[0]
        logger.info("BBKB generated a batch of %d arm(s) (asked for %d).", k, n)
        weights = torch.ones(k, dtype=self.dtype, device=self.device)
        return (
            candidates.to(dtype=self.dtype, device=self.device),
            values.to(dtype=self.dtype, device=self.device),
            weights,
        )

    def _choices(
        self, candidate_set: Tensor | None, d: int, allow_repeats: bool
    ) -> Tensor | None:
        r"""The finite candidate set (option or Ax argument), minus taken rows."""
        given = self._option("candidate_set")
        if given is None:
            given = candidate_set
        if given is None:
            return None
        choices = torch.as_tensor(given, dtype=torch.float64)
        if choices.dim() != 2 or choices.shape[-1] != d or choices.shape[0] == 0:
            raise ValueError(
                f"candidate_set must be a non-empty A x {d} tensor (one column per "
                f"parameter, in parameter units), got shape {tuple(choices.shape)}."
            )
        if not bool(torch.isfinite(choices).all()):
            raise ValueError("candidate_set contains NaN or Inf.")
        if allow_repeats:
            return choices
        taken = [t for t in (self.X_observed, self.X_pending) if t is not None]
        if taken:
            keep = ~_matches_any(choices, torch.cat(taken).to(choices))
            choices = choices[keep]
        if choices.shape[0] == 0:
            raise SearchSpaceExhausted(
                "Every row of candidate_set has been observed or is pending; pass "
                "allow_repeats=True to evaluate candidates again."
            )
        return choices


def _matches_any(A: Tensor, B: Tensor, chunk: int = 4096) -> Tensor:
    r"""``A``-long mask: row ``a`` equals (to ``SAME_POINT_ATOL``) some row of ``B``."""
    out = torch.zeros(A.shape[0], dtype=torch.bool, device=A.device)
    for start in range(0, B.shape[0], chunk):
        diff = (A.unsqueeze(1) - B[start : start + chunk].unsqueeze(0)).abs()
        out |= (diff.amax(dim=-1) <= SAME_POINT_ATOL).any(dim=-1)
    return out


def _num_rows(X: Tensor | None) -> int:
    return 0 if X is None else int(X.shape[0])


def _reject_unsupported(
    ssd: SearchSpaceDigest,
    inequality_constraints: Any,
    equality_constraints: Any,
    fixed_features: Any,
    sampling_strategy: Any,
) -> None:
    if inequality_constraints or equality_constraints:
        raise UnsupportedError(
            "BBKB strategies do not support parameter constraints."
        )
    if fixed_features:
        raise UnsupportedError("BBKB strategies do not support fixed features.")
    if sampling_strategy is not None:
        raise UnsupportedError("BBKB strategies do not take a sampling_strategy.")
    if ssd.discrete_choices or ssd.categorical_features or ssd.ordinal_features:
        raise UnsupportedError(
            "BBKB strategies support float range parameters only (give a "
            "candidate_set for a finite library of points)."
        )

