r"""The trust region's model: a ``NystromGP`` fitted on the region's data.

TuRBO-1 (Eriksson et al., NeurIPS 2019, Sec. 2) fits an exact GP on the data
collected since the last restart, at every batch. Here the model is a
:class:`~botorch_sketch.models.NystromGP` (:func:`fit_region_model`): every point
in the dictionary (the exact GP) while the device affords it
(:func:`region_is_exact`), a leverage-score sketch beyond, so its cost stays
``O(n m^2)`` instead of ``O(n^3)``. Its hyperparameters are fitted on the
subsample the device's fit budget affords without the global model's
1,000-point floor (:func:`region_fit_subset_size`: about 570 points on one CPU
thread, thousands on a GPU), to :data:`REGION_FIT_TOLERANCE`.

The kernel (:func:`region_covar_module`) is BoTorch's dimension-scaled RBF with
log-parametrised lengthscales; on a space with unordered choice parameters
(Ax's one-hot columns) each one-hot group shares one lengthscale.
:func:`incumbent` and :func:`lengthscales` read the fitted model (the region's
centre and shape).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
)
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import Kernel, RBFKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from botorch_sketch.models.budget import device_facts, device_fit_subset_size
from botorch_sketch.models.dictionary_policy import LeverageScorePolicy
from botorch_sketch.models.fit_options import DEFAULT_FIT_SUBSET_SIZE, DEVICE_SUBSET
from botorch_sketch.models.kernels import GroupedRBFKernel
from botorch_sketch.models.nystrom import NystromGP
from botorch_sketch.models.nystrom_inputs import POLICY_OPTION_DEFAULTS

__all__ = [
    "LENGTHSCALE_LOWER_BOUND",
    "REGION_FIT_TOLERANCE",
    "REGION_MIN_FIT_SUBSET_SIZE",
    "REGION_REFIT_GROWTH",
    "fit_region_model",
    "incumbent",
    "lengthscales",
    "noise_sd",
    "region_covar_module",
    "region_fit_subset_size",
    "region_is_exact",
]


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

#: Growth of a region's data (a fraction of the points of the last fit) after
#: which a region on the periodic schedule (``"turbo-bkb"``'s
#: ``region_fit="periodic"``) is fitted again; in between the posterior takes
#: the new points with the last fit's hyperparameters.
REGION_REFIT_GROWTH = 0.1


#: Lower bound of the lengthscales of BoTorch's dimension-scaled RBF kernel.
LENGTHSCALE_LOWER_BOUND = 2.5e-2


def region_covar_module(dim: int, one_hot: Sequence[Sequence[int]] = ()) -> Kernel:
    r"""The region model's default kernel: BoTorch's dimension-scaled RBF
    (``get_covar_module_with_dim_scaled_prior``, the kernel of ``SingleTaskGP``
    and ``NystromGP``; Hvarfner et al., ICML 2024), with its lengthscales
    optimised in log space, and one lengthscale per one-hot group.

    **Log lengthscales.** BoTorch's kernel lets L-BFGS-B move the lengthscales
    ``l`` themselves (``l >= 0.025`` as a box bound). The gradient of the
    marginal likelihood in ``l`` falls like ``l^{-3}``, so a lengthscale that
    grows large (a coordinate that barely matters) makes the problem
    ill-conditioned: a region's cold fit then takes 1,000+ L-BFGS-B iterations.
    Here ``l = 0.025 + exp(r)`` and ``r`` is optimised: the same kernel, prior
    (on ``l``), initial values and MAP objective, hence the same optima, reached
    in fewer iterations where a lengthscale is large. Where the likelihood has
    several optima the path can end in another one.

    **One-hot groups.** An unordered choice parameter with ``k`` values is ``k``
    one-hot columns (Ax's ``OneHot`` transform). Each group here shares one
    lengthscale (:class:`~botorch_sketch.models.kernels.GroupedRBFKernel`, the
    exchangeable categorical kernel, ``k - 1`` fewer hyperparameters per
    parameter) and the region keeps it as the side of every column of the group
    (:func:`lengthscales`). The prior stays the one of the ``d``-column kernel,
    counted once per lengthscale, so a space without one-hot columns gets
    exactly the kernel above.

    Args:
        dim: Input dimension ``d`` (columns).
        one_hot: Groups of column indices, each one-hot encoding one parameter
            (a group of one column is an ordinary column).

    Returns:
        An ``RBFKernel`` with ``d`` ARD lengthscales at the prior's mode, or a
        ``GroupedRBFKernel`` with one per free column and one per group.
    """
    groups = [tuple(group) for group in one_hot if len(group) > 1]
    prior = get_covar_module_with_dim_scaled_prior(dim).lengthscale_prior
    options = {
        "lengthscale_prior": prior,
        "lengthscale_constraint": GreaterThan(
            LENGTHSCALE_LOWER_BOUND, transform=torch.exp, inv_transform=torch.log
        ),
    }
    if groups:
        kernel = GroupedRBFKernel(dim, groups, **options)
    else:
        kernel = RBFKernel(ard_num_dims=dim, **options)
    kernel.lengthscale = prior.mode
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


def fit_region_model(
    X: Tensor,
    Y: Tensor,
    warm_start: Any = None,
    seed: int | None = None,
    one_hot: Sequence[Sequence[int]] = (),
    **model_options: Any,
) -> NystromGP:
    r"""A fitted ``NystromGP`` on the region's data.

    Args:
        X: ``n x d`` inputs in the unit cube.
        Y: ``n x 1`` values (to maximise).
        warm_start: A previous model's ``sketch_state()`` (or its dict) on a
            prefix of the same data; ``None``: fitted from scratch.
        seed: The model's seed.
        one_hot: One-hot column groups of the default kernel
            (:func:`region_covar_module`; ignored with a ``covar_module``).
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
            "covar_module": region_covar_module(X.shape[-1], one_hot).to(X),
        }
    if (
        model_options.get("dictionary") is None
        and model_options.get("dictionary_policy") is None
    ):
        flat = {k: v for k, v in model_options.items() if k in POLICY_OPTION_DEFAULTS}
        flat.setdefault("exact_window", "posterior")
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


def noise_sd(model: NystromGP, X: Tensor) -> float:
    r"""The fitted observation noise's standard deviation, in the units of the
    model's training values (after its outcome transform is undone): the
    difference of the predictive and the latent posterior variance at the
    first row of ``X`` (``n x d``; the likelihood's noise is homoskedastic)."""
    if X.dim() != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty n x d tensor, got {tuple(X.shape)}.")
    with torch.no_grad():
        latent = model.posterior(X[:1]).variance
        noisy = model.posterior(X[:1], observation_noise=True).variance
    return float((noisy - latent).clamp_min(0.0).sqrt().max())


def lengthscales(model: NystromGP) -> Tensor:
    r"""The model's ARD lengthscales as a ``d`` vector (one shared value repeated)."""
    kernel = model.covar_module
    kernel = getattr(kernel, "base_kernel", kernel)
    ls = getattr(kernel, "column_lengthscale", kernel.lengthscale)
    ls = ls.detach().reshape(-1)
    return ls.expand(model.input_dim) if ls.numel() == 1 else ls
