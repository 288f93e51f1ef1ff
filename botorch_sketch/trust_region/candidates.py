r"""Candidates of a trust region: Thompson sampling through a ``NystromGP``.

TuRBO-1 (Eriksson et al., NeurIPS 2019, Sec. 3) on the unit cube ``[0, 1]^d``:

- **Region.** Centre ``c`` (the incumbent), base side ``L`` and ARD lengthscales
  ``l`` (``d``) give per-dimension sides ``w_i L`` with ``w_i = l_i / (prod_j
  l_j)^{1/d}`` (geometric mean 1): ``[c_i - w_i L / 2, c_i + w_i L / 2]``,
  intersected with ``[0, 1]``.
- **Candidates.** ``A`` scrambled Sobol points in the region; each coordinate is
  kept from the Sobol point with probability ``min(1, 20 / d)`` (at least one per
  candidate) and set to ``c_i`` otherwise, so in high dimension the candidates
  move along few coordinates at a time.
- **Batch.** ``q`` Thompson samples of the posterior over the ``A`` candidates,
  each contributing its maximiser, without repeats. Two samplers
  (``thompson``):

  * ``"joint"`` (default): samples of the model's joint posterior over the
    ``A`` candidates (the DTC covariance ``k(x, x') - z(x)^T z(x') + z(x)^T
    A^{-1} z(x')``, the exact GP's with every point in the dictionary;
    ``O(A^2 m + A^3 / 3)`` time,
    :meth:`~botorch_sketch.models.NystromGP.sample_joint`), maximised as
    BoTorch's ``MaxPosteriorSampling``, as TuRBO does on the exact GP.
  * ``"embedding"``: :class:`~botorch_sketch.generation.EmbeddingThompsonSampling`,
    ``O(A m)`` time, no ``A x A`` matrix. Its Nyström residual
    ``k(x, x) - ||z(x)||^2`` is drawn independently per candidate. Inside a
    small region the candidates are close to each other and far (in the
    lengthscale's units) from most data, so that residual is large and, being
    independent, turns the maximum over ``A`` candidates into a maximum of
    noise: the batch spreads over the region instead of following the
    posterior's correlated structure. Use it only where the ``A x A`` joint
    does not fit (a library of many rows); above
    :data:`JOINT_MAX_CANDIDATES` candidates ``"joint"`` falls back to it.

The model is a ``NystromGP`` on the region's data (:func:`fit_region_model`,
fitted from scratch or warm-started from a previous model's sketch), so its cost
stays ``O(n m^2)`` instead of the exact GP's ``O(n^3)``. Its hyperparameters are
fitted, under ``fit_subset_size="device"`` (the default), on the subsample the
device's fit budget affords without the global model's 1,000-point floor
(:func:`region_fit_subset_size`: about 570 points on one CPU thread, thousands
on a GPU): a region is refitted at every call, so its fit, not the sketch,
sets the strategy's cost at thousands of evaluations. The centre is by default the
observed point of largest posterior mean (:func:`incumbent`); ``center`` picks
another row (e.g. the best observation, as TuRBO).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.generation import MaxPosteriorSampling
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
)
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import Kernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_sketch.generation.thompson import EmbeddingThompsonSampling
from botorch_sketch.models.budget import device_facts, device_fit_subset_size
from botorch_sketch.models.dictionary_policy import LeverageScorePolicy
from botorch_sketch.models.fit_options import DEFAULT_FIT_SUBSET_SIZE, DEVICE_SUBSET
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.nystrom_inputs import POLICY_OPTION_DEFAULTS
from botorch_sketch.trust_region.discrete import DiscreteColumns
from botorch_sketch.trust_region.state import TrustRegionState

__all__ = [
    "JOINT_MAX_CANDIDATES",
    "REGION_FIT_TOLERANCE",
    "REGION_MIN_FIT_SUBSET_SIZE",
    "THOMPSON_SAMPLERS",
    "default_num_candidates",
    "fit_region_model",
    "generate_batch",
    "incumbent",
    "perturbed_candidates",
    "region_bounds",
    "region_candidates",
    "region_covar_module",
    "region_fit_subset_size",
    "region_is_exact",
]

#: Expected number of perturbed coordinates per candidate (``min(1, 20 / d)``).
PERTURBED_DIMS = 20.0
#: Thompson samplers of :func:`generate_batch` (module docstring).
THOMPSON_SAMPLERS = ("joint", "embedding")
#: Above this many candidates ``"joint"`` sampling uses ``"embedding"`` instead.
JOINT_MAX_CANDIDATES = 10_000


#: Fewest points a region model's hyperparameters are fitted on under
#: ``fit_subset_size="device"`` (:func:`region_fit_subset_size`).
REGION_MIN_FIT_SUBSET_SIZE = 300


def region_fit_subset_size(X: Tensor) -> int:
    r"""The region model's fit subsample for ``X`` (``n x d``) under
    ``fit_subset_size="device"``: the largest the device holding ``X`` affords in
    the fit's time budget
    (:func:`~botorch_sketch.models.budget.device_fit_subset_size`), at least
    ``min(n, REGION_MIN_FIT_SUBSET_SIZE)``. The global model keeps a floor of
    ``MIN_FIT_SUBSET_SIZE`` (1,000) points; a region, refitted from scratch at
    every call, takes the budget's own size (one CPU thread: 572)."""
    return device_fit_subset_size(
        device_facts(X.device, X.dtype),
        X.shape[-2],
        minimum=REGION_MIN_FIT_SUBSET_SIZE,
    )


