r"""Adaptive-size batches of BBKB through BoTorch's acquisition optimisers.

BBKB (Calandriello et al., ICML 2020, Alg. 1 L4-L5) grows a batch one point at a
time, each point maximising the batch UCB
(:class:`~botorch_sketch.acquisition.BatchUpperConfidenceBound`) with the batch so
far hallucinated into the variance, and ends the batch when a stopping rule
(:mod:`botorch_sketch.bbkb.stopping`) says the posterior has drifted too far from
the batch-start posterior. The number of points ``k`` is decided by the rule
(``1 <= k <= max_batch_size``).

Per selected point ``x_t`` the rule gets (spec Sec. 3 items 1-2, Sec. 5):

- the batch-START variance ``sigma~^2_fb(x_t) = var_GP(x_t) / lam`` (RLS units,
  the model with only the caller's real ``X_pending`` hallucinated) through the
  rule's state (``state.s2_0[arm]``), used by :class:`GlobalRule` (Lemma 1,
  ``1 + sum_s sigma~^2_fb(x_s) <= C``);
- the CURRENT hallucinated variance ``sigma~^2_{t-1}(x_t)`` (batch so far
  included) as ``variance``, used by :class:`ProductRule` (GP-BUCB).

The point that crosses the threshold belongs to the batch, so every proper prefix
satisfies the rule. A batch reaching ``max_batch_size`` is cut off there (spec
Sec. 3 item 8).

When BBKB gives a parallel batch: the global rule spends ``C - 1`` units of
batch-start variance in RLS units, ``sigma~^2 = var_GP / noise``. A point the model
is unsure about (``var_GP`` above ``(C - 1)`` times the noise variance) ends the
batch by itself, so early in a run, and at any time when the noise is small
against the function's variations, batches have one point; they grow as the
posterior variance at the UCB maximisers falls below the noise. A user with ``k``
parallel workers sets ``min_batch_size=k``: the batch then continues past the
rule's stop with the next points of the same greedy sequence (the UCB with the
batch so far hallucinated, i.e. GP-BUCB's batch), which keeps the workers busy at
the price of the rule's guarantee for those extra points (an extension). With
``thompson_fill = f > 0`` (box only) the last ``floor(f (min_batch_size - 1))``
points of a filled batch (fewer when the rule's own batch is longer) are instead
the maximisers of independent posterior samples (parallel Thompson sampling,
Kandasamy et al., AISTATS 2018) over a candidate set
(:func:`thompson_fill_points`). A share ``basin_share`` of them (a
quarter) goes to other basins than the incumbent's: the basins of the posterior
mean are told apart by the hill-valley test
(:func:`~botorch_sketch.optim.basins.hill_valley_centers`), and the best training
point of each of the next few basins gets local Thompson steps, so that a basin
the search has touched but not refined keeps being refined while the greedy UCB
sits in the incumbent's (a multi-start local search inside every filled batch).
Likewise a share ``THOMPSON_FAR_SHARE``
(0 by default) can be drawn only from Sobol candidates away from the best
observed points. The
Ax strategies use ``f = 0.5``; here the default is ``0``. Measurements of these
choices: ``benchmarks/results/bbkb_exploration.md`` and ``stall_hartmann6.md``.

Domains:

- a box (``bounds``): each point by ``optimize_acqf(q=1)`` (multi-start L-BFGS-B);
  lazy UCB evaluation does not apply (spec Sec. 11.4). Its continuous
  counterpart here: the first point starts from ``raw_samples`` Sobol points,
  each later one from the previous step's local maxima, perturbed
  (``reuse_restarts``), which costs far fewer acquisition evaluations.
  Pending points (the caller's and the batch so far) are hallucinated by
  conditioning the batch-start posterior on them (``hallucination="full"``,
  GP-BUCB's update, Nyström residual included;
  :mod:`botorch_sketch.acquisition.bbkb`). The paper's update through
  the frozen embedding (``"dictionary"``) leaves the variance outside the
  dictionary's span untouched: a batch filled past the rule's stop
  (``min_batch_size``) early in a run, or next to pending trials of other
  workers, would be one point repeated;
- any domain through a caller's ``step_optimizer`` (Ax's discrete, mixed or
  constrained optimisers): each step takes the best point not yet evaluated,
  pending or in the batch, and proposes an evaluated or pending one again only
  when the model is sure it beats every new point, never twice in one batch
  while a new point is found (``prefer_new_points``, ``new_point_search``,
  :mod:`botorch_sketch.optim.new_points`);
- a finite set (``choices``): BBKB's finite-arm engine. The batch UCB over the
  rows becomes a frozen engine state
  (:meth:`~botorch_sketch.acquisition.BatchUpperConfidenceBound.batch_state`,
  ``O(A m (d + r))`` once: the frozen mean and the batch-start variances of all
  rows, the caller's ``X_pending`` hallucinated into ``V_fb``), and
  :func:`~botorch_sketch.bbkb.selection.select_batch` picks the batch with its
  pooled exact argmax (:class:`~botorch_sketch.bbkb.selection.PooledUCBSelector`:
  Sherman-Morrison downdates of a pool of the best rows, ``O(K r + r^2)`` per
  point instead of a scan of all ``A`` rows; ties to the lowest index). The
  points are the same as a direct argmax of the batch UCB over all rows at every
  step, up to rounding (tested). Pending points need not be rows of ``choices``:
  they enter ``V_fb``, not the arm set. Memory ``O(A (d + 1) + K r + chunk m)``,
  never ``A x A`` (nor ``A x m``).

Local rule (Lemma 3) on a box [INFERENCE, spec Sec. 11.4]: the sup over the domain
of ``r(a) = 1 + sum_j k~_fb(a, x_j)^2 / sigma~^2_fb(a)`` is approximated by the max
over a finite reference set: ``num_reference_points`` scrambled Sobol points in
the box (seeded) plus the batch points themselves. The guarantee
``sigma~^2_fb / sigma~^2_t <= C`` then holds only on that reference set. On a
finite ``choices`` set the reference set is all of ``choices`` (the paper's rule,
:class:`~botorch_sketch.bbkb.stopping.GlobalLocalRule` on the engine state).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from botorch.acquisition.objective import (
    PosteriorTransform,
    ScalarizedPosteriorTransform,
)
from botorch.optim.optimize import optimize_acqf
from botorch.utils.sampling import draw_sobol_samples, manual_seed
from torch import Tensor

from botorch_sketch.acquisition.bbkb import (
    DEFAULT_HALLUCINATION,
    BatchUpperConfidenceBound,
)
from botorch_sketch.bbkb.selection import StepRecord, select_batch
from botorch_sketch.bbkb.stopping import GlobalLocalRule, StoppingRule
from botorch_sketch.generation.thompson import EmbeddingThompsonSampling
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.validation import check_fraction
from botorch_sketch.optim.adaptive_batch_inputs import (
    DEFAULT_BASIN_SHARE,
    DEFAULT_C,
    DEFAULT_THOMPSON_FILL,
    AdaptiveBatchInputs,
    StepOptimizer,
)
from botorch_sketch.optim.basins import hill_valley_centers
from botorch_sketch.optim.new_points import (
    NeighborhoodSearch,
    new_point_step,
    observed_inputs,
)
from botorch_sketch.optim.stall import (
    DEFAULT_STALL_BASIN_SHARE,
    is_stalled,
    stall_window,
)
from botorch_sketch.optim.step_tolerance import (
    DEFAULT_GRADIENT_TOLERANCE,
    with_gradient_tolerance,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BASIN_SHARE",
    "DEFAULT_C",
    "DEFAULT_THOMPSON_FILL",
    "AdaptiveBatchInputs",
    "StepOptimizer",
    "optimize_acqf_adaptive_batch",
    "thompson_fill_points",
]

#: Perturbation of reused restarts, as a fraction of each box side
#: (``reuse_restarts``).
RESTART_JITTER = 0.1

#: Candidates of the Thompson-sampling fill (:func:`thompson_fill_points`): Sobol
#: points of the box, and Gaussian steps of ``THOMPSON_LOCAL_STEP`` x the box side
#: around each of the ``THOMPSON_LOCAL_CENTERS`` best training points.
THOMPSON_SOBOL_POINTS = 4096
THOMPSON_LOCAL_CENTERS = 32
THOMPSON_LOCAL_PER_CENTER = 64
THOMPSON_LOCAL_STEP = 0.05
#: Offset of the fill's seed from the batch's ``seed`` (its own random stream).
THOMPSON_SEED_OFFSET = 104_729
#: Share of the Thompson fill drawn away from the incumbent's basin: from the Sobol
#: candidates farther than ``THOMPSON_FAR_RADIUS * sqrt(d)`` (box scaled to the
#: unit cube) from every one of the ``THOMPSON_LOCAL_CENTERS`` best training points.
#: Off by default.
THOMPSON_FAR_SHARE = 0.0
THOMPSON_FAR_RADIUS = 0.2
#: The share of the Thompson fill spent on other basins than the incumbent's is
#: the ``basin_share`` option (default ``DEFAULT_BASIN_SHARE``; 0.5 measured in
#: ``bbkb_exploration.md`` section 13: no Hartmann6 stall in 20 seeds, but a
#: worse Ackley10 median): the
#: training points, ranked by posterior mean, are grouped by the hill-valley test
#: on the mean (:func:`~botorch_sketch.optim.basins.hill_valley_centers`); the best
#: point of each of the ``THOMPSON_BASIN_CENTERS`` basins after the incumbent's
#: gets the share's points in turn, each the maximiser of a posterior sample over
#: ``THOMPSON_BASIN_PER_CENTER`` Gaussian steps of ``THOMPSON_BASIN_STEP`` x the
#: box side around it (a local Thompson step in each other basin).
THOMPSON_BASIN_CENTERS = 3
#: A fill of at least this many points spends at least one in another basin
#: (when ``basin_share > 0``): the 3-point fill of 8-point batches otherwise gets
#: none (``floor(0.25 * 3) = 0``).
BASIN_MIN_FILL = 3
THOMPSON_BASIN_PER_CENTER = 256
THOMPSON_BASIN_STEP = 0.1
#: Depth a dip of the posterior mean must exceed to separate two basins, as a
#: fraction of the mean's range over the training points.
BASIN_TOLERANCE = 0.01


def optimize_acqf_adaptive_batch(
    model: NystromGP,
    bounds: Tensor | None,
    rule: StoppingRule | str,
    alpha: float,
    max_batch_size: int,
    num_restarts: int = 10,
    raw_samples: int = 512,
    X_pending: Tensor | None = None,
    choices: Tensor | None = None,
    allow_repeats: bool = True,
    options: dict[str, Any] | None = None,
    posterior_transform: PosteriorTransform | None = None,
    maximize: bool = True,
    C: float | None = None,
    num_reference_points: int = 1024,
    seed: int | None = None,
    min_batch_size: int = 1,
    step_optimizer: StepOptimizer | None = None,
    reference_points: Tensor | None = None,
    hallucination: str = DEFAULT_HALLUCINATION,
    reuse_restarts: bool = True,
    restart_maxiter: int | None = None,
    gradient_tolerance: float | None = DEFAULT_GRADIENT_TOLERANCE,
    thompson_fill: float = DEFAULT_THOMPSON_FILL,
    basin_share: float = DEFAULT_BASIN_SHARE,
    prefer_new_points: bool = True,
    new_point_search: NeighborhoodSearch | None = None,
    stall_basin_share: float | None = DEFAULT_STALL_BASIN_SHARE,
) -> tuple[Tensor, Tensor]:
    r"""Generate one BBKB batch whose size is chosen by a stopping rule.

    Sequential greedy selection (BBKB Alg. 1 L4-L8): for ``t = 1, 2, ...``

        x_t = argmax_x  mu_fb(x) + alpha sigma~(x | X_pending, x_1..x_{t-1}),
        stop = rule.update(x_t, ...)          (x_t is kept either way)

    Args:
        model: A single-output, unbatched ``NystromGP`` (its dictionary is the
            frozen ``S_fb`` of the batch).
        bounds: ``2 x d`` box bounds; required unless ``choices`` is given (then it
            is only checked against ``choices``).
        rule: A :class:`~botorch_sketch.bbkb.stopping.StoppingRule` or a name
            accepted by :func:`~botorch_sketch.bbkb.stopping.make_rule`
            (``"global"``, ``"global_local"``, ``"local"``, ``"product"``,
            ``"bkb"``). A rule instance is reset with ``start`` here.
        alpha: The UCB width ``alpha~ >= 0`` in RLS units (see
            :class:`~botorch_sketch.acquisition.BatchUpperConfidenceBound`).
        max_batch_size: Cap ``>= 1`` on the batch size (an extension; the paper has
            none besides the horizon).
        num_restarts: Restarts of ``optimize_acqf`` (box only).
        raw_samples: Raw Sobol samples of ``optimize_acqf`` (box only).
        X_pending: ``p x d`` points already submitted (earlier batches without
            feedback yet): hallucinated into both the batch-start and the current
            variance. They do not count towards the batch or the rule.
        choices: ``A x d`` finite candidate set; if given, the batch is built from
            its rows.
        allow_repeats: Whether a row of ``choices`` may be selected more than once
            (BBKB allows repeats, spec Sec. 11.5). Must be ``True`` on a box, where
            ``optimize_acqf`` cannot exclude points.
        options: Options for ``optimize_acqf`` (its ``seed`` is overridden per step).
        posterior_transform: See ``BatchUpperConfidenceBound``.
        maximize: See ``BatchUpperConfidenceBound``.
        C: Threshold ``C~ >= 1`` when ``rule`` is a name (default 2); must be
            ``None`` or equal to ``rule.C`` for a rule instance.
        num_reference_points: Sobol reference points of the local rule on a box.
        seed: Seed of every random choice (Sobol raw samples, Boltzmann
            initialisation, reference set). ``None``: drawn once from torch's global
            generator, so ``torch.manual_seed`` makes the call reproducible.
        min_batch_size: Smallest batch (``1 <= min_batch_size <= max_batch_size``):
            the greedy sequence continues past the rule's stop until it has this
            many points (module docstring).
        step_optimizer: On a box, a replacement for the per-step
            ``optimize_acqf(q=1)``: ``step_optimizer(acqf, step) -> (x, value)``
            maximises the batch UCB ``acqf`` (its pending points already set) over
            the domain, e.g. a mixed, discrete or constrained one (Ax's
            ``Acquisition.optimize`` does this for the Ax strategies).
        reference_points: On a box, the local rule's reference set (default:
            ``num_reference_points`` Sobol points of the box); give points of the
            actual domain when it is not the whole box.
        reuse_restarts: On a box without ``step_optimizer``, start every step
            after the first from the previous step's ``num_restarts`` local
            maxima, perturbed (:func:`_restart_points`), instead of BoTorch's
            initialisation from ``raw_samples`` fresh Sobol points: the
            hallucinated UCB changes mostly near the point just chosen, so the
            other maxima remain good starts (module docstring, measurements).
        restart_maxiter: With ``reuse_restarts``, the L-BFGS-B iterations of
            every step after the first (``maxiter``, at most ``options``'s):
            its starts are near local maxima already. ``None``: the first
            step's (``options``, else BoTorch's 200).
        gradient_tolerance: On a box without ``step_optimizer``, L-BFGS-B's
            projected-gradient tolerance of every greedy step relative to the
            outcome's prior standard deviation per box width
            (:mod:`~botorch_sketch.optim.step_tolerance`, Eq. (1); default
            ``DEFAULT_GRADIENT_TOLERANCE = 1e-2``). ``None``, or ``pgtol`` /
            ``gtol`` in ``options``: SciPy's absolute ``1e-5`` (or the given one).
        thompson_fill: Fraction ``f in [0, 1]`` of the points that
            ``min_batch_size`` adds past the rule's stop that are drawn by
            Thompson sampling (:func:`thompson_fill_points`) instead of the
            greedy sequence: the greedy sequence runs until the rule stops and it
            has at least ``min_batch_size - floor(f (min_batch_size - 1))``
            points, and Thompson samples fill the batch to ``min_batch_size``.
            Box only, without ``step_optimizer`` (an error otherwise when
            ``f > 0``). ``0`` (default): the greedy sequence alone.
        basin_share: Fraction in ``[0, 1]`` of the Thompson fill spent in other
            basins of the posterior mean than the incumbent's
            (:func:`thompson_fill_points`; default ``DEFAULT_BASIN_SHARE``).
            More keeps a run from stalling in a second basin, fewer refines the
            incumbent's (``benchmarks/results/bbkb_exploration.md``).
        stall_basin_share: The Thompson fill's basin share, in ``[0, 1]``,
            while the run is stalled: its last ``max(4 q, 20 d)`` evaluations (``q =
            min_batch_size``) raised the best observed outcome by at most one
            noise standard deviation (:mod:`~botorch_sketch.optim.stall`). Only
            where it exceeds ``basin_share > 0``; ``None``: ``basin_share``
            always. Default ``DEFAULT_STALL_BASIN_SHARE = 0.5``.
        hallucination: On a box, how pending points enter the variance:
            ``"full"`` (the batch-start posterior conditioned on them) or
            ``"dictionary"`` (through the frozen embedding, the paper's and the
            finite-set engine's update); see
            :class:`~botorch_sketch.acquisition.BatchUpperConfidenceBound`.
            The default, ``"full"``, is the acquisition function's default too
            (:data:`~botorch_sketch.acquisition.bbkb.DEFAULT_HALLUCINATION`); the
            finite-set path always uses the engine's update through the embedding.

        prefer_new_points: With a ``step_optimizer``, each step takes the best
            point not yet evaluated (the model's training inputs), pending or in
            the batch, and proposes an evaluated or pending point again only
            when its lower confidence bound exceeds the best new point's UCB
            (a point of the batch only when no new point is found)
            (:mod:`botorch_sketch.optim.new_points`). ``False``: the plain
            argmax of the batch UCB. Ignored on a plain box and on ``choices``
            (there ``allow_repeats`` decides).
        new_point_search: With ``prefer_new_points`` and a ``step_optimizer``
            that rounds a relaxed maximiser (so that it may land on a taken
            point whose lower bound it never saw), the search over valid points
            for the best new point, which replaces a taken one unless the taken
            point's lower bound is higher
            (:class:`~botorch_sketch.optim.new_points.NeighborhoodSearch`).
            ``None``: the step optimiser's point is kept.

    Returns:
        ``(candidates, acq_values)``: a ``k x d`` tensor of points in selection order
        and the ``k`` UCB values at selection (with the batch so far hallucinated;
        for Thompson-sampling points the batch-start UCB),
        ``1 <= k <= max_batch_size``.

    Raises:
        TypeError: If ``model`` is not a ``NystromGP``.
        ValueError: If another input is invalid (named in the message), before
            any model evaluation (:class:`AdaptiveBatchInputs`).
    """
    inputs = AdaptiveBatchInputs(
        model=model,
        bounds=bounds,
        rule=rule,
        alpha=alpha,
        max_batch_size=max_batch_size,
        num_restarts=num_restarts,
        raw_samples=raw_samples,
        X_pending=X_pending,
        choices=choices,
        allow_repeats=allow_repeats,
        options=options,
        posterior_transform=posterior_transform,
        maximize=maximize,
        C=C,
        num_reference_points=num_reference_points,
        seed=seed,
        min_batch_size=min_batch_size,
        step_optimizer=step_optimizer,
        reference_points=reference_points,
        hallucination=hallucination,
        reuse_restarts=reuse_restarts,
        restart_maxiter=restart_maxiter,
        gradient_tolerance=gradient_tolerance,
        thompson_fill=thompson_fill,
        basin_share=basin_share,
        prefer_new_points=prefer_new_points,
        new_point_search=new_point_search,
        stall_basin_share=stall_basin_share,
    )
    if inputs.choices is not None:
        return _batch_from_choices(inputs)
    return _batch_on_domain(inputs)


def _batch_from_choices(inputs: AdaptiveBatchInputs) -> tuple[Tensor, Tensor]:
    r"""The finite-set path: BBKB's engine over the rows of ``inputs.choices``."""
    start = BatchUpperConfidenceBound(
        inputs.model,
        inputs.alpha,
        inputs.posterior_transform,
        inputs.maximize,
        X_pending=inputs.X_pending,
        hallucination="dictionary",  # the engine's update (batch_state)
    )
    return _select_from_choices(
        start,
        inputs.choices.to(inputs.model.compute_dtype),
        inputs.rule,
        max_batch_size=inputs.max_batch_size,
        min_batch_size=inputs.min_batch_size,
        allow_repeats=inputs.allow_repeats,
    )


def _batch_on_domain(inputs: AdaptiveBatchInputs) -> tuple[Tensor, Tensor]:
    r"""The box path (``optimize_acqf`` per step) or a caller's ``step_optimizer``.

    With a ``step_optimizer`` (discrete, mixed or constrained domains) every step
    takes the best point not yet evaluated, pending or in the batch, unless the
    model is sure a repeat is better
    (:func:`~botorch_sketch.optim.new_points.new_point_step`).
    """
    model, rule, seed = inputs.model, inputs.rule, inputs.seed
    dtype = model.compute_dtype
    start, acqf = (
        BatchUpperConfidenceBound(
            model,
            inputs.alpha,
            inputs.posterior_transform,
            inputs.maximize,
            X_pending=inputs.X_pending,
            hallucination=inputs.hallucination,
        )
        for _ in range(2)
    )
    is_local = isinstance(rule, GlobalLocalRule)
    bounds = inputs.bounds.to(dtype)
    reference = None
    if is_local and inputs.reference_points is not None:
        reference = inputs.reference_points.to(dtype)
    elif is_local:
        reference = draw_sobol_samples(
            bounds, n=inputs.num_reference_points, q=1, seed=seed + 7919
        ).squeeze(-2)
    state = _RuleState(start, reference=reference, num_slots=inputs.max_batch_size)
    rule.start(state)
    base = None if inputs.X_pending is None else inputs.X_pending.to(dtype)
    taken = None
    if inputs.step_optimizer is not None and inputs.prefer_new_points:
        taken = observed_inputs(model)
        taken = taken if base is None else torch.cat([taken, base.to(taken)])
    step_options = inputs.options
    if inputs.step_optimizer is None:
        step_options = with_gradient_tolerance(
            inputs.options, model, bounds, inputs.gradient_tolerance
        )
    points: list[Tensor] = []
    values: list[Tensor] = []
    stopped = False  # the rule's stop; the batch may go on up to min_batch_size
    finals = None  # the previous step's local maxima (box path)
    for step in range(inputs.max_batch_size):
        if points:
            batch = torch.stack(points)
            acqf.set_X_pending(batch if base is None else torch.cat([base, batch]))
        if inputs.step_optimizer is None:
            reuse = finals is not None and inputs.reuse_restarts
            maxiter = inputs.restart_maxiter if reuse else None
            x, value, finals = _argmax_box(
                acqf,
                bounds,
                inputs.num_restarts,
                inputs.raw_samples,
                _step_options(step_options, maxiter),
                seed + step,
                starts=_restart_points(finals, bounds, seed + step) if reuse else None,
            )
        elif taken is None:
            x, value = inputs.step_optimizer(acqf, step)
            x, value = x.detach().reshape(-1).to(dtype), value.detach().reshape(())
        else:
            x, value = new_point_step(
                acqf,
                inputs.step_optimizer,
                step,
                taken,
                inputs.new_point_search,
                batch=torch.stack(points).to(taken) if points else None,
            )
            x, value = x.to(dtype), value.to(dtype)
        arm = state.add_point(step, x)
        points.append(x)
        values.append(value)
        if not stopped:
            with torch.no_grad():
                current = float(acqf.rls_variance(x.unsqueeze(0)).squeeze())
            stopped = rule.update(arm, current)
            if is_local and not stopped and getattr(rule, "local", False):
                stopped = _batch_points_bound(state, points, rule) > rule.C
            logger.debug(
                "BBKB step %d: s2_fb=%.4g, s2_t=%.4g, bound=%.4g, stop=%s.",
                step,
                float(state.s2_0[arm]),
                current,
                rule.bound,
                stopped,
            )
        if stopped and len(points) >= inputs.greedy_min:
            break
    logger.info(
        "BBKB batch of %d point(s) (rule %s, C=%g, bound %.4g).",
        len(points),
        type(rule).__name__,
        rule.C,
        rule.bound,
    )
    candidates = torch.stack(points).reshape(-1, inputs.d)
    values = torch.stack(values).reshape(-1)
    num_thompson = inputs.min_batch_size - candidates.shape[0]
    objective = _objective(inputs.posterior_transform, inputs.maximize, dtype, bounds)
    if _is_basin_turn(inputs, max(num_thompson, 0)):
        turn = _basin_points(
            model,
            bounds,
            1,
            objective,
            seed + THOMPSON_SEED_OFFSET + 5,
        )
        if turn:
            logger.info("BBKB batch: its last greedy point is a basin turn.")
            with torch.no_grad():
                turn_value = start(turn[0].unsqueeze(-2)).reshape(-1)
            candidates = torch.cat([candidates[:-1], turn[0]])
            values = torch.cat([values[:-1], turn_value.to(values)])
    if num_thompson > 0:
        share = _fill_basin_share(inputs, objective, num_thompson)
        sampled = thompson_fill_points(
            model,
            bounds,
            num_thompson,
            posterior_transform=inputs.posterior_transform,
            maximize=inputs.maximize,
            seed=seed + THOMPSON_SEED_OFFSET,
            basin_share=share,
        )
        with torch.no_grad():
            sampled_values = start(sampled.unsqueeze(-2)).reshape(-1)
        logger.info("BBKB batch filled with %d Thompson sample(s).", num_thompson)
        candidates = torch.cat([candidates, sampled])
        values = torch.cat([values, sampled_values.to(values)])
    return candidates, values


def thompson_fill_points(
    model: NystromGP,
    bounds: Tensor,
    num_points: int,
    posterior_transform: PosteriorTransform | None = None,
    maximize: bool = True,
    seed: int = 0,
    basin_share: float = DEFAULT_BASIN_SHARE,
) -> Tensor:
    r"""``num_points`` distinct maximisers of independent posterior samples.

    Parallel Thompson sampling (Kandasamy et al., AISTATS 2018) over a finite
    candidate set: ``THOMPSON_SOBOL_POINTS`` scrambled Sobol points of the box
    and, around each of the ``THOMPSON_LOCAL_CENTERS`` training points with the
    best observed outcome, ``THOMPSON_LOCAL_PER_CENTER`` Gaussian steps of
    ``THOMPSON_LOCAL_STEP`` times the box side (clamped to the box). Sample ``j``
    picks its best candidate not already taken
    (:class:`~botorch_sketch.generation.thompson.EmbeddingThompsonSampling`,
    ``O(A m)`` per sample, no ``A x A`` covariance). The first
    :func:`basin_count` points (``floor(basin_share * num_points)``, at least
    one in a fill of ``BASIN_MIN_FILL`` or more) are local steps in other
    basins of the posterior mean than the incumbent's (:func:`_basin_points`):
    the best training point of each such basin takes them in turn, each the
    maximiser of a sample over ``THOMPSON_BASIN_PER_CENTER`` Gaussian steps of
    ``THOMPSON_BASIN_STEP`` times the box side around it (none when the mean has
    one basin over the training points). The samples are drawn from the model's
    posterior as it is: pending points are not hallucinated.

    Args:
        model: A single-output, unbatched ``NystromGP``.
        bounds: ``2 x d`` box bounds (the model's input space).
        num_points: Number of points ``>= 1``.
        posterior_transform: A ``ScalarizedPosteriorTransform`` or ``None``.
        maximize: Whether larger outcomes are better.
        seed: Seed of the candidates and of the samples.
        basin_share: Share in ``[0, 1]`` of the points spent in other basins.

    Returns:
        A ``num_points x d`` tensor of candidates.
    """
    if isinstance(num_points, bool) or not (
        isinstance(num_points, int) and num_points >= 1
    ):
        raise ValueError(f"num_points must be a positive int, got {num_points!r}.")
    check_fraction(basin_share, "basin_share")
    dtype = model.compute_dtype
    bounds = bounds.to(dtype)
    transform = _objective(posterior_transform, maximize, dtype, bounds)
    sobol = draw_sobol_samples(bounds, n=THOMPSON_SOBOL_POINTS, q=1, seed=seed).squeeze(
        -2
    )
    centers = _best_points(model, transform)
    candidates = torch.cat([sobol, _near_points(centers, bounds, seed)])
    picked = _basin_points(
        model,
        bounds,
        basin_count(basin_share, num_points),
        transform,
        seed + 3,
    )
    num_points -= sum(p.shape[0] for p in picked)
    far = _far_mask(sobol, centers, bounds)
    num_far = min(math.floor(THOMPSON_FAR_SHARE * num_points), int(far.sum()))
    if num_far > 0:
        sampler = EmbeddingThompsonSampling(
            model, posterior_transform=transform, replacement=False, seed=seed + 2
        )
        picked.append(sampler(sobol[far], num_samples=num_far))
        keep = torch.ones(candidates.shape[0], dtype=torch.bool, device=far.device)
        keep[: sobol.shape[0]] = ~far  # the far rows not drawn stay out: distinct
        candidates = candidates[keep]
    if num_points > num_far:
        sampler = EmbeddingThompsonSampling(
            model, posterior_transform=transform, replacement=False, seed=seed
        )
        picked.append(sampler(candidates, num_samples=num_points - num_far))
    return torch.cat(picked)


def _objective(
    posterior_transform: PosteriorTransform | None,
    maximize: bool,
    dtype: torch.dtype,
    bounds: Tensor,
) -> ScalarizedPosteriorTransform:
    r"""The scalarised objective to maximise: the caller's weights and offset
    (one weight of 1 without a transform), negated when ``maximize`` is False."""
    sign = 1.0 if maximize else -1.0
    weights = torch.ones(1, dtype=dtype, device=bounds.device)
    offset = 0.0
    if posterior_transform is not None:
        if not isinstance(posterior_transform, ScalarizedPosteriorTransform):
            raise ValueError(
                "thompson_fill supports a ScalarizedPosteriorTransform only, got "
                f"{type(posterior_transform).__name__}."
            )
        weights = posterior_transform.weights.to(weights)
        offset = posterior_transform.offset
    return ScalarizedPosteriorTransform(sign * weights, sign * offset)


def _fill_basin_share(
    inputs: AdaptiveBatchInputs, objective: ScalarizedPosteriorTransform, num_fill: int
) -> float:
    r"""The basin share of this batch's Thompson fill of ``num_fill`` points:
    ``basin_share``, raised to ``stall_basin_share`` while the run is stalled
    (:func:`~botorch_sketch.optim.stall.is_stalled` over the training outcomes in
    the model's order, window :func:`~botorch_sketch.optim.stall.stall_window` of
    ``min_batch_size`` and ``d``, tolerance the likelihood's noise standard
    deviation). ``basin_share = 0`` keeps basin points off, stalled or not; a
    fill that gets no more basin points at the raised share (e.g. 3 points: one
    at either) is not checked. The basin turns of batches without a basin point
    in their fill keep ``basin_share`` (:func:`_is_basin_turn`): one point at a
    time, turns every second batch in a stalled run were slower and no better
    (``benchmarks/results/bbkb_exploration.md`` section 15).
    """
    share, raised = inputs.basin_share, inputs.stall_basin_share
    if share <= 0 or raised is None or raised <= share:
        return share
    if basin_count(raised, num_fill) <= basin_count(share, num_fill):
        return share
    model = inputs.model
    _, scores = _scored_inputs(model, objective)
    noise = getattr(model.likelihood, "noise", None)
    if scores.shape[0] == 0 or noise is None:
        return share
    noise_sd = math.sqrt(float(noise.detach().mean()))
    noise_sd *= float(objective.weights.abs().max())
    window = stall_window(inputs.min_batch_size, inputs.d)
    if not is_stalled(scores, window, noise_sd):
        return share
    logger.info(
        "BBKB batch: no gain over one noise sd in %d evaluations; basin share %g.",
        window,
        raised,
    )
    return raised


def _is_basin_turn(inputs: AdaptiveBatchInputs, num_fill: int) -> bool:
    r"""Whether this batch's last greedy point (the last before a Thompson fill of
    1-2 points, if any) goes to another basin instead (a basin turn).

    Batches whose Thompson fill spends no point in another basin
    (:func:`basin_count` of ``num_fill`` is 0: batches of up to 6 points in the Ax
    strategies, one point at a time above all) take one every
    ``round(1 / basin_share)`` batches instead, so that such a run keeps refining
    the other basins at about the fill's share. The batches are counted by the
    data, ``n // min_batch_size`` (``n`` training points), so the turn needs no
    state and a reloaded run takes the same turns. Only for batches of a fixed
    size (``min_batch_size == max_batch_size``: the rule's own batch keeps every
    point it chose), with ``thompson_fill > 0`` (which the inputs allow on a plain
    box only, :class:`AdaptiveBatchInputs`: the Ax strategies' box path) and
    ``0 < basin_share``.
    """
    share = inputs.basin_share
    if (
        inputs.min_batch_size != inputs.max_batch_size
        or inputs.thompson_fill <= 0
        or share <= 0
        or basin_count(share, num_fill) > 0
    ):
        return False
    period = max(1, round(1.0 / share))
    clock = inputs.model.num_training_points // inputs.min_batch_size
    return clock % period == period - 1


def basin_count(basin_share: float, num_points: int) -> int:
    r"""Points of a ``num_points`` fill spent in other basins:
    ``floor(basin_share num_points)``, at least one when ``basin_share > 0`` and
    ``num_points >= BASIN_MIN_FILL``."""
    count = math.floor(basin_share * num_points)
    if basin_share > 0 and num_points >= BASIN_MIN_FILL:
        count = max(count, 1)
    return count


def _basin_points(
    model: NystromGP,
    bounds: Tensor,
    num_points: int,
    transform: ScalarizedPosteriorTransform,
    seed: int,
) -> list[Tensor]:
    r"""The fill's points in other basins than the incumbent's (``THOMPSON_BASIN_*``).

    Basins of the posterior mean over the training points (hill-valley test,
    :func:`~botorch_sketch.optim.basins.hill_valley_centers`, a dip deeper than
    ``BASIN_TOLERANCE`` x the mean's range over them separates two points).

    Returns:
        A list of ``k_c x d`` tensors (one per centre that gets points; empty
        when ``num_points`` is 0 or no other basin has a training point).
    """
    if num_points < 1:
        return []
    X, _ = _scored_inputs(model, transform)
    if X.shape[0] == 0:
        return []
    score_fn = _mean_scores(model, transform)
    scores = score_fn(X)
    tolerance = BASIN_TOLERANCE * float(scores.max() - scores.min())
    found = hill_valley_centers(
        X, score_fn, THOMPSON_BASIN_CENTERS + 1, tolerance, scores=scores
    )
    centers = X[found[1:]]
    logger.debug("Thompson fill basin centres: %s.", centers.tolist())
    if centers.shape[0] == 0:
        return []
    counts = [0] * centers.shape[0]
    for i in range(num_points):
        counts[i % len(counts)] += 1
    gen = torch.Generator(device=bounds.device).manual_seed(seed)
    picked = []
    for j, (center, count) in enumerate(zip(centers, counts, strict=True)):
        if count == 0:
            continue
        near = _gaussian_steps(
            center.unsqueeze(0),
            bounds,
            THOMPSON_BASIN_PER_CENTER,
            THOMPSON_BASIN_STEP,
            gen,
        )
        sampler = EmbeddingThompsonSampling(
            model, posterior_transform=transform, replacement=False, seed=seed + j
        )
        picked.append(sampler(near, num_samples=count))
    return picked


def _mean_scores(model: NystromGP, transform: ScalarizedPosteriorTransform):
    r"""``Z (k x d) -> k`` posterior-mean scores of the scalarised objective
    (larger is better), for :func:`~botorch_sketch.optim.basins.hill_valley_centers`."""

    def score(Z: Tensor) -> Tensor:
        with torch.no_grad():
            mean = model.posterior_mean(Z.to(model.compute_dtype))
        return mean @ transform.weights.to(mean) + transform.offset

    return score


def _scored_inputs(
    model: NystromGP, transform: ScalarizedPosteriorTransform
) -> tuple[Tensor, Tensor]:
    r"""The training inputs (model input space) and their scalarised outcomes.

    The inputs are taken back through the model's input transform; one without
    ``untransform`` gives none.

    Returns:
        ``(X n x d, scores n)``, larger scores better.
    """
    X = model.train_inputs[0]
    transform_in = getattr(model, "input_transform", None)
    if transform_in is not None:
        try:
            X = transform_in.untransform(X)
        except NotImplementedError:
            return X.new_zeros(0, X.shape[-1]), X.new_zeros(0)
    Y = model.train_targets.reshape(-1, X.shape[-2]).mT  # n x m, model units
    return X, Y.to(X) @ transform.weights.to(X)


def _best_points(model: NystromGP, transform: ScalarizedPosteriorTransform) -> Tensor:
    r"""The ``THOMPSON_LOCAL_CENTERS`` training points with the best outcome.

    The training inputs are taken back to the model's input space through its
    input transform; an input transform without ``untransform`` gives none.

    Returns:
        A ``k x d`` tensor, ``k <= THOMPSON_LOCAL_CENTERS``.
    """
    X, scores = _scored_inputs(model, transform)
    return X[torch.topk(scores, min(THOMPSON_LOCAL_CENTERS, X.shape[-2])).indices]


def _far_mask(points: Tensor, centers: Tensor, bounds: Tensor) -> Tensor:
    r"""Which of ``points`` (``A x d``) lie away from every one of ``centers``.

    Distances are Euclidean in the box scaled to the unit cube; "away" is farther
    than ``THOMPSON_FAR_RADIUS * sqrt(d)``. Without centers every point is away.

    Returns:
        A boolean tensor of ``A`` entries.
    """
    if centers.shape[0] == 0:
        return torch.ones(points.shape[0], dtype=torch.bool, device=points.device)
    scale = (bounds[1] - bounds[0]).clamp_min(torch.finfo(bounds.dtype).tiny)
    dist = torch.cdist(points / scale, centers.to(points) / scale)
    radius = THOMPSON_FAR_RADIUS * math.sqrt(points.shape[-1])
    return dist.min(dim=-1).values > radius


def _near_points(centers: Tensor, bounds: Tensor, seed: int) -> Tensor:
    r"""Gaussian steps around ``centers`` (:func:`thompson_fill_points`):
    ``THOMPSON_LOCAL_PER_CENTER`` steps of ``THOMPSON_LOCAL_STEP`` times the box
    side around each (:func:`_gaussian_steps`).

    Returns:
        A ``k x d`` tensor (``k = centers x THOMPSON_LOCAL_PER_CENTER``).
    """
    gen = torch.Generator(device=bounds.device).manual_seed(seed + 1)
    return _gaussian_steps(
        centers, bounds, THOMPSON_LOCAL_PER_CENTER, THOMPSON_LOCAL_STEP, gen
    )


def _gaussian_steps(
    centers: Tensor,
    bounds: Tensor,
    per_center: int,
    step: float,
    generator: torch.Generator,
) -> Tensor:
    r"""``per_center`` Gaussian steps of sd ``step`` times the box side around
    each of ``centers`` (``k x d``), clamped to the box ``bounds`` (``2 x d``).

    Returns:
        A ``(k per_center) x d`` tensor, the steps of each centre together.
    """
    d = bounds.shape[-1]
    centers = centers.to(bounds)
    steps = torch.randn(
        centers.shape[0],
        per_center,
        d,
        generator=generator,
        dtype=bounds.dtype,
        device=bounds.device,
    )
    near = centers.unsqueeze(1) + step * (bounds[1] - bounds[0]) * steps
    near = torch.minimum(torch.maximum(near, bounds[0]), bounds[1])
    return near.reshape(-1, d)


# ---------------------------------------------------------------------------------
# Rule state: batch-start variances and covariances over a reference set
# ---------------------------------------------------------------------------------


class _RuleState:
    r"""Duck-typed batch-start state for :mod:`botorch_sketch.bbkb.stopping`.

    The box path's counterpart of the engine state of ``choices``. Arms are
    ``n_ref`` reference points (of the local rule: Sobol points of the box, or the
    caller's ``reference_points``) followed by ``num_slots`` slots that receive
    the batch points as they are chosen (:meth:`add_point`). ``s2_0`` holds batch-start
    variances ``sigma~^2_fb`` (RLS units); empty slots hold ``+inf`` so that the
    local rule's ``1 / s2_0`` is zero there (its per-arm bound is then 1 and never
    decides; the batch points are checked by :func:`_batch_points_bound`).

    Attributes:
        s2_0: ``n_ref + num_slots`` batch-start variances (written in place).
    """

    def __init__(
        self,
        start: BatchUpperConfidenceBound,
        reference: Tensor | None,
        num_slots: int,
    ) -> None:
        self._start = start
        self._reference = reference
        self.n_ref = 0 if reference is None else reference.shape[0]
        with torch.no_grad():
            s2_ref = (
                start.rls_variance(reference)
                if reference is not None
                else start.alpha.new_zeros(0)
            )
        slots = start.alpha.new_full((num_slots,), math.inf)
        self.s2_0 = torch.cat([s2_ref.reshape(-1), slots])
        self._points: dict[int, Tensor] = {}

    @property
    def start(self) -> BatchUpperConfidenceBound:
        r"""The batch-start UCB (the caller's pending points only)."""
        return self._start

    def add_point(self, step: int, x: Tensor) -> int:
        r"""Store batch point ``x`` (``d``) in slot ``step``; return its arm index."""
        arm = self.n_ref + step
        with torch.no_grad():
            self.s2_0[arm] = self._start.rls_variance(x.unsqueeze(0)).reshape(())
        self._points[arm] = x
        return arm

    def point(self, arm: int) -> Tensor:
        r"""The point of arm ``arm`` (``d``)."""
        if arm < self.n_ref:
            return self._reference[arm]
        return self._points[arm]

    def covariance_with(self, j: int) -> Tensor:
        r"""Batch-start covariances ``k~_fb(a, x_j)`` (RLS units) for every arm ``a``.

        Zero on the slots (masked by ``1 / s2_0 = 0`` in the local rule).
        """
        out = torch.zeros_like(self.s2_0)
        if self.n_ref > 0:
            with torch.no_grad():
                out[: self.n_ref] = self._start.rls_covariance(
                    self._reference, self.point(j).unsqueeze(0)
                ).squeeze(-1)
        return out


def _batch_points_bound(
    state: _RuleState, points: list[Tensor], rule: StoppingRule
) -> float:
    r"""Lemma 3 bound at the batch points themselves (box reference set extension).

    ``max_i 1 + min(sum_j k~_fb(x_i, x_j)^2 / s2_fb(x_i), G - 1)``, with the same cap
    at the global bound ``G = 1 + sum_j s2_fb(x_j)`` as
    :meth:`~botorch_sketch.bbkb.stopping.GlobalLocalRule.local_ratios`.
    ``O(b^2 (d + r) + b m (d + r))`` for ``b`` batch points.
    """
    X = torch.stack(points)
    with torch.no_grad():
        K = state.start.rls_covariance(X, X)
        s2 = state.start.rls_variance(X).clamp_min(torch.finfo(X.dtype).tiny)
    G = 1.0 + float(s2.sum())
    ratios = torch.clamp(K.pow(2).sum(-1) / s2, max=G - 1.0)
    return 1.0 + float(ratios.max())


# ---------------------------------------------------------------------------------
# One step of the sequential selection
# ---------------------------------------------------------------------------------


def _restart_points(finals: Tensor, bounds: Tensor, seed: int) -> Tensor:
    r"""The previous step's local maxima, perturbed: the next step's starts.

    The next step's hallucinated variance is smallest at the point just chosen,
    yet L-BFGS-B started exactly there often ends there (repeated
    points; at a corner of the box, where the maximisers of a variance-dominated
    UCB sit, the projected gradient keeps it). Each start is moved by a seeded
    Gaussian step of ``RESTART_JITTER`` times the box side per coordinate and
    clamped to the box.

    Args:
        finals: ``num_restarts x 1 x d`` end points of the previous step.
        bounds: ``2 x d`` box bounds.
        seed: Seed of the perturbation.

    Returns:
        ``num_restarts x 1 x d`` starts inside the box.
    """
    gen = torch.Generator(device=finals.device).manual_seed(seed)
    noise = torch.randn(
        finals.shape, generator=gen, dtype=finals.dtype, device=finals.device
    )
    moved = finals + RESTART_JITTER * (bounds[1] - bounds[0]) * noise
    return torch.minimum(torch.maximum(moved, bounds[0]), bounds[1])


def _step_options(
    options: dict[str, Any] | None, maxiter: int | None
) -> dict[str, Any] | None:
    r"""``options`` with ``maxiter`` lowered to ``maxiter`` (``None``: as given)."""
    if maxiter is None:
        return options
    options = dict(options or {})
    options["maxiter"] = min(maxiter, int(options.get("maxiter", maxiter)))
    return options


def _argmax_box(
    acqf: BatchUpperConfidenceBound,
    bounds: Tensor,
    num_restarts: int,
    raw_samples: int,
    options: dict[str, Any] | None,
    seed: int,
    starts: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""``argmax`` over the box by ``optimize_acqf(q=1)``, seeded.

    Args:
        starts: ``num_restarts x 1 x d`` initial conditions (the previous step's
            local maxima); ``None``: BoTorch's initialisation from ``raw_samples``
            Sobol points.

    Returns:
        ``(x, value, finals)``: the best point (``d``), its value (scalar) and every
        restart's end point (``num_restarts x 1 x d``), the next step's starts.
    """
    opts = {**(options or {}), "seed": seed}
    with manual_seed(seed):
        cands, vals = optimize_acqf(
            acqf,
            bounds=bounds,
            q=1,
            num_restarts=num_restarts,
            raw_samples=None if starts is not None else raw_samples,
            options=opts,
            batch_initial_conditions=starts,
            return_best_only=False,
        )
    cands, vals = cands.detach(), vals.detach().reshape(-1)
    best = int(torch.argmax(vals))
    return cands[best].reshape(-1), vals[best].reshape(()), cands


def _select_from_choices(
    start: BatchUpperConfidenceBound,
    choices: Tensor,
    rule: StoppingRule,
    *,
    max_batch_size: int,
    min_batch_size: int,
    allow_repeats: bool,
) -> tuple[Tensor, Tensor]:
    r"""One batch over the rows of ``choices`` by BBKB's finite-arm engine.

    ``start`` (the batch UCB with the caller's pending points) becomes the frozen
    engine state of the rows, and
    :func:`~botorch_sketch.bbkb.selection.select_batch` (pooled exact argmax,
    ``rule``, ``min_batch_size``) picks the arms (module docstring).

    Returns:
        ``(candidates k x d, values k)``: the chosen rows and their UCBs at
        selection (batch so far hallucinated).
    """
    state = start.batch_state(choices)
    records: list[StepRecord] = []
    arms = select_batch(
        state,
        float(start.alpha),
        rule,
        max_batch_size=max_batch_size,
        min_batch_size=min_batch_size,
        allow_repeats=allow_repeats,
        recorder=records.append,
    )
    for rec in records:
        logger.debug(
            "BBKB step %d: row %d, s2_fb=%.4g, s2_t=%.4g, bound=%.4g.",
            rec.position,
            rec.arm,
            float(state.s2_0[rec.arm]),
            rec.variance,
            rec.bound,
        )
    logger.info(
        "BBKB batch of %d row(s) of %d (rule %s, C=%g, bound %.4g).",
        len(arms),
        state.num_arms,
        type(rule).__name__,
        rule.C,
        rule.bound,
    )
    idx = torch.tensor(arms, dtype=torch.long, device=choices.device)
    values = torch.tensor(
        [rec.ucb for rec in records], dtype=choices.dtype, device=choices.device
    )
    return choices[idx], values
