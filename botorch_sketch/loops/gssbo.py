r"""Re-select and refit a ``GradientSubsetGP`` at every iteration of a BoTorch loop.

Algorithm 1 of Wei et al. (2025) re-selects the subset after every evaluation
(lines 11-15), from all of ``D``, with the gradients of Eq. 3 at the current
("pilot") hyperparameters, and refits the GP on the subset. In a stock BoTorch
loop that is::

    refitter = GSSBORefitter(subset_size=100, n_initial=20, seed=0)
    for t in range(n_iterations):
        model = refitter.fit(train_X, train_Y)      # select + fit on M points
        acqf = UpperConfidenceBound(model, beta=2.0)
        x, _ = optimize_acqf(acqf, bounds, q=1, num_restarts=4, raw_samples=256)
        train_X = torch.cat([train_X, x]); train_Y = torch.cat([train_Y, f(x)])

Each call uses the previous model as the pilot (its hyperparameters and
transforms give the gradients, so there is no pilot fit) and warm-starts the new
fit from its hyperparameters. The seed of call ``t`` is derived from ``seed`` and
``N``, so every selection draws fresh perturbation noise (spec [REC], §1.5) and a
rerun with the same data reproduces it. With ``dynamic=DynamicBufferSize(Z)``
the subset size is chosen by the paper's timing rule: all data until the compute
time of an iteration exceeds ``Z`` times the warm-up mean, then ``M = N`` frozen.
"""

from __future__ import annotations

import logging
from typing import Any

from botorch.fit import fit_gpytorch_mll
from gpytorch.mlls import ExactMarginalLogLikelihood
from torch import Tensor

from botorch_sketch.gssbo.selection import DynamicBufferSize, validate_sizes
from botorch_sketch.models.gssbo import GradientSubsetGP
from botorch_sketch.models.sketch_state import hyperparameter_state

__all__ = ["GSSBORefitter", "hyperparameter_state"]

logger = logging.getLogger(__name__)


class GSSBORefitter:
    r"""Builds and fits the GSSBO surrogate of each iteration (Algorithm 1).

    Args:
        subset_size: Fixed ``M`` (paper: about 100), or ``None`` with ``dynamic``.
        dynamic: The paper's dynamic buffer rule; requires ``subset_size=None``.
            Pass the compute time of each iteration to :meth:`fit`.
        n_initial: ``n0``, the size of the initial design.
        seed: Base seed (``None``: torch's global generator).
        warm_start: Start each fit from the previous hyperparameters.
        **model_kwargs: Further ``GradientSubsetGP`` arguments (``mode``,
            ``input_transform``...). Modules are deep-copied by each model.
    """

    def __init__(
        self,
        subset_size: int | None = 100,
        dynamic: DynamicBufferSize | None = None,
        n_initial: int = 20,
        seed: int | None = None,
        warm_start: bool = True,
        **model_kwargs: Any,
    ) -> None:
        if (subset_size is None) == (dynamic is None):
            raise ValueError("Give exactly one of subset_size and dynamic.")
        if subset_size is not None:
            validate_sizes(subset_size, n_initial)
        self.subset_size = subset_size
        self.dynamic = dynamic
        self.n_initial = n_initial
        self.seed = seed
        self.warm_start = warm_start
        self.model_kwargs = model_kwargs
        self.model: GradientSubsetGP | None = None

    def current_subset_size(self, n: int, iteration_time: float | None) -> int:
        r"""``M`` for ``n`` points: fixed, or from the dynamic rule (``n`` before)."""
        if self.dynamic is None:
            return self.subset_size
        if iteration_time is not None:
            size = self.dynamic.update(iteration_time, n)
            if size is not None and self.dynamic.switch_n == n:
                logger.info("GSSBO switched to a subset of M=%d at N=%d.", size, n)
        size = self.dynamic.size
        return max(n, self.n_initial + 2) if size is None else size

    def fit(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        train_Yvar: Tensor | None = None,
        iteration_time: float | None = None,
    ) -> GradientSubsetGP:
        r"""Select the subset of all data, build the model and fit it.

        Args:
            train_X: ``N x d`` all inputs so far, in time order.
            train_Y: ``N x 1`` targets.
            train_Yvar: Optional ``N x 1`` noise variances.
            iteration_time: Compute time of the last iteration (seconds), for the
                dynamic rule.

        Returns:
            The fitted model (also kept as ``self.model``, the next pilot).
        """
        n = train_X.shape[-2]
        size = self.current_subset_size(n, iteration_time)
        seed = None if self.seed is None else self.seed * 1_000_003 + n
        model = GradientSubsetGP(
            train_X,
            train_Y,
            train_Yvar,
            subset_size=size,
            n_initial=self.n_initial,
            seed=seed,
            pilot=self.model,
            warm_start=self.warm_start,
            **self.model_kwargs,
        )
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
        self.model = model
        return model
