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
- ``min_batch_size`` (``1``): floor on ``k`` (at most ``n``): with ``k``
  parallel workers, the batch continues past the rule's stop with the next
  points of the same greedy sequence
  (:func:`~botorch_sketch.optim.optimize_acqf_adaptive_batch`).
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
- ``reuse_restarts`` (``True``): on a box, every greedy step after the first
  starts from the previous step's local maxima, perturbed, instead of fresh raw
  samples (:func:`~botorch_sketch.optim.optimize_acqf_adaptive_batch`).
- ``restart_maxiter`` (``None``): L-BFGS-B iterations of those steps (``None``:
  as the first step's).
- ``gradient_tolerance`` (``1e-2``): on a box, L-BFGS-B's projected-gradient
  tolerance of each greedy step, relative to the outcome's prior standard
  deviation per box width (:mod:`~botorch_sketch.optim.step_tolerance`);
  ``None``: SciPy's absolute ``1e-5``. A ``pgtol`` in Ax's optimizer
  ``options`` takes precedence.
- ``thompson_fill`` (``0``; the strategies' default is ``0.5``): on a box, the
  fraction of the points that ``min_batch_size`` adds past the rule's stop that
  are maximisers of posterior samples (Thompson sampling) rather than the next
  greedy points; ignored (logged) on mixed, discrete or constrained domains and
  on candidate sets, where every point is greedy.
- ``basin_share`` (``0.25``): the share of those Thompson samples spent in other
  basins of the posterior mean than the incumbent's
  (:func:`~botorch_sketch.optim.adaptive_batch.thompson_fill_points`).
- ``stall_basin_share`` (``0.5``): that share while the run is stalled (its last
  ``max(4 q, 20 d)`` evaluations raised the best observation by at most one noise
  standard deviation; :mod:`~botorch_sketch.optim.stall`); ``None``: never
  raised.

On a mixed, discrete or constrained domain each greedy step is Ax's own
optimisation of the batch UCB, and a step proposes a point already observed,
pending or earlier in the batch only when its lower confidence bound beats the
UCB of the best new point found
(:mod:`~botorch_sketch.optim.new_points`; without parameter constraints, a
local search over valid points looks for that new point).

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
from botorch.utils.sampling import draw_sobol_samples
from torch import Tensor

from botorch_sketch.acquisition.bbkb import BatchUpperConfidenceBound
from botorch_sketch.bbkb.stopping import make_rule
from botorch_sketch.optim.adaptive_batch import (
    DEFAULT_BASIN_SHARE,
    DEFAULT_C,
    DEFAULT_THOMPSON_FILL,
    StepOptimizer,
    optimize_acqf_adaptive_batch,
)
from botorch_sketch.optim.new_points import NeighborhoodSearch, matches_any
from botorch_sketch.optim.stall import DEFAULT_STALL_BASIN_SHARE
from botorch_sketch.optim.step_tolerance import DEFAULT_GRADIENT_TOLERANCE

logger = logging.getLogger(__name__)

__all__ = ["AdaptiveBatchAcquisition", "ADAPTIVE_BATCH_OPTIONS"]

#: Recognised ``acquisition_options`` and their defaults.
ADAPTIVE_BATCH_OPTIONS: dict[str, Any] = {
    "rule": "global",
    "C": DEFAULT_C,
    "max_batch_size": None,
    "min_batch_size": 1,
    "candidate_set": None,
    "allow_repeats": False,
    "seed": 0,
    "num_reference_points": 1024,
    "reuse_restarts": True,
    "restart_maxiter": None,
    "gradient_tolerance": DEFAULT_GRADIENT_TOLERANCE,
    "thompson_fill": DEFAULT_THOMPSON_FILL,
    "basin_share": DEFAULT_BASIN_SHARE,
    "stall_basin_share": DEFAULT_STALL_BASIN_SHARE,
}
#: Keys that Ax itself may put into ``acquisition_options``.
_AX_OWNED_OPTIONS = frozenset({"prune_irrelevant_parameters", "subset_model"})


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

    def _thompson_fill(self, plain_box: bool) -> float:
        r"""The ``thompson_fill`` option where it applies (a plain box), else 0."""
        fill = float(self._option("thompson_fill"))
        if fill > 0 and not plain_box:
            logger.info(
                "thompson_fill=%g applies on a box only; this batch is all greedy.",
                fill,
            )
            return 0.0
        return fill

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
        if sampling_strategy is not None:
            raise UnsupportedError("BBKB strategies do not take a sampling_strategy.")
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
        step_optimizer, reference, search = None, None, None
        if choices is None and not _is_plain_box(
            search_space_digest,
            inequality_constraints,
            equality_constraints,
            fixed_features,
        ):
            # Integer / choice / ordered parameters, parameter constraints or
            # fixed features: each greedy step is Ax's own optimisation of the
            # batch UCB over that domain (BoTorch's discrete, mixed-alternating or
            # constrained optimisers), rounded to valid values by Ax.
            step_optimizer = self._ax_step_optimizer(
                search_space_digest,
                inequality_constraints,
                equality_constraints,
                fixed_features,
                rounding_func,
                optimizer_options,
            )
            reference = _domain_reference_points(
                bounds,
                int(self._option("num_reference_points")),
                seed,
                rounding_func,
                inequality_constraints,
            )
            search = _new_point_search(
                search_space_digest,
                bounds,
                reference,
                rounding_func,
                fixed_features,
                bool(inequality_constraints or equality_constraints),
            )
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
            min_batch_size=min(int(self._option("min_batch_size")), max_batch_size),
            step_optimizer=step_optimizer,
            reference_points=reference,
            new_point_search=search,
            reuse_restarts=bool(self._option("reuse_restarts")),
            restart_maxiter=self._option("restart_maxiter"),
            gradient_tolerance=self._option("gradient_tolerance"),
            thompson_fill=self._thompson_fill(
                choices is None and step_optimizer is None
            ),
            basin_share=float(self._option("basin_share")),
            stall_basin_share=self._option("stall_basin_share"),
        )
        if rounding_func is not None and choices is None and step_optimizer is None:
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

    def _ax_step_optimizer(
        self,
        search_space_digest: SearchSpaceDigest,
        inequality_constraints: Any,
        equality_constraints: Any,
        fixed_features: Any,
        rounding_func: Any,
        optimizer_options: dict[str, Any] | None,
    ) -> StepOptimizer:
        r"""One greedy step = ``Acquisition.optimize(n=1)`` on the batch UCB."""

        def step(acqf: BatchUpperConfidenceBound, index: int) -> tuple[Tensor, Tensor]:
            original, self.acqf = self.acqf, acqf
            try:
                x, value, _ = super(AdaptiveBatchAcquisition, self).optimize(
                    n=1,
                    search_space_digest=search_space_digest,
                    inequality_constraints=inequality_constraints,
                    equality_constraints=equality_constraints,
                    fixed_features=fixed_features,
                    rounding_func=rounding_func,
                    optimizer_options=dict(optimizer_options or {}),
                )
            finally:
                self.acqf = original
            return x.reshape(-1), value.reshape(-1)[0]

        return step

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
            keep = ~matches_any(choices, torch.cat(taken))
            choices = choices[keep]
        if choices.shape[0] == 0:
            raise SearchSpaceExhausted(
                "Every row of candidate_set has been observed or is pending; pass "
                "allow_repeats=True to evaluate candidates again."
            )
        return choices


def _num_rows(X: Tensor | None) -> int:
    return 0 if X is None else int(X.shape[0])


def _is_plain_box(
    ssd: SearchSpaceDigest,
    inequality_constraints: Any,
    equality_constraints: Any,
    fixed_features: Any,
) -> bool:
    r"""Whether the domain is the whole box of float parameters."""
    return not (
        ssd.discrete_choices
        or ssd.categorical_features
        or ssd.ordinal_features
        or inequality_constraints
        or equality_constraints
        or fixed_features
    )


def _new_point_search(
    ssd: SearchSpaceDigest,
    bounds: Tensor,
    pool: Tensor,
    rounding_func: Callable[[Tensor], Tensor] | None,
    fixed_features: dict[int, float] | None,
    constrained: bool,
) -> NeighborhoodSearch | None:
    r"""The search for a new point when Ax's rounded optimum is a taken point.

    Moves over the digest's discrete choices and, through Ax's
    ``rounding_func``, over the other columns (one-hot encoded categories);
    fixed features keep their value. It starts from the local rule's reference
    points (already on the domain). ``None`` under parameter constraints, which
    its moves do not keep.
    """
    if constrained:
        return None
    choices = {int(j): list(v) for j, v in ssd.discrete_choices.items()}
    for j, value in (fixed_features or {}).items():
        choices[int(j)] = [value]
    return NeighborhoodSearch(
        bounds=bounds, choices=choices, pool=pool, project=rounding_func
    )


def _domain_reference_points(
    bounds: Tensor,
    num_points: int,
    seed: int,
    rounding_func: Callable[[Tensor], Tensor] | None,
    inequality_constraints: list[tuple[Tensor, Tensor, float]] | None,
) -> Tensor:
    r"""Sobol points of the box moved onto the domain (the local rule's reference).

    Rounded to valid values by Ax's ``rounding_func`` and restricted to the points
    that satisfy the linear inequality constraints (Lemma 3's bound then holds on
    points of the domain, see :mod:`botorch_sketch.optim.adaptive_batch`).
    """
    points = draw_sobol_samples(bounds, n=num_points, q=1, seed=seed + 7919)
    points = points.squeeze(-2)
    if rounding_func is not None:
        points = torch.stack([rounding_func(p) for p in points])
    for indices, coefficients, rhs in inequality_constraints or []:
        lhs = (points[:, indices.long()] * coefficients.to(points)).sum(-1)
        points = points[lhs >= rhs - 1e-9]
    if points.shape[0] == 0:
        raise ValueError(
            "no reference point of the local rule satisfies the parameter "
            "constraints; use the global rule ('bbkb') for this search space."
        )
    return points
