r"""``NystromGP``: a DTC/Nyström sparse GP with a budgeted leverage-score dictionary.

This is the surrogate of BKB (Calandriello, Carratino, Lazaric, Valko & Rosasco,
"Gaussian process optimization with adaptive sketching: scalable and no regret",
COLT 2019) and BBKB (Calandriello et al., ICML 2020) as a BoTorch model.

Posterior (BBKB Eqs. 1-3, in GP units, see :mod:`botorch_sketch.linalg`): with a
dictionary ``S`` of training points, ``z(x) = K_S^{+1/2} k_S(x)``, ``Z`` the embedded
training inputs and ``A = I + Z^T N^{-1} Z``,

    mean(x)    = m(x) + z(x)^T A^{-1} Z^T N^{-1} (y - m(X))
    cov(x, x') = k(x, x') - z(x)^T z(x') + z(x)^T A^{-1} z(x').

This is the DTC predictive. It keeps the exact prior ``k(x, x')`` on test points,
so the variance does not collapse away from the dictionary (unlike SoR; unlike
FITC it does not alter the training covariance). With every training point in
``S`` it equals the exact GP.

Cost: ``O(n m^2 + m^3)`` for the posterior caches, ``O(n m)`` memory, ``O(q m + q^2)``
per batch of ``q`` test points after caching; marginal variances of ``q`` points
cost ``O(q m r)``, no ``q x q`` matrix is formed.

The model joins its pieces, each its own module: the dictionary policy
(:mod:`~botorch_sketch.models.dictionary_policy`), the fit options and fit
(:mod:`~botorch_sketch.models.fit_options`, :mod:`~botorch_sketch.models.nystrom_fit`),
the warm-start state (:mod:`~botorch_sketch.models.sketch_state`) and the
posterior's operators (:mod:`~botorch_sketch.models.nystrom_posterior`).
"""

from __future__ import annotations

import logging
import math
import warnings
from copy import deepcopy
from dataclasses import replace
from typing import Any

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions.errors import UnsupportedError
from botorch.models.gpytorch import BatchedMultiOutputGPyTorchModel
from botorch.models.model import FantasizeMixin
from botorch.models.transforms.input import InputTransform
from botorch.models.transforms.outcome import OutcomeTransform, Standardize
from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
    get_gaussian_likelihood_with_lognormal_prior,
)
from botorch.posteriors.gpytorch import GPyTorchPosterior
from botorch.posteriors.transformed import TransformedPosterior
from botorch.utils.types import DEFAULT, _DefaultType
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood, Likelihood
from gpytorch.means import ConstantMean, Mean
from gpytorch.mlls import MarginalLogLikelihood
from gpytorch.models import GP
from gpytorch.module import Module
from gpytorch.settings import min_fixed_noise
from torch import Tensor

from botorch_sketch.models.dictionary_policy import (
    DEFAULT_EXACT_MAX_N,
    DEFAULT_MAX_DICTIONARY_SIZE,
    DictionaryPolicy,
    LeverageScorePolicy,
)
from botorch_sketch.models.dtc_posterior import DTCParts, DTCPosteriorMixin
from botorch_sketch.models.extra_state import with_extra_state
from botorch_sketch.models.fit_options import (
    DEFAULT_FIT_SUBSET_SIZE,
    OBJECTIVES,
    NystromFitOptions,
)
from botorch_sketch.models.nystrom_dictionary import (
    EXACT_FRACTION,
    ROW_UNIFORM_BLOCK,
    input_rows,
    locate_rows,
    validate_indices,
)
from botorch_sketch.models.nystrom_fit import (
    custom_loss,
    exact_loss,
    fit_nystrom_gp,
    fit_subset_size,
)
from botorch_sketch.models.nystrom_posterior import (
    LAZY_COVARIANCE_MIN_POINTS,
    append_rows,
    cast_posterior,
    sample_dtc_latent,
)
from botorch_sketch.models.options import ModelOptionsMixin
from botorch_sketch.models.sketch_dictionary import SketchDictionaryMixin
from botorch_sketch.models.sketch_state import SketchState, hyperparameter_state
from botorch_sketch.models.validation import (
    check_batch_shape,
    check_finite,
    validate_candidates,
    validate_new_observations,
    validate_training_data,
)

logger = logging.getLogger(__name__)

#: Dtype the model is built in. Afterwards it computes in the dtype of its training
#: data buffers, which ``.to(dtype)`` changes like every other tensor of the model.
_DEFAULT_DTYPE = torch.float64

#: The flat constructor options of each options object, with their defaults.
_POLICY_OPTIONS = {
    "q_bar": 2.0,
    "max_dictionary_size": DEFAULT_MAX_DICTIONARY_SIZE,
    "memory_budget_gb": None,
    "exact_max_n": DEFAULT_EXACT_MAX_N,
    "seed": None,
}
_FIT_OPTIONS = {
    "fit_subset_size": DEFAULT_FIT_SUBSET_SIZE,
    "objective": "exact",
    "dictionary_refits": 1,
    "refit_growth": 0.25,
    "refit_tolerance": 0.05,
    "refit_max_iterations": 50,
}

