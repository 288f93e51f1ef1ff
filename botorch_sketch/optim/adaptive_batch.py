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
the price of the rule's guarantee for those extra points (an extension, measured
in ``benchmarks/results/ax_workers.md``). With ``thompson_fill = f > 0`` (box
only) the last ``floor(f (min_batch_size - 1))`` points of a filled batch (fewer
when the rule's own batch is longer) are instead the maximisers of independent
posterior samples (parallel Thompson sampling, Kandasamy et al., AISTATS 2018)
over a candidate set
(:func:`thompson_fill_points`). On noisy Hartmann6 with 50-point batches, half
of the fill by Thompson sampling reached the global basin within 505 trials on 8
of 12 seeds, as the greedy sequence alone did, but sooner (8 against 4 seeds by
trial 255) and at 0.7x the time; with 8 workers over 8 seeds its simple regret
was 0.078 against 0.185 (``benchmarks/results/bbkb_exploration.md``, section 8).
The Ax strategies use ``f = 0.5``; here the default is ``0``.

Domains:

- a box (``bounds``): each point by ``optimize_acqf(q=1)`` (multi-start L-BFGS-B);
  lazy UCB evaluation does not apply (spec Sec. 11.4). Its continuous
  counterpart here: the first point starts from ``raw_samples`` Sobol points,
  each later one from the previous step's local maxima, perturbed
  (``reuse_restarts``): a 50-point batch at ``n = 4,000`` on Hartmann6 took
  2.3-2.5 s instead of 5.3-6.1 s of CPU, with a summed UCB 1-4 % lower.
  Pending points (the caller's and the batch so far) are hallucinated by
  conditioning the batch-start posterior on them (``hallucination="full"``,
  GP-BUCB's update, Nyström residual included;
  :mod:`botorch_sketch.acquisition.bbkb`). The paper's update through
  the frozen embedding (``"dictionary"``) leaves the variance outside the
  dictionary's span untouched: a batch filled past the rule's stop
  (``min_batch_size``) early in a run, or next to pending trials of other
  workers, was one point repeated (issue 15,
  ``benchmarks/results/bbkb_exploration.md``);
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
from collections.abc import Callable
from typing import Any

import torch
from botorch.acquisition.objective import (
    PosteriorTransform,
    ScalarizedPosteriorTransform,
)
from botorch.optim.optimize import optimize_acqf
from botorch.utils.sampling import draw_sobol_samples, manual_seed
from torch import Tensor

from botorch_sketch.acquisition.bbkb import HALLUCINATIONS, BatchUpperConfidenceBound
from botorch_sketch.bbkb.selection import StepRecord, select_batch
from botorch_sketch.bbkb.stopping import GlobalLocalRule, StoppingRule, make_rule
from botorch_sketch.generation.thompson import EmbeddingThompsonSampling
from botorch_sketch.models.nystrom import NystromGP

logger = logging.getLogger(__name__)

__all__ = ["StepOptimizer", "optimize_acqf_adaptive_batch", "thompson_fill_points"]

#: ``step_optimizer(acqf, step) -> (x, value)``: one greedy step over the domain.
StepOptimizer = Callable[[BatchUpperConfidenceBound, int], tuple[Tensor, Tensor]]

#: Default threshold ``C~`` when ``rule`` is given by name (spec Sec. 5.4).
DEFAULT_C = 2.0

#: Perturbation of reused restarts, as a fraction of each box side
#: (``reuse_restarts``; 0.02 and 0.1 measured, 0.1 kept: closer summed UCB).
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
    hallucination: str = "full",
    reuse_restarts: bool = True,
    thompson_fill: float = 0.0,
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
        thompson_fill: Fraction ``f in [0, 1]`` of the points that
            ``min_batch_size`` adds past the rule's stop that are drawn by
            Thompson sampling (:func:`thompson_fill_points`) instead of the
            greedy sequence: the greedy sequence runs until the rule stops and it
            has at least ``min_batch_size - floor(f (min_batch_size - 1))``
            points, and Thompson samples fill the batch to ``min_batch_size``.
            Box only, without ``step_optimizer`` (an error otherwise when
            ``f > 0``). ``0`` (default): the greedy sequence alone.
        hallucination: On a box, how pending points enter the variance:
            ``"full"`` (the batch-start posterior conditioned on them) or
            ``"dictionary"`` (through the frozen embedding, the paper's and the
            finite-set engine's update); see
            :class:`~botorch_sketch.acquisition.BatchUpperConfidenceBound`.

    Returns:
        ``(candidates, acq_values)``: a ``k x d`` tensor of points in selection order
        and the ``k`` UCB values at selection (with the batch so far hallucinated;
        for Thompson-sampling points the batch-start UCB),
        ``1 <= k <= max_batch_size``.
    """
    flags = {"allow_repeats": allow_repeats, "reuse_restarts": reuse_restarts}
    for name, flag in flags.items():
        if not isinstance(flag, bool):  # e.g. the string "False" would be truthy
            raise ValueError(f"{name} must be a bool, got {flag!r}.")
    rule = _resolve_rule(rule, C)
    d = _validate_inputs(
        model, bounds, max_batch_size, X_pending, choices, allow_repeats, num_restarts
    )
    if hallucination not in HALLUCINATIONS:  # checked on the choices path too
        raise ValueError(
            f"hallucination must be one of {HALLUCINATIONS}, got {hallucination!r}."
        )
    if isinstance(min_batch_size, bool) or not (
        isinstance(min_batch_size, int) and 1 <= min_batch_size <= max_batch_size
    ):
        raise ValueError(
            "min_batch_size must be an int in [1, max_batch_size = "
            f"{max_batch_size}], got {min_batch_size!r}."
        )
    if isinstance(thompson_fill, bool) or not (
        isinstance(thompson_fill, int | float) and 0.0 <= thompson_fill <= 1.0
    ):
        raise ValueError(
            f"thompson_fill must be a number in [0, 1], got {thompson_fill!r}."
        )
    if thompson_fill > 0 and (choices is not None or step_optimizer is not None):
        raise ValueError(
            "thompson_fill > 0 needs a box domain (bounds) without choices or "
            "step_optimizer; got "
            + ("choices." if choices is not None else "a step_optimizer.")
        )
    # The greedy sequence's own floor; Thompson samples fill the rest.
    greedy_min = min_batch_size - math.floor(thompson_fill * (min_batch_size - 1))
    if not (isinstance(num_reference_points, int) and num_reference_points >= 1):
        raise ValueError(
            "num_reference_points must be a positive int, got "
            f"{num_reference_points!r}."
        )
    dtype = model.compute_dtype
    if choices is not None:
        start = BatchUpperConfidenceBound(
            model, alpha, posterior_transform, maximize, X_pending=X_pending
        )
        return _select_from_choices(
            start,
            choices.to(dtype),
            rule,
            max_batch_size=max_batch_size,
            min_batch_size=min_batch_size,
            allow_repeats=allow_repeats,
        )
    if seed is None:
        seed = int(torch.randint(2**31 - 1, (1,)))
    start, acqf = (
        BatchUpperConfidenceBound(
            model,
            alpha,
            posterior_transform,
            maximize,
            X_pending=X_pending,
            hallucination=hallucination,
        )
        for _ in range(2)
    )
    is_local = isinstance(rule, GlobalLocalRule)
    bounds = bounds.to(dtype)
    reference = None
    if is_local and reference_points is not None:
        reference = reference_points.to(dtype)
    elif is_local:
        reference = draw_sobol_samples(
            bounds, n=num_reference_points, q=1, seed=seed + 7919
        ).squeeze(-2)
    state = _RuleState(start, reference=reference, num_slots=max_batch_size)
    rule.start(state)
    base = None if X_pending is None else X_pending.to(dtype)
    points: list[Tensor] = []
    values: list[Tensor] = []
    stopped = False  # the rule's stop; the batch may go on up to min_batch_size
    finals = None  # the previous step's local maxima (box path)
    for step in range(max_batch_size):
        if points:
            batch = torch.stack(points)
            acqf.set_X_pending(batch if base is None else torch.cat([base, batch]))
        if step_optimizer is None:
            x, value, finals = _optimize_box(
                acqf,
                bounds,
                num_restarts,
                raw_samples,
                options,
                seed + step,
                starts=None
                if finals is None or not reuse_restarts
                else _restart_points(finals, bounds, seed + step),
            )
        else:
            x, value = step_optimizer(acqf, step)
            x, value = x.detach().reshape(-1).to(dtype), value.detach().reshape(())
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
        if stopped and len(points) >= greedy_min:
            break
    logger.info(
        "BBKB batch of %d point(s) (rule %s, C=%g, bound %.4g).",
        len(points),
        type(rule).__name__,
        rule.C,
        rule.bound,
    )
    candidates = torch.stack(points).reshape(-1, d)
    values = torch.stack(values).reshape(-1)
    num_thompson = min_batch_size - candidates.shape[0]
    if num_thompson > 0:
        sampled = thompson_fill_points(
            model,
            bounds,
            num_thompson,
            posterior_transform=posterior_transform,
            maximize=maximize,
            seed=seed + THOMPSON_SEED_OFFSET,
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
) -> Tensor:
    r"""``num_points`` distinct maximisers of independent posterior samples.

    Parallel Thompson sampling (Kandasamy et al., AISTATS 2018) over a finite
    candidate set: ``THOMPSON_SOBOL_POINTS`` scrambled Sobol points of the box
    and, around each of the ``THOMPSON_LOCAL_CENTERS`` training points with the
    best observed outcome, ``THOMPSON_LOCAL_PER_CENTER`` Gaussian steps of
    ``THOMPSON_LOCAL_STEP`` times the box side (clamped to the box). Sample ``j``
    picks its best candidate not already taken
    (:class:`~botorch_sketch.generation.thompson.EmbeddingThompsonSampling`,
    ``O(A m)`` per sample, no ``A x A`` covariance). The samples are drawn from
    the model's posterior as it is: pending points are not hallucinated.

    Args:
        model: A single-output, unbatched ``NystromGP``.
        bounds: ``2 x d`` box bounds (the model's input space).
        num_points: Number of points ``>= 1``.
        posterior_transform: A ``ScalarizedPosteriorTransform`` or ``None``.
        maximize: Whether larger outcomes are better.
        seed: Seed of the candidates and of the samples.

    Returns:
        A ``num_points x d`` tensor of candidates.
    """
    if isinstance(num_points, bool) or not (
        isinstance(num_points, int) and num_points >= 1
    ):
        raise ValueError(f"num_points must be a positive int, got {num_points!r}.")
    dtype = model.compute_dtype
    bounds = bounds.to(dtype)
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
    transform = ScalarizedPosteriorTransform(sign * weights, sign * offset)
    sobol = draw_sobol_samples(bounds, n=THOMPSON_SOBOL_POINTS, q=1, seed=seed).squeeze(
        -2
    )
    candidates = torch.cat([sobol, _near_best_points(model, bounds, transform, seed)])
    sampler = EmbeddingThompsonSampling(
        model, posterior_transform=transform, replacement=False, seed=seed
    )
    return sampler(candidates, num_samples=num_points)


def _near_best_points(
    model: NystromGP,
    bounds: Tensor,
    transform: ScalarizedPosteriorTransform,
    seed: int,
) -> Tensor:
    r"""Gaussian steps around the best training points (:func:`thompson_fill_points`).

    The training inputs are taken back to the model's input space through its
    input transform; an input transform without ``untransform`` gives no local
    candidates (the Sobol points remain).

    Returns:
        A ``k x d`` tensor (``k = THOMPSON_LOCAL_CENTERS x
        THOMPSON_LOCAL_PER_CENTER`` at most).
    """
    X = model.train_inputs[0]
    transform_in = getattr(model, "input_transform", None)
    if transform_in is not None:
        try:
            X = transform_in.untransform(X)
        except NotImplementedError:
            return bounds.new_zeros(0, bounds.shape[-1])
    Y = model.train_targets.reshape(-1, X.shape[-2]).mT  # n x m, model units
    scores = Y.to(X) @ transform.weights.to(X)
    centers = X[torch.topk(scores, min(THOMPSON_LOCAL_CENTERS, X.shape[-2])).indices]
    gen = torch.Generator(device=X.device).manual_seed(seed + 1)
    steps = torch.randn(
        centers.shape[0],
        THOMPSON_LOCAL_PER_CENTER,
        X.shape[-1],
        generator=gen,
        dtype=X.dtype,
        device=X.device,
    )
    near = centers.unsqueeze(1) + THOMPSON_LOCAL_STEP * (bounds[1] - bounds[0]) * steps
    near = torch.minimum(torch.maximum(near, bounds[0]), bounds[1])
    return near.reshape(-1, X.shape[-1])


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
        K = state._start.rls_covariance(X, X)
        s2 = state._start.rls_variance(X).clamp_min(torch.finfo(X.dtype).tiny)
    G = 1.0 + float(s2.sum())
    ratios = torch.clamp(K.pow(2).sum(-1) / s2, max=G - 1.0)
    return 1.0 + float(ratios.max())


# ---------------------------------------------------------------------------------
# One step of the sequential selection
# ---------------------------------------------------------------------------------


def _restart_points(finals: Tensor, bounds: Tensor, seed: int) -> Tensor:
    r"""The previous step's local maxima, perturbed: the next step's starts.

    The next step's hallucinated variance is smallest at the point just chosen,
    yet L-BFGS-B started exactly there often ends there (measured: repeated
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


def _optimize_box(
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


# ---------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------


def _resolve_rule(rule: StoppingRule | str, C: float | None) -> StoppingRule:
    if isinstance(rule, StoppingRule):
        if C is not None and float(C) != rule.C:
            raise ValueError(
                f"C={C} conflicts with the threshold C={rule.C} of the given rule."
            )
        return rule
    if not isinstance(rule, str):
        raise ValueError(
            f"rule must be a StoppingRule or a rule name, got {type(rule).__name__}."
        )
    return make_rule(rule, DEFAULT_C if C is None else C)


def _validate_inputs(
    model: NystromGP,
    bounds: Tensor | None,
    max_batch_size: int,
    X_pending: Tensor | None,
    choices: Tensor | None,
    allow_repeats: bool,
    num_restarts: int,
) -> int:
    r"""Raise ``ValueError`` naming the problem; return the input dimension ``d``."""
    if isinstance(max_batch_size, bool) or not (
        isinstance(max_batch_size, int) and max_batch_size >= 1
    ):
        raise ValueError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}.")
    d = model.input_dim
    if bounds is None and choices is None:
        raise ValueError("give either `bounds` (a box) or `choices` (a finite set).")
    if bounds is not None:
        if bounds.dim() != 2 or bounds.shape[0] != 2:
            raise ValueError(f"bounds must be 2 x d, got {tuple(bounds.shape)}.")
        if bounds.shape[-1] != d:
            raise ValueError(
                f"bounds has dimension {bounds.shape[-1]} but the model has d={d}."
            )
        if not bool(torch.isfinite(bounds).all()) or bool(
            (bounds[0] > bounds[1]).any()
        ):
            raise ValueError("bounds must be finite with lower <= upper.")
    if choices is not None:
        if choices.dim() != 2:
            raise ValueError(f"choices must be A x d, got {tuple(choices.shape)}.")
        if choices.shape[0] == 0:
            raise ValueError("choices is empty.")
        if choices.shape[-1] != d:
            raise ValueError(
                f"choices has dimension {choices.shape[-1]} but the model has d={d}."
            )
        if bounds is not None and choices.shape[-1] != bounds.shape[-1]:
            raise ValueError("bounds and choices have different dimensions.")
        if not bool(torch.isfinite(choices).all()):
            raise ValueError("choices contains NaN or Inf.")
    elif not allow_repeats:
        raise ValueError(
            "allow_repeats=False needs a finite `choices` set; optimize_acqf on a box "
            "cannot exclude points."
        )
    else:
        if not (isinstance(num_restarts, int) and num_restarts >= 1):
            raise ValueError(f"num_restarts must be an int >= 1, got {num_restarts!r}.")
    if X_pending is not None and (X_pending.dim() != 2 or X_pending.shape[-1] != d):
        raise ValueError(
            f"X_pending must be p x d with d={d}, got {tuple(X_pending.shape)}."
        )
    return d