#: L-BFGS-B ``ftol`` of a region model's fit (``NystromFitOptions.fit_tolerance``):
#: a region is refitted from scratch at every call, and a tight fit's last
#: iterations mostly move lengthscales along a flat likelihood (one-hot columns,
#: coordinates that barely matter). TuRBO's reference code stops after 50 Adam
#: steps.
REGION_FIT_TOLERANCE = 1e-7


#: Lower bound of the lengthscales of BoTorch's dimension-scaled RBF kernel.
LENGTHSCALE_LOWER_BOUND = 2.5e-2


def region_covar_module(dim: int) -> Kernel:
    r"""The region model's default kernel: BoTorch's dimension-scaled RBF
    (``get_covar_module_with_dim_scaled_prior``, the kernel of ``SingleTaskGP``
    and ``NystromGP``; Hvarfner et al., ICML 2024), with its ``d`` lengthscales
    optimised in log space.

    BoTorch's kernel lets L-BFGS-B move the lengthscales ``l`` themselves
    (``l >= 0.025`` as a box bound). The gradient of the marginal likelihood in
    ``l`` falls like ``l^{-3}``, so a lengthscale that grows large (a
    coordinate that barely matters, such as a one-hot column of a categorical
    parameter, whose two values tell little about it) makes the problem
    ill-conditioned: a region's cold fit then takes 1,000+ L-BFGS-B iterations.
    Here ``l = 0.025 + exp(r)`` and ``r`` is optimised: the same kernel, prior
    (on ``l``), initial values and MAP objective, hence the same optima, reached
    in fewer iterations where a lengthscale is large. Where the likelihood has
    several optima the path can end in another one.

    Args:
        dim: Input dimension ``d``.

    Returns:
        An ``RBFKernel`` with ``d`` ARD lengthscales at the prior's mode.
    """
    kernel = get_covar_module_with_dim_scaled_prior(ard_num_dims=dim)
    initial = kernel.lengthscale.detach().clone()
    kernel.register_constraint(
        "raw_lengthscale",
        GreaterThan(
            LENGTHSCALE_LOWER_BOUND, transform=torch.exp, inv_transform=torch.log
        ),
    )
    kernel.lengthscale = initial
    return kernel