__all__ = [
    "DEFAULT_EXACT_MAX_N",
    "DEFAULT_FIT_SUBSET_SIZE",
    "DEFAULT_MAX_DICTIONARY_SIZE",
    "EXACT_FRACTION",
    "LAZY_COVARIANCE_MIN_POINTS",
    "OBJECTIVES",
    "ROW_UNIFORM_BLOCK",
    "DTCParts",
    "NystromGP",
]


def _options_object(
    given: Any, base: type, factory: type, flat: dict[str, Any], name: str
) -> Any:
    r"""``given`` (checked), or ``factory(**flat)`` built from the flat keywords."""
    if given is None:
        return factory(**flat)
    if not isinstance(given, base):
        raise TypeError(
            f"{name} must be a {base.__name__}, got {type(given).__name__}."
        )
    defaults = _POLICY_OPTIONS if base is DictionaryPolicy else _FIT_OPTIONS
    changed = sorted(k for k, v in flat.items() if v != defaults[k])
    if changed:
        raise ValueError(f"pass either {name} or {changed}, not both.")
    return given


def _options_objects(
    dictionary_policy: DictionaryPolicy | None,
    fit_options: NystromFitOptions | None,
    **flat: Any,
) -> tuple[DictionaryPolicy, NystromFitOptions]:
    r"""The policy and fit options: given, or built from the flat keywords."""
    policy = _options_object(
        dictionary_policy,
        DictionaryPolicy,
        LeverageScorePolicy,
        {k: flat[k] for k in _POLICY_OPTIONS},
        "dictionary_policy",
    )
    options = _options_object(
        fit_options,
        NystromFitOptions,
        NystromFitOptions,
        {k: flat[k] for k in _FIT_OPTIONS},
        "fit_options",
    )
    return policy, options


def _default_modules(
    model: NystromGP,
    d: int,
    Yvar: Tensor | None,
    likelihood: Likelihood | None,
    mean_module: Mean | None,
    covar_module: Module | None,
) -> None:
    r"""``SingleTaskGP``'s defaults for the modules the user did not give."""
    batch_shape = model._aug_batch_shape
    if likelihood is None:
        if Yvar is None:
            likelihood = get_gaussian_likelihood_with_lognormal_prior(
                batch_shape=batch_shape
            )
        else:
            likelihood = FixedNoiseGaussianLikelihood(
                noise=Yvar, batch_shape=batch_shape
            )
    model.likelihood = likelihood
    model.mean_module = mean_module or ConstantMean(batch_shape=batch_shape)
    if covar_module is None:
        covar_module = get_covar_module_with_dim_scaled_prior(
            ard_num_dims=d, batch_shape=batch_shape
        )
        model._subset_batch_dict = {
            "mean_module.raw_constant": -1,
            "covar_module.raw_lengthscale": -3,
        }
        if Yvar is None:
            model._subset_batch_dict["likelihood.noise_covar.raw_noise"] = -2
    model.covar_module = covar_module


def _changes_transform(model: NystromGP, state_dict: Any) -> bool:
    r"""Whether ``state_dict`` holds outcome-transform values unlike the model's."""
    if getattr(model, "outcome_transform", None) is None:
        return False
    current = model.state_dict()
    return any(
        key.startswith("outcome_transform.")
        and torch.is_tensor(value)
        and key in current
        and not torch.equal(value.to(current[key]), current[key])
        for key, value in state_dict.items()
    )


def _targets_and_noise(model: NystromGP) -> tuple[Tensor, Tensor | None]:
    r"""Transformed targets (and fixed noises) as ``batch_shape x n x m``."""

    def io_layout(T: Tensor) -> Tensor:
        return T.unsqueeze(-1) if model.num_outputs == 1 else T.transpose(-1, -2)

    fixed = isinstance(model.likelihood, FixedNoiseGaussianLikelihood)
    Yvar = io_layout(model.likelihood.noise) if fixed else None
    return io_layout(model.compute_targets), Yvar


def _set_targets_and_noise(model: NystromGP, Y: Tensor, Yvar: Tensor | None) -> None:
    r"""Store untransformed ``batch_shape x n x m`` targets (and fixed noises)
    transformed by the model's outcome transform, in evaluation mode."""

    def aug_layout(T: Tensor) -> Tensor:
        return T.squeeze(-1) if model.num_outputs == 1 else T.transpose(-1, -2)

    model.outcome_transform.eval()
    with torch.no_grad():
        Y, Yvar = model.outcome_transform(Y, Yvar)
    model.train_targets = aug_layout(Y)
    if Yvar is not None:
        model.likelihood.noise = aug_layout(Yvar)


