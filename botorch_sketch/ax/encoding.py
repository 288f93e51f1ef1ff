r"""A library of parameterizations as the ``candidate_set`` rows Ax's model sees.

A finite library for the BBKB strategies (:mod:`botorch_sketch.ax.library`) is
given in Ax's model space: the search space after the input transforms of the
modular BoTorch generator (fixed parameters removed, choice parameters numbered,
unordered ones one-hot encoded, log/logit scales applied). :func:`encode_library`
makes those rows from ordinary parameter dictionaries with Ax's own transforms, so
a user with categorical or log-scaled parameters never writes the encoding by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from ax.adapter.registry import MBM_X_trans_base
from ax.adapter.transforms.one_hot import OH_PARAM_INFIX
from ax.api.client import Client
from ax.core.experiment import Experiment
from ax.core.observation import ObservationFeatures
from ax.core.search_space import SearchSpace
from torch import Tensor

from botorch_sketch.trust_region import DiscreteColumns

__all__ = ["discrete_columns", "encode_library", "model_space"]


def model_space(search_space: SearchSpace) -> SearchSpace:
    r"""The search space as the modular BoTorch generator's model sees it."""
    search_space = search_space.clone()
    for transform_class in MBM_X_trans_base:
        transform = transform_class(search_space=search_space)
        search_space = transform.transform_search_space(search_space)
    return search_space


def encode_library(
    space: Client | Experiment | SearchSpace,
    parameterizations: Iterable[Mapping[str, Any]],
) -> Tensor:
    r"""``A x d`` rows of ``parameterizations`` in Ax's model space.

    Args:
        space: The search space, or the experiment / client that holds it.
        parameterizations: ``A`` parameter dictionaries (every parameter of the
            search space, values of their declared types).

    Returns:
        An ``A x d`` float64 tensor whose columns follow the transformed search
        space, for ``get_generation_strategy(..., candidate_set=...)``.

    Raises:
        ValueError: If a parameterization is outside the search space or misses a
            parameter.
    """
    if isinstance(space, Client):
        space = space._experiment
    if isinstance(space, Experiment):
        space = space.search_space
    rows = [dict(p) for p in parameterizations]
    if not rows:
        raise ValueError("the library is empty.")
    for i, row in enumerate(rows):
        if not space.check_membership(
            row, raise_error=False, check_all_parameters_present=True
        ):
            raise ValueError(f"library entry {i} is not in the search space: {row}.")
    search_space = space.clone()
    features = [ObservationFeatures(parameters=row) for row in rows]
    for transform_class in MBM_X_trans_base:
        transform = transform_class(search_space=search_space)
        features = transform.transform_observation_features(features)
        search_space = transform.transform_search_space(search_space)
    names = list(search_space.parameters)
    return torch.tensor(
        [[float(f.parameters[name]) for name in names] for f in features],
        dtype=torch.float64,
    )


def discrete_columns(
    feature_names: Sequence[str],
    bounds: Sequence[tuple[float, float]],
    discrete_choices: Mapping[int, Sequence[float]],
) -> DiscreteColumns:
    r"""The discrete columns of Ax's model space (a ``SearchSpaceDigest``'s
    ``feature_names``, ``bounds`` and ``discrete_choices``) in the unit cube.

    Columns in ``discrete_choices`` get their values scaled by ``bounds``; columns
    named ``<name>_OH_PARAM_<i>`` (Ax's ``OneHot`` transform) are grouped by
    ``<name>`` (a group of one column, a choice narrowed to one value, always
    projects to 1).
    """
    if len(feature_names) != len(bounds):
        raise ValueError(
            f"{len(feature_names)} feature names but {len(bounds)} bounds."
        )
    grids = {}
    for column, values in discrete_choices.items():
        lower, upper = (float(b) for b in bounds[column])
        width = upper - lower
        values = torch.as_tensor(values, dtype=torch.float64)
        grids[int(column)] = (
            (values - lower) / width if width > 0 else torch.zeros_like(values)
        )
    groups: dict[str, list[int]] = {}
    for column, name in enumerate(feature_names):
        prefix, infix, suffix = name.rpartition(OH_PARAM_INFIX)
        if infix and prefix and suffix.isdigit() and column not in grids:
            groups.setdefault(prefix, []).append(column)
    return DiscreteColumns(grids=grids, one_hot=tuple(map(tuple, groups.values())))