def region_is_exact(X: Tensor) -> bool:
    r"""Whether the region model on ``X`` (``n x d``) uses every point (the exact
    GP) under the ``"device"`` dictionary budget: where the device affords the
    exact posterior
    (:meth:`~botorch_sketch.models.dictionary_policy.LeverageScorePolicy.affords_exact`;
    one CPU thread: up to about 2,900 points at ``d = 10``).

    A region's model is rebuilt at every call and its posterior sampled once
    jointly over the candidates, so there the sketch saves nothing the exact
    posterior would cost; and on a short-lengthscale, noisy objective an
    uncapped leverage-score draw of a few hundred points can miss structure
    that TuRBO's exact GP keeps. :func:`fit_region_model` therefore gives its
    model a policy with ``exact_when_affordable=True``. The global models keep
    the default rule (exact up to ``exact_max_n``, or where a capped draw misses
    its accuracy criterion), since an acquisition function evaluates their
    posterior thousands of times.
    """
    return LeverageScorePolicy().affords_exact(X)


def default_num_candidates(dim: int) -> int:
    r"""TuRBO's candidate count, ``min(5000, max(2000, 200 d))``."""
    return min(5000, max(2000, 200 * dim))


def fit_region_model(
    X: Tensor,
    Y: Tensor,
    warm_start: Any = None,
    seed: int | None = None,
    **model_options: Any,
) -> NystromGP:
    r"""A fitted ``NystromGP`` on the region's data.

    Args:
        X: ``n x d`` inputs in the unit cube.
        Y: ``n x 1`` values (to maximise).
        warm_start: A previous model's ``sketch_state()`` (or its dict) on a
            prefix of the same data; ``None``: fitted from scratch.
        seed: The model's seed.
        **model_options: Further ``NystromGP`` options (``q_bar``,
            ``max_dictionary_size``, ...). ``fit_subset_size="device"`` (also
            the default) is resolved by :func:`region_fit_subset_size`;
            ``fit_tolerance`` defaults to :data:`REGION_FIT_TOLERANCE`; the
            default ``covar_module`` is :func:`region_covar_module`; without a
            ``dictionary`` or ``dictionary_policy``, the policy is a
            ``LeverageScorePolicy`` of the flat options with
            ``exact_when_affordable=True`` (every point where
            :func:`region_is_exact`).

    Returns:
        The fitted model (hyperparameters and dictionary).
    """
    model_options = {"fit_tolerance": REGION_FIT_TOLERANCE, **model_options}
    subset = model_options.get("fit_subset_size", DEFAULT_FIT_SUBSET_SIZE)
    if subset == DEVICE_SUBSET:
        model_options = {**model_options, "fit_subset_size": region_fit_subset_size(X)}
    if model_options.get("covar_module") is None:
        model_options = {
            **model_options,
            "covar_module": region_covar_module(X.shape[-1]).to(X),
        }
    if (
        model_options.get("dictionary") is None
        and model_options.get("dictionary_policy") is None
    ):
        flat = {k: v for k, v in model_options.items() if k in POLICY_OPTION_DEFAULTS}
        model_options = {k: v for k, v in model_options.items() if k not in flat}
        model_options["dictionary_policy"] = LeverageScorePolicy(
            **flat, seed=seed, exact_when_affordable=True
        )
    else:
        model_options = {**model_options, "seed": seed}
    model = NystromGP(X, Y, warm_start=warm_start, **model_options)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def incumbent(model: NystromGP, X: Tensor) -> tuple[int, float]:
    r"""Index and posterior mean of the row of ``X`` (``n x d``) of largest
    posterior mean (single-output model, maximisation)."""
    if X.dim() != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty n x d tensor, got {tuple(X.shape)}.")
    with torch.no_grad():
        mean = model.posterior_mean(X).reshape(-1)
    index = int(mean.argmax())
    return index, float(mean[index])


def lengthscales(model: NystromGP) -> Tensor:
    r"""The model's ARD lengthscales as a ``d`` vector (one shared value repeated)."""
    kernel = model.covar_module
    kernel = getattr(kernel, "base_kernel", kernel)
    ls = kernel.lengthscale.detach().reshape(-1)
    return ls.expand(model.input_dim) if ls.numel() == 1 else ls


