r"""Learning the kernel hyperparameters of a finite-arm run on a schedule.

BBKB's guarantees assume a known kernel; the paper's experiments tune its
bandwidth by hand. :func:`~botorch_sketch.loops.bbkb.run_bbkb` with ``learn=...``
instead refits the trainable hyperparameters of its gpytorch kernel (lengthscales,
ARD lengthscales, an outputscale, ...; parameters with ``requires_grad=False`` stay
fixed) while it runs:

- **When** (:meth:`KernelLearning.due`): first once ``first_fit`` rewards were
  observed, then whenever the number of observations grew by the factor
  ``1 + growth`` since the last fit (so ``O(log T)`` fits in a run of ``T``).
- **Objective**: the exact GP marginal likelihood of the observed arms, with a
  zero mean (the engine's model, BBKB Eqs. 4-6) and the ridge ``lam`` as the
  known noise variance (the Bayesian reading ``lam = xi^2`` of App. A.1; ``lam``
  itself is not learned). An arm pulled ``n_a`` times enters once, with its mean
  reward and noise variance ``lam / n_a``: for the kernel hyperparameters this
  is the same likelihood as the ``n_a`` repeated rows (the within-arm scatter
  does not depend on them) at the cost of the distinct arms only. At most
  ``subset_size`` distinct arms, a uniform subsample drawn with the run's
  generator, so one evaluation costs ``O(s^3)``, ``s <= subset_size``.
- **Misfit variance** (``misfit=True``, default): the likelihood's noise is
  ``lam / n_a + v`` with a learned homoscedastic ``v`` (gpytorch's
  ``FixedNoiseGaussianLikelihood(learn_additional_noise=True)``), used in the fit
  only. It absorbs what the kernel cannot represent of a real reward function.
  Without it, a small known noise forces the kernel to interpolate: the
  lengthscale shrinks as the data grow and the dictionary fills with every
  pulled arm (``benchmarks/bench_learning.py`` compares both on Cadata).
- **How**: BoTorch's ``fit_gpytorch_mll`` (L-BFGS-B) on a ``SingleTaskGP`` that
  shares the kernel module, warm-started from the current values and bounded to
  ``max_iterations`` iterations, one attempt; a failed fit keeps the previous
  values.

The rest (rebuilding the BBKB state with the new kernel: the Nyström embedding
changes with the kernel) is the loop's job.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import gpytorch
import torch
from botorch import settings as botorch_settings
from botorch.exceptions.errors import ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import Kernel
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood
from gpytorch.means import ZeroMean
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from botorch_sketch.bbkb.dense_kernel import kernel_copy

logger = logging.getLogger(__name__)

__all__ = ["KernelFit", "KernelLearner", "KernelLearning", "hyperparameters"]


@dataclass(frozen=True)
class KernelLearning:
    r"""Schedule and budget of the kernel refits of a finite-arm run.

    Args:
        growth: Refit once the number of observations reached ``(1 + growth)``
            times its value at the last fit (``> 0``).
        first_fit: Observations before the first fit (``>= 2``).
        max_iterations: L-BFGS-B iterations per fit (``>= 1``; warm-started).
        subset_size: Largest number of distinct arms in the likelihood (``>= 2``).
        misfit: Learn the misfit variance ``v`` (module docstring).
    """

    growth: float = 0.25
    first_fit: int = 10
    max_iterations: int = 30
    subset_size: int = 1000
    misfit: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.growth) and self.growth > 0):
            raise ValueError(f"growth must be positive, got {self.growth}.")
        for name, low in (("first_fit", 2), ("max_iterations", 1), ("subset_size", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}.")

    def due(self, num_observations: int, last_fit: int | None) -> bool:
        """Whether a fit is due with ``num_observations`` (``last_fit``: at the
        previous fit, ``None`` before the first)."""
        if num_observations < self.first_fit:
            return False
        return last_fit is None or num_observations >= (1 + self.growth) * last_fit


@dataclass(frozen=True)
class KernelFit:
    r"""Record of one refit.

    Attributes:
        step: Number of observations when the fit ran.
        num_arms: Distinct arms in the likelihood (after subsampling).
        hyperparameters: Values after the fit (:func:`hyperparameters`; the
            misfit variance, if learned, as ``"misfit_variance"``).
        success: Whether the optimiser succeeded (else the values were kept).
        seconds: Wall time of the fit.
    """

    step: int
    num_arms: int
    hyperparameters: dict[str, Tensor] = field(repr=False)
    success: bool
    seconds: float


def hyperparameters(module: gpytorch.Module) -> dict[str, Tensor]:
    r"""Constrained values of a module's parameters, e.g. ``base_kernel.lengthscale``.

    Each raw parameter is passed through its constraint (``raw_`` dropped from its
    name); the values are detached copies.
    """
    out = {}
    for name, param, constraint in module.named_parameters_and_constraints():
        value = param if constraint is None else constraint.transform(param)
        out[name.replace("raw_", "")] = value.detach().clone()
    return out


def _arm_data(
    counts: Tensor, reward_sums: Tensor, lam: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Distinct observed arms, their mean rewards and noise variances ``lam / n``,
    floored at gpytorch's ``min_fixed_noise`` (which would round them up anyway,
    with a warning)."""
    idx = (counts > 0).nonzero().squeeze(-1)
    n = counts[idx]
    floor = gpytorch.settings.min_fixed_noise.value(counts.dtype)
    return idx, reward_sums[idx] / n, (lam / n).clamp_min(floor)


