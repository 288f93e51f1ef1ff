r"""``GOUCBModel``: GO-UCB's linearized parametric model as a BoTorch ``Model``.

GO-UCB (Liu & Wang, "Global Optimization with Parametric Function Approximation",
ICML 2023) fits a parametric regressor ``f(x; w)`` (any ``torch.nn.Module``; default
the paper's one-hidden-layer sigmoid network of width 25) and measures its
uncertainty with the parameter gradients ``g(x) = \nabla_w f(x; w_hat_t)``:

    Sigma_t = lambda I + sum_i g_i g_i^T                                    (Eq. 3)

Posterior (spec Sec. 7.1, not stated in the paper): Bayesian linear regression on
the features ``g_i`` with prior ``w ~ N(w_hat_0, (s^2 / lambda) I)`` and noise
variance ``s^2`` has posterior ``N(w_hat_t, s^2 Sigma_t^{-1})`` with ``w_hat_t`` of
Eq. (5). Pushed through the linearization at ``w_hat_t``, for ``batch x q x d``
inputs ``X`` with Jacobian ``J`` (``batch x q x d_w``):

    mean = f(X; w_hat_t)            (the nonlinear network)      batch x q
    cov  = s^2 J Sigma_t^{-1} J^T                                 batch x q x q

so BoTorch's ``UpperConfidenceBound(model, beta=beta_t)`` with ``s^2 = 1`` is exactly
``f(x; w_hat_t) + sqrt(beta_t) ||g(x)||_{Sigma_t^{-1}}``, the maximum of the
linearized model over ``Ball_t`` (Eq. 6; spec Sec. 3.2). Every analytic and MC
acquisition function that needs only a Gaussian posterior works (UCB, LogEI, qUCB,
qLogNEI, ...). ``J`` comes from ``torch.func`` and is differentiable in ``X``.

Fitting (done by the constructor, or again by :func:`fit_goucb_model`):

1. Phase I (Eq. 2): the regression oracle
   (:func:`~botorch_sketch.goucb.oracle.fit_regression_oracle`, seeded, cached by
   a data hash) fits ``w_hat_0`` to the first ``n_init`` rows.
2. Phase II (Eqs. 3-5): the remaining rows are absorbed one at a time, in row
   order, each linearized at the estimate current before it (``"replay"``, the
   paper's rule), or all at ``w_hat_0`` (``"anchor"``, order-free).

History dependence (spec Sec. 6.3). In the paper, each ``g_i`` is frozen at the
estimate current when ``x_i`` was *chosen*. Rebuilt from data alone, the model
recovers exactly that state when (a) rows are in query order, (b) ``n_init`` is
the Phase I length and (c) the oracle is deterministic (it is: seeded and cached).
With no outcome transform, rebuilding after each round then equals the paper's
online procedure bit for bit up to the Sherman-Morrison round-off. With
``Standardize`` (the default) the targets are re-standardized with all current
data at every rebuild, so ``w_hat_0`` is refitted on rescaled Phase I targets and
the chain differs slightly from the online one. Ax rebuilds the model from all data
at every generation: pass ``n_init`` through ``model_options`` and keep trials in
order (Ax may also merge repeated arms, which changes the replay).

If ``n_init`` is ``None`` (a model built from a plain data set), every row is Phase
I data and, by default, every row also enters ``Sigma`` linearized at ``w_hat_0``
(``phase1_in_sigma``). This is the linearized-Laplace posterior of the fitted
network, not the paper's procedure (the paper keeps Phase I data out of ``Sigma``).

Supported: ``input_transform`` without trainable parameters (e.g. ``Normalize``),
``outcome_transform`` ``Standardize`` (default) or any transform with
``untransform_posterior``, ``observation_noise`` (``True`` adds ``s^2``; a tensor of
shape ``batch x q x 1`` is added in model units), ``posterior_transform``, and
``condition_on_observations`` for unbatched ``n' x d`` inputs (one online update per
row, no refit). Not supported: multi-output data, batched training data,
``fantasize`` (batched conditioning), and therefore qKG and friends.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from copy import deepcopy
from typing import Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.models.model import Model
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform, Standardize
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.posteriors.posterior import Posterior
from botorch.utils.datasets import SupervisedDataset
from botorch.utils.types import DEFAULT, _DefaultType
from gpytorch.distributions import MultivariateNormal
from linear_operator.operators import DenseLinearOperator
from torch import Tensor, nn

from botorch_sketch.goucb.confidence import (
    BetaSchedule,
    GradientConfidenceSet,
    as_beta_schedule,
    positive_float,
)
from botorch_sketch.goucb.network import (
    ParameterLayout,
    paper_network,
    values_and_jacobian,
)
from botorch_sketch.goucb.oracle import OracleOptions, fit_regression_oracle
from botorch_sketch.models.extra_state import with_extra_state
from botorch_sketch.models.options import ModelOptionsMixin
from botorch_sketch.models.validation import (
    check_choice,
    check_seed,
    validate_new_observations,
)

logger = logging.getLogger(__name__)

_LINEARIZATIONS = ("replay", "anchor")


class GOUCBModel(ModelOptionsMixin, Model):
    r"""GO-UCB's gradient-linearized network posterior (single output).

    Example:
        >>> model = GOUCBModel(train_X, train_Y, n_init=5, lambda_=1.0, beta=4.0)
        >>> acqf = UpperConfidenceBound(model, beta=model.beta_t())
        >>> x, _ = optimize_acqf(acqf, bounds, q=1, num_restarts=4, raw_samples=256)
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        outcome_transform: OutcomeTransform | _DefaultType | None = DEFAULT,
        input_transform: InputTransform | None = None,
        *,
        network: nn.Module | None = None,
        n_init: int | None = None,
        lambda_: float = 1.0,
        beta: float | BetaSchedule = 4.0,
        noise_variance: float = 1.0,
        linearization: str = "replay",
        phase1_in_sigma: bool | None = None,
        oracle: OracleOptions | Mapping[str, Any] | None = None,
        seed: int = 0,
        fit: bool = True,
    ) -> None:
        r"""Build (and by default fit) the model.

        The transforms are positional-or-keyword because Ax checks for
        ``input_transform`` in ``getfullargspec(cls).args``; the rest is
        keyword-only.

        Args:
            train_X: ``n x d`` inputs, rows in query order.
            train_Y: ``n x 1`` observations.
            network: Regressor mapping ``N x d`` (transformed) inputs to ``N x 1``;
                deep-copied and cast to the data's dtype and device. Default:
                :func:`~botorch_sketch.goucb.network.paper_network` (width 25).
            n_init: Number of leading Phase I rows (the paper's ``n``). ``None``:
                all rows (see the module docstring).
            lambda_: Regularization ``lambda > 0`` (the paper's experiments use
                :func:`~botorch_sketch.goucb.confidence.paper_lambda`).
            beta: Number or schedule ``beta(t, confidence_set)`` giving ``beta_t``
                (:meth:`beta_t`), in model (transformed) units.
            noise_variance: ``s^2``, the posterior scale (1 reproduces GO-UCB's
                unweighted least squares, so that ``UCB(beta=beta_t)`` is exact).
            linearization: ``"replay"`` (paper) or ``"anchor"`` (all at
                ``w_hat_0``) for Phase II rows.
            phase1_in_sigma: Also put Phase I rows into ``Sigma``, linearized at
                ``w_hat_0`` (not in the paper). Default: ``n_init is None``.
            oracle: Phase I solver settings, an ``OracleOptions`` or its fields as a
                dict (default: Adam, lr 1e-2, 2000 steps).
            outcome_transform: Default ``Standardize(1)``; ``None`` disables.
            input_transform: An input transform without trainable parameters.
            seed: Seed of the network initialization in the oracle.
            fit: Fit now (else call :func:`fit_goucb_model`).
        """
        _validate_training_data(train_X, train_Y)
        n = train_X.shape[-2]
        if n_init is not None and not (
            isinstance(n_init, int)
            and not isinstance(n_init, bool)
            and 1 <= n_init <= n
        ):
            raise ValueError(f"n_init must be an int in [1, {n}], got {n_init!r}.")
        check_choice(linearization, _LINEARIZATIONS, "linearization")
        positive_float(lambda_, "lambda_")
        positive_float(noise_variance, "noise_variance")
        if seed is None:
            raise TypeError("seed must be an int, got None.")
        check_seed(seed)
        if input_transform is not None and any(
            p.requires_grad for p in input_transform.parameters()
        ):
            raise UnsupportedError(
                "GOUCBModel stores transformed training inputs; input transforms with "
                "trainable parameters are not supported."
            )
        beta_schedule = as_beta_schedule(beta)
        if network is None:
            network = paper_network(train_X.shape[-1], seed=seed, dtype=train_X.dtype)
        if not isinstance(network, nn.Module):
            raise TypeError(
                f"network must be a torch.nn.Module, got {type(network).__name__}."
            )
        network = deepcopy(network).to(dtype=train_X.dtype, device=train_X.device)
        layout = ParameterLayout.from_module(network)
        super().__init__()
        if outcome_transform == DEFAULT:
            outcome_transform = Standardize(m=1)
        with torch.no_grad():
            X_tf = self.transform_inputs(train_X, input_transform=input_transform)
        Y_tf = train_Y
        if outcome_transform is not None:
            outcome_transform.train()
            Y_tf, _ = outcome_transform(train_Y, X=X_tf)
            outcome_transform.eval()
            self.outcome_transform = outcome_transform
        if input_transform is not None:
            self.input_transform = input_transform
        self.network = network
        self._layout = layout
        self.register_buffer("_train_X", X_tf.detach().clone(), persistent=False)
        self.register_buffer("_train_Y", Y_tf.detach().clone(), persistent=False)
        self._original_train_X = train_X.detach().clone()
        self.n_init = n_init
        self.lambda_ = float(lambda_)
        self.beta_schedule = beta_schedule
        self.noise_variance = float(noise_variance)
        self.linearization = linearization
        self.phase1_in_sigma = (
            n_init is None if phase1_in_sigma is None else phase1_in_sigma
        )
        if isinstance(oracle, Mapping):  # e.g. from Ax's JSON-stored options
            oracle = OracleOptions(**oracle)
        self.oracle = oracle or OracleOptions()
        self.seed = seed
        self._state: GradientConfidenceSet | None = None
        self.eval()
        if fit:
            self.fit()

    # ----------------------------------------------------------------------------
    # BoTorch plumbing
    # ----------------------------------------------------------------------------

    @property
    def layout(self) -> ParameterLayout:
        r"""The :class:`~botorch_sketch.goucb.network.ParameterLayout` mapping the
        network's parameters to the flat weight vector ``w`` (``d_w`` entries)."""
        return self._layout

    @property
    def num_outputs(self) -> int:
        return 1

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size([])

    @property
    def train_inputs(self) -> tuple[Tensor]:
        """``(n x d,)`` transformed training inputs."""
        return (self._train_X,)

    @property
    def train_targets(self) -> Tensor:
        """``n`` transformed training targets."""
        return self._train_Y.squeeze(-1)

    def _set_transformed_inputs(self) -> None:
        """No-op: training inputs are stored transformed."""

    def _revert_to_original_inputs(self) -> None:
        """No-op: training inputs are stored transformed."""

    @classmethod
    def construct_inputs(
        cls, training_data: SupervisedDataset, **kwargs: Any
    ) -> dict[str, Any]:
        r"""Model inputs for Ax: data and options, without observed variances.

        GO-UCB's least squares weighs every observation alike (Eq. 4), so observed
        noise variances (Ax passes them when SEMs are reported) are not used.
        """
        inputs = super().construct_inputs(training_data=training_data, **kwargs)
        if inputs.pop("train_Yvar", None) is not None:
            logger.info("GOUCBModel ignores observed noise variances (train_Yvar).")
        return inputs

    def subset_output(self, idcs: list[int]) -> GOUCBModel:
        if list(idcs) != [0]:
            raise ValueError(f"GOUCBModel has one output; got indices {idcs}.")
        return self

    # ----------------------------------------------------------------------------
    # State
    # ----------------------------------------------------------------------------

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> GOUCBModel:
        # ``.to()`` / ``.cuda()`` also convert the confidence set and the raw inputs.
        out = super()._apply(fn, *args, **kwargs)
        if getattr(self, "_state", None) is not None:
            self._state = self._state.map_tensors(fn)
        if hasattr(self, "_original_train_X"):
            self._original_train_X = fn(self._original_train_X)
        return out

    def get_extra_state(self) -> dict[str, Any]:
        r"""The fitted confidence set (``Sigma_t^{-1}``, ``w_hat_0``, gradients...).

        Stored by ``state_dict()`` under ``"_extra_state"``; the network's weights
        (``w_hat_t``) are ordinary parameters. ``None`` before the fit.
        """
        return {
            "confidence_set": None if self._state is None else self._state.to_dict()
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        r"""Restore :meth:`get_extra_state`: the posterior is then the saved one."""
        saved = state.get("confidence_set")
        if saved is None:
            self._state = None
            return
        confidence_set = GradientConfidenceSet.from_dict(saved).map_tensors(
            lambda t: t.to(self._train_X)
        )
        if confidence_set.d_w != self._layout.numel:
            raise ValueError(
                f"the saved confidence set has {confidence_set.d_w} parameters, this "
                f"model's network has {self._layout.numel}."
            )
        self._state = confidence_set

    def load_state_dict(
        self, state_dict: Any, strict: bool = True, assign: bool = False
    ) -> Any:
        r"""Load network weights and the confidence set (:meth:`get_extra_state`).

        A state without a confidence set keeps the current one.
        """
        return super().load_state_dict(
            with_extra_state(self, state_dict), strict=strict, assign=assign
        )

    @property
    def is_fitted(self) -> bool:
        """Whether the Phase I oracle and the Phase II replay have run."""
        return self._state is not None

    @property
    def confidence_set(self) -> GradientConfidenceSet:
        """The fitted confidence set (``Sigma_t``, ``w_hat_t``)."""
        if self._state is None:
            raise RuntimeError("GOUCBModel is not fitted; call fit_goucb_model(model).")
        return self._state

    @property
    def w_hat(self) -> Tensor:
        r"""``w_hat_t``: the current parameter estimate (``d_w``)."""
        return self.confidence_set.w_hat

    @property
    def num_phase1(self) -> int:
        """Number of Phase I rows."""
        return self._train_X.shape[-2] if self.n_init is None else self.n_init

    @property
    def round(self) -> int:
        """The next Phase II round ``t`` (1-based): Phase II rows seen plus one."""
        return self._train_X.shape[-2] - self.num_phase1 + 1

    def beta_t(self) -> float:
        r"""``beta_t`` of the next round from :attr:`beta_schedule`."""
        return float(self.beta_schedule(self.round, self.confidence_set))

    def fit(self) -> GOUCBModel:
        r"""Phase I oracle on the first rows, then absorb the rest (module docstring).

        Raises:
            ValueError: If the network's output does not depend differentiably on
                its parameters, or the oracle diverges. The model is left as it was.
        """
        X, y = self._train_X, self._train_Y.squeeze(-1)
        n0 = self.num_phase1
        _check_differentiable(self.network, self._layout, X[: min(n0, 16)])
        w0 = fit_regression_oracle(
            self.network, X[:n0], y[:n0], options=self.oracle, seed=self.seed
        )
        state = GradientConfidenceSet.initial(w0, self.lambda_)
        with torch.no_grad():
            if self.phase1_in_sigma:
                state = _absorb_at(
                    state, self.network, self._layout, w0, X[:n0], y[:n0]
                )
            state = self._absorb(state, X[n0:], y[n0:])
        self._state = state
        self._layout.load(self.network, state.w_hat)
        return self

    def _absorb(
        self, state: GradientConfidenceSet, X: Tensor, y: Tensor
    ) -> GradientConfidenceSet:
        """Phase II rows, one at a time, by the model's linearization rule."""
        if self.linearization == "anchor":
            return _absorb_at(state, self.network, self._layout, state.w0, X, y)
        for i in range(X.shape[0]):
            f, J = values_and_jacobian(
                self.network, self._layout, state.w_hat, X[i : i + 1]
            )
            state = state.update(J[0], f[0], y[i])
        return state

    # ----------------------------------------------------------------------------
    # Posterior
    # ----------------------------------------------------------------------------

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> Posterior:
        r"""Linearized Gaussian posterior over ``batch x q x 1`` (module docstring).

        Args:
            X: ``batch_shape x q x d`` inputs (original space).
            output_indices: Must be ``None`` or ``[0]``.
            observation_noise: ``True`` adds ``s^2 I``; a ``batch x q x 1`` tensor is
                added to the diagonal (model units).
            posterior_transform: Optional transform of the posterior.

        Returns:
            A ``GPyTorchPosterior`` over a ``MultivariateNormal`` (mean
            ``batch x q``, covariance ``batch x q x q``), in original units.
        """
        if output_indices is not None and list(output_indices) != [0]:
            raise ValueError(f"GOUCBModel has one output; got {output_indices}.")
        state = self.confidence_set
        d = self._train_X.shape[-1]
        if X.dim() < 2 or X.shape[-1] != d:
            raise ValueError(f"X must be batch_shape x q x {d}, got {tuple(X.shape)}.")
        if X.dtype != self._train_X.dtype:
            raise TypeError(
                f"X is {X.dtype} but the model was built with {self._train_X.dtype}."
            )
        self.eval()
        X_tf = self.transform_inputs(X)
        batch, q = X_tf.shape[:-2], X_tf.shape[-2]
        f, J = values_and_jacobian(
            self.network, self._layout, state.w_hat, X_tf.reshape(-1, d)
        )
        mean = f.reshape(*batch, q)
        J = J.reshape(*batch, q, -1)
        cov = self.noise_variance * state.quad(J)
        cov = 0.5 * (cov + cov.transpose(-1, -2))
        if isinstance(observation_noise, Tensor):
            cov = cov + torch.diag_embed(
                observation_noise.squeeze(-1).expand(mean.shape)
            )
        elif observation_noise:
            cov = cov + self.noise_variance * torch.eye(
                q, dtype=cov.dtype, device=cov.device
            )
        # As an operator, the (rank <= d_w, possibly singular) covariance is
        # factored lazily with gpytorch's jitter; a dense tensor would be
        # Cholesky-factored without jitter by torch's MultivariateNormal.
        mvn = MultivariateNormal(mean, DenseLinearOperator(cov))
        posterior: Posterior = GPyTorchPosterior(mvn)
        if hasattr(self, "outcome_transform"):
            posterior = self.outcome_transform.untransform_posterior(posterior, X=X_tf)
        if posterior_transform is not None:
            posterior = posterior_transform(posterior)
        return posterior

    def condition_on_observations(
        self, X: Tensor, Y: Tensor, **kwargs: Any
    ) -> GOUCBModel:
        r"""A copy with ``n' x d`` rows appended as Phase II rounds (no oracle refit).

        ``Y`` (``n' x 1``) is in original units; the stored outcome-transform
        statistics are kept. Batched (fantasy) inputs are not supported.
        """
        validate_new_observations(X, Y, None, d=self._train_X.shape[-1], m=1)
        if X.dim() != 2 or Y.dim() != 2:
            raise UnsupportedError(
                "GOUCBModel.condition_on_observations supports only n x d inputs and "
                "n x 1 targets (no batched fantasies)."
            )
        X, Y = X.to(self._train_X), Y.to(self._train_X)
        self.eval()
        with torch.no_grad():
            X_tf = self.transform_inputs(X)
            Y_tf = Y
            if hasattr(self, "outcome_transform"):
                Y_tf, _ = self.outcome_transform(Y, X=X_tf)
            state = self._absorb(self.confidence_set, X_tf, Y_tf.squeeze(-1))
        new = deepcopy(self)
        new._train_X = torch.cat([self._train_X, X_tf])
        new._train_Y = torch.cat([self._train_Y, Y_tf])
        new._original_train_X = torch.cat([self._original_train_X, X])
        if new.n_init is None:
            new.n_init = self.num_phase1
        new._state = state
        new._layout.load(new.network, state.w_hat)
        return new

    def fantasize(self, X: Tensor, sampler: Any, **kwargs: Any) -> GOUCBModel:
        r"""Not supported: GO-UCB's online update has no batched fantasy models.

        Raises:
            UnsupportedError: always. Acquisition functions built on fantasies
                (qKG, qNIPV, qMES with pending points) need another model; qUCB,
                qLogEI, qLogNEI and the analytic ones work.
        """
        raise UnsupportedError(
            "GOUCBModel does not support fantasize (batched fantasy models); "
            "use an acquisition function that needs no fantasies, e.g. UCB or "
            "qLogNEI."
        )


def fit_goucb_model(
    model: GOUCBModel,
    *,
    oracle: OracleOptions | None = None,
    seed: int | None = None,
) -> GOUCBModel:
    r"""(Re)fit a :class:`GOUCBModel`: Phase I oracle, then the Phase II replay.

    Args:
        model: The model (fitted in place).
        oracle: New oracle settings (default: keep the model's).
        seed: New initialization seed (default: keep the model's).

    Returns:
        The model. On failure the model keeps its previous settings and state.
    """
    if not isinstance(model, GOUCBModel):
        raise TypeError(f"expected a GOUCBModel, got {type(model).__name__}.")
    old = (model.oracle, model.seed)
    model.oracle = oracle or model.oracle
    model.seed = model.seed if seed is None else seed
    try:
        return model.fit()
    except Exception:
        model.oracle, model.seed = old
        raise


# ---------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------


def _absorb_at(
    state: GradientConfidenceSet,
    network: nn.Module,
    layout: ParameterLayout,
    w: Tensor,
    X: Tensor,
    y: Tensor,
) -> GradientConfidenceSet:
    """Absorb rows linearized at one fixed parameter vector ``w``."""
    f, J = values_and_jacobian(network, layout, w, X)
    for i in range(X.shape[0]):
        state = state.update(J[i], f[i], y[i], at=w)
    return state


def _check_differentiable(
    network: nn.Module, layout: ParameterLayout, X: Tensor
) -> None:
    """``ValueError`` unless ``f(X; w)`` has a finite, non-zero Jacobian in ``w``."""
    try:
        with torch.no_grad():
            f, J = values_and_jacobian(network, layout, layout.flatten(network), X)
    except ValueError:
        raise
    except Exception as err:  # torch.func raises RuntimeError for many unsupported ops
        raise ValueError(
            f"could not differentiate the network's output with respect to its "
            f"parameters with torch.func ({type(err).__name__}: {err})."
        ) from err
    if not (torch.isfinite(f).all() and torch.isfinite(J).all()):
        raise ValueError("network output or parameter gradient is not finite.")
    if not bool((J != 0).any()):
        raise ValueError(
            "network output does not depend differentiably on its parameters "
            "(zero parameter Jacobian on the training inputs)."
        )


def _validate_training_data(X: Tensor, Y: Tensor) -> None:
    r"""Raise ``ValueError``/``TypeError`` naming the problem with ``(X, Y)``."""
    if not (isinstance(X, Tensor) and isinstance(Y, Tensor)):
        raise TypeError("train_X and train_Y must be tensors.")
    if not (X.is_floating_point() and Y.is_floating_point()):
        raise TypeError(
            f"train_X/train_Y must be floating point, got {X.dtype}/{Y.dtype}."
        )
    if X.dim() != 2:
        raise ValueError(
            f"train_X must be n x d (batched training data is not supported), got "
            f"{tuple(X.shape)}."
        )
    if Y.dim() != 2 or Y.shape[-1] != 1:
        raise ValueError(f"train_Y must be n x 1, got {tuple(Y.shape)}.")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"empty data: train_X {tuple(X.shape)}.")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"train_X has {X.shape[0]} rows but train_Y has {Y.shape[0]}.")
    if X.dtype != Y.dtype:
        raise ValueError(f"train_X is {X.dtype} but train_Y is {Y.dtype}.")
    if not torch.isfinite(X).all():
        raise ValueError("train_X contains NaN or Inf.")
    if not torch.isfinite(Y).all():
        raise ValueError("train_Y contains NaN or Inf.")