def region_bounds(center: Tensor, lengthscales: Tensor, length: float) -> Tensor:
    r"""``2 x d`` bounds of the region, intersected with the unit cube.

    Args:
        center: ``d`` centre in ``[0, 1]^d``.
        lengthscales: ``d`` positive ARD lengthscales.
        length: Base side length ``L > 0``.
    """
    if center.dim() != 1 or lengthscales.shape != center.shape:
        raise ValueError(
            f"center and lengthscales must be d vectors, got {tuple(center.shape)} "
            f"and {tuple(lengthscales.shape)}."
        )
    if not bool((lengthscales > 0).all()) or not length > 0:
        raise ValueError("lengthscales and length must be positive.")
    half = half_sides(lengthscales.to(center), length)
    lower = (center - half).clamp(0.0, 1.0)
    upper = (center + half).clamp(0.0, 1.0)
    return torch.stack([lower, upper])


def half_sides(lengthscales: Tensor, length: float) -> Tensor:
    r"""``w_i L / 2`` with ``w = l / (prod l)^{1/d}`` (a ``d`` vector)."""
    return lengthscales / lengthscales.log().mean().exp() * length / 2.0


def perturbed_candidates(
    center: Tensor, bounds: Tensor, num: int, seed: int | None = None
) -> Tensor:
    r"""``num x d`` Sobol candidates in ``bounds``, perturbed from ``center`` in a
    random subset of coordinates (probability ``min(1, 20 / d)``, at least one)."""
    if not isinstance(num, int) or isinstance(num, bool) or num < 1:
        raise ValueError(f"num must be a positive int, got {num!r}.")
    d = center.shape[-1]
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    sobol = SobolEngine(d, scramble=True, seed=seed).draw(num).to(center)
    points = bounds[0] + (bounds[1] - bounds[0]) * sobol
    prob = min(1.0, PERTURBED_DIMS / d)
    mask = torch.rand(num, d, generator=generator, dtype=torch.float64) <= prob
    empty = ~mask.any(-1)
    if bool(empty.any()):
        cols = torch.randint(d, (int(empty.sum()),), generator=generator)
        mask[empty.nonzero().squeeze(-1), cols] = True
    mask = mask.to(center.device)
    return torch.where(mask, points, center.expand_as(points))


def generate_batch(
    model: NystromGP,
    state: TrustRegionState,
    X: Tensor,
    q: int,
    num_candidates: int | None = None,
    seed: int | None = None,
    library: Tensor | None = None,
    feasible: Callable[[Tensor], Tensor] | None = None,
    thompson: str = "joint",
    center: int | None = None,
    discrete: DiscreteColumns | None = None,
) -> Tensor:
    r"""``q`` new points in the trust region by Thompson sampling (maximisation).

    Args:
        model: A fitted single-output ``NystromGP`` on the region's data (unit-cube
            inputs; values to maximise).
        state: The region's state (its side length ``L``).
        X: ``n x d`` observed inputs of the region (the centre is the one of
            largest posterior mean).
        q: Number of points.
        num_candidates: ``A`` (default :func:`default_num_candidates`).
        seed: Seed of the candidates and of the samples.
        library: Optional ``A x d`` finite set (unit cube) to choose from instead
            of perturbed Sobol points: its rows inside the region, or, when fewer
            than ``q`` are, the ``q`` rows nearest the centre (lengthscale-scaled
            max-distance).
        feasible: Optional ``A x d -> A`` boolean mask of allowed candidates
            (e.g. parameter constraints, rows not taken yet).
        thompson: ``"joint"`` or ``"embedding"`` (module docstring).
        center: Row of ``X`` to centre the region on (``None``: the row of
            largest posterior mean, :func:`incumbent`).
        discrete: Optional integer and one-hot columns
            (:class:`~botorch_sketch.trust_region.DiscreteColumns`): the perturbed
            candidates are projected onto them and deduplicated before the
            Thompson sample, so the batch is chosen among the points that run.

    Returns:
        A ``k x d`` tensor, ``k = min(q, allowed candidates)``, in the region
        intersected with ``[0, 1]^d`` (or the nearest library rows; with
        ``discrete``, a discrete column's nearest allowed value to a point in
        the region); ``0 x d`` when no candidate is allowed.
    """
    if not isinstance(q, int) or isinstance(q, bool) or q < 1:
        raise ValueError(f"q must be a positive int, got {q!r}.")
    if model.num_outputs != 1:
        raise ValueError("generate_batch needs a single-output model.")
    if thompson not in THOMPSON_SAMPLERS:
        raise ValueError(
            f"thompson must be one of {THOMPSON_SAMPLERS}, got {thompson!r}."
        )
    if center is None:
        index, _ = incumbent(model, X)
    elif isinstance(center, bool) or not isinstance(center, int):
        raise TypeError(f"center must be an int row index, got {center!r}.")
    elif not -X.shape[0] <= center < X.shape[0]:
        raise ValueError(f"center={center} is not a row of the {X.shape[0]} rows.")
    else:
        index = center
    center = X[index].to(torch.float64)
    if library is None:
        num = num_candidates or default_num_candidates(X.shape[-1])
        candidates = region_candidates(
            center, lengthscales(model), state.length, max(num, q), q,
            seed=seed, discrete=discrete, feasible=feasible,
        )  # fmt: skip
    else:
        candidates = library.to(center)
        if feasible is not None:
            candidates = candidates[feasible(candidates)]
    if library is not None and candidates.shape[0] > 0:
        half = half_sides(lengthscales(model).to(center), state.length)
        gap = ((candidates - center) / half).abs().amax(-1)
        inside = int((gap <= 1.0 + 1e-12).sum())
        keep = gap.argsort()[: max(inside, q)]
        candidates = candidates[keep]
    k = min(q, candidates.shape[0])
    if k == 0:
        return candidates
    if thompson == "joint" and candidates.shape[0] <= JOINT_MAX_CANDIDATES:
        return joint_thompson(model, candidates, k, seed=seed)
    sampler = EmbeddingThompsonSampling(model, replacement=False, seed=seed)
    return sampler(candidates, num_samples=k)