class KernelLearner:
    r"""A trainable working copy of a kernel and its refit schedule.

    Args:
        kernel: The initial kernel; it is deep-copied (the caller's module is never
            changed) to ``dtype`` and ``device``. At least one parameter must
            require a gradient.
        schedule: When and how to refit.
        dtype: Dtype of the fits (float64 recommended).
        device: Device of the fits.
    """

    def __init__(
        self,
        kernel: Kernel,
        schedule: KernelLearning,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> None:
        self.module = kernel_copy(kernel, dtype, device)
        if not any(p.requires_grad for p in self.module.parameters()):
            raise ValueError(
                "learning needs a kernel with trainable hyperparameters "
                "(requires_grad=True); fixed_rbf_kernel(...) is frozen: pass e.g. "
                "ScaleKernel(RBFKernel()) instead."
            )
        self.schedule = schedule
        #: Current misfit variance (``None`` until the first fit or without it).
        self.misfit_variance: float | None = None
        self.last_fit: int | None = None
        self.history: list[KernelFit] = []

    def due(self, num_observations: int) -> bool:
        """Whether :meth:`fit` is due (:meth:`KernelLearning.due`)."""
        return self.schedule.due(num_observations, self.last_fit)

    def snapshot(self) -> dict[str, Any]:
        """Everything :meth:`fit` changes, for :meth:`load_snapshot`."""
        return {
            "module": {k: v.clone() for k, v in self.module.state_dict().items()},
            "misfit_variance": self.misfit_variance,
            "last_fit": self.last_fit,
            "num_fits": len(self.history),
        }

    def load_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Undo the fits since :meth:`snapshot` (e.g. after an interrupted refit)."""
        self.module.load_state_dict(snapshot["module"])
        self.misfit_variance = snapshot["misfit_variance"]
        self.last_fit = snapshot["last_fit"]
        del self.history[snapshot["num_fits"] :]

    def fit(
        self,
        arms: Tensor,
        counts: Tensor,
        reward_sums: Tensor,
        lam: float,
        generator: torch.Generator,
    ) -> KernelFit:
        r"""Refit :attr:`module` in place on the observed arms (module docstring).

        Args:
            arms: ``A x d`` candidate set.
            counts: ``A`` pull counts.
            reward_sums: ``A`` sums of observed rewards.
            lam: Noise variance of one observation (the ridge).
            generator: Draws the subsample when more than ``subset_size`` arms
                were observed.

        Returns:
            The :class:`KernelFit` record (also appended to :attr:`history`).
        """
        idx, y, noise = _arm_data(counts, reward_sums, lam)
        size = self.schedule.subset_size
        if idx.numel() > size:
            keep = torch.randperm(idx.numel(), generator=generator)[:size]
            keep = keep.sort().values.to(idx.device)
            idx, y, noise = idx[keep], y[keep], noise[keep]
        start = time.perf_counter()
        misfit = None
        if self.schedule.misfit:  # warm start, or a tenth of the reward variance
            misfit = self.misfit_variance
            if misfit is None:
                misfit = max(0.1 * float(y.var()) if y.numel() > 1 else 0.0, 1e-6)
        success, misfit = fit_exact_mll(
            self.module, arms[idx], y, noise, self.schedule.max_iterations, misfit
        )
        self.misfit_variance = misfit
        step = int(counts.sum())
        self.last_fit = step
        values = hyperparameters(self.module)
        if misfit is not None:
            values["misfit_variance"] = torch.tensor(misfit)
        record = KernelFit(
            step, idx.numel(), values, success, time.perf_counter() - start
        )
        self.history.append(record)
        logger.info("kernel refit at t=%d on %d arms: %s", step, idx.numel(), record)
        return record


def _mll_value(mll: ExactMarginalLogLikelihood) -> float:
    r"""The marginal log likelihood per point at the current values."""
    model = mll.model
    model.train()
    with torch.no_grad():
        try:
            out = mll(model(*model.train_inputs), model.train_targets)
        except (RuntimeError, ValueError):  # e.g. a failed Cholesky
            return -math.inf
    return float(out.sum())


def fit_exact_mll(
    kernel: Kernel,
    X: Tensor,
    y: Tensor,
    noise: Tensor,
    max_iterations: int,
    misfit: float | None = None,
) -> tuple[bool, float | None]:
    r"""Fit ``kernel`` in place by the exact marginal likelihood of a zero-mean GP.

    ``y ~ N(0, K_XX + diag(noise) + v I)`` with ``K_XX = kernel(X, X)`` and a
    learned misfit variance ``v`` (``v = 0`` and not learned if ``misfit`` is
    ``None``); a ``SingleTaskGP`` (no transforms) that shares ``kernel`` is fitted
    by ``fit_gpytorch_mll``, warm-started and bounded to ``max_iterations``
    L-BFGS-B iterations, one attempt, with Cholesky solves. On failure the previous
    values are restored.

    Args:
        kernel: Module to fit (its trainable parameters).
        X: ``n x d`` inputs.
        y: ``n`` targets.
        noise: ``n`` known noise variances.
        max_iterations: L-BFGS-B iteration budget.
        misfit: Initial misfit variance ``v > 0``, or ``None``.

    Returns:
        ``(success, v)``: whether the fit succeeded and the fitted ``v`` (the
        initial one after a failure; ``None`` without a misfit variance).
    """
    saved = copy.deepcopy(kernel.state_dict())
    likelihood = FixedNoiseGaussianLikelihood(
        noise=noise,
        learn_additional_noise=misfit is not None,
        noise_constraint=GreaterThan(1e-10),
    )
    if misfit is not None:
        likelihood.second_noise = misfit
    model = SingleTaskGP(
        X,
        y.unsqueeze(-1),
        likelihood=likelihood.to(X),
        covar_module=kernel,
        mean_module=ZeroMean(),
        outcome_transform=None,
    )
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    try:
        with (
            botorch_settings.validate_input_scaling(False),
            gpytorch.settings.max_cholesky_size(max(X.shape[0], 800)),
        ):
            start = _mll_value(mll)
            # L-BFGS-B often ends a warm-started run with an abnormal line search
            # (flat directions, e.g. the lengthscale of an irrelevant input): the
            # values it reached are kept when they improve the likelihood.
            fit_gpytorch_mll(
                mll,
                optimizer_kwargs={"options": {"maxiter": max_iterations}},
                max_attempts=1,
                warning_handler=lambda _: True,
            )
            end = _mll_value(mll)
        if not (math.isfinite(end) and end >= start - 1e-9 * (1 + abs(start))):
            raise ModelFittingError(f"likelihood fell from {start:.6g} to {end:.6g}")
    except ModelFittingError as err:
        logger.warning(
            "kernel refit failed on %d points (%s); values kept.", X.shape[0], err
        )
        kernel.load_state_dict(saved)
        if misfit is not None:
            likelihood.second_noise = misfit
        return False, misfit
    except Exception:
        kernel.load_state_dict(saved)
        raise
    finally:
        kernel.eval()
    if misfit is not None:
        misfit = float(likelihood.second_noise.detach())
    return True, misfit
