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
  each contributing its maximiser, without repeats. Three samplers
  (``thompson``), and ``"auto"``: ``"joint"`` where the device forms and
  factors the ``A x A`` covariance of a model of ``m`` dictionary points in
  :data:`JOINT_AUTO_SECONDS` (:func:`joint_is_costly`), ``"pathwise"`` beyond:

  * ``"joint"``: samples of the model's joint posterior over the
    ``A`` candidates (the DTC covariance ``k(x, x') - z(x)^T z(x') + z(x)^T
    A^{-1} z(x')``, the exact GP's with every point in the dictionary;
    ``O(A m^2 + A^2 m / 2 + A^3 / 3)`` time,
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
  * ``"pathwise"``: where the model is the exact GP (every point in its
    dictionary), samples by Matheron's rule
    (:meth:`~botorch_sketch.models.NystromGP.sample_pathwise`: a random
    Fourier feature prior path updated exactly by the data), ``O(A n + A F)``
    time, no ``A x A`` matrix; the prior's correlations carry the features'
    ``O(1 / sqrt(F))`` error. Elsewhere it is ``"joint"``.

The model is a ``NystromGP`` on the region's data
(:mod:`~botorch_sketch.trust_region.model`); the centre is by default the
observed point of largest posterior mean
(:func:`~botorch_sketch.trust_region.model.incumbent`); ``center`` picks another
row (e.g. the best observation, as TuRBO).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from botorch.generation import MaxPosteriorSampling
from torch import Tensor
from torch.quasirandom import SobolEngine

from botorch_sketch.generation.thompson import EmbeddingThompsonSampling
from botorch_sketch.models.budget import device_facts
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.validation import check_choice
from botorch_sketch.optim.new_points import matches_any
from botorch_sketch.trust_region.discrete import DiscreteColumns
from botorch_sketch.trust_region.model import incumbent, lengthscales
from botorch_sketch.trust_region.state import TrustRegionState

__all__ = [
    "JOINT_AUTO_SECONDS",
    "JOINT_MAX_CANDIDATES",
    "THOMPSON_SAMPLERS",
    "allocate_across_regions",
    "batch_candidates",
    "default_num_candidates",
    "generate_batch",
    "joint_is_costly",
    "perturbed_candidates",
    "region_bounds",
    "region_candidates",
    "resolve_sampler",
    "thompson_samples",
]

#: Expected number of perturbed coordinates per candidate (``min(1, 20 / d)``).
PERTURBED_DIMS = 20.0
#: Thompson samplers of :func:`generate_batch` (module docstring).
THOMPSON_SAMPLERS = ("auto", "joint", "embedding", "pathwise")
#: Seconds of the ``A x A`` factor (``A^3 / 3`` flops at the device's rate,
#: :func:`~botorch_sketch.models.budget.device_facts`) above which ``"auto"``
#: samples by Matheron's rule (:func:`joint_is_costly`).
JOINT_AUTO_SECONDS = 0.2
#: Above this many candidates ``"joint"`` sampling uses ``"embedding"`` instead.
JOINT_MAX_CANDIDATES = 10_000


def default_num_candidates(dim: int) -> int:
    r"""TuRBO's candidate count, ``min(5000, max(2000, 200 d))``."""
    return min(5000, max(2000, 200 * dim))


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
    thompson: str = "auto",
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
        thompson: ``"auto"``, ``"joint"``, ``"embedding"`` or ``"pathwise"``
            (module docstring).
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
    check_choice(thompson, THOMPSON_SAMPLERS, "thompson")
    candidates = batch_candidates(
        model, state, X, q, num_candidates=num_candidates, seed=seed,
        library=library, feasible=feasible, center=center, discrete=discrete,
    )  # fmt: skip
    k = min(q, candidates.shape[0])
    if k == 0:
        return candidates
    thompson = resolve_sampler(model, candidates, thompson)
    if thompson == "pathwise":
        return joint_thompson(model, candidates, k, seed=seed, pathwise=True)
    if thompson == "joint":
        return joint_thompson(model, candidates, k, seed=seed)
    sampler = EmbeddingThompsonSampling(model, replacement=False, seed=seed)
    return sampler(candidates, num_samples=k)


def batch_candidates(
    model: NystromGP,
    state: TrustRegionState,
    X: Tensor,
    q: int,
    num_candidates: int | None = None,
    seed: int | None = None,
    library: Tensor | None = None,
    feasible: Callable[[Tensor], Tensor] | None = None,
    center: int | None = None,
    discrete: DiscreteColumns | None = None,
) -> Tensor:
    r"""The ``A x d`` candidates :func:`generate_batch` samples over (same
    arguments): perturbed Sobol points of the region around ``X[center]`` (or
    the library rows in the region, at least the ``q`` nearest), the allowed
    ones only."""
    if not isinstance(q, int) or isinstance(q, bool) or q < 1:
        raise ValueError(f"q must be a positive int, got {q!r}.")
    if model.num_outputs != 1:
        raise ValueError("generate_batch needs a single-output model.")
    if center is None:
        index, _ = incumbent(model, X)
    elif isinstance(center, bool) or not isinstance(center, int):
        raise TypeError(f"center must be an int row index, got {center!r}.")
    elif not -X.shape[0] <= center < X.shape[0]:
        raise ValueError(f"center={center} is not a row of the {X.shape[0]} rows.")
    else:
        index = center
    centre = X[index].to(torch.float64)
    if library is None:
        num = num_candidates or default_num_candidates(X.shape[-1])
        return region_candidates(
            centre, lengthscales(model), state.length, max(num, q), q,
            seed=seed, discrete=discrete, feasible=feasible,
        )  # fmt: skip
    candidates = library.to(centre)
    if feasible is not None:
        candidates = candidates[feasible(candidates)]
    if candidates.shape[0] > 0:
        half = half_sides(lengthscales(model).to(centre), state.length)
        gap = ((candidates - centre) / half).abs().amax(-1)
        inside = int((gap <= 1.0 + 1e-12).sum())
        candidates = candidates[gap.argsort()[: max(inside, q)]]
    return candidates


def resolve_sampler(model: NystromGP, candidates: Tensor, thompson: str) -> str:
    r"""The sampler ``thompson`` stands for at these ``A x d`` candidates:
    ``"auto"`` is ``"pathwise"`` where :func:`joint_is_costly`, else
    ``"joint"``; ``"pathwise"`` needs an exact model (else ``"joint"``); above
    :data:`JOINT_MAX_CANDIDATES` a ``"joint"`` one is ``"embedding"``."""
    if thompson == "auto":
        costly = joint_is_costly(candidates, rank=model.dictionary_size)
        thompson = "pathwise" if costly else "joint"
    if thompson == "pathwise" and model.is_exact:
        return "pathwise"
    if thompson != "embedding" and candidates.shape[0] <= JOINT_MAX_CANDIDATES:
        return "joint"
    return "embedding"


def thompson_samples(
    model: NystromGP,
    candidates: Tensor,
    num_samples: int,
    seed: int | None = None,
    thompson: str = "auto",
) -> Tensor:
    r"""``num_samples x A`` posterior samples of the latent function at the
    ``A x d`` candidates, in the model's outcome units (maximisation), from
    the sampler :func:`resolve_sampler` picks: joint
    (:meth:`~botorch_sketch.models.NystromGP.sample_joint`), by Matheron's rule
    (``sample_pathwise``) or with the Nyström residual drawn per candidate
    (``sample_latent``). Samples of different models in the same units are
    comparable, which is what :func:`allocate_across_regions` needs."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    sampler = {
        "joint": model.sample_joint,
        "pathwise": model.sample_pathwise,
        "embedding": model.sample_latent,
    }[resolve_sampler(model, candidates, thompson)]
    return sampler(candidates, num_samples, generator=generator).squeeze(-1)


def allocate_across_regions(
    candidates: Sequence[Tensor], samples: Sequence[Tensor], k: int
) -> list[tuple[int, int]]:
    r"""TuRBO-m's batch over ``R`` regions (Eriksson et al., NeurIPS 2019, Sec. 3):
    the ``i``-th point is the maximiser of the ``i``-th Thompson samples over
    every region's candidates together, a point chosen before excluded.

    Args:
        candidates: ``R`` tensors ``A_r x d`` (unit cube).
        samples: ``R`` tensors ``S_r x A_r``, samples of each region's model at
            its candidates in the same outcome units (``S_r >= k``).
        k: Points wanted.

    Returns:
        ``(region, row)`` pairs, at most ``k``, in the order chosen; a point
        equal to one chosen before
        (:func:`~botorch_sketch.optim.new_points.matches_any`; another region's
        candidate, e.g. on a discrete space) is not chosen again.
    """
    if len(candidates) != len(samples):
        raise ValueError("candidates and samples must have one entry per region.")
    scores = [s.clone() for s in samples]
    chosen: list[tuple[int, int]] = []
    for i in range(k):
        best: tuple[float, int, int] | None = None
        for r, score in enumerate(scores):
            if score.shape[-1] == 0 or i >= score.shape[0]:
                continue
            row = int(score[i].argmax())
            value = float(score[i, row])
            if value > float("-inf") and (best is None or value > best[0]):
                best = (value, r, row)
        if best is None:
            break
        _, r, row = best
        point = candidates[r][row]
        for other, score in zip(candidates, scores, strict=True):
            score[:, matches_any(other, point.unsqueeze(0))] = float("-inf")
        chosen.append((r, row))
    return chosen


def joint_is_costly(
    candidates: Tensor, seconds: float = JOINT_AUTO_SECONDS, rank: int = 0
) -> bool:
    r"""Whether a joint sample over the ``A x d`` ``candidates`` from a model of
    ``rank`` dictionary points takes more than ``seconds`` at the flop rate of
    their device (:func:`~botorch_sketch.models.budget.device_facts`; one CPU
    thread is modelled at ``5e10`` flop/s, a GPU's rate is measured).

    The joint sample (:meth:`~botorch_sketch.models.NystromGP.sample_joint`)
    costs ``A m r`` for the covariance's factor at the candidates (``r <= m``
    columns; ``r = m`` for the exact GP, by triangular solves), ``A^2 r / 2``
    for the covariance's lower triangle and ``A^3 / 3`` for its Cholesky
    factor; ``rank = m`` counts ``r = m``. Without a rank the ``A x A`` factor
    alone decides: above about 3,100 candidates on one CPU thread (TuRBO's
    ``200 d`` for ``d > 15`` model columns); with an exact model of 1,500
    points, above about 2,000 candidates.
    """
    facts = device_facts(candidates.device, candidates.dtype)
    A = candidates.shape[-2]
    flops = A**3 / 3.0 + A * A * rank / 2.0 + A * float(rank) ** 2
    return flops > facts.flop_rate * seconds


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
    model: NystromGP,
    candidates: Tensor,
    k: int,
    seed: int | None = None,
    pathwise: bool = False,
) -> Tensor:
    r"""``k`` distinct maximisers of ``k`` samples of the joint posterior over the
    ``A x d`` ``candidates``, seeded: the samples of
    :meth:`~botorch_sketch.models.NystromGP.sample_joint` (exact, the ``A x A``
    covariance's lower triangle formed in place) or, with ``pathwise``, of
    :meth:`~botorch_sketch.models.NystromGP.sample_pathwise` (exact GP only),
    maximised without repeats by BoTorch's
    ``MaxPosteriorSampling.maximize_samples``."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    sample = model.sample_pathwise if pathwise else model.sample_joint
    samples = sample(candidates, k, generator=generator)
    sampler = MaxPosteriorSampling(model=model, replacement=False)
    return sampler.maximize_samples(candidates, samples.to(candidates), k)