def region_candidates(
    center: Tensor,
    lengthscales: Tensor,
    length: float,
    num: int,
    q: int,
    seed: int | None = None,
    discrete: DiscreteColumns | None = None,
    feasible: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    r"""Perturbed Sobol candidates of the region (:func:`perturbed_candidates`),
    projected onto ``discrete`` columns and deduplicated, the ``feasible`` ones.

    On a space whose columns are all discrete a small region can hold fewer than
    ``q`` allowed configurations (all of them evaluated, or one rounding to the
    centre); then the candidates are drawn again from the region with its side
    doubled, until ``q`` are allowed or the region covers the cube. The region's
    state is not changed. Without ``discrete`` there is one draw.

    Args:
        center: ``d`` centre in ``[0, 1]^d``.
        lengthscales: ``d`` ARD lengthscales (the region's shape).
        length: Base side length ``L``.
        num: Candidates per draw.
        q: Allowed candidates wanted.
        seed: Seed of every draw.
        discrete: Optional discrete columns to project onto.
        feasible: Optional ``A x d -> A`` mask of allowed candidates.

    Returns:
        An ``A' x d`` tensor (``A' <= num``; may be fewer than ``q``).
    """
    while True:
        bounds = region_bounds(center, lengthscales, length)
        candidates = perturbed_candidates(center, bounds, num, seed=seed)
        if discrete is not None:
            candidates = discrete.unique_projection(candidates)
        if feasible is not None:
            candidates = candidates[feasible(candidates)]
        covers = bool((bounds[0] <= 0.0).all() and (bounds[1] >= 1.0).all())
        if discrete is None or candidates.shape[0] >= q or covers:
            return candidates
        length *= 2.0


def joint_thompson(
    model: NystromGP, candidates: Tensor, k: int, seed: int | None = None
) -> Tensor:
    r"""``k`` distinct maximisers of ``k`` samples of the joint posterior over the
    ``A x d`` ``candidates``, seeded: the samples of
    :meth:`~botorch_sketch.models.NystromGP.sample_joint` (exact, the ``A x A``
    covariance's lower triangle formed in place), maximised without repeats by
    BoTorch's ``MaxPosteriorSampling.maximize_samples``."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    samples = model.sample_joint(candidates, k, generator=generator)
    sampler = MaxPosteriorSampling(model=model, replacement=False)
    return sampler.maximize_samples(candidates, samples.to(candidates), k)
