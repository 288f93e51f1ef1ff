r"""Pure functions of the dictionary policy (:mod:`~.dictionary_policy`).

The policy calls them with the model's data, kernel and noise.

* Which rows: BKB's posterior-variance sampling keeps row ``i`` with probability
  ``p_i = min(1, s q_bar c_i sigma~^2(x_i))`` (COLT 2019, Sec. 3.1; ``c_i`` counts
  the copies of a duplicated input, the union bound of the BBKB authors' code), or
  BLESS at the fitted hyperparameters (:func:`~botorch_sketch.linalg.bless`).
* Within a budget ``m_max``: ``s = 1`` unless ``sum_i p_i`` would exceed the budget,
  in which case ``s < 1`` samples the leverage scores of the larger ridge
  ``ridge / s`` (:func:`~botorch_sketch.linalg.budget_scale`);
  :func:`dictionary_cap` combines ``m_max`` with a memory budget.
* Coupled draws: one fixed uniform number per row (:func:`row_uniforms`), so that
  consecutive dictionaries of a loop differ only where a probability crossed its
  row's number.
* Rows located by value (:func:`locate_rows`), so that a warm start or a saved
  dictionary finds its points in reordered or extended data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from gpytorch.module import Module
from torch import Tensor

from botorch_sketch import linalg
from botorch_sketch.models.sketch_state import SketchState, row_keys

#: Rows per seeded block of :func:`row_uniforms`.
ROW_UNIFORM_BLOCK = 1024

#: A drawn dictionary holding at least this fraction of the points (within the
#: budget) is replaced by every point, the exact GP.
EXACT_FRACTION = 0.5


class SketchDraw(NamedTuple):
    """A drawn dictionary and the ridge whose leverage scores it sampled.

    Attributes:
        indices: Sorted training indices of the dictionary.
        ridge: The ridge (the noise, or larger where the budget bound; ``None``
            for every point).
        capped: Whether the budget bound.
        fallback: Whether the draw was empty and kept the most uncertain row.
        residual: The mean Nyström residual over the noise
            (:func:`mean_nystrom_residual`) where the policy measured it.
        cap: The dictionary budget the draw was made within, where the policy
            recorded it (``None``: no budget, or not recorded).
        reason: Why a dictionary of every point is every point, where the policy
            chose it (``None`` for a sampled dictionary).
    """

    indices: Tensor
    ridge: float | None
    capped: bool
    fallback: bool = False
    residual: float | None = None
    cap: int | None = None
    reason: str | None = None


def dictionary_cap(
    max_size: int | None, memory_budget_gb: float | None, n: int, itemsize: int
) -> int | None:
    r"""``max_size`` combined with the cap of ``memory_budget_gb``.

    The ``n x m`` blocks of a fit (about four arrays of ``itemsize`` bytes) fit in
    the memory budget for ``m <= budget / (4 n itemsize)``.
    """
    cap = max_size
    if memory_budget_gb is not None:
        by_memory = max(1, int(memory_budget_gb * 2**30 / (4 * itemsize * n)))
        cap = by_memory if cap is None else min(cap, by_memory)
    return cap


def uses_every_point(spec: str, n: int, exact_max_n: int, cap: int | None) -> bool:
    r"""Whether the dictionary is every point, without a draw.

    So it is for ``spec == "all"``, and for ``n <= exact_max_n`` within the budget
    (the regime guard for small data).
    """
    return spec == "all" or n <= min(exact_max_n, n if cap is None else cap)


def keeps_most(size: int, n: int, cap: int | None) -> bool:
    r"""Whether a drawn dictionary of ``size`` points keeps most of the ``n``.

    At least ``EXACT_FRACTION`` of them, within the budget: every point then costs
    about the same and is exact, so the model uses every point.
    """
    return (cap is None or n <= cap) and size >= EXACT_FRACTION * n


def warm_dictionary(train_X: Tensor, state: SketchState) -> Tensor | None:
    r"""A warm start's dictionary among the training rows of ``train_X``.

    By its inputs when the state carries them (exact row match, so the data may
    be reordered); else by its row indices, accepted if the checksum of
    ``train_X`` at those rows matches (the data extend the previous model's);
    else by the keys of its rows (:func:`~botorch_sketch.models.sketch_state.
    row_keys`), wherever they moved (e.g. Ax inserts a late trial's row before
    those of trials that completed earlier). Rows whose key is not found are
    left out.

    Returns:
        The indices, or ``None`` if none of the rows are these data's.
    """
    if state.dictionary_inputs is not None:
        return locate_rows(
            input_rows(train_X), input_rows(state.dictionary_inputs.to(train_X))
        )
    rows = state.dictionary_rows.to(train_X.device)
    if rows.numel() and int(rows.max()) < train_X.shape[-2]:
        checksum = float(train_X[..., rows, :].sum())
        if math.isclose(checksum, state.rows_checksum, rel_tol=1e-9, abs_tol=1e-9):
            return rows
    if state.dictionary_keys is not None and state.dictionary_keys.numel():
        keys = row_keys(input_rows(train_X))
        found = locate_rows(
            keys.unsqueeze(-1), state.dictionary_keys.to(keys).unsqueeze(-1)
        )
        if found.numel():
            return torch.unique(found)
    return None


def resampling_ridge(ridge: float | None, noise: float) -> float | None:
    """The ridge of a redraw: the last draw's where the budget bound, else ``None``.

    ``None`` stands for the noise; a budget ridge lies above it.
    """
    if ridge is None or not math.isfinite(ridge):
        return None
    return ridge if ridge > noise else None


def row_uniforms(
    n: int, seed: int | None, stream: int = 0, dtype: torch.dtype = torch.float64
) -> Tensor:
    r"""One fixed uniform number per row, ``n``, for coupled draws.

    Row ``i`` always gets the same number (blocks of ``ROW_UNIFORM_BLOCK`` rows
    seeded by ``seed`` and the block's index), also for a larger ``n``. A draw
    "keep ``i`` iff ``u_i < p_i``" then has BKB's inclusion probabilities ``p_i``
    at every call, while consecutive dictionaries differ only where a probability
    crossed its row's number (fresh coins would swap a large part of a
    budget-bound dictionary at every call). Without a seed, the numbers come from
    torch's generator. ``stream`` selects an independent set of numbers.
    """
    if seed is None:
        return torch.rand(n, dtype=dtype)
    blocks = [
        torch.rand(
            ROW_UNIFORM_BLOCK,
            generator=torch.Generator().manual_seed(
                (seed * 1_000_003 + 104_729 * (b + 1) + 7_919 * stream) % (2**63 - 1)
            ),
            dtype=torch.float64,
        )
        for b in range((n + ROW_UNIFORM_BLOCK - 1) // ROW_UNIFORM_BLOCK)
    ]
    return torch.cat(blocks)[:n].to(dtype)


def union_scores(rls: Tensor, rows: Tensor, q_bar: float) -> Tensor:
    r"""``q_bar c_i sigma~^2(x_i)`` at the first copy of each input, 0 at the others.

    Args:
        rls: ``... x n`` leverage scores (the largest over the leading dimensions,
            batch members and outputs, is used).
        rows: ``n x k`` the inputs, one row each (duplicates are equal rows).
        q_bar: The oversampling factor.

    Returns:
        ``n`` scores (:func:`~botorch_sketch.linalg.rls_inclusion_probabilities`).
    """
    n = rows.shape[0]
    scores = q_bar * rls.reshape(-1, n).clamp_min(0.0).amax(0)
    uniq, inverse, counts = torch.unique(
        rows, dim=0, return_inverse=True, return_counts=True
    )
    first = torch.full((uniq.shape[0],), n, dtype=torch.long, device=rls.device)
    first = first.scatter_reduce(
        0, inverse, torch.arange(n, device=rls.device), reduce="amin"
    )
    union = torch.zeros_like(scores)
    union[first] = scores[first] * counts.to(scores)
    return union


def draw_dictionary(
    union: Tensor,
    cap: int | None,
    noise: float,
    ridge: float | None = None,
    generator: torch.Generator | None = None,
    uniforms: Tensor | None = None,
) -> SketchDraw:
    r"""BKB's posterior-variance sampling within the budget ``cap``.

    Row ``i`` is kept with probability ``min(1, s a_i)`` (``a = union``, from
    :func:`union_scores`): ``s = 1`` unless the expected size exceeds the budget,
    in which case ``s < 1`` samples the leverage scores of the ridge ``ridge / s``
    where the budget binds; an unlucky draw above the budget is trimmed from the
    lowest probabilities. Scores taken at a budget ridge above the noise
    (``ridge``) may also be scaled up, down to the noise ridge, when the budget has
    room.

    Args:
        union: ``n`` scores at the ridge ``ridge`` (``None``: the noise).
        cap: The budget ``m_max`` (``None``: none).
        noise: The noise variance (the smallest ridge).
        ridge: The ridge of the scores, or ``None`` for the noise.
        generator: Generator of independent coins (without ``uniforms``).
        uniforms: ``n`` fixed numbers of a coupled draw (:func:`row_uniforms`).
    """
    base = noise if ridge is None else ridge
    scale = 1.0
    if cap is not None:
        scale = linalg.budget_scale(union, cap, max_scale=base / noise)
    probabilities = (scale * union).clamp_max(1.0)
    fallback = False
    if uniforms is None:
        draw = linalg.sample_dictionary(probabilities, 1.0, generator=generator)
        selected, fallback = draw.selected, draw.fallback
    else:
        selected = uniforms.to(probabilities) < probabilities
        if not selected.any():
            selected[torch.argmax(probabilities)] = True
    idx = selected.nonzero().squeeze(-1)
    if cap is not None and idx.numel() > cap:
        keep = torch.sort(-probabilities[idx], stable=True).indices[:cap]
        idx = torch.sort(idx[keep]).values
    return SketchDraw(idx, base / scale, base / scale > noise, fallback)


def draw_bless(
    X: Tensor,
    covar_module: Module,
    noise: Tensor,
    q_bar: float,
    cap: int | None,
    next_generator: Callable[[], torch.Generator | None],
) -> SketchDraw:
    r"""BLESS at the kernel's current hyperparameters, within the budget.

    The union of one draw per batch member / output, each with an equal share of
    the budget (the members usually share most points).

    Args:
        X: ``batch_shape x (m) x n x d`` transformed training inputs.
        covar_module: The kernel (its batch members indexed like ``X``'s).
        noise: ``... x n`` noise variances (the ridge of each member is its mean).
        q_bar: Oversampling factor.
        cap: The budget (``None``: none).
        next_generator: Returns the generator of the next member's draw.
    """
    n, d = X.shape[-2:]
    flat_X = X.reshape(-1, n, d)
    members = flat_X.shape[0]
    noise = noise.reshape(-1, noise.shape[-1])
    share = None if cap is None else max(1, cap // members)
    selected = torch.zeros(n, dtype=torch.bool, device=X.device)
    ridges, capped = [], False
    for b in range(members):

        def kernel(A: Tensor, B: Tensor, b: int = b) -> Tensor:
            K = covar_module(A, B).to_dense()
            return K.reshape(-1, *K.shape[-2:])[b % K[..., 0, 0].numel()]

        def kernel_diag(A: Tensor, b: int = b) -> Tensor:
            k = covar_module(A, diag=True)
            return k.reshape(-1, k.shape[-1])[b % k[..., 0].numel()]

        draw = linalg.bless(
            flat_X[b],
            kernel,
            kernel_diag,
            lam=float(noise[b % noise.shape[0]].mean()),
            q_bar=q_bar,
            generator=next_generator(),
            max_size=share,
        )
        selected[draw.indices] = True
        ridges.append(draw.ridge)
        capped = capped or draw.capped
    return SketchDraw(selected.nonzero().squeeze(-1), max(ridges), capped)


def validate_indices(indices: Tensor, n: int) -> Tensor:
    """Sorted unique ``LongTensor`` of user-given dictionary indices into ``n`` rows."""
    if not torch.is_tensor(indices) or indices.dtype not in (torch.int64, torch.int32):
        raise ValueError("dictionary must be an integer tensor of training indices.")
    if indices.dim() != 1 or indices.numel() == 0:
        raise ValueError("dictionary must be a non-empty 1-d tensor of indices.")
    if indices.min() < 0 or indices.max() >= n:
        raise ValueError(f"dictionary indices must lie in [0, {n}).")
    return torch.unique(indices.long())


def input_rows(X: Tensor) -> Tensor:
    r"""``n x (b d)`` rows of ``batch x n x d`` inputs (batch members side by side)."""
    return X.movedim(-2, 0).reshape(X.shape[-2], -1)


def locate_rows(rows: Tensor, queries: Tensor) -> Tensor:
    r"""Indices into ``rows`` of the ``queries`` rows that occur in it (exactly).

    ``O((n + k) log(n + k))`` through one ``torch.unique`` over both sets.
    """
    if queries.shape[-1] != rows.shape[-1]:
        return torch.zeros(0, dtype=torch.long, device=rows.device)
    _, inverse = torch.unique(torch.cat([rows, queries]), dim=0, return_inverse=True)
    n = rows.shape[0]
    first = torch.full(
        (int(inverse.max()) + 1,), n, dtype=torch.long, device=rows.device
    ).scatter_reduce(0, inverse[:n], torch.arange(n, device=rows.device), reduce="amin")
    hits = first[inverse[n:]]
    return hits[hits < n]


def mean_nystrom_residual(
    X: Tensor, dictionary: Tensor, covar_module: Module, noise: Tensor
) -> float:
    r"""``mean_i (k(x_i, x_i) - Q(x_i, x_i)) / noise``, the worst batch member.

    ``Q = K_XS K_S^+ K_SX`` is the Nyström approximation of the kernel; its
    residual at a point is the prior variance the dictionary does not explain,
    which the DTC posterior keeps as is. Over the noise variance it says how
    much of the data's signal the sketch misses: near 0 the DTC posterior is
    the exact GP's. ``O(k m^2 + m^3)`` through a jittered Cholesky factor of
    ``K_S`` (:func:`~botorch_sketch.linalg.cholesky_features`).

    Args:
        X: ``batch_shape x (m) x k x d`` transformed inputs (the data, or a
            subsample of them).
        dictionary: ``batch_shape x (m) x |S| x d`` dictionary inputs.
        covar_module: The kernel.
        noise: Noise variances (their mean per batch member is used).

    Returns:
        The largest mean residual over the batch members, a float.
    """
    with torch.no_grad():
        Z = linalg.cholesky_features(
            covar_module(X, dictionary).to_dense(), covar_module(dictionary).to_dense()
        )
        resid = linalg.embedding_residual(covar_module(X, diag=True), Z)
        ratio = resid.mean(-1) / noise.mean(-1).expand(resid.shape[:-1])
        return float(ratio.max())