def _option(holder: str, name: str) -> property:
    r"""A model attribute read from (and set through) one of its options objects."""

    def get(self: NystromGP) -> Any:
        return getattr(getattr(self, holder), name, None)

    get.__doc__ = f"``{holder}.{name}`` (``None`` where the object has none)."

    def set_(self: NystromGP, value: Any) -> None:
        setattr(self, holder, replace(getattr(self, holder), **{name: value}))

    return property(get, set_)


class NystromGP(
    ModelOptionsMixin,
    SketchDictionaryMixin,
    DTCPosteriorMixin,
    BatchedMultiOutputGPyTorchModel,
    GP,
    FantasizeMixin,
):
    r"""DTC/Nyström sparse GP whose dictionary is drawn by posterior-variance sampling.

    A drop-in replacement for ``SingleTaskGP`` at large ``n``: same constructor
    arguments, same default kernel, likelihood, priors and outcome transform, the
    same batched multi-output layout, and every BoTorch acquisition function works
    (the posterior is a ``GPyTorchPosterior`` over the joint DTC covariance,
    ``condition_on_observations`` and ``fantasize`` are exact DTC updates).

    Two objects make its choices: the ``dictionary_policy`` (which points form
    the dictionary: :class:`~botorch_sketch.models.dictionary_policy.
    LeverageScorePolicy` by default) and the ``fit_options``
    (:class:`~botorch_sketch.models.fit_options.NystromFitOptions`). Their fields
    are also accepted as flat keyword arguments, which build the default objects.

    Fitting: ``fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))``
    runs :meth:`custom_fit` (:func:`~botorch_sketch.models.nystrom_fit.
    fit_nystrom_gp`). In a loop, pass the previous model's :meth:`sketch_state`
    as ``warm_start``: hyperparameters and dictionary are then kept and updated.

    Attributes:
        sketch_ridge: The ridge whose leverage scores the dictionary samples (the
            noise variance, or larger where the budget bound); ``None`` for an
            exact (every point) or user-given dictionary.
        dictionary_capped: Whether the budget bound at the last draw.
        num_draws: Random draws made so far (numbers the seeds of the next).
        fit_record: ``(num_fit_points, fit_loss, drift_refits)`` of the last fit.

    Example:
        >>> model = NystromGP(train_X, train_Y, seed=0)
        >>> mll = ExactMarginalLogLikelihood(model.likelihood, model)
        >>> fit_gpytorch_mll(mll)
        >>> posterior = model.posterior(test_X)
        >>> next_model = NystromGP(X_all, Y_all, warm_start=model.sketch_state())
    """

    def __init__(
        self,
        train_X: Tensor,
        train_Y: Tensor,
        train_Yvar: Tensor | None = None,
        likelihood: Likelihood | None = None,
        covar_module: Module | None = None,
        mean_module: Mean | None = None,
        outcome_transform: OutcomeTransform | _DefaultType | None = DEFAULT,
        input_transform: InputTransform | None = None,
        q_bar: float = 2.0,
        dictionary: Tensor | str | None = None,
        dictionary_refits: int = 1,
        fit_subset_size: int | None = DEFAULT_FIT_SUBSET_SIZE,
        objective: str = "exact",
        max_dictionary_size: int | None = DEFAULT_MAX_DICTIONARY_SIZE,
        seed: int | None = None,
        memory_budget_gb: float | None = None,
        exact_max_n: int = DEFAULT_EXACT_MAX_N,
        warm_start: SketchState | dict[str, Any] | None = None,
        refit_growth: float = 0.25,
        refit_tolerance: float = 0.05,
        refit_max_iterations: int = 50,
        dictionary_policy: DictionaryPolicy | None = None,
        fit_options: NystromFitOptions | None = None,
    ) -> None:
        r"""Build the model.

        Args:
            train_X: ``batch_shape x n x d`` training inputs.
            train_Y: ``batch_shape x n x m`` training targets.
            train_Yvar: Optional ``batch_shape x n x m`` observed noise variances
                (``>= 0``); if given, a ``FixedNoiseGaussianLikelihood`` is used.
            likelihood: A Gaussian likelihood (default: as ``SingleTaskGP``).
            covar_module: Kernel (default: RBF with dimension-scaled priors).
            mean_module: Mean (default: ``ConstantMean``).
            outcome_transform: Defaults to ``Standardize(m)``; ``None`` disables.
            input_transform: An input transform without trainable parameters
                (e.g. ``Normalize``).
            q_bar, max_dictionary_size, seed, memory_budget_gb, exact_max_n: The
                fields of the default :class:`~botorch_sketch.models.
                dictionary_policy.LeverageScorePolicy` (not with
                ``dictionary_policy``).
            dictionary: ``None`` (drawn by the policy when first needed, i.e. at
                the fitted hyperparameters after ``fit_gpytorch_mll``), ``"all"``
                (every point: the exact GP) or a ``LongTensor`` of training
                indices.
            dictionary_refits, fit_subset_size, objective, refit_growth,
                refit_tolerance, refit_max_iterations: The fields of the default
                :class:`~botorch_sketch.models.fit_options.NystromFitOptions`
                (not with ``fit_options``).
            warm_start: A previous model's :meth:`sketch_state` (or its
                ``to_dict()``). A state with non-finite numbers is discarded
                with a warning.
            dictionary_policy: The dictionary policy.
            fit_options: The fit options.
        """
        validate_training_data(train_X, train_Y, train_Yvar)
        policy, options = _options_objects(
            dictionary_policy,
            fit_options,
            q_bar=q_bar,
            max_dictionary_size=max_dictionary_size,
            memory_budget_gb=memory_budget_gb,
            exact_max_n=exact_max_n,
            seed=seed,
            fit_subset_size=fit_subset_size,
            objective=objective,
            dictionary_refits=dictionary_refits,
            refit_growth=refit_growth,
            refit_tolerance=refit_tolerance,
            refit_max_iterations=refit_max_iterations,
        )
        if input_transform is not None and any(
            p.requires_grad for p in input_transform.parameters()
        ):
            raise UnsupportedError(
                "NystromGP stores transformed training inputs; input transforms with "
                "trainable parameters (e.g. Warp) are not supported."
            )
        if warm_start is not None:
            warm_start = SketchState.from_dict(warm_start)
            problems = warm_start.problems(train_X.shape[-2])
            if problems:
                warnings.warn(
                    f"NystromGP: warm_start discarded ({'; '.join(problems)}); "
                    "the model fits from scratch.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                warm_start = None
        dictionary_idx = None
        if isinstance(dictionary, str) and dictionary != "all":
            raise ValueError(
                f"dictionary must be 'all', None or indices, got {dictionary!r}."
            )
        if dictionary is not None and not isinstance(dictionary, str):
            dictionary_idx = validate_indices(dictionary, train_X.shape[-2])
        data_dtype = train_X.dtype
        train_X = train_X.to(_DEFAULT_DTYPE)
        train_Y = train_Y.to(_DEFAULT_DTYPE)
        if train_Yvar is not None:
            train_Yvar = train_Yvar.to(_DEFAULT_DTYPE)
        super().__init__()
        if outcome_transform == DEFAULT:
            outcome_transform = Standardize(
                m=train_Y.shape[-1], batch_shape=train_X.shape[:-2]
            )
        with torch.no_grad():
            transformed_X = self.transform_inputs(
                train_X, input_transform=input_transform
            )
        if outcome_transform is not None:
            outcome_transform.train()
            train_Y, train_Yvar = outcome_transform(
                Y=train_Y, Yvar=train_Yvar, X=transformed_X
            )
        self._validate_tensor_args(X=transformed_X, Y=train_Y, Yvar=train_Yvar)
        self._set_dimensions(train_X=train_X, train_Y=train_Y)
        X_b, Y_b, Yvar_b = self._transform_tensor_args(
            X=transformed_X, Y=train_Y, Yvar=train_Yvar
        )
        self.register_buffer("_train_X", X_b.detach().clone(), persistent=False)
        self.register_buffer("_train_Y", Y_b.detach().clone(), persistent=False)
        self._original_train_inputs = train_X.detach().clone()
        _default_modules(
            self, X_b.shape[-1], Yvar_b, likelihood, mean_module, covar_module
        )
        if outcome_transform is not None:
            self.outcome_transform = outcome_transform
        if input_transform is not None:
            self.input_transform = input_transform
        self.dictionary_policy: DictionaryPolicy = policy
        self.fit_options: NystromFitOptions = options
        self.warm_start = warm_start
        self.sketch_ridge: float | None = None
        self.dictionary_capped = False
        self.nystrom_residual: float | None = None
        self.fit_record: tuple[int, float, int] | None = None
        self.num_draws = 0 if warm_start is None else warm_start.num_draws
        self._cache: dict[str, Any] | None = None
        self._embedding_memo: tuple[Any, tuple[Tensor, Tensor, Tensor]] | None = None
        self.to(dtype=_DEFAULT_DTYPE, device=train_X.device)
        self._data_dtype = data_dtype
        self._dictionary_spec = "auto" if dictionary is None else "all"
        if dictionary_idx is not None:
            dictionary_idx = dictionary_idx.to(train_X.device)
            self._dictionary_spec = "given"
        self.register_buffer("_dictionary_indices", dictionary_idx, persistent=False)

    q_bar = _option("dictionary_policy", "q_bar")
    max_dictionary_size = _option("dictionary_policy", "max_dictionary_size")
    memory_budget_gb = _option("dictionary_policy", "memory_budget_gb")
    exact_max_n = _option("dictionary_policy", "exact_max_n")
    seed = _option("dictionary_policy", "seed")
    fit_subset_size = _option("fit_options", "fit_subset_size")
    objective = _option("fit_options", "objective")
    dictionary_refits = _option("fit_options", "dictionary_refits")
    refit_growth = _option("fit_options", "refit_growth")
    refit_tolerance = _option("fit_options", "refit_tolerance")
    refit_max_iterations = _option("fit_options", "refit_max_iterations")

    @property
    def _num_draws(self) -> int:
        return self.num_draws

    @_num_draws.setter
    def _num_draws(self, value: int) -> None:
        self.num_draws = value

    @property
    def train_inputs(self) -> tuple[Tensor]:
        r"""``(X,)``, ``X`` of shape ``batch_shape x (m) x n x d``, transformed, in
        the data's dtype (:attr:`data_dtype`)."""
        return (self._train_X.to(self.data_dtype),)

    @train_inputs.setter
    def train_inputs(self, value: tuple[Tensor]) -> None:
        self._train_X = value[0].to(self._train_X.dtype)
        self._cache = None
        self._embedding_memo = None

    @property
    def train_targets(self) -> Tensor:
        r"""``batch_shape x (m) x n`` transformed training targets (data dtype)."""
        return self._train_Y.to(self.data_dtype)

    @train_targets.setter
    def train_targets(self, value: Tensor) -> None:
        self._train_Y = value.to(self._train_Y.dtype)
        self._cache = None

    @property
    def compute_targets(self) -> Tensor:
        r"""``batch_shape x (m) x n`` transformed training targets, compute dtype."""
        return self._train_Y

    @property
    def data_dtype(self) -> torch.dtype:
        r"""The dtype of the data the model was built on (or last ``.to()``): that
        of its outputs. It computes in :attr:`compute_dtype` (float64 unless
        ``.to()`` changed it)."""
        return getattr(self, "_data_dtype", self._train_X.dtype)

    def _set_transformed_inputs(self) -> None:
        # Training inputs are stored transformed once, at construction.
        pass

    def _revert_to_original_inputs(self) -> None:
        pass

    @property
    def num_training_points(self) -> int:
        r"""Number of training points ``n``."""
        return self._train_X.shape[-2]

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the model computes in (that of its training data)."""
        return self._train_X.dtype

    _compute_dtype = compute_dtype

    @property
    def compute_inputs(self) -> Tensor:
        r"""``batch_shape x (m) x n x d`` transformed training inputs, compute dtype."""
        return self._train_X

    @property
    def input_dim(self) -> int:
        r"""Number of input features ``d`` of the (untransformed) training inputs."""
        return self._original_train_inputs.shape[-1]

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> NystromGP:
        # ``.to()`` / ``.double()`` / ``.cuda()`` convert every tensor of the model;
        # the posterior caches are rebuilt in the new dtype/device on next use.
        self._cache = None
        self._embedding_memo = None
        before = self._train_X.dtype if hasattr(self, "_train_X") else None
        out = super()._apply(fn, *args, **kwargs)
        if hasattr(self, "_original_train_inputs"):
            self._original_train_inputs = fn(self._original_train_inputs)
        if before is not None and self._train_X.dtype != before:
            self._data_dtype = self._train_X.dtype  # an explicit dtype change
        return out

    @property
    def dictionary_indices(self) -> Tensor:
        r"""Sorted training indices of the dictionary ``S`` (drawn when first used)."""
        if self._dictionary_indices is None:
            with torch.no_grad():
                self._dictionary_indices = self.initial_dictionary()
        return self._dictionary_indices

    @dictionary_indices.setter
    def dictionary_indices(self, value: Tensor) -> None:
        self._dictionary_indices = value
        self._cache = None

    @property
    def dictionary_size(self) -> int:
        r"""Number of training points in the dictionary (unique indices)."""
        return int(self.dictionary_indices.numel())

    @property
    def dictionary_report(self) -> dict[str, Any]:
        r"""What the dictionary is and why: its size, the budget and whether it
        bound, the ridge it sampled, the mean Nyström residual over the noise
        where the policy measured it (``0`` for every point), and the size of
        the hyperparameter fit's subsample."""
        size = self.dictionary_size  # drawn now if still pending
        return {
            "size": size,
            "n": self.num_training_points,
            "cap": self._dictionary_cap(),
            "capped": self.dictionary_capped,
            "ridge": self.sketch_ridge,
            "residual": self.nystrom_residual,
            "fit_subset_size": fit_subset_size(self),
        }

    @property
    def inducing_points(self) -> Tensor:
        r"""``batch_shape x (m) x |S| x d`` dictionary points (transformed space)."""
        return self._train_X[..., self.dictionary_indices, :]

    @property
    def uses_sketch(self) -> bool:
        r"""Whether the hyperparameter objective is a sketch objective (VFE/DTC)."""
        return self.fit_options.uses_sketch

    def train(self, mode: bool = True) -> NystromGP:
        r"""Set the training mode; caches are dropped when leaving or entering it."""
        if mode or self.training:
            self._cache = None
        return super().train(mode)

    def training_noise(self) -> Tensor:
        r"""``batch_shape x (m) x n`` noise variances of the training points."""
        return self._noise()

    def exact_loss(self) -> Tensor:
        r"""Negative exact log marginal likelihood per point, ``batch_shape x (m)``.

        :func:`~botorch_sketch.models.nystrom_fit.exact_loss`, ``O(n^3)``: meant
        for the fit subsample. Priors are not included.
        """
        return exact_loss(self)

    def compute_custom_loss(self, mll: MarginalLogLikelihood, **kwargs: Any) -> Tensor:
        r"""The hyperparameter objective, negated, plus log priors, over ``n``.

        :func:`~botorch_sketch.models.nystrom_fit.custom_loss`; picked up by
        BoTorch's loss closure, so ``fit_gpytorch_mll`` optimises it.

        Returns:
            A ``batch_shape x (m)`` tensor (a scalar for an unbatched one-output
            model).
        """
        return custom_loss(self)

    def custom_fit(
        self,
        mll: MarginalLogLikelihood,
        closure: Any = None,
        closure_kwargs: dict[str, Any] | None = None,
        optimizer_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> MarginalLogLikelihood:
        r"""Fit the hyperparameters, then draw the sketch (``fit_gpytorch_mll``).

        See :func:`~botorch_sketch.models.nystrom_fit.fit_nystrom_gp`: the
        hyperparameters on a subsample of at most ``fit_subset_size`` points (or
        warm-started and refitted on a schedule), then the dictionary on all
        points at the fitted hyperparameters, within the budget. Extra keyword
        arguments go to BoTorch's fit routine. On failure the model is left as it
        was before the call.
        """
        fit_kwargs = dict(
            closure=closure,
            closure_kwargs=closure_kwargs,
            optimizer_kwargs=optimizer_kwargs,
            **kwargs,
        )
        try:
            return fit_nystrom_gp(self, mll, fit_kwargs)
        finally:
            self._cache = None

    def sketch_state(self) -> SketchState:
        r"""What the next model of a loop needs to start from this one.

        Pass it (or its ``to_dict()``, e.g. through Ax's generator state) as
        ``warm_start`` of the next model.
        """
        num_fit_points, fit_loss, drift_refits = self.fit_record or (
            self.num_training_points,
            math.nan,
            0,
        )
        rows = self.dictionary_indices
        return SketchState(
            hyperparameters=hyperparameter_state(self),
            dictionary_rows=rows.detach().clone(),
            rows_checksum=float(self._train_X[..., rows, :].sum()),
            dictionary_inputs=self.inducing_points.detach().clone(),
            num_fit_points=num_fit_points,
            fit_loss=fit_loss,
            num_draws=self.num_draws,
            sketch_ridge=math.nan if self.sketch_ridge is None else self.sketch_ridge,
            drift_refits=drift_refits,
        )

    def data_subset(self, idx: Tensor) -> NystromGP:
        r"""A copy restricted to training points ``idx`` (dictionary drawn lazily).

        It keeps this model's budget (the policy's :meth:`~botorch_sketch.models.
        dictionary_policy.DictionaryPolicy.with_cap`), so a sketch objective on
        the subset sees a dictionary of the size the full model will use.
        """
        return self._data_subset(idx)

    def _data_subset(self, idx: Tensor) -> NystromGP:
        sub = deepcopy(self)
        sub.dictionary_policy = self.dictionary_policy.with_cap(self._dictionary_cap())
        sub.warm_start = None
        sub._train_X = self._train_X[..., idx, :]
        sub._train_Y = self._train_Y[..., idx]
        if isinstance(self.likelihood, FixedNoiseGaussianLikelihood):
            sub.likelihood.noise = self.likelihood.noise[..., idx]
        sub._dictionary_spec = "auto"
        sub._dictionary_indices = None
        sub._cache = None
        sub._embedding_memo = None
        return sub

    def condition_and_resample(
        self,
        X: Tensor,
        Y: Tensor,
        Yvar: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> NystromGP:
        r"""BKB's incremental update: add observations and redraw the dictionary.

        Returns a new model with ``(X, Y)`` appended, whose dictionary is redrawn
        from *all* points with the stale variances ``sigma~_t^2`` (old data, old
        dictionary), as BKB does (COLT 2019, Sec. 3.1), within the budget. No
        refit of the hyperparameters.

        Args:
            X: ``n' x d`` (or ``batch_shape x n' x d``) new inputs.
            Y: ``n' x m`` new targets in the original outcome space.
            Yvar: Observed noise variances for a fixed-noise model.
            generator: Optional generator (default: derived from ``seed``).
        """
        validate_training_data(X, Y, Yvar, name="new")
        ridge = self._resampling_ridge(self.sketch_ridge)
        old_rls = self.leverage_scores(ridge)
        new = self.condition_on_observations(
            X.to(self._compute_dtype),
            Y.to(self._compute_dtype),
            noise=None if Yvar is None else Yvar.to(self._compute_dtype),
        )
        n_old = old_rls.shape[-1]
        with torch.no_grad():
            # The new points are scored by the old model: no feedback yet.
            added = self._rls_at(new._train_X[..., n_old:, :], ridge)
        stale = torch.cat([old_rls.expand(*added.shape[:-1], n_old), added], dim=-1)
        new.dictionary_indices = new.draw_indices(
            stale, new.next_generator(generator), ridge
        )
        new.num_draws = max(new.num_draws, self.num_draws)
        return new

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: PosteriorTransform | None = None,
        **kwargs: Any,
    ) -> GPyTorchPosterior | TransformedPosterior:
        r"""DTC posterior over ``batch_shape x q x m`` outputs at ``X``.

        Args:
            X: ``batch_shape x q x d`` inputs (any float dtype; computed in float64).
            output_indices: Subset of outputs.
            observation_noise: Add the likelihood noise (``True``) or the given
                ``batch_shape x q x m`` noise tensor.
            posterior_transform: Optional posterior transform.

        Returns:
            A ``GPyTorchPosterior`` with the joint DTC covariance, computed in
            :attr:`compute_dtype` and returned in :attr:`data_dtype`.
        """
        check_finite(X, "X")
        if X.dim() < 2 or X.shape[-1] != self._original_train_inputs.shape[-1]:
            raise ValueError(
                f"X must be batch_shape x q x d with d = "
                f"{self._original_train_inputs.shape[-1]}, got {tuple(X.shape)}."
            )
        check_batch_shape(X, self._input_batch_shape)
        if output_indices is not None and len(output_indices) == 1 < self.num_outputs:
            # BoTorch's batched multi-output posterior cannot build a one-task
            # MultitaskMultivariateNormal; a single output is a single-output model.
            return self.subset_output(list(output_indices)).posterior(
                X,
                observation_noise=observation_noise,
                posterior_transform=posterior_transform,
            )
        if torch.is_tensor(observation_noise):
            observation_noise = observation_noise.to(self._compute_dtype)
        posterior = super().posterior(
            X.to(self._compute_dtype),
            output_indices=output_indices,
            observation_noise=observation_noise,
        )
        posterior = cast_posterior(posterior, self.data_dtype)
        if posterior_transform is not None:
            return posterior_transform(posterior)
        return posterior

    def condition_on_observations(
        self, X: Tensor, Y: Tensor, noise: Tensor | None = None, **kwargs: Any
    ) -> NystromGP:
        r"""A new model with ``(X, Y)`` appended (exact DTC update, same dictionary).

        As ``SingleTaskGP``'s, with the inputs checked here, so that bad data fail
        now with a message naming the problem rather than later in ``posterior``.

        Args:
            X: ``batch_shape x n' x d`` inputs (original space).
            Y: ``(sample_shape x) batch_shape x n' x m`` targets in the original
                outcome space (``fantasize`` adds leading sample dimensions).
            noise: Observed noise variances of the shape of ``Y`` (required for a
                fixed-noise model, ``>= 0``).

        Returns:
            The conditioned model (this one is not changed).
        """
        validate_new_observations(
            X, Y, noise, d=self._original_train_inputs.shape[-1], m=self.num_outputs
        )
        check_batch_shape(X, self._input_batch_shape)
        dtype = self._compute_dtype
        noise = None if noise is None else noise.to(dtype)
        return super().condition_on_observations(
            X.to(dtype), Y.to(dtype), noise=noise, **kwargs
        )

    def get_fantasy_model(
        self,
        inputs: Tensor,
        targets: Tensor,
        noise: Tensor | None = None,
        **kwargs: Any,
    ) -> NystromGP:
        r"""Exact DTC update: same hyperparameters and dictionary, data appended.

        Called by ``condition_on_observations`` with transformed ``inputs``
        (``batch_shape x (m) x n' x d``) and ``targets`` (``batch_shape x (m) x n'``).
        Leading fantasy dimensions broadcast against the model's batch shape.
        """
        old_X, old_Y = self._train_X, self._train_Y
        _ = self.dictionary_indices  # drawn now, on the old data, if still pending
        inputs = inputs.to(old_X)
        targets = targets.to(old_Y)
        batch = torch.broadcast_shapes(
            old_X.shape[:-2], inputs.shape[:-2], targets.shape[:-1]
        )
        new_X = append_rows(old_X, inputs, batch, dims=2)
        new_Y = append_rows(old_Y, targets, batch, dims=1)
        new = deepcopy(self)
        new._train_X, new._train_Y, new._cache = new_X, new_Y, None
        new._embedding_memo = None
        if isinstance(self.likelihood, FixedNoiseGaussianLikelihood):
            if noise is None:
                raise ValueError("A fixed-noise NystromGP needs `noise` for new data.")
            old_noise = self.likelihood.noise
            # The floor gpytorch's FixedNoiseGaussianLikelihood applies to the
            # training noise (e.g. observations reported without noise).
            noise = noise.to(old_noise).clamp_min(
                min_fixed_noise.value(old_noise.dtype)
            )
            new.likelihood.noise = append_rows(old_noise, noise, batch, dims=1)
        return new

    def sample_latent(
        self,
        X: Tensor,
        num_samples: int,
        generator: torch.Generator | None = None,
        chunk_size: int = 16384,
    ) -> Tensor:
        r"""Posterior samples of the latent function at many candidates, ``O(A m)``.

        Thompson sampling over a large candidate set must not build the ``A x A``
        joint covariance. We sample

            f(x) = mean(x) + (L^{-1} z(x))^T eps + sqrt(k(x,x) - ||z(x)||^2) xi(x)

        (:func:`~botorch_sketch.models.nystrom_posterior.sample_dtc_latent`): exact
        on every marginal and on the low-rank (learned) part of the correlation,
        the Nyström residual's correlations dropped, so not the exact DTC joint.
        Candidates are processed in chunks, so memory is ``O(chunk_size m)``.

        Args:
            X: ``A x d`` candidates (untransformed; not for batched models).
            num_samples: Number of joint samples.
            generator: Optional ``torch.Generator``.
            chunk_size: Candidates per chunk.

        Returns:
            A ``num_samples x A x m`` tensor in the original outcome space.
        """
        if len(self._input_batch_shape) > 0:
            raise UnsupportedError("sample_latent supports unbatched models only.")
        validate_candidates(X, self.input_dim, num_samples)
        self.eval()
        cache = self._posterior_cache()
        with torch.no_grad():
            samples = sample_dtc_latent(
                self.transform_inputs(X.to(self._compute_dtype)),
                cache["factor"],
                lambda Xc: self._embed(Xc, cache["S"], cache["W"]),
                self.mean_module,
                self.covar_module,
                self.num_outputs,
                num_samples,
                generator=generator,
                chunk_size=chunk_size,
            )
            if hasattr(self, "outcome_transform"):
                samples, _ = self.outcome_transform.untransform(samples)
        return samples.to(self.data_dtype)

    def load_state_dict(
        self,
        state_dict: Any,
        strict: bool = True,
        keep_transforms: bool = True,
        assign: bool = False,
    ) -> Any:
        r"""Load hyperparameters and the dictionary; the training data stay.

        As ``SingleTaskGP``'s: with ``keep_transforms=True`` and an outcome
        transform whose statistics the state changes (a model built on new data
        loading an old model's state), the stored targets (and fixed noises) are
        untransformed with the current statistics and re-transformed with the
        loaded ones, so predictions stay in the data's units. The dictionary
        travels as extra state (:meth:`get_extra_state`); a state without it
        keeps the current dictionary.
        """
        self._cache = None
        state_dict = with_extra_state(self, state_dict)
        if not (keep_transforms and _changes_transform(self, state_dict)):
            return torch.nn.Module.load_state_dict(
                self, state_dict, strict=strict, assign=assign
            )
        with torch.no_grad():
            Y, Yvar = self.outcome_transform.untransform(*_targets_and_noise(self))
        out = torch.nn.Module.load_state_dict(
            self, state_dict, strict=strict, assign=assign
        )
        _set_targets_and_noise(self, Y, Yvar)
        return out

    def get_extra_state(self) -> Tensor:
        r"""The dictionary, as its transformed training inputs.

        ``batch_shape x (m) x |S| x d``, stored by ``state_dict()`` under
        ``"_extra_state"``. A tensor (not indices into data the state dict does
        not hold), so that BoTorch's fit checkpoints handle it like any buffer.
        """
        if self._dictionary_indices is None:  # not drawn yet: nothing to carry
            return self._train_X[..., :0, :].detach().clone()
        return self.inducing_points.detach().clone()

    def set_extra_state(self, state: Tensor) -> None:
        r"""Restore the dictionary saved by :meth:`get_extra_state`.

        The saved inputs are located among this model's training inputs (exact
        row match), so the state also loads into a model whose data were
        reordered, extended or subsampled (Ax's cross-validation does this).
        Dictionary points that are not training inputs of this model are dropped
        (with a logged warning); if none is, the current dictionary is kept.
        """
        if not torch.is_tensor(state) or state.shape[-1] != self._train_X.shape[-1]:
            raise ValueError(
                "NystromGP's extra state must be a tensor of dictionary inputs with "
                f"d = {self._train_X.shape[-1]} columns."
            )
        state = state.to(self._train_X)
        if state.shape[-2] == 0:
            self.dictionary_indices = None
            return
        if self._dictionary_indices is not None and torch.equal(
            self.inducing_points, state
        ):
            return
        found = locate_rows(input_rows(self._train_X), input_rows(state))
        num_saved = state.shape[-2]
        if found.numel() < num_saved:
            logger.warning(
                "Loaded dictionary: %d of %d points are not training inputs of this "
                "model and were dropped.",
                num_saved - found.numel(),
                num_saved,
            )
        if found.numel() > 0:
            self.dictionary_indices = torch.unique(found)
